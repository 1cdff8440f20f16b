//! The live feed as Server-Sent Events: frames, the `Last-Event-ID` a client resumes from, and
//! the streaming answer (the handler is [`crate::handlers::feed`]).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use muster_app::feed::{FeedEvent, Subscription};
use serde_json::json;

/// One SSE frame.
fn frame(event: &FeedEvent) -> String {
    let (name, id, data) = match event {
        FeedEvent::Transition(t) => ("transition", Some(t.seq), serde_json::to_string(t)),
        FeedEvent::Queues(q) => ("queues", None, serde_json::to_string(q)),
        FeedEvent::Health(h) => ("health", None, serde_json::to_string(h)),
        FeedEvent::Edit(e) => ("edit", None, serde_json::to_string(e)),
        FeedEvent::Heartbeat { at, seq } => (
            "heartbeat",
            None,
            Ok(json!({"at": at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(), "seq": seq}).to_string()),
        ),
        FeedEvent::Reset { reason } => ("reset", None, Ok(json!({ "reason": reason }).to_string())),
    };
    // serde_json writes one line: no raw newline can break the frame.
    let data = data.unwrap_or_else(|_| "{}".into());
    match id {
        Some(id) => format!("id: {id}\nevent: {name}\ndata: {data}\n\n"),
        None => format!("event: {name}\ndata: {data}\n\n"),
    }
}

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

/// The answer to a subscription: `retry:` first, then one frame per event until the
/// subscription ends.
pub(crate) fn stream(subscription: Subscription, retry_ms: u64) -> Response {
    let retry = format!("retry: {retry_ms}\n\n");
    let head = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(retry) });
    let events = futures_util::stream::unfold(subscription, |mut sub: Subscription| async move {
        match sub.next().await {
            Ok(e) => Some((Ok::<_, std::convert::Infallible>(frame(&e)), sub)),
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
