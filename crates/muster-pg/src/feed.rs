//! The live feed's reads of the ledger (`FeedSource`).

use std::time::Duration;

use async_trait::async_trait;
use muster_app::ports::{DepthCounts, FeedSource, FeedStart, LedgerEvent, StoreError};
use muster_domain::feed::ReadHorizon;
use muster_domain::{ItemState, Kind, Priority};
use tokio_postgres::Row;

use crate::PgLogbook;
use crate::error::store_err;
use crate::logbook::read::Reader;
use crate::pool::ROUND_TRIP_TIMEOUT;

/// The columns [`event_from_row`] reads: `feed/sql/backlog.sql` and, after the horizon,
/// `feed/sql/read_after.sql` list them (checked by `sql_tidy`).
#[cfg(test)]
pub(crate) const EVENT_COLS: &str = "l.seq, l.subject_type, l.subject_id, l.kind, l.priority, l.from_state, l.to_state, l.actor, l.at, \
     CASE WHEN l.subject_type IN ('edit', 'kind') THEN l.data END";

fn event_from_row(r: &Row, at: usize, counted: bool) -> LedgerEvent {
    let subject_type: String = r.get(at + 1);
    let subject_id: String = r.get(at + 2);
    // A kind's own entries name it as their subject (the row's kind column is an item's).
    let kind: Option<String> = r
        .get::<_, Option<String>>(at + 3)
        .or_else(|| (subject_type == "kind").then(|| subject_id.clone()));
    let priority: Option<i16> = r.get(at + 4);
    // The data of an edit's or a kind's entry (NULL for an item's).
    let data: Option<serde_json::Value> = r
        .get::<_, Option<String>>(at + 9)
        .and_then(|d| serde_json::from_str(&d).ok());
    let field = |name: &str| {
        data.as_ref()
            .and_then(|d| d[name].as_str().map(str::to_owned))
    };
    LedgerEvent {
        seq: r.get(at),
        kind: kind.and_then(|k| k.parse().ok()),
        priority: priority.and_then(Priority::from_rank),
        from_state: r.get(at + 5),
        to_state: r.get(at + 6),
        actor: r.get(at + 7),
        at: r.get(at + 8),
        counted,
        target: (subject_type == "edit").then(|| field("target")).flatten(),
        reason: (subject_type == "kind").then(|| field("reason")).flatten(),
        subject_type,
        subject_id,
    }
}

/// Rows of (kind, priority, state, count).
fn depth_counts(rows: &[Row]) -> Result<DepthCounts, StoreError> {
    let mut counts = Vec::with_capacity(rows.len());
    for r in rows {
        let kind: Kind = r
            .get::<_, String>(0)
            .parse()
            .map_err(|e| internal(format!("{e}")))?;
        let priority = Priority::from_rank(r.get(1)).ok_or_else(|| internal("bad priority"))?;
        let state: ItemState = r.get::<_, String>(2).parse().map_err(internal)?;
        counts.push(((kind, priority, state), r.get::<_, i64>(3)));
    }
    Ok(counts)
}

fn internal(msg: impl Into<String>) -> StoreError {
    StoreError::Internal(msg.into())
}

/// A transaction id greater than every id assigned before this call (it assigns one).
async fn xact_fence(client: &mut Reader) -> Result<u64, StoreError> {
    let id: i64 = client
        .query_one(include_str!("feed/sql/xact_fence.sql"), &[])
        .await?
        .get(0);
    Ok(id as u64)
}

