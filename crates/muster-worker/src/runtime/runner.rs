//! The runner's loop: redeliver the spool (at start, then every few seconds), lease up to the
//! free capacity, run each item under its keep-alive, deliver its outcome (a completion asking
//! for the slot's next lease, worked by the same task); stop gracefully.

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::FutureExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use super::metrics::Counters;
use super::trace::{ProcessSpan, SCOPE};
use super::{ImageDigest, Metrics, Outcome, PANIC_CODE, Runner, RunnerError, Worker};
use crate::{Ack, ClientError, Lease, Redelivery, RetryPolicy, WorkerClient};

/// Stops a runner gracefully: no more leases, in-flight items get the grace period. Cheap to
/// clone; calling it twice is harmless.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    tx: Arc<watch::Sender<bool>>,
}

impl ShutdownHandle {
    pub(super) fn new() -> Self {
        ShutdownHandle {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Asks the runner to stop.
    pub fn shutdown(&self) {
        self.tx.send_replace(true);
    }

    /// Whether a stop was asked for.
    pub fn is_shutdown(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once a stop is asked for.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// With a `wait_ms` below this, an empty lease answer is followed by a pause of this many ms.
const IDLE_PAUSE_MS: u64 = 100;

/// How often the spool is redelivered while the runner runs: an outcome whose delivery
/// failed is sent again within this, not only at the next start.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(3);

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunReport {
    /// Items still running (or delivering) when the grace period ran out: their leases are left
    /// to expire; an outcome already spooled is delivered by the next start.
    pub abandoned: Vec<String>,
}

/// What every item task shares.
struct Shared<W> {
    worker: W,
    client: WorkerClient,
    metrics: Metrics,
    image_digest: Option<ImageDigest>,
    /// Whether completions ask for the next lease ([`RunnerBuilder::lease_next`](super::RunnerBuilder::lease_next)).
    lease_next: bool,
    /// Set once shutdown is asked for: from then on no completion asks for a next lease.
    shutdown: ShutdownHandle,
    /// lease id → item id of every item in flight.
    running: Mutex<BTreeMap<String, String>>,
    /// The global tracer provider's tracer as the run began: opens each item's `process` span.
    tracer: BoxedTracer,
}

impl Runner {
    /// Runs `worker` until [`ShutdownHandle::shutdown`], then lets in-flight items finish
    /// within the grace period. Fails only when the spool cannot be listed at start.
    pub async fn run<W: Worker>(self, worker: W) -> Result<RunReport, RunnerError> {
        let shared = Arc::new(Shared {
            worker,
            client: self.client.clone(),
            metrics: self.metrics.clone(),
            image_digest: self.image_digest.clone(),
            lease_next: self.lease_next,
            shutdown: self.shutdown.clone(),
            running: Mutex::new(BTreeMap::new()),
            tracer: opentelemetry::global::tracer(SCOPE),
        });
        let mut stop = self.shutdown.tx.subscribe();
        let redelivered = tokio::select! {
            r = self.client.redeliver_spool() => Some(r?),
            _ = stop.wait_for(|s| *s) => None,
        };
        count_redeliveries(&self.metrics, redelivered.as_deref().unwrap_or_default());
        let sweep = AbortOnDrop(tokio::spawn(sweep_spool(Arc::clone(&shared))));
        let mut tasks = JoinSet::new();
        let deadline = self.lease_loop(&shared, &mut tasks, &mut stop).await;
        let report = self.drain(&shared, tasks, deadline).await;
        drop(sweep);
        Ok(report)
    }

    /// [`run`](Self::run), stopping on SIGTERM or SIGINT as well as on the handle. A second
    /// SIGTERM or SIGINT exits the process at once (status 128 + the signal's number): what
    /// still runs is left to expire, spooled outcomes are delivered by the next start.
    #[cfg(unix)]
    pub async fn run_until_signalled<W: Worker>(self, worker: W) -> Result<RunReport, RunnerError> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(RunnerError::Signal)?;
        let mut int = signal(SignalKind::interrupt()).map_err(RunnerError::Signal)?;
        let handle = self.shutdown_handle();
        let watcher = tokio::spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                () = handle.wait() => return,
            };
            tracing::info!(
                signal = name,
                "stopping: no more leases, in-flight items finish"
            );
            handle.shutdown();
            let (again, status) = tokio::select! {
                _ = term.recv() => ("SIGTERM", 143),
                _ = int.recv() => ("SIGINT", 130),
            };
            tracing::warn!(
                signal = again,
                status,
                "second signal: exiting now; items still running are left to expire"
            );
            std::process::exit(status);
        });
        let report = self.run(worker).await;
        watcher.abort();
        report
    }

