//! `GET /metrics`: Prometheus exposition (OpenMetrics text) through prometheus-client.
//!
//! Request counts and latency come from a middleware on every route; what the use cases did,
//! queue depths, subscribers, pool usage and the age of the oldest queued item are read at
//! scrape time (a collector over a snapshot, gathered by the `/metrics` handler in
//! `handlers::ops`), so nothing is kept twice.

use std::collections::HashSet;
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use muster_app::auth::ReviewFigures;
use muster_app::feed::Depth;
use muster_app::ports::PoolStatus;
use muster_app::service::RetentionFigures;
use muster_domain::Kind;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;

use muster_otel::{ExportFigures, Telemetry};

use crate::error::{ErrorCode, InternalDetail};

type Labels = Vec<(&'static str, String)>;

/// A latency histogram whose buckets keep, as exemplar, the trace of a sampled request.
type Latency = HistogramWithExemplars<TraceLabel>;

fn latency_histogram() -> Latency {
    // 0.5 ms .. ~8 s
    HistogramWithExemplars::new(exponential_buckets(0.0005, 2.0, 15))
}

/// An exemplar's label: the trace a sampled request's span was exported in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TraceLabel {
    trace_id: String,
}

/// Metrics the transport keeps itself.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    requests: Family<AnswerLabels, Counter>,
    latency: Family<RouteLabels, Latency, fn() -> Latency>,
    /// What the probes and the scrape read from Logbook, refreshed at most once per interval.
    pub(crate) db: std::sync::Arc<DbGauges>,
    /// The memory budget's figures (its shares and refusals), reported at every scrape.
    memory: Option<std::sync::Arc<dyn Collector>>,
    /// The span exporter, when tracing is on (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    telemetry: Option<Telemetry>,
}

impl HttpMetrics {
    /// Metrics that report `memory`'s figures at every scrape (the server's budget).
    pub fn with_memory(self, memory: impl Collector) -> Self {
        HttpMetrics {
            memory: Some(std::sync::Arc::new(memory)),
            ..self
        }
    }

    /// Metrics that record every call's spans with `telemetry` and report its figures.
    pub fn with_telemetry(self, telemetry: Option<Telemetry>) -> Self {
        HttpMetrics { telemetry, ..self }
    }

    /// The span exporter, when tracing is on.
    pub fn telemetry(&self) -> Option<&Telemetry> {
        self.telemetry.as_ref()
    }
}

/// A collector kept across scrapes, registered for one.
#[derive(Debug)]
struct Shared(std::sync::Arc<dyn Collector>);

impl Collector for Shared {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

pub(crate) use muster_app::service::OldestAges;

/// The figures `/readyz` and `/metrics` need from Logbook ([`crate::refreshed`]): readiness
/// at most once a second, the oldest queued items (one statement over every kind) at most
/// once every 5 s.
#[derive(Debug)]
pub(crate) struct DbGauges {
    pub(crate) ready: crate::refreshed::Refreshed<Result<(), muster_app::ports::NotReady>>,
    /// The last readiness seen, so that only a change is logged.
    pub(crate) was_ready: std::sync::atomic::AtomicBool,
    /// The ages when read, and when that was.
    pub(crate) oldest: crate::refreshed::Refreshed<(Instant, OldestAges)>,
}

impl Default for DbGauges {
    fn default() -> Self {
        DbGauges {
            ready: crate::refreshed::Refreshed::new(std::time::Duration::from_secs(1)),
            was_ready: std::sync::atomic::AtomicBool::new(true),
            oldest: crate::refreshed::Refreshed::new(std::time::Duration::from_secs(5)),
        }
    }
}

impl Default for HttpMetrics {
    fn default() -> Self {
        HttpMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            db: Default::default(),
            memory: None,
            telemetry: None,
        }
    }
}

