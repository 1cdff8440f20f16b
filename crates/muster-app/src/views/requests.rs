//! What the use cases are asked: plain data, parsed and checked for shape by the transport;
//! the use cases check the rest.

use muster_domain::trace::{SpanId, TraceContext};
use muster_domain::{Kind, Priority};
use serde_json::Value;

/// A request to enqueue an item.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueRequest {
    pub kind: Kind,
    pub priority: Priority,
    pub payload: Value,
    pub idempotency_key: Option<String>,
    /// Delayed work: not leasable before this time (at most [`MAX_DELAY`] ahead).
    ///
    /// [`MAX_DELAY`]: crate::service::MAX_DELAY
    pub not_before: Option<time::OffsetDateTime>,
    /// The enqueue call's span, which the item keeps as its trace context (`None`: the item
    /// keeps none).
    pub trace: Option<TraceContext>,
}

/// One `next` step of a completion.
#[derive(Debug, Clone, PartialEq)]
pub struct NextStep {
    pub kind: Kind,
    pub payload: Value,
    pub priority: Option<Priority>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompleteRequest {
    pub result: Value,
    pub next: Vec<NextStep>,
    /// The worker that sends the completion, when it says: it must be the lease's worker
    /// (checked in the completion's own transaction).
    pub worker_id: Option<String>,
    /// The spans the transport drew for this completion (`None`: the next items keep the
    /// completed item's trace context as it is).
    pub trace: Option<CompletionSpans>,
}

/// The spans of one completion, drawn by the transport before the use case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionSpans {
    /// The call's server span.
    pub server: TraceContext,
    /// The completion's item span in the completed item's trace: the parent of its `next`
    /// items.
    pub item_span: SpanId,
}

impl CompletionSpans {
    /// The trace context the `next` items of a completed item that keeps `stored` keep: a
    /// child of the completion's item span, or, for an item that keeps none, the call's
    /// server span (the span that created them).
    pub fn next_items(
        spans: Option<CompletionSpans>,
        stored: Option<TraceContext>,
    ) -> Option<TraceContext> {
        match (spans, stored) {
            (Some(s), Some(item)) => Some(item.child(s.item_span)),
            (Some(s), None) => Some(s.server),
            (None, stored) => stored,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FailRequest {
    pub error: Value,
    pub retryable: bool,
    /// The worker that sends the failure, when it says: it must be the lease's worker.
    pub worker_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NeedsSubtoolRequest {
    pub worker_digest: String,
    pub layout: Value,
    /// The worker that parks the item, when it says: it must be the lease's worker.
    pub worker_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use muster_domain::trace::{SpanId, TraceContext};

    use super::CompletionSpans;

    const ITEM: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const SERVER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

    fn spans() -> Option<CompletionSpans> {
        Some(CompletionSpans {
            server: TraceContext::parse(SERVER).unwrap(),
            item_span: SpanId([7; 8]),
        })
    }

    #[test]
    fn next_items_are_children_of_the_completions_item_span_in_the_items_trace() {
        let next = CompletionSpans::next_items(spans(), TraceContext::parse(ITEM)).unwrap();
        assert_eq!(
            next.to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0707070707070707-01"
        );
    }

    #[test]
    fn next_items_of_an_item_without_a_trace_keep_the_calls_server_span() {
        let next = CompletionSpans::next_items(spans(), None).unwrap();
        assert_eq!(next.to_string(), SERVER);
    }

    #[test]
    fn without_spans_from_the_transport_next_items_keep_the_items_context() {
        assert_eq!(
            CompletionSpans::next_items(None, TraceContext::parse(ITEM)),
            TraceContext::parse(ITEM)
        );
        assert_eq!(CompletionSpans::next_items(None, None), None);
    }
}
