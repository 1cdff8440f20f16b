//! Routes: each handler translates HTTP into one use-case call and back.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use muster_app::auth::Authenticator;
use muster_app::ports::Readiness;
use muster_app::views::{CompleteRequest, EnqueueRequest, FailRequest, NextStep, ParkRequest};
use muster_app::{AppError, Muster};
use muster_domain::health::{HealthEvent, PodHealth};
use muster_domain::{ItemId, Kind, LeaseId, Priority};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::ApiError;
use crate::extract::{Caller, JsonBody};

/// What every handler can reach. Cloned for every request (each `State` extractor and
/// middleware takes a copy), so it is one shared allocation: a clone is one reference count.
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct AppParts {
    pub muster: Muster,
    pub intake: muster_app::intake::Intake,
    pub feed: muster_app::feed::Feed,
    /// Logbook, for the figures `/metrics` reads at scrape time.
    pub logbook_metrics: Arc<dyn muster_app::ports::PoolGauge>,
    pub http_metrics: crate::metrics::HttpMetrics,
    pub auth: Arc<dyn Authenticator>,
    pub readiness: Arc<dyn Readiness>,
    /// Request bodies in flight on the cluster-private routes ([`crate::budget`]).
    pub body_budget: crate::budget::BodyBudget,
}

/// The whole HTTP surface of Muster.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::metrics))
        .route("/v1/items", post(enqueue))
        .route("/v1/items/{id}", get(item))
        .route("/v1/items/{id}/retry", post(retry))
        .route("/v1/leases", post(lease))
        .route("/v1/leases/{id}/heartbeat", post(heartbeat))
        .route("/v1/leases/{id}/complete", post(complete))
        .route("/v1/leases/{id}/fail", post(fail))
        .route("/v1/leases/{id}/needs_subtool", post(needs_subtool))
        .route("/v1/completions", post(completions))
        .route(
            "/v1/workers/{kind}/digest",
            axum::routing::put(report_digest),
        )
        .route("/v1/health", post(report_health))
        // Only the routes above count their bodies against the budget (route_layer wraps
        // the routes added so far): the public edit routes below cut theirs at 4 KiB.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::budget::hold,
        ))
        .route("/v1/queues", get(queues))
        .route("/v1/edits/challenge", post(crate::edits::challenge))
        .route(
            "/v1/edits",
            post(crate::edits::submit).get(crate::edits::list),
        )
        .route("/v1/edits/{id}/decision", post(crate::edits::decide))
        .route("/v1/events", get(crate::sse::events))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .route_layer(axum::middleware::from_fn_with_state(
            state.http_metrics.clone(),
            crate::metrics::track,
        ))
        .with_state(state)
}

pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) fn ok_json(status: StatusCode, body: &impl serde::Serialize) -> Response {
    let mut res = (
        status,
        serde_json::to_string(body).unwrap_or_else(|_| "{}".into()),
    )
        .into_response();
    res.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    res
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "E_BAD_REQUEST",
        "method not allowed on this path",
    )
}

async fn healthz() -> Response {
    ok_json(StatusCode::OK, &json!({"status": "ok"}))
}

async fn readyz(State(s): State<AppState>) -> Response {
    match s.readiness.check().await {
        Ok(()) => ok_json(StatusCode::OK, &json!({"status": "ready"})),
        Err(reason) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE", reason).into_response()
        }
    }
}