    async fn lease_loop<W: Worker>(
        &self,
        shared: &Arc<Shared<W>>,
        tasks: &mut JoinSet<()>,
        stop: &mut watch::Receiver<bool>,
    ) -> Instant {
        let capacity = Arc::new(Semaphore::new(self.concurrency));
        let mut errors = 0u32;
        let deadline = || Instant::now() + self.grace;
        loop {
            while let Some(joined) = tasks.try_join_next() {
                log_join_error(joined);
            }
            let first = tokio::select! {
                p = Arc::clone(&capacity).acquire_owned() => p.expect("the semaphore is never closed"),
                _ = stop.wait_for(|s| *s) => return deadline(),
            };
            let mut permits = vec![first];
            while let Ok(p) = Arc::clone(&capacity).try_acquire_owned() {
                permits.push(p);
            }
            let request = self.lease(permits.len());
            tokio::pin!(request);
            let leased = tokio::select! {
                r = &mut request => Some(r),
                _ = stop.wait_for(|s| *s) => None,
            };
            let Some(leased) = leased else {
                // The request in flight may be granted items at this very moment: dropping
                // it would leave them leased to nobody until expiry. Await its answer within
                // the grace and work what it brings like any in-flight item.
                let deadline = deadline();
                match tokio::time::timeout_at(deadline, request).await {
                    Ok(Ok(leases)) => {
                        if !leases.is_empty() {
                            tracing::info!(
                                items = leases.len(),
                                "stopping: the lease request in flight was granted items; they run within the grace"
                            );
                        }
                        start(shared, tasks, leases, permits);
                    }
                    Ok(Err(e)) => {
                        tracing::info!(
                            code = e.code(),
                            "stopping: the lease request in flight failed: {e}"
                        );
                    }
                    Err(_) => tracing::warn!(
                        grace = ?self.grace,
                        "stopping: the lease request in flight was still open at the end of the grace; dropped (an item granted at that moment waits for its lease to expire)"
                    ),
                }
                return deadline;
            };
            match leased {
                Ok(leases) if leases.is_empty() && self.wait_ms < IDLE_PAUSE_MS => {
                    // Nothing leasable and no long poll to wait in: pause instead of spinning.
                    errors = 0;
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(IDLE_PAUSE_MS)) => {}
                        _ = stop.wait_for(|s| *s) => return deadline(),
                    }
                }
                Ok(leases) => {
                    errors = 0;
                    start(shared, tasks, leases, permits);
                }
                Err(e) => {
                    errors = errors.saturating_add(1);
                    let delay = lease_delay(&self.retry, errors, &e);
                    tracing::warn!(
                        code = e.code(),
                        attempt = errors,
                        ?delay,
                        "lease failed, retrying: {e}"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = stop.wait_for(|s| *s) => return deadline(),
                    }
                }
            }
        }
    }

    /// One lease request for up to `free` items: a batch when it pays.
    async fn lease(&self, free: usize) -> Result<Vec<Lease>, ClientError> {
        if free == 1 {
            Ok(self.client.lease(self.wait_ms).await?.into_iter().collect())
        } else {
            self.client.lease_many(free, self.wait_ms).await
        }
    }

    /// Waits until `deadline` (the end of the grace period) for the in-flight items; what still
    /// runs then is cancelled and its lease left to expire.
    async fn drain<W: Worker>(
        &self,
        shared: &Arc<Shared<W>>,
        mut tasks: JoinSet<()>,
        deadline: Instant,
    ) -> RunReport {
        let in_flight = tasks.len();
        if in_flight > 0 {
            tracing::info!(in_flight, grace = ?self.grace, "waiting for in-flight items");
        }
        let finished = tokio::time::timeout_at(deadline, async {
            while let Some(joined) = tasks.join_next().await {
                log_join_error(joined);
            }
        })
        .await;
        let abandoned: Vec<String> = shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        if finished.is_err() {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            tracing::warn!(
                items = ?abandoned,
                grace = ?self.grace,
                "still running after the grace period: cancelled, their leases are left to expire"
            );
        }
        tracing::info!(metrics = ?shared.metrics.snapshot(), "runner stopped");
        RunReport { abandoned }
    }
}

