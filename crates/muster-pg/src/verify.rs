//! Ledger verification: every subject's chain recomputed from the rows and compared with the
//! chain head its subject row records (items, edits and paused kinds), every edit's stored text
//! with the BLAKE3 its `submitted` entry records, every checkpoint with the entries it folds,
//! and, for `--head` / `--against`, one digest over every chain head as of a ledger sequence
//! (`muster_ledger::heads_digest`).
//!
//! Every read of one verification is made in one `REPEATABLE READ READ ONLY` transaction, so
//! the subject rows, the ledger and the checkpoints are seen as of one moment however many
//! transactions commit meanwhile. Memory stays bounded whatever the ledger's size: the chains
//! are read in pages in the order of the ledger's index (subject, position) with each
//! subject's row looked up by its key as its chain begins, and only the chain being walked is
//! held; subjects whose chain is missing entirely are found by an anti-join in the database;
//! checkpoints are folded from pages in sequence order; the heads digest is taken as the heads
//! stream in, sorted by the database.

use deadpool_postgres::Pool;
use futures_util::TryStreamExt;
use muster_ledger::{ChainError, ChainHead, ChainWalk, Checkpoint, Entry, Hash, SealedEntry};

use crate::PgError;
use crate::checkpoint::{RecordedCheckpoint, checkpoint_at, fold, latest};

/// What a verification covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LedgerReport {
    pub subjects: u64,
    pub entries: u64,
    /// Subjects that are items with a row in `core.items`.
    pub item_subjects: u64,
    /// Subjects that are edits with a row in `core.edits`.
    pub edit_subjects: u64,
    /// Subjects that are kinds with a row in `core.kind_pauses` (kinds ever paused).
    pub kind_subjects: u64,
    /// Edit texts checked against their `submitted` entry (edits submitted before the entry
    /// recorded the text's BLAKE3 have none to check).
    pub bodies: u64,
    /// Edit texts retention removed (rejected proposals past their period): their digest stays
    /// in the chain, there is no text to compare with it.
    pub texts_removed: u64,
    /// Checkpoints recomputed from the entries they fold.
    pub checkpoints: u64,
    /// The newest checkpoint, when any was taken.
    pub latest_checkpoint: Option<Checkpoint>,
}

/// `N:DIGEST`: the ledger's sequence N and the digest over every chain head as of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerHead {
    pub seq: u64,
    pub digest: Hash,
}

impl std::fmt::Display for LedgerHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}",
            self.seq,
            blake3::Hash::from(self.digest).to_hex()
        )
    }
}

impl std::str::FromStr for LedgerHead {
    type Err = PgError;

    fn from_str(s: &str) -> Result<Self, PgError> {
        let bad = || {
            PgError::Ledger(format!(
                "{s:?} is not N:DIGEST (as `ledger-verify --head` prints it)"
            ))
        };
        let (n, hex) = s.split_once(':').ok_or_else(bad)?;
        Ok(LedgerHead {
            seq: n.parse().map_err(|_| bad())?,
            digest: *blake3::Hash::from_hex(hex).map_err(|_| bad())?.as_bytes(),
        })
    }
}

/// A subject row's recorded head, and for an edit the BLAKE3 of its stored text.
struct Recorded {
    head: ChainHead,
    body: Body,
}

/// An edit's text as its row holds it.
enum Body {
    /// Not an edit, or an edit whose text is not read.
    None,
    /// The BLAKE3 of the stored text.
    Digest(String),
    /// Removed by retention (a rejected proposal's text, after its period): nothing to compare,
    /// its digest stays in the `submitted` entry.
    Removed,
}

/// One ledger row as the chain statements answer it: the entry, its ledger sequence and, on
/// the first row of a subject, the subject row's recorded head (columns 13 to 15).
pub(crate) fn sealed(r: &tokio_postgres::Row) -> (SealedEntry, u64) {
    let prev: Vec<u8> = r.get(10);
    let hash: Vec<u8> = r.get(11);
    let sealed = SealedEntry {
        entry: Entry {
            subject_type: r.get(0),
            subject_id: r.get(1),
            event: r.get(3),
            from_state: r.get(4),
            to_state: r.get(5),
            actor: r.get(6),
            fence: r.get::<_, Option<i64>>(7).map(|f| f as u64),
            at: r.get(8),
            data: r.get(9),
        },
        subject_seq: r.get::<_, i64>(2) as u64,
        prev_hash: prev.try_into().unwrap_or([0xff; 32]),
        hash: hash.try_into().unwrap_or([0xff; 32]),
    };
    (sealed, r.get::<_, i64>(12) as u64)
}

