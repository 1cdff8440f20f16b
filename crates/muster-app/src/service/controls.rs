//! An operator's hands on items: retry (failed or parked items back to `queued`, attempts
//! reset) and cancel (to the terminal `cancelled`, a lease out on the item superseded at
//! once), one item or the oldest of a kind in one state. Each changed item gets one ledger row
//! naming the operator (and, for a cancel, the reason), in the same transaction as the change;
//! the feed publishes it like every transition. Both are idempotent where the contract says
//! so: cancelling a cancelled item answers as the first cancel did and writes nothing.
//!
//! An item retention removed is read from the ledger (404 when it has no entries there): it
//! is finished, so a cancel answers as for its recorded state (200 when cancelled, else 409)
//! and a retry is 409 (it is not parked, and a removed failed item stays removed), both
//! writing nothing.

use muster_domain::listing::bulk_retry_max;
use muster_domain::trace::TraceContext;
use muster_domain::{Item, ItemId, ItemState, Kind, Principal};

use super::{Muster, require_storable};
use crate::auth::may_control_items;
use crate::error::AppError;
use crate::views::{BulkCancelled, BulkRetried, Cancelled, Retried};

/// An item with the trace context it keeps.
type Traced = (Item, Option<TraceContext>);

/// The longest reason an operator may give, in bytes.
pub const MAX_REASON: usize = 1_000;

impl Muster {
    /// `POST /v1/items/{id}/retry`: a failed or parked item back to the queue.
    pub async fn retry(&self, actor: Principal, id: ItemId) -> Result<Retried, AppError> {
        may_control_items(actor)?;
        let now = self.clock.now();
        let Some((mut tx, (mut item, trace))) = self.lock_item(id).await? else {
            let removed = self.removed_item(id).await?;
            return Err(AppError::Conflict(format!(
                "item {id} is {} and removed by retention: only failed and parked items in the working tables can be retried",
                removed.state
            )));
        };
        let entry = item.retry(actor, now)?;
        tx.save_item(&item).await?;
        self.commit_with(tx, &[entry]).await?;
        self.signal.notify(item.kind);
        Ok(Retried {
            item_id: id.to_string(),
            state: item.state,
            trace,
        })
    }

    /// `POST /v1/items/retry`: up to `max` items of `kind` in `state` (`failed` or
    /// `needs_subtool`) back to `queued`, oldest first, their attempts reset, one ledger row
    /// each, in one transaction.
    pub async fn retry_many(
        &self,
        actor: Principal,
        kind: Kind,
        state: ItemState,
        max: u32,
    ) -> Result<BulkRetried, AppError> {
        may_control_items(actor)?;
        if !matches!(state, ItemState::Failed | ItemState::NeedsSubtool) {
            return Err(AppError::BadRequest(format!(
                "a bulk retry takes failed or needs_subtool items, not {state}"
            )));
        }
        let max = bulk_retry_max(max)?;
        let now = self.clock.now();
        let mut tx = self.stores.logbook.begin().await?;
        let (mut items, traces): (Vec<_>, Vec<_>) =
            tx.lock_oldest(kind, state, max).await?.into_iter().unzip();
        if items.is_empty() {
            return Ok(BulkRetried {
                retried: 0,
                item_ids: Vec::new(),
                traces: Vec::new(),
            });
        }
        let mut entries = Vec::with_capacity(items.len());
        for item in &mut items {
            entries.push(item.retry(actor, now)?);
        }
        let saved: Vec<_> = items.iter().map(|i| (i.clone(), None)).collect();
        tx.save_items(&saved).await?;
        self.commit_with(tx, &entries).await?;
        self.signal.notify(kind);
        tracing::info!(%kind, %state, retried = items.len(), "items sent back to the queue");
        Ok(BulkRetried {
            retried: items.len() as u64,
            item_ids: items.iter().map(|i| i.id.to_string()).collect(),
            traces: traces.into_iter().flatten().collect(),
        })
    }

