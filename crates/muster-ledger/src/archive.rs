//! The ledger archive file: a segment of the ledger, from one checkpoint to a later one, that
//! verifies offline from the file alone against the checkpoint digests an auditor recorded.
//!
//! Format `muster-ledger-archive`, version 1: UTF-8 JSON lines.
//! - First line, the header: `{"format": "muster-ledger-archive", "version": 1,
//!   "entry_hash": "muster-ledger-v1", "checkpoint_digest": "muster-ledger-checkpoint-v1",
//!   "from": {"seq": A, "digest": HEX}, "until": {"seq": B, "digest": HEX},
//!   "checkpoints": [{"seq": …, "digest": HEX}, …]}` — `checkpoints` are every checkpoint after
//!   `from` up to `until`, in order, the last being `until`; `from` is `{"seq": 0, "digest":
//!   64 zeros}` for the ledger's start.
//! - Then one line per entry with `seq` after A up to B, in `seq` order: `{"seq", "subject_type",
//!   "subject_id", "subject_seq", "event", "from_state", "to_state", "actor", "fence", "at",
//!   "data", "prev_hash", "hash"}`; `from_state`, `to_state` and `fence` may be null, `at` is
//!   RFC 3339 in UTC with microseconds, `data` the entry's JSON text as a string (hashed byte
//!   for byte), hashes lower-case hex.
//! - Last line: `{"end": true, "entries": N}`.
//!
//! An entry's `hash` is `muster_ledger::entry_hash` over its fields and `prev_hash`; each
//! checkpoint's digest is the fold of the previous one with the entries after it
//! ([`crate::CheckpointFold`]). A file verifies when every entry's hash matches its fields and
//! the entries fold, checkpoint by checkpoint, to the digests of its header, ending at
//! `until`'s: the file then holds exactly the entries those checkpoints commit to.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::{ChainError, Checkpoint, CheckpointFold, Entry, Hash, SealedEntry, entry_hash};

pub const FORMAT: &str = "muster-ledger-archive";
pub const VERSION: u64 = 1;

/// Why an archive file does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("not a ledger archive: {0}")]
    Foreign(String),
    #[error("the archive is truncated: {0}")]
    Truncated(String),
    #[error("line {line}: {reason}")]
    Malformed { line: u64, reason: String },
    #[error("line {line}: {source}")]
    Chain { line: u64, source: ChainError },
}

impl ArchiveError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ArchiveError::Foreign(_) => "E_ARCHIVE_FOREIGN",
            ArchiveError::Truncated(_) => "E_ARCHIVE_TRUNCATED",
            ArchiveError::Malformed { .. } => "E_ARCHIVE_MALFORMED",
            ArchiveError::Chain { source, .. } => source.code(),
        }
    }
}

/// What an archive holds: the checkpoints it starts after and ends at, and every checkpoint in
/// between (the last one is `until`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveHeader {
    pub from: Checkpoint,
    pub checkpoints: Vec<Checkpoint>,
}

impl ArchiveHeader {
    pub fn until(&self) -> Checkpoint {
        self.checkpoints.last().copied().unwrap_or(self.from)
    }
}

fn hex(h: &Hash) -> String {
    blake3::Hash::from(*h).to_hex().to_string()
}

fn checkpoint_json(c: &Checkpoint) -> Value {
    json!({"seq": c.seq, "digest": hex(&c.digest)})
}

/// The header line (without its newline).
pub fn header_line(h: &ArchiveHeader) -> String {
    json!({
        "format": FORMAT,
        "version": VERSION,
        "entry_hash": "muster-ledger-v1",
        "checkpoint_digest": "muster-ledger-checkpoint-v1",
        "from": checkpoint_json(&h.from),
        "until": checkpoint_json(&h.until()),
        "checkpoints": h.checkpoints.iter().map(checkpoint_json).collect::<Vec<_>>(),
    })
    .to_string()
}

/// An entry's line (without its newline).
pub fn entry_line(seq: u64, e: &SealedEntry) -> String {
    let at = e
        .entry
        .at
        .to_offset(time::UtcOffset::UTC)
        .format(&Rfc3339)
        .unwrap_or_default();
    json!({
        "seq": seq,
        "subject_type": e.entry.subject_type,
        "subject_id": e.entry.subject_id,
        "subject_seq": e.subject_seq,
        "event": e.entry.event,
        "from_state": e.entry.from_state,
        "to_state": e.entry.to_state,
        "actor": e.entry.actor,
        "fence": e.entry.fence,
        "at": at,
        "data": e.entry.data,
        "prev_hash": hex(&e.prev_hash),
        "hash": hex(&e.hash),
    })
    .to_string()
}

