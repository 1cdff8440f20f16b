//! Leases: the lease statement (with its hints) and the lease records.

use async_trait::async_trait;
use muster_app::ports::{FinalGrace, LeaseStore, StoreError};
use muster_domain::{Item, ItemState, Kind, LeaseId, LeaseOutcome, LeaseRecord, Priority};
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::Row;
use uuid::Uuid;

use super::rows::{ITEM_COL_COUNT, ITEM_COLS, fence_i64, item_from_row, lease_from_row};
use super::tx::PgTx;

/// The lease columns before the item's in `lock_leases`.
const LEASE_COL_COUNT: usize = 7;
use crate::hint::{Found, Scan, Starts};

impl PgTx {
    /// The lease statement of `lock_next_leasable`, each side started where `scan` says.
    async fn lease_scan(
        &mut self,
        kind: Kind,
        now: OffsetDateTime,
        limit: u32,
        payload_budget: u64,
        final_grace: FinalGrace,
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
                 AND (i.attempt < $8 OR i.lease_expires_at <= $9)
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
        // An item on its last attempt is taken over only once its lease expired the final
        // grace ago (`FinalGrace`). Such an item waiting out its grace below a hint's bound is
        // skipped until the hint lapses (`HINT_TTL`).
        let max_attempts = i32::try_from(final_grace.max_attempts).unwrap_or(i32::MAX);
        let final_cutoff = now - final_grace.grace;
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
                &max_attempts,
                &final_cutoff,
            ],
        )
        .await
    }
}

#[async_trait]
impl LeaseStore for PgTx {
    async fn lock_next_leasable(
        &mut self,
        kind: Kind,
        now: OffsetDateTime,
        limit: u32,
        payload_budget: u64,
        final_grace: FinalGrace,
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
            .lease_scan(kind, now, limit, payload_budget, final_grace, scan)
            .await?;
        if scan.queued.is_some() && rows.len() < limit as usize {
            // Short behind a hint: whatever lies before the hint gets its chance now.
            scan = Scan::FROM_START;
            rows = self
                .lease_scan(kind, now, limit, payload_budget, final_grace, scan)
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

    async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<(LeaseRecord, Item)>, StoreError> {
        Ok(self.lock_leases(&[id]).await?.into_iter().next())
    }

    async fn lock_leases(
        &mut self,
        ids: &[LeaseId],
    ) -> Result<Vec<(LeaseRecord, Item)>, StoreError> {
        let ids: Vec<Uuid> = ids.iter().map(|id| id.0).collect();
        // Locked in item order: the LockRows step runs above the sort.
        // Each row also carries the transaction's `now()` (`LogbookTx::now` answers it then
        // without a statement of its own).
        let sql = format!(
            "SELECT l.id, l.item_id, l.fence, l.worker_id, l.outcome, l.outcome_digest, l.response,
                    {ITEM_COLS}, now()
             FROM core.leases l JOIN core.items i ON i.id = l.item_id
             WHERE l.id = ANY($1)
             ORDER BY i.id, l.id
             FOR UPDATE OF i, l"
        );
        let rows = self.query(&sql, &[&ids]).await?;
        if let Some(r) = rows.first() {
            self.now = Some(r.get(LEASE_COL_COUNT + ITEM_COL_COUNT));
        }
        rows.iter().map(lease_from_row).collect()
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
}
