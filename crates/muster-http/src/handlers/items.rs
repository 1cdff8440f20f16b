//! Items: enqueue, inspect, find, retry (one or a kind's failed items).

use axum::extract::State;
use axum::http::StatusCode;
use muster_app::views::{
    BulkCancelled, BulkRetried, Cancelled, EnqueueRequest, Enqueued, ItemPage, ItemView, Retried,
};
use muster_domain::listing::{DEFAULT_PAGE, ItemFilter};
use muster_domain::{ItemId, ItemState, Kind, Priority};
use serde::Deserialize;
use serde_json::Value;

use axum::Extension;

use super::{Answer, Json, Replayed};
use crate::error::ApiError;
use crate::extract::{Caller, InPath, InQuery, JsonBody};
use crate::state::AppState;
use crate::trace::{ReplayLinks, RequestTrace};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueBody {
    kind: Kind,
    #[serde(default = "normal")]
    priority: Priority,
    payload: Value,
    #[serde(default)]
    idempotency_key: Option<String>,
    /// Delayed work: an RFC 3339 time.
    #[serde(default, with = "time::serde::rfc3339::option")]
    not_before: Option<time::OffsetDateTime>,
}

fn normal() -> Priority {
    Priority::Normal
}

pub(crate) async fn enqueue(
    State(s): State<AppState>,
    Caller(p): Caller,
    trace: RequestTrace,
    JsonBody(b): JsonBody<EnqueueBody>,
) -> Result<(StatusCode, Json<Enqueued>), ApiError> {
    let req = EnqueueRequest {
        kind: b.kind,
        priority: b.priority,
        payload: b.payload,
        idempotency_key: b.idempotency_key,
        not_before: b.not_before,
        trace: Some(trace.server),
    };
    let out = s.muster.enqueue(p, req).await?;
    let status = if out.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(out)))
}

pub(crate) async fn item(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(id): InPath<ItemId>,
) -> Answer<ItemView> {
    Ok(Json(s.muster.item(p, id).await?))
}

pub(crate) async fn retry(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(id): InPath<ItemId>,
) -> Replayed<Retried> {
    let retried = s.muster.retry(p, id).await?;
    let links = ReplayLinks::of(retried.trace.into_iter().collect(), 1);
    Ok((Extension(links), Json(retried)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default)]
    state: Option<ItemState>,
    #[serde(default)]
    kind: Option<Kind>,
    #[serde(default)]
    priority: Option<Priority>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    after: Option<uuid::Uuid>,
}

pub(crate) async fn list(
    State(s): State<AppState>,
    Caller(p): Caller,
    InQuery(q): InQuery<ListQuery>,
) -> Answer<ItemPage> {
    let filter = ItemFilter::new(q.state, q.kind, q.priority, q.after.map(ItemId), q.limit)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(s.muster.list_items(p, filter).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkRetryBody {
    kind: Kind,
    /// `failed` (the default) or `needs_subtool`.
    #[serde(default = "failed")]
    state: ItemState,
    #[serde(default = "default_max")]
    max: u32,
}

fn failed() -> ItemState {
    ItemState::Failed
}

fn default_max() -> u32 {
    DEFAULT_PAGE
}

pub(crate) async fn retry_many(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<BulkRetryBody>,
) -> Replayed<BulkRetried> {
    let mut retried = s.muster.retry_many(p, b.kind, b.state, b.max).await?;
    let links = ReplayLinks::of(std::mem::take(&mut retried.traces), retried.retried);
    Ok((Extension(links), Json(retried)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelBody {
    reason: String,
}

pub(crate) async fn cancel(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(id): InPath<ItemId>,
    JsonBody(b): JsonBody<CancelBody>,
) -> Answer<Cancelled> {
    Ok(Json(s.muster.cancel(p, id, &b.reason).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkCancelBody {
    kind: Kind,
    state: ItemState,
    #[serde(default = "default_max")]
    max: u32,
    reason: String,
}

pub(crate) async fn cancel_many(
    State(s): State<AppState>,
    Caller(p): Caller,
    JsonBody(b): JsonBody<BulkCancelBody>,
) -> Answer<BulkCancelled> {
    let cancelled = s
        .muster
        .cancel_many(p, b.kind, b.state, b.max, &b.reason)
        .await?;
    Ok(Json(cancelled))
}