/// The wait after the `attempt`th failed lease request: the policy's backoff, never shorter
/// than the server's `Retry-After`.
pub(super) fn lease_delay(policy: &RetryPolicy, attempt: u32, error: &ClientError) -> Duration {
    policy.delay_after(attempt, error)
}

/// Starts one item task per lease, each holding one of the `permits`.
fn start<W: Worker>(
    shared: &Arc<Shared<W>>,
    tasks: &mut JoinSet<()>,
    leases: Vec<Lease>,
    mut permits: Vec<OwnedSemaphorePermit>,
) {
    for lease in leases {
        let permit = permits.pop().expect("no more leases than permits");
        Counters::add(&shared.metrics.counters().leased);
        tasks.spawn(item_task(Arc::clone(shared), lease, permit));
    }
}

/// Logs how an item task ended when it did not end normally.
fn log_join_error(joined: Result<(), JoinError>) {
    match joined {
        Ok(()) => {}
        Err(e) if e.is_panic() => {
            let message = panic_message(e.into_panic());
            tracing::error!("item task panicked outside the worker function: {message}");
        }
        Err(e) => tracing::debug!("item task cancelled: {e}"),
    }
}

/// Every [`SWEEP_EVERY`], redelivers the spool files of leases no item task is delivering.
async fn sweep_spool<W>(shared: Arc<Shared<W>>) {
    let mut tick = tokio::time::interval_at(Instant::now() + SWEEP_EVERY, SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let swept = shared
            .client
            .redeliver_spool_except(|lease_id| {
                shared
                    .running
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .contains_key(lease_id)
            })
            .await;
        match swept {
            Ok(redelivered) => count_redeliveries(&shared.metrics, &redelivered),
            Err(e) => tracing::warn!(code = e.code(), "spool not listed for redelivery: {e}"),
        }
    }
}

/// Logs each redelivered spool file and counts the acknowledged ones.
fn count_redeliveries(metrics: &Metrics, redelivered: &[Redelivery]) {
    for r in redelivered {
        match &r.outcome {
            Ok(ack) => {
                Counters::add(&metrics.counters().redelivered);
                tracing::info!(file = %r.file.display(), state = %ack.state, "spooled outcome redelivered");
            }
            Err(e) => {
                tracing::warn!(file = %r.file.display(), code = e.code(), for_good = e.is_final(), "spooled outcome not redelivered: {e}");
            }
        }
    }
}

