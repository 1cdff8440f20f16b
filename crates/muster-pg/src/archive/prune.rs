//! Removing an archived segment from Logbook (`muster ledger-prune --archive FILE`), as the
//! schema owner: the runtime role has no DELETE privilege on `core.ledger`, and the ledger's
//! trigger refuses the owner too, except for entries at or below the archived boundary (V20).
//!
//! Before anything is removed: the file verified offline (by the caller), the segment starts
//! where the last pruned one ended (0: the ledger's start), every checkpoint of the file is in
//! Logbook with the same digest, and Logbook's entries in the range fold to those digests (so
//! Logbook holds exactly what the file holds). Then, in one transaction, the segment is recorded
//! (`core.ledger_archived`: the boundary) with the anchors of the chains that go on past it
//! (`core.ledger_anchors`), and the entries are deleted in batches of consecutive sequences,
//! each batch its own transaction: the locks are the deleted rows' own, which no writer waits
//! for, held for one batch. A prune stopped half-way is taken up again by the same command: the
//! segment is recorded already, and only the deletion goes on. No later segment is recorded
//! while entries at or below the boundary are left, so a stopped prune is always the one to
//! finish first.

use deadpool_postgres::Pool;
use muster_ledger::Checkpoint;
use muster_ledger::archive::{ArchiveHeader, SegmentFold};
use time::OffsetDateTime;
use tokio_postgres::IsolationLevel;

use crate::PgError;
use crate::checkpoint::{checkpoint_at, checkpoint_text};

/// Entries deleted per transaction.
pub const PRUNE_BATCH: u64 = 10_000;

/// The newest pruned segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchivedBoundary {
    /// The checkpoint it ends at: every entry at or below `through.seq` is archived.
    pub through: Checkpoint,
    /// The newest `at` among its entries (`None`: it held none).
    pub last_at: Option<OffsetDateTime>,
}

/// What a prune removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub from: Checkpoint,
    pub through: Checkpoint,
    /// Entries deleted by this run.
    pub deleted: u64,
    /// The segment was recorded by an earlier run that stopped before its end.
    pub resumed: bool,
}

/// The archived boundary, if any segment was pruned.
pub(crate) async fn boundary(
    client: &impl tokio_postgres::GenericClient,
) -> Result<Option<ArchivedBoundary>, PgError> {
    Ok(client
        .query_opt(include_str!("sql/boundary.sql"), &[])
        .await?
        .map(|r| ArchivedBoundary {
            through: checkpoint_at(r.get(0), r.get(1)),
            last_at: r.get(2),
        }))
}

/// The archived boundary of the ledger at `pool`.
pub async fn archived_boundary(pool: &Pool) -> Result<Option<ArchivedBoundary>, PgError> {
    let client = pool.get().await?;
    boundary(&**client).await
}

fn refused(reason: String) -> PgError {
    PgError::Ledger(format!("nothing removed: {reason}"))
}

/// Removes from Logbook the segment an archive file holds (`header`, `entries`: what the file
/// verified to), `batch` entries per transaction.
pub async fn prune_archive(
    pool: &Pool,
    header: &ArchiveHeader,
    entries: u64,
    batch: u64,
) -> Result<Pruned, PgError> {
    let mut client = pool.get().await?;
    let until = header.until();
    let recorded: Option<Vec<u8>> = client
        .query_opt(include_str!("sql/segment.sql"), &[&(until.seq as i64)])
        .await?
        .map(|r| r.get(0));
    let resumed = match recorded {
        Some(digest) => {
            if digest != until.digest {
                return Err(refused(format!(
                    "Logbook records the segment up to checkpoint {} with another digest than the archive's",
                    until.seq
                )));
            }
            true
        }
        None => {
            let at = boundary(&**client)
                .await?
                .map_or(Checkpoint::ORIGIN, |b| b.through);
            if header.from != at {
                return Err(refused(format!(
                    "the archive starts after checkpoint {}, but Logbook's ledger is archived up to {} (prune the archives in order)",
                    checkpoint_text(&header.from),
                    checkpoint_text(&at)
                )));
            }
            record(&mut client, header, entries).await?;
            false
        }
    };
    let mut lo = header.from.seq;
    let mut deleted = 0;
    while lo < until.seq {
        let hi = until.seq.min(lo.saturating_add(batch.max(1)));
        deleted += client
            .execute(
                include_str!("sql/delete_batch.sql"),
                &[&(lo as i64), &(hi as i64)],
            )
            .await?;
        lo = hi;
    }
    Ok(Pruned {
        from: header.from,
        through: until,
        deleted,
        resumed,
    })
}

/// Checks Logbook against the archive and records the segment and its anchors, in one
/// transaction (one snapshot for the checks).
async fn record(
    client: &mut deadpool_postgres::Object,
    header: &ArchiveHeader,
    entries: u64,
) -> Result<(), PgError> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await?;
    // The checks read the whole segment (anchors.sql one statement over it): not under the
    // pool's statement_timeout, which bounds the server's reads.
    tx.batch_execute(include_str!("../verify/sql/long_reads.sql"))
        .await?;
    let left: bool = tx
        .query_one(
            include_str!("sql/left_below.sql"),
            &[&(header.from.seq as i64)],
        )
        .await?
        .get(0);
    if left {
        return Err(refused(format!(
            "Logbook still holds entries up to checkpoint {}: finish the previous prune first (muster ledger-prune --archive with the archive up to checkpoint {})",
            header.from.seq, header.from.seq
        )));
    }
    for c in &header.checkpoints {
        let found = tx
            .query_opt(
                include_str!("../checkpoint/sql/one.sql"),
                &[&(c.seq as i64)],
            )
            .await?
            .map(|r| checkpoint_at(r.get(0), r.get(1)))
            .ok_or_else(|| {
                refused(format!(
                    "checkpoint {} of the archive is not in Logbook",
                    c.seq
                ))
            })?;
        if found.digest != c.digest {
            return Err(refused(format!(
                "checkpoint {} has another digest in Logbook than in the archive",
                c.seq
            )));
        }
    }
    let until = header.until();
    let mismatch = |why: String| {
        refused(format!(
            "Logbook's entries after checkpoint {} up to {} do not match the archive: {why}",
            header.from.seq, until.seq
        ))
    };
    let mut fold = SegmentFold::new(header.clone());
    super::each_entry(&*tx, header.from.seq, until.seq, |seq, e| {
        fold.push(seq, e).map_err(|e| mismatch(e.to_string()))
    })
    .await?;
    let folded = fold.finish().map_err(|e| mismatch(e.to_string()))?;
    if folded != entries {
        return Err(mismatch(format!(
            "Logbook holds {folded} entries, the archive {entries}"
        )));
    }
    let digest: &[u8] = &until.digest;
    let (from, through) = (header.from.seq as i64, until.seq as i64);
    tx.execute(
        include_str!("sql/record.sql"),
        &[&from, &through, &digest, &(entries as i64)],
    )
    .await
    .map_err(|e| {
        if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
            refused("another prune recorded this segment meanwhile".to_owned())
        } else {
            e.into()
        }
    })?;
    tx.execute(include_str!("sql/anchors.sql"), &[&from, &through])
        .await?;
    tx.commit().await?;
    Ok(())
}
