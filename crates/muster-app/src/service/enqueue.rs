//! Enqueueing an item.

use muster_domain::{Item, ItemState, Principal};

use super::{MAX_IDEMPOTENCY_KEY, Muster, require_object};
use crate::error::AppError;
use crate::ports::{Inserted, NewItem};
use crate::views::{EnqueueRequest, Enqueued};

/// How far ahead `not_before` may be on an enqueue.
pub const MAX_DELAY: time::Duration = time::Duration::days(30);

impl Muster {
    /// `POST /v1/items`: operators, Conn, and workers whose routes allow the kind; with
    /// `not_before`, delayed work.
    pub async fn enqueue(
        &self,
        actor: Principal,
        req: EnqueueRequest,
    ) -> Result<Enqueued, AppError> {
        let allowed = match actor {
            Principal::Operator | Principal::Conn => true,
            Principal::Worker(k) => self.config.routes.allows(k, req.kind),
            Principal::Shipkeeper => false,
        };
        if !allowed {
            return Err(AppError::Forbidden(format!(
                "{actor} may not enqueue {} items",
                req.kind
            )));
        }
        require_object(&req.payload, "payload")?;
        if req
            .idempotency_key
            .as_ref()
            .is_some_and(|key| key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY)
        {
            return Err(AppError::BadRequest(format!(
                "idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY} bytes"
            )));
        }
        let now = self.clock.now();
        if req.not_before.is_some_and(|t| t > now + MAX_DELAY) {
            return Err(AppError::BadRequest(format!(
                "not_before may be at most {} days ahead",
                MAX_DELAY.whole_days()
            )));
        }
        let (item, entry) = Item::enqueue(
            self.ids.item_id(),
            req.kind,
            req.priority,
            actor,
            now,
            None,
            req.not_before,
        );
        let id = item.id;
        let new = NewItem {
            in_line_at: item.place_in_line(now),
            item,
            payload: req.payload,
            idempotency_key: req.idempotency_key.map(|key| scoped_key(actor, &key)),
            parent: None,
            created_at: now,
            entry: entry.clone(),
            trace: req.trace,
        };
        let mut tx = self.stores.logbook.begin().await?;
        match tx.insert_item(&new).await? {
            Inserted::New => {
                self.commit_with(tx, &[entry]).await?;
                self.stats.enqueued.add(req.kind, 1);
                self.signal.notify(req.kind);
                Ok(Enqueued {
                    item_id: id.to_string(),
                    state: ItemState::Queued,
                    created: true,
                    trace: req.trace,
                })
            }
            // The contract: the same body as the first answer, whatever became of the item since.
            Inserted::Existing { id, trace, .. } => {
                self.commit(tx).await?;
                Ok(Enqueued {
                    item_id: id.to_string(),
                    state: ItemState::Queued,
                    created: false,
                    trace,
                })
            }
        }
    }
}

/// An idempotency key as stored: the caller's principal, then `/`, then its key. Keys are
/// scoped per principal (and kind), so that one principal cannot claim another's keys in
/// advance: a worker allowed to enqueue a kind cannot take the key an operator will use for
/// it and so have the operator's enqueue answered with the worker's item. A principal's name
/// holds no `/`, so no two (principal, key) pairs share a stored key.
fn scoped_key(actor: Principal, key: &str) -> String {
    format!("{actor}/{key}")
}
