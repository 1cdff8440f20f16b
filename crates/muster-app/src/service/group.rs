//! The lanes of the use cases that commit in groups: a single lease request, or a single
//! completion, waits in its worker kind's lane and is written together with the concurrent ones
//! of that kind, by `combine`'s algorithm. Each is answered exactly as alone, and none before its
//! transaction committed.

use std::collections::HashSet;

use muster_domain::{LeaseId, Principal};

use super::{LeaseWant, MAX_BATCH, MAX_BATCH_NEXT, Muster, NextLease, check_next, splits};
use crate::combine::{Combiner, DrainGuard, Waiting};
use crate::error::AppError;
use crate::views::{CompleteRequest, Completed, LeaseGranted};

pub(super) type LeaseLanes = Combiner<Principal, LeaseWant, Result<Vec<LeaseGranted>, AppError>>;

/// A single completion waiting for a group commit, with its wish for a next lease.
pub(super) struct Completion {
    lease_id: LeaseId,
    req: CompleteRequest,
    lease_next: NextLease,
}

type CompletionAnswer = Result<(Completed, Option<LeaseGranted>), AppError>;
pub(super) type CompletionLanes = Combiner<Principal, Completion, CompletionAnswer>;

impl Muster {
    /// One attempt to lease, written in a transaction shared with the concurrent attempts of
    /// the same worker kind (group commit).
    pub(super) async fn try_lease(
        &self,
        worker_id: &str,
        actor: Principal,
        max: u32,
    ) -> Result<Vec<LeaseGranted>, AppError> {
        let want = LeaseWant {
            worker_id: worker_id.to_owned(),
            max,
        };
        let drain = self.drainer(Self::drain_leases, actor);
        answered(
            self.leases.call(actor, want, drain).await,
            "a lease request",
        )
    }

    /// What starts a drainer of `actor`'s lane: `drain` on a clone of the service, spawned.
    fn drainer<F>(&self, drain: fn(Self, Principal) -> F, actor: Principal) -> impl FnOnce()
    where
        F: Future<Output = ()> + Send + 'static,
    {
        move || {
            tokio::spawn(drain(self.clone(), actor));
        }
    }

