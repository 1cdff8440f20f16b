//! The use cases, one module per group of them: `enqueue`, `lease` (with the long poll
//! and heartbeats), `complete`, `fail` (and retry), `needs_subtool` (parking, and the digest replay),
//! `inspect` (reads and reports outside the transitions), and the group-commit drainers of
//! `group`. Here: the `Muster` they share, its settings, the commit helpers and the checks
//! of request fields that several use cases make.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use muster_domain::item::LeaseUse;
use muster_domain::trace::TraceContext;
use muster_domain::{
    Item, Kind, LeaseId, LeaseOutcome, LeaseRecord, OutcomeKind, Principal, RetryPolicy, Routes,
    request_digest,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use time::Duration;

use crate::combine::Combiner;
use crate::error::AppError;
use crate::ports::{
    Clock, HealthLog, Ids, ItemReads, Jitter, LeaseStore, LockedLease, Logbook, LogbookTx,
};
use crate::signal::WorkSignal;
use crate::stats::Stats;
use crate::views::ItemTrace;

mod complete;
mod controls;
mod enqueue;
mod fail;
mod grace;
mod group;
mod inspect;
mod lease;
mod listing;
mod needs_subtool;
mod pause;
mod retention;

use group::{CompletionLanes, LeaseLanes};

/// The longest a lease request may wait for work.
pub const MAX_WAIT_MS: u64 = 30_000;
pub use controls::MAX_REASON;
pub use enqueue::MAX_DELAY;
pub use inspect::OldestAges;
pub use retention::{
    DEFAULT_RETAIN_DAYS, DEFAULT_RETAIN_EDIT_TEXT_DAYS, FINISHED, PassReport, Retention,
    RetentionFigures, RetentionSettings,
};
/// How many exhausted-expired candidates one lease attempt fails before it gives up.
const MAX_CANDIDATES: usize = 16;
const MAX_WORKER_ID: usize = 128;
/// The most items one lease request or one batch of completions may carry.
pub const MAX_BATCH: u32 = 256;

/// The most `next` items one completion may carry ("Edge limits" in protocol.md).
pub const MAX_NEXT: usize = 64;
/// The most items one transaction of completions may create: a `POST /v1/completions` batch
/// is refused over it, and a group commit of single completions stops adding completions at
/// it. With each completion's own ledger row, one transaction publishes at most
/// `MAX_BATCH + MAX_BATCH_NEXT` = 768 feed events, within the feed's buffer of 1,024
/// (`FeedSettings::buffer`), so no subscriber is cut loose by the largest allowed completion.
pub const MAX_BATCH_NEXT: usize = 512;

/// A completion carries at most [`MAX_NEXT`] `next` items.
pub fn check_next(req: &crate::views::CompleteRequest) -> Result<(), AppError> {
    if req.next.len() > MAX_NEXT {
        return Err(AppError::BadRequest(format!(
            "a completion carries at most {MAX_NEXT} next items, not {}",
            req.next.len()
        )));
    }
    Ok(())
}

/// A batch of completions carries at most [`MAX_NEXT`] `next` items in each and
/// [`MAX_BATCH_NEXT`] in all; asked of the whole request, before anything is written.
pub fn check_batch_next<'a>(
    reqs: impl IntoIterator<Item = &'a crate::views::CompleteRequest>,
) -> Result<(), AppError> {
    let mut total = 0;
    for req in reqs {
        check_next(req)?;
        total += req.next.len();
    }
    if total > MAX_BATCH_NEXT {
        return Err(AppError::BadRequest(format!(
            "a batch of completions creates at most {MAX_BATCH_NEXT} next items in all, not {total}"
        )));
    }
    Ok(())
}

