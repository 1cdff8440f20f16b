//! The memory budget ([`MemoryBudget`]): one figure (`--memory-budget`) split into the shares
//! of every place a client can make the server hold bytes — request bodies, connections (their
//! buffers and HTTP/2 receive windows), live-feed subscribers and their replay pages, and
//! token reviews — each admitted against its share, refused with 503 (or, for a connection,
//! closed at accept) over it. The split is the table in docs/operations.md, "Memory".
//!
//! The body budget: how many bytes of large request bodies the server holds at once.
//!
//! A request body costs the server several times its size while it is handled: the raw bytes,
//! the parsed JSON, the canonical form hashed for idempotency, the ledger entry that records
//! it and the statement parameters that carry it to PostgreSQL. Without a bound, a burst of
//! large results takes the pod far past its memory request: 32 concurrent completions of
//! 1 MB each peaked at 279 MiB resident; with the default budget of 2 MiB, at 30 MiB
//! (docs/operations.md).
//!
//! A request whose body is declared larger than [`SMALL_BODY`] (or of a length not known before
//! it is read)
//! is authenticated first, then reserves its `Content-Length` before its body is read, and
//! gives it back when its answer is ready. One that finds no room waits for it, its unread
//! body left in the socket, up to `ServerSettings::body_wait` (5 s); then it is answered
//! `503 E_UNAVAILABLE` with `Retry-After`, which every worker retries. Small bodies —
//! leases, heartbeats, failures, the completions of most workers — are not counted, so they
//! never wait behind a large one. Every body must arrive within the read deadline
//! ([`crate::extract::read_limited`]), so a stalled sender cannot keep its room for long. The
//! middleware that authenticates and reserves is [`crate::extract`]'s `hold`: this module only
//! counts.
//!
//! The edit intake routes are not counted: their bodies are cut at 4 KiB.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::http::header;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The largest JSON body a worker, operator or Shipkeeper call may send.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// Bodies declared at most this large are not counted.
pub const SMALL_BODY: u64 = 16 * 1024;

/// Large request bodies in flight, counted in KiB, and how long a body may take to arrive.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    room: Arc<Semaphore>,
    capacity_kib: u32,
    wait: Duration,
    read_deadline: Duration,
    /// Requests answered 503 because no room came within the wait.
    pub(crate) refused: Counter,
}

impl BodyBudget {
    /// A budget of `bytes`, a request waiting up to `wait` for room (one body of the largest
    /// size always fits, whatever `bytes`), every body arriving within `read_deadline`.
    pub fn new(bytes: u64, wait: Duration, read_deadline: Duration) -> Self {
        let capacity_kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        BodyBudget {
            room: Arc::new(Semaphore::new(capacity_kib as usize)),
            capacity_kib,
            wait,
            read_deadline,
            refused: Counter::default(),
        }
    }

    /// How long a request body may take to arrive whole.
    pub fn read_deadline(&self) -> Duration {
        self.read_deadline
    }

    /// Bytes reserved by the large bodies in flight now.
    pub(crate) fn used_bytes(&self) -> u64 {
        let free = self.room.available_permits() as u64;
        (u64::from(self.capacity_kib).saturating_sub(free)) * 1024
    }

