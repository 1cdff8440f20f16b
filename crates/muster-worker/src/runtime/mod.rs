//! The worker runtime: an author writes one async function from a leased item to an [`Outcome`]
//! (a [`Worker`]); a [`Runner`] does the rest — leases up to its free capacity (and takes each
//! slot's next lease with its completion, `lease_next`), keeps every lease alive, cancels the work of a lost lease, spools and delivers every outcome, redelivers
//! the spool on start, holds an exclusive lock on the spool directory, turns a panic into a
//! retryable failure and stops gracefully on SIGTERM or [`ShutdownHandle::shutdown`].
//! docs/writing-a-worker.md is the author's guide.
//!
//! ```no_run
//! use muster_worker::{Lease, NextStep, Outcome, Runner};
//! use serde_json::json;
//!
//! async fn trawl(lease: Lease) -> Outcome {
//!     let Some(url) = lease.item.payload["url"].as_str() else {
//!         return Outcome::fail("E_NO_URL", "the payload has no url");
//!     };
//!     let next = vec![NextStep::new("sextant", json!({"url": url}))];
//!     Outcome::done_then(json!({"fetched": url}), next)
//! }
//!
//! # async fn run() -> Result<(), muster_worker::RunnerError> {
//! Runner::builder("http://muster:8080", "token", "trawl")
//!     .spool_dir("/var/spool/trawl")
//!     .concurrency(16)
//!     .image_digest("sha256:…")
//!     .build()?
//!     .run_until_signalled(trawl)
//!     .await?;
//! # Ok(())
//! # }
//! ```

mod lock;
mod metrics;
mod runner;
mod trace;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::{
    AnswerHook, ClientError, Lease, MAX_BATCH, MAX_WAIT_MS, NextStep, RetryPolicy, WorkerClient,
};

pub use lock::SpoolLock;
pub use metrics::{Metrics, MetricsSnapshot};
pub use runner::{RunReport, ShutdownHandle};

/// What the author's function decided about one item.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Done: `result` is recorded and each `next` step is enqueued (`complete`).
    Done { result: Value, next: Vec<NextStep> },
    /// Try again later: the item is re-queued with the kind's backoff until its attempts run
    /// out (`fail` with `retryable: true`).
    Retry { code: String, message: String },
    /// Failed for good (`fail` with `retryable: false`).
    Fail { code: String, message: String },
    /// This worker image cannot handle the item's layout: park it until a new image is
    /// reported (`needs_subtool`, with the runner's image digest).
    NeedsSubtool { signature: String, detail: Value },
    /// Send nothing and stop heartbeating: the lease expires and the item is leased again
    /// after its TTL, as if this worker had crashed.
    Abandon,
}

impl Outcome {
    /// Done with `result` and no next step.
    pub fn done(result: Value) -> Self {
        Outcome::Done {
            result,
            next: Vec::new(),
        }
    }

    /// Done with `result`, handing the item on to the `next` steps.
    pub fn done_then(result: Value, next: Vec<NextStep>) -> Self {
        Outcome::Done { result, next }
    }

    /// A retryable failure.
    pub fn retry(code: impl Into<String>, message: impl Into<String>) -> Self {
        Outcome::Retry {
            code: code.into(),
            message: message.into(),
        }
    }

    /// A final failure.
    pub fn fail(code: impl Into<String>, message: impl Into<String>) -> Self {
        Outcome::Fail {
            code: code.into(),
            message: message.into(),
        }
    }

    /// Park the item: its layout (`signature`, `detail`) needs a sub-tool this image lacks.
    pub fn needs_subtool(signature: impl Into<String>, detail: Value) -> Self {
        Outcome::NeedsSubtool {
            signature: signature.into(),
            detail,
        }
    }
}

/// The code of the retryable failure a panicking [`Worker::perform`] becomes.
pub const PANIC_CODE: &str = "E_WORKER_PANIC";

/// One kind of work: an async function from a leased item to its outcome. It gets the whole
/// [`Lease`] (`lease.item` is the item; `fence` and `lease_id` identify this attempt).
/// Implemented for every `Fn(Lease) -> impl Future<Output = Outcome>` closure, so a worker is
/// usually a closure or an `async fn`.
///
/// The future is cancelled (dropped) when the lease is lost or the runner's grace period runs
/// out; a panic in it becomes [`Outcome::Retry`] with code [`PANIC_CODE`].
pub trait Worker: Send + Sync + 'static {
    fn perform(&self, lease: Lease) -> impl Future<Output = Outcome> + Send;
}