/// A batch of completions holds 1 to [`MAX_BATCH`] entries. `POST /v1/completions` asks it of
/// the whole request, whatever its entries hold, and every batch transaction keeps it.
pub fn check_completions_batch(len: usize) -> Result<(), AppError> {
    if len == 0 || len > MAX_BATCH as usize {
        return Err(AppError::BadRequest(format!(
            "a batch holds 1 to {MAX_BATCH} completions"
        )));
    }
    Ok(())
}
/// Payload bytes (as stored) one lease transaction loads before it stops adding items; the
/// first item is always leased. Bounds the memory of one answer (and of one group of single
/// lease requests) far below the pod's 48 MiB whatever the payloads: a request body, and so a
/// payload, may be up to 1 MiB.
const LEASE_PAYLOAD_BUDGET: u64 = 2 * 1024 * 1024;
const MAX_IDEMPOTENCY_KEY: usize = 256;

/// Settings of the use cases.
#[derive(Debug, Clone)]
pub struct Config {
    pub routes: Routes,
    /// Retry policy per kind; kinds not listed use the default.
    pub retry: HashMap<Kind, RetryPolicy>,
    pub lease_ttl: Duration,
    /// While a lease request waits, it re-checks at least this often, for work that becomes
    /// leasable by the passing of time (an expired lease, a `not_before`) or that another
    /// replica enqueued.
    pub recheck: StdDuration,
    /// Group commit: how many batch transactions of one worker kind may run at once for
    /// concurrent single lease requests, and as many for single completions. Requests that
    /// arrive while that many run are written together by the next one (see `combine`).
    pub group_commits: usize,
    /// How long an expired lease on an item's last attempt stays usable (`--final-grace-ms`);
    /// `None`: three lease times.
    pub final_grace: Option<Duration>,
    /// Maximum run time per kind (the pipeline file's `limits`); kinds not listed use
    /// [`DEFAULT_MAX_RUN`].
    pub max_run: HashMap<Kind, Duration>,
    /// The retention period (`--retain-days`): an unknown lease granted before it may belong
    /// to a removed item (`retention`).
    pub retention: Duration,
}

/// The contract's default maximum run time of a lease: one hour.
pub const DEFAULT_MAX_RUN: Duration = Duration::hours(1);

impl Default for Config {
    fn default() -> Self {
        Config {
            routes: Routes::default(),
            retry: HashMap::new(),
            lease_ttl: Duration::seconds(30),
            recheck: StdDuration::from_secs(1),
            group_commits: 1,
            final_grace: None,
            max_run: HashMap::new(),
            retention: Duration::days(i64::from(DEFAULT_RETAIN_DAYS)),
        }
    }
}

impl Config {
    /// The maximum run time of `kind`'s leases.
    pub fn max_run(&self, kind: Kind) -> Duration {
        self.max_run.get(&kind).copied().unwrap_or(DEFAULT_MAX_RUN)
    }

    pub fn policy(&self, kind: Kind) -> RetryPolicy {
        self.retry.get(&kind).copied().unwrap_or_default()
    }

    /// When expired leases of `kind`'s items on their last attempt may be taken over.
    pub fn final_grace(&self, kind: Kind) -> crate::ports::FinalGrace {
        crate::ports::FinalGrace {
            max_attempts: self.policy(kind).max_attempts,
            grace: self.final_grace.unwrap_or(self.lease_ttl * 3),
        }
    }

    /// The heartbeat interval told to workers: a third of the TTL, so two heartbeats may be
    /// lost before the lease expires.
    pub fn heartbeat_ms(&self) -> u64 {
        (self.lease_ttl.whole_milliseconds() / 3).max(1) as u64
    }
}
/// The stores a `Muster` works on: Logbook's transactions, and the item reads and health
/// reports that need none.
#[derive(Clone)]
pub struct Stores {
    pub logbook: Arc<dyn Logbook>,
    pub items: Arc<dyn ItemReads>,
    pub health: Arc<dyn HealthLog>,
}

impl Stores {
    /// Every store from one adapter that plays all the roles.
    pub fn of<S: Logbook + ItemReads + HealthLog + 'static>(store: Arc<S>) -> Self {
        Stores {
            logbook: store.clone(),
            items: store.clone(),
            health: store,
        }
    }
}