    /// A drainer of `actor`'s lease lane: batches of queued lease requests, at most
    /// `MAX_BATCH` items asked for in all.
    async fn drain_leases(self, actor: Principal) {
        // The guard first: whatever ends this drainer, its place in the lane is given back.
        let mut guard = DrainGuard::new(&*self.leases, actor);
        let Some(kind) = actor.worker_kind() else {
            return;
        };
        loop {
            let mut asked = 0;
            let Some(batch) = guard.next_batch(|w| {
                let fits = asked + w.max <= MAX_BATCH;
                if fits {
                    asked += w.max;
                }
                fits
            }) else {
                return;
            };
            let (wants, answers): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|w| (w.req, w.answer)).unzip();
            self.stats.lease_groups.add(kind, 1);
            self.stats
                .lease_group_requests
                .add(kind, wants.len() as u64);
            match self.lease_for(kind, actor, &wants).await {
                Ok((granted, truncated)) => {
                    let mut again = Vec::new();
                    for ((req, answer), granted) in wants.into_iter().zip(answers).zip(granted) {
                        if truncated && granted.is_empty() {
                            // Items were left because of the payload budget, not because
                            // there were none: this request goes first in the next batch.
                            again.push(Waiting { req, answer });
                        } else {
                            // A receiver that is gone belonged to a client that hung up; its
                            // leases expire like those of a worker that crashed.
                            let _ = answer.send(Ok(granted));
                        }
                    }
                    guard.requeue(again);
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// A single completion through its kind's group commit.
    pub(super) async fn complete_grouped(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: CompleteRequest,
        lease_next: NextLease,
    ) -> CompletionAnswer {
        check_next(&req)?;
        let completion = Completion {
            lease_id,
            req,
            lease_next,
        };
        let drain = self.drainer(Self::drain_completions, actor);
        answered(
            self.completions.call(actor, completion, drain).await,
            "a completion",
        )
    }

    /// A drainer of `actor`'s completion lane: batches of queued completions, no lease twice
    /// in one batch (a repeated one waits for the next, where it is a replay or a conflict).
    async fn drain_completions(self, actor: Principal) {
        let mut guard = DrainGuard::new(&*self.completions, actor);
        loop {
            let mut seen = HashSet::new();
            // At most MAX_BATCH_NEXT items created in one transaction (each single
            // completion carries at most MAX_NEXT, so the first always fits).
            let mut created = 0;
            let Some(batch) = guard.next_batch(|c| {
                let fits = seen.len() < MAX_BATCH as usize
                    && created + c.req.next.len() <= MAX_BATCH_NEXT
                    && seen.insert(c.lease_id);
                if fits {
                    created += c.req.next.len();
                }
                fits
            }) else {
                return;
            };
            let mut reqs = Vec::with_capacity(batch.len());
            let mut nexts = Vec::with_capacity(batch.len());
            let mut answers = Vec::with_capacity(batch.len());
            for w in batch {
                reqs.push((w.req.lease_id, w.req.req));
                nexts.push(w.req.lease_next);
                answers.push(w.answer);
            }
            if let Some(kind) = actor.worker_kind() {
                self.stats.completion_groups.add(kind, 1);
                self.stats
                    .completion_group_requests
                    .add(kind, reqs.len() as u64);
            }
            // Kept to complete one by one if the group fails for a reason of its own.
            let alone = (reqs.len() > 1).then(|| (reqs.clone(), nexts.clone()));
            match (self.complete_batch(actor, reqs, nexts).await, alone) {
                (Ok((results, next_leases)), _) => {
                    for ((answer, result), next) in
                        answers.into_iter().zip(results).zip(next_leases)
                    {
                        // A receiver that is gone belonged to a client that hung up (a next
                        // lease it was granted expires like a crashed worker's).
                        let _ = answer.send(result.map(|done| (done, next)));
                    }
                }
                (Err(e), Some((reqs, nexts))) if splits(&e) => {
                    let open: Vec<bool> = answers.iter().map(|a| !a.is_closed()).collect();
                    let redone = self
                        .complete_each_alone(actor, &e, reqs, nexts, |i| open[i])
                        .await;
                    for (answer, result) in answers.into_iter().zip(redone) {
                        if let Some(result) = result {
                            let _ = answer.send(result);
                        }
                    }
                }
                // Logbook unreachable (every request of the group gets the same 503 and
                // retries; trying them one by one would only wait for it again), or a group
                // of one.
                (Err(e), _) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// After a shared completion transaction failed with `error` (nothing of it written):
    /// each completion `wanted` (by index) in a transaction of its own, so that one the
    /// database refuses fails only itself; `None` for one not wanted.
    pub(super) async fn complete_each_alone(
        &self,
        actor: Principal,
        error: &AppError,
        reqs: Vec<(LeaseId, CompleteRequest)>,
        nexts: Vec<NextLease>,
        wanted: impl Fn(usize) -> bool,
    ) -> Vec<Option<CompletionAnswer>> {
        // The database's own words (an internal error's Display is only "internal error").
        let detail = match error {
            AppError::Internal(detail) => detail.clone(),
            other => other.to_string(),
        };
        tracing::warn!(
            requests = reqs.len(),
            error = %detail,
            "a transaction of several completions failed; completing them one by one"
        );
        if let Some(kind) = actor.worker_kind() {
            self.stats.completion_splits.add(kind, 1);
        }
        let mut answers = Vec::with_capacity(reqs.len());
        for (i, (req, next)) in reqs.into_iter().zip(nexts).enumerate() {
            answers.push(if wanted(i) {
                Some(self.complete_alone(actor, req, next).await)
            } else {
                None
            });
        }
        answers
    }

    /// One completion in a transaction of its own.
    async fn complete_alone(
        &self,
        actor: Principal,
        req: (LeaseId, CompleteRequest),
        lease_next: NextLease,
    ) -> CompletionAnswer {
        let (mut results, mut next_leases) = self
            .complete_batch(actor, vec![req], vec![lease_next])
            .await?;
        match (results.pop(), next_leases.pop()) {
            (Some(result), Some(next)) => result.map(|done| (done, next)),
            _ => Err(AppError::Internal("a completion went unanswered".into())),
        }
    }
}

/// A lane's answer to `what`; none (its drainer ended without answering) is an internal error.
fn answered<A>(answer: Option<Result<A, AppError>>, what: &str) -> Result<A, AppError> {
    answer.unwrap_or_else(|| Err(AppError::Internal(format!("{what} went unanswered"))))
}
