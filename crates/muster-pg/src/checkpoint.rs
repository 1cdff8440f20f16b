//! Ledger checkpoints: every so many entries or minutes one replica's background task folds the
//! entries since the last checkpoint into the next one (`muster_ledger::CheckpointFold`) and
//! records it in `core.ledger_checkpoints`.
//!
//! Ledger sequences are drawn at insert but committed in any order, so a checkpoint at S is
//! taken only once no transaction can still commit an entry at or below S. Every ledger insert
//! takes its transaction id before it draws its sequences (`logbook/sql/ledger_insert.sql`), so
//! a transaction that drew a sequence at or below the newest one a snapshot shows, but had not
//! committed, already had its id then. The checkpoint reads S, then takes a transaction id of
//! its own, F: ids are handed out in order, so every such transaction's id is below F, and the
//! checkpoint waits until no transaction with an id below F is running (a fresh snapshot's
//! `xmin` is past F). A snapshot's `xmax` would not do as that fence: it is the newest
//! *committed* id + 1, and a running transaction whose id is at or above it is in no
//! snapshot's list of running ones. Nothing on the write path waits for a checkpoint: it only
//! reads, and waits for writers, never the other way round.
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use muster_ledger::{Checkpoint, CheckpointFold, Hash};
use time::OffsetDateTime;

use crate::PgError;

/// How often checkpoints are taken: after this many new entries, or this long after the last
/// one when there is anything new, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSettings {
    pub every_entries: u64,
    pub every: Duration,
}

impl Default for CheckpointSettings {
    fn default() -> Self {
        Self {
            every_entries: 10_000,
            every: Duration::from_secs(300),
        }
    }
}

/// The latest checkpoint and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedCheckpoint {
    pub checkpoint: Checkpoint,
    pub taken_at: OffsetDateTime,
}

/// An arbitrary fixed key for `pg_try_advisory_xact_lock`: "muster-checkpoint" shortened.
const LOCK_KEY: i64 = 0x6d75_7374_6572_636b;

/// The longest a checkpoint or `--head` waits for transactions older than its snapshot.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

pub(crate) fn checkpoint_at(seq: i64, digest: Vec<u8>) -> Checkpoint {
    Checkpoint {
        seq: seq as u64,
        digest: digest.try_into().unwrap_or([0xff; 32]),
    }
}

