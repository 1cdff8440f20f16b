//! The client library every Muster worker links: lease work, keep the lease alive, and deliver
//! the outcome durably.
//!
//! Most workers want the [`runtime`]: implement one async function from a leased item to an
//! [`Outcome`] and let a [`Runner`] lease, heartbeat, spool, deliver and stop gracefully
//! (docs/writing-a-worker.md). What follows is the client underneath it.
//!
//! ```no_run
//! # async fn run() -> Result<(), muster_worker::ClientError> {
//! use muster_worker::{NextStep, WorkerClient};
//!
//! let client = WorkerClient::new("http://muster:8080", "token", "trawl", "trawl-7f9c", "/var/spool/trawl")?;
//! client.redeliver_spool().await?; // what a previous run could not deliver, oldest first
//! loop {
//!     let Some(lease) = client.lease(30_000).await? else { continue };
//!     let heartbeat = lease.keepalive(&client);
//!     let result = serde_json::json!({"echo": lease.item.payload});
//!     if heartbeat.lost() {
//!         continue; // superseded: nothing we deliver would be accepted
//!     }
//!     drop(heartbeat);
//!     let next = vec![NextStep::new("sextant", lease.item.payload.clone())];
//!     client.complete(&lease, result, next).await?;
//! }
//! # }
//! ```
//!
//! A complete example on the runtime is `examples/echo_worker.rs` (`cargo run -p muster-worker
//! --example echo_worker`; configured by `MUSTER_URL`, `MUSTER_TOKEN`, `WORKER_ID`,
//! `SPOOL_DIR`).
//!
//! # Durable delivery
//!
//! [`WorkerClient::complete`], [`WorkerClient::fail`] and [`WorkerClient::needs_subtool`] first
//! write the delivery to the spool directory (`<lease_id>.<action>.json`, contents
//! `{"lease_id", "action", "body", "traceparent"}` where `body` is the exact request body and
//! `traceparent` the header sent with it, absent when there is none; written to a temp file,
//! fsynced, renamed into place, directory fsynced), then POST it with exponential backoff and
//! jitter ([`RetryPolicy`]), never sooner than the `Retry-After` of a 503 (up to the policy's
//! cap). Which answers end the delivery:
//!
//! | answer | spool file | result |
//! |---|---|---|
//! | 200 with the contract's body | removed | `Ok(Ack)` (`replayed: true` for a retried identical delivery) |
//! | 409 `E_LEASE_LOST`, 409 `E_CONFLICT` | removed | `Err(LeaseLost)`, `Err(Conflict)` — final |
//! | other 4xx except 401, 408, 429 (`E_BAD_REQUEST`, `E_FORBIDDEN`, `E_NOT_FOUND`, `E_ROUTE`, …) | removed | `Err(Rejected)` — final: the same body can never succeed |
//! | 401, 408, 429, 5xx, connection errors, timeouts | kept | retried; after [`RetryPolicy::max_attempts`] (unbounded by default) `Err(Undelivered)` |
//! | 200 with a body that is not the contract's, any other status (1xx, 3xx, 201, …) | kept | `Err(BadResponse)`, `Err(UnexpectedStatus)` — not retried in a loop; the next [`WorkerClient::redeliver_spool`] tries again (harmless: delivery is idempotent per lease) |
//!
//! 401 is retried rather than final because an authentication failure is a deployment problem
//! (a rotated ServiceAccount token, a TokenReview outage) and the spooled result is still good.
//! Call [`WorkerClient::redeliver_spool`] on start: it delivers every spool file, oldest first.
//!
//! # Batches
//!
//! [`WorkerClient::lease_many`] leases up to [`MAX_BATCH`] items in one call;
//! [`WorkerClient::complete_many`] completes many leases in one request and one transaction
//! (`POST /v1/completions`). Each entry is spooled exactly as its single `complete` would be
//! (`<lease_id>.complete.json`, all with one directory fsync), so a batch that cannot be
//! delivered is redelivered entry by entry by [`WorkerClient::redeliver_spool`], and the
//! server treats a batch entry and its single redelivery as the same completion (a replay).
//! [`WorkerClient::complete_and_lease`] completes and takes the next lease in one round trip
//! ([`Ack::next_lease`]). docs/batching.md has the protocol.
//!
//! # Traces
//!
//! A lease answer's W3C `traceparent` ([`Lease::traceparent`]; `None` for an item without a
//! trace context) is sent back as the `traceparent` header of every call on that lease:
//! heartbeat, complete, fail, needs_subtool, and the redelivery of its spool file. A
//! [`complete_many`](WorkerClient::complete_many) batch sends one only when all its leases send
//! the same one. The [`runtime`] sends its `process` span's instead.
//!
//! # Heartbeats
//!
//! [`Lease::keepalive`] spawns a task that heartbeats every `heartbeat_ms` until the
//! [`Heartbeat`] is dropped or the server gives a final answer (`E_LEASE_LOST`); then
//! [`Heartbeat::lost`] is true and [`Heartbeat::wait_lost`] resolves, so the work can be abandoned.

