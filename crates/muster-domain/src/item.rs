//! The item state machine and the fencing rules of leases.
//!
//! ```text
//!             enqueue                 lease (fence+1, attempt+1)
//!   (none) ───────────▶ queued ───────────────────────────────▶ leased ──┐ re-lease after expiry
//!                        ▲  ▲                                     │  ▲   │ (fence+1, attempt+1)
//!          retry (op.)   │  │ fail, retryable, attempts left     │  └───┘
//!   failed ──────────────┘  └────────────────────────────────────┤
//!     ▲                     fail, final or attempts exhausted    │ complete ──▶ done
//!     └──────────────────────────────────────────────────────────┤
//!                                                                 │ needs_subtool ──▶ needs_subtool
//!
//!   retry (op.): failed | needs_subtool ──▶ queued (attempts reset)
//!   cancel (op.): queued | leased | needs_subtool | failed ──▶ cancelled (terminal; a lease out
//!                 on the item is superseded at once)
//! ```
//!
//! Fencing: every lease of an item takes the next fence number. Only a lease whose fence equals
//! the item's current fence may transition it, and only while the item is `leased`. An expired
//! lease keeps that right until another lease supersedes it.

mod vocab;

pub use vocab::{
    FailOutcome, Fence, ItemId, ItemState, LeaseGrant, LeaseId, LeaseOutcome, LeaseRecord,
    LeaseResult, LeaseUse, OutcomeKind, TransitionError, is_image_digest, request_digest,
};

use muster_ledger::{ChainHead, Entry, SealedEntry};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};

use crate::{Kind, Principal, Priority, RetryPolicy};
#[cfg(test)]
use uuid::Uuid; // the tests build ids with `use super::*`

/// An item's working state: everything a transition decision needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: ItemId,
    pub kind: Kind,
    pub priority: Priority,
    pub state: ItemState,
    /// Leases charged so far (reset by an operator's retry; a park is not charged).
    pub attempt: u32,
    /// Fence of the newest lease; 0 before the first.
    pub fence: Fence,
    /// The newest lease, kept while the item is leased (also after it expired).
    pub lease: Option<LeaseGrant>,
    pub not_before: Option<OffsetDateTime>,
    /// The worker image digest that could not handle the item, while parked.
    pub parked_digest: Option<String>,
    pub chain: ChainHead,
}

impl Item {
    /// A new queued item, and the ledger entry recording its creation. With a `not_before`
    /// later than `now` the item is not leasable before then (delayed work); an earlier one is
    /// no delay. See [`Item::place_in_line`].
    pub fn enqueue(
        id: ItemId,
        kind: Kind,
        priority: Priority,
        actor: Principal,
        now: OffsetDateTime,
        parent: Option<ItemId>,
        not_before: Option<OffsetDateTime>,
    ) -> (Item, SealedEntry) {
        let not_before = not_before
            .map(muster_ledger::truncate_to_micros)
            .filter(|t| *t > now);
        let mut item = Item {
            id,
            kind,
            priority,
            state: ItemState::Queued,
            attempt: 0,
            fence: Fence(0),
            lease: None,
            not_before,
            parked_digest: None,
            chain: ChainHead::genesis(),
        };
        let mut data = json!({"kind": kind.as_str(), "priority": priority.as_str()});
        if let Some(p) = parent {
            data["parent"] = json!(p.to_string());
        }
        if let Some(t) = not_before {
            data["not_before"] = json!(t.unix_timestamp_nanos() / 1000);
        }
        let entry = item.record("enqueued", None, ItemState::Queued, actor, None, now, data);
        (item, entry)
    }

    /// Where a new item enqueued at `now` stands in its priority's line (FIFO by this time):
    /// a delayed item takes its place at its `not_before`, as if enqueued then, so it neither
    /// jumps ahead of work enqueued before that time nor waits behind it.
    pub fn place_in_line(&self, now: OffsetDateTime) -> OffsetDateTime {
        self.not_before.map_or(now, |t| t.max(now))
    }

    /// Whether a lease request made at `now` may take this item.
    pub fn is_leasable(&self, now: OffsetDateTime) -> bool {
        match self.state {
            ItemState::Queued => self.not_before.is_none_or(|t| t <= now),
            ItemState::Leased => self.lease.as_ref().is_some_and(|l| l.expires_at <= now),
            _ => false,
        }
    }

