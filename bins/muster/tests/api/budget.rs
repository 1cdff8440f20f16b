//! The body budget: large request bodies the server holds at once, on the cluster-private
//! routes.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{Resp, TestApp, token};

/// A server whose budget is 1 MiB, a request waiting at most 300 ms for room, a body arriving
/// within 30 s (a held body keeps its room however slowly the test goes on).
async fn one_mib_budget() -> TestApp {
    one_mib_budget_reading_for(Duration::from_secs(30)).await
}

/// [`one_mib_budget`] with a body arriving within `deadline`.
async fn one_mib_budget_reading_for(deadline: Duration) -> TestApp {
    TestApp::spawn_with(|s| {
        s.inflight_body_mib = 1;
        s.server.body_wait = Duration::from_millis(300);
        s.server.body_read_deadline = deadline;
    })
    .await
}

/// The `muster_http_body_budget_used_bytes` gauge.
async fn used_bytes(app: &TestApp) -> u64 {
    let text = app.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix("muster_http_body_budget_used_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no body budget gauge in {text}"))
}

/// Waits (up to 10 s) until the budget's reserved bytes are `bytes`.
async fn until_used(app: &TestApp, bytes: u64) {
    for _ in 0..1000 {
        if used_bytes(app).await == bytes {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the body budget never had {bytes} bytes reserved");
}

/// An enqueue with `principal`'s token that declares a `bytes` body and sends none of it.
async fn declare(app: &TestApp, principal: &str, bytes: u64) -> TcpStream {
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /v1/items HTTP/1.1\r\nHost: muster\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {bytes}\r\n\r\n",
        token(principal)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// An operator's enqueue that declares a `bytes` body and holds that much of the budget (in
/// KiB, rounded up) until its connection closes.
async fn hold(app: &TestApp, bytes: u64) -> TcpStream {
    let stream = declare(app, "operator", bytes).await;
    until_used(app, bytes.div_ceil(1024) * 1024).await;
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

/// What the server answered on a raw connection, as text.
async fn answer_on(mut stream: TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
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
    assert_eq!(app.count("core.items").await, 0);
}

#[tokio::test]
async fn the_room_comes_back_when_the_request_holding_it_ends() {
    let app = one_mib_budget().await;
    let held = hold_most_of_the_budget(&app).await;
    drop(held);
    until_used(&app, 0).await;
    assert_eq!(enqueue_of(&app, 100).await.status.as_u16(), 201);
}

#[tokio::test]
async fn a_large_body_that_fits_in_the_room_left_passes() {
    let app = one_mib_budget().await;
    let _held = hold_most_of_the_budget(&app).await;
    assert_eq!(enqueue_of(&app, 40).await.status.as_u16(), 201);
}

#[tokio::test]
async fn small_bodies_are_not_counted_and_pass_while_the_budget_is_full() {
    let app = one_mib_budget().await;
    let _held = hold(&app, 1024 * 1024).await;
    let r = app.lease_waiting("trawl", "w-1", 0).await;
    assert_eq!(r.status.as_u16(), 204);
}

#[tokio::test]
async fn a_large_body_without_a_valid_token_is_answered_401_without_waiting_for_room() {
    let app = one_mib_budget().await;
    let _held = hold(&app, 1024 * 1024).await;
    let stream = declare(&app, "nobody", 1_000_000).await;
    let answer = answer_on(stream).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_within_the_read_deadline_is_answered_503() {
    let app = one_mib_budget_reading_for(Duration::from_secs(2)).await;
    let stalled = hold_most_of_the_budget(&app).await;
    let answer = answer_on(stalled).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("did not arrive within 2000 ms"), "{answer}");
}

#[tokio::test]
async fn the_room_of_a_stalled_body_comes_back_after_the_read_deadline() {
    let app = one_mib_budget_reading_for(Duration::from_secs(2)).await;
    let _stalled = hold_most_of_the_budget(&app).await;
    until_used(&app, 0).await;
}

#[tokio::test]
async fn the_edit_intake_routes_do_not_count_against_the_budget() {
    let app = one_mib_budget().await;
    let _held = hold(&app, 1024 * 1024).await;
    // Counted, this 100 KB body would wait for room and be answered 503; it is cut at the
    // intake's 4 KiB instead.
    let r = app
        .raw(
            hyper::Method::POST,
            "/v1/edits/challenge",
            Some("conn"),
            vec![b' '; 100_000],
        )
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (413, "E_TOO_LARGE"));
}

#[tokio::test]
async fn refusals_are_counted_in_the_metrics() {
    let app = one_mib_budget().await;
    let _held = hold_most_of_the_budget(&app).await;
    enqueue_of(&app, 100).await;
    let text = app.metrics().await;
    assert!(
        text.lines()
            .any(|l| l == "muster_http_body_budget_refusals_total 1"),
        "{text}"
    );
}

#[tokio::test]
async fn an_http2_body_without_a_length_is_charged_at_the_body_limit() {
    let app = one_mib_budget().await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel::<
        Result<hyper::body::Frame<hyper::body::Bytes>, std::convert::Infallible>,
    >(1);
    let body = http_body_util::StreamBody::new(Box::pin(tokio_stream_of(rx)));
    let req = hyper::Request::post(format!("{}/v1/items", app.url()))
        .header("authorization", format!("Bearer {}", token("operator")))
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let pending = tokio::spawn(sender.send_request(req));
    tx.send(Ok(hyper::body::Frame::data(
        hyper::body::Bytes::from_static(b"{"),
    )))
    .await
    .unwrap();
    until_used(&app, 1024 * 1024).await;
    drop(tx);
    let _ = pending.await;
}

/// The receiver as a stream of frames.
fn tokio_stream_of<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|t| (t, rx)) })
}
