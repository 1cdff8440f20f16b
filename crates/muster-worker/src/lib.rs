//! The client library every Muster worker links: lease work, keep the lease alive, and deliver
//! the outcome durably.
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
//! A complete example is `examples/echo_worker.rs` (`cargo run -p muster-worker --example
//! echo_worker`; configured by `MUSTER_URL`, `MUSTER_TOKEN`, `WORKER_ID`, `SPOOL_DIR`).
//!
//! # Durable delivery
//!
//! [`WorkerClient::complete`], [`WorkerClient::fail`] and [`WorkerClient::needs_subtool`] first
//! write the delivery to the spool directory (`<lease_id>.<action>.json`, contents
//! `{"lease_id", "action", "body"}` where `body` is the exact request body; written to a temp file,
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
//! # Heartbeats
//!
//! [`Lease::keepalive`] spawns a task that heartbeats every `heartbeat_ms` until the
//! [`Heartbeat`] is dropped or the server gives a final answer (`E_LEASE_LOST`); then
//! [`Heartbeat::lost`] is true and [`Heartbeat::wait_lost`] resolves, so the work can be abandoned.

mod error;
mod heartbeat;
mod spool;

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
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;

pub use error::ClientError;
pub use heartbeat::{Heartbeat, LeaseState};
pub use spool::{Action, SpoolEntry};

/// The longest long poll the contract allows.
pub const MAX_WAIT_MS: u64 = 30_000;

/// The most leases one `lease_many` asks for, and the most completions one `complete_many`
/// sends (docs/batching.md).
pub const MAX_BATCH: usize = 256;

/// A leased item: `POST /v1/leases` 200.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub lease_id: String,
    pub fence: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    pub heartbeat_ms: u64,
    pub item: Item,
}

/// The item of a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub id: String,
    pub kind: String,
    pub priority: String,
    pub attempt: u32,
    pub payload: Value,
}

/// A `next` pipeline step of a completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NextStep {
    pub kind: String,
    pub payload: Value,
    /// The parent's priority when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

impl NextStep {
    /// A step of `kind` inheriting the parent's priority.
    pub fn new(kind: impl Into<String>, payload: Value) -> Self {
        NextStep {
            kind: kind.into(),
            payload,
            priority: None,
        }
    }
}

/// The server's acknowledgement of a delivery (complete, fail or needs_subtool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    /// Absent in `fail`'s `{"state": "failed"}` answer.
    #[serde(default)]
    pub item_id: Option<String>,
    /// `done`, `queued`, `failed`, `needs_subtool`.
    pub state: String,
    /// `complete` only.
    #[serde(default)]
    pub ledger_seq: Option<i64>,
    /// `complete` only: true when this lease already completed with an identical body.
    #[serde(default)]
    pub replayed: bool,
    /// `fail` with a re-queue only.
    #[serde(default)]
    pub not_before: Option<String>,
    /// [`WorkerClient::complete_and_lease`] only: the lease granted in the same transaction
    /// (`None`: nothing was leasable at that moment, or the completion was redelivered from
    /// the spool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_lease: Option<Lease>,
}

/// One completion of a batch ([`WorkerClient::complete_many`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub lease_id: String,
    pub result: Value,
    pub next: Vec<NextStep>,
}

impl Completion {
    /// Completes `lease` with `result` and the `next` pipeline steps.
    pub fn new(lease: &Lease, result: Value, next: Vec<NextStep>) -> Self {
        Completion {
            lease_id: lease.lease_id.clone(),
            result,
            next,
        }
    }

    /// The body of the single `complete` call: what is spooled, and what the server hashes for
    /// idempotency (a batch entry and a single delivery of it are the same completion).
    fn body(&self) -> Value {
        json!({"result": self.result, "next": self.next})
    }

    /// Its entry in a `POST /v1/completions` batch: the single call's body and the lease id.
    fn batch_entry(&self) -> Value {
        let mut entry = self.body();
        entry["lease_id"] = json!(self.lease_id);
        entry
    }
}