impl<F, Fut> Worker for F
where
    F: Fn(Lease) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send,
{
    fn perform(&self, lease: Lease) -> impl Future<Output = Outcome> + Send {
        self(lease)
    }
}

/// Why a runner could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// Another process (or runner) holds the spool directory's lock.
    #[error(
        "spool directory {} is locked by another worker process; each runner needs a spool directory of its own",
        path.display()
    )]
    SpoolLocked { path: PathBuf },
    /// The spool directory or its lock file could not be opened.
    #[error("spool lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A bad setting (concurrency, URL, token).
    #[error("invalid runner setting: {0}")]
    InvalidArgument(String),
    /// The client failed in a way the runner cannot ride out (the spool cannot be listed).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Installing the signal handler failed.
    #[error("signal handler: {0}")]
    Signal(std::io::Error),
}

impl RunnerError {
    /// A stable code for logs.
    pub fn code(&self) -> &'static str {
        match self {
            RunnerError::SpoolLocked { .. } => "E_SPOOL_LOCKED",
            RunnerError::Lock { .. } => "E_SPOOL_LOCK",
            RunnerError::InvalidArgument(_) => "E_INVALID_ARGUMENT",
            RunnerError::Client(e) => e.code(),
            RunnerError::Signal(_) => "E_SIGNAL",
        }
    }
}

/// How a [`Runner`] runs; built by [`Runner::builder`].
#[derive(Clone)]
pub struct RunnerBuilder {
    url: String,
    token: String,
    kind: String,
    worker_id: String,
    spool_dir: PathBuf,
    concurrency: usize,
    image_digest: Option<ImageDigest>,
    grace: Duration,
    wait_ms: u64,
    retry: RetryPolicy,
    request_timeout: Option<Duration>,
    failover: Vec<String>,
    answer_hook: Option<AnswerHook>,
    lease_next: bool,
}

impl std::fmt::Debug for RunnerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerBuilder")
            .field("url", &self.url)
            .field("kind", &self.kind)
            .field("worker_id", &self.worker_id)
            .field("spool_dir", &self.spool_dir)
            .field("concurrency", &self.concurrency)
            .field("image_digest", &self.image_digest)
            .field("grace", &self.grace)
            .field("wait_ms", &self.wait_ms)
            .field("failover", &self.failover)
            .field("lease_next", &self.lease_next)
            .finish_non_exhaustive()
    }
}

/// Where the digest sent with [`Outcome::NeedsSubtool`] comes from.
#[derive(Clone)]
pub(crate) enum ImageDigest {
    Fixed(String),
    Live(Arc<dyn Fn() -> String + Send + Sync>),
}

impl ImageDigest {
    pub(crate) fn now(&self) -> String {
        match self {
            ImageDigest::Fixed(d) => d.clone(),
            ImageDigest::Live(f) => f(),
        }
    }
}

impl std::fmt::Debug for ImageDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageDigest::Fixed(d) => write!(f, "{d:?}"),
            ImageDigest::Live(_) => f.write_str("(live)"),
        }
    }
}

