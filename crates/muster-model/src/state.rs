//! The model's state: Logbook's rows that the lease protocol touches, the workers, and the
//! network between them.
//!
//! Everything is small integers and ordered collections, so that a state hashes the same
//! whichever path reached it. Item, lease and worker numbers index the vectors below; the
//! domain bridge (`crate::bridge`) turns them into the real ids and back.

use std::collections::BTreeSet;

use muster_domain::ItemState;

/// A root item's index in [`State::items`].
pub type ItemNo = u8;
/// A lease's index in [`State::leases`]: the n-th lease granted, over all items.
pub type LeaseNo = u8;
/// A worker's index in [`State::workers`].
pub type WorkerNo = u8;
/// The logical clock: one tick is one second of the real clock.
pub type Tick = u8;

/// How a worker finishes a lease (the three finishing calls of the contract).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Finish {
    /// `POST /v1/leases/{id}/complete` with a result and one `next` step.
    Complete,
    /// `POST /v1/leases/{id}/fail`.
    Fail { retryable: bool },
    /// `POST /v1/leases/{id}/needs_subtool`.
    NeedsSubtool,
}

impl Finish {
    /// Every way a worker may finish, in the order the model offers them.
    pub const ALL: [Finish; 4] = [
        Finish::Complete,
        Finish::Fail { retryable: true },
        Finish::Fail { retryable: false },
        Finish::NeedsSubtool,
    ];

    /// The ledger event a finish records when it is applied.
    pub const fn event(self) -> Event {
        match self {
            Finish::Complete => Event::Completed,
            Finish::Fail { .. } => Event::Failed,
            Finish::NeedsSubtool => Event::Parked,
        }
    }
}

/// A request from a worker to Muster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `POST /v1/leases`.
    Lease { worker: WorkerNo },
    /// `POST /v1/leases/{id}/heartbeat`.
    Heartbeat { worker: WorkerNo, lease: LeaseNo },
    /// A finishing call, as spooled and (re)delivered by the worker client.
    Finish {
        worker: WorkerNo,
        lease: LeaseNo,
        finish: Finish,
    },
}

impl Request {
    /// The worker that sent it.
    pub const fn worker(self) -> WorkerNo {
        match self {
            Request::Lease { worker }
            | Request::Heartbeat { worker, .. }
            | Request::Finish { worker, .. } => worker,
        }
    }
}

/// Muster's answer to a finishing call, as the worker client classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// A 200; `replayed`: answered from the lease's stored outcome, nothing written. On the
    /// wire only a completion carries the flag; the model marks replayed failures and parks
    /// too.
    Ok { replayed: bool },
    /// 409 `E_LEASE_LOST`: final, the spool file is removed.
    LeaseLost,
    /// 409 `E_CONFLICT`: final, the spool file is removed.
    Conflict,
    /// 500: the transaction was rolled back; the spool file is kept and delivered again.
    Internal,
}

/// A response from Muster to a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Response {
    /// 200 to `POST /v1/leases`.
    Leased { lease: LeaseNo },
    /// 204 to `POST /v1/leases`: nothing was leasable.
    NoWork,
    /// 200 to a heartbeat.
    HeartbeatOk,
    /// 409 `E_LEASE_LOST` to a heartbeat.
    HeartbeatLost,
    /// The answer to a finishing call.
    Finished(Reply),
}

/// An answer Muster gave to a finishing call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Answered {
    pub lease: LeaseNo,
    pub finish: Finish,
    pub reply: Reply,
}

/// A noteworthy step, remembered only in the state it led to (the next step clears it): the
/// witnesses of `sometimes` properties that no row records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Witness {
    /// A completion was answered `replayed: true`.
    ReplayedCompletion,
    /// A completion was applied under a lease whose promised expiry had passed.
    CompletionAfterExpiry,
}

