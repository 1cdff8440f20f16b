//! [`PgLogbook`]: the `Logbook` and `LogbookTx` ports on PostgreSQL.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, join_all};
use muster_app::ports::{Inserted, Logbook, LogbookTx, NewItem, PoolStatus, StoreError};
use muster_app::views::{EditView, HealthView, HistoryEntry, ItemView};
use muster_domain::edit::{Edit, EditId, EditState};
use muster_domain::health::{HealthEvent, KindHealth, MAX_EVENTS_PER_KIND};
use muster_domain::{
    Fence, Item, ItemId, ItemState, Kind, LeaseGrant, LeaseId, LeaseOutcome, LeaseRecord, Priority,
};
use muster_ledger::{ChainHead, SealedEntry};
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};
use uuid::Uuid;

use crate::error::{pool_err, store_err};
use crate::hint::{Found, LeaseHints, Scan, Starts};

/// Logbook on a PostgreSQL connection pool.
#[derive(Clone)]
pub struct PgLogbook {
    pool: Pool,
    hints: Arc<LeaseHints>,
}

impl std::fmt::Debug for PgLogbook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLogbook")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl PgLogbook {
    pub fn new(pool: Pool) -> Self {
        PgLogbook {
            pool,
            hints: Arc::default(),
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Whether a connection can be had and answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let c = self.pool.get().await.map_err(pool_err)?;
        c.simple_query("SELECT 1").await.map_err(store_err)?;
        Ok(())
    }
}

/// The item columns every locking read returns, in the order [`item_from_row`] reads them.
const ITEM_COLS: &str = "i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id, \
     i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len, i.chain_head";
const ITEM_COL_COUNT: usize = 13;

fn internal(msg: impl Into<String>) -> StoreError {
    StoreError::Internal(msg.into())
}

fn item_from_row(row: &Row, at: usize) -> Result<Item, StoreError> {
    let kind: String = row.get(at + 1);
    let priority: i16 = row.get(at + 2);
    let state: String = row.get(at + 3);
    let attempt: i32 = row.get(at + 4);
    let fence: i64 = row.get(at + 5);
    let lease_id: Option<Uuid> = row.get(at + 6);
    let lease_worker: Option<String> = row.get(at + 7);
    let lease_expires_at: Option<OffsetDateTime> = row.get(at + 8);
    let chain_len: i64 = row.get(at + 11);
    let chain_head: Vec<u8> = row.get(at + 12);
    let lease = match (lease_id, lease_worker, lease_expires_at) {
        (Some(id), Some(worker_id), Some(expires_at)) => Some(LeaseGrant {
            lease_id: LeaseId(id),
            worker_id,
            expires_at,
        }),
        _ => None,
    };
    Ok(Item {
        id: ItemId(row.get(at)),
        kind: kind.parse().map_err(|e| internal(format!("{e}")))?,
        priority: Priority::from_rank(priority)
            .ok_or_else(|| internal(format!("bad priority {priority}")))?,
        state: state.parse().map_err(internal)?,
        attempt: u32::try_from(attempt).map_err(|_| internal("negative attempt"))?,
        fence: Fence(u64::try_from(fence).map_err(|_| internal("negative fence"))?),
        lease,
        not_before: row.get(at + 9),
        parked_digest: row.get(at + 10),
        chain: ChainHead {
            len: u64::try_from(chain_len).map_err(|_| internal("negative chain length"))?,
            hash: chain_head
                .try_into()
                .map_err(|_| internal("chain head is not 32 bytes"))?,
        },
    })
}

/// A `lock_leases` row: the lease's columns, then the item's.
fn lease_from_row(row: &Row) -> Result<(LeaseRecord, Item), StoreError> {
    let fence: i64 = row.get(2);
    let outcome: Option<String> = row.get(4);
    let digest: Option<Vec<u8>> = row.get(5);
    let outcome = match (outcome, digest) {
        (Some(kind), Some(digest)) => Some(LeaseOutcome {
            kind: kind.parse().map_err(internal)?,
            digest: digest
                .try_into()
                .map_err(|_| internal("outcome digest is not 32 bytes"))?,
            response: row.get::<_, Option<Value>>(6).unwrap_or(Value::Null),
        }),
        _ => None,
    };
    let record = LeaseRecord {
        lease_id: LeaseId(row.get(0)),
        item_id: ItemId(row.get(1)),
        fence: Fence(u64::try_from(fence).map_err(|_| internal("negative fence"))?),
        worker_id: row.get(3),
        outcome,
    };
    Ok((record, item_from_row(row, 7)?))
}

fn fence_i64(f: Fence) -> Result<i64, StoreError> {
    i64::try_from(f.0).map_err(|_| internal("fence out of range"))
}

