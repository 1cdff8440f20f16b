//! PostgreSQL going away: fast 503s, and recovery without a restart.

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use muster_devdb::{ClusterOptions, StopMode, TempCluster};
use muster_testkit::TestDb;
use serde_json::json;

use crate::harness::TestApp;

/// A cluster of the test's own, so stopping it disturbs no other test; durable (fsync and
/// synchronous commit on), since an immediate stop must not lose committed work. With a
/// migrated database on it.
async fn own_cluster() -> (TempCluster, TestDb) {
    let options = ClusterOptions {
        fsync: true,
        ..ClusterOptions::default()
    };
    let cluster = tokio::task::spawn_blocking(move || TempCluster::start_with(options))
        .await
        .unwrap()
        .expect("start PostgreSQL");
    let url = cluster.url("postgres");
    let db = TestDb::migrate_own("postgres", url).await;
    (cluster, db)
}

/// `cluster` stopped with `StopMode::Immediate`, as a crash would stop it.
async fn stopped(mut cluster: TempCluster) -> TempCluster {
    tokio::task::spawn_blocking(move || {
        cluster.stop(StopMode::Immediate).unwrap();
        cluster
    })
    .await
    .unwrap()
}

/// `cluster` started again after [`stopped`].
async fn started_again(mut cluster: TempCluster) -> TempCluster {
    tokio::task::spawn_blocking(move || {
        cluster.start_again().unwrap();
        cluster
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn with_postgres_down_calls_answer_503_fast_and_service_resumes_when_it_returns() {
    let (cluster, db) = own_cluster().await;
    let app = TestApp::spawn_on(db, |_| {}).await;
    app.enqueue("trawl", "normal", json!({})).await;
    // Readiness has seen the schema once: the verdict that stands through the outage.
    let ready = app.raw(Method::GET, "/readyz", None, vec![]).await;
    assert_eq!(ready.status, StatusCode::OK);

    let cluster = stopped(cluster).await;
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/items",
            json!({"kind": "trawl", "payload": {}}),
        ),
        (
            Method::POST,
            "/v1/leases",
            json!({"worker_id": "w", "wait_ms": 0}),
        ),
    ] {
        let who = if path == "/v1/items" {
            "operator"
        } else {
            "worker:trawl"
        };
        let started = Instant::now();
        let r = app
            .raw(method, path, Some(who), body.to_string().into_bytes())
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE"),
            "{path}"
        );
        assert_eq!(
            r.headers.get("retry-after").map(|v| v.to_str().unwrap()),
            Some("1")
        );
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{path} took {took:?}");
    }
    let ready = app.raw(Method::GET, "/readyz", None, vec![]).await;
    assert_eq!(
        ready.status,
        StatusCode::OK,
        "a Logbook outage keeps the replica in the Service: callers get the fast 503 above"
    );

    let cluster = started_again(cluster).await;
    let mut leased = None;
    for _ in 0..50 {
        let r = app.lease_waiting("trawl", "w", 0).await;
        if r.status == StatusCode::OK {
            leased = Some(r.body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let leased = leased.expect("service did not resume after PostgreSQL returned");
    assert_eq!(
        leased["item"]["kind"], "trawl",
        "the item enqueued before the outage survived it"
    );
    drop(app);
    drop(cluster);
}

#[tokio::test]
async fn a_replica_started_while_postgres_is_down_is_not_ready_until_it_has_checked_the_schema() {
    let (cluster, db) = own_cluster().await;
    let cluster = stopped(cluster).await;
    let app = TestApp::spawn_on(db, |_| {}).await;
    let unchecked = app.raw(Method::GET, "/readyz", None, vec![]).await;
    assert_eq!(
        (
            unchecked.status,
            unchecked.body["error"]["message"].as_str()
        ),
        (StatusCode::SERVICE_UNAVAILABLE, Some("not ready")),
        "503 before the first schema check, the internal reason withheld from the answer"
    );
    let cluster = started_again(cluster).await;
    let mut last = None;
    for _ in 0..50 {
        let r = app.raw(Method::GET, "/readyz", None, vec![]).await;
        if r.status == StatusCode::OK {
            last = None;
            break;
        }
        last = Some(r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(last, None, "ready once the schema check reached Logbook");
    drop(app);
    drop(cluster);
}