/// What a worker process is doing. A spooled delivery survives a crash: `Delivering` is both
/// "blocked in `complete`/`fail`/`needs_subtool`" and "restarted with a file in the spool".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Worker {
    Idle,
    /// A lease request is out.
    AwaitingLease,
    /// Holds `lease` and works on its item.
    Working {
        lease: LeaseNo,
    },
    /// The result is in the spool and is delivered until a final answer arrives.
    Delivering {
        lease: LeaseNo,
        finish: Finish,
    },
}

/// The lease an item is handed out under (`core.items.lease_id`, `lease_worker`,
/// `lease_expires_at`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Grant {
    pub lease: LeaseNo,
    pub worker: WorkerNo,
    pub expires: Tick,
}

/// A row of `core.items`, the columns the protocol reads and writes (the chain head is left
/// out: see the crate documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemRow {
    pub state: ItemState,
    pub attempt: u8,
    pub fence: u8,
    pub lease: Option<Grant>,
    pub not_before: Option<Tick>,
    /// `parked_digest IS NOT NULL` (the model's workers all run one image).
    pub parked: bool,
    /// `result IS NOT NULL`: the completion's result is stored.
    pub has_result: bool,
}

/// What a finished lease recorded (`core.leases.outcome`, `outcome_digest`, `response`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Outcome {
    pub kind: Recorded,
    /// The request that finished the lease; its digest is recomputed from it.
    pub finish: Finish,
    /// The stored answer (`None` for a late result, whose stored response is JSON `null`).
    pub answer: Option<Answer>,
}

/// `core.leases.outcome`: the domain's `OutcomeKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Recorded {
    Completed,
    Failed,
    Parked,
    Late,
}

/// The part of a stored answer that varies in the model: the item's state and `not_before`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Answer {
    pub state: ItemState,
    pub not_before: Option<Tick>,
}

/// A row of `core.leases`, plus one history variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseRow {
    pub item: ItemNo,
    pub fence: u8,
    pub worker: WorkerNo,
    pub outcome: Option<Outcome>,
    /// History variable, not in Logbook: the latest expiry Muster told the holder (at the
    /// grant or in a heartbeat's 200). The holder may rely on the lease until then. Once it
    /// has passed, only that fact matters, so it is kept as 0.
    pub promised_until: Tick,
}

/// A ledger event of an item (`core.ledger.event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    Enqueued,
    Leased,
    /// A lease request found the expired lease had used the last attempt: item failed.
    Expired,
    Completed,
    Failed,
    Parked,
    LateResult,
}

impl Event {
    /// The events a lease *use* writes when it is applied (a late result is not applied).
    pub const fn is_effect(self) -> bool {
        matches!(self, Event::Completed | Event::Failed | Event::Parked)
    }
}

/// A row of an item's ledger chain, as the domain sealed it (the hashes are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LedgerRow {
    pub event: Event,
    pub from: Option<ItemState>,
    pub to: ItemState,
    pub fence: Option<u8>,
    /// The lease named in the entry's data (`lease_id`), where it names one.
    pub lease: Option<LeaseNo>,
}

/// Something the real server would answer with a 500: each is a bug in the code or the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum Anomaly {
    #[error("lock_next_leasable offered an item the domain refuses to lease")]
    OfferedItemRefused,
    #[error(
        "finish_lease found the lease already finished (UPDATE … WHERE outcome IS NULL hit no row)"
    )]
    LeaseAlreadyFinished,
    #[error("the domain refused a lease use with an error outside the use case's answers")]
    UnexpectedRefusal,
    #[error("the domain refused a transition that check_finish had allowed")]
    TransitionRefusedAfterCheck,
    #[error("a late result changed the item")]
    LateResultChangedItem,
    #[error("a stored answer could not be read back")]
    StoredAnswerUnreadable,
    #[error("the pipeline routes refused the model's next step")]
    RouteRefused,
    #[error(
        "a domain value has no exact counterpart in the model (time off the tick grid, unknown id, out of range)"
    )]
    Unprojectable,
}

