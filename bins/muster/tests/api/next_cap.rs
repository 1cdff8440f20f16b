//! A completion carries at most 64 `next` items, a batch of completions at most 512 in all
//! ("Edge limits" in protocol.md): more is 400 `E_BAD_REQUEST` and writes nothing; the
//! largest allowed batch reaches a live-feed subscriber whole.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Resp, TestApp};

fn next_items(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"kind": "sextant", "payload": {"page": i}}))
        .collect()
}

async fn items(app: &TestApp) -> i64 {
    app.count("core.items").await
}

/// How many items and ledger rows there are.
async fn written(app: &TestApp) -> (i64, i64) {
    let ledger = app.count("core.ledger").await;
    (items(app).await, ledger)
}

/// Asserts that `res` is 400 `E_BAD_REQUEST` and that no item and no ledger row was written
/// since `before` ([`written`]).
async fn assert_refused_writing_nothing(app: &TestApp, res: &Resp, before: (i64, i64)) {
    res.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
    assert_eq!(written(app).await, before, "(items, ledger rows)");
}

/// `POST /v1/completions` by a trawl worker.
async fn complete_batch(app: &TestApp, completions: Value) -> Resp {
    app.post(
        "/v1/completions",
        "worker:trawl",
        json!({ "completions": completions }),
    )
    .await
}

/// `n` trawl items leased by worker `w`.
async fn leased(app: &TestApp, n: usize) -> Vec<Value> {
    app.enqueue_many("trawl", "normal", n).await;
    let mut leases = Vec::new();
    for _ in 0..n {
        leases.push(app.lease_eventually("trawl", "w").await);
    }
    leases
}

#[tokio::test]
async fn a_completion_with_65_next_items_is_400_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let lease = leased(&app, 1).await.remove(0);
    let before = written(&app).await;
    let res = app
        .complete(&lease, json!({"result": {}, "next": next_items(65)}))
        .await;
    assert_refused_writing_nothing(&app, &res, before).await;
}

#[tokio::test]
async fn a_completion_with_64_next_items_creates_them_all() {
    let app = TestApp::spawn().await;
    let lease = leased(&app, 1).await.remove(0);
    let res = app
        .complete(&lease, json!({"result": {}, "next": next_items(64)}))
        .await;
    assert_eq!(res.status, StatusCode::OK, "{:?}", res.body);
    assert_eq!(items(&app).await, 65);
}

#[tokio::test]
async fn a_batch_creating_513_next_items_in_all_is_400_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let leases = leased(&app, 9).await;
    let completions: Vec<Value> = leases
        .iter()
        .enumerate()
        .map(|(i, l)| {
            json!({"lease_id": l["lease_id"], "result": {},
                   "next": next_items(if i == 0 { 1 } else { 64 })})
        })
        .collect();
    let before = written(&app).await;
    let res = complete_batch(&app, json!(completions)).await;
    assert_refused_writing_nothing(&app, &res, before).await;
}

#[tokio::test]
async fn a_batch_entry_with_65_next_items_refuses_the_whole_batch() {
    let app = TestApp::spawn().await;
    let leases = leased(&app, 2).await;
    let completions = json!([
        {"lease_id": leases[0]["lease_id"], "result": {}},
        {"lease_id": leases[1]["lease_id"], "result": {}, "next": next_items(65)},
    ]);
    let before = written(&app).await;
    let res = complete_batch(&app, completions).await;
    assert_refused_writing_nothing(&app, &res, before).await;
}

#[tokio::test]
async fn the_largest_allowed_batch_reaches_a_feed_subscriber_whole() {
    let app = TestApp::spawn().await;
    let leases = leased(&app, 8).await;
    let mut feed = app.events("conn", None).await;
    assert_eq!(feed.status, StatusCode::OK);
    // Attached: its first event (the queues snapshot) has arrived.
    feed.next_named("queues", Duration::from_secs(10))
        .await
        .expect("the snapshot");
    let completions: Vec<Value> = leases
        .iter()
        .map(|l| json!({"lease_id": l["lease_id"], "result": {}, "next": next_items(64)}))
        .collect();
    let res = complete_batch(&app, json!(completions)).await;
    assert_eq!(res.status, StatusCode::OK, "{:?}", res.body);
    // 8 completed and 512 enqueued: all of them, with no `reset` and no end of the stream.
    let mut transitions = 0;
    while transitions < 8 + 512 {
        let e = feed
            .next_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("the stream ended after {transitions} transitions"));
        assert_ne!(e.event, "reset");
        if e.event == "transition" {
            transitions += 1;
        }
    }
}
