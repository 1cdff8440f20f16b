//! Failing a lease: re-queued with backoff, failed for good, or — for `E_NEEDS_SUBTOOL` —
//! parked as `needs_subtool` would park it.

use muster_domain::{
    FailOutcome, ItemState, LeaseId, LeaseOutcome, OutcomeKind, Principal, request_digest,
};
use serde_json::json;

use super::{Finishing, Muster, to_value};
use crate::error::AppError;
use crate::views::{FailRequest, Failed};

impl Muster {
    /// `POST /v1/leases/{id}/fail`: re-queued with backoff, `failed`, or parked for
    /// `E_NEEDS_SUBTOOL`.
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
        if req.error.get("code").and_then(|c| c.as_str()) == Some(NEEDS_SUBTOOL) {
            return self
                .fail_as_parked(tx, (actor, lease_id, &record), item, req, digest, now)
                .await;
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

    /// A `fail` whose error code is `E_NEEDS_SUBTOOL`: the item is parked exactly as
    /// `needs_subtool` parks it, with the digest Shipkeeper last reported for the kind (or none:
    /// then any digest reported next replays it), and the call is answered as a failure whose
    /// state is `needs_subtool`.
    async fn fail_as_parked(
        &self,
        mut tx: Box<dyn crate::ports::LogbookTx>,
        (actor, lease_id, record): (Principal, LeaseId, &muster_domain::LeaseRecord),
        mut item: muster_domain::Item,
        req: FailRequest,
        digest: [u8; 32],
        now: time::OffsetDateTime,
    ) -> Result<Failed, AppError> {
        let reported = tx.deployed_digest(item.kind).await?;
        let entry = item.park(record, actor, reported.as_deref(), &req.error, now)?;
        tx.save_item(&item).await?;
        let answer = Failed {
            item_id: item.id.to_string(),
            state: item.state,
            not_before: None,
        };
        let stored = LeaseOutcome {
            kind: OutcomeKind::Failed,
            digest,
            response: to_value(&answer)?,
        };
        tx.finish_lease(lease_id, &stored, now).await?;
        self.commit_with(tx, &[entry]).await?;
        self.stats.failed.add(item.kind, 1);
        self.stats.parked.add(item.kind, 1);
        Ok(answer)
    }
}

/// The error code with which a worker's `fail` parks the item instead of failing it.
pub const NEEDS_SUBTOOL: &str = "E_NEEDS_SUBTOOL";
