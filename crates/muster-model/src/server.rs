//! Muster's side of the model: the lease use cases of `crates/muster-app/src/service/`, each
//! one atomic step, deciding with muster-domain's real functions.
//!
//! A use case is one Logbook transaction under row locks (ARCHITECTURE.md, invariants 2 and 4),
//! so the model runs it as one indivisible step: on a copy of the state that is kept (commit)
//! or thrown away (rollback). Where the use case reads or writes through SQL
//! (`crates/muster-pg/src/logbook/`), the model's function says which statement it mirrors.

use muster_domain::item::{LeaseResult, LeaseUse};
use muster_domain::{
    Fence, Item, ItemState, LeaseRecord, Principal, RetryPolicy, Routes, TransitionError,
};
use serde_json::json;
use time::Duration;

use crate::bridge::{
    self, KIND, NEXT_KIND, WORKER_DIGEST, at, child_id, domain_item, lease_id, ledger_row,
    project_item, result_of, tick, worker_id,
};
use crate::model::{Flaw, LeaseModel};
use crate::state::{
    Anomaly, Answer, Answered, Finish, ItemNo, LeaseNo, LeaseRow, Outcome, Recorded, Reply,
    Request, Response, State, Tick, Witness, WorkerNo,
};

/// Every model worker acts as `worker:trawl`.
const ACTOR: Principal = Principal::Worker(KIND);
/// `muster-app`'s bound on exhausted candidates failed by one lease attempt.
const MAX_CANDIDATES: usize = 16;
/// The jitter the model's server draws: with it, and a cap equal to the base, every retry
/// waits exactly one tick (see [`LeaseModel::retry_policy`]).
const JITTER: f64 = 0.0;

/// How one request ended.
enum Step {
    /// The transaction commits; the response goes out.
    Commit(Response),
    /// The step would grant a lease beyond the model's bound: not explored.
    OutOfBounds,
}