#[async_trait]
impl Logbook for PgLogbook {
    async fn begin(&self) -> Result<Box<dyn LogbookTx>, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        // BEGIN goes out with the first statement. The guard exists before it is sent: if a
        // future is dropped mid-pipeline, the guard's Drop rolls back (or discards the
        // connection) instead of pooling it in a transaction.
        Ok(Box::new(PgTx {
            client: Some(client),
            begun: false,
            deferred: Vec::new(),
            hints: Arc::clone(&self.hints),
        }))
    }

    async fn item_view(&self, id: ItemId) -> Result<Option<ItemView>, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let stmt = client
            .prepare_cached(
                "SELECT id, kind, priority, state, attempt, payload, result, not_before, created_at
                 FROM core.items WHERE id = $1",
            )
            .await
            .map_err(store_err)?;
        let Some(row) = client.query_opt(&stmt, &[&id.0]).await.map_err(store_err)? else {
            return Ok(None);
        };
        let kind: String = row.get(1);
        let priority: i16 = row.get(2);
        let state: String = row.get(3);
        let attempt: i32 = row.get(4);
        let history = client
            .query(
                "SELECT seq, at, event, from_state, to_state, actor, fence FROM core.ledger
                 WHERE subject_type = 'item' AND subject_id = $1 ORDER BY subject_seq",
                &[&id.to_string()],
            )
            .await
            .map_err(store_err)?
            .iter()
            .map(|r| HistoryEntry {
                seq: r.get(0),
                at: r.get(1),
                event: r.get(2),
                from: r.get(3),
                to: r.get(4),
                actor: r.get(5),
                fence: r.get::<_, Option<i64>>(6).map(|f| f as u64),
            })
            .collect();
        Ok(Some(ItemView {
            id: id.to_string(),
            kind: kind.parse().map_err(|e| internal(format!("{e}")))?,
            priority: Priority::from_rank(priority).ok_or_else(|| internal("bad priority"))?,
            state: state.parse().map_err(internal)?,
            attempt: attempt as u32,
            payload: row.get(5),
            result: row.get(6),
            not_before: row.get(7),
            created_at: row.get(8),
            history,
        }))
    }

    async fn store_health(
        &self,
        health: &[KindHealth],
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let stmt = client
            .prepare_cached(
                "INSERT INTO core.worker_health AS h (kind, pods, ready, restarts, phase, events, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (kind) DO UPDATE SET
                     pods = CASE WHEN EXCLUDED.pods > 0 THEN EXCLUDED.pods ELSE h.pods END,
                     ready = coalesce(EXCLUDED.ready, h.ready),
                     restarts = CASE WHEN EXCLUDED.pods > 0 THEN EXCLUDED.restarts ELSE h.restarts END,
                     phase = coalesce(EXCLUDED.phase, h.phase),
                     events = (SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb) FROM (
                                   SELECT e, n FROM jsonb_array_elements(h.events || EXCLUDED.events)
                                       WITH ORDINALITY AS t(e, n)
                                   ORDER BY n DESC LIMIT $8) newest),
                     updated_at = EXCLUDED.updated_at",
            )
            .await
            .map_err(store_err)?;
        let keep = MAX_EVENTS_PER_KIND as i64;
        for k in health {
            let events = Value::Array(k.events.iter().map(health_event_json).collect());
            client
                .execute(
                    &stmt,
                    &[
                        &k.kind.as_str(),
                        &(k.pods as i32),
                        &k.ready,
                        &(k.restarts as i32),
                        &k.phase,
                        &events,
                        &at,
                        &keep,
                    ],
                )
                .await
                .map_err(store_err)?;
        }
        Ok(())
    }

    async fn oldest_queued(&self) -> Result<Vec<(Kind, Priority, OffsetDateTime)>, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        let stmt = client
            .prepare_cached(
                "SELECT k, p, (SELECT i.enqueued_at FROM core.items i
                               WHERE i.kind = k AND i.priority = p AND i.state = 'queued'
                               ORDER BY i.enqueued_at LIMIT 1)
                 FROM unnest($1::text[]) AS k CROSS JOIN unnest('{0,1,2}'::int2[]) AS p",
            )
            .await
            .map_err(store_err)?;
        let rows = client.query(&stmt, &[&kinds]).await.map_err(store_err)?;
        let mut out = Vec::new();
        for r in &rows {
            let Some(at) = r.get::<_, Option<OffsetDateTime>>(2) else {
                continue;
            };
            let kind: Kind = r
                .get::<_, String>(0)
                .parse()
                .map_err(|e| internal(format!("{e}")))?;
            let priority = Priority::from_rank(r.get(1)).ok_or_else(|| internal("bad priority"))?;
            out.push((kind, priority, at));
        }
        Ok(out)
    }

    async fn pow_key(&self, candidate: [u8; 32]) -> Result<[u8; 32], StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        client
            .execute(
                "INSERT INTO core.intake_secrets (name, secret) VALUES ('pow_key', $1) ON CONFLICT (name) DO NOTHING",
                &[&candidate.as_slice()],
            )
            .await
            .map_err(store_err)?;
        let key: Vec<u8> = client
            .query_one(
                "SELECT secret FROM core.intake_secrets WHERE name = 'pow_key'",
                &[],
            )
            .await
            .map_err(store_err)?
            .get(0);
        key.try_into()
            .map_err(|_| internal("pow key is not 32 bytes"))
    }

    async fn list_edits(
        &self,
        state: EditState,
        after: Option<EditId>,
        limit: i64,
    ) -> Result<Vec<EditView>, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let rows = client
            .query(
                "SELECT id, target, owner, body, state, submitted_at FROM core.edits
                 WHERE state = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
                &[&state.as_str(), &after.map(|a| a.0), &limit],
            )
            .await
            .map_err(store_err)?;
        rows.iter()
            .map(|r| {
                let state: String = r.get(4);
                Ok(EditView {
                    edit_id: r.get::<_, uuid::Uuid>(0).to_string(),
                    target: r.get(1),
                    owner: r.get(2),
                    body: r.get(3),
                    state: state.parse().map_err(internal)?,
                    submitted_at: r.get(5),
                })
            })
            .collect()
    }

    async fn purge_intake(
        &self,
        today: time::Date,
        now: OffsetDateTime,
    ) -> Result<u64, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let mut n = 0;
        n += client
            .execute("DELETE FROM core.intake_counts WHERE day < $1", &[&today])
            .await
            .map_err(store_err)?;
        n += client
            .execute("DELETE FROM core.intake_salts WHERE day < $1", &[&today])
            .await
            .map_err(store_err)?;
        n += client
            .execute("DELETE FROM core.pow_spent WHERE expires_at <= $1", &[&now])
            .await
            .map_err(store_err)?;
        Ok(n)
    }

    fn pool_status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus {
            open: s.size as u64,
            idle: s.available as u64,
            max: s.max_size as u64,
            waiting: s.waiting as u64,
        }
    }

    async fn latest_health(&self) -> Result<Vec<HealthView>, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let rows = client
            .query("SELECT kind, ready, restarts, phase, events, updated_at FROM core.worker_health ORDER BY kind", &[])
            .await
            .map_err(store_err)?;
        rows.iter()
            .map(|r| {
                let kind: String = r.get(0);
                let events: Value = r.get(4);
                Ok(HealthView {
                    kind: kind.parse().map_err(|e| internal(format!("{e}")))?,
                    ready: r.get(1),
                    restarts: r.get::<_, i32>(2) as u32,
                    phase: r.get(3),
                    events: serde_json::from_value(events).map_err(|e| internal(e.to_string()))?,
                    at: r.get(5),
                })
            })
            .collect()
    }
}

