//! The ports the use cases need, named for what the domain needs, not for the technology.
//!
//! Logbook is split by role. Outside a transaction: [`Logbook`] opens one, [`ItemReads`],
//! [`HealthLog`] and [`IntakeLog`] read and report what needs none, and [`PoolGauge`] feeds the
//! metrics. Inside one: [`ItemStore`], [`LeaseStore`], [`LedgerAppend`], [`FleetStore`] and
//! [`IntakeStore`], composed into [`LogbookTx`]. Each use case holds the outside ports it uses,
//! and a step that needs only some of a transaction's roles says so in its signature.
//!
//! Mocks: `MockLogbook`, `MockLogbookTx` (every role), `MockItemReads`, `MockHealthLog`,
//! `MockIntakeLog`, `MockPoolGauge`, `MockClock`, `MockIds`, `MockJitter`, `MockReadiness` and
//! `MockFeedSource` are generated with mockall for this crate's tests and, with the `mocks`
//! feature, for other crates' tests.

use async_trait::async_trait;
use muster_domain::{Item, ItemId, ItemState, Kind, LeaseId, LeaseOutcome, LeaseRecord, Priority};
use muster_ledger::SealedEntry;
use serde_json::Value;
use time::OffsetDateTime;

use crate::views::{EditView, HealthView, ItemView};
use muster_domain::edit::{Edit, EditId, EditState};
use muster_domain::health::KindHealth;

/// A failure of the store. Anything that is not the database being unreachable is internal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Logbook could not be reached in time (pool checkout, connect or statement timeout).
    #[error("logbook unavailable: {0}")]
    Unavailable(String),
    #[error("logbook error: {0}")]
    Internal(String),
}

/// An item to insert, with the entry that records its creation.
#[derive(Debug, Clone, PartialEq)]
pub struct NewItem {
    pub item: Item,
    pub payload: Value,
    pub idempotency_key: Option<String>,
    pub parent: Option<ItemId>,
    pub created_at: OffsetDateTime,
    pub entry: SealedEntry,
}

/// The outcome of inserting an item that carries an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    New,
    /// The key was already used for this kind: the existing item.
    Existing {
        id: ItemId,
        state: ItemState,
    },
}

// ---------------------------------------------------------------------------------------------
// Outside a transaction: opening one, and the reads and reports that need none.
// ---------------------------------------------------------------------------------------------

/// Logbook, the durable store of items, leases and the ledger: where transactions begin.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait Logbook: Send + Sync {
    /// Opens a transaction. Dropping it without `commit` rolls it back.
    async fn begin(&self) -> Result<Box<dyn LogbookTx>, StoreError>;
}

/// Items as operators and metrics read them, outside any transaction.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait ItemReads: Send + Sync {
    /// An item with its ledger history.
    async fn item_view(&self, id: ItemId) -> Result<Option<ItemView>, StoreError>;
    /// When the oldest queued item of each kind and priority was enqueued (for metrics); one
    /// index probe per pair, whatever the backlog.
    async fn oldest_queued(&self) -> Result<Vec<(Kind, Priority, OffsetDateTime)>, StoreError>;
}

/// The fleet's health as Shipkeeper reports it.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait HealthLog: Send + Sync {
    /// Keeps the latest (already redacted) health of each kind in the report: one record per
    /// kind, its events appended and cut to the newest `MAX_EVENTS_PER_KIND`.
    async fn store_health(
        &self,
        health: &[KindHealth],
        at: OffsetDateTime,
    ) -> Result<(), StoreError>;
    /// The latest health of every kind that has reported (for the live feed).
    async fn latest_health(&self) -> Result<Vec<HealthView>, StoreError>;
}

/// The edit intake's records that need no transaction: its key, its listing, its upkeep.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait IntakeLog: Send + Sync {
    /// The proof-of-work MAC key shared by every replica, created from `candidate` on first use.
    async fn pow_key(&self, candidate: [u8; 32]) -> Result<[u8; 32], StoreError>;
    /// Edit proposals in `state`, oldest first, after `after`, at most `limit`.
    async fn list_edits(
        &self,
        state: EditState,
        after: Option<EditId>,
        limit: i64,
    ) -> Result<Vec<EditView>, StoreError>;
    /// Deletes salts and counters of days before `today` and challenges expired at `now`;
    /// answers how many rows went.
    async fn purge_intake(&self, today: time::Date, now: OffsetDateTime)
    -> Result<u64, StoreError>;
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

// ---------------------------------------------------------------------------------------------
// Inside a transaction: one role per part of Logbook, composed into `LogbookTx`.
// ---------------------------------------------------------------------------------------------

