//! Traces exported over OTLP: one item followed through three kinds and two workers is one
//! trace with the expected parents, the call's spans name what an operator needs (never a
//! token), an unsampled caller's work is not exported, a dead or stalled collector changes
//! nothing for the caller, a full export queue drops and counts, and sampled calls leave their
//! trace id as an exemplar on the latency histogram. The receiver decodes with
//! opentelemetry-proto's messages, as a real collector does.

use std::collections::HashMap;
use std::time::Duration;

use hyper::StatusCode;
use muster_domain::trace::{SpanId, TraceContext};
use muster_testkit::{OtlpMode, OtlpReceiver};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Attr;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::{Value, json};

use crate::harness::{TestApp, lease_path, token};
use crate::trace_context::post_traced;

/// A client's sampled span.
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// A client's span its own sampler left out.
const UNSAMPLED: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

/// The exporter's settings as the `OTEL_*` variables give them: `vars` over an endpoint and a
/// short schedule delay.
fn traces_to(endpoint: &str, vars: &[(&str, &str)]) -> muster_otel::Config {
    let mut all: HashMap<String, String> = HashMap::from([
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "50".into()),
    ]);
    all.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    muster_otel::Config::from_env(|v| all.get(v).cloned())
        .expect("valid OTEL settings")
        .expect("tracing on")
}

/// A server exporting every call's spans to `receiver`.
pub(crate) async fn traced_app(receiver: &OtlpReceiver) -> TestApp {
    traced(&receiver.endpoint(), &[]).await
}

/// Enqueues a normal item of `kind` as the operator, under the caller's `traceparent`.
async fn enqueue_under(app: &TestApp, traceparent: &str, kind: &str) -> crate::harness::Resp {
    let body = json!({"kind": kind, "priority": "normal", "payload": {}});
    post_traced(app, "/v1/items", "operator", Some(traceparent), body).await
}

/// A server exporting its spans to `endpoint`, with `vars` set as well.
async fn traced(endpoint: &str, vars: &[(&str, &str)]) -> TestApp {
    let config = traces_to(endpoint, vars);
    TestApp::spawn_with(move |s| s.telemetry = Some(config)).await
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn attr(span: &Span, key: &str) -> Option<Attr> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value)
}

/// The one span named `name`.
#[track_caller]
fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    let [one] = found[..] else {
        panic!(
            "{} spans named {name:?} among {:?}",
            found.len(),
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        )
    };
    one
}

