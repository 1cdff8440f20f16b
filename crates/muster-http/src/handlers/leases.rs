//! Leases: lease (long poll, batches), heartbeat, complete (alone, with the next lease, or
//! many at once), fail and needs_subtool.

use std::time::SystemTime;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use muster_app::views::{
    CompleteRequest, Completed, FailRequest, HeartbeatAck, LeasesGranted, NeedsSubtoolRequest,
    NextStep,
};
use muster_domain::{Kind, LeaseId, Priority};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Json, Spanned};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Caller, InPath, JsonBody, named};
use crate::state::AppState;
use crate::trace::{self, ItemOp, ItemSpans, RequestTrace};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LeaseBody {
    worker_id: String,
    #[serde(default)]
    wait_ms: u64,
    /// Batching (opt-in): up to `max` leases, answered as `{"leases": [...]}`.
    #[serde(default)]
    max: Option<u32>,
}

/// `POST /v1/leases`: one lease, or with `max` up to that many; 204 when nothing became
/// leasable within `wait_ms`.
pub(crate) async fn lease(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<LeaseBody>,
) -> Result<Response, ApiError> {
    let max = b.max.unwrap_or(1);
    let mut leases = s.muster.lease_many(p, &b.worker_id, b.wait_ms, max).await?;
    // The grant: a long poll's wait is not the item's (its queued span ends here).
    let granted_at = SystemTime::now();
    let mut spans = ItemSpans::default();
    for granted in &mut leases {
        spans.lease(granted, granted_at);
    }
    Ok(match (b.max, leases.pop()) {
        (_, None) => StatusCode::NO_CONTENT.into_response(),
        (None, Some(granted)) => (Extension(spans), Json(granted)).into_response(),
        (Some(_), Some(last)) => {
            leases.push(last);
            (Extension(spans), Json(LeasesGranted { leases })).into_response()
        }
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeartbeatBody {
    worker_id: String,
}

pub(crate) async fn heartbeat(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(id): InPath<LeaseId>,
    JsonBody(b): JsonBody<HeartbeatBody>,
) -> Spanned<HeartbeatAck> {
    let (span, started) = (trace::span_id(), SystemTime::now());
    let ack = s.muster.heartbeat(p, id, &b.worker_id).await?;
    let mut spans = ItemSpans::default();
    spans.push(ItemOp::Heartbeat, ack.trace, span, started);
    Ok((Extension(spans), Json(ack)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompleteBody {
    result: Value,
    #[serde(default)]
    next: Vec<NextBody>,
    /// Extension: lease the worker's next item in the same transaction (`next_lease`).
    #[serde(default)]
    lease_next: bool,
    /// Without `lease_next`: the sender, which must be the lease's worker. With it: the worker
    /// the next lease is for (default: the completed lease's).
    #[serde(default)]
    worker_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NextBody {
    kind: Kind,
    payload: Value,
    #[serde(default)]
    priority: Option<Priority>,
}

fn next_steps(next: Vec<NextBody>) -> Vec<NextStep> {
    next.into_iter()
        .map(|n| NextStep {
            kind: n.kind,
            payload: n.payload,
            priority: n.priority,
        })
        .collect()
}

pub(crate) async fn complete(
    State(s): State<AppState>,
    Caller(p): Caller,
    trace: RequestTrace,
    InPath(id): InPath<LeaseId>,
    JsonBody(b): JsonBody<CompleteBody>,
) -> Result<Response, ApiError> {
    let (sender, next_worker) = if b.lease_next {
        (None, b.worker_id)
    } else {
        (b.worker_id, None)
    };
    let spans_of = trace.completion(id);
    let req = CompleteRequest {
        result: b.result,
        next: next_steps(b.next),
        worker_id: sender,
        trace: Some(spans_of),
    };
    let started = SystemTime::now();
    let mut spans = ItemSpans::default();
    Ok(if b.lease_next {
        let mut answer = s.muster.complete_and_lease(p, id, req, next_worker).await?;
        let completed = answer.completed.trace;
        spans.push(ItemOp::Complete, completed, spans_of.item_span, started);
        if let Some(granted) = &mut answer.next_lease {
            spans.lease(granted, started);
        }
        (Extension(spans), Json(answer)).into_response()
    } else {
        let answer = s.muster.complete(p, id, req).await?;
        spans.push(ItemOp::Complete, answer.trace, spans_of.item_span, started);
        (Extension(spans), Json(answer)).into_response()
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompletionsBody {
    completions: Vec<CompletionBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompletionBody {
    lease_id: String,
    result: Value,
    #[serde(default)]
    next: Vec<NextBody>,
}

/// One entry of `POST /v1/completions`' answer: the lease, the status `complete` would have
/// answered alone, and its body (the completion's fields, or `error`).
#[derive(Serialize)]
struct CompletionResult {
    lease_id: String,
    status: u16,
    #[serde(flatten)]
    completed: Option<Completed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
}

#[derive(Serialize)]
pub(crate) struct CompletionResults {
    results: Vec<CompletionResult>,
}

impl CompletionResult {
    fn of(lease_id: String, answer: Result<Completed, ApiError>) -> Self {
        match answer {
            Ok(completed) => CompletionResult {
                lease_id,
                status: StatusCode::OK.as_u16(),
                completed: Some(completed),
                error: None,
            },
            Err(e) => CompletionResult {
                lease_id,
                status: e.status().as_u16(),
                completed: None,
                error: Some(ErrorBody::of(&e)),
            },
        }
    }
}

/// `POST /v1/completions`: many completions in one transaction, each answered as
/// `POST /v1/leases/{id}/complete` would have answered it, with its HTTP status, in order.
/// An entry whose `lease_id` names no lease is answered here and never reaches the use case.
pub(crate) async fn completions(
    State(s): State<AppState>,
    Caller(p): Caller,
    trace: RequestTrace,
    JsonBody(b): JsonBody<CompletionsBody>,
) -> Spanned<CompletionResults> {
    muster_app::service::check_completions_batch(b.completions.len())?;
    let mut named_ids = Vec::with_capacity(b.completions.len());
    let mut valid = Vec::with_capacity(b.completions.len());
    let mut span_ids = Vec::with_capacity(b.completions.len());
    for c in b.completions {
        let id = named::<LeaseId>(&c.lease_id);
        if let Ok(id) = id {
            let spans_of = trace.completion(id);
            span_ids.push(spans_of.item_span);
            let req = CompleteRequest {
                result: c.result,
                next: next_steps(c.next),
                worker_id: None,
                trace: Some(spans_of),
            };
            valid.push((id, req));
        }
        named_ids.push((c.lease_id, id.err()));
    }
    let started = SystemTime::now();
    let answers = if valid.is_empty() {
        Vec::new()
    } else {
        s.muster.complete_many(p, valid).await?
    };
    let mut spans = ItemSpans::default();
    for (answer, span) in answers.iter().zip(span_ids) {
        if let Ok(done) = answer {
            spans.push(ItemOp::Complete, done.trace, span, started);
        }
    }
    let mut done = answers.into_iter();
    let results = named_ids
        .into_iter()
        .map(|(lease_id, refused)| {
            let answer = match refused {
                Some(e) => Err(e),
                None => match done.next() {
                    Some(answer) => answer.map_err(ApiError::from),
                    None => Err(ApiError::internal("a completion went unanswered")),
                },
            };
            CompletionResult::of(lease_id, answer)
        })
        .collect();
    Ok((Extension(spans), Json(CompletionResults { results })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerError {
    code: String,
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailBody {
    error: WorkerError,
    retryable: bool,
    /// When sent: must be the lease's worker.
    #[serde(default)]
    worker_id: Option<String>,
}

pub(crate) async fn fail(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(id): InPath<LeaseId>,
    JsonBody(b): JsonBody<FailBody>,
) -> Spanned<muster_app::views::Failed> {
    let req = FailRequest {
        error: json!({"code": b.error.code, "message": b.error.message}),
        retryable: b.retryable,
        worker_id: b.worker_id,
    };
    let (span, started) = (trace::span_id(), SystemTime::now());
    let failed = s.muster.fail(p, id, req).await?;
    let mut spans = ItemSpans::default();
    spans.push(ItemOp::Fail, failed.trace, span, started);
    Ok((Extension(spans), Json(failed)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NeedsSubtoolBody {
    worker_digest: String,
    layout: Layout,
    /// When sent: must be the lease's worker.
    #[serde(default)]
    worker_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Layout {
    signature: String,
    #[serde(default)]
    detail: Value,
}

pub(crate) async fn needs_subtool(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(id): InPath<LeaseId>,
    JsonBody(b): JsonBody<NeedsSubtoolBody>,
) -> Spanned<muster_app::views::Parked> {
    let req = NeedsSubtoolRequest {
        worker_digest: b.worker_digest,
        layout: json!({"signature": b.layout.signature, "detail": b.layout.detail}),
        worker_id: b.worker_id,
    };
    let (span, started) = (trace::span_id(), SystemTime::now());
    let parked = s.muster.needs_subtool(p, id, req).await?;
    let mut spans = ItemSpans::default();
    spans.push(ItemOp::NeedsSubtool, parked.trace, span, started);
    Ok((Extension(spans), Json(parked)))
}
