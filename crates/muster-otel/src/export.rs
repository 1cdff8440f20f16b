//! The queue and the export task.
//!
//! `record` takes a short lock on the queue (a `VecDeque` of at most `max_queue_size` spans)
//! and returns: a full queue drops the span and counts it. One task, spawned by `start`, wakes
//! when a batch's worth is queued or `schedule_delay` has passed, and sends what is queued in
//! batches of at most `max_export_batch_size`, one request at a time, each within `timeout`.
//! A failed request (no connection, timeout, a status other than 2xx) drops its batch and
//! counts it: there is no retry queue, so a dead or slow collector costs at most one batch in
//! flight beside the full queue. A 2xx answer is read up to [`MAX_RESPONSE_BYTES`]: the spans
//! its `partial_success.rejected_spans` names are counted as failed, the rest as exported. A
//! longer answer is not read further (its connection is closed) and the batch counts as
//! exported: the status is the collector's verdict, and a body that large is no OTLP answer.
//! Failures and rejections are logged at most once a minute.
//!
//! `shutdown` stops the task after it has sent everything queued, or at its deadline, when what
//! is left (queued, or the batch in flight) is counted as dropped or failed. Dropping the last
//! `Telemetry` handle without `shutdown` stops the task too, after it has sent what is queued
//! (nobody waits for that).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::header::CONTENT_TYPE;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_domain::trace::TraceId;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::proto::{self, Message};
use crate::span::{AttrValue, Bounded, FinishedSpan, key_value};

/// The instrumentation scope's name on every span.
pub const SCOPE: &str = "muster";

/// The most of a collector's answer that is read; an `ExportTraceServiceResponse` takes a few
/// bytes (a partial success's message a few more).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Failures are logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The exporter's handle: cheap to clone, shared by every request. When the last clone is
/// dropped, the export task sends what is queued and ends.
#[derive(Clone)]
pub struct Telemetry {
    handle: Arc<Handle>,
}

/// What the clones of one `Telemetry` share. The export task holds only `shared`, so this goes
/// with the last clone, and with it `stop`'s sender: the task reads the closed channel as a stop.
struct Handle {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("figures", &self.figures())
            .finish_non_exhaustive()
    }
}

/// The exporter's counters, for `/metrics`. Every sampled span recorded ends in exactly one of
/// exported, dropped or failed, or is still queued or in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportFigures {
    /// Spans the collector accepted (a partial success's rejected ones not included).
    pub spans_exported: u64,
    /// Spans not queued: the queue was full, or the exporter had shut down.
    pub spans_dropped: u64,
    /// Export requests that failed (each drops its batch).
    pub export_failures: u64,
    /// Spans in the failed requests' batches, and those a partial success rejected.
    pub spans_failed: u64,
    /// Spans waiting for export now.
    pub queue_len: usize,
}

struct Shared {
    config: Config,
    queue: Mutex<VecDeque<Bounded>>,
    batch_ready: Notify,
    closed: AtomicBool,
    in_flight: AtomicU64,
    exported: AtomicU64,
    dropped: AtomicU64,
    failures: AtomicU64,
    failed: AtomicU64,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Bounded>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Up to one batch off the queue's front.
    fn take_batch(&self) -> Vec<Bounded> {
        let mut queue = self.queue();
        let n = queue.len().min(self.config.max_export_batch_size);
        queue.drain(..n).collect()
    }
}