/// Backoff of deliveries: `base * factor^(n-1)`, capped, with jitter (half fixed, half random).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub base: Duration,
    pub factor: u32,
    pub cap: Duration,
    /// `None`: retry until acknowledged (the default). `Some(n)`: give up after `n` attempts
    /// with [`ClientError::Undelivered`], leaving the delivery in the spool.
    pub max_attempts: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(200),
            factor: 2,
            cap: Duration::from_secs(30),
            max_attempts: None,
        }
    }
}

impl RetryPolicy {
    /// The delay after failed attempt `attempt` (1-based) that failed with `error`: the
    /// jittered backoff, but never shorter than the server's `Retry-After` (itself capped at
    /// `cap`).
    pub fn delay_after(&self, attempt: u32, error: &ClientError) -> Duration {
        let backoff = self.delay(attempt);
        match error.retry_after() {
            Some(asked) => backoff.max(asked.min(self.cap)),
            None => backoff,
        }
    }

    /// The delay after failed attempt `attempt` (1-based), jittered.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .factor
            .max(1)
            .checked_pow(attempt.saturating_sub(1).min(32))
            .unwrap_or(u32::MAX);
        let full = self.base.saturating_mul(exp).min(self.cap);
        let half = full / 2;
        let jitter_ms = rand::random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }
}

/// What [`WorkerClient::redeliver_spool`] did with one spool file.
#[derive(Debug)]
pub struct Redelivery {
    pub file: PathBuf,
    pub outcome: Result<Ack, ClientError>,
}

/// A client of Muster's worker API for one worker of one kind. Cheap to clone (shared
/// connection pool, HTTP/1 keep-alive).
#[derive(Debug, Clone)]
pub struct WorkerClient {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    base: String,
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
                base,
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

