//! The server loop: hyper 1 connections (HTTP/1 or HTTP/2) admitted against a connection cap,
//! the memory budget's connection share ([`crate::budget::MemoryBudget`]) with a reserve only
//! authenticated connections may use, and a per-peer limit; a request head within the
//! header-read timeout of connect whatever the protocol, HTTP/2 keep-alive pings, an idle
//! timeout and a write-stall limit on answers, flow control included ([`crate::conn_guard`]), a write-stall limit
//! on the socket ([`crate::stall`]); HTTP/2 with few streams and small windows (their cost is
//! charged to the budget); a per-request timeout, and graceful shutdown that drains requests in
//! flight.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::budget::MemoryBudget;
use crate::conn_guard::{
    Activity, Admitted, IdleLimits, Peers, RefusedConnections, Tracked, guard,
};
use crate::error::ApiError;
use crate::stall::WriteStall;

/// The default connection cap. The memory budget's connection share binds first (796
/// connections at the default budget); this is the count no budget raises it past.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The default limit of connections open from one peer (one IP address): a peer cannot hold
/// the connection share alone.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: u32 = 64;

/// HTTP/2: streams one connection may have open at once.
pub const HTTP2_MAX_STREAMS: u32 = 32;
/// HTTP/2: the receive window of a new stream: what a client may send of a body before the
/// server reads it (a body is read once the body budget admitted it). At most
/// [`crate::budget::SMALL_BODY`], the size the body budget does not count.
pub const HTTP2_STREAM_WINDOW: u32 = 16 * 1024;
/// HTTP/2: the connection's receive window, the protocol's initial (and least) one: the most
/// a connection's streams hold together before their bodies are read, charged to the memory
/// budget with the connection ([`crate::budget::HTTP2_COST`]).
pub const HTTP2_CONNECTION_WINDOW: u32 = 65_535;
/// HTTP/2: the bytes of answers a stream buffers beyond its peer's window before the server
/// stops producing more for it (the feed's largest write).
pub const HTTP2_SEND_BUFFER: usize = 32 * 1024;
/// Live-feed streams one connection may have open at once.
pub const MAX_FEED_STREAMS_PER_CONNECTION: u32 = 16;

/// The largest request head (request line and headers) the server reads: beyond it HTTP/1 is
/// answered `431` and closed, HTTP/2 refuses the stream. Muster's callers send a few hundred
/// bytes (a 68-character bearer token); the limit is hyper's smallest read buffer, which an
/// HTTP/1 connection keeps for its whole life: with hyper's default (~400 KiB) the first read
/// after protocol detection doubles it to 16 KiB, 8 KiB more for every live-feed subscriber
/// (docs/benchmarks.md, "Memory of 1,000 SSE subscribers").
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// Timeouts and drain period of the server.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// A client must send its request headers within this time: the first request's from
    /// connect (whatever the protocol), HTTP/1's next ones from the end of the previous answer.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight (no open answer, a live feed included) for this
    /// long is closed. HTTP/1's keep-alive connections are closed sooner, by the header-read
    /// timeout; this bounds HTTP/2's, which hold no request head timer.
    pub idle_timeout: Duration,
    /// HTTP/2: a ping is sent after this long without a frame from the client, and the
    /// connection is closed when its answer does not come within as long again.
    pub http2_keep_alive: Duration,
    /// Open connections at most (`--max-connections`); one over the cap is closed at once.
    pub max_connections: usize,
    /// Open connections of one peer at most (`--max-connections-per-peer`); one more is closed
    /// at once.
    pub max_connections_per_peer: u32,
    /// The memory budget: connections are admitted against its connection share.
    pub memory: MemoryBudget,
    /// A request must be answered within this time (long polls wait at most 30 s).
    pub request_timeout: Duration,
    /// After shutdown is requested, requests in flight get this long to finish.
    pub drain_timeout: Duration,
    /// After shutdown is requested and before idle connections are closed, every answer
    /// carries `Connection: close` for this long, so that busy keep-alive clients close their
    /// connections themselves instead of racing a request against the server's close.
    pub lame_duck: Duration,
    /// How long a request waits for room in the body budget before it is answered 503
    /// ([`crate::budget`]).
    pub body_wait: Duration,
    /// How long a request body may take to arrive whole; a slower one is answered 503.
    pub body_read_deadline: Duration,
    /// A connection whose peer takes no byte of a waiting write for this long is closed
    /// ([`crate::stall`]): a live-feed subscriber that stopped reading altogether, whose stream
    /// is never written again, so the slow-subscriber rule would never cut it loose. So is a
    /// connection with an answer whose last write its peer has not taken for this long, flow
    /// control included (an HTTP/2 stream without window: [`crate::conn_guard`]; seen within
    /// twice this long).
    pub write_stall: Duration,
    /// Development only: a directory served under `/dev/web/` ([`crate::dev_web`]); `None`
    /// (the default) means no such route.
    pub dev_web_dir: Option<std::path::PathBuf>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            http2_keep_alive: Duration::from_secs(20),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            memory: MemoryBudget::default(),
            request_timeout: Duration::from_secs(45),
            drain_timeout: Duration::from_secs(25),
            lame_duck: Duration::from_secs(1),
            body_wait: Duration::from_secs(5),
            body_read_deadline: Duration::from_secs(10),
            write_stall: Duration::from_secs(30),
            dev_web_dir: None,
        }
    }
}

