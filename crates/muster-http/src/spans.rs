//! A call's spans, handed to the exporter when its answer is ready: the call's SERVER span,
//! one ITEM span for each item operation its handler reported ([`ItemSpans`]), and for each
//! lease the time its item waited in the queue. The rules are those of docs/operations.md,
//! "Traces"; the exporter (`muster-otel`) never blocks and drops what it cannot queue.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use axum::http::Extensions;
use muster_domain::Principal;
use muster_domain::trace::TraceContext;
use muster_otel::{AttrValue, FinishedSpan, SpanKind, Telemetry};

use crate::trace::{ItemSpan, ItemSpans, ReplayLinks, RequestTrace, span_id};

/// Set in a request's extensions while tracing is on; the `Caller` extractor fills it, so that
/// the call's span can name its principal (never its token).
#[derive(Debug, Clone, Default)]
pub(crate) struct CallerSlot(Arc<OnceLock<Principal>>);

impl CallerSlot {
    pub(crate) fn set(&self, principal: Principal) {
        let _ = self.0.set(principal);
    }
}

/// What the middleware knows of a call once its answer is ready.
pub(crate) struct Call<'a> {
    pub trace: RequestTrace,
    pub method: &'static str,
    pub route: &'static str,
    pub status: u16,
    /// The error code of a refusal (`""` for none).
    pub code: &'static str,
    pub request_id: &'a str,
    pub caller: Option<&'a CallerSlot>,
    pub start: SystemTime,
    pub end: SystemTime,
}

/// Records the call's spans (answer extensions `ItemSpans` and `ReplayLinks`, when a handler
/// put them there).
pub(crate) fn record(telemetry: &Telemetry, call: &Call<'_>, answer: &Extensions) {
    let replayed = answer.get::<ReplayLinks>();
    telemetry.record(server_span(call, replayed));
    for item in answer.get::<ItemSpans>().map_or(&[][..], |s| &s.0[..]) {
        let context = item.item.child(item.span_id);
        let context = TraceContext {
            sampled: telemetry.sample(context.trace_id, Some(item.item.sampled)),
            ..context
        };
        if let Some(since) = item.queued_since {
            telemetry.record(queued_span(item, context.sampled, since));
        }
        telemetry.record(item_span(call, item, context));
    }
}

/// The call's SERVER span: a child of the caller's span, or a root.
fn server_span(call: &Call<'_>, replayed: Option<&ReplayLinks>) -> FinishedSpan {
    let mut attributes: Vec<(&'static str, AttrValue)> = vec![
        ("http.request.method", call.method.into()),
        ("http.route", call.route.into()),
        ("http.response.status_code", u32::from(call.status).into()),
        ("url.scheme", "http".into()),
        ("muster.request.id", call.request_id.to_owned().into()),
    ];
    if let Some(principal) = call.caller.and_then(|slot| slot.0.get()) {
        attributes.push(("muster.principal", principal.to_string().into()));
    }
    if !call.code.is_empty() {
        attributes.push(("muster.error.code", call.code.into()));
    }
    // HTTP semantic conventions: a server span is an error for a 5xx only.
    let error = (call.status >= 500).then(|| {
        attributes.push(("error.type", call.status.to_string().into()));
        call.code.to_owned()
    });
    let links = match replayed {
        Some(r) => {
            attributes.push(("muster.items.replayed", r.count.into()));
            r.contexts.clone()
        }
        None => Vec::new(),
    };
    FinishedSpan {
        context: call.trace.server,
        parent: call.trace.incoming.map(|c| c.span_id),
        name: Cow::Owned(format!("{} {}", call.method, call.route)),
        kind: SpanKind::Server,
        start: call.start,
        end: call.end,
        attributes,
        links,
        events: Vec::new(),
        error,
    }
}

/// An item operation's span in the item's trace: under the call's span when the caller sent
/// the item's trace (its worker's span), else under the item's stored context with a link to
/// the call.
fn item_span(call: &Call<'_>, item: &ItemSpan, context: TraceContext) -> FinishedSpan {
    let server = call.trace.server;
    let (parent, links) = if server.trace_id == item.item.trace_id {
        (server.span_id, Vec::new())
    } else {
        (item.item.span_id, vec![server])
    };
    let mut attributes: Vec<(&'static str, AttrValue)> = vec![
        ("muster.item.id", item.item_id.to_string().into()),
        ("muster.kind", item.kind.as_str().into()),
    ];
    if let Some(fence) = item.fence {
        attributes.push(("muster.lease.fence", fence.into()));
    }
    if let Some(attempt) = item.attempt {
        attributes.push(("muster.attempt", attempt.into()));
    }
    FinishedSpan {
        context,
        parent: Some(parent),
        name: Cow::Owned(format!("{} {}", item.op.as_str(), item.kind)),
        kind: SpanKind::Internal,
        start: item.started,
        end: call.end,
        attributes,
        links,
        events: Vec::new(),
        error: None,
    }
}

/// The time a leased item waited: from when it became leasable to the lease, under the
/// item's stored context.
fn queued_span(item: &ItemSpan, sampled: bool, since: time::OffsetDateTime) -> FinishedSpan {
    let start = SystemTime::from(since).min(item.started);
    FinishedSpan {
        context: TraceContext {
            sampled,
            ..item.item.child(span_id())
        },
        parent: Some(item.item.span_id),
        name: Cow::Owned(format!("queued {}", item.kind)),
        kind: SpanKind::Internal,
        start,
        end: item.started,
        attributes: vec![
            ("muster.item.id", item.item_id.to_string().into()),
            ("muster.kind", item.kind.as_str().into()),
        ],
        links: Vec::new(),
        events: Vec::new(),
        error: None,
    }
}
