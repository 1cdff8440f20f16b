//! The fleet's reports: a worker kind's image digest (Shipkeeper) and pod health.

use axum::extract::State;
use axum::http::StatusCode;
use muster_app::views::{DigestRecorded, HealthAccepted, HealthSnapshot};
use muster_domain::Kind;
use muster_domain::health::{HealthEvent, PodHealth};
use serde::Deserialize;

use axum::Extension;

use super::{Answer, Json, Replayed};
use crate::error::ApiError;
use crate::extract::{Caller, InPath, JsonBody};
use crate::state::AppState;
use crate::trace::ReplayLinks;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DigestBody {
    digest: String,
}

pub(crate) async fn report_digest(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(kind): InPath<Kind>,
    JsonBody(b): JsonBody<DigestBody>,
) -> Replayed<DigestRecorded> {
    let mut recorded = s.muster.report_digest(p, kind, &b.digest).await?;
    let links = ReplayLinks::of(std::mem::take(&mut recorded.traces), recorded.replayed);
    Ok((Extension(links), Json(recorded)))
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
) -> Result<(StatusCode, Json<HealthAccepted>), ApiError> {
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
    let accepted = s.muster.report_health(p, &pods, &events).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

pub(crate) async fn health(State(s): State<AppState>, Caller(p): Caller) -> Answer<HealthSnapshot> {
    Ok(Json(s.muster.health(p).await?))
}
