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
