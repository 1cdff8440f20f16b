//! The ledger: appended inside a transaction, read in order by the live feed.

use async_trait::async_trait;
use muster_domain::{ItemState, Kind};
use muster_ledger::SealedEntry;
use time::OffsetDateTime;

use super::StoreError;

/// The ledger inside a transaction: append only.
#[async_trait]
pub trait LedgerAppend: Send {
    /// Appends sealed entries to the ledger and answers their global sequence numbers in order.
    async fn append(&mut self, entries: &[SealedEntry]) -> Result<Vec<i64>, StoreError>;
}

/// One ledger row as the live feed publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEvent {
    pub seq: i64,
    pub subject_type: String,
    pub subject_id: String,
    pub kind: Option<Kind>,
    pub priority: Option<muster_domain::Priority>,
    pub from_state: Option<String>,
    pub to_state: Option<String>,
    pub actor: String,
    pub at: OffsetDateTime,
    /// Whether the row was already counted in the queue-depth snapshot the feed started from.
    pub counted: bool,
    /// For edit proposals: the target.
    pub target: Option<String>,
    /// For a kind's pause or resume (subject type `kind`): the reason given, if any.
    pub reason: Option<String>,
}

/// Items per kind, priority and state.
pub type DepthCounts = Vec<((Kind, muster_domain::Priority, ItemState), i64)>;

/// Where the feed starts: depths counted in one snapshot, and a ledger position before which
/// every row is settled (committed or never to appear).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedStart {
    /// Items per group, those retention removed included (see `removed_counts`).
    pub counts: DepthCounts,
    /// The kinds paused in the same snapshot.
    pub paused: Vec<Kind>,
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
    /// The sequence up to which the ledger's entries were archived out of Logbook (0: none).
    async fn archived_through(&self) -> Result<i64, StoreError>;
    /// How many items retention removed so far per kind, priority and state. `start`'s counts
    /// include these (they are counted in its snapshot), so that the depths are the counts
    /// minus the removed read last.
    async fn removed_counts(&self) -> Result<DepthCounts, StoreError>;
}
