//! The worker runtime's OpenTelemetry spans against a real Muster server, recorded by an SDK
//! tracer provider that this test process installs as the global one (every test here shares
//! it and reads only the spans of its own item's trace).

mod support;

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use muster_worker::{Lease, Outcome, Runner};
use opentelemetry::trace::{SpanKind, Status, Tracer};
use opentelemetry::{KeyValue, global};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};
use serde_json::{Value, json};
use support::{
    CountingProxy, GENEROUS, Gate, Running, TempDir, TestApp, eventually, quick_retry, token,
    trace_and_span,
};

/// Every span ended in this process so far.
#[derive(Debug, Clone, Default)]
struct Recorded(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Recorded {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        self.0.lock().unwrap().extend(batch);
        std::future::ready(Ok(()))
    }
}

/// The process's span recorder, installed with the global tracer provider on first use. It
/// samples every span: the test server marks its traces unsampled (its own tracing is off).
fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorded = Recorded::default();
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::AlwaysOn)
            .with_simple_exporter(recorded.clone())
            .build();
        global::set_tracer_provider(provider);
        recorded
    })
}

/// The ended spans of the trace `trace_id`, in the order they ended.
fn spans_of(trace_id: &str) -> Vec<SpanData> {
    let spans = recorded().0.lock().unwrap();
    spans
        .iter()
        .filter(|s| s.span_context.trace_id().to_string() == trace_id)
        .cloned()
        .collect()
}

/// The `traceparent` of a recorded span.
fn traceparent_of(span: &SpanData) -> String {
    let cx = &span.span_context;
    format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().to_u8()
    )
}

/// A runner of `trawl` on `url` spooling to `spool`.
fn runner(url: &str, spool: &TempDir) -> Runner {
    Runner::builder(url, &token("worker:trawl"), "trawl")
        .worker_id("trawl-traced")
        .spool_dir(&spool.0)
        .wait_ms(200)
        .retry(quick_retry(2))
        .build()
        .unwrap()
}

/// The author's handler of these tests: opens a span `fetch` of its own, works long enough for
/// a heartbeat or two of a 600 ms lease, and fails the item when its payload asks so.
async fn fetch(lease: Lease) -> Outcome {
    let span = global::tracer("author").start("fetch");
    drop(span);
    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    if lease.item.payload["fail"] == true {
        Outcome::fail("E_BROKEN", "the page would not parse")
    } else {
        Outcome::done(json!({}))
    }
}

/// One item with `payload` run by a runner (through a recording proxy) to its delivery.
struct OneRun {
    /// The lease answer's `traceparent`, as the handler got it.
    lease: String,
    /// The ended spans of the item's trace.
    spans: Vec<SpanData>,
    proxy: CountingProxy,
}

async fn run_one(payload: Value) -> OneRun {
    recorded();
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 600).await;
    let proxy = CountingProxy::start(app.addr).await;
    let spool = TempDir::new("spool");
    app.enqueue("trawl", "normal", payload).await;
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let s = seen.clone();
    let mut running = Running::start(runner(&proxy.url(), &spool), move |lease: Lease| {
        *s.lock().unwrap() = lease.traceparent().map(str::to_owned);
        fetch(lease)
    });
    eventually(GENEROUS, "delivered", || async {
        let s = running.snapshot();
        s.done + s.failed == 1
    })
    .await;
    running.stop().await;
    let lease = seen
        .lock()
        .unwrap()
        .clone()
        .expect("the lease's traceparent");
    let spans = spans_of(trace_and_span(&lease).0);
    OneRun {
        lease,
        spans,
        proxy,
    }
}

/// The `process trawl` span among `spans`, which holds exactly one.
fn process_span(spans: &[SpanData]) -> &SpanData {
    let process: Vec<&SpanData> = spans.iter().filter(|s| s.name == "process trawl").collect();
    assert_eq!(process.len(), 1, "{spans:#?}");
    process[0]
}