/// Muster's use cases, over its ports.
#[derive(Clone)]
pub struct Muster {
    stores: Stores,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    jitter: Arc<dyn Jitter>,
    signal: WorkSignal,
    config: Arc<Config>,
    stats: Arc<Stats>,
    completions: Arc<CompletionLanes>,
    leases: Arc<LeaseLanes>,
    nodes: Arc<crate::nodes::NodeDirectory>,
}

debug_showing!(Muster, config = config);

impl Muster {
    pub fn new(
        stores: Stores,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn Ids>,
        jitter: Arc<dyn Jitter>,
        signal: WorkSignal,
        config: Config,
    ) -> Self {
        Muster {
            stores,
            clock,
            ids,
            jitter,
            signal,
            completions: Arc::new(Combiner::new(config.group_commits)),
            leases: Arc::new(Combiner::new(config.group_commits)),
            config: Arc::new(config),
            stats: Arc::new(Stats::default()),
            nodes: Arc::new(crate::nodes::NodeDirectory::form_only()),
        }
    }

    pub fn signal(&self) -> &WorkSignal {
        &self.signal
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What the use cases counted since start.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Opens the transaction of a call that finishes `lease_id` (fail, needs_subtool) with
    /// the outcome `kind` and the `request` (its digest is what an identical retry is known
    /// by), sent by `worker_id` when the caller named one: the lease and its item locked with
    /// the database's clock, or, for the same call made before, its stored answer (`what`
    /// names it when that answer cannot be read). A lease used after its final grace fails the
    /// item here and the call is refused.
    async fn begin_finish<A: DeserializeOwned>(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        worker_id: Option<&str>,
        (kind, request): (OutcomeKind, &Value),
        what: &str,
    ) -> Result<Finishing<A>, AppError> {
        let digest = request_digest(kind, request);
        if let Some(w) = worker_id {
            check_worker_id(w)?;
        }
        let mut tx = self.stores.logbook.begin().await?;
        let (record, mut item, trace) = self.lock_lease(tx.as_mut(), lease_id).await?;
        item.check_sender(&record, actor, worker_id)?;
        if let LeaseUse::Replay(response) = item.check_finish(&record, actor, kind, &digest)? {
            let traced = ItemTrace::of(&item, record.fence, trace);
            return serde_json::from_value(response)
                .map(|answer| Finishing::Replay(answer, traced))
                .map_err(|e| AppError::Internal(format!("stored {what} unreadable: {e}")));
        }
        // The database's clock (answered with the lock), the one every replica goes by.
        let now = tx.now().await?;
        if let Some(entry) = self.past_final_grace(&record, &mut item, actor, now)? {
            return Err(self.lose_past_final_grace(tx, &item, entry).await);
        }
        Ok(Finishing::Proceed(Box::new(Finish {
            tx,
            record,
            item,
            trace,
            now,
            outcome: (kind, digest),
        })))
    }

    /// Ends a finishing call: the item as changed, the lease's outcome (its kind, the request's
    /// digest and `answer`, replayed to an identical retry) and `entries`, committed.
    async fn close_finish<A: serde::Serialize>(
        &self,
        mut f: Finish,
        answer: &A,
        entries: &[muster_ledger::SealedEntry],
    ) -> Result<(), AppError> {
        f.tx.save_item(&f.item).await?;
        let (kind, digest) = f.outcome;
        let stored = LeaseOutcome {
            kind,
            digest,
            response: to_value(answer)?,
        };
        f.tx.finish_lease(f.record.lease_id, &stored, f.now).await?;
        self.commit_with(f.tx, entries).await
    }

    /// Commits and tells the live feed that the ledger may have grown.
    async fn commit(&self, tx: Box<dyn LogbookTx>) -> Result<(), AppError> {
        tx.commit().await?;
        self.signal.ledger_changed();
        Ok(())
    }

    /// Appends `entries` and commits, in one go when the adapter can.
    async fn commit_with(
        &self,
        tx: Box<dyn LogbookTx>,
        entries: &[muster_ledger::SealedEntry],
    ) -> Result<(), AppError> {
        tx.append_and_commit(entries).await?;
        self.signal.ledger_changed();
        Ok(())
    }
}

/// One lease request waiting for a group commit: who asks, and for how many items.
struct LeaseWant {
    worker_id: String,
    max: u32,
}

/// Whether a completion also asks for the next lease in its transaction, and for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NextLease {
    /// No next lease.
    NotAsked,
    /// A next lease for the completed lease's worker.
    ForLeaseWorker,
    /// A next lease for the named worker.
    For(String),
}