fn recorded(r: &tokio_postgres::Row) -> Option<Recorded> {
    let len: Option<i64> = r.get(13);
    let hash: Option<Vec<u8>> = r.get(14);
    let text: Option<String> = r.get(15);
    let removed: Option<bool> = r.get(16);
    let body = match (text, removed) {
        (Some(text), _) => Body::Digest(muster_domain::edit::body_digest(&text)),
        (None, Some(true)) => Body::Removed,
        (None, _) => Body::None,
    };
    Some(Recorded {
        head: ChainHead {
            len: len? as u64,
            hash: hash?.try_into().unwrap_or([0xff; 32]),
        },
        body,
    })
}

/// The chain being walked: only one subject's head is held at a time.
struct Walking {
    walk: ChainWalk,
    subject_type: String,
    recorded: Option<Recorded>,
    entries: u64,
}

/// Walks chains from rows in (subject, position) order, one subject at a time.
#[derive(Default)]
struct Walker {
    current: Option<Walking>,
    report: LedgerReport,
}

impl Walker {
    /// Takes the next row; `start` is where a new subject's walk begins (its first entry, or
    /// the entry before the first one read).
    fn push(
        &mut self,
        e: &SealedEntry,
        recorded: impl FnOnce() -> Option<Recorded>,
        start: impl FnOnce(&SealedEntry) -> ChainWalk,
    ) -> Result<(), PgError> {
        let same = self
            .current
            .as_ref()
            .is_some_and(|w| w.walk.is_of(&e.entry.subject_type, &e.entry.subject_id));
        if !same {
            self.finish()?;
            self.current = Some(Walking {
                walk: start(e),
                subject_type: e.entry.subject_type.clone(),
                recorded: recorded(),
                entries: 0,
            });
        }
        let Some(w) = self.current.as_mut() else {
            return Ok(());
        };
        w.walk.push(e)?;
        w.entries += 1;
        if let Some(r) = &w.recorded
            && w.subject_type == "edit"
            && e.entry.event == "submitted"
        {
            match check_body(&w.walk.subject(), e, r)? {
                BodyCheck::Matched => self.report.bodies += 1,
                BodyCheck::Removed => self.report.texts_removed += 1,
                BodyCheck::NoDigest => {}
            }
        }
        Ok(())
    }

    /// Ends the current subject: its chain must end where its row says.
    fn finish(&mut self) -> Result<(), PgError> {
        let Some(w) = self.current.take() else {
            return Ok(());
        };
        if let Some(r) = &w.recorded {
            w.walk.finish_against(r.head)?;
            match w.subject_type.as_str() {
                "item" => self.report.item_subjects += 1,
                "edit" => self.report.edit_subjects += 1,
                _ => self.report.kind_subjects += 1,
            }
        }
        self.report.subjects += 1;
        self.report.entries += w.entries;
        Ok(())
    }
}

/// Opens the one snapshot every read of a verification is made in. Its statements are
/// planned for their values (the session's generic plans would scan the whole ledger for
/// `seq > $1`) and without JIT (its compile time would outweigh the reads of `--since`).
pub(crate) async fn snapshot(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, PgError> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    tx.batch_execute(include_str!("verify/sql/long_reads.sql"))
        .await?;
    Ok(tx)
}

/// Verifies every chain in the ledger and every checkpoint; the first break is the error.
pub async fn verify_ledger(pool: &Pool) -> Result<LedgerReport, PgError> {
    Ok(verify(pool, None).await?.0)
}

/// Verifies every chain and answers the newest ledger sequence N with the digest over every
/// chain head as of N. N is taken once no transaction can still commit an entry at or below
/// it (as a checkpoint's sequence is).
pub async fn ledger_head(pool: &Pool) -> Result<(LedgerReport, LedgerHead), PgError> {
    let seq = {
        let client = pool.get().await?;
        crate::checkpoint::settled_position(&client).await?
    };
    let (report, digest) = verify(pool, Some(seq)).await?;
    Ok((
        report,
        LedgerHead {
            seq,
            digest: digest.unwrap_or_default(),
        },
    ))
}

/// Verifies every chain and that the ledger up to `expected.seq` still hashes to
/// `expected.digest`.
pub async fn verify_against(pool: &Pool, expected: LedgerHead) -> Result<LedgerReport, PgError> {
    let (report, digest) = verify(pool, Some(expected.seq)).await?;
    let found = digest.unwrap_or_default();
    if found != expected.digest {
        return Err(ChainError::DigestMismatch {
            seq: expected.seq,
            expected: hex(&expected.digest),
            found: hex(&found),
        }
        .into());
    }
    Ok(report)
}

