//! Kinds: pausing and resuming one (operators).

use axum::extract::State;
use muster_app::views::KindPaused;
use muster_domain::Kind;
use serde::Deserialize;

use super::{Answer, Json};
use crate::extract::{Caller, InPath, JsonBody};
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PausedBody {
    paused: bool,
    /// Required to pause, optional to resume.
    #[serde(default)]
    reason: Option<String>,
}

pub(crate) async fn set_paused(
    State(s): State<AppState>,
    Caller(p): Caller,
    InPath(kind): InPath<Kind>,
    JsonBody(b): JsonBody<PausedBody>,
) -> Answer<KindPaused> {
    let answer = s
        .muster
        .set_paused(p, kind, b.paused, b.reason.as_deref())
        .await?;
    Ok(Json(answer))
}
