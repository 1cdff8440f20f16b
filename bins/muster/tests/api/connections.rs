//! The edge's connection rules ("Edge limits" in protocol.md): a request head within the
//! header-read timeout of connect whatever the protocol, HTTP/2 connections closed when idle,
//! and a cap on open connections, a connection over it closed at once.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::TestApp;

/// How long the server took to close `stream` (reading until end of file), at most `within`.
async fn closed_after(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((start + within).into(), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

async fn app_with_head_timeout(ms: u64) -> TestApp {
    TestApp::spawn_with(|s| s.server.header_read_timeout = Duration::from_millis(ms)).await
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let app = app_with_head_timeout(500).await;
    let mut silent = TcpStream::connect(app.addr).await.unwrap();
    let closed = closed_after(&mut silent, Duration::from_secs(5)).await;
    assert!(
        closed.is_some_and(|d| d >= Duration::from_millis(450)),
        "closed after {closed:?}"
    );
}

#[tokio::test]
async fn a_connection_stuck_in_the_http2_preface_is_closed_after_the_header_timeout() {
    let app = app_with_head_timeout(500).await;
    let mut stuck = TcpStream::connect(app.addr).await.unwrap();
    // The first bytes of the HTTP/2 preface: the protocol is not decided yet.
    stuck.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let closed = closed_after(&mut stuck, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "still open after 5 s");
}

#[tokio::test]
async fn an_http2_connection_with_no_request_head_is_closed_after_the_header_timeout() {
    let app = app_with_head_timeout(500).await;
    let mut stuck = TcpStream::connect(app.addr).await.unwrap();
    // The whole preface and an empty SETTINGS frame, then no request.
    stuck
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let closed = closed_after(&mut stuck, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "still open after 5 s");
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let app = TestApp::spawn_with(|s| s.server.idle_timeout = Duration::from_millis(500)).await;
    let tcp = TcpStream::connect(app.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let driver = tokio::spawn(conn);
    let req = Request::get(format!("{}/healthz", app.url()))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    res.into_body().collect().await.unwrap();
    // The server closes it: the client's connection task ends.
    let ended = tokio::time::timeout(Duration::from_secs(5), driver).await;
    assert!(ended.is_ok(), "the idle HTTP/2 connection is still open");
}

#[tokio::test]
async fn a_live_feed_over_http2_is_not_closed_by_the_idle_timeout() {
    let app = TestApp::spawn_with(|s| s.server.idle_timeout = Duration::from_millis(300)).await;
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Empty<Bytes>>();
    let req = Request::get(format!("{}/v1/events", app.url()))
        .header(
            "authorization",
            format!("Bearer {}", crate::harness::token("conn")),
        )
        .body(Empty::new())
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Still open: an event enqueued now arrives on it.
    app.enqueue("trawl", "normal", serde_json::json!({})).await;
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen.contains("event: transition") && !seen.contains("event: queues") {
        let frame = tokio::time::timeout_at(deadline.into(), body.frame())
            .await
            .expect("an event within 5 s")
            .expect("the stream is still open")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

#[tokio::test]
async fn a_connection_over_the_cap_is_closed_at_once() {
    let app = TestApp::spawn_with(|s| s.max_connections = 2).await;
    let _first = TcpStream::connect(app.addr).await.unwrap();
    let _second = TcpStream::connect(app.addr).await.unwrap();
    let mut third = TcpStream::connect(app.addr).await.unwrap();
    // Well before the 10 s header timeout that would close the first two.
    let closed = closed_after(&mut third, Duration::from_secs(2)).await;
    assert!(
        closed.is_some(),
        "the connection over the cap was left open"
    );
}

#[tokio::test]
async fn a_connection_closed_gives_its_place_under_the_cap_to_the_next() {
    let app = TestApp::spawn_with(|s| s.max_connections = 1).await;
    let first = TcpStream::connect(app.addr).await.unwrap();
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.get("/healthz", "conn").await.status, StatusCode::OK);
}

#[tokio::test]
async fn an_idle_http1_keep_alive_connection_is_closed_after_the_header_timeout() {
    let app = app_with_head_timeout(500).await;
    let mut conn = TcpStream::connect(app.addr).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: m\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Kept alive, then idle: closed well before the 60 s idle timeout.
    let closed = closed_after(&mut conn, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "still open after 5 s");
}

/// The status line of the answer to an HTTP/1.1 `GET /healthz` whose head carries one
/// `x-padding` header of `padding` bytes, read from a raw socket.
async fn status_of_a_head_padded_with(app: &TestApp, padding: usize) -> String {
    let mut tcp = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "GET /healthz HTTP/1.1\r\nhost: muster\r\nx-padding: {}\r\nconnection: close\r\n\r\n",
        "a".repeat(padding)
    );
    // The server may answer (and close) before it has read the whole of an oversized head.
    let _ = tcp.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn an_http1_request_head_just_under_8_kib_is_served() {
    let app = TestApp::spawn().await;
    let status = status_of_a_head_padded_with(&app, 7 * 1024).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn an_http1_request_head_over_8_kib_is_answered_431() {
    let app = TestApp::spawn().await;
    let status = status_of_a_head_padded_with(&app, 9 * 1024).await;
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");
}

#[tokio::test]
async fn an_http2_request_whose_headers_pass_8_kib_is_answered_431() {
    let app = TestApp::spawn().await;
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Empty<Bytes>>();
    let req = Request::get(format!("{}/healthz", app.url()))
        .header("x-padding", "a".repeat(9 * 1024))
        .body(Empty::new())
        .unwrap();
    let res = client.request(req).await.map(|r| r.status());
    assert_eq!(res.ok(), Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
}

/// A live-feed subscriber that stops reading altogether is closed once its socket has taken no
/// byte for the write-stall limit, instead of holding its connection and a full send buffer.
#[tokio::test]
async fn a_feed_subscriber_that_never_reads_is_closed_after_the_write_stall_limit() {
    const EVENTS: i64 = 30_000;
    let app = TestApp::spawn_with(|s| {
        s.server.write_stall = Duration::from_secs(1);
        // Room for every event, so that only the stall, not the slow-subscriber rule, can end it.
        s.feed.buffer = 2 * EVENTS as usize;
    })
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut frozen = socket.connect(app.addr).await.unwrap();
    let head = format!(
        "GET /v1/events HTTP/1.1\r\nHost: muster\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
        crate::harness::token("conn")
    );
    frozen.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // About 7 MB of transitions: more than the two sockets' buffers hold.
    crate::harness::fill_ledger(&app, EVENTS).await;
    // Frozen for well past the limit, then read what the sockets held: the stream ends early.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut got = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), frozen.read_to_end(&mut got)).await;
    let transitions = got
        .windows(b"event: transition".len())
        .filter(|w| w == b"event: transition")
        .count() as i64;
    assert!(ended.is_ok(), "the server kept the connection open");
    assert!(
        transitions < EVENTS,
        "all {transitions} transitions arrived: nothing was cut"
    );
}
