//! Failing a lease (re-queued with backoff, or failed for good), and an operator's retry of a
//! failed item.

use muster_domain::{
    FailOutcome, ItemId, ItemState, LeaseId, LeaseOutcome, OutcomeKind, Principal, request_digest,
};
use serde_json::json;

use super::{Finishing, Muster, to_value};
use crate::error::AppError;
use crate::views::{FailRequest, Failed, Retried};

impl Muster {
    /// `POST /v1/leases/{id}/fail`: re-queued with backoff, or `failed`.
    pub async fn fail(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: FailRequest,
    ) -> Result<Failed, AppError> {
        let digest = request_digest(
            OutcomeKind::Failed,
            &json!({"error": req.error, "retryable": req.retryable}),
        );
        let (mut tx, record, mut item) = match self
            .begin_finish(
                actor,
                lease_id,
                req.worker_id.as_deref(),
                (OutcomeKind::Failed, &digest),
                "failure",
            )
            .await?
        {
            Finishing::Proceed { tx, record, item } => (tx, record, item),
            Finishing::Replay(answer) => return Ok(answer),
        };
        // The database's clock (answered with the lock): backoffs end by it.
        let now = tx.now().await?;
        if let Some(entry) = self.past_final_grace(&record, &mut item, actor, now)? {
            return Err(self.lose_past_final_grace(tx, &item, entry).await);
        }
        let policy = self.config.policy(item.kind);
        let (outcome, entry) = item.fail(
            &record,
            actor,
            &req.error,
            req.retryable,
            &policy,
            self.jitter.sample(),
            now,
        )?;
        tx.save_item(&item).await?;
        let answer = Failed {
            item_id: item.id.to_string(),
            state: item.state,
            not_before: match outcome {
                FailOutcome::Requeued { not_before } => Some(not_before),
                FailOutcome::Failed => None,
            },
        };
        let stored = LeaseOutcome {
            kind: OutcomeKind::Failed,
            digest,
            response: to_value(&answer)?,
        };
        tx.finish_lease(lease_id, &stored, now).await?;
        self.commit_with(tx, &[entry]).await?;
        self.stats.failed.add(item.kind, 1);
        if item.state == ItemState::Failed {
            self.stats.failed_final.add(item.kind, 1);
        }
        Ok(answer)
    }

    /// `POST /v1/items/{id}/retry`: an operator sends a failed item back to the queue.
    pub async fn retry(&self, actor: Principal, id: ItemId) -> Result<Retried, AppError> {
        if actor != Principal::Operator {
            return Err(AppError::Forbidden(format!("{actor} may not retry items")));
        }
        let now = self.clock.now();
        let mut tx = self.stores.logbook.begin().await?;
        let mut item = tx
            .lock_item(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no item {id}")))?;
        let entry = item.retry(actor, now)?;
        tx.save_item(&item).await?;
        self.commit_with(tx, &[entry]).await?;
        self.signal.notify(item.kind);
        Ok(Retried {
            item_id: id.to_string(),
            state: item.state,
        })
    }
}