fn health_event_json(e: &HealthEvent) -> Value {
    serde_json::json!({"kind": e.kind, "reason": e.reason, "message": e.message})
}

/// A statement parameter owned by a [`Deferred`] write until its pipeline is sent.
type Param = Box<dyn ToSql + Sync + Send>;

/// A write nobody waits for: it travels in the same pipeline as the next statement whose answer
/// is needed, or as the COMMIT, so that a use case's writes cost one round trip together.
///
/// Row-count expectations are checked by the database itself (`core.expect_rows`, V6), because
/// a COMMIT sent in the same pipeline must not commit a transaction whose write touched the wrong
/// rows: the failed check aborts the transaction, and the COMMIT then answers ROLLBACK.
struct Deferred {
    stmt: Statement,
    params: Vec<Param>,
}

/// What one statement of a pipeline answered.
enum Answer {
    Rows(Vec<Row>),
    Done,
    /// Not sent, because an earlier statement of the pipeline failed before it was sent.
    Withheld,
}

/// One transaction on one pooled connection. Dropped without `commit`, it is rolled back before
/// the connection can be used again.
///
/// BEGIN is not a round trip of its own: it is sent in one pipeline with the transaction's first
/// statement, and writes that answer nothing ([`Deferred`]) wait for the next statement. So a
/// lease is two round trips (BEGIN + lock; writes + COMMIT) and a completion three.
struct PgTx {
    client: Option<Object>,
    /// BEGIN has been sent: the connection is (or was) in a transaction.
    begun: bool,
    deferred: Vec<Deferred>,
    /// Where lease scans start (shared by every transaction of the logbook).
    hints: Arc<LeaseHints>,
}

impl PgTx {
    fn client(&self) -> &Object {
        self.client.as_ref().expect("transaction used after commit")
    }

    /// Sends BEGIN (once), every deferred write and then `last`, as one pipeline, and answers
    /// what each said, in order. A statement after a failed one is refused by the server
    /// (the transaction is aborted), so the first error is the one that matters.
    async fn pipeline(
        &mut self,
        last: Option<(&Statement, &[&(dyn ToSql + Sync)])>,
    ) -> Result<Vec<Result<Answer, tokio_postgres::Error>>, StoreError> {
        let c = self.client.as_ref().expect("transaction used after commit");
        let begin = if self.begun {
            None
        } else {
            Some(c.prepare_cached("BEGIN").await.map_err(store_err)?)
        };
        let deferred = std::mem::take(&mut self.deferred);
        let params: Vec<Vec<&(dyn ToSql + Sync)>> = deferred
            .iter()
            .map(|d| d.params.iter().map(|p| p.as_ref() as _).collect())
            .collect();
        // Set when a statement of this pipeline fails before it was sent: the driver encodes
        // the parameters on a statement's first poll and answers an error right there, without
        // sending it (a Rust value that does not fit the statement's parameter type). The
        // server never hears of that statement, so the transaction is not aborted and a COMMIT
        // behind it would commit the transaction without that write.
        let unsent = AtomicBool::new(false);
        let unsent = &unsent;
        let mut sent: Vec<BoxFuture<'_, Result<Answer, tokio_postgres::Error>>> =
            Vec::with_capacity(deferred.len() + 2);
        if let Some(begin) = &begin {
            sent.push(async move { c.execute(begin, &[]).await.map(|_| Answer::Done) }.boxed());
        }
        for (d, p) in deferred.iter().zip(&params) {
            sent.push(
                async move {
                    let answer = c.execute(&d.stmt, p).await.map(|_| Answer::Done);
                    if answer.is_err() {
                        unsent.store(true, Ordering::Relaxed);
                    }
                    answer
                }
                .boxed(),
            );
        }
        if let Some((stmt, p)) = last {
            sent.push(
                async move {
                    // First polled after every earlier statement's first poll (join_all polls
                    // in order): a write that failed unsent has set the flag by now, and one
                    // that failed in the server has not, but then the server aborted the
                    // transaction and answers this statement (or COMMIT) accordingly.
                    if unsent.load(Ordering::Relaxed) {
                        return Ok(Answer::Withheld);
                    }
                    c.query(stmt, p).await.map(Answer::Rows)
                }
                .boxed(),
            );
        }
        // From the first poll on, BEGIN may be on the wire even if this future is dropped: the
        // guard must roll back from here on.
        self.begun = true;
        // join_all polls the futures in order, so they enter the connection's queue in order
        // and go out in one write.
        let mut answers = join_all(sent).await;
        if begin.is_some() {
            answers.remove(0).map_err(store_err)?;
        }
        Ok(answers)
    }

