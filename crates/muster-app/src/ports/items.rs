//! Items: inserted, locked and written back inside a transaction; read outside one.

use async_trait::async_trait;
use muster_domain::listing::ItemFilter;
use muster_domain::trace::TraceContext;
use muster_domain::{Item, ItemId, ItemState, Kind, Priority};
use muster_ledger::SealedEntry;
use serde_json::Value;
use time::OffsetDateTime;

use super::StoreError;
use crate::views::{ItemSummary, ItemView};

/// An item to insert, with the entry that records its creation.
#[derive(Debug, Clone, PartialEq)]
pub struct NewItem {
    pub item: Item,
    pub payload: Value,
    pub idempotency_key: Option<String>,
    pub parent: Option<ItemId>,
    pub created_at: OffsetDateTime,
    /// Its place in its priority's line ([`Item::place_in_line`]).
    pub in_line_at: OffsetDateTime,
    pub entry: SealedEntry,
    /// The context of the span that created it (the enqueue call, or the completion's item
    /// span), kept for its whole life.
    pub trace: Option<TraceContext>,
}

/// The outcome of inserting an item that carries an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    New,
    /// The key was already used for this kind: the existing item.
    Existing {
        id: ItemId,
        state: ItemState,
        /// The trace context it keeps.
        trace: Option<TraceContext>,
    },
}

/// Items as operators and metrics read them, outside any transaction.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait ItemReads: Send + Sync {
    /// An item with its ledger history.
    async fn item_view(&self, id: ItemId) -> Result<Option<ItemView>, StoreError>;
    /// An item's ledger entries, oldest first: what is left of an item that retention removed
    /// from the working tables (empty when Logbook holds none).
    async fn item_ledger(&self, id: ItemId) -> Result<Vec<super::RecordedEntry>, StoreError>;
    /// The newest `at` of the ledger entries archived out of Logbook (`None`: none were).
    async fn archived_until(&self) -> Result<Option<OffsetDateTime>, StoreError>;
    /// Up to `rows` items that match `filter`, oldest first by id, after `filter.after`. The
    /// cost follows `rows` and the number of the filter's groups, never the rest of the table.
    async fn list_items(
        &self,
        filter: &ItemFilter,
        rows: u32,
    ) -> Result<Vec<ItemSummary>, StoreError>;
    /// When the oldest queued item of each kind and priority was enqueued (for metrics); one
    /// index probe per pair, whatever the backlog.
    async fn oldest_queued(&self) -> Result<Vec<(Kind, Priority, OffsetDateTime)>, StoreError>;
    /// When the oldest lease still out of each kind was granted (for metrics: hung work).
    async fn oldest_leases(&self) -> Result<Vec<(Kind, OffsetDateTime)>, StoreError>;
}

/// Items inside a transaction: inserted, locked and written back.
#[async_trait]
pub trait ItemStore: Send {
    /// Inserts one item. With an idempotency key already used for its kind, inserts nothing
    /// and answers the existing item.
    async fn insert_item(&mut self, new: &NewItem) -> Result<Inserted, StoreError>;
    /// Inserts items that carry no idempotency key (the `next` steps of a completion).
    async fn insert_items(&mut self, new: &[NewItem]) -> Result<(), StoreError>;
    /// Locks and returns an item, with the trace context it keeps.
    async fn lock_item(
        &mut self,
        id: ItemId,
    ) -> Result<Option<(Item, Option<TraceContext>)>, StoreError>;
    /// Locks and returns up to `max` items of `kind` in `state`, oldest first by id, skipping
    /// any that another transaction holds; each with the trace context it keeps.
    async fn lock_oldest(
        &mut self,
        kind: Kind,
        state: ItemState,
        max: u32,
    ) -> Result<Vec<(Item, Option<TraceContext>)>, StoreError>;
    /// Writes back an item's working state.
    async fn save_item(&mut self, item: &Item) -> Result<(), StoreError>;
    /// Writes back the working states of distinct items, each with its result if given.
    async fn save_items(&mut self, items: &[(Item, Option<Value>)]) -> Result<(), StoreError>;
}
