//! Trace context travels with the work: `POST /v1/items` takes a W3C `traceparent`, the item
//! keeps it, each lease answer hands the worker a `traceparent` in the item's trace, `next`
//! items continue the completing item's trace, and replayed items keep theirs.

use hyper::{Method, Request, StatusCode};
use muster_domain::trace::TraceContext;
use serde_json::{Value, json};

use crate::harness::{Resp, TestApp, lease_path, token};

/// A caller's span: sampled.
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// Another caller's span: not sampled.
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

/// `POST path` as `principal` with `body`, sending `traceparent` when given.
pub(crate) async fn post_traced(
    app: &TestApp,
    path: &str,
    principal: &str,
    traceparent: Option<&str>,
    body: Value,
) -> Resp {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(format!("{}{path}", app.url()))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", token(principal)));
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    app.send(req, serde_json::to_vec(&body).unwrap()).await
}

/// `POST /v1/items` as the operator with `body`, sending `traceparent` when given.
async fn enqueue_traced(app: &TestApp, traceparent: Option<&str>, body: Value) -> Resp {
    post_traced(app, "/v1/items", "operator", traceparent, body).await
}

/// Enqueues a normal trawl item with `payload` under `traceparent`; its id.
async fn enqueue_trawl(app: &TestApp, traceparent: Option<&str>, payload: Value) -> String {
    let r = enqueue_traced(
        app,
        traceparent,
        json!({"kind": "trawl", "priority": "normal", "payload": payload}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["item_id"].as_str().unwrap().to_owned()
}

/// Enqueues a trawl item and removes its trace context, as for an item enqueued before items
/// kept one; its id.
async fn untraced_trawl(app: &TestApp) -> String {
    let id = enqueue_trawl(app, Some(CALLER), json!({})).await;
    app.execute(&format!(
        "UPDATE core.items SET trace = NULL WHERE id = '{id}'"
    ))
    .await;
    id
}

/// The `traceparent` of a lease answer, read.
#[track_caller]
fn traceparent(lease: &Value) -> TraceContext {
    let tp = lease["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent in {lease}"));
    TraceContext::parse(tp).unwrap_or_else(|| panic!("not a valid traceparent: {tp}"))
}

/// The `traceparent` of a trawl lease taken now.
async fn leased_trace(app: &TestApp) -> TraceContext {
    traceparent(&app.lease("trawl", "w").await.unwrap())
}

fn caller() -> TraceContext {
    TraceContext::parse(CALLER).unwrap()
}

/// The trace context item `id` keeps in Logbook.
async fn stored(app: &TestApp, id: &str) -> TraceContext {
    let hex = app
        .scalar_text(&format!(
            "SELECT encode(trace, 'hex') FROM core.items WHERE id = '{id}'"
        ))
        .await;
    let (trace, rest) = hex.split_at(32);
    let (span, flags) = rest.split_at(16);
    TraceContext::parse(&format!("00-{trace}-{span}-{flags}")).unwrap()
}

#[tokio::test]
async fn a_lease_answer_continues_the_enqueuers_trace_with_a_span_of_its_own() {
    let app = TestApp::spawn().await;
    enqueue_trawl(&app, Some(CALLER), json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let tp = traceparent(&lease);
    assert_eq!(tp.trace_id, caller().trace_id);
    assert!(tp.sampled);
    assert_ne!(tp.span_id, caller().span_id);
    assert!(lease["traceparent"].as_str().unwrap().ends_with("-01"));
}

#[tokio::test]
async fn the_item_keeps_the_enqueue_calls_span_a_child_of_the_callers() {
    let app = TestApp::spawn().await;
    let id = enqueue_trawl(&app, Some(OTHER), json!({})).await;
    let kept = stored(&app, &id).await;
    let other = TraceContext::parse(OTHER).unwrap();
    assert_eq!(
        (kept.trace_id, kept.sampled),
        (other.trace_id, other.sampled)
    );
    assert_ne!(kept.span_id, other.span_id);
    let lease = app.lease("trawl", "w").await.unwrap();
    assert_eq!(traceparent(&lease).trace_id, other.trace_id);
    assert!(lease["traceparent"].as_str().unwrap().ends_with("-00"));
}

#[tokio::test]
async fn an_item_enqueued_without_traceparent_starts_a_trace_of_its_own() {
    let app = TestApp::spawn().await;
    enqueue_trawl(&app, None, json!({"n": 1})).await;
    enqueue_trawl(&app, None, json!({"n": 2})).await;
    let first = leased_trace(&app).await;
    let second = leased_trace(&app).await;
    assert_ne!(first.trace_id, second.trace_id);
}

#[tokio::test]
async fn a_malformed_traceparent_is_ignored_and_the_item_starts_a_new_trace() {
    let app = TestApp::spawn().await;
    let malformed = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01";
    let r = enqueue_traced(
        &app,
        Some(malformed),
        json!({"kind": "trawl", "priority": "normal", "payload": {}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let tp = leased_trace(&app).await;
    assert_ne!(tp.trace_id, caller().trace_id);
}

#[tokio::test]
async fn an_idempotent_repeat_keeps_the_first_calls_trace() {
    let app = TestApp::spawn().await;
    let body =
        json!({"kind": "trawl", "priority": "normal", "payload": {}, "idempotency_key": "k1"});
    let first = enqueue_traced(&app, Some(CALLER), body.clone()).await;
    let again = enqueue_traced(&app, Some(OTHER), body).await;
    assert_eq!(
        (first.status, again.status),
        (StatusCode::CREATED, StatusCode::OK)
    );
    let tp = leased_trace(&app).await;
    assert_eq!(tp.trace_id, caller().trace_id);
}

#[tokio::test]
async fn next_items_of_a_completion_continue_the_completed_items_trace() {
    let app = TestApp::spawn().await;
    let id = enqueue_trawl(&app, Some(CALLER), json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let r = app
        .complete(
            &lease,
            json!({"result": {}, "next": [{"kind": "sextant", "payload": {}}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let next = app.lease("sextant", "s").await.unwrap();
    let tp = traceparent(&next);
    assert_eq!((tp.trace_id, tp.sampled), (caller().trace_id, true));
    // The next item's parent is the completion's item span: neither the span that created the
    // completed item nor the lease's.
    let kept = stored(&app, next["item"]["id"].as_str().unwrap()).await;
    assert_ne!(kept.span_id, stored(&app, &id).await.span_id);
    assert_ne!(kept.span_id, traceparent(&lease).span_id);
}

#[tokio::test]
async fn lease_next_continues_the_trace_in_next_items_and_hands_the_next_lease_its_own() {
    let app = TestApp::spawn().await;
    enqueue_trawl(&app, Some(CALLER), json!({"n": 1})).await;
    enqueue_trawl(&app, Some(OTHER), json!({"n": 2})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let r = app
        .complete(
            &lease,
            json!({"result": {}, "next": [{"kind": "sextant", "payload": {}}], "lease_next": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let next_lease = traceparent(&r.body["next_lease"]);
    assert_eq!(
        next_lease.trace_id,
        TraceContext::parse(OTHER).unwrap().trace_id
    );
    let next = app.lease("sextant", "s").await.unwrap();
    assert_eq!(traceparent(&next).trace_id, caller().trace_id);
}

#[tokio::test]
async fn next_items_of_a_batch_of_completions_continue_each_completed_items_trace() {
    let app = TestApp::spawn().await;
    enqueue_trawl(&app, Some(CALLER), json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let r = app
        .post(
            "/v1/completions",
            "worker:trawl",
            json!({"completions": [{
                "lease_id": lease["lease_id"],
                "result": {},
                "next": [{"kind": "sextant", "payload": {}}],
            }]}),
        )
        .await;
    assert_eq!(r.body["results"][0]["status"], 200, "{:?}", r.body);
    let next = app.lease("sextant", "s").await.unwrap();
    assert_eq!(traceparent(&next).trace_id, caller().trace_id);
}

#[tokio::test]
async fn each_lease_of_a_batch_carries_its_items_trace() {
    let app = TestApp::spawn().await;
    let first = enqueue_trawl(&app, Some(CALLER), json!({"n": 1})).await;
    let second = enqueue_trawl(&app, Some(OTHER), json!({"n": 2})).await;
    let r = app
        .post(
            "/v1/leases",
            "worker:trawl",
            json!({"worker_id": "batcher", "wait_ms": 0, "max": 2}),
        )
        .await;
    let traces: Vec<(String, String)> = r.body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["item"]["id"].as_str().unwrap().to_owned(),
                traceparent(l).trace_id.to_string(),
            )
        })
        .collect();
    assert_eq!(
        traces,
        [
            (first, "4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
            (second, "0af7651916cd43dd8448eb211c80319c".to_owned()),
        ]
    );
}

#[tokio::test]
async fn an_item_replayed_by_a_digest_report_keeps_its_trace() {
    let app = TestApp::spawn().await;
    enqueue_trawl(&app, Some(CALLER), json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let parked = app
        .needs_subtool(
            &lease,
            json!({"worker_digest": format!("sha256:{}", "a".repeat(64)), "layout": {"signature": "v9"}}),
        )
        .await;
    assert_eq!(parked.status, StatusCode::OK, "{:?}", parked.body);
    let report = app
        .put_digest("trawl", "shipkeeper", &format!("sha256:{}", "b".repeat(64)))
        .await;
    assert_eq!(report.body["replayed"], 1, "{:?}", report.body);
    let again = leased_trace(&app).await;
    assert_eq!(again.trace_id, caller().trace_id);
    assert_ne!(again.span_id, traceparent(&lease).span_id);
}

#[tokio::test]
async fn an_item_leased_again_after_its_lease_expired_keeps_its_trace() {
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 200).await;
    enqueue_trawl(&app, Some(CALLER), json!({})).await;
    let first = leased_trace(&app).await;
    let again = traceparent(&app.lease_eventually("trawl", "w2").await);
    assert_eq!(again.trace_id, caller().trace_id);
    assert_ne!(again.span_id, first.span_id);
}

/// Enqueues a trawl item under `CALLER`, leases it and fails it for good.
async fn failed_for_good(app: &TestApp) -> String {
    let id = enqueue_trawl(app, Some(CALLER), json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let r = app.fail_on_purpose(&lease, false).await;
    assert_eq!(r.body["state"], "failed", "{:?}", r.body);
    id
}

#[tokio::test]
async fn an_item_an_operator_retries_keeps_its_trace() {
    let app = TestApp::spawn().await;
    let id = failed_for_good(&app).await;
    let r = app.retry(&id, "operator").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let tp = leased_trace(&app).await;
    assert_eq!(tp.trace_id, caller().trace_id);
}

#[tokio::test]
async fn items_of_a_bulk_retry_keep_their_traces() {
    let app = TestApp::spawn().await;
    failed_for_good(&app).await;
    let r = app
        .bulk_retry(json!({"kind": "trawl", "state": "failed"}))
        .await;
    assert_eq!(r.body["retried"], 1, "{:?}", r.body);
    let tp = leased_trace(&app).await;
    assert_eq!(tp.trace_id, caller().trace_id);
}

#[tokio::test]
async fn an_item_that_keeps_no_trace_context_is_leased_without_traceparent() {
    let app = TestApp::spawn().await;
    untraced_trawl(&app).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    assert_eq!(lease.get("traceparent"), None, "{lease}");
}

#[tokio::test]
async fn next_items_of_an_item_without_a_trace_start_in_the_completion_calls_trace() {
    let app = TestApp::spawn().await;
    untraced_trawl(&app).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let r = post_traced(
        &app,
        &lease_path(&lease, "complete"),
        "worker:trawl",
        Some(OTHER),
        json!({"result": {}, "next": [{"kind": "sextant", "payload": {}}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let next = app.lease("sextant", "s").await.unwrap();
    assert_eq!(
        traceparent(&next).trace_id,
        TraceContext::parse(OTHER).unwrap().trace_id
    );
}
