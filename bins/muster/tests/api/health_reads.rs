//! Reading the fleet's health: `GET /v1/health`, the `health` snapshot on connecting to the
//! feed, and `health` events that carry a kind's current state and its newest report's events.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::harness::{SseStream, TestApp};

const WAIT: Duration = Duration::from_secs(5);

fn report(kind: &str, ready: bool, restarts: u32, reason: &str) -> Value {
    json!({"pods": [{"kind": kind, "ready": ready, "restarts": restarts, "phase": "Running"}],
           "events": [{"kind": kind, "reason": reason, "message": "m"}]})
}

async fn reported(app: &TestApp, body: Value) {
    let r = app.report_health(body).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
}

/// The first `n` events of a subscription (those it opens with come before any other).
async fn first_events(s: &mut SseStream, n: usize) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    while out.len() < n {
        let e = s.next_within(WAIT).await.expect("an event");
        out.push((e.event, e.data));
    }
    out
}

#[tokio::test]
async fn health_lists_every_reported_kind_with_its_pods_aggregated_and_its_digest() {
    let app = TestApp::spawn().await;
    let digest = format!("sha256:{}", "a".repeat(64));
    let r = app.put_digest("trawl", "shipkeeper", &digest).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    reported(
        &app,
        json!({"pods": [{"kind": "trawl", "ready": true, "restarts": 1, "phase": "Running"},
                        {"kind": "trawl", "ready": false, "restarts": 2, "phase": "Pending"},
                        {"kind": "assay", "ready": true, "restarts": 0, "phase": "Running"}],
               "events": [{"kind": "trawl", "reason": "BackOff", "message": "m"}]}),
    )
    .await;
    let r = app.get("/v1/health", "conn").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let kinds = r.body["kinds"].as_array().expect("kinds").clone();
    let without_at: Vec<Value> = kinds
        .iter()
        .map(|k| {
            let mut k = k.clone();
            assert!(k["at"].is_string());
            k.as_object_mut().unwrap().remove("at");
            k
        })
        .collect();
    assert_eq!(
        without_at,
        [
            json!({"kind": "assay", "digest": null, "ready": true, "restarts": 0, "phase": "Running", "events": []}),
            json!({"kind": "trawl", "digest": digest, "ready": false, "restarts": 3, "phase": "Pending",
                   "events": [{"kind": "trawl", "reason": "BackOff", "message": "m"}]}),
        ]
    );
    assert!(r.body["at"].is_string());
}

#[tokio::test]
async fn health_with_no_report_lists_no_kind() {
    let app = TestApp::spawn().await;
    let r = app.get("/v1/health", "operator").await;
    assert_eq!((r.status, &r.body["kinds"]), (StatusCode::OK, &json!([])));
}

#[tokio::test]
async fn conn_and_operator_may_read_health_and_a_worker_may_not() {
    let app = TestApp::spawn().await;
    crate::harness::only_conn_and_the_operator_may_get(&app, "/v1/health").await;
}

#[tokio::test]
async fn a_kinds_events_are_those_of_its_newest_report_only() {
    let app = TestApp::spawn().await;
    reported(&app, report("assay", true, 0, "first")).await;
    reported(&app, report("assay", false, 1, "second")).await;
    let r = app.get("/v1/health", "operator").await;
    assert_eq!(
        r.body["kinds"][0]["events"],
        json!([{"kind": "assay", "reason": "second", "message": "m"}])
    );
}

#[tokio::test]
async fn the_feed_opens_with_the_queues_then_one_health_event_per_reported_kind() {
    let app = TestApp::spawn().await;
    reported(&app, report("trawl", true, 0, "Pulled")).await;
    reported(&app, report("sextant", false, 4, "BackOff")).await;
    let health = app.get("/v1/health", "conn").await.body["kinds"].clone();
    let mut s = app.events("conn", None).await;
    let opening = first_events(&mut s, 3).await;
    let names: Vec<&str> = opening.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["queues", "health", "health"]);
    assert_eq!(json!([opening[1].1, opening[2].1]), health);
}

#[tokio::test]
async fn a_health_event_carries_the_kinds_current_state_and_only_the_newest_events() {
    let app = TestApp::spawn().await;
    reported(&app, report("trawl", true, 0, "first")).await;
    let mut s = app.events("operator", None).await;
    let snapshot = s.next_named("health", WAIT).await.expect("the snapshot");
    assert_eq!(snapshot.data["events"][0]["reason"], "first");
    reported(
        &app,
        json!({"pods": [{"kind": "trawl", "ready": false, "restarts": 5, "phase": "CrashLoopBackOff"}],
               "events": [{"kind": "trawl", "reason": "second", "message": "m"}]}),
    )
    .await;
    // The pump may first republish the state the snapshot already showed (it polls every
    // 2 s); the event of the second report follows.
    let h = loop {
        let h = s.next_named("health", WAIT).await.expect("a health event");
        if h.data["events"][0]["reason"] != "first" {
            break h;
        }
    };
    assert_eq!(
        (
            &h.data["ready"],
            &h.data["restarts"],
            &h.data["phase"],
            &h.data["events"]
        ),
        (
            &json!(false),
            &json!(5),
            &json!("CrashLoopBackOff"),
            &json!([{"kind": "trawl", "reason": "second", "message": "m"}])
        )
    );
}