    /// `POST /v1/items/{id}/cancel`: the item is `cancelled` (a `done` one is a conflict).
    pub async fn cancel(
        &self,
        actor: Principal,
        id: ItemId,
        reason: &str,
    ) -> Result<Cancelled, AppError> {
        may_control_items(actor)?;
        check_reason(reason)?;
        let now = self.clock.now();
        let Some((mut tx, (mut item, _))) = self.lock_item(id).await? else {
            return match self.removed_item(id).await?.state {
                ItemState::Cancelled => Ok(Cancelled {
                    item_id: id.to_string(),
                    state: ItemState::Cancelled,
                }),
                state => Err(AppError::Conflict(format!(
                    "item {id} is {state} and removed by retention: a finished item cannot be cancelled"
                ))),
            };
        };
        if let Some(entry) = item.cancel(actor, reason, now)? {
            tx.save_item(&item).await?;
            self.commit_with(tx, &[entry]).await?;
            tracing::info!(kind = %item.kind, item = %id, "item cancelled");
        }
        Ok(Cancelled {
            item_id: id.to_string(),
            state: item.state,
        })
    }

    /// `POST /v1/items/cancel`: up to `max` items of `kind` in `state` (`queued`,
    /// `needs_subtool` or `failed`) cancelled, oldest first, one ledger row each, in one
    /// transaction.
    pub async fn cancel_many(
        &self,
        actor: Principal,
        kind: Kind,
        state: ItemState,
        max: u32,
        reason: &str,
    ) -> Result<BulkCancelled, AppError> {
        may_control_items(actor)?;
        if !matches!(
            state,
            ItemState::Queued | ItemState::NeedsSubtool | ItemState::Failed
        ) {
            return Err(AppError::BadRequest(format!(
                "a bulk cancel takes queued, needs_subtool or failed items, not {state}"
            )));
        }
        check_reason(reason)?;
        let max = bulk_retry_max(max)?;
        let now = self.clock.now();
        let mut tx = self.stores.logbook.begin().await?;
        let mut items: Vec<_> = tx
            .lock_oldest(kind, state, max)
            .await?
            .into_iter()
            .map(|(item, _)| item)
            .collect();
        let mut entries = Vec::with_capacity(items.len());
        for item in &mut items {
            entries.extend(item.cancel(actor, reason, now)?);
        }
        if entries.is_empty() {
            return Ok(BulkCancelled {
                cancelled: 0,
                item_ids: Vec::new(),
            });
        }
        let saved: Vec<_> = items.iter().map(|i| (i.clone(), None)).collect();
        tx.save_items(&saved).await?;
        self.commit_with(tx, &entries).await?;
        tracing::info!(%kind, %state, cancelled = items.len(), "items cancelled");
        Ok(BulkCancelled {
            cancelled: items.len() as u64,
            item_ids: items.iter().map(|i| i.id.to_string()).collect(),
        })
    }
}

impl Muster {
    /// A transaction with item `id` locked in it, or `None` when the working tables do not
    /// hold it (removed by retention, read from the ledger, or never there).
    async fn lock_item(
        &self,
        id: ItemId,
    ) -> Result<Option<(Box<dyn crate::ports::LogbookTx>, Traced)>, AppError> {
        let mut tx = self.stores.logbook.begin().await?;
        Ok(tx.lock_item(id).await?.map(|item| (tx, item)))
    }
}

/// A reason is 1 to [`MAX_REASON`] bytes of storable text.
pub(super) fn check_reason(reason: &str) -> Result<(), AppError> {
    if reason.trim().is_empty() || reason.len() > MAX_REASON {
        return Err(AppError::BadRequest(format!(
            "reason must be 1 to {MAX_REASON} bytes of text"
        )));
    }
    require_storable(&serde_json::Value::from(reason), "reason")
}
