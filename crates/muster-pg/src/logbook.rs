//! [`PgLogbook`]: the `Logbook` and `LogbookTx` ports on PostgreSQL.

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
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
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::error::{pool_err, store_err};

/// Logbook on a PostgreSQL connection pool.
#[derive(Clone)]
pub struct PgLogbook {
    pool: Pool,
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
        PgLogbook { pool }
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

fn fence_i64(f: Fence) -> Result<i64, StoreError> {
    i64::try_from(f.0).map_err(|_| internal("fence out of range"))
}

#[async_trait]
impl Logbook for PgLogbook {
    async fn begin(&self) -> Result<Box<dyn LogbookTx>, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        // The guard exists before BEGIN is sent: if this future is dropped mid-BEGIN, the
        // guard's Drop rolls back (or discards the connection) instead of pooling it in a
        // transaction.
        let tx = PgTx {
            client: Some(client),
        };
        tx.client()
            .batch_execute("BEGIN")
            .await
            .map_err(store_err)?;
        Ok(Box::new(tx))
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

/// One transaction on one pooled connection. Dropped without `commit`, it is rolled back before
/// the connection can be used again.
struct PgTx {
    client: Option<Object>,
}

impl PgTx {
    fn client(&self) -> &Object {
        self.client.as_ref().expect("transaction used after commit")
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let c = self.client();
        let stmt = c.prepare_cached(sql).await.map_err(store_err)?;
        c.query(&stmt, params).await.map_err(store_err)
    }

    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        let c = self.client();
        let stmt = c.prepare_cached(sql).await.map_err(store_err)?;
        c.execute(&stmt, params).await.map_err(store_err)
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
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
        let kinds: Vec<&str> = new.iter().map(|n| n.item.kind.as_str()).collect();
        let priorities: Vec<i16> = new.iter().map(|n| n.item.priority.rank()).collect();
        let states: Vec<&str> = new.iter().map(|n| n.item.state.as_str()).collect();
        let at: Vec<OffsetDateTime> = new.iter().map(|n| n.created_at).collect();
        let payloads: Vec<&Value> = new.iter().map(|n| &n.payload).collect();
        let parents: Vec<Option<Uuid>> = new.iter().map(|n| n.parent.map(|p| p.0)).collect();
        let chain_len: Vec<i64> = new.iter().map(|n| n.item.chain.len as i64).collect();
        let heads: Vec<&[u8]> = new.iter().map(|n| n.item.chain.hash.as_slice()).collect();
        self.execute(
            "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
                 payload, parent_id, created_at, chain_len, chain_head)
             SELECT id, kind, priority, state, 0, 0, at, payload, parent, at, chain_len, head
             FROM unnest($1::uuid[], $2::text[], $3::int2[], $4::text[], $5::timestamptz[],
                         $6::jsonb[], $7::uuid[], $8::int8[], $9::bytea[])
                  AS n(id, kind, priority, state, at, payload, parent, chain_len, head)",
            &[
                &ids,
                &kinds,
                &priorities,
                &states,
                &at,
                &payloads,
                &parents,
                &chain_len,
                &heads,
            ],
        )
        .await?;
        Ok(())
    }

    async fn lock_next_leasable(
        &mut self,
        kind: Kind,
        now: OffsetDateTime,
    ) -> Result<Option<(Item, Value)>, StoreError> {
        // Walks items_lease_order (kind, priority, enqueued_at): queued items whose backoff is
        // over and leased items whose lease expired. Rows another lease request holds are
        // skipped, and READ COMMITTED re-checks the condition on the newest row version after
        // locking, so an item can never be handed to two live leases.
        let sql = format!(
            "SELECT {ITEM_COLS}, i.payload FROM core.items i
             WHERE i.kind = $1 AND i.state IN ('queued', 'leased')
               AND CASE WHEN i.state = 'queued' THEN coalesce(i.not_before <= $2, true)
                        ELSE i.lease_expires_at <= $2 END
             ORDER BY i.priority, i.enqueued_at, i.id
             LIMIT 1
             FOR UPDATE SKIP LOCKED"
        );
        let rows = self.query(&sql, &[&kind.as_str(), &now]).await?;
        match rows.first() {
            Some(row) => Ok(Some((item_from_row(row, 0)?, row.get(ITEM_COL_COUNT)))),
            None => Ok(None),
        }
    }

    async fn lock_item(&mut self, id: ItemId) -> Result<Option<Item>, StoreError> {
        let sql = format!("SELECT {ITEM_COLS} FROM core.items i WHERE i.id = $1 FOR UPDATE");
        let rows = self.query(&sql, &[&id.0]).await?;
        rows.first().map(|r| item_from_row(r, 0)).transpose()
    }