/// The last line (without its newline).
pub fn end_line(entries: u64) -> String {
    json!({"end": true, "entries": entries}).to_string()
}

/// Folds entries in sequence order through a list of checkpoints, checking each as it is
/// passed: used to write an archive (from the ledger) and to verify one (from its file).
pub struct SegmentFold {
    header: ArchiveHeader,
    /// Index in `header.checkpoints` of the checkpoint being folded towards.
    next: usize,
    fold: CheckpointFold,
    entries: u64,
}

impl SegmentFold {
    pub fn new(header: ArchiveHeader) -> Self {
        let first = header
            .checkpoints
            .first()
            .map_or(header.from.seq, |c| c.seq);
        let fold = CheckpointFold::new(header.from, first);
        Self {
            header,
            next: 0,
            fold,
            entries: 0,
        }
    }

    /// Closes every checkpoint below `seq` (all of them with `None`), comparing each digest.
    fn pass(&mut self, seq: Option<u64>) -> Result<(), ChainError> {
        while let Some(target) = self.header.checkpoints.get(self.next).copied() {
            if seq.is_some_and(|s| s <= target.seq) {
                return Ok(());
            }
            let found = self.fold.finish();
            if found != target {
                return Err(ChainError::CheckpointMismatch {
                    seq: target.seq,
                    recorded: hex(&target.digest),
                    found: hex(&found.digest),
                });
            }
            self.next += 1;
            let to = self
                .header
                .checkpoints
                .get(self.next)
                .map_or(target.seq, |c| c.seq);
            self.fold = CheckpointFold::new(target, to);
        }
        match seq {
            // An entry after the last checkpoint.
            Some(s) => Err(ChainError::CheckpointOrder {
                seq: s,
                from: self.header.from.seq,
                to: self.header.until().seq,
            }),
            None => Ok(()),
        }
    }

    /// Folds in the entry at `seq`, after checking that its hash is its fields'.
    pub fn push(&mut self, seq: u64, e: &SealedEntry) -> Result<(), ChainError> {
        if entry_hash(&e.prev_hash, e.subject_seq, &e.entry) != e.hash {
            return Err(ChainError::Tampered {
                subject: format!("{}:{}", e.entry.subject_type, e.entry.subject_id),
                seq: e.subject_seq,
            });
        }
        self.pass(Some(seq))?;
        self.fold.push(seq, &e.hash)?;
        self.entries += 1;
        Ok(())
    }

    /// Checks the checkpoints after the last entry; answers the entries folded.
    pub fn finish(mut self) -> Result<u64, ChainError> {
        self.pass(None)?;
        Ok(self.entries)
    }
}

/// Reads an archive line by line, verifying as it goes; memory stays constant.
pub struct ArchiveReader {
    line: u64,
    state: State,
}

enum State {
    Header,
    Entries(Box<SegmentFold>, ArchiveHeader),
    Ended(u64, ArchiveHeader),
}

impl Default for ArchiveReader {
    fn default() -> Self {
        Self {
            line: 0,
            state: State::Header,
        }
    }
}

fn field<'a>(v: &'a Value, name: &str) -> Result<&'a Value, String> {
    v.get(name).ok_or_else(|| format!("no {name:?}"))
}

fn text(v: &Value, name: &str) -> Result<String, String> {
    field(v, name)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{name:?} is not a string"))
}

fn opt_text(v: &Value, name: &str) -> Result<Option<String>, String> {
    match field(v, name)? {
        Value::Null => Ok(None),
        _ => text(v, name).map(Some),
    }
}

fn number(v: &Value, name: &str) -> Result<u64, String> {
    field(v, name)?
        .as_u64()
        .ok_or_else(|| format!("{name:?} is not a whole number"))
}

fn hash(v: &Value, name: &str) -> Result<Hash, String> {
    let t = text(v, name)?;
    blake3::Hash::from_hex(&t)
        .map(|h| *h.as_bytes())
        .map_err(|_| format!("{name:?} is not 64 hex digits"))
}

fn checkpoint(v: &Value) -> Result<Checkpoint, String> {
    Ok(Checkpoint {
        seq: number(v, "seq")?,
        digest: hash(v, "digest")?,
    })
}

