//! Leases: lease (long poll, batches), heartbeat, complete (alone, with the next lease, or
//! many at once), fail and needs_subtool.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use muster_app::AppError;
use muster_app::views::{CompleteRequest, FailRequest, NextStep, ParkRequest};
use muster_domain::{Kind, LeaseId, Priority};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiResult, ok_json};
use crate::error::ApiError;
use crate::extract::{Caller, JsonBody, path_id};
use crate::state::AppState;

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

pub(crate) async fn lease(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<LeaseBody>,
) -> ApiResult {
    let Some(max) = b.max else {
        return match s.muster.lease(p, &b.worker_id, b.wait_ms).await? {
            Some(granted) => Ok(ok_json(StatusCode::OK, &granted)),
            None => Ok(StatusCode::NO_CONTENT.into_response()),
        };
    };
    let leases = s.muster.lease_many(p, &b.worker_id, b.wait_ms, max).await?;
    if leases.is_empty() {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Ok(ok_json(StatusCode::OK, &json!({ "leases": leases })))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeartbeatBody {
    worker_id: String,
}

pub(crate) async fn heartbeat(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<HeartbeatBody>,
) -> ApiResult {
    let id = LeaseId(path_id(&id, "lease")?);
    Ok(ok_json(
        StatusCode::OK,
        &s.muster.heartbeat(p, id, &b.worker_id).await?,
    ))
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
    /// With `lease_next`: the worker the next lease is for (default: the completed lease's).
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

impl From<CompleteBody> for CompleteRequest {
    fn from(b: CompleteBody) -> Self {
        CompleteRequest {
            result: b.result,
            next: b
                .next
                .into_iter()
                .map(|n| NextStep {
                    kind: n.kind,
                    payload: n.payload,
                    priority: n.priority,
                })
                .collect(),
        }
    }
}

pub(crate) async fn complete(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<CompleteBody>,
) -> ApiResult {
    let id = LeaseId(path_id(&id, "lease")?);
    if !b.lease_next {
        // Without lease_next, a worker_id sent must be the lease's worker.
        if let Some(w) = &b.worker_id {
            s.muster.check_lease_worker(p, id, w).await?;
        }
        return Ok(ok_json(
            StatusCode::OK,
            &s.muster.complete(p, id, b.into()).await?,
        ));
    }
    let worker_id = b.worker_id.clone();
    let (completed, next) = s
        .muster
        .complete_and_lease(p, id, b.into(), worker_id)
        .await?;
    let mut body = json!(completed);
    body["next_lease"] = json!(next);
    Ok(ok_json(StatusCode::OK, &body))
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

/// `POST /v1/completions`: many completions in one transaction, each answered as
/// `POST /v1/leases/{id}/complete` would have answered it, with its HTTP status, in order.
pub(crate) async fn completions(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<CompletionsBody>,
) -> ApiResult {
    muster_app::service::check_completions_batch(b.completions.len())?;
    let mut answers: Vec<Option<Result<Value, ApiError>>> = Vec::new();
    let mut lease_ids = Vec::with_capacity(b.completions.len());
    let mut valid = Vec::with_capacity(b.completions.len());
    for c in b.completions {
        match path_id(&c.lease_id, "lease") {
            Ok(id) => {
                answers.push(None);
                let body = CompleteBody {
                    result: c.result,
                    next: c.next,
                    lease_next: false,
                    worker_id: None,
                };
                valid.push((LeaseId(id), body.into()));
            }
            Err(e) => answers.push(Some(Err(e))),
        }
        lease_ids.push(c.lease_id);
    }
    let mut done = if valid.is_empty() && !answers.is_empty() {
        Vec::new()
    } else {
        s.muster.complete_many(p, valid).await?
    }
    .into_iter();
    let results: Vec<Value> = answers
        .into_iter()
        .zip(lease_ids)
        .map(|(early, lease_id)| {
            let answer = early.unwrap_or_else(|| match done.next() {
                Some(Ok(completed)) => Ok(json!(completed)),
                Some(Err(e)) => Err(ApiError::from(e)),
                None => Err(ApiError::from(AppError::Internal(
                    "a completion went unanswered".into(),
                ))),
            });
            match answer {
                Ok(mut body) => {
                    body["lease_id"] = json!(lease_id);
                    body["status"] = json!(200);
                    body
                }
                Err(e) => json!({
                    "lease_id": lease_id,
                    "status": e.status().as_u16(),
                    "error": {"code": e.code.as_str(), "message": e.message},
                }),
            }
        })
        .collect();
    Ok(ok_json(StatusCode::OK, &json!({ "results": results })))
}

#[derive(Deserialize, serde::Serialize)]
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
    Path(id): Path<String>,
    JsonBody(b): JsonBody<FailBody>,
) -> ApiResult {
    let id = LeaseId(path_id(&id, "lease")?);
    if let Some(w) = &b.worker_id {
        s.muster.check_lease_worker(p, id, w).await?;
    }
    let req = FailRequest {
        error: json!({"code": b.error.code, "message": b.error.message}),
        retryable: b.retryable,
    };
    Ok(ok_json(StatusCode::OK, &s.muster.fail(p, id, req).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ParkBody {
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
    Path(id): Path<String>,
    JsonBody(b): JsonBody<ParkBody>,
) -> ApiResult {
    let id = LeaseId(path_id(&id, "lease")?);
    if let Some(w) = &b.worker_id {
        s.muster.check_lease_worker(p, id, w).await?;
    }
    let req = ParkRequest {
        worker_digest: b.worker_digest,
        layout: json!({"signature": b.layout.signature, "detail": b.layout.detail}),
    };
    Ok(ok_json(
        StatusCode::OK,
        &s.muster.needs_subtool(p, id, req).await?,
    ))
}