/// The spans once every name of `names` was exported (as often as it is named), without the
/// Logbook transactions' spans (`traces_logbook.rs` has those).
async fn exported(receiver: &OtlpReceiver, names: &[&str]) -> Vec<Span> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let spans: Vec<Span> = receiver
            .spans()
            .into_iter()
            .filter(|s| s.name != "logbook transaction")
            .collect();
        let all_there = names.iter().all(|name| {
            let wanted = names.iter().filter(|n| *n == name).count();
            spans.iter().filter(|s| s.name == *name).count() >= wanted
        });
        if all_there {
            return spans;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not exported within 10 s: {names:?}; exported: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A worker's process span under a lease's `traceparent`, as the worker runtime opens it.
fn process_span(lease: &Value, n: u8) -> TraceContext {
    let leased = TraceContext::parse(lease["traceparent"].as_str().expect("a traceparent"))
        .expect("a valid traceparent");
    leased.child(SpanId([0xa0, 0, 0, 0, 0, 0, 0, n]))
}

/// Completes `lease` as `principal` from within `process`, naming `next`.
async fn complete_in(
    app: &TestApp,
    lease: &Value,
    principal: &str,
    process: TraceContext,
    next: Value,
) {
    let r = post_traced(
        app,
        &lease_path(lease, "complete"),
        principal,
        Some(&process.to_string()),
        json!({"result": {}, "next": next}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

#[tokio::test]
async fn one_item_through_three_kinds_and_two_workers_is_one_trace_step_under_step() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    let r = enqueue_under(&app, CALLER, "trawl").await;
    assert_eq!(r.status, StatusCode::CREATED);
    // Worker a runs trawl and assay, worker b sextant.
    let steps = [
        ("trawl", "a", json!([{"kind": "sextant", "payload": {}}])),
        ("sextant", "b", json!([{"kind": "assay", "payload": {}}])),
        ("assay", "a", json!([])),
    ];
    let mut processes = Vec::new();
    for (n, (kind, worker, next)) in steps.iter().enumerate() {
        let lease = app.lease(kind, worker).await.expect("a lease");
        let process = process_span(&lease, n as u8);
        complete_in(
            &app,
            &lease,
            &format!("worker:{kind}"),
            process,
            next.clone(),
        )
        .await;
        processes.push(process);
    }
    // The enqueue, and per step: the lease call, the queued time, the lease, the completion
    // call and the completion.
    let mut names = vec!["POST /v1/items".to_owned()];
    for (kind, _, _) in &steps {
        names.extend([
            "POST /v1/leases".to_owned(),
            format!("queued {kind}"),
            format!("lease {kind}"),
            "POST /v1/leases/{id}/complete".to_owned(),
            format!("complete {kind}"),
        ]);
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let spans = exported(&receiver, &names).await;
    let caller = TraceContext::parse(CALLER).unwrap();
    let trace = caller.trace_id.0.to_vec();
    let (ours, others): (Vec<Span>, Vec<Span>) =
        spans.into_iter().partition(|s| s.trace_id == trace);
    assert_eq!(
        ours.len(),
        13,
        "{:?}",
        ours.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let enqueue = named(&ours, "POST /v1/items");
    assert_eq!(enqueue.parent_span_id, caller.span_id.0.to_vec());
    assert_eq!(enqueue.kind, SpanKind::Server as i32);
    // Each step continues the one before: the first from the enqueue call, the others from the
    // completion that named them.
    let mut stored = enqueue.span_id.clone();
    for ((kind, _, _), process) in steps.iter().zip(&processes) {
        let queued = named(&ours, &format!("queued {kind}"));
        let lease = named(&ours, &format!("lease {kind}"));
        assert_eq!(queued.parent_span_id, stored, "queued {kind}");
        assert_eq!(lease.parent_span_id, stored, "lease {kind}");
        // The lease call itself is a trace of its own (the worker sent no traceparent), linked.
        let [link] = &lease.links[..] else {
            panic!("lease {kind}: links {:?}", lease.links)
        };
        let call = others
            .iter()
            .find(|s| s.span_id == link.span_id && s.trace_id == link.trace_id)
            .expect("the linked lease call was exported");
        assert_eq!(call.name, "POST /v1/leases");
        // The worker's process span is the lease span's child; its completion call is the
        // process span's child, and the completion the call's.
        assert_eq!(process.trace_id.0.to_vec(), trace);
        let completing = ours
            .iter()
            .find(|s| s.parent_span_id == process.span_id.0.to_vec())
            .expect("the completion call under the worker's span");
        assert_eq!(completing.name, "POST /v1/leases/{id}/complete");
        let complete = named(&ours, &format!("complete {kind}"));
        assert_eq!(
            complete.parent_span_id, completing.span_id,
            "complete {kind}"
        );
        stored = complete.span_id.clone();
    }
}

#[tokio::test]
async fn a_lease_hands_the_worker_the_span_of_the_lease_in_the_items_trace() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    enqueue_under(&app, CALLER, "trawl").await;
    let lease = app.lease("trawl", "w").await.expect("a lease");
    let handed = TraceContext::parse(lease["traceparent"].as_str().unwrap()).unwrap();
    let spans = exported(&receiver, &["lease trawl"]).await;
    let span = named(&spans, "lease trawl");
    assert_eq!(
        (hex(&span.trace_id), hex(&span.span_id)),
        (handed.trace_id.to_string(), handed.span_id.to_string())
    );
}

#[tokio::test]
async fn a_calls_span_names_its_route_status_and_principal_and_never_its_token() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    let lease = app.enqueue_and_lease("trawl").await;
    let r = app.complete(&lease, json!({"result": {}})).await;
    assert_eq!(r.status, StatusCode::OK);
    let spans = exported(
        &receiver,
        &["POST /v1/leases/{id}/complete", "complete trawl"],
    )
    .await;
    let call = named(&spans, "POST /v1/leases/{id}/complete");
    assert_eq!(
        (
            attr(call, "http.route"),
            attr(call, "http.request.method"),
            attr(call, "http.response.status_code"),
            attr(call, "muster.principal"),
        ),
        (
            Some(Attr::StringValue("/v1/leases/{id}/complete".into())),
            Some(Attr::StringValue("POST".into())),
            Some(Attr::IntValue(200)),
            Some(Attr::StringValue("worker:trawl".into())),
        )
    );
    let secret = token("worker:trawl");
    for span in &spans {
        for kv in &span.attributes {
            assert!(
                !format!("{:?}", kv.value).contains(&secret),
                "{}: {} carries the token",
                span.name,
                kv.key
            );
        }
    }
}

#[tokio::test]
async fn a_refused_call_is_an_error_span_only_when_the_server_failed() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    let r = app
        .post(
            "/v1/items",
            "operator",
            json!({"kind": "nope", "payload": {}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let spans = exported(&receiver, &["POST /v1/items"]).await;
    let call = named(&spans, "POST /v1/items");
    assert_eq!(
        (
            attr(call, "http.response.status_code"),
            attr(call, "muster.error.code"),
            call.status.as_ref().map_or(0, |s| s.code),
        ),
        (
            Some(Attr::IntValue(400)),
            Some(Attr::StringValue("E_BAD_REQUEST".into())),
            0, // UNSET: a refusal is the client's error, not the server's
        )
    );
}

#[tokio::test]
async fn an_unsampled_callers_work_is_not_exported_and_stays_unsampled_downstream() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    enqueue_under(&app, UNSAMPLED, "trawl").await;
    let lease = app.lease("trawl", "w").await.expect("a lease");
    let handed = TraceContext::parse(lease["traceparent"].as_str().unwrap()).unwrap();
    assert!(!handed.sampled);
    // A sampled call after them: spans are exported in the order they end, so once its span
    // is there, any span of the unsampled trace would be too.
    enqueue_under(&app, CALLER, "sextant").await;
    // The lease call is a root of its own, sampled (parentbased_always_on), and the sampled
    // enqueue; nothing of the unsampled trace.
    let spans = exported(&receiver, &["POST /v1/items"]).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["POST /v1/leases", "POST /v1/items"]);
    let unsampled = TraceContext::parse(UNSAMPLED).unwrap().trace_id.0.to_vec();
    assert_eq!(
        spans[1].trace_id,
        TraceContext::parse(CALLER).unwrap().trace_id.0.to_vec()
    );
    assert_ne!(spans[0].trace_id, unsampled);
}

#[tokio::test]
async fn a_digest_report_links_the_parked_items_it_replays() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    let lease = app.enqueue_and_lease("trawl").await;
    let item = TraceContext::parse(lease["traceparent"].as_str().unwrap()).unwrap();
    let r = app
        .needs_subtool(
            &lease,
            json!({"worker_digest": format!("sha256:{}", "a".repeat(64)),
                   "layout": {"signature": "s", "detail": {}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = app
        .put_digest("trawl", "shipkeeper", &format!("sha256:{}", "b".repeat(64)))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let spans = exported(&receiver, &["PUT /v1/workers/{kind}/digest"]).await;
    let report = named(&spans, "PUT /v1/workers/{kind}/digest");
    assert_eq!(
        attr(report, "muster.items.replayed"),
        Some(Attr::IntValue(1))
    );
    let [link] = &report.links[..] else {
        panic!("links {:?}", report.links)
    };
    assert_eq!(hex(&link.trace_id), item.trace_id.to_string());
}

#[tokio::test]
async fn a_dead_collector_changes_no_answer_and_its_failures_are_counted() {
    // An address nobody listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let app = traced(&dead, &[]).await;
    let lease = app.enqueue_and_lease("trawl").await;
    let r = app.complete(&lease, json!({"result": {}})).await;
    assert_eq!(
        (r.status, &r.body["state"]),
        (StatusCode::OK, &json!("done"))
    );
    let metrics = app
        .metrics_with_line(|l| {
            l.strip_prefix("muster_trace_export_failures_total ")
                .is_some_and(|v| v != "0")
        })
        .await;
    assert!(
        metrics.contains("muster_trace_spans_exported_total 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_stalled_collector_holds_no_call_and_a_full_queue_drops_and_counts() {
    let receiver = OtlpReceiver::start_in(OtlpMode::Stall).await;
    let app = traced(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
        ],
    )
    .await;
    // Each answered as always while the exporter waits a minute on a collector that never
    // answers: all ten well before that minute is out.
    tokio::time::timeout(Duration::from_secs(30), async {
        for _ in 0..10 {
            app.enqueue("trawl", "normal", json!({})).await;
        }
    })
    .await
    .expect("ten enqueues answered while the export stalls");
    let metrics = app
        .metrics_with_line(|l| {
            l.strip_prefix("muster_trace_spans_dropped_total ")
                .is_some_and(|v| v != "0")
        })
        .await;
    assert!(metrics.contains("muster_trace_queue_spans 4"), "{metrics}");
}

#[tokio::test]
async fn a_sampled_calls_trace_id_is_the_exemplar_of_its_latency() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    enqueue_under(&app, CALLER, "trawl").await;
    let metrics = app.metrics().await;
    let exemplar = "# {trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"}";
    let line = metrics
        .lines()
        .find(|l| l.contains(exemplar))
        .unwrap_or_else(|| panic!("no exemplar in {metrics}"));
    assert!(
        line.starts_with("muster_http_request_duration_seconds_bucket{")
            && line.contains("route=\"/v1/items\""),
        "{line}"
    );
}

#[tokio::test]
async fn without_a_collector_configured_no_trace_figure_or_exemplar_is_shown() {
    let app = TestApp::spawn().await;
    enqueue_under(&app, CALLER, "trawl").await;
    let metrics = app.metrics().await;
    assert_eq!(
        (
            metrics.contains("muster_trace_"),
            metrics.contains("trace_id=")
        ),
        (false, false)
    );
}

#[tokio::test]
async fn an_item_enqueued_during_a_long_poll_is_queued_until_its_grant_not_before_it_existed() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    let waiting = app.lease_waiting("trawl", "w", 10_000);
    let enqueue = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.enqueue("trawl", "normal", json!({})).await
    };
    let (lease, _) = tokio::join!(waiting, enqueue);
    assert_eq!(lease.status, StatusCode::OK);
    let spans = exported(
        &receiver,
        &["POST /v1/items", "queued trawl", "lease trawl"],
    )
    .await;
    let (enqueued, queued, leased) = (
        named(&spans, "POST /v1/items"),
        named(&spans, "queued trawl"),
        named(&spans, "lease trawl"),
    );
    assert!(
        queued.start_time_unix_nano >= enqueued.start_time_unix_nano,
        "queued from {} though enqueued at {}",
        queued.start_time_unix_nano,
        enqueued.start_time_unix_nano
    );
    assert!(
        leased.start_time_unix_nano >= enqueued.start_time_unix_nano,
        "the lease span covers the long poll's wait"
    );
    assert_eq!(queued.end_time_unix_nano, leased.start_time_unix_nano);
}

#[tokio::test]
async fn calls_without_an_authenticated_caller_leave_no_span() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    // A probe, a scrape, a wrong token with a sampled traceparent, an anonymous challenge.
    app.raw(hyper::Method::GET, "/healthz", None, vec![]).await;
    app.metrics().await;
    let refused = post_traced(&app, "/v1/items", "nobody", Some(CALLER), json!({})).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    app.raw(hyper::Method::POST, "/v1/edits/challenge", None, vec![])
        .await;
    // Then one authenticated call: spans leave in order, so once its span is there any of the
    // calls before would be too.
    app.enqueue("trawl", "normal", json!({})).await;
    let spans = exported(&receiver, &["POST /v1/items"]).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["POST /v1/items"]);
}

#[tokio::test]
async fn a_completion_answered_again_as_a_replay_exports_the_span_its_next_items_hang_from() {
    let receiver = OtlpReceiver::start().await;
    let app = traced(&receiver.endpoint(), &[]).await;
    let lease = app.enqueue_and_lease("trawl").await;
    let body = json!({"result": {}, "next": [{"kind": "sextant", "payload": {}}]});
    assert_eq!(
        app.complete(&lease, body.clone()).await.status,
        StatusCode::OK
    );
    let again = app.complete(&lease, body).await;
    assert_eq!(again.body["replayed"], json!(true));
    app.lease("sextant", "w")
        .await
        .expect("the next item's lease");
    let spans = exported(
        &receiver,
        &["complete trawl", "complete trawl", "queued sextant"],
    )
    .await;
    let completes: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "complete trawl")
        .collect();
    assert_eq!(completes[0].span_id, completes[1].span_id);
    assert_eq!(
        named(&spans, "queued sextant").parent_span_id,
        completes[0].span_id
    );
}
