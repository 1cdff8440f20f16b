//! The live feed (`GET /v1/events`) read frame by frame over the socket, with muster-domain's
//! reader.

use std::collections::VecDeque;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request, StatusCode};
use muster_domain::feed::{SseBlock, SseReader};
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

/// Records the fields `block` held, as a client parses them (`retry` as a number when it is one).
fn record(block: &SseBlock) {
    let mut item = serde_json::Map::new();
    if let Some(v) = &block.retry {
        item.insert(
            "retry".into(),
            v.parse::<u64>()
                .map_or(Value::from(v.as_str()), Value::from),
        );
    }
    for (field, value) in [
        ("id", &block.id),
        ("event", &block.event),
        ("data", &block.data),
    ] {
        if let Some(v) = value {
            item.insert(field.into(), Value::from(v.as_str()));
        }
    }
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
    reader: SseReader,
    /// Blocks read but not yet handed out.
    blocks: VecDeque<SseBlock>,
    pub retry_ms: Option<u64>,
    /// Everything received, for checks over the raw text.
    pub raw: String,
}

impl SseStream {
    /// The next event, or `None` when the stream ended or nothing came within `wait`. Only a
    /// block that names its event is one (the server names every event it sends).
    pub async fn next_within(&mut self, wait: std::time::Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(block) = self.blocks.pop_front() {
                record(&block);
                if let Some(v) = &block.retry {
                    self.retry_ms = v.parse().ok();
                }
                if let Some(event) = block.event {
                    return Some(SseEvent {
                        id: block.id.and_then(|v| v.parse().ok()),
                        event,
                        data: block.data.map_or(Value::Null, |v| {
                            serde_json::from_str(&v).expect("data is JSON")
                        }),
                    });
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
                self.blocks.extend(self.reader.push(text.as_bytes()));
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
            reader: SseReader::default(),
            blocks: VecDeque::new(),
            retry_ms: None,
            raw: String::new(),
        }
    }
}
