//! Failing a lease: re-queued with backoff, failed for good, or — for `E_NEEDS_SUBTOOL` —
//! parked as `needs_subtool` would park it.

use muster_domain::{FailOutcome, ItemState, LeaseId, OutcomeKind, Principal};
use serde_json::json;

use super::{Finish, Finishing, Muster};
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
        let request = json!({"error": req.error, "retryable": req.retryable});
        let mut f = match self
            .begin_finish(
                actor,
                lease_id,
                req.worker_id.as_deref(),
                (OutcomeKind::Failed, &request),
                "failure",
            )
            .await?
        {
            Finishing::Proceed(f) => *f,
            Finishing::Replay(answer, trace) => return Ok(Failed { trace, ..answer }),
        };
        if req.error.get("code").and_then(|c| c.as_str()) == Some(NEEDS_SUBTOOL) {
            return self.fail_as_parked(f, actor, &req.error).await;
        }
        let policy = self.config.policy(f.item.kind);
        let (outcome, entry) = f.item.fail(
            &f.record,
            actor,
            &req.error,
            req.retryable,
            &policy,
            self.jitter.sample(),
            f.now,
        )?;
        let (kind, state) = (f.item.kind, f.item.state);
        let answer = Failed {
            item_id: f.item.id.to_string(),
            state,
            not_before: match outcome {
                FailOutcome::Requeued { not_before } => Some(not_before),
                FailOutcome::Failed => None,
            },
            trace: f.item_trace(),
        };
        self.close_finish(f, &answer, &[entry]).await?;
        self.stats.failed.add(kind, 1);
        if state == ItemState::Failed {
            self.stats.failed_final.add(kind, 1);
        }
        Ok(answer)
    }

    /// A `fail` whose error code is `E_NEEDS_SUBTOOL`: the item is parked exactly as
    /// `needs_subtool` parks it, with the digest Shipkeeper last reported for the kind (or none:
    /// then any digest reported next replays it), and the call is answered as a failure whose
    /// state is `needs_subtool`.
    async fn fail_as_parked(
        &self,
        mut f: Finish,
        actor: Principal,
        error: &serde_json::Value,
    ) -> Result<Failed, AppError> {
        let reported = f.tx.deployed_digest(f.item.kind).await?;
        let entry = f
            .item
            .park(&f.record, actor, reported.as_deref(), error, f.now)?;
        let kind = f.item.kind;
        let answer = Failed {
            item_id: f.item.id.to_string(),
            state: f.item.state,
            not_before: None,
            trace: f.item_trace(),
        };
        self.close_finish(f, &answer, &[entry]).await?;
        self.stats.failed.add(kind, 1);
        self.stats.parked.add(kind, 1);
        Ok(answer)
    }
}

/// The error code with which a worker's `fail` parks the item instead of failing it.
pub const NEEDS_SUBTOOL: &str = "E_NEEDS_SUBTOOL";
