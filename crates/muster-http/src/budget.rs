//! The body budget: how many bytes of request bodies the server holds at once.
//!
//! A request body costs the server far more than its size while it is handled: the raw bytes,
//! the parsed JSON, the canonical form hashed for idempotency, the ledger entry that records
//! it and the statement parameters that carry it to PostgreSQL. Without a bound, a burst of
//! large results takes the pod far past its memory request: 32 concurrent completions of
//! 1 MB each peaked at 279 MiB resident; with the default budget of 2 MiB, at 30 MiB
//! (docs/operations.md). Each request
//! with a body therefore reserves its `Content-Length` (the body limit when it sends none)
//! before its body is read, and gives it back when its answer is ready. A request that finds
//! no room waits for it, its unread body left in the socket, up to a wait (`ServerSettings::body_wait`, 5 s); then
//! it is answered `503 E_UNAVAILABLE` with `Retry-After`, which every worker retries.
//!
//! The edit intake routes are not counted: their bodies are cut at 4 KiB, and submissions
//! Conn forwards from anonymous visitors must not be able to take the room the workers need.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::extract::BODY_LIMIT;

/// Request bodies in flight, counted in KiB.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    room: Arc<Semaphore>,
    capacity_kib: u32,
    wait: Duration,
    /// Requests answered 503 because no room came within the wait.
    pub(crate) refused: Counter,
}

impl BodyBudget {
    /// A budget of `bytes`, a request waiting up to `wait` for room (one body of the largest
    /// size always fits, whatever `bytes`).
    pub fn new(bytes: u64, wait: Duration) -> Self {
        let capacity_kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        BodyBudget {
            room: Arc::new(Semaphore::new(capacity_kib as usize)),
            capacity_kib,
            wait,
            refused: Counter::default(),
        }
    }

    /// The KiB a request reserves: its declared length up to the body limit (a body that says
    /// it is longer is refused when read), the body limit when it streams without a length,
    /// nothing when it has no body. Never more than the whole budget, so that one largest
    /// body always fits.
    fn charge(&self, req: &Request<Body>) -> u32 {
        let headers = req.headers();
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = match declared {
            Some(n) => n.min(BODY_LIMIT as u64),
            None if headers.contains_key(header::TRANSFER_ENCODING) => BODY_LIMIT as u64,
            None => 0,
        };
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.capacity_kib)
    }
}

/// Middleware: holds the request's share of the budget until its answer is ready.
pub(crate) async fn hold(
    State(budget): State<BodyBudget>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let kib = budget.charge(&req);
    if kib == 0 {
        return next.run(req).await;
    }
    let reserved = tokio::time::timeout(
        budget.wait,
        Arc::clone(&budget.room).acquire_many_owned(kib),
    )
    .await;
    match reserved {
        Ok(Ok(permit)) => {
            let res = next.run(req).await;
            drop(permit);
            res
        }
        // Timed out (or, never, closed): too many bodies in flight.
        _ => {
            budget.refused.inc();
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "E_UNAVAILABLE",
                "the server is handling as many request bodies as its memory allows; retry shortly",
            )
            .into_response()
        }
    }
}
