//! What the use cases are asked: plain data, parsed and checked for shape by the transport;
//! the use cases check the rest.

use muster_domain::{Kind, Priority};
use serde_json::Value;

/// A request to enqueue an item.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueRequest {
    pub kind: Kind,
    pub priority: Priority,
    pub payload: Value,
    pub idempotency_key: Option<String>,
    /// Delayed work: not leasable before this time (at most [`MAX_DELAY`] ahead).
    ///
    /// [`MAX_DELAY`]: crate::service::MAX_DELAY
    pub not_before: Option<time::OffsetDateTime>,
}

/// One `next` step of a completion.
#[derive(Debug, Clone, PartialEq)]
pub struct NextStep {
    pub kind: Kind,
    pub payload: Value,
    pub priority: Option<Priority>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompleteRequest {
    pub result: Value,
    pub next: Vec<NextStep>,
    /// The worker that sends the completion, when it says: it must be the lease's worker
    /// (checked in the completion's own transaction).
    pub worker_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FailRequest {
    pub error: Value,
    pub retryable: bool,
    /// The worker that sends the failure, when it says: it must be the lease's worker.
    pub worker_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NeedsSubtoolRequest {
    pub worker_digest: String,
    pub layout: Value,
    /// The worker that parks the item, when it says: it must be the lease's worker.
    pub worker_id: Option<String>,
}
