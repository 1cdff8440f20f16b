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

pub mod archive;

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
    #[error(
        "checkpoint {to}: entry {seq} is out of sequence for the entries after checkpoint {from} up to {to}"
    )]
    CheckpointOrder { seq: u64, from: u64, to: u64 },
    #[error(
        "checkpoint {seq} no longer matches the ledger: its digest is {recorded} but the entries up to it fold to {found} (entries up to {seq} were changed, removed or added)"
    )]
    CheckpointMismatch {
        seq: u64,
        recorded: String,
        found: String,
    },
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
            ChainError::CheckpointOrder { .. } => "E_LEDGER_CHECKPOINT_ORDER",
            ChainError::CheckpointMismatch { .. } => "E_LEDGER_CHECKPOINT",
            ChainError::DigestMismatch { .. } => "E_LEDGER_DIGEST",
        }
    }
}

/// One subject's chain checked entry by entry as the entries arrive, from its start or from
/// a known head part way along it: only the head is held, whatever the chain's length.
#[derive(Debug, Clone)]
pub struct ChainWalk {
    subject_type: String,
    subject_id: String,
    head: ChainHead,
}

impl ChainWalk {
    /// A walk from the chain's first entry.
    pub fn from_start(subject_type: &str, subject_id: &str) -> Self {
        Self::after(subject_type, subject_id, ChainHead::genesis())
    }

    /// A walk whose next entry must follow `head` (an entry already trusted, e.g. one a
    /// checkpoint covers).
    pub fn after(subject_type: &str, subject_id: &str, head: ChainHead) -> Self {
        Self {
            subject_type: subject_type.to_owned(),
            subject_id: subject_id.to_owned(),
            head,
        }
    }

    /// `type:id`.
    pub fn subject(&self) -> String {
        format!("{}:{}", self.subject_type, self.subject_id)
    }

    /// Whether `entry` belongs to this walk's subject.
    pub fn is_of(&self, subject_type: &str, subject_id: &str) -> bool {
        self.subject_type == subject_type && self.subject_id == subject_id
    }

    /// The head after the entries pushed so far.
    pub fn head(&self) -> ChainHead {
        self.head
    }

    /// Checks that `e` is the next entry of the chain and moves the head to it.
    pub fn push(&mut self, e: &SealedEntry) -> Result<(), ChainError> {
        if !self.is_of(&e.entry.subject_type, &e.entry.subject_id) {
            return Err(ChainError::ForeignEntry {
                subject: self.subject(),
                seq: e.subject_seq,
            });
        }
        if e.subject_seq != self.head.len + 1 {
            return Err(ChainError::Sequence {
                subject: self.subject(),
                expected_prev: self.head.len,
                found: e.subject_seq,
            });
        }
        if e.prev_hash != self.head.hash {
            return Err(ChainError::Link {
                subject: self.subject(),
                seq: e.subject_seq,
            });
        }
        if entry_hash(&e.prev_hash, e.subject_seq, &e.entry) != e.hash {
            return Err(ChainError::Tampered {
                subject: self.subject(),
                seq: e.subject_seq,
            });
        }
        self.head = ChainHead {
            len: e.subject_seq,
            hash: e.hash,
        };
        Ok(())
    }

    /// Checks that the chain ends where the subject's row says it does.
    pub fn finish_against(&self, recorded: ChainHead) -> Result<(), ChainError> {
        if self.head != recorded {
            return Err(ChainError::HeadMismatch {
                subject: self.subject(),
                expected: recorded.len,
                found: self.head.len,
            });
        }
        Ok(())
    }
}

/// Verifies one subject's chain, given its entries in `subject_seq` order, and returns its head.
pub fn verify_chain<'a>(
    subject_type: &str,
    subject_id: &str,
    entries: impl IntoIterator<Item = &'a SealedEntry>,
) -> Result<ChainHead, ChainError> {
    let mut walk = ChainWalk::from_start(subject_type, subject_id);
    for e in entries {
        walk.push(e)?;
    }
    Ok(walk.head())
}

