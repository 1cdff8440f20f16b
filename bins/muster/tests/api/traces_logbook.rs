//! Logbook transactions in traces: each transaction a call runs is a CLIENT span under the
//! call's SERVER span, with what it sent; a failed one is an error; a group-commit batch is
//! one transaction span, carried by one of the calls that rode in it and linked from each.
//! The receiver decodes with opentelemetry-proto's messages, as a real collector does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_testkit::OtlpReceiver;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Attr;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Resp, TestApp, lease_path};
use crate::trace_context::post_traced;
use crate::traces::{attr, hex, traced_app};

/// A client's sampled span `n`, as a traceparent: trace `n…n`, span `0a…0n`.
fn caller(n: u8) -> String {
    format!(
        "00-{}-{}-01",
        hex(&[n; 16]),
        hex(&[0x0a, 0, 0, 0, 0, 0, 0, n])
    )
}

fn caller_span_id(n: u8) -> Vec<u8> {
    vec![0x0a, 0, 0, 0, 0, 0, 0, n]
}

/// The SERVER span of the call made under `caller(n)`.
fn server_of(spans: &[Span], n: u8) -> Option<&Span> {
    spans
        .iter()
        .find(|s| s.kind == SpanKind::Server as i32 && s.parent_span_id == caller_span_id(n))
}

/// The transaction spans under `server`.
fn transactions_under<'a>(spans: &'a [Span], server: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.name == "logbook transaction" && s.parent_span_id == server.span_id)
        .collect()
}

/// The spans once `holds` is true of them; panics after ten seconds.
async fn spans_when(receiver: &OtlpReceiver, holds: impl Fn(&[Span]) -> bool) -> Vec<Span> {
    let start = Instant::now();
    loop {
        let spans = receiver.spans();
        if holds(&spans) {
            return spans;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never arrived; spans: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The SERVER span of the call made under `caller(n)` and its transaction spans, once it has
/// at least one.
async fn call_and_transactions(receiver: &OtlpReceiver, n: u8) -> (Span, Vec<Span>) {
    let spans = spans_when(receiver, |spans| {
        server_of(spans, n).is_some_and(|s| !transactions_under(spans, s).is_empty())
    })
    .await;
    let server = server_of(&spans, n).expect("server span").clone();
    let txs = transactions_under(&spans, &server)
        .into_iter()
        .cloned()
        .collect();
    (server, txs)
}

/// The one transaction span of the call made under `caller(n)`.
async fn the_transaction_of(receiver: &OtlpReceiver, n: u8) -> Span {
    let (_, txs) = call_and_transactions(receiver, n).await;
    let [tx] = &txs[..] else {
        panic!("{} transaction spans", txs.len())
    };
    tx.clone()
}

async fn enqueue_under(app: &TestApp, n: u8) -> Resp {
    let body = json!({"kind": "trawl", "priority": "normal", "payload": {}});
    post_traced(app, "/v1/items", "operator", Some(&caller(n)), body).await
}

async fn complete_under(app: &TestApp, lease: &Value, n: u8, body: Value) -> Resp {
    let path = lease_path(lease, "complete");
    post_traced(app, &path, "worker:trawl", Some(&caller(n)), body).await
}

#[tokio::test]
async fn an_enqueue_transaction_is_a_client_span_under_its_call() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    enqueue_under(&app, 1).await;
    let (server, txs) = call_and_transactions(&receiver, 1).await;
    let tx = &txs[0];
    assert_eq!(
        (tx.kind, &tx.trace_id),
        (SpanKind::Client as i32, &server.trace_id)
    );
}

#[tokio::test]
async fn an_enqueue_runs_one_transaction_of_two_statements() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    enqueue_under(&app, 1).await;
    let tx = the_transaction_of(&receiver, 1).await;
    // The item's insert, then the ledger row deferred to the COMMIT's pipeline.
    assert_eq!(attr(&tx, "muster.db.statements"), Some(Attr::IntValue(2)));
}

#[tokio::test]
async fn a_transaction_span_follows_the_database_conventions() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    enqueue_under(&app, 1).await;
    let tx = the_transaction_of(&receiver, 1).await;
    assert_eq!(
        (
            attr(&tx, "db.system.name"),
            attr(&tx, "db.operation.name"),
            attr(&tx, "muster.db.outcome")
        ),
        (
            Some(Attr::StringValue("postgresql".into())),
            Some(Attr::StringValue("transaction".into())),
            Some(Attr::StringValue("committed".into()))
        )
    );
}

#[tokio::test]
async fn a_transaction_span_marks_when_its_connection_came_and_its_commit_went() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    enqueue_under(&app, 1).await;
    let tx = the_transaction_of(&receiver, 1).await;
    let events: Vec<&str> = tx.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(events, ["connection acquired", "commit sent"]);
}

#[tokio::test]
async fn a_transaction_span_times_its_wait_and_commit() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    enqueue_under(&app, 1).await;
    let tx = the_transaction_of(&receiver, 1).await;
    let timed = ["muster.db.connection_wait_ms", "muster.db.commit_ms"]
        .map(|key| matches!(attr(&tx, key), Some(Attr::DoubleValue(ms)) if ms >= 0.0));
    assert_eq!(timed, [true, true]);
}