    /// The KiB a request reserves: none for a small body (or none at all); its declared
    /// length up to the body limit (a body that says it is longer is refused when read); the
    /// body limit when its length is not known before it is read (HTTP/1 chunked, or an
    /// HTTP/2 stream without `content-length`). Never more than the whole budget, so that
    /// one largest body always fits.
    pub(crate) fn charge(&self, req: &Request<Body>) -> u32 {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        // The transport knows a body's length when it has one: a declared length, or an
        // HTTP/1 request without one (no body) or an HTTP/2 stream ended with its headers.
        let known = declared.or_else(|| req.body().size_hint().exact());
        let bytes = match known {
            Some(n) if n <= SMALL_BODY => return 0,
            Some(n) => n.min(BODY_LIMIT as u64),
            None => BODY_LIMIT as u64,
        };
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.capacity_kib)
    }

    /// Reserves `kib` of the budget, waiting up to the budget's wait for room; without room
    /// by then, the request is refused (and counted).
    pub(crate) async fn reserve(&self, kib: u32) -> Result<OwnedSemaphorePermit, ApiError> {
        let reserved =
            tokio::time::timeout(self.wait, Arc::clone(&self.room).acquire_many_owned(kib)).await;
        match reserved {
            Ok(Ok(permit)) => Ok(permit),
            // Timed out (or, never, closed): too many large bodies in flight.
            _ => {
                self.refused.inc();
                Err(ApiError::unavailable_because(
                    "the server is handling as many large request bodies as its memory allows; retry shortly",
                ))
            }
        }
    }
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The default memory budget: the pod's memory request (deploy/k8s/deployment.yaml; the
/// Deployment's limit, 128 MiB, is the hard ceiling the budget stays under).
pub const DEFAULT_MEMORY_BUDGET: u64 = 48 * MIB;
/// The smallest budget: the baseline and one of everything.
pub const MIN_MEMORY_BUDGET: u64 = 24 * MIB;
/// What the server holds whatever its clients do — code, runtime, the Logbook pool, the
/// feed's shared buffer, metrics — not admitted, set aside first (an idle server is 9–11 MiB).
pub const BASELINE: u64 = 12 * MIB;
/// Handling a request body costs several times its size (raw bytes, parsed JSON, canonical
/// form, ledger entry, statement parameters; docs/operations.md measures it): the bodies'
/// share is charged at its size divided by this.
pub const BODY_HANDLING_FACTOR: u64 = 6;
/// A connection, charged at accept: hyper's read and write buffers (8 KiB each at
/// `MAX_REQUEST_HEAD`) and its task (measured 17.6 KiB for an HTTP/1 subscriber).
pub const CONNECTION_COST: u64 = 18 * KIB;
/// An HTTP/2 connection, charged on top when its preface arrives: the receive window its peer
/// may fill before any body is admitted (the connection window, 64 KiB) and the stream and
/// header-table state.
pub const HTTP2_COST: u64 = 72 * KIB;
/// A live-feed subscriber: its stream's state and one write (at most the feed's 32 KiB) that
/// its peer has not taken, waiting in the socket or in the peer's flow-control window.
pub const SUBSCRIBER_COST: u64 = 40 * KIB;
/// A resume in progress: one page of its replay (256 ledger events, each at most ~512 bytes
/// with its encoding).
pub const REPLAY_PAGE_COST: u64 = 128 * KIB;

/// The split of a memory budget: after the [`BASELINE`], eighteenths of the rest — request
/// bodies 6, connections 7, subscribers 3, replay pages 1, token reviews 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The whole budget, in bytes.
    pub total: u64,
    /// Bytes of large request bodies in flight, as the body budget counts them (before the
    /// [`BODY_HANDLING_FACTOR`]).
    pub body_bytes: u64,
    /// Bytes of connection state: [`CONNECTION_COST`] each, [`HTTP2_COST`] more for HTTP/2.
    pub connection_bytes: u64,
    /// Live-feed subscribers at once.
    pub subscribers: usize,
    /// Live-feed resumes in progress at once.
    pub replays: usize,
    /// Bytes the token-review admission may hold (its cache and queues).
    pub token_review_bytes: u64,
}

impl MemoryPlan {
    /// The split of `total` bytes (at least [`MIN_MEMORY_BUDGET`]).
    pub fn of(total: u64) -> Self {
        let total = total.max(MIN_MEMORY_BUDGET);
        let eighteenth = (total - BASELINE) / 18;
        let count = |bytes: u64, each: u64| usize::try_from(bytes / each).unwrap_or(usize::MAX);
        MemoryPlan {
            total,
            body_bytes: 6 * eighteenth / BODY_HANDLING_FACTOR,
            connection_bytes: 7 * eighteenth,
            subscribers: count(3 * eighteenth, SUBSCRIBER_COST),
            replays: count(eighteenth, REPLAY_PAGE_COST),
            token_review_bytes: eighteenth,
        }
    }

    /// HTTP/1 connections the connection share holds.
    pub fn connections(&self) -> usize {
        usize::try_from(self.connection_bytes / CONNECTION_COST).unwrap_or(usize::MAX)
    }
}

/// Connections refused, by why.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// The connection share (or `--max-connections`) was full.
    pub(crate) full: AtomicU64,
    /// The peer already had its most connections open.
    pub(crate) peer: AtomicU64,
    /// An HTTP/2 preface found no room for an HTTP/2 connection's share.
    pub(crate) http2: AtomicU64,
    /// A connection let in on the authenticated callers' reserve did not authenticate.
    pub(crate) unauthenticated: AtomicU64,
}

/// One memory budget for the process: its [`MemoryPlan`] and the connection share's room (the
/// other shares are admitted where they are held: the body budget, the feed's caps, the
/// token-review admission). Cloned, it is the same budget.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    plan: MemoryPlan,
    /// The connection share, in KiB.
    connections: Arc<Semaphore>,
    connection_kib: u32,
    pub(crate) refusals: Arc<Refusals>,
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget::new(DEFAULT_MEMORY_BUDGET)
    }
}

/// A connection's place in the connection share, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct ConnectionRoom(#[allow(dead_code)] OwnedSemaphorePermit);

fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(KIB)).unwrap_or(u32::MAX)
}