impl LeaseModel {
    /// The retry policy of the model's kind: base 2 s, factor 2, capped at 2 s, so that with
    /// zero jitter every retry is due one tick after the failure.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            base: Duration::seconds(2),
            factor: 2.0,
            cap: Duration::seconds(2),
            max_attempts: self.config.max_attempts,
        }
    }

    fn ttl(&self) -> Duration {
        Duration::seconds(i64::from(self.config.lease_ttl))
    }

    /// Muster receives `request` in state `s`: the state after its transaction, and the
    /// response it sends. `None` when the step lies beyond the model's bounds (a lease over
    /// `max_leases`).
    pub fn serve(&self, s: &State, request: Request) -> Option<(State, Response)> {
        let mut after = s.clone();
        let response = self.serve_in_place(&mut after, request)?;
        Some((after, response))
    }

    /// [`LeaseModel::serve`] on `s` itself. When it returns `None`, `s` is unchanged.
    pub fn serve_in_place(&self, s: &mut State, request: Request) -> Option<Response> {
        // What a transaction may write, kept for a rollback.
        let backup = (
            s.items.clone(),
            s.ledger.clone(),
            s.children.clone(),
            s.leases.clone(),
        );
        let promised_until = match request {
            Request::Finish { lease, .. } => Some(s.leases[usize::from(lease)].promised_until),
            Request::Lease { .. } | Request::Heartbeat { .. } => None,
        };
        let step = match request {
            Request::Lease { worker } => self.lease(s, worker),
            Request::Heartbeat { worker, lease } => self.heartbeat(s, worker, lease),
            Request::Finish { lease, finish, .. } => self.finish(s, lease, finish),
        };
        let response = match step {
            Ok(Step::Commit(response)) => response,
            Ok(Step::OutOfBounds) => {
                (s.items, s.ledger, s.children, s.leases) = backup;
                return None;
            }
            Err(anomaly) => {
                // Rolled back: nothing of the transaction stays; the caller gets a 500.
                (s.items, s.ledger, s.children, s.leases) = backup;
                s.anomalies.insert(anomaly);
                match request {
                    Request::Finish { .. } => Response::Finished(Reply::Internal),
                    // A worker treats a 500 to these like a lost answer.
                    Request::Lease { .. } => Response::NoWork,
                    Request::Heartbeat { .. } => Response::HeartbeatOk,
                }
            }
        };
        let after = s;
        if let (Request::Finish { lease, finish, .. }, Response::Finished(reply)) =
            (request, response)
        {
            let answered = Answered {
                lease,
                finish,
                reply,
            };
            if !after.is_truthful(&answered) {
                after.false_answers.insert(answered);
            }
            after.witness = match (finish, reply) {
                (Finish::Complete, Reply::Ok { replayed: true }) => {
                    Some(Witness::ReplayedCompletion)
                }
                (Finish::Complete, Reply::Ok { replayed: false })
                    if promised_until.is_some_and(|p| p <= after.now) =>
                {
                    Some(Witness::CompletionAfterExpiry)
                }
                _ => after.witness,
            };
        }
        forget_passed_promises(after);
        Some(response)
    }

    /// `Muster::try_lease` / `lease_in` with `max` 1: take the first leasable item and lease it
    /// through `Item::lease`, or fail it when its expired lease used the last attempt (written
    /// at once) and look again.
    fn lease(&self, tx: &mut State, worker: WorkerNo) -> Result<Step, Anomaly> {
        let now = tx.now;
        let policy = self.retry_policy();
        for _ in 0..MAX_CANDIDATES {
            let Some(i) = lock_next_leasable(tx, self.config.max_attempts, self.config.final_grace)
            else {
                break;
            };
            let idx = usize::from(i);
            let mut item = domain_item(i, &tx.items[idx]);
            let lease = LeaseNo::try_from(tx.leases.len()).map_err(|_| Anomaly::Unprojectable)?;
            let leased = item.lease(
                lease_id(lease),
                &worker_id(worker),
                ACTOR,
                &policy,
                self.ttl(),
                at(now),
            );
            match leased {
                Ok(LeaseResult::Granted(entry)) => {
                    if tx.leases.len() >= usize::from(self.config.max_leases) {
                        return Ok(Step::OutOfBounds);
                    }
                    let row = project_item(&item, tx.items[idx].has_result)?;
                    let grant = row.lease.ok_or(Anomaly::Unprojectable)?;
                    tx.items[idx] = row;
                    // insert_leases: INSERT INTO core.leases (id, item_id, kind, fence, worker_id, leased_at)
                    tx.leases.push(LeaseRow {
                        item: i,
                        fence: row.fence,
                        worker,
                        outcome: None,
                        promised_until: grant.expires,
                    });
                    tx.ledger[idx].push(ledger_row(&entry)?);
                    return Ok(Step::Commit(Response::Leased { lease }));
                }
                Ok(LeaseResult::Exhausted(entry)) => {
                    tx.items[idx] = project_item(&item, tx.items[idx].has_result)?;
                    tx.ledger[idx].push(ledger_row(&entry)?);
                }
                // The use case answers 500 and drops the transaction.
                Err(_) => return Err(Anomaly::OfferedItemRefused),
            }
        }
        // 204 once the long poll ends.
        Ok(Step::Commit(Response::NoWork))
    }

    /// `Muster::heartbeat`: `Item::heartbeat` extends (or revives) the newest lease.
    fn heartbeat(&self, tx: &mut State, worker: WorkerNo, lease: LeaseNo) -> Result<Step, Anomaly> {
        let (i, record, mut item) = lock_lease(tx, lease);
        let record = self.present(record, &mut item, false, tx.now);
        let idx = usize::from(i);
        let max_run = bridge::MAX_RUN;
        match item.heartbeat(
            &record,
            ACTOR,
            &worker_id(worker),
            self.ttl(),
            max_run,
            at(tx.now),
        ) {
            Ok(expires_at) => {
                tx.items[idx] = project_item(&item, tx.items[idx].has_result)?;
                tx.leases[usize::from(lease)].promised_until = tick(expires_at)?;
                Ok(Step::Commit(Response::HeartbeatOk))
            }
            Err(TransitionError::LeaseLost) => Ok(Step::Commit(Response::HeartbeatLost)),
            Err(_) => Err(Anomaly::UnexpectedRefusal),
        }
    }

    /// `Muster::complete` (`complete_one` on a batch of one), `Muster::fail` and
    /// `Muster::needs_subtool`: `Item::check_finish`
    /// decides between proceeding, replaying the stored answer and refusing; then
    /// `Item::complete`, `Item::fail` or `Item::park` makes the transition.
    fn finish(&self, tx: &mut State, lease: LeaseNo, finish: Finish) -> Result<Step, Anomaly> {
        let now = tx.now;
        let digest = bridge::digest(lease, finish);
        let (i, record, mut item) = lock_lease(tx, lease);
        let record = self.present(record, &mut item, true, now);
        let idx = usize::from(i);
        let answer =
            |reply: Reply| -> Result<Step, Anomaly> { Ok(Step::Commit(Response::Finished(reply))) };
        match item.check_finish(&record, ACTOR, bridge::request_kind(finish), &digest) {
            Ok(LeaseUse::Proceed) => {}
            Ok(LeaseUse::Replay(stored)) => {
                bridge::replayed_state(&stored)?;
                return answer(Reply::Ok { replayed: true });
            }
            Err(TransitionError::LeaseLost)
                if finish == Finish::Complete && record.outcome.is_none() =>
            {
                // Superseded: keep the late result in the ledger, apply nothing.
                let before = project_item(&item, tx.items[idx].has_result)?;
                let entry = item.record_late_result(&record, ACTOR, &result_of(lease), at(now));
                let after = project_item(&item, tx.items[idx].has_result)?;
                if after != before {
                    return Err(Anomaly::LateResultChangedItem);
                }
                tx.items[idx] = after;
                tx.ledger[idx].push(ledger_row(&entry)?);
                self.finish_lease(
                    tx,
                    lease,
                    Outcome {
                        kind: Recorded::Late,
                        finish,
                        answer: None,
                    },
                )?;
                if self.config.flaw == Some(Flaw::AcknowledgeLateResults) {
                    return answer(Reply::Ok { replayed: false });
                }
                return answer(Reply::LeaseLost);
            }
            Err(TransitionError::LeaseLost) => return answer(Reply::LeaseLost),
            Err(TransitionError::Conflict) => return answer(Reply::Conflict),
            Err(_) => return Err(Anomaly::UnexpectedRefusal),
        }
        let recorded = match finish {
            Finish::Complete => {
                self.apply_completion(tx, i, &mut item, &record)?;
                Recorded::Completed
            }
            Finish::Fail { retryable } => {
                let error = json!({"code": "E_MODEL", "message": "the model worker failed"});
                let (_, entry) = item
                    .fail(
                        &record,
                        ACTOR,
                        &error,
                        retryable,
                        &self.retry_policy(),
                        JITTER,
                        at(now),
                    )
                    .map_err(|_| Anomaly::TransitionRefusedAfterCheck)?;
                tx.items[idx] = project_item(&item, tx.items[idx].has_result)?;
                tx.ledger[idx].push(ledger_row(&entry)?);
                Recorded::Failed
            }
            Finish::NeedsSubtool => {
                // No image digest is ever reported in the model (`deployed_digest` is NULL),
                // so the use case parks rather than parks-and-replays.
                let layout = json!({"signature": "model-layout"});
                let entry = item
                    .park(&record, ACTOR, Some(WORKER_DIGEST), &layout, at(now))
                    .map_err(|_| Anomaly::TransitionRefusedAfterCheck)?;
                tx.items[idx] = project_item(&item, tx.items[idx].has_result)?;
                tx.ledger[idx].push(ledger_row(&entry)?);
                Recorded::Parked
            }
        };
        let row = tx.items[idx];
        self.finish_lease(
            tx,
            lease,
            Outcome {
                kind: recorded,
                finish,
                answer: Some(Answer {
                    state: row.state,
                    not_before: row.not_before,
                }),
            },
        )?;
        answer(Reply::Ok { replayed: false })
    }

    /// The body of `complete_one` after the check: the route check, the `next` item
    /// (`Item::enqueue`), `Item::complete`, and the writes of one transaction.
    fn apply_completion(
        &self,
        tx: &mut State,
        i: ItemNo,
        item: &mut Item,
        record: &LeaseRecord,
    ) -> Result<(), Anomaly> {
        let idx = usize::from(i);
        let now = at(tx.now);
        if Routes::default()
            .first_refused(item.kind, [NEXT_KIND])
            .is_some()
        {
            return Err(Anomaly::RouteRefused);
        }
        let (child, _child_entry) = Item::enqueue(
            child_id(i, tx.children[idx]),
            NEXT_KIND,
            item.priority,
            ACTOR,
            now,
            Some(item.id),
            None,
        );
        let result = result_of(bridge::lease_no(record.lease_id)?);
        let entry = item
            .complete(record, ACTOR, &result, &[child.id], now)
            .map_err(|_| Anomaly::TransitionRefusedAfterCheck)?;
        // save_items: UPDATE core.items SET …, result = … FROM unnest(…) WHERE id = …
        tx.items[idx] = project_item(item, true)?;
        // insert_items: INSERT INTO core.items (…, parent_id, …) SELECT … FROM unnest(…)
        tx.children[idx] += 1;
        tx.ledger[idx].push(ledger_row(&entry)?);
        Ok(())
    }

    /// How the (possibly deliberately broken) server presents a lease to the domain.
    fn present(
        &self,
        mut record: LeaseRecord,
        item: &mut Item,
        finishing: bool,
        now: Tick,
    ) -> LeaseRecord {
        match self.config.flaw {
            None => {}
            // No fence comparison: the lease is taken as the item's newest.
            Some(Flaw::NoFencing) => record.fence = item.fence,
            // No per-lease outcome: a retried delivery looks like a first one.
            Some(Flaw::NoOutcomeRecords) => record.outcome = None,
            // A finishing call checks nothing but the fence (no outcome, no state check).
            Some(Flaw::FenceOnly) => {
                record.outcome = None;
                if finishing && record.fence == item.fence {
                    item.state = ItemState::Leased;
                }
            }
            // An expired lease counts as superseded (fence 0 belongs to no lease).
            Some(Flaw::ExpiredLeasesAreLost)
                if item.lease.as_ref().is_some_and(|l| l.expires_at <= at(now)) =>
            {
                record.fence = Fence(0);
            }
            Some(Flaw::ExpiredLeasesAreLost | Flaw::AcknowledgeLateResults) => {}
        }
        record
    }

    /// Mirrors `PgTx::finish_leases` (`crates/muster-pg/src/logbook/leases.rs`):
    ///
    /// ```sql
    /// WITH w AS (UPDATE core.leases l SET outcome = u.outcome, outcome_digest = u.digest,
    ///                   response = u.response, finished_at = $5
    ///            FROM unnest(…) AS u(id, outcome, digest, response)
    ///            WHERE l.id = u.id AND l.outcome IS NULL RETURNING 1)
    /// SELECT core.expect_rows('finishing leases', count(*), $6) FROM w
    /// ```
    ///
    /// A lease that already has an outcome is not updated, `core.expect_rows` raises, the
    /// transaction aborts and the use case answers 500: here an [`Anomaly`] and a rollback.
    fn finish_lease(
        &self,
        tx: &mut State,
        lease: LeaseNo,
        outcome: Outcome,
    ) -> Result<(), Anomaly> {
        if matches!(
            self.config.flaw,
            Some(Flaw::NoOutcomeRecords | Flaw::FenceOnly)
        ) {
            return Ok(());
        }
        let row = &mut tx.leases[usize::from(lease)];
        if row.outcome.is_some() {
            return Err(Anomaly::LeaseAlreadyFinished);
        }
        row.outcome = Some(outcome);
        Ok(())
    }
}