    /// One POST; the status, the whole body and the `Retry-After` the server asked for.
    async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(u16, Bytes, Option<Duration>), ClientError> {
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("{}{path}", self.inner.base))
            .header(CONTENT_TYPE, "application/json")
            .header(AUTHORIZATION, self.inner.auth.clone())
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let exchange = async {
            let res = self
                .inner
                .http
                .request(req)
                .await
                .map_err(|e| ClientError::Transport(error_chain(&e)))?;
            let status = res.status().as_u16();
            let retry_after = retry_after(res.headers());
            let bytes = res
                .into_body()
                .collect()
                .await
                .map_err(|e| ClientError::Transport(error_chain(&e)))?
                .to_bytes();
            Ok((status, bytes, retry_after))
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout)?
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
            .post("/v1/leases", body.to_string().into_bytes(), timeout)
            .await?;
        match status {
            200 => Ok(Some((status, bytes))),
            204 => Ok(None),
            _ => Err(ClientError::from_answer(status, &bytes, retry_after)),
        }
    }

    /// One heartbeat; the new `expires_at`.
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
            )
            .await?;
        match status {
            200 => Ok(parse::<Answer>(status, &bytes)?.expires_at),
            _ => Err(ClientError::from_answer(status, &bytes, retry_after)),
        }
    }

    /// Completes the lease with `result` and the `next` pipeline steps (spooled, then delivered
    /// until acknowledged or finally refused).
    pub async fn complete(
        &self,
        lease: &Lease,
        result: Value,
        next: Vec<NextStep>,
    ) -> Result<Ack, ClientError> {
        let body = Completion::new(lease, result, next).body();
        self.spool_and_deliver(&lease.lease_id, Action::Complete, body, false)
            .await
    }

    /// [`complete`](Self::complete), and in the same round trip and transaction a new lease
    /// for this worker: [`Ack::next_lease`] (`None` when nothing was leasable at that moment;
    /// fall back to [`lease`](Self::lease)). Spooled like `complete`; a delivery retried
    /// after a lost answer leases afresh, and a redelivery from the spool leases nothing.
    pub async fn complete_and_lease(
        &self,
        lease: &Lease,
        result: Value,
        next: Vec<NextStep>,
    ) -> Result<Ack, ClientError> {
        let body = Completion::new(lease, result, next).body();
        let mut ack = self
            .spool_and_deliver(&lease.lease_id, Action::Complete, body, true)
            .await?;
        // The completion is acknowledged whatever came with it; a next lease whose id could
        // not name a spool file is left to expire.
        if let Some(next) = &ack.next_lease
            && spool::check_lease_id(&next.lease_id).is_err()
        {
            tracing::warn!(lease_id = ?next.lease_id, "next lease with an unusable id dropped");
            ack.next_lease = None;
        }
        Ok(ack)
    }

    /// Completes many leases in one request and one transaction (`POST /v1/completions`,
    /// 1 to [`MAX_BATCH`] entries, at most 1 MiB in all). Every entry is spooled first as
    /// the single `complete` of its lease (so [`redeliver_spool`](Self::redeliver_spool)
    /// delivers it alone if this process dies), then the batch is sent until the server
    /// answers it, with the same retries as single deliveries.
    ///
    /// `Ok` holds one answer per entry, in order, each the answer the single call would have
    /// got (`LeaseLost`, `Conflict`, `Rejected` are final and unspooled like theirs). An entry
    /// answered with a non-final error (the server's `500` for the one entry it could not
    /// write) is not retried here and stays spooled: [`ClientError::is_final`] tells which;
    /// [`redeliver_spool`](Self::redeliver_spool) sends it again alone. `Err` is the whole
    /// batch's failure; its entries then stay spooled — a refusal of the batch as a whole
    /// (`413 E_TOO_LARGE`: split it) says nothing against any one completion. A lease named
    /// twice is refused before anything is written (`InvalidArgument`).
    pub async fn complete_many(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<Ack, ClientError>>, ClientError> {
        #[derive(Deserialize)]
        struct Answer {
            results: Vec<Value>,
        }
        if !(1..=MAX_BATCH).contains(&completions.len()) {
            return Err(ClientError::InvalidArgument(format!(
                "a batch holds 1 to {MAX_BATCH} completions, not {}",
                completions.len()
            )));
        }
        // One spool file per lease: a lease twice would share it (and the server applies only
        // the first of the two).
        let mut seen = std::collections::HashSet::with_capacity(completions.len());
        if let Some(twice) = completions.iter().find(|c| !seen.insert(&c.lease_id)) {
            return Err(ClientError::InvalidArgument(format!(
                "lease {} appears more than once in the batch",
                twice.lease_id
            )));
        }
        let entries = completions
            .iter()
            .map(|c| {
                spool::check_lease_id(&c.lease_id)?;
                Ok(SpoolEntry {
                    lease_id: c.lease_id.clone(),
                    action: Action::Complete,
                    body: c.body(),
                })
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        let dir = self.inner.spool.clone();
        let files = tokio::task::spawn_blocking(move || spool::write_all(&dir, &entries))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))??;
        let batch: Vec<Value> = completions.iter().map(Completion::batch_entry).collect();
        let body = json!({ "completions": batch }).to_string().into_bytes();
        let answer: Answer = self
            .send_until_answered("/v1/completions", body, "complete_many")
            .await?;
        if answer.results.len() != completions.len() {
            return Err(ClientError::BadResponse {
                status: 200,
                detail: format!(
                    "{} results for {} completions",
                    answer.results.len(),
                    completions.len()
                ),
            });
        }
        let mut done = Vec::new();
        let mut acks = Vec::with_capacity(completions.len());
        for ((result, file), c) in answer.results.into_iter().zip(files).zip(completions) {
            let ack = entry_answer(result, &c.lease_id);
            match &ack {
                Ok(_) => done.push(file),
                Err(e) if e.is_final() => {
                    tracing::warn!(lease_id = %c.lease_id, code = e.code(), "completion refused for good: {e}");
                    done.push(file);
                }
                Err(_) => {}
            }
            acks.push(ack);
        }
        self.unspool_all(done).await;
        Ok(acks)
    }

    /// Fails the lease (spooled, then delivered); `retryable` re-queues with backoff.
    pub async fn fail(
        &self,
        lease: &Lease,
        error_code: &str,
        message: &str,
        retryable: bool,
    ) -> Result<Ack, ClientError> {
        let body =
            json!({"error": {"code": error_code, "message": message}, "retryable": retryable});
        self.spool_and_deliver(&lease.lease_id, Action::Fail, body, false)
            .await
    }

    /// Parks the item: this worker (`digest`, `sha256:…`) cannot handle its layout.
    pub async fn needs_subtool(
        &self,
        lease: &Lease,
        digest: &str,
        signature: &str,
        detail: Value,
    ) -> Result<Ack, ClientError> {
        let body =
            json!({"worker_digest": digest, "layout": {"signature": signature, "detail": detail}});
        self.spool_and_deliver(&lease.lease_id, Action::NeedsSubtool, body, false)
            .await
    }

    /// Delivers every spool file, oldest first; one [`Redelivery`] per file. Fails only when the
    /// spool directory cannot be listed.
    pub async fn redeliver_spool(&self) -> Result<Vec<Redelivery>, ClientError> {
        let dir = self.inner.spool.clone();
        let files = tokio::task::spawn_blocking(move || spool::list(&dir))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))??;
        let mut done = Vec::with_capacity(files.len());
        for file in files {
            let path = file.clone();
            let entry = tokio::task::spawn_blocking(move || spool::read(&path))
                .await
                .map_err(|e| ClientError::Transport(e.to_string()));
            let outcome = match entry {
                Ok(Ok(entry)) => self.deliver(&file, &entry, false).await,
                Ok(Err(e)) | Err(e) => Err(e),
            };
            done.push(Redelivery { file, outcome });
        }
        Ok(done)
    }

    async fn spool_and_deliver(
        &self,
        lease_id: &str,
        action: Action,
        body: Value,
        lease_next: bool,
    ) -> Result<Ack, ClientError> {
        spool::check_lease_id(lease_id)?;
        let entry = SpoolEntry {
            lease_id: lease_id.to_owned(),
            action,
            body,
        };
        let dir = self.inner.spool.clone();
        let to_write = entry.clone();
        let file = tokio::task::spawn_blocking(move || spool::write(&dir, &to_write))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))??;
        self.deliver(&file, &entry, lease_next).await
    }

    /// Sends a spooled delivery until acknowledged or finally refused; removes the spool file
    /// then (and only then). With `lease_next` the request also asks for the next lease (not
    /// part of what is spooled: a redelivery only completes).
    async fn deliver(
        &self,
        file: &Path,
        entry: &SpoolEntry,
        lease_next: bool,
    ) -> Result<Ack, ClientError> {
        let path = format!("/v1/leases/{}/{}", entry.lease_id, entry.action.as_str());
        let body = if lease_next {
            let mut body = entry.body.clone();
            body["lease_next"] = json!(true);
            body
        } else {
            entry.body.clone()
        };
        let outcome = self
            .send_until_answered::<Ack>(&path, body.to_string().into_bytes(), entry.action.as_str())
            .await;
        match &outcome {
            Ok(_) => self.unspool(file).await,
            Err(e) if e.is_final() => {
                tracing::warn!(lease_id = %entry.lease_id, action = entry.action.as_str(), code = e.code(), "delivery refused for good: {e}");
                self.unspool(file).await;
            }
            Err(_) => {}
        }
        outcome
    }

    /// POSTs `body` until the server answers 200 with a `T` (`Ok`), refuses it for good or
    /// answers something the contract does not (`Err`), or the retry budget runs out
    /// (`Err(Undelivered)`). Retryable failures wait per the [`RetryPolicy`].
    async fn send_until_answered<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
        what: &str,
    ) -> Result<T, ClientError> {
        let policy = &self.inner.retry;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let outcome = match self
                .post(path, body.clone(), self.inner.request_timeout)
                .await
            {
                Ok((200, bytes, _)) => parse::<T>(200, &bytes),
                Ok((status, bytes, retry_after)) => {
                    Err(ClientError::from_answer(status, &bytes, retry_after))
                }
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) if e.is_retryable() => {
                    if policy.max_attempts.is_some_and(|max| attempt >= max) {
                        return Err(ClientError::Undelivered {
                            attempts: attempt,
                            last: Box::new(e),
                        });
                    }
                    let delay = policy.delay_after(attempt, &e);
                    tracing::info!(
                        path,
                        what,
                        code = e.code(),
                        attempt,
                        ?delay,
                        "delivery failed, retrying: {e}"
                    );
                    tokio::time::sleep(delay).await;
                }
                answered => return answered,
            }
        }
    }

    /// Removes a spool file after an answer; a failure is logged (the redelivery it causes
    /// is answered `replayed` or final, never a duplicate).
    async fn unspool(&self, file: &Path) {
        self.unspool_all(vec![file.to_owned()]).await;
    }

    /// [`unspool`](Self::unspool) for many files, with one directory fsync.
    async fn unspool_all(&self, files: Vec<PathBuf>) {
        if files.is_empty() {
            return;
        }
        let removed = tokio::task::spawn_blocking(move || spool::remove_all(&files)).await;
        if let Ok(Err(e)) | Err(e) = removed.map_err(|e| ClientError::Transport(e.to_string())) {
            tracing::warn!("could not remove delivered spool files: {e}");
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

/// One entry of a `POST /v1/completions` answer: `status` 200 with the `complete` answer's
/// fields, or the single call's error status and `error` object.
fn entry_answer(entry: Value, lease_id: &str) -> Result<Ack, ClientError> {
    let bad = |detail: String| ClientError::BadResponse {
        status: 200,
        detail: format!("completion of lease {lease_id}: {detail}"),
    };
    if entry.get("lease_id").and_then(Value::as_str) != Some(lease_id) {
        return Err(bad(format!("answered for {:?}", entry.get("lease_id"))));
    }
    let status = entry
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .ok_or_else(|| bad("no status".into()))?;
    if status == 200 {
        serde_json::from_value(entry).map_err(|e| bad(e.to_string()))
    } else {
        Err(ClientError::from_answer(
            status,
            entry.to_string().as_bytes(),
            None,
        ))
    }
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
mod tests {
    use super::*;

    fn unavailable(retry_after: Option<Duration>) -> ClientError {
        ClientError::Unavailable {
            status: 503,
            code: Some("E_UNAVAILABLE".into()),
            message: "down".into(),
            retry_after,
        }
    }

    fn fast_policy() -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_millis(10),
            factor: 2,
            cap: Duration::from_secs(5),
            max_attempts: None,
        }
    }

    #[test]
    fn a_retry_after_longer_than_the_backoff_is_waited_out() {
        let delay = fast_policy().delay_after(1, &unavailable(Some(Duration::from_secs(2))));
        assert_eq!(delay, Duration::from_secs(2));
    }

    #[test]
    fn a_retry_after_beyond_the_cap_waits_the_cap() {
        let delay = fast_policy().delay_after(1, &unavailable(Some(Duration::from_secs(3600))));
        assert_eq!(delay, Duration::from_secs(5));
    }

    #[test]
    fn without_a_retry_after_the_backoff_stays_within_its_bounds() {
        let delay = fast_policy().delay_after(1, &unavailable(None));
        assert!(delay >= Duration::from_millis(5) && delay <= Duration::from_millis(10));
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_anything_else_is_ignored() {
        let read = |v: &str| {
            let mut h = hyper::HeaderMap::new();
            h.insert(hyper::header::RETRY_AFTER, v.parse().unwrap());
            retry_after(&h)
        };
        assert_eq!(
            [
                read("1"),
                read(" 30 "),
                read("Wed, 21 Oct 2015 07:28:00 GMT"),
                read("-1")
            ],
            [
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(30)),
                None,
                None
            ]
        );
    }

    #[test]
    fn backoff_grows_by_the_factor_and_stays_within_jitter_and_cap() {
        let p = RetryPolicy {
            base: Duration::from_millis(100),
            factor: 2,
            cap: Duration::from_millis(1000),
            max_attempts: None,
        };
        for (attempt, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            let d = p.delay(attempt).as_millis() as u64;
            assert!((full / 2..=full).contains(&d), "attempt {attempt}: {d} ms");
        }
    }

    #[test]
    fn a_base_url_other_than_http_host_is_refused() {
        let dir = std::env::temp_dir().join(format!("muster-worker-unit-{}", uuid::Uuid::now_v7()));
        for bad in ["not a url", "https://muster:8080", "/v1"] {
            let err = WorkerClient::new(bad, "t", "trawl", "w", &dir).unwrap_err();
            assert_eq!(err.code(), "E_INVALID_ARGUMENT", "{bad}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