mod delivery;
mod error;
mod failover;
mod heartbeat;
mod retry;
pub mod runtime;
mod spool;
mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;

pub use delivery::Redelivery;
pub use error::ClientError;
pub use failover::{AnswerHook, is_gone};
pub use heartbeat::{Heartbeat, LeaseState};
pub use retry::RetryPolicy;
pub use runtime::{Outcome, Runner, RunnerError, ShutdownHandle, Worker};
pub use spool::{Action, SpoolEntry};
pub use wire::{Ack, Completion, Item, Lease, NextStep};

/// The longest long poll the contract allows.
pub const MAX_WAIT_MS: u64 = 30_000;

/// The W3C trace-context request header.
const TRACEPARENT: &str = "traceparent";

/// The most leases one `lease_many` asks for, and the most completions one `complete_many`
/// sends (docs/batching.md).
pub const MAX_BATCH: usize = 256;

/// A client of Muster's worker API for one worker of one kind. Cheap to clone (shared
/// connection pool, HTTP/1 keep-alive).
#[derive(Debug, Clone)]
pub struct WorkerClient {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    base: failover::Bases,
    auth: HeaderValue,
    kind: String,
    worker_id: String,
    spool: PathBuf,
    retry: RetryPolicy,
    request_timeout: Duration,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl WorkerClient {
    /// A client for `base_url` (e.g. `http://muster:8080`) with bearer `token`; creates
    /// `spool_dir` if missing.
    pub fn new(
        base_url: &str,
        token: &str,
        kind: &str,
        worker_id: &str,
        spool_dir: impl Into<PathBuf>,
    ) -> Result<Self, ClientError> {
        let base = base_url.trim_end_matches('/').to_owned();
        let uri: Uri = base
            .parse()
            .map_err(|e| ClientError::InvalidArgument(format!("base url {base_url:?}: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(ClientError::InvalidArgument(format!(
                "base url {base_url:?}: only http://host[:port] is supported"
            )));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientError::InvalidArgument("token is not a header value".into()))?;
        auth.set_sensitive(true);
        let spool: PathBuf = spool_dir.into();
        std::fs::create_dir_all(&spool).map_err(|source| ClientError::Spool {
            path: spool.clone(),
            source,
        })?;
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .build_http();
        Ok(WorkerClient {
            inner: Arc::new(Inner {
                base: failover::Bases::one(base),
                auth,
                kind: kind.to_owned(),
                worker_id: worker_id.to_owned(),
                spool,
                retry: RetryPolicy::default(),
                request_timeout: Duration::from_secs(10),
                http,
            }),
        })
    }

