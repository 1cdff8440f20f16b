//! A call's spans, handed to the exporter when its answer is ready: the call's SERVER span,
//! one ITEM span for each item operation its handler reported ([`ItemSpans`]), for each
//! lease the time its item waited in the queue, and a CLIENT span for each Logbook transaction
//! the call ran or carried for a group-commit batch (gathered by `muster_app::telemetry`). The
//! rules are those of docs/operations.md, "Traces"; the exporter (`muster-otel`) never blocks
//! and drops what it cannot queue.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use axum::http::Extensions;
use muster_app::telemetry::{Gathered, TxOutcome, TxSpan};
use muster_domain::Principal;
use muster_domain::trace::TraceContext;
use muster_otel::{AttrValue, FinishedSpan, SpanEvent, SpanKind, Telemetry};

use crate::trace::{ItemSpan, ItemSpans, ReplayLinks, RequestTrace, span_id};

/// Set in a request's extensions while tracing is on; the `Caller` extractor fills it, so that
/// the call's span can name its principal (never its token).
#[derive(Debug, Clone, Default)]
pub(crate) struct CallerSlot(Arc<OnceLock<Principal>>);

impl CallerSlot {
    pub(crate) fn set(&self, principal: Principal) {
        let _ = self.0.set(principal);
    }

    /// The principal the call's token named, once it was checked.
    pub(crate) fn get(&self) -> Option<Principal> {
        self.0.get().copied()
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
    /// What the call's Logbook transactions did, and the group-commit batches it rode in.
    pub logbook: &'a Gathered,
}

/// Records the call's spans (answer extensions `ItemSpans` and `ReplayLinks`, when a handler
/// put them there).
pub(crate) fn record(telemetry: &Telemetry, call: &Call<'_>, answer: &Extensions) {
    let replayed = answer.get::<ReplayLinks>();
    telemetry.record(server_span(call, replayed));
    for tx in &call.logbook.transactions {
        telemetry.record(transaction_span(call.trace.server, tx));
    }
    // An item's spans follow the sampling decision its trace started with (the flag it
    // keeps, which its workers were handed too), whatever the sampler says of this call.
    for item in answer.get::<ItemSpans>().map_or(&[][..], |s| &s.0[..]) {
        if let Some(since) = item.queued_since {
            telemetry.record(queued_span(item, since));
        }
        telemetry.record(item_span(call, item, item.item.child(item.span_id)));
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
    let mut links = match replayed {
        Some(r) => {
            attributes.push(("muster.items.replayed", r.count.into()));
            r.contexts.clone()
        }
        None => Vec::new(),
    };
    let logbook = call.logbook;
    if let Some(size) = logbook.batch_size {
        attributes.push(("muster.batch.size", (size as u64).into()));
    }
    links.extend_from_slice(&logbook.batch_links);
    if logbook.dropped > 0 {
        attributes.push(("muster.db.transactions.dropped", logbook.dropped.into()));
    }
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
fn queued_span(item: &ItemSpan, since: time::OffsetDateTime) -> FinishedSpan {
    let start = SystemTime::from(since).min(item.started);
    FinishedSpan {
        context: item.item.child(span_id()),
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

/// A Logbook transaction's CLIENT span, under the call's SERVER span: from when it asked for a
/// connection to its end, with the database conventions' `db.system.name` and
/// `db.operation.name`.
fn transaction_span(server: TraceContext, tx: &TxSpan) -> FinishedSpan {
    let f = &tx.figures;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let outcome = match f.outcome {
        TxOutcome::Committed => "committed",
        TxOutcome::RolledBack => "rolled_back",
        TxOutcome::Failed => "failed",
    };
    let mut attributes: Vec<(&'static str, AttrValue)> = vec![
        ("db.system.name", "postgresql".into()),
        ("db.operation.name", "transaction".into()),
        ("muster.db.statements", f.statements.into()),
        ("muster.db.round_trips", f.round_trips.into()),
        ("muster.db.connection_wait_ms", ms(f.connection_wait).into()),
        ("muster.db.outcome", outcome.into()),
    ];
    let mut events = vec![event("connection acquired", f.asked + f.connection_wait)];
    if let Some((sent, took)) = f.commit {
        attributes.push(("muster.db.commit_ms", ms(took).into()));
        events.push(event("commit sent", sent));
    }
    FinishedSpan {
        context: server.child(tx.span_id),
        parent: Some(server.span_id),
        name: Cow::Borrowed("logbook transaction"),
        kind: SpanKind::Client,
        start: f.asked,
        end: f.end,
        attributes,
        links: Vec::new(),
        events,
        error: (f.outcome == TxOutcome::Failed).then(|| "the transaction failed".to_owned()),
    }
}

fn event(name: &'static str, time: SystemTime) -> SpanEvent {
    SpanEvent {
        name: Cow::Borrowed(name),
        time,
        attributes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use muster_app::telemetry::TxFigures;
    use muster_domain::trace::{SpanId, TraceId};

    use super::*;

    const SERVER: TraceContext = TraceContext {
        trace_id: TraceId([1; 16]),
        span_id: SpanId([1; 8]),
        sampled: true,
    };

    fn ended(outcome: TxOutcome) -> FinishedSpan {
        let asked = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let figures = TxFigures {
            outcome,
            ..TxFigures::new(asked, asked + Duration::from_millis(2))
        };
        let tx = TxSpan {
            span_id: SpanId([2; 8]),
            figures,
        };
        transaction_span(SERVER, &tx)
    }

    #[test]
    fn a_transaction_span_is_a_client_child_of_the_call_in_its_trace() {
        let span = ended(TxOutcome::Committed);
        assert_eq!(
            (span.kind, span.parent, span.context),
            (
                SpanKind::Client,
                Some(SERVER.span_id),
                SERVER.child(SpanId([2; 8]))
            )
        );
    }

    #[test]
    fn a_failed_transaction_is_an_error() {
        assert_eq!(
            ended(TxOutcome::Failed).error.as_deref(),
            Some("the transaction failed")
        );
    }

    #[test]
    fn a_rolled_back_transaction_is_no_error() {
        assert_eq!(ended(TxOutcome::RolledBack).error, None);
    }

    #[test]
    fn a_transaction_that_sent_no_commit_has_no_commit_time() {
        let span = ended(TxOutcome::RolledBack);
        let keys: Vec<&str> = span.attributes.iter().map(|(k, _)| *k).collect();
        assert!(!keys.contains(&"muster.db.commit_ms"), "{keys:?}");
    }
}
