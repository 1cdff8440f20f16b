//! Leases: the lease statement (with its hints) and the lease records.

use async_trait::async_trait;
use muster_app::ports::{Leasable, LeasableQuery, LeaseStore, LockedLease, StoreError};
use muster_domain::{Item, ItemState, Kind, LeaseId, LeaseOutcome, LeaseRecord, Priority};
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::rows::{ITEM_COL_COUNT, fence_i64, lease_from_row, traced_item_from_row};
use super::tx::PgTx;
use crate::hint::{Found, Scan, Starts};

/// When a scanned item became leasable, from what its row keeps: an expired lease at its
/// expiry; a queued item at its place in line (its enqueue, or its delay's end) or the end of
/// its backoff, whichever is later. A row keeps no time of a replay or an operator's retry
/// (both clear `not_before`): such an item counts from its place in line.
fn queued_since(item: &Item, enqueued_at: OffsetDateTime) -> OffsetDateTime {
    match (&item.lease, item.not_before) {
        (Some(lease), _) if item.state == ItemState::Leased => lease.expires_at,
        (_, Some(not_before)) => not_before.max(enqueued_at),
        _ => enqueued_at,
    }
}

/// The lease columns before the item's in `lock_leases`.
const LEASE_COL_COUNT: usize = 8;

/// The parameters of `sql/lease_scan.sql`, named and ordered as its header lists them.
struct LeaseScanParams {
    kind: &'static str,
    now: OffsetDateTime,
    limit: i64,
    payload_budget: i64,
    queued_starts_at: Vec<Option<OffsetDateTime>>,
    queued_starts_after: Vec<Option<Uuid>>,
    expired_starts_at: Option<OffsetDateTime>,
    max_attempts: i32,
    final_cutoff: OffsetDateTime,
}

impl LeaseScanParams {
    /// `wanted`, each side started where `scan` says.
    fn new(wanted: &LeasableQuery, scan: Scan) -> Self {
        let starts = scan.queued.map_or([None; 3], |h| h.at);
        // An item on its last attempt is taken over only once its lease expired the final
        // grace ago (`FinalGrace`). Such an item waiting out its grace below a hint's bound is
        // skipped until the hint lapses (`HINT_TTL`).
        let grace = wanted.final_grace;
        LeaseScanParams {
            kind: wanted.kind.as_str(),
            now: wanted.now,
            limit: i64::from(wanted.limit),
            payload_budget: i64::try_from(wanted.payload_budget).unwrap_or(i64::MAX),
            queued_starts_at: starts.iter().map(|s| s.map(|p| p.0)).collect(),
            queued_starts_after: starts.iter().map(|s| s.map(|p| p.1)).collect(),
            expired_starts_at: scan.expired.map(|h| h.at),
            max_attempts: i32::try_from(grace.max_attempts).unwrap_or(i32::MAX),
            final_cutoff: wanted.now - grace.grace,
        }
    }

    /// `$1` to `$9`.
    fn bind(&self) -> [&(dyn ToSql + Sync); 9] {
        [
            &self.kind,
            &self.now,
            &self.limit,
            &self.payload_budget,
            &self.queued_starts_at,
            &self.queued_starts_after,
            &self.expired_starts_at,
            &self.max_attempts,
            &self.final_cutoff,
        ]
    }
}

impl PgTx {
    /// The lease statement of `lock_next_leasable`, each side started where `scan` says.
    async fn lease_scan(
        &mut self,
        wanted: &LeasableQuery,
        scan: Scan,
    ) -> Result<Vec<Row>, StoreError> {
        let params = LeaseScanParams::new(wanted, scan);
        self.query(include_str!("sql/lease_scan.sql"), &params.bind())
            .await
    }
}

#[async_trait]
impl LeaseStore for PgTx {
    async fn lock_next_leasable(
        &mut self,
        wanted: LeasableQuery,
    ) -> Result<Vec<Leasable>, StoreError> {
        let LeasableQuery {
            kind, now, limit, ..
        } = wanted;
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
        let mut rows = self.lease_scan(&wanted, scan).await?;
        if scan.queued.is_some() && rows.len() < limit as usize {
            // Short behind a hint: whatever lies before the hint gets its chance now.
            scan = Scan::FROM_START;
            rows = self.lease_scan(&wanted, scan).await?;
        }
        let mut firsts: Starts = [None; 3];
        let mut expired_taken = 0;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let (item, trace) = traced_item_from_row(row, 0)?;
            let enqueued_at: OffsetDateTime = row.get(ITEM_COL_COUNT + 1);
            if item.state == ItemState::Queued {
                // Rows come in lease order: the first of each priority is where it begins.
                let slot = Priority::ALL.iter().position(|p| *p == item.priority);
                if let Some(first) = slot.and_then(|s| firsts.get_mut(s)) {
                    first.get_or_insert((enqueued_at, item.id.0));
                }
            }
            let payload: Option<Value> = row.get(ITEM_COL_COUNT);
            if item.state != ItemState::Queued && payload.is_some() {
                // Only an expired lease that comes with its payload is leased now; one past
                // the payload budget is left for the next transaction and must stay in reach.
                expired_taken += 1;
            }
            items.push(Leasable {
                queued_since: queued_since(&item, enqueued_at),
                item,
                payload,
                trace,
            });
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

    async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<LockedLease>, StoreError> {
        Ok(self.lock_leases(&[id]).await?.into_iter().next())
    }

    async fn lock_leases(&mut self, ids: &[LeaseId]) -> Result<Vec<LockedLease>, StoreError> {
        let ids: Vec<Uuid> = ids.iter().map(|id| id.0).collect();
        // Locked in item order: the LockRows step runs above the sort.
        // Each row also carries the transaction's `now()` (`LogbookTx::now` answers it then
        // without a statement of its own).
        let rows = self
            .query(include_str!("sql/lock_leases.sql"), &[&ids])
            .await?;
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
            include_str!("sql/insert_leases.sql"),
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
            include_str!("sql/finish_leases.sql"),
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