/// Items inside a transaction: inserted, locked and written back.
#[async_trait]
pub trait ItemStore: Send {
    /// Inserts one item. With an idempotency key already used for its kind, inserts nothing
    /// and answers the existing item.
    async fn insert_item(&mut self, new: &NewItem) -> Result<Inserted, StoreError>;
    /// Inserts items that carry no idempotency key (the `next` steps of a completion).
    async fn insert_items(&mut self, new: &[NewItem]) -> Result<(), StoreError>;
    /// Locks and returns an item.
    async fn lock_item(&mut self, id: ItemId) -> Result<Option<Item>, StoreError>;
    /// Writes back an item's working state.
    async fn save_item(&mut self, item: &Item) -> Result<(), StoreError>;
    /// Writes back the working states of distinct items, each with its result if given.
    async fn save_items(&mut self, items: &[(Item, Option<Value>)]) -> Result<(), StoreError>;
}

/// Leases inside a transaction: the queue they are taken from, and their records.
#[async_trait]
pub trait LeaseStore: Send {
    /// Locks and returns up to `limit` leasable items of `kind` at `now` in lease order
    /// (priority, then enqueue time), skipping rows other transactions hold, with payloads.
    /// Payloads stop once those before have reached `payload_budget` bytes (stored size; the
    /// first item always has its payload): the items after that come with `None` and must not
    /// be leased in this transaction, so that one answer never holds more than about the
    /// budget plus one payload.
    async fn lock_next_leasable(
        &mut self,
        kind: Kind,
        now: OffsetDateTime,
        limit: u32,
        payload_budget: u64,
    ) -> Result<Vec<(Item, Option<Value>)>, StoreError>;
    /// Returns a lease record and locks and returns its item.
    async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<(LeaseRecord, Item)>, StoreError>;
    /// Returns lease records with their items, locking both in item order (so that two
    /// batches never wait for each other in a circle). Unknown ids are left out.
    async fn lock_leases(
        &mut self,
        ids: &[LeaseId],
    ) -> Result<Vec<(LeaseRecord, Item)>, StoreError>;
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

/// The ledger inside a transaction: append only.
#[async_trait]
pub trait LedgerAppend: Send {
    /// Appends sealed entries to the ledger and answers their global sequence numbers in order.
    async fn append(&mut self, entries: &[SealedEntry]) -> Result<Vec<i64>, StoreError>;
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
    async fn lock_parked(&mut self, kind: Kind, deployed: &str) -> Result<Vec<Item>, StoreError>;
}

/// The edit intake inside a transaction: daily salts and counters, spent challenges, edits.
#[async_trait]
pub trait IntakeStore: Send {
    /// The salt of UTC day `day`, created from `candidate` if the day has none yet.
    async fn day_salt(
        &mut self,
        day: time::Date,
        candidate: [u8; 32],
    ) -> Result<[u8; 32], StoreError>;
    /// Counts one submission of `client_hash` on `day` if it has fewer than `limit`; answers
    /// whether it was counted.
    async fn count_submission(
        &mut self,
        day: time::Date,
        client_hash: [u8; 32],
        limit: u32,
    ) -> Result<bool, StoreError>;
    /// Spends a proof-of-work challenge; answers false if it was spent before.
    async fn spend_challenge(
        &mut self,
        spend_key: [u8; 32],
        expires_at: OffsetDateTime,
    ) -> Result<bool, StoreError>;
    /// Stores a new edit proposal with its (plain-text) body.
    async fn insert_edit(
        &mut self,
        edit: &Edit,
        body: &str,
        at: OffsetDateTime,
    ) -> Result<(), StoreError>;
    /// Locks and returns an edit proposal.
    async fn lock_edit(&mut self, id: EditId) -> Result<Option<Edit>, StoreError>;
    /// Writes back an edit's state after a decision.
    async fn save_edit(&mut self, edit: &Edit, at: OffsetDateTime) -> Result<(), StoreError>;
}

/// One Logbook transaction: every role, and its end. Every transition of a use case is written
/// through one of these, so it is either entirely there or not at all. A step of a use case
/// that needs only some roles takes `&mut dyn Role` (or a generic bound) instead.
#[async_trait]
pub trait LogbookTx:
    ItemStore + LeaseStore + LedgerAppend + FleetStore + IntakeStore + Send
{
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
    /// Appends sealed entries to the ledger and commits, for a use case that needs no sequence
    /// numbers back: the adapter may send both together.
    async fn append_and_commit(self: Box<Self>, entries: &[SealedEntry]) -> Result<(), StoreError>;
}

// The transaction mock implements every role (mockall's `automock` cannot see supertraits).
#[cfg(any(test, feature = "mocks"))]
mockall::mock! {
    pub LogbookTx {}

    #[async_trait]
    impl ItemStore for LogbookTx {
        async fn insert_item(&mut self, new: &NewItem) -> Result<Inserted, StoreError>;
        async fn insert_items(&mut self, new: &[NewItem]) -> Result<(), StoreError>;
        async fn lock_item(&mut self, id: ItemId) -> Result<Option<Item>, StoreError>;
        async fn save_item(&mut self, item: &Item) -> Result<(), StoreError>;
        async fn save_items(&mut self, items: &[(Item, Option<Value>)]) -> Result<(), StoreError>;
    }

    #[async_trait]
    impl LeaseStore for LogbookTx {
        async fn lock_next_leasable(&mut self, kind: Kind, now: OffsetDateTime, limit: u32, payload_budget: u64) -> Result<Vec<(Item, Option<Value>)>, StoreError>;
        async fn lock_lease(&mut self, id: LeaseId) -> Result<Option<(LeaseRecord, Item)>, StoreError>;
        async fn lock_leases(&mut self, ids: &[LeaseId]) -> Result<Vec<(LeaseRecord, Item)>, StoreError>;
        async fn insert_leases(&mut self, leases: &[LeaseRecord], kind: Kind, at: OffsetDateTime) -> Result<(), StoreError>;
        async fn finish_lease(&mut self, id: LeaseId, outcome: &LeaseOutcome, at: OffsetDateTime) -> Result<(), StoreError>;
        async fn finish_leases(&mut self, outcomes: &[(LeaseId, LeaseOutcome)], at: OffsetDateTime) -> Result<(), StoreError>;
    }

    #[async_trait]
    impl LedgerAppend for LogbookTx {
        async fn append(&mut self, entries: &[SealedEntry]) -> Result<Vec<i64>, StoreError>;
    }

    #[async_trait]
    impl FleetStore for LogbookTx {
        async fn record_digest(&mut self, kind: Kind, digest: &str, at: OffsetDateTime) -> Result<Option<String>, StoreError>;
        async fn deployed_digest(&mut self, kind: Kind) -> Result<Option<String>, StoreError>;
        async fn lock_parked(&mut self, kind: Kind, deployed: &str) -> Result<Vec<Item>, StoreError>;
    }

    #[async_trait]
    impl IntakeStore for LogbookTx {
        async fn day_salt(&mut self, day: time::Date, candidate: [u8; 32]) -> Result<[u8; 32], StoreError>;
        async fn count_submission(&mut self, day: time::Date, client_hash: [u8; 32], limit: u32) -> Result<bool, StoreError>;
        async fn spend_challenge(&mut self, spend_key: [u8; 32], expires_at: OffsetDateTime) -> Result<bool, StoreError>;
        async fn insert_edit(&mut self, edit: &Edit, body: &str, at: OffsetDateTime) -> Result<(), StoreError>;
        async fn lock_edit(&mut self, id: EditId) -> Result<Option<Edit>, StoreError>;
        async fn save_edit(&mut self, edit: &Edit, at: OffsetDateTime) -> Result<(), StoreError>;
    }

    #[async_trait]
    impl LogbookTx for LogbookTx {
        async fn commit(self: Box<Self>) -> Result<(), StoreError>;
        async fn append_and_commit(self: Box<Self>, entries: &[SealedEntry]) -> Result<(), StoreError>;
    }
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

/// Whether the service can do its work now (for `/readyz`): Logbook reachable and its schema
/// current. `Err` says why not.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait Readiness: Send + Sync {
    async fn check(&self) -> Result<(), String>;
}

/// One ledger row as the live feed publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEvent {
    pub seq: i64,
    pub subject_type: String,
    pub subject_id: String,
    pub kind: Option<Kind>,
    pub priority: Option<Priority>,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    pub actor: String,
    pub at: OffsetDateTime,
    /// Whether the row was already counted in the queue-depth snapshot the feed started from.
    pub counted: bool,
    /// For edit proposals: the target.
    pub target: Option<String>,
}

/// Where the feed starts: depths counted in one snapshot, and a ledger position before which
/// every row is settled (committed or never to appear).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedStart {
    pub counts: Vec<((Kind, Priority, ItemState), i64)>,
    /// The counting snapshot, opaque to the caller (passed back to `read_after`).
    pub snapshot: String,
    pub position: i64,
}

/// The ledger as the live feed reads it.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait FeedSource: Send + Sync {
    /// Counts items per kind, priority and state in one snapshot, and a settled position.
    async fn start(&self) -> Result<FeedStart, StoreError>;
    /// Up to `limit` rows with `seq > after` visible now, in sequence order, each marked whether
    /// `snapshot` counted it, and the horizon of the reading snapshot.
    async fn read_after(
        &self,
        after: i64,
        snapshot: &str,
        limit: i64,
    ) -> Result<(Vec<LedgerEvent>, muster_domain::feed::ReadHorizon), StoreError>;
    /// The rows with `after < seq <= through`, in order (all settled).
    async fn backlog(&self, after: i64, through: i64) -> Result<Vec<LedgerEvent>, StoreError>;
    /// The highest sequence in the ledger (0 when empty).
    async fn newest_seq(&self) -> Result<i64, StoreError>;
}
