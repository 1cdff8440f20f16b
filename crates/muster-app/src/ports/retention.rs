//! Retention: finished items leave the working tables in small batches, rejected edit texts
//! after their own period; what was removed stays in the ledger.

use async_trait::async_trait;
use muster_domain::{ItemId, ItemState, Kind, Priority};
use time::{Duration, OffsetDateTime};

use super::StoreError;

/// One batch of [`RetentionStore::remove_finished`]: the items of one state, kind and priority,
/// in id order after `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovalBatch {
    /// A finished state: `done`, `failed` or `cancelled`.
    pub state: ItemState,
    pub kind: Kind,
    pub priority: Priority,
    /// Where the previous batch of this group ended (`None`: at the start).
    pub after: Option<ItemId>,
    /// Items whose newest ledger entry is at least this old go.
    pub retain: Duration,
    /// At most this many items are looked at (and so removed).
    pub max: u32,
}

/// What one batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Removed {
    /// Items looked at: fewer than the batch's `max` when the group has no more to look at.
    pub scanned: u32,
    /// The last item looked at, where the next batch of the group starts.
    pub last: Option<ItemId>,
    /// Items removed, and their leases.
    pub items: u64,
    pub leases: u64,
    /// The batch would have waited for a lock and gave way: nothing was removed, and the
    /// group is left to the next pass.
    pub gave_way: bool,
}

/// Logbook's side of retention. Every call is its own short transaction that never waits for
/// a row a lease, a completion or an operator holds: it skips such rows (the next pass takes
/// them), and gives way when it would wait.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Removes the finished items of one batch whose newest ledger entry is older than its
    /// `retain`, with their leases; their ledger entries stay.
    async fn remove_finished(&self, batch: RemovalBatch) -> Result<Removed, StoreError>;
    /// Removes the text of up to `max` rejected edit proposals decided at least `retain` ago;
    /// answers how many. Their `submitted` entries keep the text's BLAKE3.
    async fn remove_edit_texts(&self, retain: Duration, max: u32) -> Result<u64, StoreError>;
    /// When the oldest-created finished item of each state, kind and priority last changed
    /// (its newest ledger entry), the oldest of them; `None` when no finished item is left.
    async fn oldest_finished(&self) -> Result<Option<OffsetDateTime>, StoreError>;
}

/// One ledger entry of an item, as the view of a removed item is read from it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEntry {
    pub history: crate::views::HistoryEntry,
    /// The item's kind and priority, as the entry's row records them.
    pub kind: Option<Kind>,
    pub priority: Option<Priority>,
    /// The entry's data (JSON).
    pub data: serde_json::Value,
}
