//! The stateright model: workers, an unreliable network, a logical clock, and the properties.

use std::collections::BTreeSet;

use muster_domain::{Item, ItemState, Principal, Priority};
use stateright::{Model, Property};

use crate::bridge::{KIND, at, item_id, ledger_row, project_item};
use crate::server::forget_passed_promises;
use crate::state::{
    Event, Finish, Recorded, Reply, Request, Response, State, Tick, Witness, Worker, WorkerNo,
};

/// A deliberately broken server rule, to show that the properties can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// The server does not compare the lease's fence with the item's: any lease of the item
    /// is taken for the newest.
    NoFencing,
    /// The server keeps no per-lease outcome: a retried delivery looks like a first one.
    NoOutcomeRecords,
    /// A finishing call checks only that the lease's fence is the item's current fence: no
    /// per-lease outcome, no check that the item is still leased.
    FenceOnly,
    /// A lease whose expiry passed is treated as lost at once, superseded or not (the design
    /// the contract rejects: it throws away results spooled across a Muster restart).
    ExpiredLeasesAreLost,
    /// A late result is recorded as the server does, but answered 200 instead of 409.
    AcknowledgeLateResults,
}

/// The model's size and rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Root items, all of kind trawl, queued at tick 0.
    pub items: u8,
    /// Worker processes, all of kind trawl.
    pub workers: u8,
    /// Lease time to live, in ticks.
    pub lease_ttl: Tick,
    /// The clock stops here (the bound that keeps the state space finite).
    pub max_time: Tick,
    /// Leases granted at most, over all items (a grant beyond it is not explored).
    pub max_leases: u8,
    /// Leases an item may be charged (the retry policy's `max_attempts`).
    pub max_attempts: u32,
    /// `None`: the server as built.
    pub flaw: Option<Flaw>,
    /// Explore one state for all states that differ only in how the workers are numbered
    /// (much smaller; a counterexample then renames workers along the way, so turn it off to
    /// read one).
    pub symmetry: bool,
}

impl Default for Config {
    /// The configuration the test checks exhaustively.
    fn default() -> Self {
        Config {
            items: 2,
            workers: 2,
            lease_ttl: 1,
            max_time: 2,
            max_leases: 3,
            max_attempts: 2,
            flaw: None,
            symmetry: true,
        }
    }
}

/// The lease protocol as a stateright model.
#[derive(Clone, Debug)]
pub struct LeaseModel {
    pub config: Config,
}

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock advances one tick.
    Tick,
    /// An idle worker asks for a lease.
    RequestLease(WorkerNo),
    /// A working worker's keep-alive task sends a heartbeat: one at a time, and only when it
    /// could move the expiry (one sent earlier would change nothing, or arrive later, which
    /// the network's delay already covers).
    Heartbeat(WorkerNo),
    /// A working worker finishes: the result goes to the spool, then out.
    Finish(WorkerNo, Finish),
    /// A working worker's process dies: the lease and the work are gone (nothing was spooled).
    Crash(WorkerNo),
    /// The network hands a request to Muster, which runs its transaction, and the answer
    /// reaches the worker. Until then the request may sit in flight for any number of steps
    /// (a late delivery).
    Deliver(Request),
    /// As [`Action::Deliver`], but the answer is lost on the way back: the transaction
    /// committed and the worker does not know. A lease call times out (the worker asks again
    /// later); a heartbeat's keep-alive carries on; a finishing call is *redelivered*: the
    /// spooled result goes back in flight (the client's retry loop, or `redeliver_spool` after
    /// a restart), as many times as answers are lost.
    DeliverAnswerLost(Request),
}

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

impl LeaseModel {
    pub fn new(config: Config) -> Self {
        LeaseModel { config }
    }

    /// Every item queued at tick 0 (through `Item::enqueue`), every worker idle, nothing in
    /// flight.
    pub fn initial_state(&self) -> State {
        let mut items = Vec::new();
        let mut ledger = Vec::new();
        for i in 0..self.config.items {
            let (item, entry) = Item::enqueue(
                item_id(i),
                KIND,
                Priority::Normal,
                Principal::Operator,
                at(0),
                None,
            );
            items.push(project_item(&item, false).expect("an enqueued item is projectable"));
            ledger.push(vec![
                ledger_row(&entry).expect("an enqueue entry is projectable"),
            ]);
        }
        State {
            now: 0,
            items,
            ledger,
            children: vec![0; usize::from(self.config.items)],
            leases: Vec::new(),
            workers: vec![Worker::Idle; usize::from(self.config.workers)],
            requests: BTreeSet::new(),
            false_answers: BTreeSet::new(),
            dropped_results: BTreeSet::new(),
            witness: None,
            anomalies: BTreeSet::new(),
        }
    }

