//! The fleet's reports: a worker kind's image digest (Shipkeeper) and pod health.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use muster_domain::Kind;
use muster_domain::health::{HealthEvent, PodHealth};
use serde::Deserialize;

use super::{ApiResult, ok_json};
use crate::error::ApiError;
use crate::extract::{Caller, JsonBody};
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DigestBody {
    digest: String,
}

pub(crate) async fn report_digest(
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
pub(crate) struct HealthBody {
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

pub(crate) async fn report_health(
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

pub(crate) async fn health(State(s): State<AppState>, Caller(p): Caller) -> ApiResult {
    Ok(ok_json(StatusCode::OK, &s.muster.health(p).await?))
}
