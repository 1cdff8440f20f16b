//! The lanes of the use cases that commit in groups: a single lease request, or a single
//! completion, waits in its worker kind's lane and is written together with the concurrent ones
//! of that kind, by `combine`'s algorithm. Each is answered exactly as alone, and none before its
//! transaction committed. A traced call's request carries its trace: the batch's transactions
//! go to one traced member's trace, and each member's call learns the batch it rode in
//! (`telemetry::batch`, `telemetry::rode`).

use std::collections::HashSet;
use std::sync::Arc;

use muster_domain::{LeaseId, Principal};

use super::{LeaseWant, MAX_BATCH, MAX_BATCH_NEXT, Muster, NextLease, check_next, splits};
use crate::combine::{Combiner, DrainGuard, Waiting};
use crate::error::AppError;
use crate::telemetry::{self, BatchTrace, CallTrace};
use crate::views::{CompleteRequest, Completed, LeaseGranted};

/// A request in a lane, with the trace of the call that made it (`None`: not traced).
pub(super) struct Traced<R> {
    req: R,
    trace: Option<CallTrace>,
}

/// A request's answer, with the batch it rode in when a member of that batch was traced.
pub(super) struct Rode<A> {
    answer: A,
    batch: Option<Arc<BatchTrace>>,
}

pub(super) type LeaseLanes =
    Combiner<Principal, Traced<LeaseWant>, Rode<Result<Vec<LeaseGranted>, AppError>>>;

/// A single completion waiting for a group commit, with its wish for a next lease.
pub(super) struct Completion {
    lease_id: LeaseId,
    req: CompleteRequest,
    lease_next: NextLease,
}

type CompletionAnswer = Result<(Completed, Option<LeaseGranted>), AppError>;
pub(super) type CompletionLanes = Combiner<Principal, Traced<Completion>, Rode<CompletionAnswer>>;

impl Muster {
    /// One attempt to lease, written in a transaction shared with the concurrent attempts of
    /// the same worker kind (group commit).
    pub(super) async fn try_lease(
        &self,
        worker_id: &str,
        actor: Principal,
        max: u32,
    ) -> Result<Vec<LeaseGranted>, AppError> {
        let want = Traced {
            req: LeaseWant {
                worker_id: worker_id.to_owned(),
                max,
            },
            trace: telemetry::current(),
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
                let fits = asked + w.req.max <= MAX_BATCH;
                if fits {
                    asked += w.req.max;
                }
                fits
            }) else {
                return;
            };
            let carrier = telemetry::carrier(batch.iter().map(|w| w.req.trace));
            // Kept for requests put back, only when a member is traced (no allocation when
            // tracing is off).
            let traces: Vec<Option<CallTrace>> = match carrier {
                Some(_) => batch.iter().map(|w| w.req.trace).collect(),
                None => Vec::new(),
            };
            let (wants, answers): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|w| (w.req.req, w.answer)).unzip();
            self.stats.lease_groups.add(kind, 1);
            self.stats
                .lease_group_requests
                .add(kind, wants.len() as u64);
            let (leased, rode) = telemetry::batch(carrier, wants.len(), async {
                self.lease_for(kind, actor, &wants).await
            })
            .await;
            match leased {
                Ok((granted, truncated)) => {
                    let mut again = Vec::new();
                    let each = wants.into_iter().zip(answers).zip(granted).enumerate();
                    for (i, ((req, answer), granted)) in each {
                        if truncated && granted.is_empty() {
                            // Items were left because of the payload budget, not because
                            // there were none: this request goes first in the next batch.
                            let trace = traces.get(i).copied().flatten();
                            let req = Traced { req, trace };
                            again.push(Waiting { req, answer });
                        } else {
                            // A receiver that is gone belonged to a client that hung up; its
                            // leases expire like those of a worker that crashed.
                            let _ = answer.send(Rode {
                                answer: Ok(granted),
                                batch: rode.clone(),
                            });
                        }
                    }
                    guard.requeue(again);
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(Rode {
                            answer: Err(e.clone()),
                            batch: rode.clone(),
                        });
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
        let completion = Traced {
            req: Completion {
                lease_id,
                req,
                lease_next,
            },
            trace: telemetry::current(),
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
            let Some(batch) = guard.next_batch(|Traced { req: c, .. }| {
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
            let carrier = telemetry::carrier(batch.iter().map(|w| w.req.trace));
            for w in batch {
                reqs.push((w.req.req.lease_id, w.req.req.req));
                nexts.push(w.req.req.lease_next);
                answers.push(w.answer);
            }
            if let Some(kind) = actor.worker_kind() {
                self.stats.completion_groups.add(kind, 1);
                self.stats
                    .completion_group_requests
                    .add(kind, reqs.len() as u64);
            }
            let size = reqs.len();
            let (answered, rode) = telemetry::batch(carrier, size, async {
                self.complete_group(actor, reqs, nexts, |i| !answers[i].is_closed())
                    .await
            })
            .await;
            for (answer, result) in answers.into_iter().zip(answered) {
                // A receiver that is gone belonged to a client that hung up (a next lease it
                // was granted expires like a crashed worker's).
                if let Some(result) = result {
                    let _ = answer.send(Rode {
                        answer: result,
                        batch: rode.clone(),
                    });
                }
            }
        }
    }

    /// The completions of one batch in one transaction, or, when that transaction failed for a
    /// reason of one of them, each `open` one (by index) alone; `None` for one not redone.
    async fn complete_group(
        &self,
        actor: Principal,
        reqs: Vec<(LeaseId, CompleteRequest)>,
        nexts: Vec<NextLease>,
        open: impl Fn(usize) -> bool,
    ) -> Vec<Option<CompletionAnswer>> {
        let size = reqs.len();
        // Kept to complete one by one if the group fails for a reason of its own.
        let alone = (size > 1).then(|| (reqs.clone(), nexts.clone()));
        match (self.complete_batch(actor, reqs, nexts).await, alone) {
            (Ok((results, next_leases)), _) => results
                .into_iter()
                .zip(next_leases)
                .map(|(result, next)| Some(result.map(|done| (done, next))))
                .collect(),
            (Err(e), Some((reqs, nexts))) if splits(&e) => {
                self.complete_each_alone(actor, &e, reqs, nexts, open).await
            }
            // Logbook unreachable (every request of the group gets the same 503 and retries;
            // trying them one by one would only wait for it again), or a group of one.
            (Err(e), _) => (0..size).map(|_| Some(Err(e.clone()))).collect(),
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

/// A lane's answer to `what`, after handing the batch it rode in to the call's trace; none (its
/// drainer ended without answering) is an internal error.
fn answered<A>(answer: Option<Rode<Result<A, AppError>>>, what: &str) -> Result<A, AppError> {
    let Some(rode) = answer else {
        return Err(AppError::Internal(format!("{what} went unanswered")));
    };
    if let Some(batch) = &rode.batch {
        telemetry::rode(batch);
    }
    rode.answer
}
