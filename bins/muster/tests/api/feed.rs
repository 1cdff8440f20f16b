//! The live feed for Conn: Server-Sent Events from the ledger, and queue depths.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;

use crate::harness::{SseStream, TestApp, token};

const WAIT: Duration = Duration::from_secs(5);

async fn transitions(s: &mut SseStream, n: usize) -> Vec<crate::harness::SseEvent> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(
            s.next_named("transition", WAIT)
                .await
                .expect("a transition"),
        );
    }
    out
}

/// A server with a subscription of `principal` to its live feed.
async fn subscribed(principal: &str) -> (TestApp, SseStream) {
    let app = TestApp::spawn().await;
    let s = app.events(principal, None).await;
    (app, s)
}

/// Each transition's ledger sequence and subject id, for the next `n` transitions.
async fn sequenced_subjects(s: &mut SseStream, n: usize) -> Vec<(i64, String)> {
    transitions(s, n)
        .await
        .iter()
        .map(|e| (e.id.unwrap(), e.data["id"].as_str().unwrap().to_owned()))
        .collect()
}

/// SQL inserting a bare ledger row for item `subject` (a transaction's write the feed must
/// wait for, or skip once it is rolled back).
fn ledger_row(subject: &str) -> String {
    format!(
        "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at, data, prev_hash, hash)
         VALUES ('item', '{subject}', 1, 'test', 'operator', now(), '{{}}', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'))"
    )
}

/// Asserts that no transition is delivered within 800 ms; `why` says what that would mean.
async fn assert_no_transition_yet(s: &mut SseStream, why: &str) {
    assert_eq!(
        s.next_named("transition", Duration::from_millis(800)).await,
        None,
        "{why}"
    );
}

/// The depths of a queue holding only `count` queued trawl items of `priority`.
fn queued_trawls(priority: &str, count: i64) -> serde_json::Value {
    json!([{"kind": "trawl", "priority": priority, "state": "queued", "count": count}])
}

#[tokio::test]
async fn the_stream_has_the_contracts_headers_a_jittered_retry_and_starts_with_queue_depths() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut s = app.events("conn", None).await;
    assert_eq!(s.status, StatusCode::OK);
    let h = |n: &str| s.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        (
            h("content-type"),
            h("cache-control"),
            h("x-accel-buffering"),
            h("content-encoding")
        ),
        (
            Some("text/event-stream".into()),
            Some("no-cache".into()),
            Some("no".into()),
            None
        )
    );
    let first = s.next_within(WAIT).await.unwrap();
    assert!((1000..=3000).contains(&s.retry_ms.unwrap()));
    assert_eq!(first.event, "queues");
    assert_eq!(first.data["depths"], queued_trawls("normal", 1));
}

#[tokio::test]
async fn transitions_arrive_in_ledger_order_with_their_sequence_as_id() {
    let (app, mut s) = subscribed("operator").await;
    let item = app.enqueue("trawl", "urgent", json!({})).await;
    let l = app.lease("trawl", "w").await.unwrap();
    app.complete(&l, json!({"result": {}})).await;
    let got = transitions(&mut s, 3).await;
    let ids: Vec<i64> = got.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(ids, [1, 2, 3]);
    let first = &got[0].data;
    assert_eq!(
        (
            first["seq"].clone(),
            first["subject"].clone(),
            first["id"].clone(),
            first["kind"].clone(),
            first["from"].clone(),
            first["to"].clone(),
            first["actor"].clone()
        ),
        (
            json!(1),
            json!("item"),
            json!(item),
            json!("trawl"),
            json!(null),
            json!("queued"),
            json!("operator")
        )
    );
    assert_eq!(
        (
            got[2].data["from"].clone(),
            got[2].data["to"].clone(),
            got[2].data["actor"].clone()
        ),
        (json!("leased"), json!("done"), json!("worker:trawl"))
    );
}

#[tokio::test]
async fn a_client_that_resumes_with_last_event_id_gets_every_later_transition_exactly_once() {
    let (app, mut s) = subscribed("conn").await;
    for i in 0..3 {
        app.enqueue("trawl", "normal", json!({ "i": i })).await;
    }
    let seen = transitions(&mut s, 3).await;
    let last = seen[2].id.unwrap();
    drop(s);
    for i in 3..6 {
        app.enqueue("trawl", "normal", json!({ "i": i })).await;
    }
    let mut again = app.events("conn", Some(&last.to_string())).await;
    let rest: Vec<i64> = transitions(&mut again, 3)
        .await
        .iter()
        .map(|e| e.id.unwrap())
        .collect();
    assert_eq!(rest, [4, 5, 6]);
    app.enqueue("trawl", "normal", json!({})).await;
    assert_eq!(
        again.next_named("transition", WAIT).await.unwrap().id,
        Some(7)
    );
}

