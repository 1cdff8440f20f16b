//! The body budget: request bodies the server holds at once, on the cluster-private routes.

use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::harness::{Resp, TestApp, token};

/// A server whose budget is 1 MiB, with a request waiting at most 300 ms for room.
async fn one_mib_budget() -> TestApp {
    TestApp::spawn_with(|s| {
        s.inflight_body_mib = 1;
        s.server.body_wait = Duration::from_millis(300);
    })
    .await
}

/// An enqueue that declares a `bytes` body and sends none of it: it holds that much of the
/// budget until the connection closes.
async fn hold(app: &TestApp, bytes: u64) -> TcpStream {
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /v1/items HTTP/1.1\r\nHost: muster\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {bytes}\r\n\r\n",
        token("operator")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Let the server read the head and reserve the room before the next request arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream
}

/// Holds 977 KiB of the 1 MiB budget (47 KiB left).
async fn hold_most_of_the_budget(app: &TestApp) -> TcpStream {
    hold(app, 1_000_000).await
}

/// An enqueue whose body is about `kib` KiB.
async fn enqueue_of(app: &TestApp, kib: usize) -> Resp {
    let padding = "x".repeat(kib * 1024 - 100);
    app.post(
        "/v1/items",
        "operator",
        json!({"kind": "trawl", "priority": "normal", "payload": {"padding": padding}}),
    )
    .await
}

#[tokio::test]
async fn a_body_that_finds_no_room_within_the_wait_is_answered_503_with_retry_after() {
    let app = one_mib_budget().await;
    let _held = hold_most_of_the_budget(&app).await;
    let r = enqueue_of(&app, 100).await;
    assert_eq!(
        (
            r.status.as_u16(),
            r.code(),
            r.headers.get("retry-after").map(|v| v.to_str().unwrap())
        ),
        (503, "E_UNAVAILABLE", Some("1"))
    );
}

#[tokio::test]
async fn a_refused_body_writes_nothing() {
    let app = one_mib_budget().await;
    let _held = hold_most_of_the_budget(&app).await;
    enqueue_of(&app, 100).await;
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.items").await, 0);
}

#[tokio::test]
async fn the_room_comes_back_when_the_request_holding_it_ends() {
    let app = one_mib_budget().await;
    let held = hold_most_of_the_budget(&app).await;
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(enqueue_of(&app, 100).await.status.as_u16(), 201);
}

#[tokio::test]
async fn a_body_that_fits_in_the_room_left_passes() {
    let app = one_mib_budget().await;
    let _held = hold_most_of_the_budget(&app).await;
    assert_eq!(enqueue_of(&app, 4).await.status.as_u16(), 201);
}

#[tokio::test]
async fn the_public_edit_routes_do_not_count_against_the_budget() {
    let app = one_mib_budget().await;
    let _held = hold(&app, 1024 * 1024).await;
    let r = app.post("/v1/edits/challenge", "conn", json!({})).await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.body);
}

#[tokio::test]
async fn refusals_are_counted_in_the_metrics() {
    let app = one_mib_budget().await;
    let _held = hold_most_of_the_budget(&app).await;
    enqueue_of(&app, 100).await;
    let metrics = app.get("/metrics", "operator").await;
    let text = metrics.body.as_str().unwrap_or_default().to_owned();
    assert!(
        text.lines()
            .any(|l| l == "muster_http_body_budget_refusals_total 1"),
        "{text}"
    );
}