/// The newest ledger sequence N such that no transaction can still commit an entry at or
/// below N (see the module's comment): N as a snapshot shows it, then a transaction id taken
/// after that snapshot as the fence every transaction that could still commit below N is
/// behind, then a wait until none behind it runs.
pub(crate) async fn settled_position(client: &tokio_postgres::Client) -> Result<u64, PgError> {
    let seq: i64 = client
        .query_one(include_str!("checkpoint/sql/newest.sql"), &[])
        .await?
        .get(0);
    let fence: String = client
        .query_one(include_str!("checkpoint/sql/fence.sql"), &[])
        .await?
        .get(0);
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let settled: bool = client
            .query_one(include_str!("checkpoint/sql/settled.sql"), &[&fence])
            .await?
            .get(0);
        if settled {
            return Ok(seq as u64);
        }
        if Instant::now() > deadline {
            return Err(PgError::Ledger(
                "a transaction older than 30 s is still open: no ledger position can be settled yet"
                    .into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Folds the entries after `prev` up to `seq` (in pages by sequence) into the next checkpoint.
pub(crate) async fn fold(
    client: &impl tokio_postgres::GenericClient,
    prev: Checkpoint,
    seq: u64,
) -> Result<(Checkpoint, u64), PgError> {
    let mut fold = CheckpointFold::new(prev, seq);
    let mut after = prev.seq as i64;
    loop {
        let rows = client
            .query(
                include_str!("checkpoint/sql/entries_page.sql"),
                &[&after, &(seq as i64)],
            )
            .await?;
        for r in &rows {
            let hash: Vec<u8> = r.get(1);
            after = r.get(0);
            fold.push(after as u64, &hash.try_into().unwrap_or([0xff; 32]))?;
        }
        if rows.len() < 5000 {
            return Ok((fold.finish(), fold.entries()));
        }
    }
}

/// The latest checkpoint, if any was taken.
pub async fn latest_checkpoint(pool: &Pool) -> Result<Option<RecordedCheckpoint>, PgError> {
    let client = pool.get().await?;
    latest(&**client).await
}

pub(crate) async fn latest(
    client: &impl tokio_postgres::GenericClient,
) -> Result<Option<RecordedCheckpoint>, PgError> {
    Ok(client
        .query_opt(include_str!("checkpoint/sql/latest.sql"), &[])
        .await?
        .map(|r| RecordedCheckpoint {
            checkpoint: checkpoint_at(r.get(0), r.get(1)),
            taken_at: r.get(2),
        }))
}

/// Takes a checkpoint when one is due by `settings` (always, with `None`) and there are new
/// entries, unless another replica is taking one; answers the checkpoint taken.
pub async fn take_checkpoint(
    pool: &Pool,
    settings: Option<&CheckpointSettings>,
) -> Result<Option<Checkpoint>, PgError> {
    let mut client = pool.get().await?;
    if let Some(settings) = settings {
        let last = latest(&**client).await?;
        let newest: i64 = client
            .query_one(include_str!("checkpoint/sql/newest.sql"), &[])
            .await?
            .get(0);
        let (seq, age) = match last {
            Some(l) => (l.checkpoint.seq, OffsetDateTime::now_utc() - l.taken_at),
            None => (0, time::Duration::MAX),
        };
        let new = (newest as u64).saturating_sub(seq);
        if new == 0 || (new < settings.every_entries && age < settings.every) {
            return Ok(None);
        }
    }
    let seq = settled_position(&client).await?;
    let tx = client.transaction().await?;
    let locked: bool = tx
        .query_one(include_str!("checkpoint/sql/lock.sql"), &[&LOCK_KEY])
        .await?
        .get(0);
    if !locked {
        return Ok(None);
    }
    let prev = latest(&*tx)
        .await?
        .map_or(Checkpoint::ORIGIN, |l| l.checkpoint);
    if seq <= prev.seq {
        return Ok(None);
    }
    let (next, entries) = fold(&*tx, prev, seq).await?;
    let digest: &[u8] = &next.digest;
    let inserted = tx
        .execute(
            include_str!("checkpoint/sql/insert.sql"),
            &[
                &(next.seq as i64),
                &(prev.seq as i64),
                &digest,
                &(entries as i64),
            ],
        )
        .await?;
    tx.commit().await?;
    Ok((inserted == 1).then_some(next))
}

/// The background task: looks every few seconds whether a checkpoint is due and takes it.
pub struct Checkpointer {
    pool: Pool,
    settings: CheckpointSettings,
}

impl Checkpointer {
    pub fn new(pool: Pool, settings: CheckpointSettings) -> Self {
        Self { pool, settings }
    }

    /// Runs until dropped; a failure is logged and retried at the next look.
    pub async fn run(self) {
        let look = self.settings.every.min(Duration::from_secs(5));
        loop {
            tokio::time::sleep(look).await;
            match take_checkpoint(&self.pool, Some(&self.settings)).await {
                Ok(Some(c)) => tracing::info!(
                    seq = c.seq,
                    digest = %blake3::Hash::from(c.digest).to_hex(),
                    "ledger checkpoint taken"
                ),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "ledger checkpoint not taken; will retry"),
            }
        }
    }
}

/// `SEQ:DIGEST`, as `ledger-verify` prints a checkpoint.
pub fn checkpoint_text(c: &Checkpoint) -> String {
    format!("{}:{}", c.seq, blake3::Hash::from(c.digest).to_hex())
}

/// A checkpoint named on the command line: `SEQ`, or `SEQ:DIGEST` to also confirm its digest.
pub fn parse_checkpoint(s: &str) -> Result<(u64, Option<Hash>), PgError> {
    let bad = || {
        PgError::Ledger(format!(
            "{s:?} is not a checkpoint: SEQ or SEQ:DIGEST (as `ledger-verify` prints it)"
        ))
    };
    let (n, hex) = match s.split_once(':') {
        Some((n, hex)) => (n, Some(hex)),
        None => (s, None),
    };
    let seq = n.parse().map_err(|_| bad())?;
    let digest = hex
        .map(|h| blake3::Hash::from_hex(h).map(|d| *d.as_bytes()))
        .transpose()
        .map_err(|_| bad())?;
    Ok((seq, digest))
}

#[cfg(test)]
mod tests;
