//! The properties the checker proves: their names (the tests look them up by name) and
//! their predicates.

use muster_domain::ItemState;
use stateright::Property;

use super::LeaseModel;
use crate::state::{Event, Recorded, Reply, Request, State, Witness, Worker, WorkerNo};

/// `always`: at most one lease of an item is live: unfinished (no transition recorded under
/// it) and promised by Muster (at its grant or in a heartbeat's 200) past the current tick.
pub const NO_TWO_LIVE_LEASES: &str = "no two live leases for one item";
/// `always`: each item is completed at most once, has exactly as many `next` items as
/// completions and a stored result exactly when completed, and no lease changes its item
/// twice.
pub const NO_EFFECT_TWICE: &str = "no effect is applied twice";
/// `always`: a 200 to a finishing call means that call's transition is in the ledger (judged
/// when the answer is given, whether or not it reaches the worker).
pub const ACKNOWLEDGED_IS_APPLIED: &str = "an acknowledged result was applied";
/// `always`: an `E_LEASE_LOST` to a finishing call means it was not applied and its lease was
/// superseded (or the item left `leased` without it); an `E_CONFLICT` means the lease was
/// finished by a different request.
pub const LEASE_LOST_IS_NOT_APPLIED: &str = "a result refused as lease lost was not applied";
/// `always`: every transition made by a lease was made by the item's newest lease; every late
/// result was recorded without changing the item.
pub const ONLY_NEWEST_LEASE_CHANGES: &str =
    "only the newest lease changes an item; a late result changes nothing";
/// `always`: a spooled result stays in flight until a final answer, and the worker drops it
/// only when it was applied or can never be (its lease superseded without changing
/// anything) — whatever was lost, duplicated or delayed before. With [`NO_INTERNAL_ERROR`]
/// (a 500 is the only answer that is not final), the next delivery that gets through
/// settles it.
pub const SPOOL_SETTLES: &str =
    "a spooled result is settled by the next delivery that gets through";

/// `always`: no step ran into a 500 (see [`crate::Anomaly`]).
pub const NO_INTERNAL_ERROR: &str = "the server never fails internally";

/// `sometimes`: a lease expired and the item was leased again under a newer fence.
pub const RELEASED_AFTER_EXPIRY: &str = "an item is re-leased after its lease expired";
/// `sometimes`: a retried completion is answered `replayed: true`.
pub const RETRY_REPLAYED: &str = "a retried completion is answered replayed";
/// `sometimes`: a completion under a superseded lease is refused and recorded as late.
pub const LATE_RESULT_REFUSED: &str = "a late completion after a re-lease is refused and recorded";
/// `sometimes`: a lease whose expiry passed, but which nobody superseded, still completes.
pub const EXPIRED_LEASE_COMPLETES: &str =
    "an expired lease that was not superseded still completes";
/// `sometimes`: a retryable failure requeues the item, and it is leased again.
pub const REQUEUED_AND_LEASED_AGAIN: &str =
    "a retryable failure requeues the item and it is leased again";
/// `sometimes`: `needs_subtool` parks an item.
pub const PARKED: &str = "an item is parked by needs_subtool";
/// `sometimes`: an expired lease had used the last attempt, so a lease request fails the item.
pub const EXHAUSTED: &str = "an expired lease with no attempts left fails the item";
/// `sometimes`: a failure fails the item for good.
pub const FAILED_FOR_GOOD: &str = "a failure fails the item for good";
/// `sometimes`: every item is done, each with its `next` item.
pub const ALL_DONE: &str = "every item is done with its next item";