#[tokio::test]
async fn a_transaction_that_commits_late_is_not_skipped_and_keeps_the_order() {
    let (app, mut s) = subscribed("conn").await;
    // A transaction takes ledger sequence 1 and stays open.
    let held = app.open_transaction(&ledger_row("held-open")).await;
    // Sequence 2 commits first.
    app.enqueue("trawl", "normal", json!({})).await;
    assert_no_transition_yet(&mut s, "2 was delivered while 1 could still commit").await;
    held.batch_execute("COMMIT").await.unwrap();
    let got = sequenced_subjects(&mut s, 2).await;
    assert_eq!(got[0], (1, "held-open".to_owned()));
    assert_eq!(got[1].0, 2);
}

/// The late transaction took its transaction id *after* the one that commits first: a reader
/// that trusted the snapshot's xmax would pass the gap while it is still running.
#[tokio::test]
async fn a_late_commit_by_a_younger_transaction_is_not_skipped() {
    let (app, mut s) = subscribed("conn").await;
    s.next_named("queues", WAIT).await.unwrap();
    let older = app.open_transaction("SELECT pg_current_xact_id()").await;
    let younger = app.open_transaction(&ledger_row("younger")).await;
    older
        .batch_execute(&format!("{}; COMMIT;", ledger_row("older")))
        .await
        .unwrap();
    assert_no_transition_yet(
        &mut s,
        "2 was delivered while the younger transaction holding 1 was still running",
    )
    .await;
    younger.batch_execute("COMMIT").await.unwrap();
    let got = sequenced_subjects(&mut s, 2).await;
    assert_eq!(got, [(1, "younger".to_owned()), (2, "older".to_owned())]);
}

#[tokio::test]
async fn a_gap_left_by_a_rolled_back_transaction_does_not_stall_the_feed() {
    let (app, mut s) = subscribed("conn").await;
    let c = app.open_transaction(&ledger_row("rolled-back")).await;
    c.batch_execute("ROLLBACK").await.unwrap();
    app.enqueue("trawl", "normal", json!({})).await;
    assert_eq!(s.next_named("transition", WAIT).await.unwrap().id, Some(2));
}