impl Telemetry {
    /// Starts the export task on the current tokio runtime (panics outside one).
    pub fn start(config: Config) -> Telemetry {
        let exporter = Exporter::new(&config);
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::with_capacity(config.max_queue_size)),
            config,
            batch_ready: Notify::new(),
            closed: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            exported: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let task = tokio::spawn(run(shared.clone(), exporter, stop_rx));
        Telemetry {
            handle: Arc::new(Handle {
                shared,
                stop,
                task: Mutex::new(Some(task)),
            }),
        }
    }

    /// The sampler's decision for a new span of `trace_id`: `parent_sampled` is the sampled
    /// flag of its parent (the caller's `traceparent`, an item's stored context), `None` for a
    /// root. The span's `context.sampled` carries the decision to [`Telemetry::record`].
    pub fn sample(&self, trace_id: TraceId, parent_sampled: Option<bool>) -> bool {
        self.handle
            .shared
            .config
            .sampler
            .sample(trace_id, parent_sampled)
    }

    /// The sampler's decision for a new root span.
    pub fn sample_root(&self, trace_id: TraceId) -> bool {
        self.sample(trace_id, None)
    }

    /// Queues a finished span for export. Never blocks (a short lock), never fails: an
    /// unsampled span is ignored; when the queue is full, or after shutdown, the span is
    /// dropped and counted.
    pub fn record(&self, span: FinishedSpan) {
        if !span.context.sampled {
            return;
        }
        let shared = &*self.handle.shared;
        if shared.closed.load(Ordering::Acquire) {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let span = Bounded::new(span);
        let mut queue = shared.queue();
        if queue.len() >= shared.config.max_queue_size {
            drop(queue);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queue.push_back(span);
        let len = queue.len();
        drop(queue);
        if len >= shared.config.max_export_batch_size {
            shared.batch_ready.notify_one();
        }
    }

    pub fn figures(&self) -> ExportFigures {
        let shared = &*self.handle.shared;
        ExportFigures {
            spans_exported: shared.exported.load(Ordering::Relaxed),
            spans_dropped: shared.dropped.load(Ordering::Relaxed),
            export_failures: shared.failures.load(Ordering::Relaxed),
            spans_failed: shared.failed.load(Ordering::Relaxed),
            queue_len: shared.queue().len(),
        }
    }

    /// Sends what is queued, then stops the export task; returns by `deadline` at the latest
    /// (what is not sent by then is counted as dropped or failed). Spans recorded afterwards
    /// are dropped. A second call returns at once.
    pub async fn shutdown(&self, deadline: Duration) {
        let shared = &*self.handle.shared;
        shared.closed.store(true, Ordering::Release);
        let task = self
            .handle
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(mut task) = task else {
            return;
        };
        self.handle.stop.send_replace(true);
        if tokio::time::timeout(deadline, &mut task).await.is_err() {
            task.abort();
            let _ = task.await;
            let lost = shared.in_flight.swap(0, Ordering::Relaxed);
            if lost > 0 {
                shared.failures.fetch_add(1, Ordering::Relaxed);
                shared.failed.fetch_add(lost, Ordering::Relaxed);
            }
        }
        let left = shared.queue().drain(..).count();
        shared.dropped.fetch_add(left as u64, Ordering::Relaxed);
    }
}

async fn run(shared: Arc<Shared>, mut exporter: Exporter, mut stop: watch::Receiver<bool>) {
    let delay = shared.config.schedule_delay;
    loop {
        let stopping = stop_requested(&mut stop);
        if !stopping {
            tokio::select! {
                () = shared.batch_ready.notified() => {}
                () = tokio::time::sleep(delay) => {}
                _ = stop.changed() => {}
            }
        }
        loop {
            let batch = shared.take_batch();
            if batch.is_empty() {
                break;
            }
            let n = batch.len() as u64;
            shared.in_flight.store(n, Ordering::Relaxed);
            let outcome = exporter.export(batch).await;
            shared.in_flight.store(0, Ordering::Relaxed);
            match outcome {
                Ok(rejected) => {
                    let rejected = rejected.min(n);
                    shared.exported.fetch_add(n - rejected, Ordering::Relaxed);
                    if rejected > 0 {
                        shared.failed.fetch_add(rejected, Ordering::Relaxed);
                        exporter.warn(ExportError::Rejected(rejected));
                    }
                }
                Err(error) => {
                    shared.failures.fetch_add(1, Ordering::Relaxed);
                    shared.failed.fetch_add(n, Ordering::Relaxed);
                    exporter.warn(error);
                }
            }
            if shared.queue().len() < shared.config.max_export_batch_size && !stopping {
                break;
            }
        }
        if stopping {
            return;
        }
    }
}

/// A stop was sent (`shutdown`), or every handle is gone (the sender went with the last one).
fn stop_requested(stop: &mut watch::Receiver<bool>) -> bool {
    *stop.borrow_and_update() || stop.has_changed().is_err()
}

/// Why one export request failed: a kind, never a header value or the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExportError {
    Connect,
    Transport,
    Timeout,
    Status(u16),
    /// Not a failed request: a 2xx whose partial success rejected this many spans.
    Rejected(u64),
}

impl ExportError {
    fn kind(self) -> &'static str {
        match self {
            ExportError::Connect => "connect",
            ExportError::Transport => "transport",
            ExportError::Timeout => "timeout",
            ExportError::Status(_) => "status",
            ExportError::Rejected(_) => "rejected",
        }
    }
}

