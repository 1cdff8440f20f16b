//! The vocabulary of the item state machine: ids, states, lease grants and records, how a
//! lease finished, and the refusals; what [`Item`](super::Item)'s transitions take and answer.

use std::fmt;

use muster_ledger::SealedEntry;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Kind, Principal};

/// The id of an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemId(pub Uuid);

/// The id of one lease of an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub Uuid);

/// The fence number of a lease: the n-th lease of an item has fence n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fence(pub u64);

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The state of an item.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    Queued,
    Leased,
    Done,
    /// Attempts exhausted or the failure was final; only an operator's retry brings it back.
    Failed,
    /// Parked until a worker image that can handle its layout is deployed.
    NeedsSubtool,
    /// Cancelled by an operator: terminal, like `done` and `failed`.
    Cancelled,
}

impl ItemState {
    pub const ALL: [ItemState; 6] = [
        ItemState::Queued,
        ItemState::Leased,
        ItemState::Done,
        ItemState::Failed,
        ItemState::NeedsSubtool,
        ItemState::Cancelled,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ItemState::Queued => "queued",
            ItemState::Leased => "leased",
            ItemState::Done => "done",
            ItemState::Failed => "failed",
            ItemState::NeedsSubtool => "needs_subtool",
            ItemState::Cancelled => "cancelled",
        }
    }
}

named_values!(ItemState, all: ItemState::ALL, error: String = |s: &str| format!("unknown item state {s:?}"));

/// The lease an item is (or was last) handed out under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    pub lease_id: LeaseId,
    pub worker_id: String,
    pub expires_at: OffsetDateTime,
}

/// What a finished lease did; kept so that a retried delivery can be recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeKind {
    Completed,
    Failed,
    Parked,
    /// A completion that arrived after the lease was superseded: recorded, not applied.
    Late,
}

impl OutcomeKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Completed => "completed",
            OutcomeKind::Failed => "failed",
            OutcomeKind::Parked => "parked",
            OutcomeKind::Late => "late",
        }
    }
}

named_values!(
    OutcomeKind,
    all: [OutcomeKind::Completed, OutcomeKind::Failed, OutcomeKind::Parked, OutcomeKind::Late],
    error: String = |s: &str| format!("unknown lease outcome {s:?}")
);

/// The recorded end of a lease: what was delivered (by digest) and what was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseOutcome {
    pub kind: OutcomeKind,
    /// BLAKE3 of the canonical request body that finished the lease.
    pub digest: [u8; 32],
    /// The answer given, replayed verbatim to an identical retry.
    pub response: Value,
}

/// One lease as Logbook keeps it: every lease ever granted has a record.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRecord {
    pub lease_id: LeaseId,
    pub item_id: ItemId,
    pub fence: Fence,
    pub worker_id: String,
    /// When the lease was granted: its run time counts from here.
    pub granted_at: OffsetDateTime,
    pub outcome: Option<LeaseOutcome>,
}

/// Why a transition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("the item is {0} and cannot be leased now")]
    NotLeasable(ItemState),
    #[error("the lease was superseded by a newer lease or the item was finished by another lease")]
    LeaseLost,
    #[error("this lease already finished with a different request")]
    Conflict,
    #[error("an item that is {from} cannot be {action}")]
    InvalidTransition {
        from: ItemState,
        action: &'static str,
    },
    #[error("{principal} may not act on a {kind} item")]
    Forbidden { principal: Principal, kind: Kind },
    #[error("the lease belongs to another worker")]
    WrongWorker,
    #[error(
        "the lease passed its kind's maximum run time of {max_run_ms} ms and is no longer extended"
    )]
    TimedOut { max_run_ms: i64 },
}

/// What the lease use check decided.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseUse {
    /// Go ahead: the lease is the newest and the item is leased.
    Proceed,
    /// The same request already finished this lease: answer this again, change nothing.
    Replay(Value),
}

/// The result of a lease attempt on one candidate item.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseResult {
    Granted(SealedEntry),
    /// The candidate's previous lease expired with its attempts used up: it is now `failed`.
    Exhausted(SealedEntry),
}

/// The result of a failure report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    Requeued { not_before: OffsetDateTime },
    Failed,
}

/// Whether `s` is a worker image digest: `sha256:` and 64 lowercase hex digits.
pub fn is_image_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// BLAKE3 of a request's canonical JSON (keys sorted, no whitespace), used to recognise a
/// retried delivery of the same request.
pub fn request_digest(kind: OutcomeKind, body: &Value) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(kind.as_str().as_bytes());
    h.update(&[0]);
    h.update(body.to_string().as_bytes());
    *h.finalize().as_bytes()
}
