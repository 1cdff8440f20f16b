//! `/readyz` and `/metrics` need no token, so anyone the NetworkPolicy admits can call them:
//! they read Logbook at most once per interval whatever the number of calls, and `/readyz`
//! never carries an error's text.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestApp;

#[tokio::test]
async fn a_replica_that_is_not_ready_says_so_without_the_reason() {
    let app = TestApp::spawn().await;
    // The schema now looks a migration behind this binary.
    app.execute(
        "DELETE FROM core.schema_migrations WHERE version = (SELECT max(version) FROM core.schema_migrations)",
    )
    .await;
    let r = app.raw(Method::GET, "/readyz", None, vec![]).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE")
    );
    assert_eq!(r.body["error"]["message"], "not ready");
}

#[tokio::test]
async fn a_flood_of_metrics_and_readyz_during_a_worker_load_leaves_the_workers_without_errors() {
    let app = Arc::new(TestApp::spawn().await);
    app.enqueue_many("trawl", "normal", 200).await;
    let done = Arc::new(AtomicBool::new(false));
    let probes = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..32)
        .map(|i| {
            let (app, done, probes) = (app.clone(), done.clone(), probes.clone());
            tokio::spawn(async move {
                let path = if i % 2 == 0 { "/metrics" } else { "/readyz" };
                while !done.load(Ordering::Relaxed) {
                    let r = app.raw(Method::GET, path, None, vec![]).await;
                    assert_eq!(r.status, StatusCode::OK, "{path}");
                    probes.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let errors = Arc::new(AtomicU64::new(0));
    let completed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (app, errors, completed, probes) = (
                app.clone(),
                errors.clone(),
                completed.clone(),
                probes.clone(),
            );
            tokio::spawn(async move {
                loop {
                    // The load goes on only as the probes do (however slow the machine): at
                    // least one probe answered for every item leased so far.
                    let leased = completed.load(Ordering::Relaxed) + errors.load(Ordering::Relaxed);
                    muster_testkit::eventually(
                        Duration::from_secs(30),
                        "the probes to keep up with the load",
                        || {
                            let probes = probes.clone();
                            async move { probes.load(Ordering::Relaxed) >= leased }
                        },
                    )
                    .await;
                    let r = app
                        .post(
                            "/v1/leases",
                            "worker:trawl",
                            json!({"worker_id": format!("w{w}"), "wait_ms": 0}),
                        )
                        .await;
                    match r.status {
                        StatusCode::OK => {
                            let c = app.complete(&r.body, json!({"result": {}})).await;
                            if c.status == StatusCode::OK {
                                completed.fetch_add(1, Ordering::Relaxed);
                            } else {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        StatusCode::NO_CONTENT => return,
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for f in flooders {
        f.await.unwrap();
    }
    assert_eq!(
        (
            errors.load(Ordering::Relaxed),
            completed.load(Ordering::Relaxed)
        ),
        (0, 200)
    );
}

#[tokio::test]
async fn the_oldest_queued_age_keeps_growing_between_reads_of_logbook() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let age = |m: String| -> f64 {
        m.lines()
            .find_map(|l| {
                l.strip_prefix(
                    r#"muster_oldest_queued_age_seconds{kind="trawl",priority="normal"} "#,
                )
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no age in {m}"))
    };
    let first = age(app.metrics().await);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let second = age(app.metrics().await);
    assert!(second >= first + 0.5, "{first} then {second}");
}