fn hex(h: &Hash) -> String {
    blake3::Hash::from(*h).to_hex().to_string()
}

async fn verify(pool: &Pool, at: Option<u64>) -> Result<(LedgerReport, Option<Hash>), PgError> {
    let mut client = pool.get().await?;
    let tx = snapshot(&mut client).await?;
    // Entries at or below the archived boundary are in the archive file, which verifies from
    // the boundary's checkpoint (`--archive`), whether or not a prune has deleted them yet: the
    // chains are walked from their anchors, the checkpoints after it fold from it. Read in the
    // snapshot every other read is made in.
    let start = crate::archive::boundary(&*tx)
        .await?
        .map_or(Checkpoint::ORIGIN, |b| b.through);
    let archived = start.seq as i64;
    let mut walker = Walker::default();
    let mut after: (String, String, i64) = (String::new(), String::new(), 0);
    loop {
        let rows = tx
            .query(
                include_str!("verify/sql/chains_page.sql"),
                &[&after.0, &after.1, &after.2, &archived],
            )
            .await?;
        for r in &rows {
            let (e, _) = sealed(r);
            walker.push(&e, || recorded(r), |e| walk_from(e, r.get(17)))?;
        }
        match rows.last() {
            Some(last) if rows.len() == 2000 => after = (last.get(0), last.get(1), last.get(2)),
            _ => break,
        }
    }
    walker.finish()?;
    // Every item and edit has at least its first entry, and so has every kind whose row
    // records one: a subject whose chain is missing entirely is as broken as one whose chain
    // was cut short, and one whose chain was archived whole must end where its row says.
    if let Some(r) = tx
        .query_opt(include_str!("verify/sql/no_chain.sql"), &[&archived])
        .await?
    {
        let subject: String = r.get(0);
        if r.get(1) {
            return Err(PgError::Ledger(format!(
                "subject {subject}: its chain was archived whole, and its recorded head is not the last archived entry's"
            )));
        }
        return Err(ChainError::NoChain { subject }.into());
    }
    let (checkpoints, latest) = verify_checkpoints(&tx, start).await?;
    walker.report.checkpoints = checkpoints;
    walker.report.latest_checkpoint = latest.map(|l| l.checkpoint);
    let digest = match at {
        Some(at) => Some(heads_digest_at(&tx, at).await?),
        None => None,
    };
    tx.commit().await?;
    Ok((walker.report, digest))
}

/// Recomputes every checkpoint after `from` from the entries it folds, in order; answers how
/// many were checked and the latest one recorded.
async fn verify_checkpoints(
    tx: &tokio_postgres::Transaction<'_>,
    from: Checkpoint,
) -> Result<(u64, Option<RecordedCheckpoint>), PgError> {
    let mut prev = from;
    let mut checked = 0;
    while let Some(r) = tx
        .query_opt(
            include_str!("checkpoint/sql/next.sql"),
            &[&(prev.seq as i64)],
        )
        .await?
    {
        let recorded = checkpoint_at(r.get(0), r.get(2));
        let prev_seq: i64 = r.get(1);
        if prev_seq as u64 != prev.seq {
            return Err(PgError::Ledger(format!(
                "checkpoint {} follows checkpoint {prev_seq}, but the checkpoint before it is {}",
                recorded.seq, prev.seq
            )));
        }
        let (found, _) = fold(tx, prev, recorded.seq).await?;
        if found != recorded {
            return Err(ChainError::CheckpointMismatch {
                seq: recorded.seq,
                recorded: hex(&recorded.digest),
                found: hex(&found.digest),
            }
            .into());
        }
        prev = recorded;
        checked += 1;
    }
    Ok((checked, latest(tx).await?))
}

/// The digest over every chain head as of `at`, streamed in byte order of (type, id).
async fn heads_digest_at(tx: &tokio_postgres::Transaction<'_>, at: u64) -> Result<Hash, PgError> {
    let at_param = at as i64;
    let subjects: i64 = tx
        .query_one(include_str!("verify/sql/heads_count.sql"), &[&at_param])
        .await?
        .get(0);
    let mut digest = muster_ledger::HeadsDigest::new(at, subjects as u64);
    let rows = tx
        .query_raw(include_str!("verify/sql/heads_at.sql"), [&at_param])
        .await?;
    futures_util::pin_mut!(rows);
    while let Some(r) = rows.try_next().await? {
        let hash: Vec<u8> = r.get(3);
        digest.push(
            r.get(0),
            r.get(1),
            ChainHead {
                len: r.get::<_, i64>(2) as u64,
                hash: hash.try_into().unwrap_or([0xff; 32]),
            },
        );
    }
    Ok(digest.finish())
}

