//! What the server watches on each connection: whether a request is in flight (its answer,
//! a live feed included, still open) and since when none is, so that a connection that sends
//! no request head within the header-read timeout of connect (whatever the protocol: the
//! protocol detection of HTTP/1 versus HTTP/2 has no timer of its own) and one idle for the
//! idle timeout are closed; and the count of connections refused over the cap.

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::Request;
use axum::response::Response;
use hyper::body::Incoming;
use tokio::time::Instant;
use tower_service::Service;

use crate::extract::Peer;
use crate::watched_body::{Watch, watched};

/// How long a connection may go without a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleLimits {
    /// From connect to the first request head.
    pub first_request: Duration,
    /// From the end of the last answer to the next request.
    pub idle: Duration,
}

#[derive(Debug)]
struct State {
    in_flight: u32,
    served: bool,
    since: Instant,
}

/// Requests in flight on one connection and since when it has been idle.
#[derive(Debug)]
pub(crate) struct Activity(Mutex<State>);

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Activity(Mutex::new(State {
            in_flight: 0,
            served: false,
            since: Instant::now(),
        })))
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn open(self: &Arc<Self>) -> Open {
        self.with(|s| {
            s.in_flight += 1;
            s.served = true;
        });
        Open(Arc::clone(self))
    }

    /// When the connection is due to be closed if nothing happens; `None` while a request is
    /// in flight.
    fn deadline(&self, limits: IdleLimits) -> Option<Instant> {
        self.with(|s| {
            (s.in_flight == 0).then(|| {
                s.since
                    + if s.served {
                        limits.idle
                    } else {
                        limits.first_request
                    }
            })
        })
    }
}

/// One request in flight, until its answer's body is dropped (sent whole or cut).
#[derive(Debug)]
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.with(|s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            s.since = Instant::now();
        });
    }
}

/// The router, counting the requests in flight on its connection.
#[derive(Clone)]
pub(crate) struct Tracked {
    router: Router,
    activity: Arc<Activity>,
    /// The connection's remote address, handed to each request as [`Peer`].
    peer: IpAddr,
}

impl Tracked {
    pub(crate) fn new(router: Router, activity: Arc<Activity>, peer: IpAddr) -> Self {
        Tracked {
            router,
            activity,
            peer,
        }
    }
}

impl Service<Request<Incoming>> for Tracked {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Incoming>) -> Self::Future {
        req.extensions_mut().insert(Peer(self.peer));
        let open = self.activity.open();
        let answer = self.router.call(req);
        Box::pin(async move {
            let res = answer.await?;
            Ok(res.map(|inner| watched(inner, open)))
        })
    }
}

/// Beside an answer's body, keeps its request counted as in flight while the body lives.
impl Watch for Open {
    fn ends_body(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }
}

/// Drives `conn` until it ends, or drops it (closing the socket) when it has had no request
/// in flight for as long as `limits` allow.
pub(crate) async fn guard<E: Display>(
    conn: impl Future<Output = Result<(), E>>,
    activity: &Activity,
    limits: IdleLimits,
) {
    tokio::pin!(conn);
    // Woken at the earlier limit first: by then a request may have come and gone.
    let timer = tokio::time::sleep(limits.first_request.min(limits.idle));
    tokio::pin!(timer);
    loop {
        tokio::select! {
            ended = &mut conn => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut timer => {
                let now = Instant::now();
                match activity.deadline(limits) {
                    Some(due) if due <= now => {
                        tracing::debug!("closing a connection that sent no request in time");
                        return;
                    }
                    Some(due) => timer.as_mut().reset(due),
                    None => timer.as_mut().reset(now + limits.idle),
                }
            }
        }
    }
}

/// Connections closed at accept because the cap was reached; logged at most every 10 s.
#[derive(Debug, Default)]
pub(crate) struct RefusedConnections {
    unreported: u64,
    reported_at: Option<Instant>,
}

impl RefusedConnections {
    pub(crate) fn count(&mut self, cap: usize) {
        self.unreported += 1;
        let due = self
            .reported_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
        if due {
            tracing::warn!(
                refused = self.unreported,
                max_connections = cap,
                "connections over the cap were closed at once"
            );
            self.unreported = 0;
            self.reported_at = Some(Instant::now());
        }
    }
}
