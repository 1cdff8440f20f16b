//! The worker's span of each leased item: `process <kind>`, a child of the lease's span in the
//! item's trace, opened through the OpenTelemetry API's global tracer provider. With an SDK
//! installed it is recorded and exported like the author's own spans; with none, it is a no-op
//! span that carries the lease's context, which the lease's calls then send unchanged.

use muster_domain::trace::{SpanId as WireSpanId, TraceContext, TraceId as WireTraceId};
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};

use crate::Lease;

/// The instrumentation scope of the runtime's spans.
pub(super) const SCOPE: &str = "muster-worker";

/// The `process` span of one leased item; ended when dropped.
pub(super) struct ProcessSpan {
    cx: Context,
}

impl ProcessSpan {
    /// Opens the span of `lease` (kind CONSUMER, the messaging conventions' attributes) as a
    /// child of the lease's span; `None` for a lease without a trace context.
    pub(super) fn open(tracer: &BoxedTracer, lease: &Lease) -> Option<ProcessSpan> {
        let lease_cx = TraceContext::parse(lease.traceparent()?)?;
        let parent = Context::new().with_remote_span_context(to_otel(lease_cx));
        let kind = lease.item.kind.clone();
        let span = tracer
            .span_builder(format!("process {kind}"))
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                KeyValue::new("messaging.system", "muster"),
                KeyValue::new("messaging.operation.type", "process"),
                KeyValue::new("messaging.destination.name", kind),
                KeyValue::new("muster.item.id", lease.item.id.clone()),
                KeyValue::new("muster.lease.fence", lease.fence),
                KeyValue::new("muster.attempt", i64::from(lease.item.attempt)),
            ])
            .start_with_context(tracer, &parent);
        Some(ProcessSpan {
            cx: parent.with_span(span),
        })
    }

    /// The context the item's handler runs in: this span current.
    pub(super) fn context(&self) -> &Context {
        &self.cx
    }

    /// This span's `traceparent`, for the lease's calls; `None` if the tracer gave it no valid
    /// context (the calls then send the lease's own).
    pub(super) fn traceparent(&self) -> Option<String> {
        from_otel(self.cx.span().span_context()).map(|cx| cx.to_string())
    }

    /// Marks the span failed: the handler failed (or its work was cancelled) with `code`.
    pub(super) fn failed(&self, code: &str, message: &str) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("error.type", code.to_owned()));
        span.set_status(Status::error(message.to_owned()));
    }
}

impl Drop for ProcessSpan {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// A W3C trace context as the API's remote span context.
fn to_otel(cx: TraceContext) -> SpanContext {
    let flags = if cx.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanContext::new(
        TraceId::from_bytes(cx.trace_id.0),
        SpanId::from_bytes(cx.span_id.0),
        flags,
        true,
        TraceState::default(),
    )
}

/// The API's span context as a W3C trace context; `None` when it is not valid.
fn from_otel(cx: &SpanContext) -> Option<TraceContext> {
    cx.is_valid().then(|| TraceContext {
        trace_id: WireTraceId(cx.trace_id().to_bytes()),
        span_id: WireSpanId(cx.span_id().to_bytes()),
        sampled: cx.is_sampled(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE_SPAN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn lease(traceparent: Option<&str>) -> Lease {
        serde_json::from_value(serde_json::json!({
            "lease_id": "l", "fence": 3, "expires_at": "2030-01-01T00:00:00Z", "heartbeat_ms": 1000,
            "item": {"id": "i", "kind": "trawl", "priority": "normal", "attempt": 2, "payload": null},
            "traceparent": traceparent,
        }))
        .unwrap()
    }

    #[test]
    fn without_a_tracer_provider_the_span_hands_on_the_leases_own_context() {
        let tracer = opentelemetry::global::tracer(SCOPE);
        let span = ProcessSpan::open(&tracer, &lease(Some(LEASE_SPAN))).unwrap();
        assert_eq!(span.traceparent().as_deref(), Some(LEASE_SPAN));
    }

    #[test]
    fn a_lease_without_a_trace_context_opens_no_span() {
        let tracer = opentelemetry::global::tracer(SCOPE);
        assert!(ProcessSpan::open(&tracer, &lease(None)).is_none());
    }

    #[test]
    fn an_unsampled_context_stays_unsampled() {
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let cx = TraceContext::parse(unsampled).unwrap();
        assert_eq!(from_otel(&to_otel(cx)).unwrap().to_string(), unsampled);
    }
}
