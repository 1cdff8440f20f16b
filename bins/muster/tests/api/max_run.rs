//! The maximum run time (protocol.md, "Additions of 2026-12-07"): a lease that is older than
//! its kind's `max_run_ms` is no longer extended, and from then on is treated as an expired
//! one; the item's history shows `timed_out`.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

/// A server whose trawl leases may run 1 s at most.
async fn one_second_runs() -> TestApp {
    TestApp::spawn_with(|s| {
        let path =
            std::env::temp_dir().join(format!("muster-max-run-{}.json", uuid::Uuid::now_v7()));
        let pipeline = json!({"limits": {"trawl": {"max_run_ms": 1000}}});
        std::fs::write(&path, pipeline.to_string()).expect("write the pipeline file");
        s.pipeline = Some(path);
    })
    .await
}

/// One trawl item leased by worker `w`, heartbeated until past its 1 s limit: the lease and
/// the refused heartbeat.
async fn timed_out_lease(app: &TestApp) -> (serde_json::Value, crate::harness::Resp) {
    let lease = app.enqueue_and_lease("trawl").await;
    assert_eq!(app.heartbeat(&lease, "w").await.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let refused = app.heartbeat(&lease, "w").await;
    (lease, refused)
}

#[tokio::test]
async fn a_heartbeat_past_the_maximum_run_time_is_lease_lost_naming_the_limit() {
    let app = one_second_runs().await;
    let (_, refused) = timed_out_lease(&app).await;
    refused.assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    assert_eq!(
        refused.body["error"]["message"],
        "the lease passed its kind's maximum run time of 1000 ms and is no longer extended"
    );
}

#[tokio::test]
async fn a_timed_out_item_is_leased_again_with_its_attempt_counted() {
    let app = one_second_runs().await;
    let (lease, _) = timed_out_lease(&app).await;
    let again = app.lease("trawl", "w2").await.expect("leasable again");
    assert_eq!(again["item"]["id"], lease["item"]["id"]);
    assert_eq!(
        (&again["fence"], &again["item"]["attempt"]),
        (&json!(2), &json!(2))
    );
}

#[tokio::test]
async fn the_history_shows_timed_out_once_however_often_the_worker_heartbeats() {
    let app = one_second_runs().await;
    let (lease, _) = timed_out_lease(&app).await;
    let item = lease["item"]["id"].as_str().unwrap();
    app.heartbeat(&lease, "w")
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    assert_eq!(app.ledger_events(item, "timed_out").await, 1);
    let history = app.item(item).await["history"].clone();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["event"], &last["from"], &last["to"], &last["fence"]),
        (
            &json!("timed_out"),
            &json!("leased"),
            &json!("leased"),
            &json!(1)
        )
    );
}

#[tokio::test]
async fn a_timed_out_lease_still_completes_until_another_lease_supersedes_it() {
    let app = one_second_runs().await;
    let (lease, _) = timed_out_lease(&app).await;
    let done = app
        .complete(&lease, json!({"result": {"late": "but first"}}))
        .await;
    assert_eq!(done.status, StatusCode::OK, "{:?}", done.body);
    assert_eq!(done.body["state"], "done");
}

#[tokio::test]
async fn the_oldest_leases_age_and_the_maximum_run_time_are_on_metrics() {
    let app = one_second_runs().await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.lease("trawl", "w").await.unwrap();
    let metrics = app
        .metrics_with_line(|l| l.starts_with("muster_oldest_lease_age_seconds{kind=\"trawl\"}"))
        .await;
    assert!(
        metrics.contains("muster_lease_max_run_seconds{kind=\"trawl\"} 1.0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("muster_lease_max_run_seconds{kind=\"sextant\"} 3600.0"),
        "{metrics}"
    );
}