    /// The lease statement of `lock_next_leasable`, each side started where `scan` says.
    async fn lease_scan(
        &mut self,
        kind: Kind,
        now: OffsetDateTime,
        limit: u32,
        payload_budget: u64,
        scan: Scan,
    ) -> Result<Vec<Row>, StoreError> {
        // Branch `s` reads priority `Priority::ALL[s]` from the hint's slot `s` (arrays count
        // from 1 in SQL).
        let branch = |s: usize, left: &str| {
            let (p, n) = (Priority::ALL[s].rank(), s + 1);
            format!(
                "q{s} AS (
                   SELECT {ITEM_COLS}, i.payload, i.enqueued_at FROM core.items i
                   WHERE i.kind = $1 AND i.priority = {p} AND i.state = 'queued'
                     AND (i.enqueued_at, i.id) >= (coalesce(($5::timestamptz[])[{n}], '-infinity'),
                                                   coalesce(($6::uuid[])[{n}], '{nil}'))
                     AND coalesce(i.not_before <= $2, true)
                   ORDER BY i.enqueued_at, i.id
                   LIMIT {left}
                   FOR UPDATE SKIP LOCKED
                 )",
                nil = Uuid::nil()
            )
        };
        let sql = format!(
            "WITH {q0}, {q1}, {q2},
             queued AS (TABLE q0 UNION ALL TABLE q1 UNION ALL TABLE q2),
             expired AS (
               SELECT {ITEM_COLS}, i.payload, i.enqueued_at FROM core.items i
               WHERE i.kind = $1 AND i.state = 'leased'
                 AND i.lease_expires_at >= coalesce($7::timestamptz, '-infinity')
                 AND i.lease_expires_at <= $2
               ORDER BY i.priority, i.enqueued_at, i.id
               LIMIT $3
               FOR UPDATE SKIP LOCKED
             )
             , picked AS (
               SELECT * FROM (TABLE queued UNION ALL TABLE expired) c
               ORDER BY c.priority, c.enqueued_at, c.id
               LIMIT $3
             )
             SELECT {ITEM_COLS},
                    CASE WHEN coalesce(sum(pg_column_size(i.payload)) OVER before, 0) < $4
                         THEN i.payload END,
                    i.enqueued_at,
                    (SELECT count(*) FROM expired)
             FROM picked i
             WINDOW before AS (ORDER BY i.priority, i.enqueued_at, i.id
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
             ORDER BY i.priority, i.enqueued_at, i.id",
            q0 = branch(0, "$3"),
            q1 = branch(1, "$3 - (SELECT count(*) FROM q0)"),
            q2 = branch(
                2,
                "$3 - (SELECT count(*) FROM q0) - (SELECT count(*) FROM q1)"
            ),
        );
        let budget = i64::try_from(payload_budget).unwrap_or(i64::MAX);
        let starts = scan.queued.map_or([None; 3], |h| h.at);
        let after: Vec<Option<OffsetDateTime>> = starts.iter().map(|s| s.map(|p| p.0)).collect();
        let after_id: Vec<Option<Uuid>> = starts.iter().map(|s| s.map(|p| p.1)).collect();
        let expired_from = scan.expired.map(|h| h.at);
        self.query(
            &sql,
            &[
                &kind.as_str(),
                &now,
                &i64::from(limit),
                &budget,
                &after,
                &after_id,
                &expired_from,
            ],
        )
        .await
    }

    async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let stmt = self.client().prepare_cached(sql).await.map_err(store_err)?;
        let mut answers = self.pipeline(Some((&stmt, params))).await?;
        let last = answers.pop();
        for answer in answers {
            answer.map_err(store_err)?;
        }
        match last {
            Some(Ok(Answer::Rows(rows))) => Ok(rows),
            Some(Err(e)) => Err(store_err(e)),
            Some(Ok(Answer::Done | Answer::Withheld)) | None => {
                Err(internal("pipeline lost its last answer"))
            }
        }
    }

    async fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), StoreError> {
        self.query(sql, params).await.map(drop)
    }

    /// Queues a write for the next pipeline. `sql` must not return rows the caller needs.
    async fn defer(&mut self, sql: &str, params: Vec<Param>) -> Result<(), StoreError> {
        let stmt = self.client().prepare_cached(sql).await.map_err(store_err)?;
        self.deferred.push(Deferred { stmt, params });
        Ok(())
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if !self.begun {
            // Nothing was sent: the connection is not in a transaction.
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if client.batch_execute("ROLLBACK").await.is_err() {
                        // The connection is unusable: keep it out of the pool.
                        drop(Object::take(client));
                    }
                });
            }
            // No runtime to roll back on: close the connection, which aborts the transaction.
            Err(_) => drop(Object::take(client)),
        }
    }
}

