//! The ledger: append-only entries, chained per subject with BLAKE3.
//!
//! Every state change of a subject (an item, an edit proposal) is one [`Entry`]. Entries of one
//! subject form a hash chain: each [`SealedEntry`] carries the hash of its predecessor and its own
//! hash over a fixed, length-prefixed encoding of every field, so no field can be altered, spliced
//! into another or removed without breaking the chain.
//!
//! Chains are per subject, not global: a global chain would serialise every transaction on one
//! row, while a subject is already locked by the transition that appends to its chain.
//!
//! Invariant: this crate performs no I/O and reads no clock; times are passed in.

use time::OffsetDateTime;

/// Domain separation for the hash: a future encoding gets a new tag.
const ENCODING_TAG: &[u8] = b"muster-ledger-v1";

/// A 32-byte BLAKE3 digest.
pub type Hash = [u8; 32];

/// The hash that precedes the first entry of every chain.
pub const GENESIS: Hash = [0u8; 32];

/// One state change (or recorded fact) about one subject, before it is sealed into a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `item` or `edit`.
    pub subject_type: String,
    pub subject_id: String,
    /// What happened: `enqueued`, `leased`, `completed`, `late_result`, …
    pub event: String,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    /// The principal that caused it, e.g. `worker:trawl`.
    pub actor: String,
    pub fence: Option<u64>,
    /// When it happened; sealing truncates it to microseconds (PostgreSQL's precision).
    pub at: OffsetDateTime,
    /// Event details as JSON text, hashed byte for byte as stored.
    pub data: String,
}

/// An entry bound into its subject's chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedEntry {
    pub entry: Entry,
    /// 1 for the subject's first entry, then consecutive.
    pub subject_seq: u64,
    pub prev_hash: Hash,
    pub hash: Hash,
}

/// The end of a subject's chain: how many entries it holds and the last hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainHead {
    pub len: u64,
    pub hash: Hash,
}

impl Default for ChainHead {
    fn default() -> Self {
        Self::genesis()
    }
}

impl ChainHead {
    pub const fn genesis() -> Self {
        Self {
            len: 0,
            hash: GENESIS,
        }
    }

    /// Appends `entry` to this chain and returns it sealed; the head moves to the new entry.
    pub fn seal(&mut self, mut entry: Entry) -> SealedEntry {
        entry.at = truncate_to_micros(entry.at);
        let subject_seq = self.len + 1;
        let hash = entry_hash(&self.hash, subject_seq, &entry);
        let sealed = SealedEntry {
            entry,
            subject_seq,
            prev_hash: self.hash,
            hash,
        };
        self.len = subject_seq;
        self.hash = hash;
        sealed
    }
}

/// Drops sub-microsecond precision, which PostgreSQL's `timestamptz` cannot keep.
pub fn truncate_to_micros(at: OffsetDateTime) -> OffsetDateTime {
    let micros = at.nanosecond() / 1_000;
    at.replace_nanosecond(micros * 1_000)
        .expect("a whole number of microseconds is a valid nanosecond value")
}

fn unix_micros(at: OffsetDateTime) -> i128 {
    at.unix_timestamp_nanos() / 1_000
}

/// The hash of an entry at position `subject_seq` following `prev_hash`.
///
/// Encoding: tag, prev hash, then every field as a length-prefixed (u64 big-endian) byte string;
/// optional fields are prefixed by a presence byte. Numbers are big-endian.
pub fn entry_hash(prev_hash: &Hash, subject_seq: u64, entry: &Entry) -> Hash {
    let mut h = blake3::Hasher::new();
    put_bytes(&mut h, ENCODING_TAG);
    h.update(prev_hash);
    h.update(&subject_seq.to_be_bytes());
    put_bytes(&mut h, entry.subject_type.as_bytes());
    put_bytes(&mut h, entry.subject_id.as_bytes());
    put_bytes(&mut h, entry.event.as_bytes());
    put_opt(&mut h, entry.from_state.as_deref().map(str::as_bytes));
    put_opt(&mut h, entry.to_state.as_deref().map(str::as_bytes));
    put_bytes(&mut h, entry.actor.as_bytes());
    match entry.fence {
        Some(f) => {
            h.update(&[1]);
            h.update(&f.to_be_bytes());
        }
        None => {
            h.update(&[0]);
        }
    }
    h.update(&unix_micros(entry.at).to_be_bytes());
    put_bytes(&mut h, entry.data.as_bytes());
    *h.finalize().as_bytes()
}

fn put_bytes(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

fn put_opt(h: &mut blake3::Hasher, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            h.update(&[1]);
            put_bytes(h, b);
        }
        None => {
            h.update(&[0]);
        }
    }
}

