//! Finding work and sending it back: an operator's or Conn's page of items, and an operator's
//! bulk retry of a kind's failed items.

use muster_domain::listing::{ItemFilter, bulk_retry_max};
use muster_domain::{Kind, Principal};

use super::Muster;
use crate::auth::{may_read_items, may_retry_items};
use crate::error::AppError;
use crate::views::{BulkRetried, ItemPage};

impl Muster {
    /// `GET /v1/items`: one page of the items that match `filter`, oldest first by id.
    pub async fn list_items(
        &self,
        actor: Principal,
        filter: ItemFilter,
    ) -> Result<ItemPage, AppError> {
        may_read_items(actor)?;
        let limit = filter.limit() as usize;
        // One row more than the page tells whether there is a next page.
        let mut items = self
            .stores
            .items
            .list_items(&filter, filter.limit() + 1)
            .await?;
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|i| i.id.clone())
        } else {
            None
        };
        Ok(ItemPage { items, next })
    }

    /// `POST /v1/items/retry`: up to `max` failed items of `kind` back to `queued`, oldest
    /// first, their attempts reset, one ledger row each, in one transaction.
    pub async fn retry_failed(
        &self,
        actor: Principal,
        kind: Kind,
        max: u32,
    ) -> Result<BulkRetried, AppError> {
        may_retry_items(actor)?;
        let max = bulk_retry_max(max)?;
        let now = self.clock.now();
        let mut tx = self.stores.logbook.begin().await?;
        let mut items = tx.lock_failed(kind, max).await?;
        if items.is_empty() {
            return Ok(BulkRetried {
                retried: 0,
                item_ids: Vec::new(),
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
        tracing::info!(%kind, retried = items.len(), "failed items sent back to the queue");
        Ok(BulkRetried {
            retried: items.len() as u64,
            item_ids: items.iter().map(|i| i.id.to_string()).collect(),
        })
    }
}