/// Aborts the task when dropped (the item task itself may be aborted after the grace).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One slot of the capacity: the leased item, then each next lease its completion brought,
/// until a delivery brings none; then the slot is free for the lease loop.
async fn item_task<W: Worker>(shared: Arc<Shared<W>>, lease: Lease, permit: OwnedSemaphorePermit) {
    let mut next = Some(lease);
    while let Some(lease) = next.take() {
        next = one_item(&shared, lease).await;
        if next.is_some() {
            let counters = shared.metrics.counters();
            Counters::add(&counters.leased);
            Counters::add(&counters.leased_with_completion);
            if shared.shutdown.is_shutdown() {
                tracing::info!(
                    "stopping: the completion in flight was granted the next lease; it runs within the grace"
                );
            }
        }
    }
    drop(permit);
}

/// One item: work under the keep-alive (in its `process` span when the lease has a trace
/// context; the lease's calls send that span's context), then deliver; the next lease the
/// completion brought.
async fn one_item<W: Worker>(shared: &Arc<Shared<W>>, lease: Lease) -> Option<Lease> {
    let process = ProcessSpan::open(&shared.tracer, &lease);
    let lease = match process.as_ref().and_then(ProcessSpan::traceparent) {
        Some(traceparent) => lease.propagating(traceparent),
        None => lease,
    };
    let cx = process
        .as_ref()
        .map_or_else(Context::current, |p| p.context().clone());
    let span = {
        // Created in the process span's context, so that a `tracing` bridge to OpenTelemetry
        // puts this span (and the handler's `tracing` spans) under it.
        let _current = cx.clone().attach();
        tracing::info_span!(
            "item",
            item_id = %lease.item.id,
            lease_id = %lease.lease_id,
            kind = %lease.item.kind,
            attempt = lease.item.attempt
        )
    };
    async move {
        let counters = shared.metrics.counters();
        counters.in_flight.fetch_add(1, Ordering::Relaxed);
        shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(lease.lease_id.clone(), lease.item.id.clone());
        let _done = InFlight(shared, lease.lease_id.clone());
        let heartbeat = lease.keepalive(&shared.client);
        let work = {
            let shared = Arc::clone(shared);
            let lease = lease.clone();
            AbortOnDrop(tokio::spawn(
                async move { shared.worker.perform(lease).await }
                    .with_context(cx)
                    .in_current_span(),
            ))
        };
        let mut work = work;
        let outcome = tokio::select! {
            joined = &mut work.0 => match joined {
                Ok(outcome) => outcome,
                Err(e) => {
                    Counters::add(&counters.panicked);
                    let message = join_message(e);
                    tracing::error!("worker function panicked: {message}");
                    Outcome::retry(PANIC_CODE, format!("worker function panicked: {message}"))
                }
            },
            () = heartbeat.wait_lost() => {
                Counters::add(&counters.lost_leases);
                Counters::add(&counters.cancelled);
                tracing::warn!("lease lost: work cancelled");
                if let Some(process) = &process {
                    process.failed("E_LEASE_LOST", "the lease was lost: work cancelled");
                }
                return None;
            }
        };
        if let (Some(process), Outcome::Retry { code, message } | Outcome::Fail { code, message }) =
            (&process, &outcome)
        {
            process.failed(code, message);
        }
        let delivered = deliver(shared, &lease, outcome).await;
        drop(heartbeat);
        // Delivered, or left in the spool with its traceparent: the span ends.
        drop(process);
        record(counters, delivered)
    }
    .instrument(span)
    .await
}

/// Removes an item from the running set however its task ends (finished or aborted).
struct InFlight<'a, W>(&'a Shared<W>, String);

impl<W> Drop for InFlight<'_, W> {
    fn drop(&mut self) {
        self.0
            .metrics
            .counters()
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
        self.0
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.1);
    }
}

/// What was delivered, and the server's answer.
enum Delivered {
    /// With the next lease when the completion asked for one and got it.
    Done(Option<Box<Lease>>),
    Retried,
    Failed,
    Parked,
    Abandoned,
}

