//! What the server watches on each connection: whether a request is in flight (its answer,
//! a live feed included, still open) and since when none is, so that a connection that sends
//! no request head within the header-read timeout of connect (whatever the protocol: the
//! protocol detection of HTTP/1 versus HTTP/2 has no timer of its own) and one idle for the
//! idle timeout are closed; the answers whose last write (or whose head) its peer has not
//! taken (closed with the connection after the write-stall limit, flow control included: an
//! HTTP/2 stream with no window is never polled, so nothing else would see it); the live-feed
//! streams on each connection; whether a connection
//! let in on the authenticated callers' reserve authenticated; the connections of each peer;
//! an HTTP/2 connection's share of the memory budget; and the count of connections refused.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Request, header};
use axum::response::Response;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower_service::Service;

use crate::budget::{ConnectionRoom, MemoryBudget, Refusals};
use crate::extract::Peer;
use crate::watched_body::{Watch, watched};

/// How long a connection may go without a request, and a feed stream without its peer taking
/// its last write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdleLimits {
    /// From connect to the first request head.
    pub first_request: Duration,
    /// From the end of the last answer to the next request.
    pub idle: Duration,
    /// From a feed stream's write to the peer's taking it (socket and flow control).
    pub write_stall: Duration,
}

#[derive(Debug)]
struct State {
    in_flight: u32,
    served: bool,
    since: Instant,
    /// Answers whose last write (or head) the peer has not taken, and since when.
    waiting: Vec<(u64, Instant)>,
    subscribers: u32,
    next_stream: u64,
    /// Let in on the authenticated callers' reserve: closed after its first answer to a
    /// request that did not authenticate, unless one did.
    probation: bool,
    authenticated: bool,
    evict: bool,
}

/// Requests in flight on one connection, since when it has been idle, and its feed streams.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
    /// Wakes the guard when a deadline may have come nearer.
    wake: Notify,
    /// On probation: where an eviction is counted.
    probation: Option<Arc<Refusals>>,
}

