//! The trace context of a call, as the transport sees it: the caller's `traceparent`, the ids
//! of the call's server span (drawn when the request arrives, so that handlers can hand them
//! on), and what a handler reports of the item operations it made, for the request middleware
//! to turn into spans. Ids are random (`rand`); the domain only reads and writes them.

use std::time::SystemTime;

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use muster_app::views::{CompletionSpans, ItemTrace, LeaseGranted};
use muster_domain::trace::{SpanId, TraceContext, TraceId};
use muster_domain::{ItemId, Kind, LeaseId};
use time::OffsetDateTime;

/// The most links a span carries (OpenTelemetry's default link limit).
pub const MAX_LINKS: usize = 128;

/// Set in the request's extensions by the `track` middleware before any handler runs.
#[derive(Debug, Clone, Copy)]
pub struct RequestTrace {
    /// The caller's `traceparent`, when valid.
    pub incoming: Option<TraceContext>,
    /// This call's SERVER span (ids drawn at request start).
    pub server: TraceContext,
}

impl RequestTrace {
    /// The trace of a call that came with `incoming`: its server span is a child of the
    /// caller's span, sampled as the caller's is; without one (or with a malformed one) it is
    /// a new root, sampled when `root_sampled` (the root sampler's answer).
    pub fn start(incoming: Option<TraceContext>, root_sampled: bool) -> RequestTrace {
        let server = match incoming {
            Some(parent) => parent.child(span_id()),
            None => TraceContext {
                trace_id: trace_id(),
                span_id: span_id(),
                sampled: root_sampled,
            },
        };
        RequestTrace { incoming, server }
    }

    /// The `traceparent` header of `headers`, when there is exactly one and it is valid.
    pub fn incoming(headers: &HeaderMap) -> Option<TraceContext> {
        let mut values = headers.get_all("traceparent").iter();
        match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok().and_then(TraceContext::parse),
            _ => None,
        }
    }

    /// The spans of a completion of `lease` made in this call. Its item span's id is the
    /// lease's own (a digest of the lease id): a completion that committed while its caller
    /// went away, answered again as a replay, still exports the span its next items hang from.
    pub fn completion(&self, lease: LeaseId) -> CompletionSpans {
        let digest = blake3::Hasher::new()
            .update(b"muster complete span")
            .update(lease.0.as_bytes())
            .finalize();
        let mut id = [0; 8];
        id.copy_from_slice(&digest.as_bytes()[..8]);
        CompletionSpans {
            server: self.server,
            item_span: if id == [0; 8] { span_id() } else { SpanId(id) },
        }
    }
}

/// A handler's view of the call's trace (the `track` middleware set it). A router without the
/// middleware (a test's) gets a new unsampled root, as a call without `traceparent` would.
impl<S: Send + Sync> FromRequestParts<S> for RequestTrace {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<RequestTrace>()
            .copied()
            .unwrap_or_else(|| RequestTrace::start(RequestTrace::incoming(&parts.headers), false)))
    }
}

/// The item operations a span is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemOp {
    Lease,
    Heartbeat,
    Complete,
    Fail,
    NeedsSubtool,
}

impl ItemOp {
    /// The operation's name, the first word of its span's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemOp::Lease => "lease",
            ItemOp::Heartbeat => "heartbeat",
            ItemOp::Complete => "complete",
            ItemOp::Fail => "fail",
            ItemOp::NeedsSubtool => "needs_subtool",
        }
    }
}

/// One item operation of this call, put into the RESPONSE's extensions by the handler
/// (in [`ItemSpans`], in the answer's order); the middleware turns each into an ITEM span (and
/// a lease also into a queued span).
#[derive(Debug, Clone)]
pub struct ItemSpan {
    pub op: ItemOp,
    pub item_id: ItemId,
    pub kind: Kind,
    /// The item's stored context.
    pub item: TraceContext,
    /// Drawn before the use case ran.
    pub span_id: SpanId,
    pub fence: Option<u64>,
    pub attempt: Option<u32>,
    /// Leases only: when the item became leasable.
    pub queued_since: Option<OffsetDateTime>,
    /// When the use case was called.
    pub started: SystemTime,
}

impl ItemSpan {
    /// The span of `op` on the item `traced`, with the id `span_id`.
    fn of(op: ItemOp, traced: ItemTrace, span_id: SpanId, started: SystemTime) -> ItemSpan {
        ItemSpan {
            op,
            item_id: traced.item_id,
            kind: traced.kind,
            item: traced.context,
            span_id,
            fence: Some(traced.fence),
            attempt: Some(traced.attempt),
            queued_since: None,
            started,
        }
    }
}

/// The item spans of one call, in the answer's order.
#[derive(Debug, Clone, Default)]
pub struct ItemSpans(pub Vec<ItemSpan>);

impl ItemSpans {
    /// A lease's item span, its `traceparent` written into `granted` for the worker; nothing
    /// for an item that keeps no trace context. Its id is drawn here, once the use case has
    /// answered how many leases it granted: the use case never sees it.
    pub fn lease(&mut self, granted: &mut LeaseGranted, started: SystemTime) {
        let Some(traced) = granted.trace else {
            return;
        };
        let mut span = ItemSpan::of(ItemOp::Lease, traced, span_id(), started);
        span.queued_since = Some(granted.queued_since);
        granted.traceparent = Some(traced.context.child(span.span_id).to_string());
        self.0.push(span);
    }