/// Verifies what came after checkpoint `seq` (confirming its digest when given): the later
/// checkpoints, and the chains of the entries after it, each continued from the entry before
/// its first one read and compared with its subject's row. Entries at or below the checkpoint
/// are not read, beyond that one entry per subject touched; they are what the checkpoint
/// commits to, and a full verification checks them.
pub async fn verify_since(
    pool: &Pool,
    seq: u64,
    digest: Option<Hash>,
) -> Result<LedgerReport, PgError> {
    let mut client = pool.get().await?;
    let tx = snapshot(&mut client).await?;
    let from = tx
        .query_opt(include_str!("checkpoint/sql/one.sql"), &[&(seq as i64)])
        .await?
        .map(|r| checkpoint_at(r.get(0), r.get(1)))
        .ok_or_else(|| {
            PgError::Ledger(format!(
                "there is no checkpoint {seq} (`muster ledger-verify` prints the latest)"
            ))
        })?;
    if let Some(expected) = digest
        && expected != from.digest
    {
        return Err(ChainError::CheckpointMismatch {
            seq,
            recorded: hex(&from.digest),
            found: hex(&expected),
        }
        .into());
    }
    if let Some(b) = crate::archive::boundary(&*tx).await?
        && seq < b.through.seq
    {
        return Err(PgError::Ledger(format!(
            "checkpoint {seq} lies in the archived segment (Logbook's ledger is archived up to checkpoint {}): verify --since {} here, and what came before with --archive",
            b.through.seq, b.through.seq
        )));
    }
    let (checkpoints, latest) = verify_checkpoints(&tx, from).await?;
    let mut walker = Walker::default();
    let rows = tx
        .query_raw(include_str!("verify/sql/since_chains.sql"), [&(seq as i64)])
        .await?;
    futures_util::pin_mut!(rows);
    while let Some(r) = rows.try_next().await? {
        let (e, _) = sealed(&r);
        walker.push(&e, || recorded(&r), |e| walk_from(e, r.get(17)))?;
    }
    walker.finish()?;
    tx.commit().await?;
    walker.report.checkpoints = checkpoints;
    walker.report.latest_checkpoint = latest.map(|l| l.checkpoint);
    Ok(walker.report)
}

/// Where a subject's walk begins at entry `e`, the first of its chain read: after the entry
/// before it, whose hash is `before` (read beside it, or the chain's anchor when that entry was
/// archived), or else at the chain's start, where an entry that is not the first is a gap.
fn walk_from(e: &SealedEntry, before: Option<Vec<u8>>) -> ChainWalk {
    let (kind, id) = (&e.entry.subject_type, &e.entry.subject_id);
    match before {
        Some(hash) => ChainWalk::after(
            kind,
            id,
            ChainHead {
                len: e.subject_seq - 1,
                hash: hash.try_into().unwrap_or([0xff; 32]),
            },
        ),
        None => ChainWalk::from_start(kind, id),
    }
}

/// What the check of an edit's text found.
enum BodyCheck {
    /// The stored text is the one the `submitted` entry's digest commits to.
    Matched,
    /// Retention removed the text.
    Removed,
    /// The entry records no digest (submitted before entries recorded one).
    NoDigest,
}

/// Checks an edit's stored text against the digest its `submitted` entry records.
fn check_body(
    subject: &str,
    submitted: &SealedEntry,
    recorded: &Recorded,
) -> Result<BodyCheck, PgError> {
    let data: serde_json::Value = serde_json::from_str(&submitted.entry.data)
        .map_err(|e| PgError::Ledger(format!("{subject}: entry data is not JSON: {e}")))?;
    let Some(committed) = data.get("body_blake3").and_then(|v| v.as_str()) else {
        return Ok(BodyCheck::NoDigest);
    };
    match &recorded.body {
        Body::Digest(digest) if digest == committed => Ok(BodyCheck::Matched),
        Body::Removed => Ok(BodyCheck::Removed),
        Body::Digest(_) | Body::None => Err(ChainError::BodyChanged {
            subject: subject.to_owned(),
        }
        .into()),
    }
}

#[cfg(test)]
pub(crate) mod tests;
