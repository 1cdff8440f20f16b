//! Leases: the queue they are taken from, and their records.

use async_trait::async_trait;
use muster_domain::trace::TraceContext;
use muster_domain::{Item, Kind, LeaseId, LeaseOutcome, LeaseRecord};
use serde_json::Value;
use time::OffsetDateTime;

use super::StoreError;

/// When an expired lease on an item's last allowed attempt may be taken over: `grace` after
/// its `expires_at` (not at it, as for earlier attempts), so that a worker's spooled result
/// that arrives after an outage longer than the lease time still completes the item. Taking it
/// over fails the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalGrace {
    /// The kind's attempt limit: an item at it is on its last attempt.
    pub max_attempts: u32,
    pub grace: time::Duration,
}

impl FinalGrace {
    /// Whether the expired lease of an item at `attempt` that expires at `expires_at` may be
    /// taken over at `now`.
    pub fn reclaimable(
        &self,
        attempt: u32,
        expires_at: OffsetDateTime,
        now: OffsetDateTime,
    ) -> bool {
        if attempt >= self.max_attempts {
            expires_at + self.grace <= now
        } else {
            expires_at <= now
        }
    }
}

/// What [`LeaseStore::lock_next_leasable`] looks for: up to `limit` leasable items of `kind`
/// at `now`, with payloads up to `payload_budget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasableQuery {
    /// The kind whose queue is read.
    pub kind: Kind,
    /// The transaction's time: backoffs and leases that end by it are over.
    pub now: OffsetDateTime,
    /// At most this many items.
    pub limit: u32,
    /// Payloads stop once those before have reached this many bytes (stored size; the first
    /// item always has its payload): the items after that come with `None` and must not be
    /// leased in this transaction, so that one answer never holds more than about the budget
    /// plus one payload.
    pub payload_budget: u64,
    /// When an expired lease may be taken over.
    pub final_grace: FinalGrace,
}

/// One item [`LeaseStore::lock_next_leasable`] offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Leasable {
    pub item: Item,
    /// `None` past the payload budget: the item must not be leased in this transaction.
    pub payload: Option<Value>,
    /// The trace context the item keeps (`None`: enqueued before items kept one).
    pub trace: Option<TraceContext>,
    /// When the item became leasable, as its row tells: the later of its place in line and
    /// its backoff's end, or its expired lease's expiry.
    pub queued_since: OffsetDateTime,
}

/// A lease record with its item and the item's trace context, as locked.
pub type LockedLease = (LeaseRecord, Item, Option<TraceContext>);

/// Leases inside a transaction: the queue they are taken from, and their records.
#[async_trait]
pub trait LeaseStore: Send {
    /// Locks and returns up to `limit` leasable items of `kind` at `now` in lease order
    /// (priority, then enqueue time), skipping rows other transactions hold, with payloads
    /// within `payload_budget` (the fields of [`LeasableQuery`]). An expired lease is offered
    /// once `final_grace` says it may be taken over.
    async fn lock_next_leasable(
        &mut self,
        wanted: LeasableQuery,
    ) -> Result<Vec<Leasable>, StoreError>;
    /// Returns a lease record and locks and returns its item.
    async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<LockedLease>, StoreError>;
    /// Returns lease records with their items, locking both in item order (so that two
    /// batches never wait for each other in a circle). Unknown ids are left out.
    async fn lock_leases(&mut self, ids: &[LeaseId]) -> Result<Vec<LockedLease>, StoreError>;
    /// Records newly granted leases on items of `kind`.
    async fn insert_leases(
        &mut self,
        leases: &[LeaseRecord],
        kind: Kind,
        at: OffsetDateTime,
    ) -> Result<(), StoreError>;
    /// Records how a lease ended.
    async fn finish_lease(
        &mut self,
        id: LeaseId,
        outcome: &LeaseOutcome,
        at: OffsetDateTime,
    ) -> Result<(), StoreError>;
    /// Records how distinct leases ended.
    async fn finish_leases(
        &mut self,
        outcomes: &[(LeaseId, LeaseOutcome)],
        at: OffsetDateTime,
    ) -> Result<(), StoreError>;
}
