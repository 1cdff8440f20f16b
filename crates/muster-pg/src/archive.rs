//! Exporting a ledger segment to an archive file (`muster_ledger::archive` has the format),
//! read in one snapshot and checked against its checkpoints as it is written.

use deadpool_postgres::Pool;
use muster_ledger::archive::{ArchiveHeader, SegmentFold, end_line, entry_line, header_line};
use muster_ledger::{Checkpoint, Hash};

use crate::PgError;
use crate::checkpoint::checkpoint_at;
use crate::verify::{sealed, snapshot};

mod prune;
pub(crate) use prune::boundary;
pub use prune::{ArchivedBoundary, PRUNE_BATCH, Pruned, archived_boundary, prune_archive};

/// Checkpoint `seq` (0: the ledger's start), confirming its digest when one is given.
async fn named(
    tx: &tokio_postgres::Transaction<'_>,
    seq: u64,
    digest: Option<Hash>,
) -> Result<Checkpoint, PgError> {
    let found = if seq == 0 {
        Checkpoint::ORIGIN
    } else {
        tx.query_opt(include_str!("checkpoint/sql/one.sql"), &[&(seq as i64)])
            .await?
            .map(|r| checkpoint_at(r.get(0), r.get(1)))
            .ok_or_else(|| {
                PgError::Ledger(format!(
                    "there is no checkpoint {seq} (`muster ledger-verify` prints the latest)"
                ))
            })?
    };
    if let Some(expected) = digest
        && expected != found.digest
    {
        return Err(PgError::Ledger(format!(
            "checkpoint {seq} has another digest than the one given"
        )));
    }
    Ok(found)
}

/// A checkpoint named by its sequence, with its digest to confirm or not.
pub type CheckpointName = (u64, Option<Hash>);

/// Writes the ledger entries after checkpoint `from` (0: the start) up to checkpoint `until`
/// to `out` as an archive; answers the entries written. Every entry's hash and every
/// checkpoint's digest is checked on the way, so an archive that is written verifies.
pub async fn export_archive(
    pool: &Pool,
    from: CheckpointName,
    until: CheckpointName,
    out: &mut (impl std::io::Write + Send),
) -> Result<u64, PgError> {
    let mut client = pool.get().await?;
    let tx = snapshot(&mut client).await?;
    let start = named(&tx, from.0, from.1).await?;
    let end = named(&tx, until.0, until.1).await?;
    if end.seq <= start.seq {
        return Err(PgError::Ledger(format!(
            "checkpoint {} is not after checkpoint {}",
            end.seq, start.seq
        )));
    }
    if let Some(b) = boundary(&*tx).await?
        && start.seq < b.through.seq
    {
        return Err(PgError::Ledger(format!(
            "the entries up to checkpoint {} are archived out of Logbook already: archive from there (--from {})",
            b.through.seq, b.through.seq
        )));
    }
    let checkpoints = tx
        .query(
            include_str!("checkpoint/sql/between.sql"),
            &[&(start.seq as i64), &(end.seq as i64)],
        )
        .await?
        .iter()
        .map(|r| checkpoint_at(r.get(0), r.get(1)))
        .collect();
    let header = ArchiveHeader {
        from: start,
        checkpoints,
    };
    let write = |out: &mut (dyn std::io::Write + Send), line: String| {
        writeln!(out, "{line}").map_err(|e| PgError::Ledger(format!("writing the archive: {e}")))
    };
    write(out, header_line(&header))?;
    let mut fold = SegmentFold::new(header);
    each_entry(&*tx, start.seq, end.seq, |seq, e| {
        fold.push(seq, e)?;
        write(out, entry_line(seq, e))
    })
    .await?;
    let entries = fold.finish()?;
    write(out, end_line(entries))?;
    tx.commit().await?;
    Ok(entries)
}

/// Hands every ledger entry after `after` up to `until` to `each`, in sequence order, read in
/// pages by sequence.
pub(crate) async fn each_entry(
    client: &impl tokio_postgres::GenericClient,
    after: u64,
    until: u64,
    mut each: impl FnMut(u64, &muster_ledger::SealedEntry) -> Result<(), PgError>,
) -> Result<(), PgError> {
    let mut after = after as i64;
    loop {
        let rows = client
            .query(
                include_str!("verify/sql/entries_by_seq.sql"),
                &[&after, &(until as i64)],
            )
            .await?;
        for r in &rows {
            let (e, seq) = sealed(r);
            each(seq, &e)?;
            after = seq as i64;
        }
        if rows.len() < 5000 {
            return Ok(());
        }
    }
}