/// An id in a path: anything that is not a UUID names nothing that exists.
pub(crate) fn path_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found(format!("no {what} {raw:?}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnqueueBody {
    kind: Kind,
    #[serde(default = "normal")]
    priority: Priority,
    payload: Value,
    #[serde(default)]
    idempotency_key: Option<String>,
}

fn normal() -> Priority {
    Priority::Normal
}

async fn enqueue(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<EnqueueBody>,
) -> ApiResult {
    let req = EnqueueRequest {
        kind: b.kind,
        priority: b.priority,
        payload: b.payload,
        idempotency_key: b.idempotency_key,
    };
    let out = s.muster.enqueue(p, req).await?;
    let status = if out.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(ok_json(status, &out))
}

async fn item(State(s): State<AppState>, Caller(p): Caller, Path(id): Path<String>) -> ApiResult {
    let id = ItemId(path_id(&id, "item")?);
    Ok(ok_json(StatusCode::OK, &s.muster.item(p, id).await?))
}

async fn retry(State(s): State<AppState>, Caller(p): Caller, Path(id): Path<String>) -> ApiResult {
    let id = ItemId(path_id(&id, "item")?);
    Ok(ok_json(StatusCode::OK, &s.muster.retry(p, id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseBody {
    worker_id: String,
    #[serde(default)]
    wait_ms: u64,
    /// Batching (opt-in): up to `max` leases, answered as `{"leases": [...]}`.
    #[serde(default)]
    max: Option<u32>,
}

async fn lease(
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
struct HeartbeatBody {
    worker_id: String,
}

async fn heartbeat(
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
struct CompleteBody {
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

async fn complete(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<CompleteBody>,
) -> ApiResult {
    let id = LeaseId(path_id(&id, "lease")?);
    if b.worker_id.is_some() && !b.lease_next {
        return Err(ApiError::bad_request("worker_id goes with lease_next"));
    }
    if !b.lease_next {
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
struct CompletionsBody {
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
async fn completions(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<CompletionsBody>,
) -> ApiResult {
    if b.completions.is_empty() || b.completions.len() > muster_app::service::MAX_BATCH as usize {
        return Err(ApiError::bad_request(format!(
            "a batch holds 1 to {} completions",
            muster_app::service::MAX_BATCH
        )));
    }
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
                    "status": e.status.as_u16(),
                    "error": {"code": e.code, "message": e.message},
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
struct FailBody {
    error: WorkerError,
    retryable: bool,
}

async fn fail(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<FailBody>,
) -> ApiResult {
    let id = LeaseId(path_id(&id, "lease")?);
    let req = FailRequest {
        error: json!({"code": b.error.code, "message": b.error.message}),
        retryable: b.retryable,
    };
    Ok(ok_json(StatusCode::OK, &s.muster.fail(p, id, req).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ParkBody {
    worker_digest: String,
    layout: Layout,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Layout {
    signature: String,
    #[serde(default)]
    detail: Value,
}

async fn needs_subtool(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<ParkBody>,
) -> ApiResult {
    let id = LeaseId(path_id(&id, "lease")?);
    let req = ParkRequest {
        worker_digest: b.worker_digest,
        layout: json!({"signature": b.layout.signature, "detail": b.layout.detail}),
    };
    Ok(ok_json(
        StatusCode::OK,
        &s.muster.needs_subtool(p, id, req).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DigestBody {
    digest: String,
}

async fn report_digest(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(kind): Path<String>,
    JsonBody(b): JsonBody<DigestBody>,
) -> ApiResult {
    let kind: Kind = kind
        .parse()
        .map_err(|_| ApiError::not_found(format!("no worker kind {kind:?}")))?;
    Ok(ok_json(
        StatusCode::OK,
        &s.muster.report_digest(p, kind, &b.digest).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthBody {
    #[serde(default)]
    pods: Vec<PodBody>,
    #[serde(default)]
    events: Vec<EventBody>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodBody {
    kind: Kind,
    ready: bool,
    restarts: u32,
    phase: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventBody {
    kind: Kind,
    reason: String,
    message: String,
}

async fn report_health(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<HealthBody>,
) -> ApiResult {
    let pods: Vec<PodHealth> = b
        .pods
        .into_iter()
        .map(|p| PodHealth {
            kind: p.kind,
            ready: p.ready,
            restarts: p.restarts,
            phase: p.phase,
        })
        .collect();
    let events: Vec<HealthEvent> = b
        .events
        .into_iter()
        .map(|e| HealthEvent {
            kind: e.kind,
            reason: e.reason,
            message: e.message,
        })
        .collect();
    Ok(ok_json(
        StatusCode::ACCEPTED,
        &s.muster.report_health(p, &pods, &events).await?,
    ))
}

async fn queues(State(s): State<AppState>, Caller(p): Caller) -> ApiResult {
    crate::sse::may_watch(p)?;
    Ok(ok_json(StatusCode::OK, &s.feed.queues().await?))
}