/// Every property, `always` ones first.
pub(super) fn all() -> Vec<Property<LeaseModel>> {
    vec![
        Property::always(NO_TWO_LIVE_LEASES, no_two_live_leases),
        Property::always(NO_EFFECT_TWICE, no_effect_twice),
        Property::always(ACKNOWLEDGED_IS_APPLIED, acknowledged_is_applied),
        Property::always(LEASE_LOST_IS_NOT_APPLIED, lease_lost_is_not_applied),
        Property::always(ONLY_NEWEST_LEASE_CHANGES, only_newest_lease_changes),
        Property::always(SPOOL_SETTLES, spool_settles),
        Property::always(NO_INTERNAL_ERROR, |_, s: &State| s.anomalies.is_empty()),
        Property::sometimes(RELEASED_AFTER_EXPIRY, |_, s: &State| {
            s.ledger
                .iter()
                .flatten()
                .any(|r| r.event == Event::Leased && r.from == Some(ItemState::Leased))
        }),
        Property::sometimes(RETRY_REPLAYED, |_, s: &State| {
            s.witness == Some(Witness::ReplayedCompletion)
        }),
        Property::sometimes(LATE_RESULT_REFUSED, |_, s: &State| {
            s.leases.iter().any(|l| {
                l.outcome.is_some_and(|o| o.kind == Recorded::Late)
                    && l.fence < s.items[usize::from(l.item)].fence
            })
        }),
        Property::sometimes(EXPIRED_LEASE_COMPLETES, |_, s: &State| {
            s.witness == Some(Witness::CompletionAfterExpiry)
        }),
        Property::sometimes(REQUEUED_AND_LEASED_AGAIN, |_, s: &State| {
            s.ledger.iter().any(|rows| {
                rows.iter()
                    .position(|r| r.event == Event::Failed && r.to == ItemState::Queued)
                    .is_some_and(|p| rows[p..].iter().any(|r| r.event == Event::Leased))
            })
        }),
        Property::sometimes(PARKED, |_, s: &State| {
            s.items.iter().any(|i| i.state == ItemState::NeedsSubtool)
        }),
        Property::sometimes(EXHAUSTED, |_, s: &State| {
            s.ledger.iter().flatten().any(|r| r.event == Event::Expired)
        }),
        Property::sometimes(FAILED_FOR_GOOD, |_, s: &State| {
            s.ledger
                .iter()
                .flatten()
                .any(|r| r.event == Event::Failed && r.to == ItemState::Failed)
        }),
        Property::sometimes(ALL_DONE, |_, s: &State| {
            s.items.iter().all(|i| i.state == ItemState::Done) && s.children.iter().all(|c| *c == 1)
        }),
    ]
}

fn no_two_live_leases(_: &LeaseModel, s: &State) -> bool {
    (0..s.items.len()).all(|i| {
        let live = s
            .leases
            .iter()
            .enumerate()
            .filter(|(l, row)| {
                usize::from(row.item) == i
                    && row.promised_until > s.now
                    && s.effects_of(lease(*l)).next().is_none()
            })
            .count();
        live <= 1
    })
}

fn no_effect_twice(_: &LeaseModel, s: &State) -> bool {
    let per_item = s.ledger.iter().enumerate().all(|(i, rows)| {
        let completed = rows.iter().filter(|r| r.event == Event::Completed).count();
        completed <= 1
            && usize::from(s.children[i]) == completed
            && s.items[i].has_result == (completed == 1)
    });
    let per_lease = (0..s.leases.len()).all(|l| s.effects_of(lease(l)).count() <= 1);
    per_item && per_lease
}

/// Every 200 is judged by [`State::is_truthful`] in the state its transaction left.
fn acknowledged_is_applied(_: &LeaseModel, s: &State) -> bool {
    !s.false_answers
        .iter()
        .any(|a| matches!(a.reply, Reply::Ok { .. }))
}

/// Every refusal is judged by [`State::is_truthful`] in the state its transaction left. That a
/// superseded lease stays without effect afterwards is [`ONLY_NEWEST_LEASE_CHANGES`].
fn lease_lost_is_not_applied(_: &LeaseModel, s: &State) -> bool {
    !s.false_answers
        .iter()
        .any(|a| matches!(a.reply, Reply::LeaseLost | Reply::Conflict))
}

fn only_newest_lease_changes(_: &LeaseModel, s: &State) -> bool {
    s.ledger.iter().all(|rows| {
        let mut newest = None;
        for r in rows {
            let ok = match r.event {
                Event::Leased => {
                    newest = r.lease;
                    true
                }
                e if e.is_effect() => r.lease.is_some() && r.lease == newest,
                Event::LateResult => {
                    r.lease.is_some()
                        && r.from == Some(r.to)
                        && (r.lease != newest || r.to != ItemState::Leased)
                }
                _ => true,
            };
            if !ok {
                return false;
            }
        }
        true
    })
}

/// Every spooled result is in flight (so the next delivery that gets through reaches
/// Muster), and no worker removed a spooled result that was neither applied nor refused
/// because its lease was superseded.
fn spool_settles(_: &LeaseModel, s: &State) -> bool {
    s.dropped_results.is_empty()
        && s.workers
            .iter()
            .enumerate()
            .all(|(w, worker)| match *worker {
                Worker::Delivering { lease, finish } => s.requests.contains(&Request::Finish {
                    worker: WorkerNo::try_from(w).expect("at most 255 workers"),
                    lease,
                    finish,
                }),
                _ => true,
            })
}

fn lease(l: usize) -> crate::state::LeaseNo {
    crate::state::LeaseNo::try_from(l).expect("at most 255 leases")
}