impl From<Option<String>> for NextLease {
    /// `"lease_next": true` with the `worker_id` it names, if any.
    fn from(worker_id: Option<String>) -> Self {
        match worker_id {
            Some(worker_id) => NextLease::For(worker_id),
            None => NextLease::ForLeaseWorker,
        }
    }
}

/// Whether a failed transaction of several completions is redone one completion per
/// transaction: not when Logbook is unreachable (each would only fail the same way) nor for a
/// malformed batch, but for anything that may belong to one completion's body.
fn splits(e: &AppError) -> bool {
    !matches!(e, AppError::Unavailable | AppError::BadRequest(_))
}

/// What [`Muster::begin_finish`] found.
// Returned once per call and taken apart at once: boxing the larger side would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Finishing<A> {
    /// The lease may finish.
    Proceed(Box<Finish>),
    /// The same call was made before: its answer, and the item for its span.
    Replay(A, Option<ItemTrace>),
}

/// A finishing call under way: its transaction, the lease and its item (locked in `tx`), the
/// database's clock, and the outcome's kind with the request's digest.
struct Finish {
    tx: Box<dyn LogbookTx>,
    record: LeaseRecord,
    item: Item,
    /// The trace context the item keeps.
    trace: Option<TraceContext>,
    now: time::OffsetDateTime,
    outcome: (OutcomeKind, [u8; 32]),
}

impl Finish {
    /// The item under the lease, for the call's item span.
    fn item_trace(&self) -> Option<ItemTrace> {
        ItemTrace::of(&self.item, self.record.fence, self.trace)
    }
}

impl Muster {
    /// Locks a lease and its item; an unknown lease is [`Muster::unknown_lease`].
    async fn lock_lease(
        &self,
        tx: &mut (impl LeaseStore + ?Sized),
        id: LeaseId,
    ) -> Result<LockedLease, AppError> {
        tx.lock_lease(id)
            .await?
            .ok_or_else(|| self.unknown_lease(id))
    }
}

fn check_worker_id(worker_id: &str) -> Result<(), AppError> {
    let ok = !worker_id.is_empty()
        && worker_id.len() <= MAX_WORKER_ID
        && worker_id.chars().all(|c| c.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(AppError::BadRequest(format!(
            "worker_id must be 1 to {MAX_WORKER_ID} printable ASCII characters"
        )))
    }
}

fn require_object(v: &Value, field: &str) -> Result<(), AppError> {
    if v.is_object() {
        require_storable(v, field)
    } else {
        Err(AppError::BadRequest(format!(
            "{field} must be a JSON object"
        )))
    }
}

/// PostgreSQL's `jsonb` cannot hold U+0000 (valid JSON, refused by the database): such a
/// document is the caller's error, answered 400 before any write (and so never fails the
/// other requests of a group commit).
fn require_storable(v: &Value, field: &str) -> Result<(), AppError> {
    fn has_nul(v: &Value) -> bool {
        match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(a) => a.iter().any(has_nul),
            Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
    if has_nul(v) {
        Err(AppError::BadRequest(format!(
            "{field} must not contain U+0000 (\\u0000): Logbook cannot store it"
        )))
    } else {
        Ok(())
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, AppError> {
    serde_json::to_value(v).map_err(|e| AppError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests;