impl RunnerBuilder {
    /// The worker id sent with leases and heartbeats (default `<kind>-<pid>`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self
    }

    /// The spool directory (default `$TMPDIR/muster-spool-<kind>`); one runner per directory.
    pub fn spool_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spool_dir = dir.into();
        self
    }

    /// How many items run at once, 1 to [`MAX_BATCH`] (default 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// The `sha256:…` digest of this worker's image, sent with [`Outcome::NeedsSubtool`].
    pub fn image_digest(mut self, digest: impl Into<String>) -> Self {
        self.image_digest = Some(ImageDigest::Fixed(digest.into()));
        self
    }

    /// The image digest asked for at each [`Outcome::NeedsSubtool`], for a worker whose image
    /// changes while it runs (the simulated fleet's rolling deploys).
    pub fn image_digest_from(
        mut self,
        digest: impl Fn() -> String + Send + Sync + 'static,
    ) -> Self {
        self.image_digest = Some(ImageDigest::Live(Arc::new(digest)));
        self
    }

    /// Replicas to fail over between ([`WorkerClient::with_failover`]); the builder's URL is
    /// then not used.
    pub fn failover(mut self, urls: Vec<String>) -> Self {
        self.failover = urls;
        self
    }

    /// Every answer the runner's client gets ([`WorkerClient::with_answer_hook`]).
    pub fn answer_hook(mut self, hook: AnswerHook) -> Self {
        self.answer_hook = Some(hook);
        self
    }

    /// How long in-flight items may run on after shutdown is asked for (default 25 s).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The long-poll wait of each lease request, at most 30 000 (default 30 000).
    pub fn wait_ms(mut self, wait_ms: u64) -> Self {
        self.wait_ms = wait_ms.min(MAX_WAIT_MS);
        self
    }

    /// The delivery and lease-retry backoff (default [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Whether a completion also asks for the next lease in its answer (`"lease_next": true`,
    /// one round trip per item instead of two; default true). Off, every lease is a lease
    /// call of its own. Either way a plain lease call takes the first lease, and the next one
    /// after a failure, a lost lease, a completion answered without a next lease, or a
    /// completion sent after shutdown was asked (which never asks for one).
    pub fn lease_next(mut self, on: bool) -> Self {
        self.lease_next = on;
        self
    }

    /// The per-request timeout of the client.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Takes the spool directory's lock and builds the runner. Contacts no server: a second
    /// runner on a locked directory fails here with [`RunnerError::SpoolLocked`].
    pub fn build(self) -> Result<Runner, RunnerError> {
        if !(1..=MAX_BATCH).contains(&self.concurrency) {
            return Err(RunnerError::InvalidArgument(format!(
                "concurrency {} is outside 1..={MAX_BATCH}",
                self.concurrency
            )));
        }
        let lock = SpoolLock::acquire(&self.spool_dir)?;
        let mut client = WorkerClient::new(
            &self.url,
            &self.token,
            &self.kind,
            &self.worker_id,
            &self.spool_dir,
        )
        .map_err(|e| match e {
            ClientError::InvalidArgument(m) => RunnerError::InvalidArgument(m),
            other => RunnerError::Client(other),
        })?
        .with_retry(self.retry.clone());
        if let Some(timeout) = self.request_timeout {
            client = client.with_request_timeout(timeout);
        }
        if let Some(hook) = self.answer_hook.clone() {
            client = client.with_answer_hook(hook);
        }
        if !self.failover.is_empty() {
            client = client.with_failover(&self.failover)?;
        }
        Ok(Runner::new(client, lock, self))
    }
}

/// Runs a [`Worker`]: see the module documentation.
pub struct Runner {
    client: WorkerClient,
    _lock: SpoolLock,
    concurrency: usize,
    image_digest: Option<ImageDigest>,
    grace: Duration,
    wait_ms: u64,
    retry: RetryPolicy,
    lease_next: bool,
    metrics: Metrics,
    shutdown: ShutdownHandle,
}

impl Runner {
    /// A runner of `kind` against `url` (e.g. `http://muster:8080`) with bearer `token`.
    pub fn builder(url: &str, token: &str, kind: &str) -> RunnerBuilder {
        RunnerBuilder {
            url: url.to_owned(),
            token: token.to_owned(),
            kind: kind.to_owned(),
            worker_id: format!("{kind}-{}", std::process::id()),
            spool_dir: std::env::temp_dir().join(format!("muster-spool-{kind}")),
            concurrency: 1,
            image_digest: None,
            grace: Duration::from_secs(25),
            wait_ms: MAX_WAIT_MS,
            retry: RetryPolicy::default(),
            request_timeout: None,
            failover: Vec::new(),
            answer_hook: None,
            lease_next: true,
        }
    }

    fn new(client: WorkerClient, lock: SpoolLock, b: RunnerBuilder) -> Runner {
        let metrics = Metrics::new(client.spool_dir().to_owned());
        Runner {
            client,
            _lock: lock,
            concurrency: b.concurrency,
            image_digest: b.image_digest,
            grace: b.grace,
            wait_ms: b.wait_ms,
            retry: b.retry,
            lease_next: b.lease_next,
            metrics,
            shutdown: ShutdownHandle::new(),
        }
    }

    /// The counters of this runner (cheap to clone, shared).
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// A handle that stops this runner gracefully from anywhere.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// The client the runner delivers with.
    pub fn client(&self) -> &WorkerClient {
        &self.client
    }
}

#[cfg(test)]
mod tests;
