//! Watching the pipeline: the live feed (`GET /v1/events`, framed by [`crate::sse`]) and the
//! queue depths.

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use muster_app::auth::may_watch;
use muster_app::feed::QueuesView;

use super::{Answer, Json};
use crate::conn_guard::ConnHandle;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::sse;
use crate::state::AppState;

pub(crate) async fn events(
    State(s): State<AppState>,
    Caller(p): Caller,
    conn: Option<Extension<ConnHandle>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    may_watch(p)?;
    // The stream's place on its connection (none when the router is served without the
    // server's connection tracking).
    let stream = match conn {
        Some(Extension(conn)) => Some(
            conn.admit_stream(crate::server::MAX_FEED_STREAMS_PER_CONNECTION)
                .ok_or_else(|| {
                    ApiError::unavailable_because(
                        "this connection has as many live-feed streams open as it may; open the next on another connection or retry shortly",
                    )
                })?,
        ),
        None => None,
    };
    let subscription = s.feed.subscribe(sse::last_event_id(&headers)).await?;
    let mut res = sse::stream(subscription);
    if let Some(stream) = stream {
        res = res.map(|body| crate::watched_body::watched(body, stream));
    }
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
