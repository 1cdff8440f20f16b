//! The fleet: the worker images deployed (and the items parked for them), and the health
//! Shipkeeper reports.

use async_trait::async_trait;
use muster_domain::health::KindHealth;
use muster_domain::trace::TraceContext;
use muster_domain::{Item, Kind};
use time::OffsetDateTime;

use super::StoreError;
use crate::views::HealthView;

/// The fleet's health as Shipkeeper reports it.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait HealthLog: Send + Sync {
    /// Keeps the latest (already redacted) health of each kind in the report: one record per
    /// kind, whose events are this report's (at most `MAX_EVENTS_PER_KIND`), replacing those
    /// of earlier reports.
    async fn store_health(
        &self,
        health: &[KindHealth],
        at: OffsetDateTime,
    ) -> Result<(), StoreError>;
    /// The latest health of every kind that has reported, with its deployed digest (for
    /// `GET /v1/health` and the live feed), in kind order.
    async fn latest_health(&self) -> Result<Vec<HealthView>, StoreError>;
}

/// The deployed worker images inside a transaction, and the items parked for them.
#[async_trait]
pub trait FleetStore: Send {
    /// Records `digest` as deployed for `kind`, locking the kind's digest row until commit;
    /// answers the digest recorded before, if any.
    async fn record_digest(
        &mut self,
        kind: Kind,
        digest: &str,
        at: OffsetDateTime,
    ) -> Result<Option<String>, StoreError>;
    /// The digest deployed for `kind`, share-locked until commit so that a concurrent report
    /// of a new digest waits for this transaction (and then sees what it parked).
    async fn deployed_digest(&mut self, kind: Kind) -> Result<Option<String>, StoreError>;
    /// Locks and returns every parked item of `kind` whose parked digest is not `deployed`.
    /// Each with the trace context it keeps.
    async fn lock_parked(
        &mut self,
        kind: Kind,
        deployed: &str,
    ) -> Result<Vec<(Item, Option<TraceContext>)>, StoreError>;
}