    /// Hands the item out under a new lease with the next fence, or, if its expired lease used
    /// the last attempt, fails it.
    pub fn lease(
        &mut self,
        lease_id: LeaseId,
        worker_id: &str,
        actor: Principal,
        policy: &RetryPolicy,
        ttl: Duration,
        now: OffsetDateTime,
    ) -> Result<LeaseResult, TransitionError> {
        self.authorize(actor)?;
        if !self.is_leasable(now) {
            return Err(TransitionError::NotLeasable(self.state));
        }
        let from = self.state;
        if from == ItemState::Leased && !policy.allows_another(self.attempt) {
            return Ok(LeaseResult::Exhausted(self.expire(actor, now)));
        }
        self.fence = Fence(self.fence.0 + 1);
        self.attempt += 1;
        self.state = ItemState::Leased;
        self.not_before = None;
        self.lease = Some(LeaseGrant {
            lease_id,
            worker_id: worker_id.to_owned(),
            expires_at: now + ttl,
        });
        let data = json!({
            "lease_id": lease_id.to_string(),
            "worker_id": worker_id,
            "attempt": self.attempt,
        });
        let fence = Some(self.fence.0);
        let entry = self.record(
            "leased",
            Some(from),
            ItemState::Leased,
            actor,
            fence,
            now,
            data,
        );
        Ok(LeaseResult::Granted(entry))
    }

    /// Fails the item when `record` is its current lease, on its last attempt (by `policy`),
    /// and expired `grace` or longer before `now`: after the final grace the lease is lost
    /// whether or not a lease request took the item over first. `None`: the lease is not
    /// past its grace (or not current) and is judged as usual.
    pub fn expire_past_grace(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        policy: &RetryPolicy,
        grace: Duration,
        now: OffsetDateTime,
    ) -> Result<Option<SealedEntry>, TransitionError> {
        self.authorize(actor)?;
        let past = self.check_current(record).is_ok()
            && record.outcome.is_none()
            && !policy.allows_another(self.attempt)
            && self
                .lease
                .as_ref()
                .is_some_and(|l| l.expires_at + grace <= now);
        Ok(past.then(|| self.expire(actor, now)))
    }

    /// The leased item's lease expired with no attempts left: the item fails.
    fn expire(&mut self, actor: Principal, now: OffsetDateTime) -> SealedEntry {
        let from = self.state;
        let expired = self.lease.take();
        self.state = ItemState::Failed;
        let data = json!({
            "reason": "lease expired with no attempts left",
            "lease_id": expired.map(|l| l.lease_id.to_string()),
        });
        let fence = Some(self.fence.0);
        self.record(
            "expired",
            Some(from),
            ItemState::Failed,
            actor,
            fence,
            now,
            data,
        )
    }

    /// Checks the sender of a call on `record`: `actor` must be a worker of this item's kind
    /// (`Forbidden` first), and a `worker_id` it names must be the lease's (`WrongWorker`).
    /// Asked before [`Item::check_finish`], so a wrong sender is refused whatever the lease's
    /// state, in the call's own transaction.
    pub fn check_sender(
        &self,
        record: &LeaseRecord,
        actor: Principal,
        worker_id: Option<&str>,
    ) -> Result<(), TransitionError> {
        self.authorize(actor)?;
        match worker_id {
            Some(w) if w != record.worker_id => Err(TransitionError::WrongWorker),
            _ => Ok(()),
        }
    }

    /// Checks that `actor` may use `record` to finish this item with a request of `kind` whose
    /// canonical digest is `digest`.
    pub fn check_finish(
        &self,
        record: &LeaseRecord,
        actor: Principal,
        kind: OutcomeKind,
        digest: &[u8; 32],
    ) -> Result<LeaseUse, TransitionError> {
        self.authorize(actor)?;
        if let Some(done) = &record.outcome {
            return match done.kind {
                OutcomeKind::Late => Err(TransitionError::LeaseLost),
                k if k == kind && &done.digest == digest => {
                    Ok(LeaseUse::Replay(done.response.clone()))
                }
                _ => Err(TransitionError::Conflict),
            };
        }
        self.check_current(record)?;
        Ok(LeaseUse::Proceed)
    }

