//! Each event encoded once: its JSON and Server-Sent-Events framing become one reference-counted
//! buffer when it is published, and every subscriber writes that same buffer.

use std::sync::Arc;

use bytes::Bytes;
use muster_domain::feed::sse_frame;
use serde::Serialize;
use time::OffsetDateTime;

use super::FeedEvent;

/// An event together with its wire form. Cloning shares both (no copy, no re-encoding).
#[derive(Debug, Clone)]
pub struct Frame {
    event: Arc<FeedEvent>,
    bytes: Bytes,
}

impl Frame {
    /// Encodes `event` (the only place the feed serializes an event).
    pub fn encode(event: FeedEvent) -> Self {
        let bytes = Bytes::from(encode(&event));
        Frame {
            event: Arc::new(event),
            bytes,
        }
    }

    pub fn event(&self) -> &FeedEvent {
        &self.event
    }

    /// The event's SSE frame, shared by everyone who holds this frame.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

#[derive(Serialize)]
struct Heartbeat {
    #[serde(with = "time::serde::rfc3339")]
    at: OffsetDateTime,
    seq: i64,
}

#[derive(Serialize)]
struct Reset<'a> {
    reason: &'a str,
}

#[derive(Serialize)]
struct Shutdown {
    reason: &'static str,
    retry_ms: u64,
}

fn json<T: Serialize>(value: &T) -> String {
    // The feed's types always serialize; an empty object keeps the frame well formed regardless.
    serde_json::to_string(value).unwrap_or_else(|_| "{}".into())
}

fn encode(event: &FeedEvent) -> Vec<u8> {
    let (name, id, data) = match event {
        FeedEvent::Transition(t) => ("transition", Some(t.seq), json(t)),
        FeedEvent::Queues(q) => ("queues", None, json(q)),
        FeedEvent::Health(h) => ("health", None, json(h)),
        FeedEvent::Edit(e) => ("edit", None, json(e)),
        FeedEvent::Kind(k) => ("kind", Some(k.seq), json(k)),
        FeedEvent::Heartbeat { at, seq } => {
            let data = json(&Heartbeat { at: *at, seq: *seq });
            ("heartbeat", None, data)
        }
        FeedEvent::Reset { reason } => ("reset", None, json(&Reset { reason })),
        FeedEvent::Shutdown { retry_ms } => {
            let data = json(&Shutdown {
                reason: "draining",
                retry_ms: *retry_ms,
            });
            ("shutdown", None, data)
        }
    };
    sse_frame(name, id, &data)
}