    /// The same client with another delivery retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        Arc::make_mut(&mut self.inner).retry = retry;
        self
    }

    /// The same client sending to `urls` (replicas of one Muster, `http://host[:port]` each)
    /// instead of its base URL: requests go to one until it gives no answer or a `503`, then
    /// to the next, in turn.
    pub fn with_failover(mut self, urls: &[String]) -> Result<Self, ClientError> {
        let mut bases = Vec::with_capacity(urls.len());
        for url in urls {
            // The same checks as `new`.
            let checked = WorkerClient::new(url, "t", "k", "w", &self.inner.spool)?;
            bases.push(checked.inner.base.current().to_owned());
        }
        if bases.is_empty() {
            return Err(ClientError::InvalidArgument("no failover urls".into()));
        }
        let hook = self.inner.base.hook.clone();
        let inner = Arc::make_mut(&mut self.inner);
        inner.base = failover::Bases::many(bases);
        inner.base.hook = hook;
        Ok(self)
    }

    /// The same client calling `hook` with every answer it gets (or the error of a request
    /// that got none), retries included: for counters of every status.
    pub fn with_answer_hook(mut self, hook: AnswerHook) -> Self {
        Arc::make_mut(&mut self.inner).base.hook = Some(hook);
        self
    }

    /// The same client with another per-request timeout (added to `wait_ms` for leases).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.inner).request_timeout = timeout;
        self
    }

    /// The worker kind this client was made for.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The worker id sent with leases and heartbeats.
    pub fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    /// The spool directory.
    pub fn spool_dir(&self) -> &Path {
        &self.inner.spool
    }

    /// One POST (with a `traceparent` header when given); the status, the whole body and the
    /// `Retry-After` the server asked for.
    async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
        traceparent: Option<&str>,
    ) -> Result<(u16, Bytes, Option<Duration>), ClientError> {
        let (used, base) = self.inner.base.pick();
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(format!("{base}{path}"))
            .header(CONTENT_TYPE, "application/json")
            .header(AUTHORIZATION, self.inner.auth.clone());
        if let Some(traceparent) = traceparent {
            req = req.header(TRACEPARENT, traceparent);
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let round_trip = async {
            let (head, bytes) = exchange(&self.inner.http, req)
                .await
                .map_err(ClientError::Transport)?;
            Ok((head.status.as_u16(), bytes, retry_after(&head.headers)))
        };
        let answer = tokio::time::timeout(timeout, round_trip)
            .await
            .map_err(|_| ClientError::Timeout)
            .and_then(|r| r);
        match &answer {
            Ok((status @ 200..=299, bytes, _)) => {
                self.inner.base.answered(path, used, Ok((*status, bytes)));
            }
            Ok((status, bytes, retry_after)) => {
                let e = ClientError::from_answer(*status, bytes, *retry_after);
                self.inner.base.answered(path, used, Err(&e));
            }
            Err(e) => {
                self.inner.base.answered(path, used, Err(e));
            }
        }
        answer
    }

    /// Leases one item, waiting up to `wait_ms` (capped at 30 000) for one to become leasable;
    /// `None` when nothing did (204). Not retried: call it in the worker's loop.
    pub async fn lease(&self, wait_ms: u64) -> Result<Option<Lease>, ClientError> {
        match self.lease_call(wait_ms, None).await? {
            Some((status, bytes)) => Ok(Some(checked_lease(status, parse(status, &bytes)?)?)),
            None => Ok(None),
        }
    }

    /// Leases up to `max` items (1 to [`MAX_BATCH`]) in one transaction, waiting up to
    /// `wait_ms` for at least one; empty when none became leasable. The server may answer
    /// fewer than `max` although more are queued (its payload budget per answer): ask again.
    /// Each lease is a lease of its own (heartbeat, complete or fail each one). Not retried.
    pub async fn lease_many(&self, max: usize, wait_ms: u64) -> Result<Vec<Lease>, ClientError> {
        #[derive(Deserialize)]
        struct Answer {
            leases: Vec<Lease>,
        }
        if !(1..=MAX_BATCH).contains(&max) {
            return Err(ClientError::InvalidArgument(format!(
                "max {max} is outside 1..={MAX_BATCH}"
            )));
        }
        match self.lease_call(wait_ms, Some(max)).await? {
            Some((status, bytes)) => {
                let leases = parse::<Answer>(status, &bytes)?.leases;
                if leases.is_empty() || leases.len() > max {
                    return Err(ClientError::BadResponse {
                        status,
                        detail: format!("{} leases answered for max {max}", leases.len()),
                    });
                }
                leases
                    .into_iter()
                    .map(|lease| checked_lease(status, lease))
                    .collect()
            }
            None => Ok(Vec::new()),
        }
    }

    /// `POST /v1/leases`: the 200 answer's status and body, `None` for 204.
    async fn lease_call(
        &self,
        wait_ms: u64,
        max: Option<usize>,
    ) -> Result<Option<(u16, Bytes)>, ClientError> {
        let wait_ms = wait_ms.min(MAX_WAIT_MS);
        let mut body = json!({"worker_id": self.inner.worker_id, "wait_ms": wait_ms});
        if let Some(max) = max {
            body["max"] = json!(max);
        }
        let timeout = self.inner.request_timeout + Duration::from_millis(wait_ms);
        let (status, bytes, retry_after) = self
            .post("/v1/leases", body.to_string().into_bytes(), timeout, None)
            .await?;
        match status {
            200 => Ok(Some((status, bytes))),
            204 => Ok(None),
            _ => Err(ClientError::from_answer(status, &bytes, retry_after)),
        }
    }

    /// One heartbeat (with the lease's `traceparent`); the new `expires_at`.
    pub async fn heartbeat(&self, lease: &Lease) -> Result<OffsetDateTime, ClientError> {
        #[derive(Deserialize)]
        struct Answer {
            #[serde(with = "time::serde::rfc3339")]
            expires_at: OffsetDateTime,
        }
        spool::check_lease_id(&lease.lease_id)?;
        let body = json!({"worker_id": self.inner.worker_id});
        let (status, bytes, retry_after) = self
            .post(
                &format!("/v1/leases/{}/heartbeat", lease.lease_id),
                body.to_string().into_bytes(),
                self.inner.request_timeout,
                lease.sent_traceparent(),
            )
            .await?;
        match status {
            200 => Ok(parse::<Answer>(status, &bytes)?.expires_at),
            _ => Err(ClientError::from_answer(status, &bytes, retry_after)),
        }
    }
}