#[tokio::test]
async fn a_subscriber_on_one_replica_sees_transitions_made_through_another_within_a_second() {
    let a = TestApp::spawn().await;
    let b = TestApp::spawn_on(a.db.clone(), |_| {}).await;
    let mut s = a.events("conn", None).await;
    s.next_named("queues", WAIT).await.unwrap();
    let started = Instant::now();
    let item = b.enqueue("sextant", "normal", json!({})).await;
    let e = s
        .next_named("transition", WAIT)
        .await
        .expect("replica A publishes B's transition");
    assert_eq!(e.data["id"], json!(item));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

#[tokio::test]
async fn a_quiet_stream_carries_a_heartbeat_at_least_every_five_seconds() {
    let (_app, mut s) = subscribed("conn").await;
    s.next_named("queues", WAIT).await.unwrap();
    let mut last = Instant::now();
    for _ in 0..2 {
        let hb = s
            .next_named("heartbeat", Duration::from_secs(6))
            .await
            .expect("a heartbeat");
        let gap = last.elapsed();
        assert!(gap <= Duration::from_millis(5200), "gap {gap:?}");
        assert_eq!(hb.data["seq"], 0);
        assert!(hb.data["at"].as_str().unwrap().ends_with('Z'));
        last = Instant::now();
    }
}

#[tokio::test]
async fn an_unknown_last_event_id_gets_a_reset() {
    let app = TestApp::spawn().await;
    let mut s = app.events("conn", Some("999999")).await;
    let e = s.next_named("reset", WAIT).await.expect("a reset");
    assert!(e.data["reason"].as_str().unwrap().contains("/v1/queues"));
}

#[tokio::test]
async fn queue_depths_are_counted_per_kind_priority_and_state() {
    let app = TestApp::spawn().await;
    app.enqueue_many("trawl", "normal", 3).await;
    app.enqueue("assay", "urgent", json!({})).await;
    app.lease("trawl", "w").await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let q = app.get("/v1/queues", "conn").await;
    assert_eq!(q.status, StatusCode::OK);
    assert_eq!(
        q.body["depths"],
        json!([
            {"kind": "trawl", "priority": "normal", "state": "queued", "count": 2},
            {"kind": "trawl", "priority": "normal", "state": "leased", "count": 1},
            {"kind": "assay", "priority": "urgent", "state": "queued", "count": 1},
        ])
    );
}

#[tokio::test]
async fn a_restarted_server_counts_the_depths_it_did_not_see_happen() {
    let app = TestApp::spawn().await;
    app.enqueue_many("trawl", "backfill", 2).await;
    app.stop().await;
    let again = TestApp::spawn_on(app.db.clone(), |_| {}).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let q = again.get("/v1/queues", "operator").await;
    assert_eq!(q.body["depths"], queued_trawls("backfill", 2));
}

#[tokio::test]
async fn health_reaches_the_feed_without_addresses_and_no_event_carries_a_token() {
    let (app, mut s) = subscribed("conn").await;
    app.report_health(json!({"pods": [{"kind": "trawl", "ready": true, "restarts": 0, "phase": "Running"}],
               "events": [{"kind": "trawl", "reason": "Unhealthy", "message": "probe to 10.244.1.7:8080 on node-7 failed"}]}),
    )
    .await;
    let h = s.next_named("health", WAIT).await.expect("a health event");
    assert_eq!(
        h.data["events"][0]["message"],
        "probe to [redacted] on [redacted] failed"
    );
    app.enqueue("trawl", "normal", json!({})).await;
    s.next_named("transition", WAIT).await.unwrap();
    for secret in [
        "10.244.1.7",
        "node-7",
        &token("conn"),
        &token("operator"),
        &token("shipkeeper"),
    ] {
        assert!(!s.raw.contains(secret), "{secret} appeared in the feed");
    }
}

#[tokio::test]
async fn only_conn_and_operators_watch_the_feed() {
    let (app, s) = subscribed("worker:trawl").await;
    let q = app.get("/v1/queues", "shipkeeper").await;
    assert_eq!(
        (s.status, q.status),
        (StatusCode::FORBIDDEN, StatusCode::FORBIDDEN)
    );
}

#[tokio::test]
async fn shutdown_ends_the_stream_with_a_final_event() {
    let app = Arc::new(TestApp::spawn().await);
    let mut s = app.events("conn", None).await;
    s.next_named("queues", WAIT).await.unwrap();
    let stopper = {
        let app = app.clone();
        tokio::spawn(async move { app.stop().await })
    };
    let last = s.next_named("shutdown", WAIT).await.expect("a final event");
    assert_eq!(
        last.data,
        json!({"reason": "draining", "retry_ms": s.retry_ms.unwrap()})
    );
    assert_eq!(s.next_within(WAIT).await, None, "the stream ends");
    stopper.await.unwrap();
}

/// A subscriber that falls further behind than the shared buffer is disconnected — the server
/// never holds more for it — and resumes with Last-Event-ID without losing or repeating anything.
#[tokio::test]
async fn a_subscriber_that_falls_behind_is_cut_loose_and_resumes_without_loss() {
    let app = TestApp::spawn_with(|s| s.feed.buffer = 16).await;
    let mut s = app.events("conn", None).await;
    s.next_named("queues", WAIT).await.unwrap();
    // 2,000 transitions at once: the pump publishes them far faster than one stream drains.
    crate::harness::fill_ledger(&app, 2000).await;
    let mut seen: Vec<i64> = Vec::new();
    while let Some(e) = s.next_within(WAIT).await {
        if e.event == "transition" {
            seen.push(e.id.unwrap());
        }
    }
    assert!(
        seen.len() < 2000,
        "the stream was not cut: {} events",
        seen.len()
    );
    // Reconnect with the last id seen, as EventSource does, until everything arrived.
    let mut reconnects = 0;
    while seen.len() < 2000 && reconnects < 50 {
        reconnects += 1;
        let last = seen.last().copied().unwrap_or(0);
        let mut again = app.events("conn", Some(&last.to_string())).await;
        while let Some(e) = again.next_within(WAIT).await {
            if e.event == "transition" {
                seen.push(e.id.unwrap());
            }
            if seen.len() == 2000 {
                break;
            }
        }
    }
    assert_eq!(seen, (1..=2000).collect::<Vec<i64>>());
}
