//! The live feed's reads of the ledger (`FeedSource`).

use std::time::Duration;

use async_trait::async_trait;
use muster_app::ports::{FeedSource, FeedStart, LedgerEvent, StoreError};
use muster_domain::feed::ReadHorizon;
use muster_domain::{ItemState, Kind, Priority};
use tokio_postgres::Row;

use crate::PgLogbook;
use crate::error::{pool_err, store_err};

const EVENT_COLS: &str = "l.seq, l.subject_type, l.subject_id, l.kind, l.priority, l.from_state, l.to_state, l.actor, l.at, \
     CASE WHEN l.subject_type = 'edit' THEN l.data END";

fn event_from_row(r: &Row, at: usize, counted: bool) -> LedgerEvent {
    let kind: Option<String> = r.get(at + 3);
    let priority: Option<i16> = r.get(at + 4);
    LedgerEvent {
        seq: r.get(at),
        subject_type: r.get(at + 1),
        subject_id: r.get(at + 2),
        kind: kind.and_then(|k| k.parse().ok()),
        priority: priority.and_then(Priority::from_rank),
        from_state: r.get(at + 5),
        to_state: r.get(at + 6),
        actor: r.get(at + 7),
        at: r.get(at + 8),
        counted,
        target: r
            .get::<_, Option<String>>(at + 9)
            .and_then(|d| serde_json::from_str::<serde_json::Value>(&d).ok())
            .and_then(|d| d["target"].as_str().map(str::to_owned)),
    }
}

fn internal(msg: impl Into<String>) -> StoreError {
    StoreError::Internal(msg.into())
}

/// A transaction id greater than every id assigned before this call (it assigns one).
async fn xact_fence(client: &deadpool_postgres::Object) -> Result<u64, StoreError> {
    let id: i64 = client
        .query_one("SELECT pg_current_xact_id()::text::int8", &[])
        .await
        .map_err(store_err)?
        .get(0);
    Ok(id as u64)
}

#[async_trait]
impl FeedSource for PgLogbook {
    async fn start(&self) -> Result<FeedStart, StoreError> {
        let mut client = self.pool().get().await.map_err(pool_err)?;
        // 1. A position: the newest row visible now.
        let position: i64 = client
            .query_one(
                "SELECT coalesce((SELECT max(seq) FROM core.ledger), 0)",
                &[],
            )
            .await
            .map_err(store_err)?
            .get(0);
        // 2. Wait until every transaction that may hold a number up to `position` has ended:
        //    they all got their transaction id before `fence` (assigned after the read), so
        //    once the oldest running transaction is at least `fence`, every row up to
        //    `position` is settled (committed, or never to appear).
        let fence = xact_fence(&client).await?;
        let mut settled = false;
        for _ in 0..3000 {
            let xmin: i64 = client
                .query_one(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8",
                    &[],
                )
                .await
                .map_err(store_err)?
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
        // 3. Count in one snapshot, and keep that snapshot to tell counted rows apart later.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(store_err)?;
        let snapshot: String = tx
            .query_one("SELECT pg_current_snapshot()::text", &[])
            .await
            .map_err(store_err)?
            .get(0);
        let rows = tx
            .query(
                "SELECT kind, priority, state, count(*) FROM core.items GROUP BY 1, 2, 3",
                &[],
            )
            .await
            .map_err(store_err)?;
        tx.commit().await.map_err(store_err)?;
        let mut counts = Vec::with_capacity(rows.len());
        for r in &rows {
            let kind: Kind = r
                .get::<_, String>(0)
                .parse()
                .map_err(|e| internal(format!("{e}")))?;
            let priority = Priority::from_rank(r.get(1)).ok_or_else(|| internal("bad priority"))?;
            let state: ItemState = r.get::<_, String>(2).parse().map_err(internal)?;
            counts.push(((kind, priority, state), r.get::<_, i64>(3)));
        }
        Ok(FeedStart {
            counts,
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
        let client = self.pool().get().await.map_err(pool_err)?;
        // One statement, so the rows and the horizon come from the same snapshot.
        let sql = format!(
            "WITH h AS (SELECT pg_snapshot_xmin(s)::text::int8 AS xmin, pg_snapshot_xmax(s)::text::int8 AS xmax
                        FROM (SELECT pg_current_snapshot() AS s) cur)
             SELECT h.xmin, h.xmax, r.* FROM h LEFT JOIN LATERAL (
                 SELECT {EVENT_COLS}, pg_visible_in_snapshot(l.tx, $2::text::pg_snapshot) AS counted
                 FROM core.ledger l WHERE l.seq > $1 ORDER BY l.seq LIMIT $3) r ON true"
        );
        let stmt = client.prepare_cached(&sql).await.map_err(store_err)?;
        let rows = client
            .query(&stmt, &[&after, &snapshot, &limit])
            .await
            .map_err(store_err)?;
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
            horizon.xmax = xact_fence(&client).await?;
        }
        Ok((events, horizon))
    }

    async fn backlog(&self, after: i64, through: i64) -> Result<Vec<LedgerEvent>, StoreError> {
        let client = self.pool().get().await.map_err(pool_err)?;
        let sql = format!(
            "SELECT {EVENT_COLS} FROM core.ledger l WHERE l.seq > $1 AND l.seq <= $2 ORDER BY l.seq"
        );
        let rows = client
            .query(&sql, &[&after, &through])
            .await
            .map_err(store_err)?;
        Ok(rows.iter().map(|r| event_from_row(r, 0, true)).collect())
    }

    async fn newest_seq(&self) -> Result<i64, StoreError> {
        let client = self.pool().get().await.map_err(pool_err)?;
        let row = client
            .query_one("SELECT coalesce(max(seq), 0) FROM core.ledger", &[])
            .await
            .map_err(store_err)?;
        Ok(row.get(0))
    }
}