    /// The worker that sent `request` reads Muster's `response` (the worker client's rules).
    pub fn read(s: &mut State, request: Request, response: Response) {
        let w = usize::from(request.worker());
        let worker = s.workers[w];
        s.workers[w] = match (request, response, worker) {
            (Request::Lease { .. }, Response::Leased { lease }, Worker::AwaitingLease) => {
                Worker::Working { lease }
            }
            // 204 (or a 500): ask again later.
            (Request::Lease { .. }, _, Worker::AwaitingLease) => Worker::Idle,
            // The keep-alive reports the loss; the work is abandoned.
            (Request::Heartbeat { lease, .. }, Response::HeartbeatLost, Worker::Working { .. })
                if worker == (Worker::Working { lease }) =>
            {
                Worker::Idle
            }
            (Request::Finish { lease, finish, .. }, Response::Finished(reply), _)
                if worker == (Worker::Delivering { lease, finish }) =>
            {
                match reply {
                    // Final answers: the spool file is removed.
                    Reply::Ok { .. } | Reply::LeaseLost | Reply::Conflict => {
                        if !s.settled(lease, finish) {
                            s.dropped_results.insert((lease, finish));
                        }
                        Worker::Idle
                    }
                    // Kept, and delivered again.
                    Reply::Internal => {
                        s.requests.insert(request);
                        worker
                    }
                }
            }
            _ => worker,
        };
    }

    /// The worker that sent `request` hears nothing back (see [`Action::DeliverAnswerLost`]).
    fn no_answer(s: &mut State, request: Request) {
        let w = usize::from(request.worker());
        match (request, s.workers[w]) {
            (Request::Lease { .. }, Worker::AwaitingLease) => s.workers[w] = Worker::Idle,
            (Request::Finish { lease, finish, .. }, Worker::Delivering { .. })
                if s.workers[w] == (Worker::Delivering { lease, finish }) =>
            {
                s.requests.insert(request);
            }
            _ => {}
        }
    }

    /// The representative of `s` among the states that differ only in how the workers are
    /// numbered (the server treats worker ids as opaque names): the least one. `workers` is
    /// the first field of [`State`], so the least state has the workers sorted; only
    /// renamings among workers in equal states need comparing in full.
    pub fn canonical(s: State) -> State {
        let is_identity =
            |p: &Vec<WorkerNo>| p.iter().enumerate().all(|(w, to)| usize::from(*to) == w);
        let perms = sorting_permutations(&s.workers);
        let mut best: Option<State> = None;
        for perm in perms.iter().filter(|p| !is_identity(p)) {
            let renamed = rename_workers(&s, perm);
            if best.as_ref().is_none_or(|b| renamed < *b) {
                best = Some(renamed);
            }
        }
        match best {
            Some(b) if !perms.iter().any(is_identity) || b < s => b,
            _ => s,
        }
    }
}

/// Every renaming `perm` (worker `w` becomes `perm[w]`) that sorts `workers`.
fn sorting_permutations(workers: &[Worker]) -> Vec<Vec<WorkerNo>> {
    let n = workers.len();
    let mut by_state: Vec<usize> = (0..n).collect();
    by_state.sort_by_key(|w| workers[*w]);
    if by_state.windows(2).all(|p| workers[p[0]] != workers[p[1]]) {
        // No ties (the common case): one renaming sorts them.
        let mut perm = vec![0; n];
        for (k, w) in by_state.into_iter().enumerate() {
            perm[w] = WorkerNo::try_from(k).expect("at most 255 workers");
        }
        return vec![perm];
    }
    // Positions of the sorted order, grouped by equal worker state.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for k in 0..n {
        match groups.last_mut() {
            Some(g) if workers[by_state[g[0]]] == workers[by_state[k]] => g.push(k),
            _ => groups.push(vec![k]),
        }
    }
    // Within a group any order of its workers is sorted: take every combination.
    let mut orders: Vec<Vec<usize>> = vec![Vec::new()];
    for g in &groups {
        let members: Vec<usize> = g.iter().map(|k| by_state[*k]).collect();
        let mut next = Vec::new();
        for prefix in &orders {
            for arrangement in arrangements(&members) {
                let mut o = prefix.clone();
                o.extend(arrangement);
                next.push(o);
            }
        }
        orders = next;
    }
    orders
        .into_iter()
        .map(|order| {
            // order[k] is the worker that goes to position k.
            let mut perm = vec![0; n];
            for (k, w) in order.into_iter().enumerate() {
                perm[w] = WorkerNo::try_from(k).expect("at most 255 workers");
            }
            perm
        })
        .collect()
}

