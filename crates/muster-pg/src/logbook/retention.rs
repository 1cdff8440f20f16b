//! Retention in Logbook (`RetentionStore`): each batch is one statement in its own
//! transaction. Finished items go through `core.remove_finished` (V18, V23), which runs as the
//! schema owner: the runtime role may not delete from `core.items` or `core.leases` itself. A
//! batch skips rows other transactions hold and gives way when it would wait for a lock (its lock
//! timeout is 100 ms), so a lease, a completion or an operator's call never waits behind it
//! for longer than that.

use async_trait::async_trait;
use muster_app::ports::{RemovalBatch, Removed, RetentionStore, StoreError};
use muster_app::service::FINISHED;
use muster_domain::{ItemId, Kind, Priority};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use super::PgLogbook;
use crate::pool::ROUND_TRIP_TIMEOUT;

/// SQLSTATEs of a batch that would have waited: lock not available (the lock timeout), deadlock.
const GAVE_WAY: [&str; 2] = ["55P03", "40P01"];

#[async_trait]
impl RetentionStore for PgLogbook {
    async fn remove_finished(&self, batch: RemovalBatch) -> Result<Removed, StoreError> {
        let mut client = self.reader().await?;
        let stmt = client
            .prepare_cached(include_str!("sql/remove_finished.sql"))
            .await?;
        let after = batch.after.map_or(Uuid::nil(), |id| id.0);
        let (state, kind, priority) = (
            batch.state.as_str(),
            batch.kind.as_str(),
            batch.priority.rank(),
        );
        let (retain, max) = (
            batch.retain.as_seconds_f64(),
            i32::try_from(batch.max).unwrap_or(i32::MAX),
        );
        let asked = tokio::time::timeout(
            ROUND_TRIP_TIMEOUT,
            client
                .object_mut()?
                .query_one(&stmt, &[&state, &kind, &priority, &after, &retain, &max]),
        )
        .await;
        let row = match asked {
            Err(_) => return Err(client.silent("a retention batch")),
            Ok(Ok(row)) => row,
            Ok(Err(e)) if e.code().is_some_and(|c| GAVE_WAY.contains(&c.code())) => {
                return Ok(Removed {
                    gave_way: true,
                    ..Removed::default()
                });
            }
            Ok(Err(e)) => return Err(crate::error::store_err(e)),
        };
        let count = |i: usize| u64::try_from(row.get::<_, i32>(i)).unwrap_or(0);
        Ok(Removed {
            scanned: u32::try_from(row.get::<_, i32>(0)).unwrap_or(0),
            last: row.get::<_, Option<Uuid>>(1).map(ItemId),
            items: count(2),
            leases: count(3),
            gave_way: false,
        })
    }

    async fn remove_edit_texts(&self, retain: Duration, max: u32) -> Result<u64, StoreError> {
        let mut client = self.reader().await?;
        client
            .execute(
                include_str!("sql/remove_edit_texts.sql"),
                &[&retain.as_seconds_f64(), &i64::from(max)],
            )
            .await
    }

    async fn oldest_finished(&self) -> Result<Option<OffsetDateTime>, StoreError> {
        let mut client = self.reader().await?;
        let states: Vec<&str> = FINISHED.iter().map(|s| s.as_str()).collect();
        let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        let priorities: Vec<i16> = Priority::ALL.iter().map(|p| p.rank()).collect();
        let row = client
            .query_one(
                include_str!("sql/oldest_finished.sql"),
                &[&states, &kinds, &priorities],
            )
            .await?;
        Ok(row.get(0))
    }
}
