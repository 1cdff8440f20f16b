//! The stateright model: workers, an unreliable network, a logical clock, and the properties.

mod properties;
mod symmetry;

pub use properties::{
    ACKNOWLEDGED_IS_APPLIED, ALL_DONE, EXHAUSTED, EXPIRED_LEASE_COMPLETES, FAILED_FOR_GOOD,
    LATE_RESULT_REFUSED, LEASE_LOST_IS_NOT_APPLIED, NO_EFFECT_TWICE, NO_INTERNAL_ERROR,
    NO_TWO_LIVE_LEASES, ONLY_NEWEST_LEASE_CHANGES, PARKED, RELEASED_AFTER_EXPIRY,
    REQUEUED_AND_LEASED_AGAIN, RETRY_REPLAYED, SPOOL_SETTLES,
};

use std::collections::BTreeSet;

use muster_domain::{Item, Principal, Priority};
use stateright::{Model, Property};

use crate::bridge::{KIND, at, item_id, ledger_row, project_item};
use crate::server::forget_passed_promises;
use crate::state::{Finish, Reply, Request, Response, State, Tick, Worker, WorkerNo};
use symmetry::{rename_workers, sorting_permutations};

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
    /// Ticks an expired lease on an item's last attempt stays usable before a lease request
    /// may take it over and fail the item (`--final-grace-ms`). The exhaustive checks run with
    /// 0 (the bounded clock then still reaches an exhausted item); the grace has its own check.
    pub final_grace: Tick,
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
            final_grace: 0,
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
        properties::all()
    }
}

#[cfg(test)]
mod tests;