#[tokio::test]
async fn a_completion_with_lease_next_is_one_committed_transaction() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let lease = app.lease("trawl", "w").await.expect("a lease");
    let body = json!({"result": {}, "lease_next": true});
    let r = complete_under(&app, &lease, 1, body).await;
    assert!(r.body["next_lease"].is_object(), "{:?}", r.body);
    let tx = the_transaction_of(&receiver, 1).await;
    assert_eq!(
        attr(&tx, "muster.db.outcome"),
        Some(Attr::StringValue("committed".into()))
    );
}

#[tokio::test]
async fn a_transaction_the_database_refuses_is_an_error() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    crate::harness::refuse_poisoned_results(&app).await;
    let lease = app.enqueue_and_lease("trawl").await;
    let r = complete_under(&app, &lease, 1, json!({"result": {"poison": true}})).await;
    assert_eq!(r.status.as_u16(), 500);
    let tx = the_transaction_of(&receiver, 1).await;
    let status = tx.status.clone().expect("a status");
    assert_eq!(
        (status.code, attr(&tx, "muster.db.outcome")),
        (
            StatusCode::Error as i32,
            Some(Attr::StringValue("failed".into()))
        )
    );
}

/// Three leased trawl items; the first one's completion waits on a row lock held here while
/// the other two queue (under `caller(2)` and `caller(3)`), so that they ride one batch.
async fn two_completions_in_one_batch(receiver: &OtlpReceiver) -> [Resp; 2] {
    let app = Arc::new(traced_app(receiver).await);
    let mut leases = Vec::new();
    for i in 0..3 {
        app.enqueue("trawl", "normal", json!({})).await;
        leases.push(app.lease("trawl", &format!("w{i}")).await.expect("a lease"));
    }
    let blocker = crate::harness::hold_item(&app, &leases[0]).await;
    let first = tokio::spawn({
        let (app, lease) = (Arc::clone(&app), leases[0].clone());
        async move { complete_under(&app, &lease, 1, json!({"result": {}})).await }
    });
    crate::harness::until_waiting_for_locks(&app, 1).await;
    let rest = [2_u8, 3].map(|n| {
        let (app, lease) = (Arc::clone(&app), leases[usize::from(n) - 1].clone());
        tokio::spawn(async move { complete_under(&app, &lease, n, json!({"result": {}})).await })
    });
    // Both reach the completion lane's queue long before this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::harness::release_item(&blocker).await;
    first.await.unwrap();
    let [a, b] = rest;
    [a.await.unwrap(), b.await.unwrap()]
}

/// The SERVER spans of the two batched completions, once both have their link.
async fn batched_servers(receiver: &OtlpReceiver) -> (Vec<Span>, [Span; 2]) {
    let spans = spans_when(receiver, |spans| {
        [2, 3]
            .iter()
            .all(|&n| server_of(spans, n).is_some_and(|s| !s.links.is_empty()))
    })
    .await;
    let servers = [2, 3].map(|n| server_of(&spans, n).expect("server span").clone());
    (spans, servers)
}

#[tokio::test]
async fn completions_that_rode_one_batch_answer_each_as_alone() {
    let receiver = OtlpReceiver::start().await;
    let answers = two_completions_in_one_batch(&receiver).await;
    assert_eq!(answers.map(|r| r.status.as_u16()), [200, 200]);
}

#[tokio::test]
async fn completions_that_rode_one_batch_link_to_its_one_transaction() {
    let receiver = OtlpReceiver::start().await;
    two_completions_in_one_batch(&receiver).await;
    let (spans, servers) = batched_servers(&receiver).await;
    let links = servers.map(|s| {
        let [link] = &s.links[..] else {
            panic!("links {:?}", s.links)
        };
        (link.trace_id.clone(), link.span_id.clone())
    });
    assert_eq!(links[0], links[1]);
    let (trace_id, span_id) = &links[0];
    let tx = spans
        .iter()
        .filter(|s| &s.trace_id == trace_id && &s.span_id == span_id)
        .count();
    assert_eq!(tx, 1);
}

#[tokio::test]
async fn a_batch_transaction_is_a_child_of_one_of_the_calls_that_rode_in_it() {
    let receiver = OtlpReceiver::start().await;
    two_completions_in_one_batch(&receiver).await;
    let (spans, servers) = batched_servers(&receiver).await;
    let carried: Vec<usize> = servers
        .iter()
        .map(|s| transactions_under(&spans, s).len())
        .collect();
    let mut sorted = carried.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0, 1], "transactions under each call: {carried:?}");
}

#[tokio::test]
async fn calls_that_rode_one_batch_carry_its_size() {
    let receiver = OtlpReceiver::start().await;
    two_completions_in_one_batch(&receiver).await;
    let (_, servers) = batched_servers(&receiver).await;
    let sizes = servers.map(|s| attr(&s, "muster.batch.size"));
    assert_eq!(sizes, [Some(Attr::IntValue(2)), Some(Attr::IntValue(2))]);
}

#[tokio::test]
async fn a_call_alone_in_its_batch_has_no_batch_link() {
    let receiver = OtlpReceiver::start().await;
    let app = traced_app(&receiver).await;
    let lease = app.enqueue_and_lease("trawl").await;
    complete_under(&app, &lease, 1, json!({"result": {}})).await;
    let (server, txs) = call_and_transactions(&receiver, 1).await;
    assert_eq!(
        (
            server.links.len(),
            attr(&server, "muster.batch.size"),
            txs.len()
        ),
        (0, None, 1)
    );
}
