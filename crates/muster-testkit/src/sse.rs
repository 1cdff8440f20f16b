//! The live feed (`GET /v1/events`) read frame by frame over the socket.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request, StatusCode};
use serde_json::Value;

use crate::server::{TestApp, token};

/// Every item of the live feed any stream of this process has received, as a client parses it:
/// `{"event", "data" (the text of the data line), "id"}` with the fields the item had, or
/// `{"retry": n}`. `bins/muster/tests/api/openapi.rs` checks them against the feed's schema.
static RECEIVED: std::sync::Mutex<Vec<Value>> = std::sync::Mutex::new(Vec::new());

/// The feed items received so far by every stream of this process (see [`RECEIVED`]).
pub fn received_feed_items() -> Vec<Value> {
    RECEIVED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn record(item: serde_json::Map<String, Value>) {
    if !item.is_empty() {
        RECEIVED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Value::Object(item));
    }
}

/// One Server-Sent Event as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub event: String,
    pub data: Value,
}

/// A live `GET /v1/events` response read frame by frame over the socket.
pub struct SseStream {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: hyper::body::Incoming,
    buf: String,
    pub retry_ms: Option<u64>,
    /// Everything received, for checks over the raw text.
    pub raw: String,
}

impl SseStream {
    /// The next event, or `None` when the stream ended or nothing came within `wait`.
    pub async fn next_within(&mut self, wait: std::time::Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = SseEvent {
                    id: None,
                    event: String::new(),
                    data: Value::Null,
                };
                let mut is_event = false;
                let mut item = serde_json::Map::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("retry: ") {
                        self.retry_ms = v.parse().ok();
                        item.insert(
                            "retry".into(),
                            v.parse::<u64>().map_or(Value::from(v), Value::from),
                        );
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        ev.id = v.parse().ok();
                        item.insert("id".into(), Value::from(v));
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        ev.event = v.to_owned();
                        is_event = true;
                        item.insert("event".into(), Value::from(v));
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        ev.data = serde_json::from_str(v).expect("data is JSON");
                        item.insert("data".into(), Value::from(v));
                    }
                }
                record(item);
                if is_event {
                    return Some(ev);
                }
                continue;
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??
                .ok()?;
            if let Ok(data) = frame.into_data() {
                let text = String::from_utf8(data.to_vec()).expect("utf-8");
                self.raw.push_str(&text);
                self.buf.push_str(&text);
            }
        }
    }

    /// The next event named `name`, skipping others (heartbeats, queues, …).
    pub async fn next_named(&mut self, name: &str, wait: std::time::Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.next_within(left).await?;
            if e.event == name {
                return Some(e);
            }
        }
    }
}

impl TestApp {
    /// Opens the live feed as `principal`, resuming after `last_event_id` if given.
    pub async fn events(&self, principal: &str, last_event_id: Option<&str>) -> SseStream {
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(format!("http://{}/v1/events", self.addr))
            .header("authorization", format!("Bearer {}", token(principal)));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let res = self
            .client
            .request(req.body(Full::new(Bytes::new())).expect("a valid request"))
            .await
            .expect("request");
        SseStream {
            status: res.status(),
            headers: res.headers().clone(),
            body: res.into_body(),
            buf: String::new(),
            retry_ms: None,
            raw: String::new(),
        }
    }
}
