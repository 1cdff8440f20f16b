//! Hostile clients inside the cluster (docs/security.md): HTTP/2 feed streams that never open
//! their window, HTTP/2 uploads without a length, slow request heads, one peer taking
//! connections, unauthenticated connections past the public share. Each test holds the server
//! to its memory budget — its own accounting on `/metrics`, or the peak resident memory of a
//! `muster serve` process of its own — and shows a good worker served meanwhile.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::client::conn::http2::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

use crate::harness::{KillOnDrop, TempDir, TestApp, fill_ledger, serve_process, token};

/// The default memory budget, in KiB (`--memory-budget 48Mi`).
const BUDGET_KIB: u64 = 48 * 1024;

/// An HTTP/2 connection to `addr` whose streams open with a receive window of `window` bytes:
/// the request sender and the connection's task (it ends when the server closes it).
async fn h2(addr: SocketAddr, window: u32) -> (SendRequest<Empty<Bytes>>, JoinHandle<()>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(window)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    (
        sender,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

/// `GET /v1/events` as conn on `sender`, resuming after `last` if given: the answer, its body
/// unread (kept, its stream stays open).
async fn feed_stream(
    sender: &mut SendRequest<Empty<Bytes>>,
    last: Option<i64>,
) -> hyper::Response<hyper::body::Incoming> {
    let mut req = Request::get("http://muster/v1/events")
        .header("authorization", format!("Bearer {}", token("conn")));
    if let Some(last) = last {
        req = req.header("last-event-id", last.to_string());
    }
    sender.ready().await.unwrap();
    sender
        .send_request(req.body(Empty::new()).unwrap())
        .await
        .unwrap()
}

/// A field of `/proc/<pid>/status` in KiB (`VmHWM`: peak resident memory).
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A gauge or counter of the scrape (the first line of `name` with `labels`).
async fn metric(app: &TestApp, name: &str, labels: &str) -> u64 {
    let scrape = app.metrics().await;
    let prefix = format!("{name}{labels} ");
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no {prefix} in {scrape}"))
}

/// A good worker: enqueues an item as operator and leases it as trawl, on fresh HTTP/1
/// connections.
async fn a_worker_is_served(app: &TestApp) {
    let id = app.enqueue("trawl", "normal", json!({"good": true})).await;
    let lease = app.lease_eventually("trawl", "good-worker").await;
    assert_eq!(lease["item"]["id"].as_str(), Some(id.as_str()));
}

/// `muster serve` as a process of its own (default budget) on `db`, with 10,000 ledger rows
/// for resumes: the process, and a client attached to it.
async fn served_process(name: &str) -> (KillOnDrop, TestApp, TempDir) {
    let db = muster_testkit::fresh_db().await;
    let dir = TempDir::new(name);
    let (mut serve, addr) = serve_process(&db.app_url, &dir);
    let child = KillOnDrop(Some(serve.spawn().expect("start muster")));
    let app = TestApp::attach(db, addr).await;
    (child, app, dir)
}

/// The finding this suite began with: 200 zero-window resumes 9,999 events back on one
/// connection took the server to 478 MiB. Now a connection carries 16 feed streams, the
/// server 16 resumes at once (the rest are 503), and a replay is read a page at a time as
/// its stream takes it: ten such connections leave the server under its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_window_resumes_on_many_http2_connections_leave_the_server_under_its_budget() {
    let (child, app, _dir) = served_process("muster-hostile-feed").await;
    fill_ledger(&app, 10_000).await;
    let newest = app.scalar_i64("SELECT max(seq) FROM core.ledger").await;
    // The feed has read the rows it resumes into.
    app.metrics_with_line(|_| true).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut conns = Vec::new();
    let mut statuses = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..10 {
        let (mut sender, task) = h2(app.addr, 0).await;
        for _ in 0..20 {
            let res = feed_stream(&mut sender, Some(newest - 9_999)).await;
            statuses.push(res.status());
            streams.push(res);
        }
        conns.push((sender, task));
    }
    let admitted = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    a_worker_is_served(&app).await;
    let peak = proc_status_kib(child.id(), "VmHWM");
    assert_eq!((admitted, refused), (16, 184));
    assert!(
        peak < BUDGET_KIB,
        "peak resident memory {peak} KiB, over the {BUDGET_KIB} KiB budget"
    );
}

/// A stream whose peer never opens its window is never polled; it closes its connection
/// after the write-stall limit all the same, and gives back its place under the caps.
#[tokio::test]
async fn a_zero_window_feed_stream_closes_its_connection_after_the_write_stall_limit() {
    let app = TestApp::spawn_with(|s| s.server.write_stall = Duration::from_secs(1)).await;
    let (mut sender, task) = h2(app.addr, 0).await;
    let stream = feed_stream(&mut sender, None).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let closed = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(closed.is_ok(), "the connection is still open after 5 s");
    let subscribers = app
        .metrics_with_line(|l| l == "muster_sse_subscribers 0")
        .await;
    assert!(subscribers.contains("muster_sse_subscribers 0"));
}

#[tokio::test]
async fn a_connection_carries_at_most_16_feed_streams_the_next_is_503_with_retry_after() {
    let app = TestApp::spawn().await;
    let (mut sender, _task) = h2(app.addr, 65_535).await;
    let mut streams = Vec::new();
    for _ in 0..16 {
        streams.push(feed_stream(&mut sender, None).await);
    }
    let statuses: Vec<_> = streams.iter().map(|r| r.status()).collect();
    let req = Request::get("http://muster/v1/events")
        .header("authorization", format!("Bearer {}", token("conn")))
        .body(Empty::new())
        .unwrap();
    sender.ready().await.unwrap();
    let over = sender.send_request(req).await.unwrap();
    assert_eq!(statuses, vec![StatusCode::OK; 16]);
    assert_eq!(
        (
            over.status(),
            over.headers().contains_key("retry-after"),
            over.into_body().collect().await.unwrap().to_bytes()[..]
                .windows(b"E_UNAVAILABLE".len())
                .any(|w| w == b"E_UNAVAILABLE")
        ),
        (StatusCode::SERVICE_UNAVAILABLE, true, true)
    );
}

#[tokio::test]
async fn a_subscriber_over_the_subscriber_cap_is_503() {
    let app = TestApp::spawn_with(|s| s.feed.max_subscribers = 2).await;
    let _one = app.events("conn", None).await;
    let _two = app.events("conn", None).await;
    let three = app.events("conn", None).await;
    assert_eq!(three.status, StatusCode::SERVICE_UNAVAILABLE);
}

/// A resume 600 events back, read in pages of 256: every transition after the id once, in
/// order, then the live ones.
#[tokio::test]
async fn a_resume_over_several_pages_delivers_every_transition_once_in_order() {
    let app = TestApp::spawn().await;
    fill_ledger(&app, 1_000).await;
    let newest = app.scalar_i64("SELECT max(seq) FROM core.ledger").await;
    let mut probe = app.events("conn", None).await;
    // The feed has published `newest` (a heartbeat names it).
    loop {
        let beat = probe
            .next_named("heartbeat", Duration::from_secs(10))
            .await
            .expect("a heartbeat");
        if beat.data["seq"].as_i64() == Some(newest) {
            break;
        }
    }
    let last = newest - 600;
    let mut s = app.events("conn", Some(&last.to_string())).await;
    let mut ids = Vec::new();
    while ids.len() < 600 {
        let e = s
            .next_named("transition", Duration::from_secs(10))
            .await
            .expect("a replayed transition");
        ids.push(e.id.unwrap());
    }
    assert_eq!(ids, ((last + 1)..=newest).collect::<Vec<_>>());
}

/// 60 HTTP/2 connections each stream a 1 MiB body without a length while the body budget
/// (2 MiB) admits two at a time: the others' bodies stay in their clients, past the 16 KiB a
/// stream may send unread (hyper's default windows let each pile up 1 MiB: 175 MiB for 150).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_uploads_without_a_length_leave_the_server_under_its_budget() {
    static CHUNK: [u8; 16 * 1024] = [b' '; 16 * 1024];
    let (child, app, _dir) = served_process("muster-hostile-upload").await;
    let mut uploads = Vec::new();
    for _ in 0..60 {
        let tcp = TcpStream::connect(app.addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        let body = StreamBody::new(futures_util::stream::iter(std::iter::repeat_n((), 64).map(
            |()| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(&CHUNK))),
        )));
        let req = Request::post("http://muster/v1/items")
            .header("authorization", format!("Bearer {}", token("operator")))
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        uploads.push(tokio::spawn(async move {
            sender.ready().await.unwrap();
            sender.send_request(req).await.map(|r| r.status())
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    a_worker_is_served(&app).await;
    let peak = proc_status_kib(child.id(), "VmHWM");
    for upload in &uploads {
        upload.abort();
    }
    assert!(
        peak < BUDGET_KIB,
        "peak resident memory {peak} KiB, over the {BUDGET_KIB} KiB budget"
    );
}

/// A connection from `ip` (a loopback address of its own) to `addr`.
async fn connect_from(ip: Ipv4Addr, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::V4(ip), 0)).unwrap();
    socket.connect(addr).await.unwrap()
}

/// `GET /v1/queues` as conn over raw HTTP/1 on `stream`: the answer's status line and
/// whether it says `connection: close`.
async fn queues_over(stream: &mut TcpStream, principal: Option<&str>) -> (String, bool) {
    get_over(stream, "/v1/queues", principal.map(token).as_deref()).await
}

/// `GET path` on `stream` with `bearer` (if any): the status line (lowercase) and whether the
/// answer says `Connection: close`.
async fn get_over(stream: &mut TcpStream, path: &str, bearer: Option<&str>) -> (String, bool) {
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!("GET {path} HTTP/1.1\r\nHost: muster\r\n{auth}\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let status = text.lines().next().unwrap_or_default().to_owned();
    // Drain the body (small) so that the next request starts clean.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await;
    (status, text.contains("connection: close"))
}

/// Whether the server closes `stream` within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn one_peer_holds_at_most_its_connection_limit_and_another_peer_is_served() {
    let app = TestApp::spawn_with(|s| s.max_connections_per_peer = 4).await;
    let hog = Ipv4Addr::new(127, 0, 0, 3);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(hog, app.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fifth = connect_from(hog, app.addr).await;
    let refused = closed_within(&mut fifth, Duration::from_secs(2)).await;
    let mut good = connect_from(Ipv4Addr::new(127, 0, 0, 4), app.addr).await;
    let served = queues_over(&mut good, Some("conn")).await;
    let still_open = !closed_within(&mut held[0], Duration::from_millis(300)).await;
    assert_eq!(
        (refused, served.0.as_str(), still_open),
        (true, "http/1.1 200 ok", true)
    );
    assert_eq!(
        metric(
            &app,
            "muster_http_connections_refused_total",
            "{reason=\"peer\"}"
        )
        .await,
        1
    );
}

/// 200 connections that dribble a request head a byte at a time: one peer gets 64 of them
/// (the rest are closed at once), those are closed at the header-read timeout, the connection
/// share never holds more than they cost, and a worker on another address is served.
#[tokio::test]
async fn slow_heads_from_one_peer_hold_at_most_its_limit_and_a_worker_is_served() {
    let app = TestApp::spawn_with(|s| s.server.header_read_timeout = Duration::from_secs(2)).await;
    let slow = Ipv4Addr::new(127, 0, 0, 5);
    let mut dribblers = Vec::new();
    for _ in 0..200 {
        let mut s = connect_from(slow, app.addr).await;
        dribblers.push(tokio::spawn(async move {
            let head = b"GET /v1/queues HTTP/1.1\r\nHost: muster\r\n";
            for b in head {
                if s.write_all(&[*b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let used = metric(&app, "muster_memory_connection_used_bytes", "").await;
    let mut good = connect_from(Ipv4Addr::new(127, 0, 0, 6), app.addr).await;
    let served = queues_over(&mut good, Some("conn")).await;
    let refused = metric(
        &app,
        "muster_http_connections_refused_total",
        "{reason=\"peer\"}",
    )
    .await;
    // 64 slow heads and the scrape's connection, at 18 KiB each.
    assert!(used <= 65 * 18 * 1024, "{used} bytes of connections held");
    assert_eq!((served.0.as_str(), refused), ("http/1.1 200 ok", 136));
}

/// Past the public three quarters of the connection share, a connection without a token is
/// answered once and closed, while one with a token stays: at 24 MiB the public part holds
/// 199 connections.
#[tokio::test]
async fn past_the_public_share_only_an_authenticated_connection_stays() {
    let (app, _idle) = public_share_taken().await;
    let mut anonymous = connect_from(Ipv4Addr::new(127, 0, 0, 8), app.addr).await;
    let (status, close) = queues_over(&mut anonymous, None).await;
    let anonymous_closed = closed_within(&mut anonymous, Duration::from_secs(2)).await;
    let mut worker = connect_from(Ipv4Addr::new(127, 0, 0, 9), app.addr).await;
    let first = queues_over(&mut worker, Some("conn")).await;
    let second = queues_over(&mut worker, Some("conn")).await;
    assert_eq!(
        (status.as_str(), close, anonymous_closed),
        ("http/1.1 401 unauthorized", true, true)
    );
    assert_eq!(
        (first, second),
        (
            ("http/1.1 200 ok".to_owned(), false),
            ("http/1.1 200 ok".to_owned(), false)
        )
    );
}

/// A server whose connection share's public part is taken by 199 idle connections of one peer
/// (kept open while the answer lives).
async fn public_share_taken() -> (TestApp, Vec<TcpStream>) {
    let app = TestApp::spawn_with(|s| {
        s.memory_budget = 24 * 1024 * 1024;
        s.max_connections_per_peer = 1_000;
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..199 {
        idle.push(connect_from(Ipv4Addr::new(127, 0, 0, 7), app.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    (app, idle)
}

#[tokio::test]
async fn past_the_public_share_a_made_up_token_on_a_route_that_checks_none_does_not_keep_a_connection()
 {
    let (app, _idle) = public_share_taken().await;
    let mut pretender = connect_from(Ipv4Addr::new(127, 0, 0, 8), app.addr).await;
    let (status, close) = get_over(&mut pretender, "/healthz", Some("made-up")).await;
    let closed = closed_within(&mut pretender, Duration::from_secs(2)).await;
    assert_eq!(
        (status.as_str(), close, closed),
        ("http/1.1 200 ok", true, true)
    );
}