#[tokio::test]
async fn one_item_run_by_the_runtime_yields_one_process_span_under_the_lease_span() {
    let run = run_one(json!({})).await;
    let process = process_span(&run.spans);
    let (trace, lease_span) = trace_and_span(&run.lease);
    assert_eq!(process.span_context.trace_id().to_string(), trace);
    assert_eq!(process.parent_span_id.to_string(), lease_span);
    assert!(process.parent_span_is_remote);
    assert_eq!(process.span_kind, SpanKind::Consumer);
    assert_eq!(process.status, Status::Unset);
    assert_eq!(process.instrumentation_scope.name(), "muster-worker");
    let item_id = process
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "muster.item.id")
        .expect("muster.item.id")
        .value
        .clone();
    assert_eq!(
        process.attributes,
        vec![
            KeyValue::new("messaging.system", "muster"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", "trawl"),
            KeyValue::new("muster.item.id", item_id),
            KeyValue::new("muster.lease.fence", 1_i64),
            KeyValue::new("muster.attempt", 1_i64),
        ]
    );
}

#[tokio::test]
async fn the_heartbeats_and_the_completion_send_the_process_spans_context() {
    let run = run_one(json!({})).await;
    let sent = Some(traceparent_of(process_span(&run.spans)));
    let heartbeats = run.proxy.traceparents("heartbeat 200");
    assert!(!heartbeats.is_empty());
    assert!(heartbeats.iter().all(|h| *h == sent), "{heartbeats:?}");
    assert_eq!(
        run.proxy.traceparents("complete+lease_next 200"),
        vec![sent]
    );
}

#[tokio::test]
async fn the_handlers_own_span_nests_under_the_process_span() {
    let run = run_one(json!({})).await;
    let process = process_span(&run.spans);
    let fetch: Vec<&SpanData> = run.spans.iter().filter(|s| s.name == "fetch").collect();
    assert_eq!(fetch.len(), 1, "{:#?}", run.spans);
    assert_eq!(fetch[0].parent_span_id, process.span_context.span_id());
}

#[tokio::test]
async fn a_failing_handler_marks_its_process_span_failed() {
    let run = run_one(json!({"fail": true})).await;
    let process = process_span(&run.spans);
    assert_eq!(process.status, Status::error("the page would not parse"));
    assert!(
        process
            .attributes
            .contains(&KeyValue::new("error.type", "E_BROKEN")),
        "{:?}",
        process.attributes
    );
}

#[tokio::test]
async fn a_completion_left_in_the_spool_is_delivered_by_the_next_run_with_the_process_spans_context()
 {
    recorded();
    let app = TestApp::spawn().await;
    let proxy = CountingProxy::start(app.addr).await;
    let gate = Arc::new(Gate::closed(proxy.addr).await);
    gate.open();
    let spool = TempDir::new("spool");
    app.enqueue("trawl", "normal", json!({})).await;
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let (s, g) = (seen.clone(), gate.clone());
    // Muster becomes unreachable while the item is worked: its completion stays spooled.
    let mut first = Running::start(runner(&gate.url(), &spool), move |lease: Lease| {
        *s.lock().unwrap() = lease.traceparent().map(str::to_owned);
        g.close();
        async { Outcome::done(json!({})) }
    });
    eventually(GENEROUS, "undelivered", || async {
        first.snapshot().undelivered == 1
    })
    .await;
    first.stop().await;
    let lease = seen
        .lock()
        .unwrap()
        .clone()
        .expect("the lease's traceparent");
    let process = traceparent_of(process_span(&spans_of(trace_and_span(&lease).0)));

    gate.open();
    let mut second = Running::start(runner(&gate.url(), &spool), |_: Lease| async {
        Outcome::done(json!({}))
    });
    eventually(GENEROUS, "redelivered", || async {
        second.snapshot().redelivered == 1
    })
    .await;
    second.stop().await;
    assert_eq!(proxy.traceparents("complete 200"), vec![Some(process)]);
}