    /// The span of `op` with the id `span_id` (drawn before the use case was called), when
    /// the use case answered an item that keeps a trace context.
    pub fn push(
        &mut self,
        op: ItemOp,
        traced: Option<ItemTrace>,
        span_id: SpanId,
        started: SystemTime,
    ) {
        self.0
            .extend(traced.map(|t| ItemSpan::of(op, t, span_id, started)));
    }
}

/// Replayed items' contexts (rule 6), at most [`MAX_LINKS`], plus the full count.
#[derive(Debug, Clone, Default)]
pub struct ReplayLinks {
    pub contexts: Vec<TraceContext>,
    pub count: u64,
}

impl ReplayLinks {
    /// The first [`MAX_LINKS`] of `contexts`, and `count` replayed items in all.
    pub fn of(mut contexts: Vec<TraceContext>, count: u64) -> ReplayLinks {
        contexts.truncate(MAX_LINKS);
        ReplayLinks { contexts, count }
    }
}

/// A new span id: random, never all zero.
pub fn span_id() -> SpanId {
    loop {
        let id: [u8; 8] = rand::random();
        if id != [0; 8] {
            return SpanId(id);
        }
    }
}

/// A new trace id: random, never all zero.
fn trace_id() -> TraceId {
    loop {
        let id: [u8; 16] = rand::random();
        if id != [0; 16] {
            return TraceId(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_call_with_a_traceparent_gets_a_server_span_in_the_callers_trace() {
        let incoming = TraceContext::parse(CALLER);
        let t = RequestTrace::start(incoming, false);
        let caller = incoming.unwrap();
        assert_eq!(t.server.trace_id, caller.trace_id);
        assert_ne!(t.server.span_id, caller.span_id);
        assert!(t.server.sampled);
    }

    #[test]
    fn a_call_without_one_is_a_new_root_sampled_as_the_sampler_says() {
        let a = RequestTrace::start(None, true);
        let b = RequestTrace::start(None, false);
        assert_eq!(a.incoming, None);
        assert_ne!(a.server.trace_id, b.server.trace_id);
        assert!(a.server.sampled);
        assert!(!b.server.sampled);
    }

    #[test]
    fn a_malformed_or_repeated_header_is_no_incoming_context() {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", "00-zz-bad".parse().unwrap());
        assert_eq!(RequestTrace::incoming(&headers), None);
        headers.insert("traceparent", CALLER.parse().unwrap());
        assert_eq!(
            RequestTrace::incoming(&headers),
            TraceContext::parse(CALLER)
        );
        headers.append("traceparent", CALLER.parse().unwrap());
        assert_eq!(RequestTrace::incoming(&headers), None);
    }

    /// A lease granted on an item that keeps `trace`.
    fn granted(trace: Option<TraceContext>) -> LeaseGranted {
        let item_id = ItemId(uuid::Uuid::from_u128(1));
        LeaseGranted {
            lease_id: "l".into(),
            fence: 2,
            expires_at: OffsetDateTime::UNIX_EPOCH,
            heartbeat_ms: 10_000,
            item: muster_app::views::LeasedItem {
                id: item_id.to_string(),
                kind: Kind::Trawl,
                priority: muster_domain::Priority::Normal,
                attempt: 2,
                payload: serde_json::json!({}),
            },
            traceparent: None,
            trace: trace.map(|context| ItemTrace {
                item_id,
                kind: Kind::Trawl,
                context,
                fence: 2,
                attempt: 2,
            }),
            queued_since: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_lease_hands_the_worker_its_item_span_in_the_items_trace() {
        let item = TraceContext::parse(CALLER).unwrap();
        let mut lease = granted(Some(item));
        let mut spans = ItemSpans::default();
        spans.lease(&mut lease, SystemTime::UNIX_EPOCH);
        let [span] = &spans.0[..] else {
            panic!("one span: {spans:?}")
        };
        assert_eq!(
            lease.traceparent,
            Some(item.child(span.span_id).to_string())
        );
        assert_eq!(
            (
                span.op,
                span.item,
                span.fence,
                span.attempt,
                span.queued_since
            ),
            (
                ItemOp::Lease,
                item,
                Some(2),
                Some(2),
                Some(OffsetDateTime::UNIX_EPOCH)
            )
        );
    }

    #[test]
    fn a_lease_of_an_item_without_a_trace_context_has_no_span_and_no_traceparent() {
        let mut lease = granted(None);
        let mut spans = ItemSpans::default();
        spans.lease(&mut lease, SystemTime::UNIX_EPOCH);
        assert_eq!((lease.traceparent, spans.0.len()), (None, 0));
    }

    #[test]
    fn replay_links_keep_the_first_128_contexts_and_the_full_count() {
        let cx = TraceContext::parse(CALLER).unwrap();
        let links = ReplayLinks::of(vec![cx; 200], 200);
        assert_eq!(links.contexts.len(), 128);
        assert_eq!(links.count, 200);
    }
}