#[async_trait]
impl LogbookTx for PgTx {
    async fn insert_item(&mut self, new: &NewItem) -> Result<Inserted, StoreError> {
        let i = &new.item;
        let inserted = self
            .query(
                "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
                     payload, idempotency_key, parent_id, created_at, chain_len, chain_head)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $7, $11, $12)
                 ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
                 RETURNING id",
                &[
                    &i.id.0,
                    &i.kind.as_str(),
                    &i.priority.rank(),
                    &i.state.as_str(),
                    &(i.attempt as i32),
                    &fence_i64(i.fence)?,
                    &new.created_at,
                    &new.payload,
                    &new.idempotency_key,
                    &new.parent.map(|p| p.0),
                    &(i.chain.len as i64),
                    &i.chain.hash.as_slice(),
                ],
            )
            .await?;
        if !inserted.is_empty() {
            return Ok(Inserted::New);
        }
        let rows = self
            .query(
                "SELECT id, state FROM core.items WHERE kind = $1 AND idempotency_key = $2",
                &[&i.kind.as_str(), &new.idempotency_key],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| internal("idempotency conflict without an existing row"))?;
        let state: String = row.get(1);
        Ok(Inserted::Existing {
            id: ItemId(row.get(0)),
            state: state.parse().map_err(internal)?,
        })
    }

    async fn insert_items(&mut self, new: &[NewItem]) -> Result<(), StoreError> {
        let ids: Vec<Uuid> = new.iter().map(|n| n.item.id.0).collect();
        let kinds: Vec<String> = new
            .iter()
            .map(|n| n.item.kind.as_str().to_owned())
            .collect();
        let priorities: Vec<i16> = new.iter().map(|n| n.item.priority.rank()).collect();
        let states: Vec<String> = new
            .iter()
            .map(|n| n.item.state.as_str().to_owned())
            .collect();
        let at: Vec<OffsetDateTime> = new.iter().map(|n| n.created_at).collect();
        let payloads: Vec<Value> = new.iter().map(|n| n.payload.clone()).collect();
        let parents: Vec<Option<Uuid>> = new.iter().map(|n| n.parent.map(|p| p.0)).collect();
        let chain_len: Vec<i64> = new.iter().map(|n| n.item.chain.len as i64).collect();
        let heads: Vec<Vec<u8>> = new.iter().map(|n| n.item.chain.hash.to_vec()).collect();
        self.defer(
            "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
                 payload, parent_id, created_at, chain_len, chain_head)
             SELECT id, kind, priority, state, 0, 0, at, payload, parent, at, chain_len, head
             FROM unnest($1::uuid[], $2::text[], $3::int2[], $4::text[], $5::timestamptz[],
                         $6::jsonb[], $7::uuid[], $8::int8[], $9::bytea[])
                  AS n(id, kind, priority, state, at, payload, parent, chain_len, head)",
            vec![
                Box::new(ids),
                Box::new(kinds),
                Box::new(priorities),
                Box::new(states),
                Box::new(at),
                Box::new(payloads),
                Box::new(parents),
                Box::new(chain_len),
                Box::new(heads),
            ],
        )
        .await
    }

    async fn lock_next_leasable(
        &mut self,
        kind: Kind,
        now: OffsetDateTime,
        limit: u32,
        payload_budget: u64,
    ) -> Result<Vec<(Item, Option<Value>)>, StoreError> {
        // Queued items whose backoff is over (items_queued_order, in lease order) and leased
        // items whose lease expired (items_lease_expiry, read only up to `now`), merged in
        // lease order: items under a live lease are never visited (V8). Rows another lease
        // request holds are skipped, and READ COMMITTED re-checks each condition on the newest
        // row version after locking, so an item can never be handed to two live leases. When
        // both sides find rows, up to `limit` more are locked than answered; they stay untouched
        // and are free again at the end of this short transaction. The payload budget counts
        // `pg_column_size` (the stored, possibly compressed size: O(1), no detoasting), over the
        // items before each one in lease order.
        //
        // The queued side is one index range per priority, each starting at the kind's lease
        // hint for it (`crate::hint`: past the dead head of the index), each asked only for
        // what the higher priorities left of `limit` (a LIMIT of 0 reads nothing); the expired
        // side reads from the hint's bound up to `now`.
        let mut scan = self.hints.starts(kind, now);
        let mut rows = self
            .lease_scan(kind, now, limit, payload_budget, scan)
            .await?;
        if scan.queued.is_some() && rows.len() < limit as usize {
            // Short behind a hint: whatever lies before the hint gets its chance now.
            scan = Scan::FROM_START;
            rows = self
                .lease_scan(kind, now, limit, payload_budget, scan)
                .await?;
        }
        let mut firsts: Starts = [None; 3];
        let mut expired_taken = 0;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let item = item_from_row(row, 0)?;
            if item.state == ItemState::Queued {
                // Rows come in lease order: the first of each priority is where it begins.
                let slot = Priority::ALL.iter().position(|p| *p == item.priority);
                if let Some(first) = slot.and_then(|s| firsts.get_mut(s)) {
                    first.get_or_insert((row.get(ITEM_COL_COUNT + 1), item.id.0));
                }
            }
            let payload: Option<Value> = row.get(ITEM_COL_COUNT);
            if item.state != ItemState::Queued && payload.is_some() {
                // Only an expired lease that comes with its payload is leased now; one past
                // the payload budget is left for the next transaction and must stay in reach.
                expired_taken += 1;
            }
            items.push((item, payload));
        }
        // Every row carries how many expired leases the statement locked (none: no rows).
        let expired_found: i64 = rows.first().map_or(0, |r| r.get(ITEM_COL_COUNT + 2));
        let found = Found {
            full: rows.len() >= limit as usize,
            firsts,
            expired_all_taken: expired_found < i64::from(limit) && expired_found == expired_taken,
        };
        self.hints.record(kind, now, scan, found);
        Ok(items)
    }

    async fn lock_item(&mut self, id: ItemId) -> Result<Option<Item>, StoreError> {
        let sql = format!("SELECT {ITEM_COLS} FROM core.items i WHERE i.id = $1 FOR UPDATE");
        let rows = self.query(&sql, &[&id.0]).await?;
        rows.first().map(|r| item_from_row(r, 0)).transpose()
    }

    async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<(LeaseRecord, Item)>, StoreError> {
        Ok(self.lock_leases(&[id]).await?.into_iter().next())
    }

    async fn lock_leases(
        &mut self,
        ids: &[LeaseId],
    ) -> Result<Vec<(LeaseRecord, Item)>, StoreError> {
        let ids: Vec<Uuid> = ids.iter().map(|id| id.0).collect();
        // Locked in item order: the LockRows step runs above the sort.
        let sql = format!(
            "SELECT l.id, l.item_id, l.fence, l.worker_id, l.outcome, l.outcome_digest, l.response,
                    {ITEM_COLS}
             FROM core.leases l JOIN core.items i ON i.id = l.item_id
             WHERE l.id = ANY($1)
             ORDER BY i.id, l.id
             FOR UPDATE OF i, l"
        );
        let rows = self.query(&sql, &[&ids]).await?;
        rows.iter().map(lease_from_row).collect()
    }

    async fn save_item(&mut self, item: &Item) -> Result<(), StoreError> {
        self.save_items(&[(item.clone(), None)]).await
    }

    async fn save_item_with_result(
        &mut self,
        item: &Item,
        result: &Value,
    ) -> Result<(), StoreError> {
        self.save_items(&[(item.clone(), Some(result.clone()))])
            .await
    }

    async fn save_items(&mut self, items: &[(Item, Option<Value>)]) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let col = |f: &dyn Fn(&Item) -> Option<String>| -> Param {
            Box::new(items.iter().map(|(i, _)| f(i)).collect::<Vec<_>>())
        };
        let fences = items
            .iter()
            .map(|(i, _)| fence_i64(i.fence))
            .collect::<Result<Vec<_>, _>>()?;
        let params: Vec<Param> = vec![
            Box::new(items.iter().map(|(i, _)| i.id.0).collect::<Vec<_>>()),
            col(&|i| Some(i.state.as_str().to_owned())),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.attempt as i32)
                    .collect::<Vec<_>>(),
            ),
            Box::new(fences),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.lease.as_ref().map(|l| l.lease_id.0))
                    .collect::<Vec<_>>(),
            ),
            col(&|i| i.lease.as_ref().map(|l| l.worker_id.clone())),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.lease.as_ref().map(|l| l.expires_at))
                    .collect::<Vec<_>>(),
            ),
            Box::new(items.iter().map(|(i, _)| i.not_before).collect::<Vec<_>>()),
            col(&|i| i.parked_digest.clone()),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.chain.len as i64)
                    .collect::<Vec<_>>(),
            ),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.chain.hash.to_vec())
                    .collect::<Vec<_>>(),
            ),
            Box::new(items.iter().map(|(_, r)| r.is_some()).collect::<Vec<_>>()),
            Box::new(items.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>()),
            Box::new(items.len() as i64),
        ];
        // Every row is locked by this transaction and items are never deleted: all of them
        // are there, once each.
        self.defer(
            "WITH w AS (
                 UPDATE core.items i SET state = u.state, attempt = u.attempt, fence = u.fence,
                     lease_id = u.lease_id, lease_worker = u.lease_worker,
                     lease_expires_at = u.lease_expires_at, not_before = u.not_before,
                     parked_digest = u.parked_digest, chain_len = u.chain_len,
                     chain_head = u.chain_head,
                     result = CASE WHEN u.has_result THEN u.result ELSE i.result END
                 FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::int8[], $5::uuid[],
                             $6::text[], $7::timestamptz[], $8::timestamptz[], $9::text[],
                             $10::int8[], $11::bytea[], $12::bool[], $13::jsonb[])
                      AS u(id, state, attempt, fence, lease_id, lease_worker, lease_expires_at,
                           not_before, parked_digest, chain_len, chain_head, has_result, result)
                 WHERE i.id = u.id
                 RETURNING 1)
             SELECT core.expect_rows('saving items', count(*), $14) FROM w",
            params,
        )
        .await
    }

    async fn insert_lease(
        &mut self,
        lease: &LeaseRecord,
        kind: Kind,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.insert_leases(std::slice::from_ref(lease), kind, at)
            .await
    }

    async fn insert_leases(
        &mut self,
        leases: &[LeaseRecord],
        kind: Kind,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        if leases.is_empty() {
            return Ok(());
        }
        let fences = leases
            .iter()
            .map(|l| fence_i64(l.fence))
            .collect::<Result<Vec<_>, _>>()?;
        self.defer(
            "INSERT INTO core.leases (id, item_id, kind, fence, worker_id, leased_at)
             SELECT u.id, u.item_id, $3, u.fence, u.worker_id, $5
             FROM unnest($1::uuid[], $2::uuid[], $4::int8[], $6::text[])
                  AS u(id, item_id, fence, worker_id)",
            vec![
                Box::new(leases.iter().map(|l| l.lease_id.0).collect::<Vec<_>>()),
                Box::new(leases.iter().map(|l| l.item_id.0).collect::<Vec<_>>()),
                Box::new(kind.as_str()),
                Box::new(fences),
                Box::new(at),
                Box::new(
                    leases
                        .iter()
                        .map(|l| l.worker_id.clone())
                        .collect::<Vec<_>>(),
                ),
            ],
        )
        .await
    }

    async fn finish_lease(
        &mut self,
        id: LeaseId,
        outcome: &LeaseOutcome,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.finish_leases(&[(id, outcome.clone())], at).await
    }

    async fn finish_leases(
        &mut self,
        outcomes: &[(LeaseId, LeaseOutcome)],
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        // A lease is finished once: each row is locked (`lock_leases`) and was unfinished.
        self.defer(
            "WITH w AS (
                 UPDATE core.leases l
                 SET outcome = u.outcome, outcome_digest = u.digest, response = u.response,
                     finished_at = $5
                 FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::jsonb[])
                      AS u(id, outcome, digest, response)
                 WHERE l.id = u.id AND l.outcome IS NULL
                 RETURNING 1)
             SELECT core.expect_rows('finishing leases', count(*), $6) FROM w",
            vec![
                Box::new(outcomes.iter().map(|(id, _)| id.0).collect::<Vec<_>>()),
                Box::new(
                    outcomes
                        .iter()
                        .map(|(_, o)| o.kind.as_str())
                        .collect::<Vec<_>>(),
                ),
                Box::new(
                    outcomes
                        .iter()
                        .map(|(_, o)| o.digest.to_vec())
                        .collect::<Vec<_>>(),
                ),
                Box::new(
                    outcomes
                        .iter()
                        .map(|(_, o)| o.response.clone())
                        .collect::<Vec<_>>(),
                ),
                Box::new(at),
                Box::new(outcomes.len() as i64),
            ],
        )
        .await
    }

    async fn day_salt(
        &mut self,
        day: time::Date,
        candidate: [u8; 32],
    ) -> Result<[u8; 32], StoreError> {
        self.execute(
            "INSERT INTO core.intake_salts (day, salt) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING",
            &[&day, &candidate.as_slice()],
        )
        .await?;
        let rows = self
            .query("SELECT salt FROM core.intake_salts WHERE day = $1", &[&day])
            .await?;
        let salt: Vec<u8> = rows
            .first()
            .ok_or_else(|| internal("no salt for the day"))?
            .get(0);
        salt.try_into()
            .map_err(|_| internal("salt is not 32 bytes"))
    }

    async fn count_submission(
        &mut self,
        day: time::Date,
        client_hash: [u8; 32],
        limit: u32,
    ) -> Result<bool, StoreError> {
        let rows = self
            .query(
                "INSERT INTO core.intake_counts AS c (day, client_hash, count) VALUES ($1, $2, 1)
                 ON CONFLICT (day, client_hash) DO UPDATE SET count = c.count + 1 WHERE c.count < $3
                 RETURNING count",
                &[&day, &client_hash.as_slice(), &(limit as i32)],
            )
            .await?;
        Ok(!rows.is_empty() && limit > 0)
    }

    async fn spend_challenge(
        &mut self,
        spend_key: [u8; 32],
        expires_at: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        let rows = self
            .query(
                "INSERT INTO core.pow_spent (spend_key, expires_at) VALUES ($1, $2)
                 ON CONFLICT (spend_key) DO NOTHING RETURNING 1",
                &[&spend_key.as_slice(), &expires_at],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn insert_edit(
        &mut self,
        edit: &Edit,
        body: &str,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO core.edits (id, target, owner, body, state, submitted_at, chain_len, chain_head)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[&edit.id.0, &edit.target, &edit.owner, &body, &edit.state.as_str(), &at, &(edit.chain.len as i64), &edit.chain.hash.as_slice()],
        )
        .await?;
        Ok(())
    }

    async fn lock_edit(&mut self, id: EditId) -> Result<Option<Edit>, StoreError> {
        let rows = self
            .query("SELECT id, target, owner, state, chain_len, chain_head FROM core.edits WHERE id = $1 FOR UPDATE", &[&id.0])
            .await?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let state: String = r.get(3);
        let head: Vec<u8> = r.get(5);
        Ok(Some(Edit {
            id: EditId(r.get(0)),
            target: r.get(1),
            owner: r.get(2),
            state: state.parse().map_err(internal)?,
            chain: ChainHead {
                len: r.get::<_, i64>(4) as u64,
                hash: head
                    .try_into()
                    .map_err(|_| internal("chain head is not 32 bytes"))?,
            },
        }))
    }

    async fn save_edit(&mut self, edit: &Edit, at: OffsetDateTime) -> Result<(), StoreError> {
        self.execute(
            "UPDATE core.edits SET state = $2, decided_at = $3, chain_len = $4, chain_head = $5 WHERE id = $1",
            &[&edit.id.0, &edit.state.as_str(), &at, &(edit.chain.len as i64), &edit.chain.hash.as_slice()],
        )
        .await?;
        Ok(())
    }

    async fn record_digest(
        &mut self,
        kind: Kind,
        digest: &str,
        at: OffsetDateTime,
    ) -> Result<Option<String>, StoreError> {
        // Exclusive against parks of the kind (which take the shared form), also before the
        // kind's first report, when there is no digest row to lock yet.
        self.query(
            "SELECT pg_advisory_xact_lock(hashtext('muster-digest:' || $1))::text",
            &[&kind.as_str()],
        )
        .await?;
        let rows = self
            .query(
                "WITH previous AS (SELECT digest FROM core.worker_digests WHERE kind = $1 FOR UPDATE)
                 INSERT INTO core.worker_digests (kind, digest, reported_at) VALUES ($1, $2, $3)
                 ON CONFLICT (kind) DO UPDATE SET digest = EXCLUDED.digest, reported_at = EXCLUDED.reported_at
                 RETURNING (SELECT digest FROM previous)",
                &[&kind.as_str(), &digest, &at],
            )
            .await?;
        Ok(rows.first().and_then(|r| r.get::<_, Option<String>>(0)))
    }

    async fn deployed_digest(&mut self, kind: Kind) -> Result<Option<String>, StoreError> {
        let rows = self
            .query(
                // The shared advisory lock orders a park against a concurrent digest report even
                // before the kind's first report, when there is no digest row to lock.
                "SELECT d.digest FROM (SELECT pg_advisory_xact_lock_shared(hashtext('muster-digest:' || $1))::text) g
                 LEFT JOIN core.worker_digests d ON d.kind = $1",
                &[&kind.as_str()],
            )
            .await?;
        Ok(rows.first().and_then(|r| r.get::<_, Option<String>>(0)))
    }

    async fn lock_parked(&mut self, kind: Kind, deployed: &str) -> Result<Vec<Item>, StoreError> {
        let sql = format!(
            "SELECT {ITEM_COLS} FROM core.items i
             WHERE i.kind = $1 AND i.state = 'needs_subtool' AND i.parked_digest IS DISTINCT FROM $2
             ORDER BY i.id
             FOR UPDATE"
        );
        let rows = self.query(&sql, &[&kind.as_str(), &deployed]).await?;
        rows.iter().map(|r| item_from_row(r, 0)).collect()
    }

    async fn append(&mut self, entries: &[SealedEntry]) -> Result<Vec<i64>, StoreError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let params = ledger_params(entries);
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as _).collect();
        let sql = format!(
            "WITH inserted AS ({LEDGER_INSERT} RETURNING seq, subject_type, subject_id, subject_seq)
             SELECT seq, subject_type, subject_id, subject_seq FROM inserted"
        );
        let rows = self.query(&sql, &refs).await?;
        let seqs: std::collections::HashMap<(&str, &str, i64), i64> = rows
            .iter()
            .map(|r| ((r.get(1), r.get(2), r.get(3)), r.get(0)))
            .collect();
        entries
            .iter()
            .map(|s| {
                let key = (
                    s.entry.subject_type.as_str(),
                    s.entry.subject_id.as_str(),
                    s.subject_seq as i64,
                );
                seqs.get(&key)
                    .copied()
                    .ok_or_else(|| internal("ledger insert returned no sequence for an entry"))
            })
            .collect()
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        if !self.begun && self.deferred.is_empty() {
            // Nothing was ever sent: there is no transaction to end.
            return Ok(());
        }
        let commit = self
            .client()
            .prepare_cached("COMMIT")
            .await
            .map_err(store_err)?;
        let mut answers = self.pipeline(Some((&commit, &[]))).await?;
        let committed = answers.pop();
        let first_error = answers.into_iter().find_map(Result::err);
        if let Some(Ok(Answer::Withheld)) = committed {
            // A write never reached the server: no COMMIT was sent, and dropping `self` rolls
            // the transaction back before the connection is used again.
            return Err(first_error
                .map(store_err)
                .unwrap_or_else(|| internal("COMMIT withheld without a failed write")));
        }
        let client = self.client.take().expect("committed twice");
        match committed {
            // A statement of the pipeline failed: the transaction was aborted and the COMMIT
            // answered ROLLBACK. The connection is out of the transaction and usable.
            Some(Ok(_)) => match first_error {
                Some(e) => Err(store_err(e)),
                None => Ok(()),
            },
            // The outcome of a COMMIT that failed in flight is unknown to us; the connection
            // is not trusted again.
            Some(Err(e)) => {
                drop(Object::take(client));
                Err(store_err(first_error.unwrap_or(e)))
            }
            None => {
                drop(Object::take(client));
                Err(internal("pipeline lost the COMMIT's answer"))
            }
        }
    }

    async fn append_and_commit(
        mut self: Box<Self>,
        entries: &[SealedEntry],
    ) -> Result<(), StoreError> {
        if !entries.is_empty() {
            self.defer(LEDGER_INSERT, ledger_params(entries)).await?;
        }
        self.commit().await
    }
}

