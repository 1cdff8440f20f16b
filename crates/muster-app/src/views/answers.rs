//! What the use cases answer: plain data, serialised by the transport as the contract says.

use muster_domain::trace::TraceContext;
use muster_domain::{Fence, Item, ItemId, ItemState, Kind, Priority};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enqueued {
    pub item_id: String,
    pub state: ItemState,
    /// False when the idempotency key was already used: no second item was made.
    #[serde(skip)]
    pub created: bool,
    /// The trace context the item keeps (the first call's, for an idempotent repeat).
    #[serde(skip)]
    pub trace: Option<TraceContext>,
}

/// The item a call worked on, for the transport's item span; never on the wire. Only for an
/// item that keeps a trace context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemTrace {
    pub item_id: ItemId,
    pub kind: Kind,
    /// The trace context the item keeps.
    pub context: TraceContext,
    /// The lease's fence.
    pub fence: u64,
    pub attempt: u32,
}

impl ItemTrace {
    /// `item` under the lease with `fence`, when it keeps a trace context.
    pub fn of(item: &Item, fence: Fence, context: Option<TraceContext>) -> Option<ItemTrace> {
        context.map(|context| ItemTrace {
            item_id: item.id,
            kind: item.kind,
            context,
            fence: fence.0,
            attempt: item.attempt,
        })
    }
}

/// The item handed to a worker with its lease.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeasedItem {
    pub id: String,
    pub kind: Kind,
    pub priority: Priority,
    pub attempt: u32,
    pub payload: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaseGranted {
    pub lease_id: String,
    pub fence: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    pub heartbeat_ms: u64,
    pub item: LeasedItem,
    /// `00-<item's trace>-<the lease's item span>-<flags>`: the parent of the worker's span.
    /// Set by the transport, which draws the span; absent for an item that keeps no trace
    /// context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(skip)]
    pub trace: Option<ItemTrace>,
    /// When the item became leasable (the start of its queue time).
    #[serde(skip)]
    pub queued_since: OffsetDateTime,
}

/// The answer to a lease request with `max` (batching): every lease granted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeasesGranted {
    pub leases: Vec<LeaseGranted>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeartbeatAck {
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    #[serde(skip)]
    pub trace: Option<ItemTrace>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completed {
    pub item_id: String,
    pub state: ItemState,
    pub ledger_seq: i64,
    pub replayed: bool,
    #[serde(skip)]
    pub trace: Option<ItemTrace>,
}

/// A completion with `lease_next`: its answer and, from the same transaction, the worker's
/// next lease (`null` when nothing was leasable).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompletedAndLeased {
    #[serde(flatten)]
    pub completed: Completed,
    pub next_lease: Option<LeaseGranted>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    pub item_id: String,
    pub state: ItemState,
    #[serde(
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub not_before: Option<OffsetDateTime>,
    #[serde(skip)]
    pub trace: Option<ItemTrace>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parked {
    pub item_id: String,
    pub state: ItemState,
    #[serde(skip)]
    pub trace: Option<ItemTrace>,
}

/// One ledger row of an item's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryEntry {
    pub seq: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub event: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub actor: String,
    pub fence: Option<u64>,
}

/// An item as an operator or Conn sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemView {
    pub id: String,
    pub kind: Kind,
    pub priority: Priority,
    pub state: ItemState,
    pub attempt: u32,
    pub payload: Value,
    pub result: Option<Value>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub not_before: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    pub history: Vec<HistoryEntry>,
    /// Removed from the working tables by retention: read from the ledger, `payload` and
    /// `result` null.
    pub removed: bool,
}

/// An item as a line of `GET /v1/items`: no payload, result or history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemSummary {
    pub id: String,
    pub kind: Kind,
    pub priority: Priority,
    pub state: ItemState,
    pub attempt: u32,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When the item last changed: the time of its newest ledger row.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// The `error` of the item's newest failure (`{"code", "message"}`), if it ever failed.
    pub last_error: Option<Value>,
}

/// One page of `GET /v1/items`; `next` is the id to pass as `after` for the next page, `None`
/// on the last page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemPage {
    pub items: Vec<ItemSummary>,
    pub next: Option<String>,
}

/// The answer to `POST /v1/items/retry`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BulkRetried {
    pub retried: u64,
    pub item_ids: Vec<String>,
    /// The trace contexts the retried items keep (those that keep one), in order.
    #[serde(skip)]
    pub traces: Vec<TraceContext>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Retried {
    pub item_id: String,
    pub state: ItemState,
    /// The trace context the retried item keeps.
    #[serde(skip)]
    pub trace: Option<TraceContext>,
}

/// The answer to `POST /v1/items/{id}/cancel` (the same again when already cancelled).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cancelled {
    pub item_id: String,
    pub state: ItemState,
}

/// The answer to `POST /v1/items/cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BulkCancelled {
    pub cancelled: u64,
    pub item_ids: Vec<String>,
}

/// The answer to a digest report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DigestRecorded {
    pub kind: Kind,
    pub digest: String,
    /// How many parked items went back to the queue.
    pub replayed: u64,
    /// The trace contexts the replayed items keep (those that keep one), in order.
    #[serde(skip)]
    pub traces: Vec<TraceContext>,
}

/// The current health of one kind: an entry of `GET /v1/health` and the data of a `health`
/// event. Its pods aggregated as Shipkeeper's newest report of the kind gave them; `events`
/// are that report's only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthView {
    pub kind: Kind,
    /// The worker image deployed for the kind, if Shipkeeper reported one.
    pub digest: Option<String>,
    pub ready: Option<bool>,
    pub restarts: u32,
    pub phase: Option<String>,
    pub events: Vec<muster_domain::health::HealthEvent>,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// `GET /v1/health`: every kind with a stored report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthSnapshot {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub kinds: Vec<HealthView>,
}

/// The answer to a health report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HealthAccepted {
    pub accepted: u64,
    pub redacted: u64,
}

/// An edit proposal as Countersign and operators see it.
/// A page of edit proposals (`GET /v1/edits`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EditList {
    pub edits: Vec<EditView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EditView {
    pub edit_id: String,
    pub target: String,
    pub owner: String,
    /// The proposal's text; `None` once retention removed the text of a rejected proposal.
    pub body: Option<String>,
    pub state: muster_domain::edit::EditState,
    #[serde(with = "time::serde::rfc3339")]
    pub submitted_at: OffsetDateTime,
}

/// The answer to `PUT /v1/kinds/{kind}/paused`: the kind's state after the call, and since when
/// it has been in it (`null` for a kind that was never paused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindPaused {
    pub kind: Kind,
    pub paused: bool,
    #[serde(with = "time::serde::rfc3339::option")]
    pub since: Option<OffsetDateTime>,
}
