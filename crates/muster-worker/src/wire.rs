//! The bodies of the worker API as the client sends and reads them.

use muster_domain::trace::TraceContext;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;

/// A leased item: `POST /v1/leases` 200.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub lease_id: String,
    pub fence: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    pub heartbeat_ms: u64,
    pub item: Item,
    /// The lease answer's `traceparent` (its span in the item's trace); `None` when the item
    /// has no trace context or the answer's value is not a valid W3C `traceparent`.
    #[serde(
        default,
        deserialize_with = "valid_traceparent",
        skip_serializing_if = "Option::is_none"
    )]
    traceparent: Option<String>,
    /// What the calls on this lease send as their `traceparent` instead of the lease's own:
    /// the runtime's `process` span.
    #[serde(skip)]
    propagated: Option<String>,
}

impl Lease {
    /// The W3C `traceparent` of this lease's span in the item's trace, as the lease answer
    /// gave it; `None` for an item without a trace context.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// The same lease with its calls (heartbeat, complete, fail, needs_subtool) sending
    /// `traceparent` (a span of this worker in the lease's trace).
    pub(crate) fn propagating(mut self, traceparent: String) -> Lease {
        self.propagated = Some(traceparent);
        self
    }

    /// The `traceparent` header the calls on this lease send.
    pub(crate) fn sent_traceparent(&self) -> Option<&str> {
        self.propagated.as_deref().or(self.traceparent())
    }
}

/// A `traceparent` that W3C's rules accept, or `None`.
fn valid_traceparent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = Option::<String>::deserialize(d)?;
    Ok(value.filter(|v| TraceContext::parse(v).is_some()))
}

/// The item of a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub id: String,
    pub kind: String,
    pub priority: String,
    pub attempt: u32,
    pub payload: Value,
}

/// A `next` pipeline step of a completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NextStep {
    pub kind: String,
    pub payload: Value,
    /// The parent's priority when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

impl NextStep {
    /// A step of `kind` inheriting the parent's priority.
    pub fn new(kind: impl Into<String>, payload: Value) -> Self {
        NextStep {
            kind: kind.into(),
            payload,
            priority: None,
        }
    }
}

/// The server's acknowledgement of a delivery (complete, fail or needs_subtool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    /// Absent in `fail`'s `{"state": "failed"}` answer.
    #[serde(default)]
    pub item_id: Option<String>,
    /// `done`, `queued`, `failed`, `needs_subtool`.
    pub state: String,
    /// `complete` only.
    #[serde(default)]
    pub ledger_seq: Option<i64>,
    /// `complete` only: true when this lease already completed with an identical body.
    #[serde(default)]
    pub replayed: bool,
    /// `fail` with a re-queue only.
    #[serde(default)]
    pub not_before: Option<String>,
    /// [`WorkerClient::complete_and_lease`] only: the lease granted in the same transaction
    /// (`None`: nothing was leasable at that moment, or the completion was redelivered from
    /// the spool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_lease: Option<Lease>,
}

/// One completion of a batch ([`WorkerClient::complete_many`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub lease_id: String,
    pub result: Value,
    pub next: Vec<NextStep>,
    /// The `traceparent` the lease's calls send.
    pub(crate) traceparent: Option<String>,
}

impl Completion {
    /// Completes `lease` with `result` and the `next` pipeline steps.
    pub fn new(lease: &Lease, result: Value, next: Vec<NextStep>) -> Self {
        Completion {
            lease_id: lease.lease_id.clone(),
            result,
            next,
            traceparent: lease.sent_traceparent().map(str::to_owned),
        }
    }

    /// The body of the single `complete` call: what is spooled, and what the server hashes for
    /// idempotency (a batch entry and a single delivery of it are the same completion).
    pub(crate) fn body(&self) -> Value {
        json!({"result": self.result, "next": self.next})
    }

    /// Its entry in a `POST /v1/completions` batch: the single call's body and the lease id.
    pub(crate) fn batch_entry(&self) -> Value {
        let mut entry = self.body();
        entry["lease_id"] = json!(self.lease_id);
        entry
    }
}