    fn check_current(&self, record: &LeaseRecord) -> Result<(), TransitionError> {
        if record.fence != self.fence || self.state != ItemState::Leased {
            return Err(TransitionError::LeaseLost);
        }
        Ok(())
    }

    /// Extends (or revives, if expired but not superseded) the lease, unless it is `max_run`
    /// or older: then it is no longer extended (`TimedOut`; see [`Item::time_out`]).
    #[allow(clippy::too_many_arguments)]
    pub fn heartbeat(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        worker_id: &str,
        ttl: Duration,
        max_run: Duration,
        now: OffsetDateTime,
    ) -> Result<OffsetDateTime, TransitionError> {
        self.authorize(actor)?;
        if record.outcome.is_some() {
            return Err(TransitionError::LeaseLost);
        }
        self.check_current(record)?;
        if record.worker_id != worker_id {
            return Err(TransitionError::WrongWorker);
        }
        if now >= record.granted_at + max_run {
            return Err(TransitionError::TimedOut {
                max_run_ms: max_run.whole_milliseconds() as i64,
            });
        }
        let expires_at = now + ttl;
        if let Some(lease) = self.lease.as_mut() {
            lease.expires_at = expires_at;
        }
        Ok(expires_at)
    }

    /// The current lease `record` reached its kind's maximum run time `max_run` while still
    /// extended past it (its worker keeps heartbeating): from now on it is treated exactly as
    /// a lease that expired at that limit — usable for complete or fail until superseded, the
    /// item leasable again, the attempt counted, the final grace counted from the limit. The
    /// `timed_out` entry records it once; `None` when there is nothing to cut (not the current
    /// lease, already finished, already cut, or expired before the limit on its own).
    pub fn time_out(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        max_run: Duration,
        now: OffsetDateTime,
    ) -> Option<SealedEntry> {
        let limit = muster_ledger::truncate_to_micros(record.granted_at + max_run);
        if self.check_current(record).is_err() || record.outcome.is_some() || now < limit {
            return None;
        }
        let lease = self.lease.as_mut().filter(|l| l.expires_at > limit)?;
        lease.expires_at = limit;
        let data = json!({
            "lease_id": record.lease_id.to_string(),
            "worker_id": record.worker_id,
            "max_run_ms": max_run.whole_milliseconds() as i64,
            "limit": limit.unix_timestamp_nanos() / 1000,
        });
        let fence = Some(record.fence.0);
        let state = ItemState::Leased;
        Some(self.record("timed_out", Some(state), state, actor, fence, now, data))
    }

    /// Finishes the item under `record` (checked with [`Item::check_finish`] first).
    pub fn complete(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        result: &Value,
        next: &[ItemId],
        now: OffsetDateTime,
    ) -> Result<SealedEntry, TransitionError> {
        self.check_current(record)?;
        self.state = ItemState::Done;
        self.lease = None;
        let data = json!({
            "lease_id": record.lease_id.to_string(),
            "result": result,
            "next": next.iter().map(ToString::to_string).collect::<Vec<_>>(),
        });
        Ok(self.record_under(record, "completed", ItemState::Done, actor, now, data))
    }

    /// Records a completion delivered under a superseded lease: kept in the ledger, not applied.
    pub fn record_late_result(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        result: &Value,
        now: OffsetDateTime,
    ) -> SealedEntry {
        let data = json!({
            "lease_id": record.lease_id.to_string(),
            "worker_id": record.worker_id,
            "result": result,
        });
        let state = self.state;
        self.record(
            "late_result",
            Some(state),
            state,
            actor,
            Some(record.fence.0),
            now,
            data,
        )
    }