/// Middleware: gives every request an id (`X-Request-Id`, the caller's if it sent a sane one),
/// logs the answer under a span carrying that id (never a token or a client address; see
/// [`log_answer`] for the level), counts every answer by route, method, status and error code,
/// and times it.
pub async fn track(State(m): State<HttpMetrics>, mut req: Request<Body>, next: Next) -> Response {
    use tracing::Instrument;
    // The call's server span: its ids drawn now, for the handlers to hand on; sampled as the
    // caller's when tracing is off (its flag handed on), as the sampler says when it is on.
    let incoming = crate::trace::RequestTrace::incoming(req.headers());
    let mut trace = crate::trace::RequestTrace::start(incoming, false);
    let wall_start = std::time::SystemTime::now();
    let caller = m.telemetry.as_ref().map(|t| {
        trace.server.sampled = t.sample(trace.server.trace_id, incoming.map(|c| c.sampled));
        let slot = crate::spans::CallerSlot::default();
        req.extensions_mut().insert(slot.clone());
        slot
    });
    req.extensions_mut().insert(trace);
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| intern_route(p.as_str()));
    let method = method_label(req.method());
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let span = tracing::info_span!("request", id = %request_id, method = %method, route = %route);
    let started = Instant::now();
    let class = RouteClass::of(method, route);
    let mut unanswered = Unanswered {
        span: span.clone(),
        started,
        armed: true,
        class,
    };
    // Traced: the call's Logbook transactions are gathered for its spans.
    let (mut res, logbook) = match m.telemetry {
        Some(_) => {
            let call = muster_app::telemetry::CallTrace {
                server: trace.server,
                draw: crate::trace::span_id,
            };
            let run = next.run(req).instrument(span.clone());
            let (res, gathered) = muster_app::telemetry::scope(call, run).await;
            (res, Some(gathered))
        }
        None => (next.run(req).instrument(span.clone()).await, None),
    };
    unanswered.armed = false;
    let elapsed = started.elapsed();
    let code = res
        .extensions()
        .get::<ErrorCode>()
        .map(|c| c.as_str())
        .unwrap_or("");
    let status = res.status().as_u16();
    if let Some(InternalDetail(detail)) = res.extensions().get::<InternalDetail>() {
        span.in_scope(|| tracing::error!(error = %detail, "internal error"));
    }
    span.in_scope(|| log_answer(status, code, elapsed, class));
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        res.headers_mut().insert("x-request-id", v);
    }
    m.requests
        .get_or_create(&AnswerLabels {
            route,
            method,
            status,
            code,
        })
        .inc();
    // Only an authenticated caller's calls are traced: probes, scrapes, anonymous edits and
    // refused tokens leave no span, so nobody without a token can fill the export queue or
    // choose a trace to write into.
    let authenticated = caller.as_ref().is_some_and(|slot| slot.get().is_some());
    let traced = m.telemetry.as_ref().filter(|_| authenticated);
    if let (Some(telemetry), Some(logbook)) = (traced, &logbook) {
        let call = crate::spans::Call {
            trace,
            method,
            route,
            status,
            code,
            request_id: &request_id,
            caller: caller.as_ref(),
            start: wall_start,
            end: std::time::SystemTime::now(),
            logbook,
        };
        crate::spans::record(telemetry, &call, res.extensions());
    }
    // The live feed's duration is how long a client watched, not a latency.
    if route != "/v1/events" {
        // A sampled call's trace, for a dashboard to open from its latency.
        let exemplar = (traced.is_some() && trace.server.sampled).then(|| TraceLabel {
            trace_id: trace.server.trace_id.to_string(),
        });
        m.latency
            .get_or_create(&RouteLabels { route, method })
            .observe(elapsed.as_secs_f64(), exemplar, None);
    }
    res
}

/// The labels of `muster_http_requests_total`. Every value is `'static` or a number, so
/// counting an answer allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AnswerLabels {
    route: &'static str,
    method: &'static str,
    status: u16,
    code: &'static str,
}

/// The labels of `muster_http_request_duration_seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
    method: &'static str,
}

/// The method as a label value. Methods outside HTTP's own set are "other": a client chooses
/// them freely, and a series per invented method would grow the server's memory without bound.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

