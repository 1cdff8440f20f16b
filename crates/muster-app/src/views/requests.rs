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
}

#[derive(Debug, Clone, PartialEq)]
pub struct FailRequest {
    pub error: Value,
    pub retryable: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParkRequest {
    pub worker_digest: String,
    pub layout: Value,
}
