//! Watching the pipeline: the live feed (`GET /v1/events`, framed by [`crate::sse`]) and the
//! queue depths.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use muster_app::auth::may_watch;
use muster_app::feed::QueuesView;

use super::{Answer, Json};
use crate::error::ApiError;
use crate::extract::Caller;
use crate::sse;
use crate::state::AppState;

pub(crate) async fn events(
    State(s): State<AppState>,
    Caller(p): Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    may_watch(p)?;
    let subscription = s.feed.subscribe(sse::last_event_id(&headers)).await?;
    let res = sse::stream(subscription);
    // The stream ends when its token is no longer valid ([`crate::reauth`]).
    let token = crate::extract::bearer(&headers)
        .unwrap_or_default()
        .to_owned();
    Ok(crate::reauth::until_token_invalid(
        res,
        s.auth.clone(),
        token,
        p,
        crate::reauth::RECHECK,
    ))
}

pub(crate) async fn queues(State(s): State<AppState>, Caller(p): Caller) -> Answer<QueuesView> {
    may_watch(p)?;
    Ok(Json(s.feed.queues().await?))
}
