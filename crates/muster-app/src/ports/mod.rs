//! The ports the use cases need, named for what the domain needs, not for the technology.
//!
//! Logbook is split by role. Outside a transaction: [`Logbook`] opens one, [`ItemReads`],
//! [`HealthLog`] and [`IntakeLog`] read and report what needs none, and [`PoolGauge`] feeds the
//! metrics. Inside one: [`ItemStore`], [`LeaseStore`], [`LedgerAppend`], [`FleetStore`],
//! [`IntakeStore`] and [`KindStore`], composed into [`LogbookTx`]. Each use case holds the
//! outside ports it uses, and a step that needs only some of a transaction's roles says so in
//! its signature.
//!
//! Mocks: `MockLogbook`, `MockLogbookTx` (every role), `MockItemReads`, `MockHealthLog`,
//! `MockIntakeLog`, `MockPoolGauge`, `MockClock`, `MockIds`, `MockJitter`, `MockReadiness` and
//! `MockFeedSource` are generated with mockall for this crate's tests and, with the `mocks`
//! feature, for other crates' tests.

use async_trait::async_trait;
use muster_domain::edit::EditId;
use muster_domain::{ItemId, LeaseId};
use muster_ledger::SealedEntry;
use time::OffsetDateTime;

mod fleet;
mod intake;
mod items;
mod kinds;
mod leases;
mod ledger;
#[cfg(any(test, feature = "mocks"))]
mod mock;
mod retention;
#[cfg(test)]
mod tidy;

pub use fleet::*;
pub use intake::*;
pub use items::*;
pub use kinds::*;
pub use leases::*;
pub use ledger::*;
#[cfg(any(test, feature = "mocks"))]
pub use mock::{MockLogbookTx, logbook_with};
pub use retention::*;

/// A failure of the store. Anything that is not the database being unreachable is internal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Logbook could not be reached in time (pool checkout, connect or statement timeout).
    #[error("logbook unavailable: {0}")]
    Unavailable(String),
    #[error("logbook error: {0}")]
    Internal(String),
}

/// Logbook, the durable store of items, leases and the ledger: where transactions begin.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait Logbook: Send + Sync {
    /// Opens a transaction. Dropping it without `commit` rolls it back.
    async fn begin(&self) -> Result<Box<dyn LogbookTx>, StoreError>;
}

/// One Logbook transaction: every role, and its end. Every transition of a use case is written
/// through one of these, so it is either entirely there or not at all. A step of a use case
/// that needs only some roles takes `&mut dyn Role` (or a generic bound) instead.
#[async_trait]
pub trait LogbookTx:
    ItemStore + LeaseStore + LedgerAppend + FleetStore + IntakeStore + KindStore + Send
{
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
    /// The database's time of this transaction (when it began), the one clock by which every
    /// replica's leases expire and backoffs end, whatever the replica's own clock says.
    async fn now(&mut self) -> Result<OffsetDateTime, StoreError>;
    /// Appends sealed entries to the ledger and commits, for a use case that needs no sequence
    /// numbers back: the adapter may send both together.
    async fn append_and_commit(self: Box<Self>, entries: &[SealedEntry]) -> Result<(), StoreError>;
}

/// The store's connection pool, for metrics: a gauge, not a port of any use case.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
pub trait PoolGauge: Send + Sync {
    /// Connections of the pool: open, idle, and the configured maximum.
    fn pool_status(&self) -> PoolStatus;
}

/// Connection pool figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStatus {
    pub open: u64,
    pub idle: u64,
    pub max: u64,
    pub waiting: u64,
}

/// The time. Implementations answer UTC with whole microseconds.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
pub trait Clock: Send + Sync {
    fn now(&self) -> OffsetDateTime;
}

/// Fresh ids (UUIDv7 in production) and secret random bytes.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
pub trait Ids: Send + Sync {
    fn item_id(&self) -> ItemId;
    fn lease_id(&self) -> LeaseId;
    fn edit_id(&self) -> EditId;
    /// 32 bytes from a cryptographically secure source (salts, keys, challenge seeds).
    fn random32(&self) -> [u8; 32];
}

/// Uniform random numbers in `[0, 1)` for backoff jitter.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
pub trait Jitter: Send + Sync {
    fn sample(&self) -> f64;
}

/// Whether the service can do its work now (for `/readyz`): the schema current and the
/// connected role fit to serve. `Err` says why not.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait Readiness: Send + Sync {
    async fn check(&self) -> Result<(), NotReady>;
}

/// Why a replica is not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// An internal state (the schema's migration, a database error): logged, never answered.
    Internal(String),
    /// A configuration fault an operator must fix, such as a grant the runtime role lacks. It
    /// names roles and tables only, and `/readyz` answers it, so that whoever looks at the
    /// probe sees what to do.
    Configuration(String),
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::Internal(m) | NotReady::Configuration(m) => f.write_str(m),
        }
    }
}