/// The route pattern as a `'static` label value. The patterns are the router's own (a matched
/// path is a pattern, never the request's path), so the set is small and fixed; each is leaked
/// once, the first time it answers.
fn intern_route(pattern: &str) -> &'static str {
    static ROUTES: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    let routes = ROUTES.get_or_init(Default::default);
    if let Some(known) = routes
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(pattern)
    {
        return known;
    }
    let mut routes = routes.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = routes.get(pattern) {
        return known;
    }
    let leaked: &'static str = Box::leak(pattern.to_owned().into_boxed_str());
    routes.insert(leaked);
    leaked
}

/// Logs, under the request's span, a request whose future was dropped before it produced an
/// answer: its client went away, or the request timeout (an outer layer, which then answers
/// 503 itself and warns) cut it. Such a request is not counted in `muster_http_requests_total`.
/// At info, except on anonymous routes (debug): a stranger can hang up as often as they like.
struct Unanswered {
    span: tracing::Span,
    started: Instant,
    armed: bool,
    class: RouteClass,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let latency_ms = self.started.elapsed().as_secs_f64() * 1e3;
        let message = "no answer: the client went away or the request timed out";
        self.span.in_scope(|| {
            if self.class == RouteClass::Anonymous {
                tracing::debug!(latency_ms, message);
            } else {
                tracing::info!(latency_ms, message);
            }
        });
    }
}

/// What a route is, for the level of its answer's log line. (A path that matches no route
/// never reaches this middleware: the router's fallback answers it 404 outside the route
/// layer, so scanners are neither logged nor counted.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RouteClass {
    /// Anyone on the internet may call it: edit proposals and their challenges.
    Anonymous,
    /// A rare change an operator or Shipkeeper makes: a retry, an edit decision, a new
    /// worker image digest.
    Control,
    /// Answers when there is something to say, so its latency is not slowness: the lease
    /// long poll and the live feed.
    Waits,
    /// Everything else, the worker fleet's steady traffic above all.
    Other,
}

impl RouteClass {
    fn of(method: &str, route: &str) -> RouteClass {
        match (method, route) {
            ("POST", "/v1/edits" | "/v1/edits/challenge") => RouteClass::Anonymous,
            ("POST", "/v1/items/{id}/retry" | "/v1/edits/{id}/decision")
            | ("PUT", "/v1/workers/{kind}/digest") => RouteClass::Control,
            ("POST", "/v1/leases") | ("GET", "/v1/events") => RouteClass::Waits,
            _ => RouteClass::Other,
        }
    }
}

/// A success slower than this is logged at info (long polls and the feed aside).
const SLOW: std::time::Duration = std::time::Duration::from_secs(1);

/// One line per answer, at a level that follows the outcome:
/// - a server-side failure (5xx) is a warning;
/// - a refused request (4xx) is info, except a refusal of an anonymous request, a missing or
///   wrong token (401) and a method the route does not have (405), which are debug: whoever
///   sends those decides how many there are, and a log flood would be theirs to cause (the
///   metrics count them by code);
/// - a success is debug, except a control action (info: it changed what the fleet does) and a
///   success slower than [`SLOW`] (info, with its request id, for whoever chases a slow call).
///
/// Successes are the worker fleet's steady traffic: at 64 workers, logging each at info wrote
/// about 6,000 lines and 2.7 MB a second (a JSON encoding and a write(2) per answer), while the
/// metrics count and time every answer anyway. `RUST_LOG=info,muster_http::metrics=debug`
/// brings back every line.
fn log_answer(status: u16, code: &str, elapsed: std::time::Duration, class: RouteClass) {
    let latency_ms = elapsed.as_secs_f64() * 1e3;
    let refused_quietly = matches!(status, 401 | 405) || class == RouteClass::Anonymous;
    let notable_success =
        class == RouteClass::Control || (elapsed >= SLOW && !matches!(class, RouteClass::Waits));
    match status {
        500.. => tracing::warn!(status, code, latency_ms, "answered"),
        400..=499 if !refused_quietly => tracing::info!(status, code, latency_ms, "answered"),
        400..=499 => tracing::debug!(status, code, latency_ms, "answered"),
        _ if notable_success => tracing::info!(status, code, latency_ms, "answered"),
        _ => tracing::debug!(status, code, latency_ms, "answered"),
    }
}