    /// Records a failure: re-queued with backoff while attempts remain and the error is
    /// retryable, `failed` otherwise. `jitter` is a uniform random number in `[0, 1)`.
    #[allow(clippy::too_many_arguments)]
    pub fn fail(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        error: &Value,
        retryable: bool,
        policy: &RetryPolicy,
        jitter: f64,
        now: OffsetDateTime,
    ) -> Result<(FailOutcome, SealedEntry), TransitionError> {
        self.check_current(record)?;
        self.lease = None;
        let outcome = if retryable && policy.allows_another(self.attempt) {
            let not_before =
                muster_ledger::truncate_to_micros(now + policy.delay(self.attempt, jitter));
            self.state = ItemState::Queued;
            self.not_before = Some(not_before);
            FailOutcome::Requeued { not_before }
        } else {
            self.state = ItemState::Failed;
            FailOutcome::Failed
        };
        let data = json!({
            "lease_id": record.lease_id.to_string(),
            "error": error,
            "retryable": retryable,
            "attempt": self.attempt,
            "not_before": match outcome {
                FailOutcome::Requeued { not_before } => Some(not_before.unix_timestamp_nanos() / 1000),
                FailOutcome::Failed => None,
            },
        });
        let to = self.state;
        let entry = self.record_under(record, "failed", to, actor, now, data);
        Ok((outcome, entry))
    }

    /// Parks the item until a worker image other than `digest` is deployed for its kind. The
    /// park is not charged as an attempt.
    /// `digest` is `None` when the worker did not say which image it runs (a `fail` with
    /// `E_NEEDS_SUBTOOL` and no digest reported for the kind): any image reported next
    /// replays the item.
    pub fn park(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        digest: Option<&str>,
        layout: &Value,
        now: OffsetDateTime,
    ) -> Result<SealedEntry, TransitionError> {
        self.check_current(record)?;
        self.lease = None;
        self.state = ItemState::NeedsSubtool;
        self.attempt = self.attempt.saturating_sub(1);
        self.parked_digest = digest.map(str::to_owned);
        let data = json!({
            "lease_id": record.lease_id.to_string(),
            "worker_digest": digest,
            "layout": layout,
        });
        let to = ItemState::NeedsSubtool;
        Ok(self.record_under(record, "parked", to, actor, now, data))
    }

    /// A worker running `digest` could not handle the item, but `deployed` — another image —
    /// is already deployed for its kind (a rollout in progress): park and replay at once.
    /// This park *is* charged as an attempt, so an item bounced between old pods of a rollout
    /// that never finishes ends in `failed` through the attempt limit instead of looping.
    #[allow(clippy::too_many_arguments)]
    pub fn park_and_replay(
        &mut self,
        record: &LeaseRecord,
        actor: Principal,
        digest: &str,
        deployed: &str,
        layout: &Value,
        policy: &RetryPolicy,
        now: OffsetDateTime,
    ) -> Result<Vec<SealedEntry>, TransitionError> {
        // Parked as always, but the attempt the park would refund stays charged.
        let charged = self.attempt;
        let parked = self.park(record, actor, Some(digest), layout, now)?;
        self.attempt = charged;
        let mut entries = vec![parked];
        if policy.allows_another(self.attempt) {
            entries.push(self.replay(Principal::Shipkeeper, deployed, now)?);
        } else {
            self.state = ItemState::Failed;
            self.parked_digest = None;
            let data = json!({"reason": "parked by an outdated image with no attempts left", "deployed_digest": deployed});
            entries.push(self.record(
                "failed",
                Some(ItemState::NeedsSubtool),
                ItemState::Failed,
                actor,
                None,
                now,
                data,
            ));
        }
        Ok(entries)
    }

    /// Whether an item parked with `parked_digest` is replayed when `deployed` is the digest
    /// now deployed for its kind: any other image may handle the layout.
    pub fn replays_for(&self, deployed: &str) -> bool {
        self.state == ItemState::NeedsSubtool && self.parked_digest.as_deref() != Some(deployed)
    }

    /// A parked item goes back to `queued` because a worker image other than the one that
    /// could not handle it is deployed. Priority, place in line and attempts are unchanged.
    pub fn replay(
        &mut self,
        actor: Principal,
        deployed: &str,
        now: OffsetDateTime,
    ) -> Result<SealedEntry, TransitionError> {
        self.requeue(
            ItemState::NeedsSubtool,
            "replayed (only parked items can be)",
            "replayed",
            actor,
            now,
            |item| json!({"old_digest": item.parked_digest.take(), "new_digest": deployed}),
        )
    }