/// Verifies a chain and that it ends where the subject says it does.
pub fn verify_against_head<'a>(
    subject_type: &str,
    subject_id: &str,
    entries: impl IntoIterator<Item = &'a SealedEntry>,
    recorded: ChainHead,
) -> Result<(), ChainError> {
    let mut walk = ChainWalk::from_start(subject_type, subject_id);
    for e in entries {
        walk.push(e)?;
    }
    walk.finish_against(recorded)
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
    let mut digest = HeadsDigest::new(at, heads.len() as u64);
    for (subject_type, subject_id, head) in heads {
        digest.push(subject_type, subject_id, head);
    }
    digest.finish()
}

/// [`heads_digest`] taken as the heads arrive, for a caller that streams them already in
/// byte order of (type, id) and knows their number beforehand: memory stays constant.
pub struct HeadsDigest {
    hasher: blake3::Hasher,
}

impl HeadsDigest {
    pub fn new(at: u64, subjects: u64) -> Self {
        let mut hasher = blake3::Hasher::new();
        put_bytes(&mut hasher, HEADS_TAG);
        hasher.update(&at.to_be_bytes());
        hasher.update(&subjects.to_be_bytes());
        Self { hasher }
    }

    pub fn push(&mut self, subject_type: &str, subject_id: &str, head: ChainHead) {
        put_bytes(&mut self.hasher, subject_type.as_bytes());
        put_bytes(&mut self.hasher, subject_id.as_bytes());
        self.hasher.update(&head.len.to_be_bytes());
        self.hasher.update(&head.hash);
    }

    pub fn finish(&self) -> Hash {
        *self.hasher.finalize().as_bytes()
    }
}

/// Domain separation for checkpoint digests.
const CHECKPOINT_TAG: &[u8] = b"muster-ledger-checkpoint-v1";

/// A point of the whole ledger: its sequence `seq` and a digest that commits to every entry
/// at or below it. Checkpoints form a chain of their own: each digest folds the previous
/// checkpoint's digest with the entries after it (see [`CheckpointFold`]), so one checkpoint
/// commits to the whole ledger up to it, and the entries after it verify from it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: u64,
    pub digest: Hash,
}

impl Checkpoint {
    /// Where the first checkpoint folds from: before entry 1, digest all zeros.
    pub const ORIGIN: Checkpoint = Checkpoint {
        seq: 0,
        digest: [0u8; 32],
    };
}

/// The next checkpoint's digest, folded from the previous checkpoint and every ledger entry
/// after it up to the new sequence, in sequence order:
/// `BLAKE3(tag, prev.digest, prev.seq, seq, then for each entry its seq and its hash)`.
/// An entry's own hash already commits to its subject, position in its chain and contents;
/// its ledger sequence pins its place in the whole ledger.
pub struct CheckpointFold {
    hasher: blake3::Hasher,
    prev: Checkpoint,
    seq: u64,
    last: u64,
    entries: u64,
}

impl CheckpointFold {
    pub fn new(prev: Checkpoint, seq: u64) -> Self {
        let mut hasher = blake3::Hasher::new();
        put_bytes(&mut hasher, CHECKPOINT_TAG);
        hasher.update(&prev.digest);
        hasher.update(&prev.seq.to_be_bytes());
        hasher.update(&seq.to_be_bytes());
        Self {
            hasher,
            prev,
            seq,
            last: prev.seq,
            entries: 0,
        }
    }

    /// Folds in the entry at ledger sequence `seq` with hash `hash`; entries come in
    /// ascending sequence, each after the previous checkpoint and at most the new one.
    pub fn push(&mut self, seq: u64, hash: &Hash) -> Result<(), ChainError> {
        if seq <= self.last || seq > self.seq {
            return Err(ChainError::CheckpointOrder {
                seq,
                from: self.prev.seq,
                to: self.seq,
            });
        }
        self.hasher.update(&seq.to_be_bytes());
        self.hasher.update(hash);
        self.last = seq;
        self.entries += 1;
        Ok(())
    }

    /// Entries folded so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    pub fn finish(&self) -> Checkpoint {
        Checkpoint {
            seq: self.seq,
            digest: *self.hasher.finalize().as_bytes(),
        }
    }
}

#[cfg(test)]
mod tests;