/// The whole system at one moment. (`workers` comes first: the order of states, which picks the
/// representative of states that differ only in worker numbering, sorts by it first.)
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    pub workers: Vec<Worker>,
    pub now: Tick,
    /// `core.items`: the root items, all of kind trawl, enqueued at tick 0 in index order.
    pub items: Vec<ItemRow>,
    /// `core.ledger`, the rows of each root item's chain.
    pub ledger: Vec<Vec<LedgerRow>>,
    /// `core.items WHERE parent_id = <root>`: the `next` items each root item created.
    pub children: Vec<u8>,
    /// `core.leases`, in grant order.
    pub leases: Vec<LeaseRow>,
    /// Requests in flight: each is delivered once, at any later step, or lost.
    pub requests: BTreeSet<Request>,
    /// History variable: every answer to a finishing call that was false when it was given
    /// (see [`State::is_truthful`]); empty while the server is right.
    pub false_answers: BTreeSet<Answered>,
    /// History variable: spooled results a worker removed on a final answer although they
    /// were neither applied nor refused because their lease was superseded (see
    /// [`State::settled`]); empty while the protocol is right.
    pub dropped_results: BTreeSet<(LeaseNo, Finish)>,
    /// History variable: see [`Witness`].
    pub witness: Option<Witness>,
    /// Internal errors the server ran into (rolled back, answered 500).
    pub anomalies: BTreeSet<Anomaly>,
}

impl State {
    /// Whether `lease` wrote an effect row (completed, failed, parked) to its item's ledger.
    pub fn effects_of(&self, lease: LeaseNo) -> impl Iterator<Item = &LedgerRow> {
        let item = self.leases[usize::from(lease)].item;
        self.ledger[usize::from(item)]
            .iter()
            .filter(move |r| r.event.is_effect() && r.lease == Some(lease))
    }

    /// Whether `lease` was applied with `event`.
    pub fn applied(&self, lease: LeaseNo, event: Event) -> bool {
        self.effects_of(lease).any(|r| r.event == event)
    }

    /// Whether `answer`, judged in the state its transaction left, tells the worker the truth:
    /// a 200 means the call's transition is in the ledger; `E_LEASE_LOST` means the lease
    /// changed nothing and was superseded; `E_CONFLICT` means the lease was finished by a
    /// different request. (A 500 claims nothing; it is judged as an [`Anomaly`].) Effect rows
    /// are never removed and fences only grow, so an answer true when given stays true.
    pub fn is_truthful(&self, answer: &Answered) -> bool {
        match answer.reply {
            Reply::Ok { .. } => self.applied(answer.lease, answer.finish.event()),
            Reply::LeaseLost => {
                self.effects_of(answer.lease).next().is_none() && self.superseded(answer.lease)
            }
            Reply::Conflict => self.leases[usize::from(answer.lease)]
                .outcome
                .is_some_and(|o| o.finish != answer.finish),
            Reply::Internal => true,
        }
    }

    /// Whether the delivery of `finish` under `lease` may end: the result was applied, or it
    /// can never be, because the lease was superseded without changing anything. (Whether
    /// the answer said so truthfully is [`State::is_truthful`].)
    pub fn settled(&self, lease: LeaseNo, finish: Finish) -> bool {
        self.applied(lease, finish.event())
            || (self.effects_of(lease).next().is_none() && self.superseded(lease))
    }

    /// Whether `lease` may no longer change its item: a newer lease took the item, or the item
    /// left `leased` without this lease changing it (it expired with no attempts left).
    pub fn superseded(&self, lease: LeaseNo) -> bool {
        let row = &self.leases[usize::from(lease)];
        let item = &self.items[usize::from(row.item)];
        row.fence < item.fence
            || (item.state != ItemState::Leased && self.effects_of(lease).next().is_none())
    }
}
