//! Items: enqueue, inspect, retry.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use muster_app::views::EnqueueRequest;
use muster_domain::{ItemId, Kind, Priority};
use serde::Deserialize;
use serde_json::Value;

use super::{ApiResult, ok_json};
use crate::extract::{Caller, JsonBody, path_id};
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueBody {
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

pub(crate) async fn enqueue(
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

pub(crate) async fn item(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let id = ItemId(path_id(&id, "item")?);
    Ok(ok_json(StatusCode::OK, &s.muster.item(p, id).await?))
}

pub(crate) async fn retry(
    State(s): State<AppState>,
    Caller(p): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let id = ItemId(path_id(&id, "item")?);
    Ok(ok_json(StatusCode::OK, &s.muster.retry(p, id).await?))
}