/// Runs a request under the request timeout. The timeout covers producing the response head:
/// a streaming body (the live feed) is not cut by it.
async fn timed(req: Request<Body>, next: axum::middleware::Next, limit: Duration) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(res) => res,
        Err(_) => {
            // The request's own line ("no answer", with its id) was logged when its future
            // was dropped; this one says why.
            tracing::warn!(
                timeout_s = limit.as_secs_f64(),
                "a request timed out and was answered 503"
            );
            ApiError::unavailable_because("the request timed out").into_response()
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting, lets requests
/// in flight finish (up to the drain timeout) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()> + Send,
) {
    let router = crate::dev_web::mount(router, settings.dev_web_dir.as_deref())
        .layer(axum::middleware::from_fn(crate::screen::uri));
    let request_timeout = settings.request_timeout;
    let draining = Arc::new(AtomicBool::new(false));
    let closing = draining.clone();
    let router = router.layer(axum::middleware::from_fn(
        move |req: Request<Body>, next: axum::middleware::Next| {
            let closing = closing.clone();
            async move {
                let mut res = timed(req, next, request_timeout).await;
                if closing.load(Ordering::Relaxed) {
                    res.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                res
            }
        },
    ));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_buf_size(MAX_REQUEST_HEAD)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.http2_keep_alive)
        .keep_alive_timeout(settings.http2_keep_alive)
        .max_header_list_size(MAX_REQUEST_HEAD as u32)
        .max_concurrent_streams(HTTP2_MAX_STREAMS)
        .initial_stream_window_size(HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
        .adaptive_window(false)
        .max_send_buf_size(HTTP2_SEND_BUFFER);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let mut refused = RefusedConnections::default();
    let peers = Peers::default();
    let memory = settings.memory.clone();
    let reserve = memory.authenticated_reserve();
    let limits = IdleLimits {
        first_request: settings.header_read_timeout,
        idle: settings.idle_timeout,
        write_stall: settings.write_stall,
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Refused ones are closed at once, not left to wait in the accept queue.
                let Some(peer_slot) = peers.admit(peer.ip(), settings.max_connections_per_peer) else {
                    drop(stream);
                    memory.refusals.peer.fetch_add(1, Ordering::Relaxed);
                    refused.count("the peer's connection limit");
                    continue;
                };
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    drop(stream);
                    memory.refusals.full.fetch_add(1, Ordering::Relaxed);
                    refused.count("the connection cap");
                    continue;
                };
                // Past the public part of the connection share, a connection is let in on
                // probation: it stays only if it authenticates.
                let (room, probation) = match memory.admit_connection(reserve) {
                    Some(room) => (room, false),
                    None => match memory.admit_connection(0) {
                        Some(room) => (room, true),
                        None => {
                            drop(stream);
                            memory.refusals.full.fetch_add(1, Ordering::Relaxed);
                            refused.count("the memory budget's connection share");
                            continue;
                        }
                    },
                };
                let _ = stream.set_nodelay(true);
                let activity = Activity::new(probation.then(|| Arc::clone(&memory.refusals)));
                let svc = TowerToHyperService::new(Tracked::new(router.clone(), activity.clone(), peer.ip()));
                let conn = builder.serve_connection_with_upgrades(
                    TokioIo::new(WriteStall::new(Admitted::new(stream, memory.clone(), if probation { 0 } else { reserve }), settings.write_stall)),
                    svc,
                );
                let conn = graceful.watch(conn.into_owned());
                tokio::spawn(async move {
                    guard(conn, &activity, limits).await;
                    drop((slot, room, peer_slot));
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // Lame duck: answers now close their connections; then idle connections are closed.
    draining.store(true, Ordering::Relaxed);
    tokio::time::sleep(settings.lame_duck).await;
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(settings.drain_timeout) => tracing::warn!("drain timeout passed; closing remaining connections"),
    }
}