/// Every ordering of `items`.
fn arrangements(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut tail in arrangements(&rest) {
            tail.insert(0, *first);
            out.push(tail);
        }
    }
    out
}

/// `s` with worker `w` renamed to `perm[w]` everywhere.
fn rename_workers(s: &State, perm: &[WorkerNo]) -> State {
    let to = |w: WorkerNo| perm[usize::from(w)];
    let mut t = s.clone();
    for item in &mut t.items {
        if let Some(g) = item.lease.as_mut() {
            g.worker = to(g.worker);
        }
    }
    for lease in &mut t.leases {
        lease.worker = to(lease.worker);
    }
    for (w, worker) in s.workers.iter().enumerate() {
        t.workers[usize::from(perm[w])] = *worker;
    }
    t.requests = s
        .requests
        .iter()
        .map(|r| match *r {
            Request::Lease { worker } => Request::Lease { worker: to(worker) },
            Request::Heartbeat { worker, lease } => Request::Heartbeat {
                worker: to(worker),
                lease,
            },
            Request::Finish {
                worker,
                lease,
                finish,
            } => Request::Finish {
                worker: to(worker),
                lease,
                finish,
            },
        })
        .collect();
    t
}

/// Whether worker `w` has a heartbeat in flight.
fn heartbeat_in_flight(s: &State, w: WorkerNo) -> bool {
    s.requests
        .iter()
        .any(|r| matches!(*r, Request::Heartbeat { worker, .. } if worker == w))
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial_state()]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.config.max_time {
            actions.push(Action::Tick);
        }
        for (w, worker) in s.workers.iter().enumerate() {
            let w = WorkerNo::try_from(w).expect("at most 255 workers");
            match *worker {
                Worker::Idle => actions.push(Action::RequestLease(w)),
                // Waits for its lease call (the client is sequential).
                Worker::AwaitingLease => {}
                Worker::Working { lease } => {
                    let promised = s.leases[usize::from(lease)].promised_until;
                    if !heartbeat_in_flight(s, w)
                        && u16::from(promised) < u16::from(s.now) + u16::from(self.config.lease_ttl)
                    {
                        actions.push(Action::Heartbeat(w));
                    }
                    actions.extend(Finish::ALL.iter().map(|f| Action::Finish(w, *f)));
                    actions.push(Action::Crash(w));
                }
                // Its spooled result is in flight until a final answer (see `no_answer`).
                Worker::Delivering { .. } => {}
            }
        }
        for r in &s.requests {
            actions.push(Action::Deliver(*r));
            actions.push(Action::DeliverAnswerLost(*r));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        s.witness = None;
        match action {
            Action::Tick => {
                s.now += 1;
                forget_passed_promises(&mut s);
            }
            Action::RequestLease(w) => {
                s.workers[usize::from(w)] = Worker::AwaitingLease;
                s.requests.insert(Request::Lease { worker: w });
            }
            Action::Crash(w) => s.workers[usize::from(w)] = Worker::Idle,
            Action::Heartbeat(w) => {
                let Worker::Working { lease } = s.workers[usize::from(w)] else {
                    return None;
                };
                s.requests.insert(Request::Heartbeat { worker: w, lease });
            }
            Action::Finish(w, finish) => {
                let Worker::Working { lease } = s.workers[usize::from(w)] else {
                    return None;
                };
                s.workers[usize::from(w)] = Worker::Delivering { lease, finish };
                s.requests.insert(Request::Finish {
                    worker: w,
                    lease,
                    finish,
                });
            }
            Action::Deliver(request) | Action::DeliverAnswerLost(request) => {
                s.requests.remove(&request);
                let response = self.serve_in_place(&mut s, request)?;
                if matches!(action, Action::Deliver(_)) {
                    Self::read(&mut s, request, response);
                } else {
                    Self::no_answer(&mut s, request);
                }
            }
        }
        if self.config.symmetry {
            s = Self::canonical(s);
        }
        Some(s)
    }

    /// A broken server (see [`Flaw`]) may append ledger rows without end, one per redelivery;
    /// states beyond `2 + 2 * max_leases` rows for one item are not explored. The server as
    /// built never gets there: each lease writes at most two rows (`leased`, then one of
    /// `completed`, `failed`, `parked`, `late_result`), plus `enqueued` and one `expired`.
    fn within_boundary(&self, s: &State) -> bool {
        let bound = 2 + 2 * usize::from(self.config.max_leases);
        s.ledger.iter().all(|rows| rows.len() <= bound)
    }

    fn properties(&self) -> Vec<Property<Self>> {
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
                s.items.iter().all(|i| i.state == ItemState::Done)
                    && s.children.iter().all(|c| *c == 1)
            }),
        ]
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> LeaseModel {
        LeaseModel::new(Config::default())
    }

    fn step(m: &LeaseModel, s: &State, action: Action) -> State {
        m.next_state(s, action).expect("the step is within bounds")
    }

    #[test]
    fn states_that_differ_only_in_worker_numbering_have_one_representative() {
        let m = model();
        let s = m.initial_state();
        let first = step(&m, &s, Action::RequestLease(0));
        let second = step(&m, &s, Action::RequestLease(1));
        assert_eq!(first, second);
        assert_eq!(first.workers, vec![Worker::Idle, Worker::AwaitingLease]);
        assert_eq!(
            first.requests.iter().copied().collect::<Vec<_>>(),
            vec![Request::Lease { worker: 1 }]
        );
    }

    #[test]
    fn without_symmetry_the_workers_keep_their_numbers() {
        let m = LeaseModel::new(Config {
            symmetry: false,
            ..Config::default()
        });
        let s = step(&m, &m.initial_state(), Action::RequestLease(0));
        assert_eq!(s.workers, vec![Worker::AwaitingLease, Worker::Idle]);
    }

    #[test]
    fn a_lease_whose_answer_is_lost_is_orphaned_and_its_worker_idle_again() {
        let m = model();
        let s = step(&m, &m.initial_state(), Action::RequestLease(0));
        let lease = Request::Lease { worker: 1 };
        let s = step(&m, &s, Action::DeliverAnswerLost(lease));
        assert_eq!(s.workers, vec![Worker::Idle, Worker::Idle]);
        assert_eq!(s.items[0].state, ItemState::Leased);
        assert_eq!(s.leases.len(), 1);
        assert!(s.requests.is_empty());
    }

    #[test]
    fn a_lost_answer_to_a_finishing_call_puts_the_spooled_result_back_in_flight() {
        let m = LeaseModel::new(Config {
            symmetry: false,
            ..Config::default()
        });
        let mut s = m.initial_state();
        for action in [
            Action::RequestLease(0),
            Action::Deliver(Request::Lease { worker: 0 }),
            Action::Finish(0, Finish::Complete),
        ] {
            s = step(&m, &s, action);
        }
        let complete = Request::Finish {
            worker: 0,
            lease: 0,
            finish: Finish::Complete,
        };
        let lost = step(&m, &s, Action::DeliverAnswerLost(complete));
        assert_eq!(lost.items[0].state, ItemState::Done);
        assert_eq!(
            lost.workers[0],
            Worker::Delivering {
                lease: 0,
                finish: Finish::Complete
            }
        );
        assert!(lost.requests.contains(&complete));
        let replayed = step(&m, &lost, Action::Deliver(complete));
        assert_eq!(replayed.witness, Some(Witness::ReplayedCompletion));
        assert_eq!(replayed.workers[0], Worker::Idle);
        assert_eq!(replayed.children, vec![1, 0]);
        assert!(replayed.requests.is_empty());
    }

    #[test]
    fn a_heartbeat_is_offered_only_when_it_could_move_the_expiry() {
        let m = LeaseModel::new(Config {
            symmetry: false,
            ..Config::default()
        });
        let mut s = m.initial_state();
        for action in [
            Action::RequestLease(0),
            Action::Deliver(Request::Lease { worker: 0 }),
        ] {
            s = step(&m, &s, action);
        }
        let offered = |s: &State| {
            let mut actions = Vec::new();
            m.actions(s, &mut actions);
            actions.contains(&Action::Heartbeat(0))
        };
        assert!(
            !offered(&s),
            "granted at tick 0, the lease runs to tick 1 already"
        );
        let s = step(&m, &s, Action::Tick);
        assert!(offered(&s));
    }
}