    async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<(LeaseRecord, Item)>, StoreError> {
        let sql = format!(
            "SELECT l.id, l.item_id, l.fence, l.worker_id, l.outcome, l.outcome_digest, l.response,
                    {ITEM_COLS}
             FROM core.leases l JOIN core.items i ON i.id = l.item_id
             WHERE l.id = $1
             FOR UPDATE OF i, l"
        );
        let rows = self.query(&sql, &[&id.0]).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
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
            fence: Fence(fence as u64),
            worker_id: row.get(3),
            outcome,
        };
        Ok(Some((record, item_from_row(row, 7)?)))
    }

    async fn save_item(&mut self, item: &Item) -> Result<(), StoreError> {
        self.update_item(item, None).await
    }

    async fn save_item_with_result(
        &mut self,
        item: &Item,
        result: &Value,
    ) -> Result<(), StoreError> {
        self.update_item(item, Some(result)).await
    }

    async fn insert_lease(
        &mut self,
        lease: &LeaseRecord,
        kind: Kind,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO core.leases (id, item_id, kind, fence, worker_id, leased_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &lease.lease_id.0,
                &lease.item_id.0,
                &kind.as_str(),
                &fence_i64(lease.fence)?,
                &lease.worker_id,
                &at,
            ],
        )
        .await?;
        Ok(())
    }

    async fn finish_lease(
        &mut self,
        id: LeaseId,
        outcome: &LeaseOutcome,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let n = self
            .execute(
                "UPDATE core.leases SET outcome = $2, outcome_digest = $3, response = $4, finished_at = $5
                 WHERE id = $1 AND outcome IS NULL",
                &[&id.0, &outcome.kind.as_str(), &outcome.digest.as_slice(), &outcome.response, &at],
            )
            .await?;
        if n != 1 {
            return Err(internal(format!("lease {id} was already finished")));
        }
        Ok(())
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
        let n = entries.len();
        let mut types = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        let mut seqs = Vec::with_capacity(n);
        let mut events = Vec::with_capacity(n);
        let mut froms = Vec::with_capacity(n);
        let mut tos = Vec::with_capacity(n);
        let mut actors = Vec::with_capacity(n);
        let mut fences: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut ats = Vec::with_capacity(n);
        let mut datas = Vec::with_capacity(n);
        let mut prevs = Vec::with_capacity(n);
        let mut hashes = Vec::with_capacity(n);
        for (i, s) in entries.iter().enumerate() {
            let e = &s.entry;
            types.push(e.subject_type.as_str());
            ids.push(e.subject_id.as_str());
            seqs.push(s.subject_seq as i64);
            events.push(e.event.as_str());
            froms.push(e.from_state.as_deref());
            tos.push(e.to_state.as_deref());
            actors.push(e.actor.as_str());
            fences.push(e.fence.map(|f| f as i64));
            ats.push(e.at);
            datas.push(e.data.as_str());
            prevs.push(s.prev_hash.as_slice());
            hashes.push(s.hash.as_slice());
            debug_assert_eq!(types.len(), i + 1);
        }
        let ords: Vec<i32> = (0..n as i32).collect();
        let rows = self
            .query(
                "WITH inserted AS (
                     INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, from_state,
                         to_state, actor, fence, at, data, prev_hash, hash, kind, priority)
                     SELECT e.t, e.id, e.sq, e.ev, e.fr, e.tt, e.ac, e.fe, e.at, e.da, e.pr, e.ha,
                            i.kind, i.priority
                     FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[], $6::text[],
                                 $7::text[], $8::int8[], $9::timestamptz[], $10::text[], $11::bytea[],
                                 $12::bytea[], $13::int4[])
                          AS e(t, id, sq, ev, fr, tt, ac, fe, at, da, pr, ha, ord)
                     LEFT JOIN core.items i ON i.id = CASE WHEN e.t = 'item' THEN e.id::uuid END
                     ORDER BY e.ord
                     RETURNING seq, subject_type, subject_id, subject_seq)
                 SELECT seq, subject_type, subject_id, subject_seq FROM inserted",
                &[&types, &ids, &seqs, &events, &froms, &tos, &actors, &fences, &ats, &datas, &prevs, &hashes, &ords],
            )
            .await?;
        entries
            .iter()
            .map(|s| {
                rows.iter()
                    .find(|r| {
                        r.get::<_, &str>(1) == s.entry.subject_type
                            && r.get::<_, &str>(2) == s.entry.subject_id
                            && r.get::<_, i64>(3) == s.subject_seq as i64
                    })
                    .map(|r| r.get::<_, i64>(0))
                    .ok_or_else(|| internal("ledger insert returned no sequence for an entry"))
            })
            .collect()
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        let client = self.client.take().expect("committed twice");
        match client.batch_execute("COMMIT").await {
            Ok(()) => Ok(()),
            Err(e) => {
                // The outcome of a COMMIT that failed in flight is unknown to us; the connection
                // is not trusted again.
                drop(Object::take(client));
                Err(store_err(e))
            }
        }
    }
}

impl PgTx {
    async fn update_item(&self, item: &Item, result: Option<&Value>) -> Result<(), StoreError> {
        let lease = item.lease.as_ref();
        let n = self
            .execute(
                "UPDATE core.items SET state = $2, attempt = $3, fence = $4, lease_id = $5,
                     lease_worker = $6, lease_expires_at = $7, not_before = $8, parked_digest = $9,
                     chain_len = $10, chain_head = $11,
                     result = CASE WHEN $12 THEN $13 ELSE result END
                 WHERE id = $1",
                &[
                    &item.id.0,
                    &item.state.as_str(),
                    &(item.attempt as i32),
                    &fence_i64(item.fence)?,
                    &lease.map(|l| l.lease_id.0),
                    &lease.map(|l| l.worker_id.as_str()),
                    &lease.map(|l| l.expires_at),
                    &item.not_before,
                    &item.parked_digest,
                    &(item.chain.len as i64),
                    &item.chain.hash.as_slice(),
                    &result.is_some(),
                    &result,
                ],
            )
            .await?;
        if n != 1 {
            return Err(internal(format!("item {} vanished", item.id)));
        }
        Ok(())
    }
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
            // Migrations only ever add (expand before contract), so a binary one release behind
            // keeps serving while the new release rolls out, and a rollback stays possible.
            crate::SchemaStatus::Ahead { applied, expected } => {
                tracing::warn!(
                    applied,
                    expected,
                    "the schema is newer than this binary; serving (migrations are additive)"
                );
                Ok(())
            }
        }
    }
}
