//! The live feed as Server-Sent Events: the `Last-Event-ID` a client resumes from, and the
//! streaming answer (the handler is [`crate::handlers::feed`]). The frames come encoded from the
//! feed (each event once, shared by every subscriber); this writes them as they are, several
//! ready ones in one chunk.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use muster_app::feed::Subscription;
use muster_domain::feed::sse_retry;

pub(crate) fn last_event_id(headers: &HeaderMap) -> Option<i64> {
    let raw = headers.get("last-event-id")?;
    // An id we never sent (unparsable) gets a reset, like any unknown id.
    Some(
        raw.to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(-1),
    )
}

/// The answer to a subscription: `retry:` first, then the subscription's chunks until it ends
/// (after a `shutdown` event, or when the subscriber fell too far behind).
pub(crate) fn stream(subscription: Subscription) -> Response {
    let retry = Bytes::from(sse_retry(subscription.retry_ms()));
    let head = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(retry) });
    let events = futures_util::stream::unfold(subscription, |mut sub: Subscription| async move {
        match sub.next_chunk().await {
            Ok(chunk) => Some((Ok::<_, std::convert::Infallible>(chunk), sub)),
            Err(end) => {
                tracing::debug!(?end, "live feed subscription ended");
                None
            }
        }
    });
    let body = Body::from_stream(futures_util::StreamExt::chain(head, events));
    let mut res = Response::new(body);
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}
