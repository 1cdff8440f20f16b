//! The server loop: hyper 1 connections with a header-read timeout, a per-request timeout, and
//! graceful shutdown that drains requests in flight.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use crate::error::ApiError;

/// Timeouts and drain period of the server.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// A client must send its request headers within this time.
    pub header_read_timeout: Duration,
    /// A request must be answered within this time (long polls wait at most 30 s).
    pub request_timeout: Duration,
    /// After shutdown is requested, requests in flight get this long to finish.
    pub drain_timeout: Duration,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(45),
            drain_timeout: Duration::from_secs(25),
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
    let request_timeout = settings.request_timeout;
    let router = router.layer(axum::middleware::from_fn(
        move |req: Request<Body>, next: axum::middleware::Next| async move {
            match tokio::time::timeout(request_timeout, next.run(req)).await {
                Ok(res) => res,
                Err(_) => ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "E_UNAVAILABLE",
                    "the request timed out",
                )
                .into_response(),
            }
        },
    ));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let svc = TowerToHyperService::new(router.clone());
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                let conn = graceful.watch(conn.into_owned());
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(settings.drain_timeout) => tracing::warn!("drain timeout passed; closing remaining connections"),
    }
}