/// Inserts the rows of [`ledger_params`] in their order, with each item's kind and priority for
/// the live feed.
const LEDGER_INSERT: &str = "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event,
         from_state, to_state, actor, fence, at, data, prev_hash, hash, kind, priority)
     SELECT e.t, e.id, e.sq, e.ev, e.fr, e.tt, e.ac, e.fe, e.at, e.da, e.pr, e.ha,
            i.kind, i.priority
     FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::text[],
                 $7::text[], $8::int8[], $9::timestamptz[], $10::text[], $11::bytea[],
                 $12::bytea[], $13::int4[])
          AS e(t, id, sq, ev, fr, tt, ac, fe, at, da, pr, ha, ord)
     LEFT JOIN core.items i ON i.id = CASE WHEN e.t = 'item' THEN e.id::uuid END
     ORDER BY e.ord";

/// The thirteen column arrays of [`LEDGER_INSERT`].
fn ledger_params(entries: &[SealedEntry]) -> Vec<Param> {
    let column = |f: &dyn Fn(&SealedEntry) -> Option<String>| -> Param {
        Box::new(entries.iter().map(f).collect::<Vec<Option<String>>>())
    };
    let n = entries.len();
    vec![
        column(&|s| Some(s.entry.subject_type.clone())),
        column(&|s| Some(s.entry.subject_id.clone())),
        Box::new(
            entries
                .iter()
                .map(|s| s.subject_seq as i64)
                .collect::<Vec<_>>(),
        ),
        column(&|s| Some(s.entry.event.clone())),
        column(&|s| s.entry.from_state.clone()),
        column(&|s| s.entry.to_state.clone()),
        column(&|s| Some(s.entry.actor.clone())),
        Box::new(
            entries
                .iter()
                .map(|s| s.entry.fence.map(|f| f as i64))
                .collect::<Vec<_>>(),
        ),
        Box::new(entries.iter().map(|s| s.entry.at).collect::<Vec<_>>()),
        column(&|s| Some(s.entry.data.clone())),
        Box::new(
            entries
                .iter()
                .map(|s| s.prev_hash.to_vec())
                .collect::<Vec<_>>(),
        ),
        Box::new(entries.iter().map(|s| s.hash.to_vec()).collect::<Vec<_>>()),
        Box::new((0..n as i32).collect::<Vec<i32>>()),
    ]
}