    /// An operator's retry of a failed or parked item: back to `queued` with its attempts
    /// reset (a parked item forgets the digest it was parked with).
    pub fn retry(
        &mut self,
        actor: Principal,
        now: OffsetDateTime,
    ) -> Result<SealedEntry, TransitionError> {
        let from = self.state;
        if !matches!(from, ItemState::Failed | ItemState::NeedsSubtool) {
            return Err(TransitionError::InvalidTransition {
                from,
                action: "retried (only failed and parked items can be)",
            });
        }
        self.requeue(from, "retried", "retried", actor, now, |item| {
            item.parked_digest = None;
            json!({"previous_attempts": std::mem::take(&mut item.attempt)})
        })
    }

    /// An operator cancels the item, with `reason`: from `queued`, `leased` (its lease is
    /// superseded at once: every later call under it is `LeaseLost`, a late result is kept as
    /// for any superseded lease), `needs_subtool` or `failed`, to `cancelled`. `Ok(None)` when
    /// it is cancelled already (nothing to record); a `done` item cannot be cancelled.
    pub fn cancel(
        &mut self,
        actor: Principal,
        reason: &str,
        now: OffsetDateTime,
    ) -> Result<Option<SealedEntry>, TransitionError> {
        let from = self.state;
        match from {
            ItemState::Cancelled => return Ok(None),
            ItemState::Done => {
                return Err(TransitionError::InvalidTransition {
                    from,
                    action: "cancelled (a finished item cannot be)",
                });
            }
            ItemState::Queued | ItemState::Leased | ItemState::NeedsSubtool | ItemState::Failed => {
            }
        }
        let lease = self.lease.take();
        self.state = ItemState::Cancelled;
        self.not_before = None;
        self.parked_digest = None;
        let data = json!({
            "reason": reason,
            "lease_id": lease.map(|l| l.lease_id.to_string()),
        });
        let fence = (from == ItemState::Leased).then_some(self.fence.0);
        let to = ItemState::Cancelled;
        Ok(Some(self.record(
            "cancelled",
            Some(from),
            to,
            actor,
            fence,
            now,
            data,
        )))
    }

    /// Sends an item in state `from` back to `queued` (a replay, an operator's retry): `change`
    /// makes the rest of the transition's changes and answers the ledger entry's data.
    fn requeue(
        &mut self,
        from: ItemState,
        action: &'static str,
        event: &str,
        actor: Principal,
        now: OffsetDateTime,
        change: impl FnOnce(&mut Item) -> Value,
    ) -> Result<SealedEntry, TransitionError> {
        if self.state != from {
            return Err(TransitionError::InvalidTransition {
                from: self.state,
                action,
            });
        }
        let data = change(self);
        self.state = ItemState::Queued;
        self.not_before = None;
        Ok(self.record(event, Some(from), ItemState::Queued, actor, None, now, data))
    }

    /// Records a transition out of `leased` made under the lease `record`.
    fn record_under(
        &mut self,
        record: &LeaseRecord,
        event: &str,
        to: ItemState,
        actor: Principal,
        now: OffsetDateTime,
        data: Value,
    ) -> SealedEntry {
        let fence = Some(record.fence.0);
        self.record(event, Some(ItemState::Leased), to, actor, fence, now, data)
    }

    /// Workers may act only on items of their own kind; operators, Conn and Shipkeeper never
    /// hold leases.
    fn authorize(&self, actor: Principal) -> Result<(), TransitionError> {
        match actor {
            Principal::Worker(k) if k == self.kind => Ok(()),
            principal => Err(TransitionError::Forbidden {
                principal,
                kind: self.kind,
            }),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        event: &str,
        from: Option<ItemState>,
        to: ItemState,
        actor: Principal,
        fence: Option<u64>,
        at: OffsetDateTime,
        data: Value,
    ) -> SealedEntry {
        self.chain.seal(Entry {
            subject_type: "item".to_owned(),
            subject_id: self.id.to_string(),
            event: event.to_owned(),
            from_state: from.map(|s| s.as_str().to_owned()),
            to_state: Some(to.as_str().to_owned()),
            actor: actor.to_string(),
            fence,
            at,
            data: data.to_string(),
        })
    }
}

#[cfg(test)]
mod tests;