/// A counter per kind: name, help, values.
pub(crate) type PerKindCounter = (&'static str, &'static str, Vec<(Kind, u64)>);

/// Figures read at scrape time.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) counters: Vec<PerKindCounter>,
    pub(crate) depths: Vec<Depth>,
    pub(crate) subscribers: u64,
    pub(crate) pool: PoolStatus,
    pub(crate) intake: Vec<(&'static str, u64)>,
    pub(crate) feed_gap_wait: f64,
    pub(crate) oldest: OldestAges,
    pub(crate) body_budget_used: u64,
    /// Whether `/readyz` would answer 200 now.
    pub(crate) ready: bool,
    /// Whether the Kubernetes API server answered its last probe (`None`: not used).
    pub(crate) api_server_reachable: Option<bool>,
    /// TokenReviews sent, and those that got no answer from the API server (0 with a token
    /// file).
    pub(crate) tokenreviews: (u64, u64),
    /// The TokenReview admission's figures (`None` with a token file).
    pub(crate) review_figures: Option<ReviewFigures>,
    /// Retention's housekeeping on this replica.
    pub(crate) retention: RetentionFigures,
}

fn kind_label(k: Kind) -> Labels {
    vec![("kind", k.as_str().to_owned())]
}

/// Encodes one labelled family of constant values.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: prometheus_client::metrics::MetricType,
    rows: impl IntoIterator<Item = (Labels, M)>,
) -> Result<(), std::fmt::Error> {
    let mut fam = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in rows {
        value.encode(fam.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Encodes one metric without labels per row `(name, help, value)`, the value made a metric
/// by `metric` (`ConstCounter::new`, `ConstGauge::new`).
fn unlabelled<V, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    metric: fn(V) -> M,
    rows: impl IntoIterator<Item = (&'static str, &'static str, V)>,
) -> Result<(), std::fmt::Error> {
    for (name, help, value) in rows {
        let m = metric(value);
        m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType::{Counter, Gauge};
        for (name, help, values) in &self.counters {
            let rows = values
                .iter()
                .map(|(k, v)| (kind_label(*k), ConstCounter::new(*v)));
            family(&mut encoder, name, help, Counter, rows)?;
        }
        let depths = self.depths.iter().map(|d| {
            let labels: Labels = vec![
                ("kind", d.kind.as_str().to_owned()),
                ("priority", d.priority.as_str().to_owned()),
                ("state", d.state.as_str().to_owned()),
            ];
            (labels, ConstGauge::new(d.count))
        });
        family(
            &mut encoder,
            "muster_queue_depth",
            "Items per kind, priority and state",
            Gauge,
            depths,
        )?;
        let oldest = self.oldest.queued.iter().map(|(kind, priority, age)| {
            let labels: Labels = vec![
                ("kind", kind.as_str().to_owned()),
                ("priority", priority.as_str().to_owned()),
            ];
            (labels, ConstGauge::new(*age))
        });
        family(
            &mut encoder,
            "muster_oldest_queued_age_seconds",
            "Age of the oldest queued item per kind and priority",
            Gauge,
            oldest,
        )?;
        let per_kind = |v: &[(Kind, f64)]| -> Vec<(Labels, ConstGauge<f64>)> {
            v.iter()
                .map(|(kind, s)| {
                    (
                        vec![("kind", kind.as_str().to_owned())],
                        ConstGauge::new(*s),
                    )
                })
                .collect()
        };
        family(
            &mut encoder,
            "muster_oldest_lease_age_seconds",
            "How long the oldest lease out of each kind has run (kinds with leases out)",
            Gauge,
            per_kind(&self.oldest.leases),
        )?;
        family(
            &mut encoder,
            "muster_lease_max_run_seconds",
            "Each kind's maximum run time: a lease this old is no longer extended",
            Gauge,
            per_kind(&self.oldest.max_run),
        )?;
        let intake = self.intake.iter().map(|(outcome, n)| {
            (
                vec![("outcome", (*outcome).to_owned())],
                ConstCounter::new(*n),
            )
        });
        family(
            &mut encoder,
            "muster_edit_submissions",
            "Edit submissions by outcome: accepted, or the layer that refused them",
            Counter,
            intake,
        )?;
        unlabelled(
            &mut encoder,
            ConstGauge::new,
            [(
                "muster_feed_gap_wait_seconds",
                "How long the live feed has been held back waiting for an open transaction (0 when not)",
                self.feed_gap_wait,
            )],
        )?;
        let reachable = self.api_server_reachable.map(|reachable| {
            (
                "muster_api_server_reachable",
                "1 while the Kubernetes API server answered its last probe (every 30 s), else 0",
                i64::from(reachable),
            )
        });
        unlabelled(&mut encoder, ConstGauge::new, reachable)?;
        let (reviews, failures) = self.tokenreviews;
        let tokenreviews = [
            (
                "muster_tokenreview_reviews",
                "TokenReviews sent to the Kubernetes API server (cache misses)",
                reviews,
            ),
            (
                "muster_tokenreview_failures",
                "TokenReviews that got no answer: their calls were refused with 503",
                failures,
            ),
        ];
        unlabelled(&mut encoder, ConstCounter::new, tokenreviews)?;
        if let Some(figures) = &self.review_figures {
            encode_review_figures(&mut encoder, figures)?;
        }
        encode_retention(&mut encoder, &self.retention)?;
        let gauges: [(&str, &str, i64); 7] = [
            (
                "muster_ready",
                "1 while this replica is ready (GET /readyz answers 200), else 0",
                i64::from(self.ready),
            ),
            (
                "muster_sse_subscribers",
                "Open live-feed subscriptions",
                self.subscribers as i64,
            ),
            (
                "muster_db_pool_connections",
                "Open Logbook connections",
                self.pool.open as i64,
            ),
            (
                "muster_db_pool_idle",
                "Idle Logbook connections",
                self.pool.idle as i64,
            ),
            (
                "muster_db_pool_max",
                "Logbook connection limit",
                self.pool.max as i64,
            ),
            (
                "muster_db_pool_waiting",
                "Requests waiting for a Logbook connection",
                self.pool.waiting as i64,
            ),
            (
                "muster_http_body_budget_used_bytes",
                "Bytes of the body budget (--inflight-body-mib) reserved by large request bodies in flight",
                self.body_budget_used as i64,
            ),
        ];
        unlabelled(&mut encoder, ConstGauge::new, gauges)
    }
}

/// The TokenReview admission's counters and in-flight gauge.
fn encode_review_figures(
    encoder: &mut DescriptorEncoder,
    f: &ReviewFigures,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::MetricType::Counter;
    let reviews = f.reviews.iter().map(|&(class, outcome, n)| {
        let labels = vec![("class", class.to_owned()), ("outcome", outcome.to_owned())];
        (labels, ConstCounter::new(n))
    });
    family(
        encoder,
        "muster_tokenreview_answers",
        "TokenReviews sent, by class (known: a token with a positive answer, re-reviewed; unknown) and outcome (positive, negative, unavailable)",
        Counter,
        reviews,
    )?;
    let rejected = f
        .rejected
        .iter()
        .map(|&(reason, n)| (vec![("reason", reason.to_owned())], ConstCounter::new(n)));
    family(
        encoder,
        "muster_tokenreview_rejected",
        "Reviews of unknown tokens refused unsent with 503, by reason (peer_rate, global_rate, queue)",
        Counter,
        rejected,
    )?;
    unlabelled(
        encoder,
        ConstCounter::new,
        [
            (
                "muster_tokenreview_served_stale",
                "Calls let in on a positive answer past its time to live while the API server was slow or down",
                f.served_stale,
            ),
            (
                "muster_tokenreview_refreshes",
                "Reviews of known tokens started ahead of their answer's expiry",
                f.refreshes,
            ),
        ],
    )?;
    unlabelled(
        encoder,
        ConstGauge::new,
        [(
            "muster_tokenreview_in_flight",
            "TokenReviews under way now",
            f.in_flight as i64,
        )],
    )
}

/// Retention's counters and gauges (docs/operations.md, "Retention").
fn encode_retention(
    encoder: &mut DescriptorEncoder,
    r: &RetentionFigures,
) -> Result<(), std::fmt::Error> {
    unlabelled(
        encoder,
        ConstCounter::new,
        [
            (
                "muster_retention_items_removed",
                "Finished items this replica's retention passes removed from the working tables",
                r.items_removed,
            ),
            (
                "muster_retention_leases_removed",
                "Leases removed with those items",
                r.leases_removed,
            ),
            (
                "muster_retention_edit_texts_removed",
                "Texts of rejected edit proposals removed",
                r.edit_texts_removed,
            ),
        ],
    )?;
    let last_pass = r
        .last_pass
        .map_or(0.0, |t| t.unix_timestamp_nanos() as f64 / 1e9);
    unlabelled(
        encoder,
        ConstGauge::new,
        [
            (
                "muster_retention_last_pass_timestamp_seconds",
                "When this replica's last complete retention pass ended (Unix time; 0: none yet)",
                last_pass,
            ),
            (
                "muster_retention_oldest_finished_age_seconds",
                "At the last pass: how long ago the oldest-created finished item of any kind, priority and state last changed",
                r.oldest_finished_age,
            ),
            (
                "muster_retention_period_seconds",
                "The retention period (--retain-days)",
                r.retain_seconds,
            ),
        ],
    )
}

/// The span exporter's figures at a scrape (tracing on only).
#[derive(Debug)]
struct TraceFigures(ExportFigures);

impl Collector for TraceFigures {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let f = self.0;
        unlabelled(
            &mut encoder,
            ConstCounter::new,
            [
                (
                    "muster_trace_spans_exported",
                    "Spans the trace collector accepted",
                    f.spans_exported,
                ),
                (
                    "muster_trace_spans_dropped",
                    "Spans dropped before export: the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full",
                    f.spans_dropped,
                ),
                (
                    "muster_trace_export_failures",
                    "Span exports the collector refused or did not answer in time (each drops its batch)",
                    f.export_failures,
                ),
                (
                    "muster_trace_spans_failed",
                    "Spans in the failed exports' batches",
                    f.spans_failed,
                ),
            ],
        )?;
        unlabelled(
            &mut encoder,
            ConstGauge::new,
            [(
                "muster_trace_queue_spans",
                "Spans waiting for export",
                f.queue_len,
            )],
        )
    }
}

/// The exposition of one scrape: the transport's own metrics and the figures in `snapshot`.
pub(crate) fn exposition(
    http: &HttpMetrics,
    body_budget_refused: &Counter,
    snapshot: Snapshot,
) -> Response {
    let mut registry = Registry::default();
    registry.register(
        "muster_http_requests",
        "HTTP answers by route, method, status and error code",
        http.requests.clone(),
    );
    registry.register(
        "muster_http_request_duration_seconds",
        "HTTP request latency by route",
        http.latency.clone(),
    );
    registry.register(
        "muster_http_body_budget_refusals",
        "Requests answered 503 because the request bodies in flight filled the body budget \
         (--inflight-body-mib) for longer than the wait",
        body_budget_refused.clone(),
    );
    registry.register_collector(Box::new(snapshot));
    if let Some(memory) = &http.memory {
        registry.register_collector(Box::new(Shared(memory.clone())));
    }
    if let Some(telemetry) = &http.telemetry {
        registry.register_collector(Box::new(TraceFigures(telemetry.figures())));
    }
    let mut body = String::new();
    if prometheus_client::encoding::text::encode(&mut body, &registry).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "metrics encoding failed").into_response();
    }
    let mut res = (StatusCode::OK, body).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    res
}

#[cfg(test)]
mod tests;