// Keep the state names in one place: the CHECK constraint in V1 lists these.
const _: [ItemState; 5] = ItemState::ALL;

#[async_trait]
impl muster_app::ports::Readiness for PgLogbook {
    async fn check(&self) -> Result<(), String> {
        self.ping().await.map_err(|e| e.to_string())?;
        match crate::schema_status(&self.pool)
            .await
            .map_err(|e| e.to_string())?
        {
            crate::SchemaStatus::Current => Ok(()),
            crate::SchemaStatus::Behind { applied, expected } => Err(format!(
                "the schema is at migration {applied}, this binary needs {expected}: run `muster migrate`"
            )),
            // Migrations expand before they contract: one drops only what the previous release no
            // longer reads (V9 drops the index V8 replaced), so a binary one release behind
            // keeps serving while the new release rolls out, and a rollback stays possible.
            crate::SchemaStatus::Ahead { applied, expected } => {
                tracing::warn!(
                    applied,
                    expected,
                    "the schema is newer than this binary; serving (a migration drops only what the previous release no longer reads)"
                );
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Param, PgLogbook, PgTx};
    use muster_app::ports::LogbookTx;

    async fn tx_on(logbook: &PgLogbook) -> PgTx {
        PgTx {
            client: Some(logbook.pool().get().await.expect("connection")),
            begun: false,
            deferred: Vec::new(),
            hints: std::sync::Arc::clone(&logbook.hints),
        }
    }

    /// A table of its own, and a transaction that defers `before` writes to it, then one whose
    /// parameter cannot be encoded for its column (an `int4` for a `text`), then one more.
    /// Above 30 statements the pipeline's futures are polled through `FuturesOrdered`.
    async fn unencodable_write_before_commit(before: usize) -> (muster_testkit::TestDb, PgTx) {
        let db = muster_testkit::fresh_db().await;
        db.client()
            .await
            .batch_execute("CREATE TABLE core.pipeline_probe (v text NOT NULL)")
            .await
            .expect("create table");
        let logbook = PgLogbook::new(db.pool());
        let mut tx = tx_on(&logbook).await;
        let sql = "INSERT INTO core.pipeline_probe (v) VALUES ($1)";
        for i in 0..before {
            let good: Vec<Param> = vec![Box::new(format!("written before {i}"))];
            tx.defer(sql, good).await.expect("defer");
        }
        let unencodable: Vec<Param> = vec![Box::new(7_i32)];
        tx.defer(sql, unencodable).await.expect("defer");
        let after: Vec<Param> = vec![Box::new("written after".to_owned())];
        tx.defer(sql, after).await.expect("defer");
        (db, tx)
    }

    #[tokio::test]
    async fn a_commit_behind_a_write_that_could_not_be_sent_reports_the_error() {
        let (_db, tx) = unencodable_write_before_commit(1).await;
        let err = Box::new(tx).commit().await.expect_err("the commit fails");
        assert!(
            err.to_string().contains("error serializing parameter 0"),
            "{err}"
        );
    }

    async fn rows_committed_after_a_write_that_could_not_be_sent(before: usize) -> i64 {
        let (db, tx) = unencodable_write_before_commit(before).await;
        let _ = Box::new(tx).commit().await;
        let rows = db
            .client()
            .await
            .query_one("SELECT count(*) FROM core.pipeline_probe", &[])
            .await
            .expect("count");
        rows.get(0)
    }

    #[tokio::test]
    async fn a_commit_behind_a_write_that_could_not_be_sent_commits_nothing() {
        assert_eq!(
            rows_committed_after_a_write_that_could_not_be_sent(1).await,
            0
        );
    }

    #[tokio::test]
    async fn a_commit_behind_forty_writes_and_one_that_could_not_be_sent_commits_nothing() {
        assert_eq!(
            rows_committed_after_a_write_that_could_not_be_sent(40).await,
            0
        );
    }
}