impl MemoryBudget {
    pub fn new(total: u64) -> Self {
        let plan = MemoryPlan::of(total);
        let connection_kib = kib(plan.connection_bytes).min(Semaphore::MAX_PERMITS as u32);
        MemoryBudget {
            plan,
            connections: Arc::new(Semaphore::new(connection_kib as usize)),
            connection_kib,
            refusals: Arc::default(),
        }
    }

    pub fn plan(&self) -> MemoryPlan {
        self.plan
    }

    /// Bytes of the connection share held now.
    pub fn connection_bytes_used(&self) -> u64 {
        let free = self.connections.available_permits() as u64;
        u64::from(self.connection_kib).saturating_sub(free) * KIB
    }

    /// Room for one connection ([`CONNECTION_COST`]), if the share has it with `keep` bytes
    /// left over for others.
    pub(crate) fn admit_connection(&self, keep: u64) -> Option<ConnectionRoom> {
        self.take(CONNECTION_COST, keep)
    }

    /// Room for an HTTP/2 connection's extra state ([`HTTP2_COST`]), with `keep` bytes left
    /// over for others (the authenticated callers' reserve, for a connection not let in on it).
    pub(crate) fn admit_http2(&self, keep: u64) -> Option<ConnectionRoom> {
        self.take(HTTP2_COST, keep)
    }

    fn take(&self, bytes: u64, keep: u64) -> Option<ConnectionRoom> {
        let cost = kib(bytes);
        let free = self.connections.available_permits() as u64;
        if free < u64::from(cost) + u64::from(kib(keep)) {
            return None;
        }
        Arc::clone(&self.connections)
            .try_acquire_many_owned(cost)
            .ok()
            .map(ConnectionRoom)
    }

    /// Bytes of the connection share only authenticated connections may use: a quarter.
    pub(crate) fn authenticated_reserve(&self) -> u64 {
        self.plan.connection_bytes / 4
    }
}

/// `/metrics`: the budget, its connection share and what it refused.
impl prometheus_client::collector::Collector for MemoryBudget {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let gauges = [
            (
                "muster_memory_budget_bytes",
                "The memory budget (--memory-budget)",
                self.plan.total,
            ),
            (
                "muster_memory_connection_share_bytes",
                "The memory budget's share for connections",
                self.plan.connection_bytes,
            ),
            (
                "muster_memory_connection_used_bytes",
                "Bytes of the connection share held by open connections",
                self.connection_bytes_used(),
            ),
        ];
        for (name, help, v) in gauges {
            let m = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
            m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
        }
        let r = &self.refusals;
        let mut fam = encoder.encode_descriptor(
            "muster_http_connections_refused",
            "Connections closed at accept or after their first answer, by reason: full (the connection cap or share), peer (the peer's limit), http2 (no room for an HTTP/2 connection), unauthenticated (let in on the authenticated reserve, did not authenticate)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (reason, n) in [
            ("full", &r.full),
            ("peer", &r.peer),
            ("http2", &r.http2),
            ("unauthenticated", &r.unauthenticated),
        ] {
            let labels = [("reason", reason)];
            ConstCounter::new(n.load(Ordering::Relaxed)).encode(fam.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_is_split_into_the_documented_shares() {
        let plan = MemoryPlan::of(DEFAULT_MEMORY_BUDGET);
        assert_eq!(
            (
                plan.body_bytes,
                plan.connection_bytes,
                plan.connections(),
                plan.subscribers,
                plan.replays,
                plan.token_review_bytes
            ),
            (2 * MIB, 14 * MIB, 796, 153, 16, 2 * MIB)
        );
    }

    #[test]
    fn every_share_together_with_the_baseline_stays_within_the_budget() {
        for mib in [24, 48, 64, 128, 1024] {
            let p = MemoryPlan::of(mib * MIB);
            let held = BASELINE
                + p.body_bytes * BODY_HANDLING_FACTOR
                + p.connection_bytes
                + p.subscribers as u64 * SUBSCRIBER_COST
                + p.replays as u64 * REPLAY_PAGE_COST
                + p.token_review_bytes;
            assert!(held <= mib * MIB, "{mib} MiB: {held} bytes held");
        }
    }

    #[test]
    fn a_connection_is_refused_when_its_room_would_eat_into_the_reserve() {
        let budget = MemoryBudget::new(DEFAULT_MEMORY_BUDGET);
        let all = budget.plan().connection_bytes;
        // Everything but one connection's room and the reserve is taken.
        let _taken = Arc::clone(&budget.connections)
            .try_acquire_many_owned(kib(all - CONNECTION_COST - 4 * MIB))
            .unwrap();
        let public = budget.admit_connection(4 * MIB);
        let past_the_reserve = budget.admit_connection(4 * MIB);
        assert_eq!(
            (public.is_some(), past_the_reserve.is_some()),
            (true, false)
        );
    }
}