/// A lease whose id can name a spool file; anything else is a bad answer.
fn checked_lease(status: u16, lease: Lease) -> Result<Lease, ClientError> {
    spool::check_lease_id(&lease.lease_id).map_err(|_| ClientError::BadResponse {
        status,
        detail: format!("lease id {:?} is not [A-Za-z0-9_-]", lease.lease_id),
    })?;
    Ok(lease)
}

/// `Retry-After` in delta-seconds (the form Muster sends); an HTTP date or garbage is ignored.
fn retry_after(headers: &hyper::HeaderMap) -> Option<Duration> {
    let value = headers.get(hyper::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn parse<T: serde::de::DeserializeOwned>(status: u16, bytes: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::BadResponse {
        status,
        detail: e.to_string(),
    })
}

/// Sends `req` and reads the whole answer: its head (status, headers) and its body. A request
/// that got no answer, or whose body broke off, is its [`error_chain`].
pub async fn exchange(
    http: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<(hyper::http::response::Parts, Bytes), String> {
    let res = http.request(req).await.map_err(|e| error_chain(&e))?;
    let (head, body) = res.into_parts();
    let bytes = body.collect().await.map_err(|e| error_chain(&e))?;
    Ok((head, bytes.to_bytes()))
}

/// An error and its sources on one line (`outer: inner: root`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests;