impl Activity {
    /// A connection's activity; `probation` (where an eviction is counted) for one let in on
    /// the authenticated callers' reserve.
    pub(crate) fn new(probation: Option<Arc<Refusals>>) -> Arc<Self> {
        Arc::new(Activity {
            state: Mutex::new(State {
                in_flight: 0,
                served: false,
                since: Instant::now(),
                waiting: Vec::new(),
                subscribers: 0,
                next_stream: 0,
                probation: probation.is_some(),
                authenticated: false,
                evict: false,
            }),
            wake: Notify::new(),
            probation,
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn open(self: &Arc<Self>) -> Open {
        let id = self.with(|s| {
            s.in_flight += 1;
            s.served = true;
            s.next_stream += 1;
            s.next_stream
        });
        Open {
            activity: Arc::clone(self),
            id,
            waiting: false,
            answered: false,
        }
    }

    /// An answer is ready: on probation, whether its request authenticated decides whether
    /// the connection stays. True when the answer must close the connection.
    fn answered(&self, authenticated: bool) -> bool {
        if self.probation.is_none() {
            return false;
        }
        let evict = self.with(|s| {
            if !s.probation || s.authenticated {
                return false;
            }
            if authenticated {
                // Another stream's unauthenticated answer no longer closes it either.
                s.authenticated = true;
                s.evict = false;
                false
            } else {
                s.evict = true;
                true
            }
        });
        if let (true, Some(refusals)) = (evict, &self.probation) {
            refusals.unauthenticated.fetch_add(1, Ordering::Relaxed);
            self.wake.notify_one();
        }
        evict
    }

    /// When the connection is due to be closed if nothing happens, and why; `None` while a
    /// request is in flight and no answer waits on its peer.
    fn deadline(&self, limits: IdleLimits) -> Option<(Instant, &'static str)> {
        self.with(|s| {
            let idle = (s.in_flight == 0).then(|| {
                if s.evict {
                    (
                        s.since,
                        "a connection on the authenticated reserve did not authenticate",
                    )
                } else if s.served {
                    (s.since + limits.idle, "idle")
                } else {
                    (s.since + limits.first_request, "no request in time")
                }
            });
            let stalled = s.waiting.iter().map(|&(_, at)| at).min().map(|at| {
                (
                    at + limits.write_stall,
                    "an answer's peer took none of its last write for the write-stall limit",
                )
            });
            match (idle, stalled) {
                (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
                (a, b) => a.or(b),
            }
        })
    }
}

/// One request in flight, until its answer's body is dropped (sent whole or cut); from the
/// answer's being ready, and from each write of it, until its body is next asked for, it
/// waits on its peer (the socket and, for HTTP/2, the stream's window: a stream opened
/// without window is never asked for its body at all).
#[derive(Debug)]
struct Open {
    activity: Arc<Activity>,
    id: u64,
    waiting: bool,
    /// Its answer was ready (a request cancelled before, by an HTTP/2 reset say, never is).
    answered: bool,
}

impl Open {
    fn wait_on_peer(&mut self) {
        let (id, now) = (self.id, Instant::now());
        self.activity.with(|s| s.waiting.push((id, now)));
        self.waiting = true;
    }

    fn taken(&mut self) {
        if self.waiting {
            let id = self.id;
            self.activity.with(|s| s.waiting.retain(|&(w, _)| w != id));
            self.waiting = false;
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let (id, waiting, answered) = (self.id, self.waiting, self.answered);
        let evict = self.activity.with(|s| {
            if waiting {
                s.waiting.retain(|&(w, _)| w != id);
            }
            s.in_flight = s.in_flight.saturating_sub(1);
            s.since = Instant::now();
            // On probation, a request given up before its answer does not keep the
            // connection either (else resetting every stream would).
            if !answered && s.probation && !s.authenticated {
                s.evict = true;
            }
            s.evict
        });
        if evict {
            self.activity.wake.notify_one();
        }
    }
}

/// Beside an answer's body, keeps its request counted as in flight while the body lives, and
/// notes when it waits on its peer.
impl Watch for Open {
    fn ends_body(&mut self, _cx: &mut Context<'_>) -> bool {
        self.taken();
        false
    }

    fn sent(&mut self) {
        self.wait_on_peer();
    }
}

/// The connection a request came on, in the request's extensions (the live feed counts its
/// streams on it).
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle(Arc<Activity>);

impl ConnHandle {
    /// A feed stream's place on this connection, if it has fewer than `max`.
    pub(crate) fn admit_stream(&self, max: u32) -> Option<FeedStream> {
        let admitted = self.0.with(|s| {
            let room = s.subscribers < max;
            if room {
                s.subscribers += 1;
            }
            room
        });
        admitted.then(|| FeedStream(Arc::clone(&self.0)))
    }
}

/// A live-feed stream's place on its connection, beside the answer's body while it lives.
#[derive(Debug)]
pub(crate) struct FeedStream(Arc<Activity>);

impl Watch for FeedStream {
    fn ends_body(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }
}

impl Drop for FeedStream {
    fn drop(&mut self) {
        self.0
            .with(|s| s.subscribers = s.subscribers.saturating_sub(1));
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
        let mut open = self.activity.open();
        let authenticated = crate::extract::TokenAccepted::default();
        req.extensions_mut().insert(authenticated.clone());
        req.extensions_mut()
            .insert(ConnHandle(Arc::clone(&self.activity)));
        let activity = Arc::clone(&self.activity);
        let answer = self.router.call(req);
        Box::pin(async move {
            let mut res = answer.await?;
            // Whether a token of this request named a principal (not merely whether one was
            // sent: a route that checks none answers a made-up one too).
            open.answered = true;
            if activity.answered(authenticated.get()) {
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            open.wait_on_peer();
            Ok(res.map(|inner| watched(inner, open)))
        })
    }
}

/// Drives `conn` until it ends, or drops it (closing the socket) when it has had no request
/// in flight for as long as `limits` allow, an answer's peer took none of its last write
/// within the write-stall limit (seen within twice the limit: the guard looks at least that
/// often while requests are in flight), or it is on probation and did not authenticate.
pub(crate) async fn guard<E: Display>(
    conn: impl Future<Output = Result<(), E>>,
    activity: &Activity,
    limits: IdleLimits,
) {
    tokio::pin!(conn);
    // Woken at the earlier limit first: by then a request may have come and gone.
    let timer = tokio::time::sleep(
        limits
            .first_request
            .min(limits.idle)
            .min(limits.write_stall),
    );
    tokio::pin!(timer);
    loop {
        tokio::select! {
            ended = &mut conn => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut timer => {}
            () = activity.wake.notified() => {}
        }
        let now = Instant::now();
        match activity.deadline(limits) {
            Some((due, why)) if due <= now => {
                tracing::debug!(why, "closing a connection");
                return;
            }
            // At least every write-stall limit: an answer may start to wait meanwhile.
            Some((due, _)) => timer.as_mut().reset(due.min(now + limits.write_stall)),
            None => timer.as_mut().reset(now + limits.write_stall),
        }
    }
}

/// The connections open from each peer (per replica: these are this process's sockets).
#[derive(Debug, Clone, Default)]
pub(crate) struct Peers(Arc<Mutex<HashMap<IpAddr, u32>>>);

/// One connection of a peer, given back when dropped.
#[derive(Debug)]
pub(crate) struct PeerSlot {
    peers: Peers,
    ip: IpAddr,
}

impl Peers {
    /// A place for one more connection of `ip`, if it has fewer than `max`.
    pub(crate) fn admit(&self, ip: IpAddr, max: u32) -> Option<PeerSlot> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let open = map.entry(ip).or_insert(0);
        if *open >= max {
            return None;
        }
        *open += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self.peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = map.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// The bytes of the HTTP/2 connection preface ("PRI * HTTP/2.0").
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection's socket that, when its first bytes are (the start of) the HTTP/2 preface,
/// takes an HTTP/2 connection's share of the memory budget ([`crate::budget::HTTP2_COST`]) or
/// fails the read, closing the connection.
#[derive(Debug)]
pub(crate) struct Admitted<T> {
    inner: T,
    budget: Option<MemoryBudget>,
    /// Bytes of the share the HTTP/2 charge must leave free (the authenticated callers'
    /// reserve, unless the connection was let in on it).
    keep: u64,
    _http2: Option<ConnectionRoom>,
}

impl<T> Admitted<T> {
    pub(crate) fn new(inner: T, budget: MemoryBudget, keep: u64) -> Self {
        Admitted {
            inner,
            budget: Some(budget),
            keep,
            _http2: None,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Admitted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = &buf.filled()[before..];
        if r.is_ready()
            && !read.is_empty()
            && let Some(budget) = self.budget.take()
        {
            let n = read.len().min(HTTP2_PREFACE.len());
            if read[..n] == HTTP2_PREFACE[..n] {
                match budget.admit_http2(self.keep) {
                    Some(room) => self._http2 = Some(room),
                    None => {
                        budget.refusals.http2.fetch_add(1, Ordering::Relaxed);
                        return Poll::Ready(Err(io::Error::other(
                            "no room in the memory budget for an HTTP/2 connection",
                        )));
                    }
                }
            }
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Admitted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Connections closed at accept (over the cap, the memory budget's connection share or the
/// peer's limit); logged at most every 10 s.
#[derive(Debug, Default)]
pub(crate) struct RefusedConnections {
    unreported: u64,
    reported_at: Option<Instant>,
}

impl RefusedConnections {
    pub(crate) fn count(&mut self, why: &'static str) {
        self.unreported += 1;
        let due = self
            .reported_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
        if due {
            tracing::warn!(
                refused = self.unreported,
                why,
                "connections were closed at accept"
            );
            self.unreported = 0;
            self.reported_at = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The first read of a connection whose peer sent `bytes`, through [`Admitted`] (kept:
    /// what it took of the budget is held while it lives).
    async fn first_read(
        budget: &MemoryBudget,
        bytes: &[u8],
    ) -> (io::Result<usize>, Admitted<tokio::io::DuplexStream>) {
        first_read_keeping(budget, bytes, 0).await
    }

    /// [`first_read`] of a connection whose HTTP/2 charge must leave `keep` bytes free.
    async fn first_read_keeping(
        budget: &MemoryBudget,
        bytes: &[u8],
        keep: u64,
    ) -> (io::Result<usize>, Admitted<tokio::io::DuplexStream>) {
        let (mut peer, ours) = tokio::io::duplex(1024);
        peer.write_all(bytes).await.unwrap();
        let mut admitted = Admitted::new(ours, budget.clone(), keep);
        let mut buf = [0u8; 64];
        (admitted.read(&mut buf).await, admitted)
    }

    /// A budget whose connection share is full of HTTP/1 connections.
    fn full() -> (MemoryBudget, Vec<ConnectionRoom>) {
        let budget = MemoryBudget::default();
        let rooms = std::iter::from_fn(|| budget.admit_connection(0)).collect();
        (budget, rooms)
    }

    #[tokio::test]
    async fn an_http2_preface_takes_an_http2_connections_share() {
        let budget = MemoryBudget::default();
        let (read, _conn) = first_read(&budget, HTTP2_PREFACE).await;
        assert_eq!(
            (read.unwrap(), budget.connection_bytes_used()),
            (HTTP2_PREFACE.len(), crate::budget::HTTP2_COST)
        );
    }

    #[tokio::test]
    async fn an_http2_preface_without_room_for_it_fails_the_read() {
        let (budget, _rooms) = full();
        let err = first_read(&budget, HTTP2_PREFACE).await.0.unwrap_err();
        assert_eq!(
            (err.kind(), budget.refusals.http2.load(Ordering::Relaxed)),
            (io::ErrorKind::Other, 1)
        );
    }

    #[tokio::test]
    async fn an_http2_preface_of_a_connection_let_in_outside_the_reserve_leaves_the_reserve_free() {
        let budget = MemoryBudget::default();
        let reserve = budget.authenticated_reserve();
        let _rooms: Vec<_> = std::iter::from_fn(|| budget.admit_connection(reserve)).collect();
        let err = first_read_keeping(&budget, HTTP2_PREFACE, reserve)
            .await
            .0
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Other);
    }

    #[tokio::test]
    async fn an_http1_request_needs_no_http2_share() {
        let (budget, _rooms) = full();
        let head = b"PUT /v1/kinds/trawl/paused HTTP/1.1\r\n";
        assert_eq!(first_read(&budget, head).await.0.unwrap(), head.len());
    }

    fn evicted(activity: &Activity) -> bool {
        activity.with(|s| s.evict)
    }

    #[test]
    fn on_probation_a_request_given_up_before_its_answer_closes_the_connection() {
        let activity = Activity::new(Some(Arc::default()));
        drop(activity.open());
        assert!(evicted(&activity));
    }

    #[test]
    fn outside_probation_a_request_given_up_before_its_answer_closes_nothing() {
        let activity = Activity::new(None);
        drop(activity.open());
        assert!(!evicted(&activity));
    }

    #[test]
    fn on_probation_an_authenticated_answer_keeps_the_connection_after_an_unauthenticated_one() {
        let activity = Activity::new(Some(Arc::default()));
        activity.answered(false);
        activity.answered(true);
        assert!(!evicted(&activity));
    }

    #[test]
    fn a_peer_holds_at_most_its_limit_and_a_closed_connection_gives_its_place_back() {
        let peers = Peers::default();
        let ip = IpAddr::from([10, 0, 0, 1]);
        let first = peers.admit(ip, 2);
        let second = peers.admit(ip, 2);
        let third = peers.admit(ip, 2).is_some();
        let other = peers.admit(IpAddr::from([10, 0, 0, 2]), 2).is_some();
        drop(first);
        let again = peers.admit(ip, 2).is_some();
        assert!(second.is_some());
        assert_eq!((third, other, again), (false, true, true));
    }
}
