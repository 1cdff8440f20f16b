//! Graceful shutdown: requests in flight finish, long polls end early, leases stay valid.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

#[tokio::test]
async fn shutdown_ends_a_waiting_long_poll_with_204_and_returns() {
    let app = Arc::new(TestApp::spawn().await);
    let waiter = {
        let app = app.clone();
        tokio::spawn(async move { app.lease_waiting("trawl", "w", 30000).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    app.stop().await;
    let r = waiter.await.unwrap();
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "drain took {took:?}");
}

#[tokio::test]
async fn a_lease_handed_out_before_a_restart_completes_on_the_next_server() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    app.stop().await;
    let db = app.db.clone();
    let next = TestApp::spawn_on(db, |_| {}).await;
    let r = next.complete(&l, json!({"result": {}})).await;
    assert_eq!(r.status, StatusCode::OK);
}