/// Keeps a promise that has passed as 0: whether it passed is all the properties ask.
pub(crate) fn forget_passed_promises(s: &mut State) {
    let now = s.now;
    for lease in &mut s.leases {
        if lease.promised_until <= now {
            lease.promised_until = 0;
        }
    }
}

/// Mirrors `PgTx::lock_next_leasable` (`crates/muster-pg/src/logbook/leases.rs`) with `limit` 1
/// (a plain `POST /v1/leases`, without `max`). The statement reads queued items from
/// `items_queued_order` and expired leases from `items_lease_expiry` (V8) and merges them; the
/// rows it may take and their order are those of this single predicate:
///
/// ```sql
/// SELECT … FROM core.items i
/// WHERE i.kind = $1 AND i.state IN ('queued', 'leased')
///   AND CASE WHEN i.state = 'queued' THEN coalesce(i.not_before <= $2, true)
///            ELSE i.lease_expires_at <= $2
///                 AND (i.attempt < $8 OR i.lease_expires_at <= $9) END
/// ORDER BY i.priority, i.enqueued_at, i.id LIMIT $3 FOR UPDATE SKIP LOCKED
/// ```
///
/// Every root item is a normal-priority trawl item enqueued at tick 0, and their ids grow with
/// their index, so the order is the index order. `SKIP LOCKED` skips nothing: the model runs one
/// transaction at a time. `lease_expires_at <= $2` is NULL, so false, for a row without a lease.
/// The statement's queued side starts at a lease hint (`muster-pg/src/hint.rs`), which can only
/// delay an item that became leasable behind it, never make a row qualify that does not; the
/// model takes the strict order, the case the fencing invariants are checked against. `$8` is
/// the kind's `max_attempts` and `$9` is `$2` less the final grace: an item on its last attempt
/// is offered only once its lease expired the grace ago.
fn lock_next_leasable(s: &State, max_attempts: u32, final_grace: Tick) -> Option<ItemNo> {
    let now = s.now;
    s.items
        .iter()
        .position(|r| match r.state {
            ItemState::Queued => r.not_before.is_none_or(|t| t <= now),
            ItemState::Leased => r.lease.is_some_and(|g| {
                let last = u32::from(r.attempt) >= max_attempts;
                g.expires <= now
                    && (!last || u16::from(g.expires) + u16::from(final_grace) <= u16::from(now))
            }),
            ItemState::Done
            | ItemState::Failed
            | ItemState::NeedsSubtool
            | ItemState::Cancelled => false,
        })
        .and_then(|p| ItemNo::try_from(p).ok())
}

/// Mirrors `PgTx::lock_lease` (`lock_leases` with one id): `SELECT l.…, i.… FROM core.leases l
/// JOIN core.items i ON i.id = l.item_id WHERE l.id = ANY($1) ORDER BY i.id, l.id FOR UPDATE
/// OF i, l`. Every lease a model request names was granted, so the row exists (no 404 path).
fn lock_lease(s: &State, lease: LeaseNo) -> (ItemNo, LeaseRecord, Item) {
    let row = &s.leases[usize::from(lease)];
    let item = domain_item(row.item, &s.items[usize::from(row.item)]);
    (row.item, bridge::lease_record(lease, row), item)
}

#[cfg(test)]
mod tests;
