//! The span exporter: finished spans, queued without blocking the caller, sent in batches to an
//! OpenTelemetry collector over OTLP/HTTP protobuf (`POST <endpoint>/v1/traces`), configured by
//! the standard `OTEL_*` variables ([`Config::from_env`]).
//!
//! ```text
//! let telemetry = Config::from_env(|v| std::env::var(v).ok())?.map(Telemetry::start);
//! // at request start: ids drawn, sampled = telemetry.sample(trace_id, parent flag)
//! // at request end:   telemetry.record(FinishedSpan { .. })
//! // at drain:         telemetry.shutdown(deadline).await
//! ```
//!
//! Why not `opentelemetry-otlp` and the SDK's `BatchSpanProcessor`: its HTTP transport wants
//! reqwest (a second HTTP client beside hyper), its queue does not expose a drop count for
//! `/metrics`, and Muster's spans are finished with ids drawn before the work ran (the
//! middleware learns an item's trace only after the transaction), so the SDK's `Tracer` would
//! only be a struct builder. Nor `opentelemetry-proto` for the messages: it always pulls the SDK.
//! So the few OTLP messages are declared here (`proto`, prost; the tests decode what is sent with
//! opentelemetry-proto's generated messages), the queue is a bounded `VecDeque` behind a short
//! lock, and the transport is the workspace's hyper client.
//!
//! Bounds: at most `OTEL_BSP_MAX_QUEUE_SIZE` spans queued (a full queue drops and counts);
//! attribute string values, names and error messages cut at [`MAX_VALUE_BYTES`];
//! [`MAX_ATTRIBUTES`], [`MAX_LINKS`] and [`MAX_EVENTS`] per span; one export request at a time,
//! within `OTEL_EXPORTER_OTLP_TIMEOUT`, of whose answer at most [`MAX_RESPONSE_BYTES`] are read;
//! a failed batch is dropped and counted, never retried.
//! Only `http://` endpoints: TLS to a collector is left to an agent on the node or in the pod.

mod config;
mod export;
mod proto;
mod span;

pub use config::{Config, ConfigError, RootSampler, Sampler};
pub use export::{ExportFigures, MAX_RESPONSE_BYTES, SCOPE, Telemetry};
pub use muster_domain::trace::{SpanId, TraceContext, TraceId};
pub use span::{
    AttrValue, FinishedSpan, MAX_ATTRIBUTES, MAX_EVENTS, MAX_LINKS, MAX_VALUE_BYTES, SpanEvent,
    SpanKind,
};