fn header(v: &Value) -> Result<ArchiveHeader, ArchiveError> {
    if v.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(ArchiveError::Foreign(format!(
            "the first line does not name the format {FORMAT:?}"
        )));
    }
    if v.get("version").and_then(Value::as_u64) != Some(VERSION) {
        return Err(ArchiveError::Foreign(format!(
            "format version {} (this binary reads version {VERSION})",
            v.get("version").unwrap_or(&Value::Null)
        )));
    }
    let bad = |reason: String| ArchiveError::Malformed { line: 1, reason };
    let from = checkpoint(field(v, "from").map_err(bad)?).map_err(bad)?;
    let until = checkpoint(field(v, "until").map_err(bad)?).map_err(bad)?;
    let checkpoints = field(v, "checkpoints")
        .map_err(bad)?
        .as_array()
        .ok_or_else(|| bad("\"checkpoints\" is not a list".into()))?
        .iter()
        .map(checkpoint)
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    let header = ArchiveHeader { from, checkpoints };
    let ascending = header.checkpoints.first().is_some_and(|c| c.seq > from.seq)
        && header.checkpoints.windows(2).all(|w| w[0].seq < w[1].seq);
    if !ascending || header.until() != until {
        return Err(bad(
            "\"checkpoints\" must ascend after \"from\" and end at \"until\"".into(),
        ));
    }
    Ok(header)
}

fn entry(v: &Value) -> Result<(u64, SealedEntry), String> {
    let at = text(v, "at")?;
    let at = OffsetDateTime::parse(&at, &Rfc3339).map_err(|e| format!("\"at\": {e}"))?;
    Ok((
        number(v, "seq")?,
        SealedEntry {
            entry: Entry {
                subject_type: text(v, "subject_type")?,
                subject_id: text(v, "subject_id")?,
                event: text(v, "event")?,
                from_state: opt_text(v, "from_state")?,
                to_state: opt_text(v, "to_state")?,
                actor: text(v, "actor")?,
                fence: match field(v, "fence")? {
                    Value::Null => None,
                    _ => Some(number(v, "fence")?),
                },
                at,
                data: text(v, "data")?,
            },
            subject_seq: number(v, "subject_seq")?,
            prev_hash: hash(v, "prev_hash")?,
            hash: hash(v, "hash")?,
        },
    ))
}

impl ArchiveReader {
    /// Takes the next line (without its newline).
    pub fn line(&mut self, line: &str) -> Result<(), ArchiveError> {
        self.line += 1;
        let at = self.line;
        let v: Value = serde_json::from_str(line).map_err(|e| match at {
            1 => ArchiveError::Foreign(format!("the first line is not JSON: {e}")),
            _ => ArchiveError::Malformed {
                line: at,
                reason: format!("not JSON: {e}"),
            },
        })?;
        let bad = |reason: String| ArchiveError::Malformed { line: at, reason };
        self.state = match std::mem::replace(&mut self.state, State::Header) {
            State::Header => {
                let h = header(&v)?;
                State::Entries(Box::new(SegmentFold::new(h.clone())), h)
            }
            State::Entries(mut fold, h) => {
                if v.get("end").is_some() {
                    let declared = number(&v, "entries").map_err(bad)?;
                    let folded = fold
                        .finish()
                        .map_err(|source| ArchiveError::Chain { line: at, source })?;
                    if declared != folded {
                        return Err(ArchiveError::Truncated(format!(
                            "the end line counts {declared} entries but the file holds {folded}"
                        )));
                    }
                    State::Ended(folded, h)
                } else {
                    let (seq, e) = entry(&v).map_err(bad)?;
                    fold.push(seq, &e)
                        .map_err(|source| ArchiveError::Chain { line: at, source })?;
                    State::Entries(fold, h)
                }
            }
            State::Ended(..) => return Err(bad("a line after the end line".into())),
        };
        Ok(())
    }

    /// The archive's header and number of entries, once every line was read and verified.
    pub fn finish(self) -> Result<(ArchiveHeader, u64), ArchiveError> {
        match self.state {
            State::Header => Err(ArchiveError::Foreign("the file is empty".into())),
            State::Entries(..) => Err(ArchiveError::Truncated(format!(
                "no end line after line {}",
                self.line
            ))),
            State::Ended(entries, header) => Ok((header, entries)),
        }
    }
}

#[cfg(test)]
mod tests;