/// What the task owns: the client, the request's fixed parts, the warning's pace.
struct Exporter {
    client: Client<HttpConnector, Full<Bytes>>,
    endpoint: hyper::Uri,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    timeout: Duration,
    resource: proto::Resource,
    last_warn: Option<Instant>,
    failures_unlogged: u64,
}

impl Exporter {
    fn new(config: &Config) -> Exporter {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build(connector);
        Exporter {
            client,
            endpoint: config.endpoint.clone(),
            headers: config.headers.clone(),
            timeout: config.timeout,
            resource: resource(config),
            last_warn: None,
            failures_unlogged: 0,
        }
    }

    /// Sends one batch; `Ok` holds how many of its spans a partial success rejected.
    async fn export(&mut self, batch: Vec<Bounded>) -> Result<u64, ExportError> {
        let request = proto::ExportTraceServiceRequest {
            resource_spans: vec![proto::ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![proto::ScopeSpans {
                    scope: Some(proto::InstrumentationScope {
                        name: SCOPE.to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        attributes: Vec::new(),
                        dropped_attributes_count: 0,
                    }),
                    spans: batch.into_iter().map(Bounded::into_proto).collect(),
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let mut builder =
            Request::post(self.endpoint.clone()).header(CONTENT_TYPE, "application/x-protobuf");
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        let body = Full::new(Bytes::from(request.encode_to_vec()));
        let Ok(request) = builder.body(body) else {
            return Err(ExportError::Transport);
        };
        let client = &self.client;
        let exchange = async move {
            let response = client.request(request).await.map_err(|e| {
                if e.is_connect() {
                    ExportError::Connect
                } else {
                    ExportError::Transport
                }
            })?;
            let status = response.status();
            // Read the answer to its end, so that the connection can serve the next batch; a
            // longer one than the cap is left unread (and its connection closed).
            let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await;
            if !status.is_success() {
                return Err(ExportError::Status(status.as_u16()));
            }
            Ok(body.map_or(0, |body| rejected_spans(&body.to_bytes())))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(ExportError::Timeout))
    }

    /// Logs a failure, at most once per [`WARN_EVERY`], with how many went unlogged since.
    fn warn(&mut self, error: ExportError) {
        self.failures_unlogged += 1;
        let now = Instant::now();
        if self
            .last_warn
            .is_some_and(|last| now.duration_since(last) < WARN_EVERY)
        {
            return;
        }
        let status = match error {
            ExportError::Status(code) => Some(code),
            _ => None,
        };
        let rejected_spans = match error {
            ExportError::Rejected(n) => Some(n),
            _ => None,
        };
        tracing::warn!(
            error.kind = error.kind(),
            http.response.status_code = status,
            rejected_spans,
            failed_exports = self.failures_unlogged,
            "trace export failed or spans were rejected; they are dropped (logged at most once a minute)"
        );
        self.last_warn = Some(now);
        self.failures_unlogged = 0;
    }
}

/// The spans a 2xx answer's partial success rejected; 0 for an empty answer, one that does not
/// decode, or a negative count.
fn rejected_spans(body: &[u8]) -> u64 {
    proto::ExportTraceServiceResponse::decode(body)
        .ok()
        .and_then(|response| response.partial_success)
        .map_or(0, |partial| {
            u64::try_from(partial.rejected_spans).unwrap_or(0)
        })
}

/// `service.name`, `service.version`, `service.instance.id` (when given), the
/// `OTEL_RESOURCE_ATTRIBUTES`, and the `telemetry.sdk.*` attributes the conventions ask for.
fn resource(config: &Config) -> proto::Resource {
    let mut attributes = vec![
        key_value(
            "service.name".to_owned(),
            AttrValue::from(config.service_name.clone()),
        ),
        key_value(
            "service.version".to_owned(),
            AttrValue::from(config.service_version.clone()),
        ),
    ];
    if let Some(id) = &config.service_instance_id {
        attributes.push(key_value(
            "service.instance.id".to_owned(),
            AttrValue::from(id.clone()),
        ));
    }
    for (key, value) in &config.resource_attributes {
        if !attributes.iter().any(|kv| &kv.key == key) {
            attributes.push(key_value(key.clone(), AttrValue::from(value.clone())));
        }
    }
    for (key, value) in [
        ("telemetry.sdk.name", "muster-otel"),
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ] {
        attributes.push(key_value(key.to_owned(), AttrValue::from(value)));
    }
    proto::Resource {
        attributes,
        dropped_attributes_count: 0,
    }
}