async fn deliver<W>(
    shared: &Shared<W>,
    lease: &Lease,
    outcome: Outcome,
) -> Result<Delivered, ClientError> {
    let client = &shared.client;
    let ack: Result<(Delivered, Ack), ClientError> = match outcome {
        // After shutdown was asked a completion asks for no lease it would not work on.
        Outcome::Done { result, next } if shared.lease_next && !shared.shutdown.is_shutdown() => {
            client
                .complete_and_lease(lease, result, next)
                .await
                .map(|mut a| (Delivered::Done(a.next_lease.take().map(Box::new)), a))
        }
        Outcome::Done { result, next } => client
            .complete(lease, result, next)
            .await
            .map(|a| (Delivered::Done(None), a)),
        Outcome::Retry { code, message } => client
            .fail(lease, &code, &message, true)
            .await
            .map(|a| (Delivered::Retried, a)),
        Outcome::Fail { code, message } => client
            .fail(lease, &code, &message, false)
            .await
            .map(|a| (Delivered::Failed, a)),
        Outcome::NeedsSubtool { signature, detail } => match shared
            .image_digest
            .as_ref()
            .map(|d| std::panic::catch_unwind(AssertUnwindSafe(|| d.now())))
        {
            Some(Ok(digest)) => client
                .needs_subtool(lease, &digest, &signature, detail)
                .await
                .map(|a| (Delivered::Parked, a)),
            Some(Err(payload)) => {
                Counters::add(&shared.metrics.counters().panicked);
                let message = panic_message(payload);
                tracing::error!(
                    "the image digest source panicked: {message}; failing the item retryably"
                );
                client
                    .fail(
                        lease,
                        PANIC_CODE,
                        &format!("the image digest source panicked: {message}"),
                        true,
                    )
                    .await
                    .map(|a| (Delivered::Retried, a))
            }
            None => {
                tracing::error!(
                    "needs_subtool without an image digest: set Runner::builder(..).image_digest(..); failing the item retryably"
                );
                client
                    .fail(
                        lease,
                        "E_NO_IMAGE_DIGEST",
                        "the worker asked to park the item but has no image digest configured",
                        true,
                    )
                    .await
                    .map(|a| (Delivered::Retried, a))
            }
        },
        Outcome::Abandon => {
            tracing::info!("abandoned: nothing sent, the lease is left to expire");
            return Ok(Delivered::Abandoned);
        }
    };
    let (delivered, ack) = ack?;
    tracing::info!(state = %ack.state, replayed = ack.replayed, "delivered");
    // A retryable failure on the item's last attempt fails it for good.
    Ok(match delivered {
        Delivered::Retried if ack.state == "failed" => Delivered::Failed,
        d => d,
    })
}

/// Counts what was delivered; the next lease it brought.
fn record(counters: &Counters, delivered: Result<Delivered, ClientError>) -> Option<Lease> {
    match delivered {
        Ok(Delivered::Done(next)) => {
            Counters::add(&counters.done);
            return next.map(|lease| *lease);
        }
        Ok(Delivered::Retried) => Counters::add(&counters.retried),
        Ok(Delivered::Failed) => Counters::add(&counters.failed),
        Ok(Delivered::Parked) => Counters::add(&counters.parked),
        Ok(Delivered::Abandoned) => Counters::add(&counters.abandoned),
        Err(ClientError::LeaseLost { message }) => {
            Counters::add(&counters.lost_leases);
            tracing::warn!("outcome refused, the lease was lost: {message}");
        }
        Err(e) => {
            Counters::add(&counters.undelivered);
            if e.is_final() {
                tracing::error!(code = e.code(), "outcome refused for good: {e}");
            } else {
                tracing::error!(
                    code = e.code(),
                    every = ?SWEEP_EVERY,
                    "outcome not delivered, left in the spool and sent again periodically: {e}"
                );
            }
        }
    }
    None
}

/// The text of a panic, or what the join error says.
fn join_message(e: JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => panic_message(payload),
        Err(e) => e.to_string(),
    }
}

/// The text of a panic payload.
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a non-string panic payload)".into())
}