#[async_trait]
impl FeedSource for PgLogbook {
    async fn start(&self) -> Result<FeedStart, StoreError> {
        let mut client = self.reader().await?;
        // 1. A position: the newest row visible now.
        let position: i64 = client
            .query_one(include_str!("feed/sql/newest_seq.sql"), &[])
            .await?
            .get(0);
        // 2. Wait until every transaction that may hold a number up to `position` has ended:
        //    they all got their transaction id before `fence` (assigned after the read), so
        //    once the oldest running transaction is at least `fence`, every row up to
        //    `position` is settled (committed, or never to appear).
        let fence = xact_fence(&mut client).await?;
        let mut settled = false;
        for _ in 0..3000 {
            let xmin: i64 = client
                .query_one(include_str!("feed/sql/snapshot_xmin.sql"), &[])
                .await?
                .get(0);
            if xmin as u64 >= fence {
                settled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !settled {
            return Err(StoreError::Unavailable(
                "a transaction has been open for over 30 s; the live feed waits for it to end"
                    .into(),
            ));
        }
        // 3. Count in one snapshot, and keep that snapshot to tell counted rows apart later:
        //    a read-only transaction of four round trips, bounded as a whole.
        let counted = {
            let object = client.object_mut()?;
            let count = async {
                let tx = object
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let snapshot: String = tx
                    .query_one(include_str!("feed/sql/current_snapshot.sql"), &[])
                    .await?
                    .get(0);
                let rows = tx
                    .query(include_str!("feed/sql/count_items.sql"), &[])
                    .await?;
                let paused_rows = tx
                    .query(include_str!("feed/sql/paused_kinds.sql"), &[])
                    .await?;
                tx.commit().await?;
                Ok::<_, tokio_postgres::Error>((snapshot, rows, paused_rows))
            };
            tokio::time::timeout(ROUND_TRIP_TIMEOUT * 4, count).await
        };
        let (snapshot, rows, paused_rows) = match counted {
            Ok(answer) => answer.map_err(store_err)?,
            Err(_) => return Err(client.silent("the live feed's count")),
        };
        let paused = paused_rows
            .iter()
            .map(|r| r.get::<_, String>(0).parse::<Kind>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| internal(format!("{e}")))?;
        Ok(FeedStart {
            counts: depth_counts(&rows)?,
            paused,
            snapshot,
            position,
        })
    }

    async fn read_after(
        &self,
        after: i64,
        snapshot: &str,
        limit: i64,
    ) -> Result<(Vec<LedgerEvent>, ReadHorizon), StoreError> {
        let mut client = self.reader().await?;
        let stmt = client
            .prepare_cached(include_str!("feed/sql/read_after.sql"))
            .await?;
        let rows = client.query(&stmt, &[&after, &snapshot, &limit]).await?;
        let first = rows.first().ok_or_else(|| internal("no horizon row"))?;
        let horizon = ReadHorizon {
            xmin: first.get::<_, i64>(0) as u64,
            xmax: first.get::<_, i64>(1) as u64,
        };
        let events: Vec<LedgerEvent> = rows
            .iter()
            .filter(|r| r.get::<_, Option<i64>>(2).is_some())
            .map(|r| event_from_row(r, 2, r.get(12)))
            .collect();
        // A gap: its holder got its transaction id before this read; a fence taken now is
        // above it. (The snapshot's own xmax is not: it is the newest *finished* id + 1, and
        // a transaction still running above it is not listed at all.)
        let contiguous = events
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == after + 1 + i as i64);
        let mut horizon = horizon;
        if !contiguous {
            horizon.xmax = xact_fence(&mut client).await?;
        }
        Ok((events, horizon))
    }

    async fn backlog(&self, after: i64, through: i64) -> Result<Vec<LedgerEvent>, StoreError> {
        let mut client = self.reader().await?;
        let rows = client
            .query(include_str!("feed/sql/backlog.sql"), &[&after, &through])
            .await?;
        Ok(rows.iter().map(|r| event_from_row(r, 0, true)).collect())
    }

    async fn removed_counts(&self) -> Result<DepthCounts, StoreError> {
        let mut client = self.reader().await?;
        let rows = client
            .query(include_str!("feed/sql/removed_counts.sql"), &[])
            .await?;
        depth_counts(&rows)
    }

    async fn newest_seq(&self) -> Result<i64, StoreError> {
        let mut client = self.reader().await?;
        let row = client
            .query_one(include_str!("feed/sql/newest_seq.sql"), &[])
            .await?;
        Ok(row.get(0))
    }

    async fn archived_through(&self) -> Result<i64, StoreError> {
        let mut client = self.reader().await?;
        let row = client
            .query_one(include_str!("feed/sql/archived_through.sql"), &[])
            .await?;
        Ok(row.get(0))
    }
}