/// Why a chain failed verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error(
        "subject {subject}: entry {found} follows entry {expected_prev} (a gap or a reordering)"
    )]
    Sequence {
        subject: String,
        expected_prev: u64,
        found: u64,
    },
    #[error("subject {subject}: entry {seq} does not link to the hash of its predecessor")]
    Link { subject: String, seq: u64 },
    #[error("subject {subject}: entry {seq} was altered (its hash does not match its contents)")]
    Tampered { subject: String, seq: u64 },
    #[error("subject {subject}: entry {seq} belongs to another subject")]
    ForeignEntry { subject: String, seq: u64 },
    #[error(
        "subject {subject}: the chain ends at {found} entries but the subject records {expected}"
    )]
    HeadMismatch {
        subject: String,
        expected: u64,
        found: u64,
    },
    #[error("subject {subject}: the stored text is not the one its `submitted` entry records")]
    BodyChanged { subject: String },
    #[error("subject {subject}: no ledger chain at all")]
    NoChain { subject: String },
    #[error(
        "the ledger up to entry {seq} no longer hashes to {expected} (it hashes to {found}): entries up to {seq} were changed, removed or added"
    )]
    DigestMismatch {
        seq: u64,
        expected: String,
        found: String,
    },
}

impl ChainError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ChainError::Sequence { .. } => "E_LEDGER_SEQUENCE",
            ChainError::Link { .. } => "E_LEDGER_LINK",
            ChainError::Tampered { .. } => "E_LEDGER_TAMPERED",
            ChainError::ForeignEntry { .. } => "E_LEDGER_FOREIGN",
            ChainError::HeadMismatch { .. } => "E_LEDGER_HEAD",
            ChainError::BodyChanged { .. } => "E_LEDGER_BODY",
            ChainError::NoChain { .. } => "E_LEDGER_NO_CHAIN",
            ChainError::DigestMismatch { .. } => "E_LEDGER_DIGEST",
        }
    }
}

/// Verifies one subject's chain, given its entries in `subject_seq` order, and returns its head.
pub fn verify_chain<'a>(
    subject_type: &str,
    subject_id: &str,
    entries: impl IntoIterator<Item = &'a SealedEntry>,
) -> Result<ChainHead, ChainError> {
    let subject = format!("{subject_type}:{subject_id}");
    let mut head = ChainHead::genesis();
    for e in entries {
        if e.entry.subject_type != subject_type || e.entry.subject_id != subject_id {
            return Err(ChainError::ForeignEntry {
                subject,
                seq: e.subject_seq,
            });
        }
        if e.subject_seq != head.len + 1 {
            return Err(ChainError::Sequence {
                subject,
                expected_prev: head.len,
                found: e.subject_seq,
            });
        }
        if e.prev_hash != head.hash {
            return Err(ChainError::Link {
                subject,
                seq: e.subject_seq,
            });
        }
        if entry_hash(&e.prev_hash, e.subject_seq, &e.entry) != e.hash {
            return Err(ChainError::Tampered {
                subject,
                seq: e.subject_seq,
            });
        }
        head = ChainHead {
            len: e.subject_seq,
            hash: e.hash,
        };
    }
    Ok(head)
}

/// Verifies a chain and that it ends where the subject says it does.
pub fn verify_against_head<'a>(
    subject_type: &str,
    subject_id: &str,
    entries: impl IntoIterator<Item = &'a SealedEntry>,
    recorded: ChainHead,
) -> Result<(), ChainError> {
    let found = verify_chain(subject_type, subject_id, entries)?;
    if found != recorded {
        return Err(ChainError::HeadMismatch {
            subject: format!("{subject_type}:{subject_id}"),
            expected: recorded.len,
            found: found.len,
        });
    }
    Ok(())
}

/// Domain separation for [`heads_digest`].
const HEADS_TAG: &[u8] = b"muster-ledger-heads-v1";

/// One digest over the heads of every chain as of ledger sequence `at` (the newest entry of
/// each subject among the entries up to `at`): an operator records `at:digest` elsewhere, and
/// a later rewrite of any entry up to `at` (a changed, removed or added entry, or a removed
/// subject) gives another digest. Subjects are taken in byte order of (type, id), whatever
/// order they are given in.
pub fn heads_digest<'a>(
    at: u64,
    heads: impl IntoIterator<Item = (&'a str, &'a str, ChainHead)>,
) -> Hash {
    let mut heads: Vec<(&str, &str, ChainHead)> = heads.into_iter().collect();
    heads.sort_unstable_by(|a, b| {
        (a.0.as_bytes(), a.1.as_bytes()).cmp(&(b.0.as_bytes(), b.1.as_bytes()))
    });
    let mut h = blake3::Hasher::new();
    put_bytes(&mut h, HEADS_TAG);
    h.update(&at.to_be_bytes());
    h.update(&(heads.len() as u64).to_be_bytes());
    for (subject_type, subject_id, head) in heads {
        put_bytes(&mut h, subject_type.as_bytes());
        put_bytes(&mut h, subject_id.as_bytes());
        h.update(&head.len.to_be_bytes());
        h.update(&head.hash);
    }
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests;
