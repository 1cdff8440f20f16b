//! The use cases.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use muster_domain::health::{self, HealthEvent, PodHealth};
use muster_domain::item::{LeaseResult, LeaseUse};
use muster_domain::{
    FailOutcome, Item, ItemId, ItemState, Kind, LeaseId, LeaseOutcome, LeaseRecord, OutcomeKind,
    Principal, RetryPolicy, Routes, TransitionError, is_image_digest, request_digest,
};
use serde_json::{Value, json};
use time::Duration;

use crate::combine::{Combiner, DrainGuard};
use crate::error::AppError;
use crate::ports::{Clock, Ids, Inserted, Jitter, Logbook, LogbookTx, NewItem};
use crate::signal::WorkSignal;
use crate::stats::Stats;
use crate::views::*;

/// The longest a lease request may wait for work.
pub const MAX_WAIT_MS: u64 = 30_000;
/// How many exhausted-expired candidates one lease attempt fails before it gives up.
const MAX_CANDIDATES: usize = 16;
const MAX_WORKER_ID: usize = 128;
/// The most items one lease request or one batch of completions may carry.
pub const MAX_BATCH: u32 = 256;

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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            routes: Routes::default(),
            retry: HashMap::new(),
            lease_ttl: Duration::seconds(30),
            recheck: StdDuration::from_secs(1),
            group_commits: 1,
        }
    }
}

impl Config {
    pub fn policy(&self, kind: Kind) -> RetryPolicy {
        self.retry.get(&kind).copied().unwrap_or_default()
    }

    /// The heartbeat interval told to workers: a third of the TTL, so two heartbeats may be
    /// lost before the lease expires.
    pub fn heartbeat_ms(&self) -> u64 {
        (self.lease_ttl.whole_milliseconds() / 3).max(1) as u64
    }
}

/// Muster's use cases, over its ports.
#[derive(Clone)]
pub struct Muster {
    logbook: Arc<dyn Logbook>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    jitter: Arc<dyn Jitter>,
    signal: WorkSignal,
    config: Arc<Config>,
    stats: Arc<Stats>,
    completions: Arc<CompletionLanes>,
    leases: Arc<LeaseLanes>,
}

/// One lease request waiting for a group commit: who asks, and for how many items.
struct LeaseWant {
    worker_id: String,
    max: u32,
}

type LeaseLanes = Combiner<Principal, LeaseWant, Result<Vec<LeaseGranted>, AppError>>;

/// A single completion waiting for a group commit, with its `lease_next` wish: `None` for no
/// next lease, `Some(None)` for one for the completed lease's worker, `Some(Some(w))` for `w`.
struct Completion {
    lease_id: LeaseId,
    req: CompleteRequest,
    lease_next: Option<Option<String>>,
}

type CompletionAnswer = Result<(Completed, Option<LeaseGranted>), AppError>;
type CompletionLanes = Combiner<Principal, Completion, CompletionAnswer>;

impl std::fmt::Debug for Muster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Muster")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Muster {
    pub fn new(
        logbook: Arc<dyn Logbook>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn Ids>,
        jitter: Arc<dyn Jitter>,
        signal: WorkSignal,
        config: Config,
    ) -> Self {
        Muster {
            logbook,
            clock,
            ids,
            jitter,
            signal,
            completions: Arc::new(Combiner::new(config.group_commits)),
            leases: Arc::new(Combiner::new(config.group_commits)),
            config: Arc::new(config),
            stats: Arc::new(Stats::default()),
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

    /// `POST /v1/items`: operators, Conn, and workers whose routes allow the kind.
    pub async fn enqueue(
        &self,
        actor: Principal,
        req: EnqueueRequest,
    ) -> Result<Enqueued, AppError> {
        let allowed = match actor {
            Principal::Operator | Principal::Conn => true,
            Principal::Worker(k) => self.config.routes.allows(k, req.kind),
            Principal::Shipkeeper => false,
        };
        if !allowed {
            return Err(AppError::Forbidden(format!(
                "{actor} may not enqueue {} items",
                req.kind
            )));
        }
        require_object(&req.payload, "payload")?;
        if req
            .idempotency_key
            .as_ref()
            .is_some_and(|key| key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY)
        {
            return Err(AppError::BadRequest(format!(
                "idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY} bytes"
            )));
        }
        let now = self.clock.now();
        let (item, entry) =
            Item::enqueue(self.ids.item_id(), req.kind, req.priority, actor, now, None);
        let id = item.id;
        let new = NewItem {
            item,
            payload: req.payload,
            idempotency_key: req.idempotency_key,
            parent: None,
            created_at: now,
            entry: entry.clone(),
        };
        let mut tx = self.logbook.begin().await?;
        match tx.insert_item(&new).await? {
            Inserted::New => {
                self.commit_with(tx, &[entry]).await?;
                self.stats.enqueued.add(req.kind, 1);
                self.signal.notify(req.kind);
                Ok(Enqueued {
                    item_id: id.to_string(),
                    state: ItemState::Queued,
                    created: true,
                })
            }
            // The contract: the same body as the first answer, whatever became of the item since.
            Inserted::Existing { id, .. } => {
                self.commit(tx).await?;
                Ok(Enqueued {
                    item_id: id.to_string(),
                    state: ItemState::Queued,
                    created: false,
                })
            }
        }
    }

    /// `POST /v1/leases`: the first leasable item of the worker's kind, waiting up to `wait_ms`
    /// for one to arrive. `None` when nothing became leasable in time.
    pub async fn lease(
        &self,
        actor: Principal,
        worker_id: &str,
        wait_ms: u64,
    ) -> Result<Option<LeaseGranted>, AppError> {
        Ok(self
            .lease_many(actor, worker_id, wait_ms, 1)
            .await?
            .into_iter()
            .next())
    }

    /// `POST /v1/leases` with `max`: up to `max` leasable items of the worker's kind, in lease
    /// order, in one transaction; waits up to `wait_ms` for the first one, not for a full
    /// batch. Empty when nothing became leasable in time.
    pub async fn lease_many(
        &self,
        actor: Principal,
        worker_id: &str,
        wait_ms: u64,
        max: u32,
    ) -> Result<Vec<LeaseGranted>, AppError> {
        let kind = actor.worker_kind().ok_or_else(|| {
            AppError::Forbidden(format!("{actor} is not a worker and holds no leases"))
        })?;
        check_worker_id(worker_id)?;
        if wait_ms > MAX_WAIT_MS {
            return Err(AppError::BadRequest(format!(
                "wait_ms must be 0 to {MAX_WAIT_MS}"
            )));
        }
        if !(1..=MAX_BATCH).contains(&max) {
            return Err(AppError::BadRequest(format!(
                "max must be 1 to {MAX_BATCH}"
            )));
        }
        let deadline = tokio::time::Instant::now() + StdDuration::from_millis(wait_ms);
        loop {
            let seen = self.signal.generation(kind);
            let granted = self.try_lease(worker_id, actor, max).await?;
            if !granted.is_empty() {
                return Ok(granted);
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() || self.signal.is_shut_down() {
                return Ok(granted);
            }
            self.signal
                .wait_past(kind, seen, remaining.min(self.config.recheck))
                .await;
        }
    }

    /// One attempt to lease, written in a transaction shared with the concurrent attempts of
    /// the same worker kind (group commit).
    async fn try_lease(
        &self,
        worker_id: &str,
        actor: Principal,
        max: u32,
    ) -> Result<Vec<LeaseGranted>, AppError> {
        let want = LeaseWant {
            worker_id: worker_id.to_owned(),
            max,
        };
        let drain = || {
            let this = self.clone();
            tokio::spawn(async move { this.drain_leases(actor).await });
        };
        self.leases
            .call(actor, want, drain)
            .await
            .unwrap_or_else(|| Err(AppError::Internal("a lease request went unanswered".into())))
    }

    /// A drainer of `actor`'s lease lane: batches of queued lease requests, at most
    /// `MAX_BATCH` items asked for in all.
    async fn drain_leases(self, actor: Principal) {
        // The guard first: whatever ends this drainer, its place in the lane is given back.
        let mut guard = DrainGuard::new(&*self.leases, actor);
        let Some(kind) = actor.worker_kind() else {
            return;
        };
        loop {
            let mut asked = 0;
            let Some(batch) = guard.next_batch(|w| {
                let fits = asked + w.max <= MAX_BATCH;
                if fits {
                    asked += w.max;
                }
                fits
            }) else {
                return;
            };
            let (wants, answers): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|w| (w.req, w.answer)).unzip();
            self.stats.lease_groups.add(kind, 1);
            self.stats
                .lease_group_requests
                .add(kind, wants.len() as u64);
            match self.lease_for(kind, actor, &wants).await {
                Ok((granted, truncated)) => {
                    let mut again = Vec::new();
                    for ((req, answer), granted) in wants.into_iter().zip(answers).zip(granted) {
                        if truncated && granted.is_empty() {
                            // Items were left because of the payload budget, not because
                            // there were none: this request goes first in the next batch.
                            again.push(crate::combine::Waiting { req, answer });
                        } else {
                            // A receiver that is gone belonged to a client that hung up; its
                            // leases expire like those of a worker that crashed.
                            let _ = answer.send(Ok(granted));
                        }
                    }
                    guard.requeue(again);
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// Leases for every want in one transaction; the grants of each, in want order, and
    /// whether leasable items were left for the payload budget.
    async fn lease_for(
        &self,
        kind: Kind,
        actor: Principal,
        wants: &[LeaseWant],
    ) -> Result<(Vec<Vec<LeaseGranted>>, bool), AppError> {
        let now = self.clock.now();
        let mut tx = self.logbook.begin().await?;
        let leased = self.lease_in(tx.as_mut(), kind, wants, actor, now).await?;
        if leased.entries.is_empty() {
            self.commit(tx).await?;
        } else {
            self.write_leased(tx, kind, &leased, now).await?;
        }
        if leased.truncated {
            // It held leasable rows it did not lease: requests that skipped them meanwhile
            // must look again now, not at the next recheck.
            self.signal.notify(kind);
        }
        Ok((leased.granted, leased.truncated))
    }

    /// Writes what `lease_in` granted (items, lease records, ledger rows) and commits.
    async fn write_leased(
        &self,
        mut tx: Box<dyn LogbookTx>,
        kind: Kind,
        leased: &Leased,
        now: time::OffsetDateTime,
    ) -> Result<(), AppError> {
        tx.save_items(&leased.saved).await?;
        tx.insert_leases(&leased.records, kind, now).await?;
        self.commit_with(tx, &leased.entries).await?;
        self.stats.leased.add(kind, leased.records.len() as u64);
        self.stats.failed_final.add(kind, leased.exhausted);
        Ok(())
    }

    /// Locks and leases up to `max` items of `kind` for each want in `tx`, the wants served
    /// in order; the caller writes what it answers (items, lease records, ledger entries) and
    /// commits.
    async fn lease_in(
        &self,
        tx: &mut dyn LogbookTx,
        kind: Kind,
        wants: &[LeaseWant],
        actor: Principal,
        now: time::OffsetDateTime,
    ) -> Result<Leased, AppError> {
        let policy = self.config.policy(kind);
        let max: u32 = wants.iter().map(|w| w.max).sum();
        let mut out = Leased {
            granted: wants.iter().map(|_| Vec::new()).collect(),
            ..Leased::default()
        };
        // The want being served: the first that has fewer than it asked for.
        let mut serving = 0;
        // Candidates whose expired lease used up the item's attempts are failed instead (and
        // written in this transaction); a round that found only those looks again.
        for _ in 0..MAX_CANDIDATES {
            let candidates = tx
                .lock_next_leasable(kind, now, max, LEASE_PAYLOAD_BUDGET)
                .await?;
            let found = candidates.len();
            let mut exhausted = Vec::new();
            for (mut item, payload) in candidates {
                let Some(payload) = payload else {
                    // Past the payload budget: left for the next transaction.
                    out.truncated = true;
                    continue;
                };
                while wants
                    .get(serving)
                    .is_some_and(|w| out.granted[serving].len() >= w.max as usize)
                {
                    serving += 1;
                }
                // Never `None`: no more candidates are locked than were asked for in all.
                let Some(worker_id) = wants.get(serving).map(|w| w.worker_id.as_str()) else {
                    break;
                };
                let lease_id = self.ids.lease_id();
                match item.lease(
                    lease_id,
                    worker_id,
                    actor,
                    &policy,
                    self.config.lease_ttl,
                    now,
                ) {
                    Ok(LeaseResult::Granted(entry)) => {
                        out.records.push(LeaseRecord {
                            lease_id,
                            item_id: item.id,
                            fence: item.fence,
                            worker_id: worker_id.to_owned(),
                            outcome: None,
                        });
                        out.entries.push(entry);
                        let expires_at = item.lease.as_ref().map(|l| l.expires_at).unwrap_or(now);
                        out.granted[serving].push(LeaseGranted {
                            lease_id: lease_id.to_string(),
                            fence: item.fence.0,
                            expires_at,
                            heartbeat_ms: self.config.heartbeat_ms(),
                            item: LeasedItem {
                                id: item.id.to_string(),
                                kind,
                                priority: item.priority,
                                attempt: item.attempt,
                                payload,
                            },
                        });
                        out.saved.push((item, None));
                    }
                    Ok(LeaseResult::Exhausted(entry)) => {
                        tracing::info!(item_id = %item.id, kind = %kind, "expired lease had no attempts left; item failed");
                        out.entries.push(entry);
                        exhausted.push((item, None));
                        out.exhausted += 1;
                    }
                    Err(e) => {
                        return Err(AppError::Internal(format!(
                            "store offered item {} that the domain refuses to lease: {e}",
                            item.id
                        )));
                    }
                }
            }
            // Written now (it travels with the next statement), so that the next round's lock
            // does not offer this transaction's failed items again.
            if !exhausted.is_empty() {
                tx.save_items(&exhausted).await?;
            }
            if !out.records.is_empty() || found < max as usize {
                break;
            }
        }
        Ok(out)
    }

    /// `POST /v1/leases/{id}/heartbeat`.
    pub async fn heartbeat(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        worker_id: &str,
    ) -> Result<HeartbeatAck, AppError> {
        check_worker_id(worker_id)?;
        let now = self.clock.now();
        let mut tx = self.logbook.begin().await?;
        let (record, mut item) = lock_lease(tx.as_mut(), lease_id).await?;
        let expires_at = item.heartbeat(&record, actor, worker_id, self.config.lease_ttl, now)?;
        tx.save_item(&item).await?;
        self.commit(tx).await?;
        Ok(HeartbeatAck { expires_at })
    }

    /// `POST /v1/leases/{id}/complete`: the item's new state, its result, every `next` item
    /// and their ledger rows, in one transaction. Concurrent completions of one worker kind
    /// share that transaction (group commit): each is answered exactly as alone, and none
    /// is answered before its transaction committed.
    pub async fn complete(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: CompleteRequest,
    ) -> Result<Completed, AppError> {
        Ok(self.complete_grouped(actor, lease_id, req, None).await?.0)
    }

    /// A single completion through its kind's group commit.
    async fn complete_grouped(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: CompleteRequest,
        lease_next: Option<Option<String>>,
    ) -> CompletionAnswer {
        let completion = Completion {
            lease_id,
            req,
            lease_next,
        };
        let drain = || {
            let this = self.clone();
            tokio::spawn(async move { this.drain_completions(actor).await });
        };
        self.completions
            .call(actor, completion, drain)
            .await
            .unwrap_or_else(|| Err(AppError::Internal("a completion went unanswered".into())))
    }

    /// A drainer of `actor`'s completion lane: batches of queued completions, no lease twice
    /// in one batch (a repeated one waits for the next, where it is a replay or a conflict).
    async fn drain_completions(self, actor: Principal) {
        let mut guard = DrainGuard::new(&*self.completions, actor);
        loop {
            let mut seen = std::collections::HashSet::new();
            let Some(batch) =
                guard.next_batch(|c| seen.len() < MAX_BATCH as usize && seen.insert(c.lease_id))
            else {
                return;
            };
            let mut reqs = Vec::with_capacity(batch.len());
            let mut nexts = Vec::with_capacity(batch.len());
            let mut answers = Vec::with_capacity(batch.len());
            for w in batch {
                reqs.push((w.req.lease_id, w.req.req));
                nexts.push(w.req.lease_next);
                answers.push(w.answer);
            }
            if let Some(kind) = actor.worker_kind() {
                self.stats.completion_groups.add(kind, 1);
                self.stats
                    .completion_group_requests
                    .add(kind, reqs.len() as u64);
            }
            // Kept to complete one by one if the group fails for a reason of its own.
            let alone = (reqs.len() > 1).then(|| (reqs.clone(), nexts.clone()));
            match (self.complete_batch(actor, reqs, nexts).await, alone) {
                (Ok((results, next_leases)), _) => {
                    for ((answer, result), next) in
                        answers.into_iter().zip(results).zip(next_leases)
                    {
                        // A receiver that is gone belonged to a client that hung up (a next
                        // lease it was granted expires like a crashed worker's).
                        let _ = answer.send(result.map(|done| (done, next)));
                    }
                }
                (Err(e), Some((reqs, nexts))) if splits(&e) => {
                    let open: Vec<bool> = answers.iter().map(|a| !a.is_closed()).collect();
                    let redone = self
                        .complete_each_alone(actor, &e, reqs, nexts, |i| open[i])
                        .await;
                    for (answer, result) in answers.into_iter().zip(redone) {
                        if let Some(result) = result {
                            let _ = answer.send(result);
                        }
                    }
                }
                // Logbook unreachable (every request of the group gets the same 503 and
                // retries; trying them one by one would only wait for it again), or a group
                // of one.
                (Err(e), _) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// After a shared completion transaction failed with `error` (nothing of it written):
    /// each completion `wanted` (by index) in a transaction of its own, so that one the
    /// database refuses fails only itself; `None` for one not wanted.
    async fn complete_each_alone(
        &self,
        actor: Principal,
        error: &AppError,
        reqs: Vec<(LeaseId, CompleteRequest)>,
        nexts: Vec<Option<Option<String>>>,
        wanted: impl Fn(usize) -> bool,
    ) -> Vec<Option<CompletionAnswer>> {
        // The database's own words (an internal error's Display is only "internal error").
        let detail = match error {
            AppError::Internal(detail) => detail.clone(),
            other => other.to_string(),
        };
        tracing::warn!(
            requests = reqs.len(),
            error = %detail,
            code = error.code(),
            "a transaction of several completions failed; completing them one by one"
        );
        if let Some(kind) = actor.worker_kind() {
            self.stats.completion_splits.add(kind, 1);
        }
        let mut answers = Vec::with_capacity(reqs.len());
        for (i, (req, next)) in reqs.into_iter().zip(nexts).enumerate() {
            answers.push(if wanted(i) {
                Some(self.complete_alone(actor, req, next).await)
            } else {
                None
            });
        }
        answers
    }

    /// One completion in a transaction of its own.
    async fn complete_alone(
        &self,
        actor: Principal,
        req: (LeaseId, CompleteRequest),
        lease_next: Option<Option<String>>,
    ) -> CompletionAnswer {
        let (mut results, mut next_leases) = self
            .complete_batch(actor, vec![req], vec![lease_next])
            .await?;
        match (results.pop(), next_leases.pop()) {
            (Some(result), Some(next)) => result.map(|done| (done, next)),
            _ => Err(AppError::Internal("a completion went unanswered".into())),
        }
    }

    /// `POST /v1/leases/{id}/complete` with `"lease_next": true`: the completion and, in the
    /// same transaction, a new lease for the same worker (`None` when nothing is leasable now).
    /// A replayed completion leases afresh: the worker asks for work, and a lease granted in a
    /// lost answer simply expires.
    pub async fn complete_and_lease(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: CompleteRequest,
        worker_id: Option<String>,
    ) -> Result<(Completed, Option<LeaseGranted>), AppError> {
        if let Some(w) = &worker_id {
            check_worker_id(w)?;
        }
        self.complete_grouped(actor, lease_id, req, Some(worker_id))
            .await
    }

    /// `POST /v1/completions`: many completions in one transaction. Each is answered exactly
    /// as `complete` would have answered it alone (fencing, idempotent replay, routes, late
    /// results kept in the ledger); one refused completion does not hold the others back.
    /// Logbook unreachable fails the whole batch, and none of it is written; any other failure
    /// of the shared transaction (nothing of it written either) is redone one completion per
    /// transaction, so a body the database refuses fails only its own entry.
    pub async fn complete_many(
        &self,
        actor: Principal,
        reqs: Vec<(LeaseId, CompleteRequest)>,
    ) -> Result<Vec<Result<Completed, AppError>>, AppError> {
        let nexts: Vec<_> = reqs.iter().map(|_| None).collect();
        // Kept to complete one by one if the batch fails for a reason of its own.
        let alone = (reqs.len() > 1).then(|| (reqs.clone(), nexts.clone()));
        match (self.complete_batch(actor, reqs, nexts).await, alone) {
            (Ok((answers, _)), _) => Ok(answers),
            (Err(e), Some((reqs, nexts))) if splits(&e) => {
                // A lease named again is refused as in the shared transaction, not redone.
                let ids: Vec<LeaseId> = reqs.iter().map(|(id, _)| *id).collect();
                let mut seen = std::collections::HashSet::with_capacity(ids.len());
                let first: Vec<bool> = ids.iter().map(|id| seen.insert(*id)).collect();
                let redone = self
                    .complete_each_alone(actor, &e, reqs, nexts, |i| first[i])
                    .await;
                Ok(redone
                    .into_iter()
                    .zip(ids)
                    .map(|(a, id)| match a {
                        Some(answer) => answer.map(|(done, _)| done),
                        None => Err(AppError::BadRequest(format!(
                            "lease {id} appears more than once in the batch"
                        ))),
                    })
                    .collect())
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Completions, and for each that succeeded and asked for one (`lease_nexts`, see
    /// [`Completion`]) a new lease, all in one transaction. The next leases are answered in
    /// request order (`None`: not asked for, refused, or nothing leasable now).
    async fn complete_batch(
        &self,
        actor: Principal,
        reqs: Vec<(LeaseId, CompleteRequest)>,
        lease_nexts: Vec<Option<Option<String>>>,
    ) -> Result<(Vec<Result<Completed, AppError>>, Vec<Option<LeaseGranted>>), AppError> {
        check_completions_batch(reqs.len())?;
        let now = self.clock.now();
        let mut tx = self.logbook.begin().await?;
        let ids: Vec<LeaseId> = reqs.iter().map(|(id, _)| *id).collect();
        let mut locked: HashMap<LeaseId, LeaseRecord> = HashMap::with_capacity(reqs.len());
        // One item may appear under several leases (an old, superseded one and the current
        // one): each completion sees the item as the ones before it left it.
        let mut items: HashMap<ItemId, Item> = HashMap::with_capacity(reqs.len());
        for (record, item) in tx.lock_leases(&ids).await? {
            items.entry(item.id).or_insert(item);
            locked.insert(record.lease_id, record);
        }
        let mut batch = Batch::default();
        let mut answers = Vec::with_capacity(reqs.len());
        let mut seen = std::collections::HashSet::with_capacity(reqs.len());
        for (lease_id, req) in reqs {
            let answer = match locked.get(&lease_id) {
                _ if !seen.insert(lease_id) => Err(AppError::BadRequest(format!(
                    "lease {lease_id} appears more than once in the batch"
                ))),
                None => Err(AppError::NotFound(format!("no lease {lease_id}"))),
                Some(record) => match items.get_mut(&record.item_id) {
                    None => Err(AppError::Internal(format!(
                        "lease {lease_id} lost its item"
                    ))),
                    Some(item) => self.complete_one(actor, record, item, req, now, &mut batch),
                },
            };
            answers.push(answer);
        }
        // Who gets a next lease: each completion that asked and went through, for the worker
        // it named or else its lease's worker.
        let mut wants = Vec::new();
        let mut wanted_by = Vec::new();
        for (i, (next, answer)) in lease_nexts.into_iter().zip(&answers).enumerate() {
            let worker = match (next, answer) {
                (Some(Some(worker_id)), Ok(_)) => Some(worker_id),
                (Some(None), Ok(_)) => locked.get(&ids[i]).map(|r| r.worker_id.clone()),
                _ => None,
            };
            if let Some(worker_id) = worker {
                wants.push(LeaseWant { worker_id, max: 1 });
                wanted_by.push(i);
            }
        }
        let mut next_leases: Vec<Option<LeaseGranted>> = ids.iter().map(|_| None).collect();
        if batch.is_empty() && wants.is_empty() {
            // Nothing to write (replays and refusals only): end the transaction, no COMMIT.
            drop(tx);
            let answers = answers
                .into_iter()
                .map(|a| a.map(Pending::finish))
                .collect();
            return Ok((answers, next_leases));
        }
        let saved: Vec<(Item, Option<Value>)> = batch
            .saved
            .iter()
            .map(|(id, result)| (items[id].clone(), result.clone()))
            .collect();
        tx.save_items(&saved).await?;
        if !batch.children.is_empty() {
            tx.insert_items(&batch.children).await?;
        }
        let seqs = tx.append(&batch.entries).await?;
        let mut finished = Vec::with_capacity(batch.finished.len());
        let answers: Vec<Result<Completed, AppError>> = answers
            .into_iter()
            .map(|a| {
                a.and_then(|pending| match pending {
                    Pending::Done(answer) => Ok(answer),
                    Pending::Sealed {
                        lease_id,
                        digest,
                        mut answer,
                        entry,
                    } => {
                        answer.ledger_seq = seqs.get(entry).copied().unwrap_or_default();
                        finished.push((
                            lease_id,
                            LeaseOutcome {
                                kind: OutcomeKind::Completed,
                                digest,
                                response: to_value(&answer)?,
                            },
                        ));
                        Ok(answer)
                    }
                })
            })
            .collect();
        finished.extend(batch.finished);
        tx.finish_leases(&finished, now).await?;
        match actor.worker_kind() {
            Some(kind) if !wants.is_empty() => {
                let leased = self.lease_in(tx.as_mut(), kind, &wants, actor, now).await?;
                self.write_leased(tx, kind, &leased, now).await?;
                if leased.truncated {
                    self.signal.notify(kind);
                }
                for (i, granted) in wanted_by.into_iter().zip(leased.granted) {
                    next_leases[i] = granted.into_iter().next();
                }
            }
            _ => self.commit(tx).await?,
        }
        for (kind, n) in batch.completed {
            self.stats.completed.add(kind, n);
        }
        for (kind, n) in batch.late {
            self.stats.late_results.add(kind, n);
        }
        for c in &batch.children {
            self.stats.enqueued.add(c.item.kind, 1);
            self.signal.notify(c.item.kind);
        }
        Ok((answers, next_leases))
    }

    /// One completion of a batch, applied to the locked `item`: its writes go into `batch`.
    fn complete_one(
        &self,
        actor: Principal,
        record: &LeaseRecord,
        item: &mut Item,
        req: CompleteRequest,
        now: time::OffsetDateTime,
        batch: &mut Batch,
    ) -> Result<Pending, AppError> {
        let canonical = json!({
            "result": req.result,
            "next": req.next.iter().map(|n| json!({
                "kind": n.kind, "payload": n.payload, "priority": n.priority,
            })).collect::<Vec<_>>(),
        });
        let digest = request_digest(OutcomeKind::Completed, &canonical);
        let lease_id = record.lease_id;
        match item.check_finish(record, actor, OutcomeKind::Completed, &digest) {
            Ok(LeaseUse::Proceed) => {}
            Ok(LeaseUse::Replay(response)) => {
                let mut answer: Completed = serde_json::from_value(response).map_err(|e| {
                    AppError::Internal(format!("stored completion unreadable: {e}"))
                })?;
                answer.replayed = true;
                return Ok(Pending::Done(answer));
            }
            Err(TransitionError::LeaseLost) if record.outcome.is_none() => {
                // Superseded: keep the late result in the ledger, apply nothing.
                let entry = item.record_late_result(record, actor, &req.result, now);
                let outcome = LeaseOutcome {
                    kind: OutcomeKind::Late,
                    digest,
                    response: Value::Null,
                };
                batch.save(item.id, None);
                batch.entries.push(entry);
                batch.finished.push((lease_id, outcome));
                *batch.late.entry(item.kind).or_default() += 1;
                tracing::info!(%lease_id, item_id = %item.id, "late result recorded; lease was superseded");
                return Err(AppError::LeaseLost);
            }
            Err(e) => return Err(e.into()),
        }
        if let Some(to) = self
            .config
            .routes
            .first_refused(item.kind, req.next.iter().map(|n| n.kind))
        {
            return Err(AppError::Route(format!(
                "the pipeline routes do not allow {} to enqueue {to}",
                item.kind
            )));
        }
        for n in &req.next {
            require_object(&n.payload, "next[].payload")?;
        }
        require_storable(&req.result, "result")?;
        let mut children = Vec::with_capacity(req.next.len());
        for n in req.next {
            let priority = n.priority.unwrap_or(item.priority);
            let (child, entry) = Item::enqueue(
                self.ids.item_id(),
                n.kind,
                priority,
                actor,
                now,
                Some(item.id),
            );
            children.push(NewItem {
                item: child,
                payload: n.payload,
                idempotency_key: None,
                parent: Some(item.id),
                created_at: now,
                entry,
            });
        }
        let child_ids: Vec<ItemId> = children.iter().map(|c| c.item.id).collect();
        let entry = item.complete(record, actor, &req.result, &child_ids, now)?;
        let answer = Completed {
            item_id: item.id.to_string(),
            state: ItemState::Done,
            ledger_seq: 0,
            replayed: false,
        };
        let at = batch.entries.len();
        batch.entries.push(entry);
        batch
            .entries
            .extend(children.iter().map(|c| c.entry.clone()));
        batch.children.extend(children);
        batch.save(item.id, Some(req.result));
        *batch.completed.entry(item.kind).or_default() += 1;
        Ok(Pending::Sealed {
            lease_id,
            digest,
            answer,
            entry: at,
        })
    }

    /// `POST /v1/leases/{id}/fail`: re-queued with backoff, or `failed`.
    pub async fn fail(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: FailRequest,
    ) -> Result<Failed, AppError> {
        let digest = request_digest(
            OutcomeKind::Failed,
            &json!({"error": req.error, "retryable": req.retryable}),
        );
        let now = self.clock.now();
        let mut tx = self.logbook.begin().await?;
        let (record, mut item) = lock_lease(tx.as_mut(), lease_id).await?;
        if let LeaseUse::Replay(response) =
            item.check_finish(&record, actor, OutcomeKind::Failed, &digest)?
        {
            return serde_json::from_value(response)
                .map_err(|e| AppError::Internal(format!("stored failure unreadable: {e}")));
        }
        let policy = self.config.policy(item.kind);
        let (outcome, entry) = item.fail(
            &record,
            actor,
            &req.error,
            req.retryable,
            &policy,
            self.jitter.sample(),
            now,
        )?;
        tx.save_item(&item).await?;
        let answer = Failed {
            item_id: item.id.to_string(),
            state: item.state,
            not_before: match outcome {
                FailOutcome::Requeued { not_before } => Some(not_before),
                FailOutcome::Failed => None,
            },
        };
        let stored = LeaseOutcome {
            kind: OutcomeKind::Failed,
            digest,
            response: to_value(&answer)?,
        };
        tx.finish_lease(lease_id, &stored, now).await?;
        self.commit_with(tx, &[entry]).await?;
        self.stats.failed.add(item.kind, 1);
        if item.state == ItemState::Failed {
            self.stats.failed_final.add(item.kind, 1);
        }
        Ok(answer)
    }

    /// `POST /v1/leases/{id}/needs_subtool`: parks the item with the digest that could not
    /// handle it.
    pub async fn needs_subtool(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: ParkRequest,
    ) -> Result<Parked, AppError> {
        if !is_image_digest(&req.worker_digest) {
            return Err(AppError::BadRequest(
                "worker_digest must be sha256: followed by 64 lowercase hex digits".into(),
            ));
        }
        let digest = request_digest(
            OutcomeKind::Parked,
            &json!({"worker_digest": req.worker_digest, "layout": req.layout}),
        );
        let now = self.clock.now();
        let mut tx = self.logbook.begin().await?;
        let (record, mut item) = lock_lease(tx.as_mut(), lease_id).await?;
        if let LeaseUse::Replay(response) =
            item.check_finish(&record, actor, OutcomeKind::Parked, &digest)?
        {
            return serde_json::from_value(response)
                .map_err(|e| AppError::Internal(format!("stored park unreadable: {e}")));
        }
        // A worker still running an image other than the one already reported as deployed
        // (a rollout in progress): the deployed image may handle the layout, so the item is
        // replayed at once rather than waiting for a digest report that already happened.
        let deployed = tx
            .deployed_digest(item.kind)
            .await?
            .filter(|d| *d != req.worker_digest);
        let entries = match deployed {
            Some(deployed) => {
                let policy = self.config.policy(item.kind);
                item.park_and_replay(
                    &record,
                    actor,
                    &req.worker_digest,
                    &deployed,
                    &req.layout,
                    &policy,
                    now,
                )?
            }
            None => vec![item.park(&record, actor, &req.worker_digest, &req.layout, now)?],
        };
        tx.save_item(&item).await?;
        let answer = Parked {
            item_id: item.id.to_string(),
            state: item.state,
        };
        let stored = LeaseOutcome {
            kind: OutcomeKind::Parked,
            digest,
            response: to_value(&answer)?,
        };
        tx.finish_lease(lease_id, &stored, now).await?;
        self.commit_with(tx, &entries).await?;
        self.stats.parked.add(item.kind, 1);
        match item.state {
            ItemState::Queued => self.stats.replayed.add(item.kind, 1),
            ItemState::Failed => self.stats.failed_final.add(item.kind, 1),
            _ => {}
        }
        Ok(answer)
    }

    /// `PUT /v1/workers/{kind}/digest`: Shipkeeper reports the image deployed for a kind. Every
    /// item of that kind parked under another digest returns to the queue, in the transaction
    /// that records the digest.
    pub async fn report_digest(
        &self,
        actor: Principal,
        kind: Kind,
        digest: &str,
    ) -> Result<DigestRecorded, AppError> {
        if actor != Principal::Shipkeeper {
            return Err(AppError::Forbidden(format!(
                "{actor} may not report worker digests"
            )));
        }
        if !is_image_digest(digest) {
            return Err(AppError::BadRequest(
                "digest must be sha256: followed by 64 lowercase hex digits".into(),
            ));
        }
        let now = self.clock.now();
        let mut tx = self.logbook.begin().await?;
        let previous = tx.record_digest(kind, digest, now).await?;
        if previous.as_deref() == Some(digest) {
            self.commit(tx).await?;
            return Ok(DigestRecorded {
                kind,
                digest: digest.to_owned(),
                replayed: 0,
            });
        }
        let mut parked = tx.lock_parked(kind, digest).await?;
        let mut entries = Vec::with_capacity(parked.len());
        for item in &mut parked {
            entries.push(item.replay(actor, digest, now)?);
            tx.save_item(item).await?;
        }
        self.commit_with(tx, &entries).await?;
        self.stats.replayed.add(kind, parked.len() as u64);
        if !parked.is_empty() {
            tracing::info!(kind = %kind, replayed = parked.len(), "parked items replayed for a new worker digest");
            self.signal.notify(kind);
        }
        Ok(DigestRecorded {
            kind,
            digest: digest.to_owned(),
            replayed: parked.len() as u64,
        })
    }

    /// `POST /v1/health`: Shipkeeper's pod health and error events, redacted before anything
    /// is stored, logged or published.
    pub async fn report_health(
        &self,
        actor: Principal,
        pods: &[PodHealth],
        events: &[HealthEvent],
    ) -> Result<HealthAccepted, AppError> {
        if actor != Principal::Shipkeeper {
            return Err(AppError::Forbidden(format!(
                "{actor} may not report health"
            )));
        }
        let (kinds, redacted) = health::sanitize(pods, events);
        self.logbook.store_health(&kinds, self.clock.now()).await?;
        if redacted > 0 {
            tracing::info!(
                redacted,
                "addresses or host names redacted from a health report"
            );
        }
        Ok(HealthAccepted {
            accepted: (pods.len() + events.len()) as u64,
            redacted: redacted as u64,
        })
    }

    /// The latest health per kind (the live feed's source).
    pub async fn latest_health(&self) -> Result<Vec<HealthView>, AppError> {
        Ok(self.logbook.latest_health().await?)
    }

    /// How long the oldest queued item of each kind and priority has waited, in seconds (for
    /// metrics).
    pub async fn oldest_queued_ages(
        &self,
    ) -> Result<Vec<(Kind, muster_domain::Priority, f64)>, AppError> {
        let now = self.clock.now();
        Ok(self
            .logbook
            .oldest_queued()
            .await?
            .into_iter()
            .map(|(k, p, at)| (k, p, (now - at).as_seconds_f64().max(0.0)))
            .collect())
    }

    /// `GET /v1/items/{id}`: operators and Conn.
    pub async fn item(&self, actor: Principal, id: ItemId) -> Result<ItemView, AppError> {
        if !matches!(actor, Principal::Operator | Principal::Conn) {
            return Err(AppError::Forbidden(format!("{actor} may not read items")));
        }
        self.logbook
            .item_view(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no item {id}")))
    }

    /// `POST /v1/items/{id}/retry`: an operator sends a failed item back to the queue.
    pub async fn retry(&self, actor: Principal, id: ItemId) -> Result<Retried, AppError> {
        if actor != Principal::Operator {
            return Err(AppError::Forbidden(format!("{actor} may not retry items")));
        }
        let now = self.clock.now();
        let mut tx = self.logbook.begin().await?;
        let mut item = tx
            .lock_item(id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no item {id}")))?;
        let entry = item.retry(actor, now)?;
        tx.save_item(&item).await?;
        self.commit_with(tx, &[entry]).await?;
        self.signal.notify(item.kind);
        Ok(Retried {
            item_id: id.to_string(),
            state: item.state,
        })
    }
}

impl Muster {
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

/// Whether a failed transaction of several completions is redone one completion per
/// transaction: not when Logbook is unreachable (each would only fail the same way) nor for a
/// malformed batch, but for anything that may belong to one completion's body.
fn splits(e: &AppError) -> bool {
    !matches!(e, AppError::Unavailable | AppError::BadRequest(_))
}

async fn lock_lease(tx: &mut dyn LogbookTx, id: LeaseId) -> Result<(LeaseRecord, Item), AppError> {
    tx.lock_lease(id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("no lease {id}")))
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

/// The writes of a batch of completions, gathered before any is sent.
#[derive(Default)]
struct Batch {
    /// Items to write back, once each, in first-touched order, with the result if completed.
    saved: Vec<(ItemId, Option<Value>)>,
    children: Vec<NewItem>,
    entries: Vec<muster_ledger::SealedEntry>,
    /// Leases that ended without a sealed answer (late results).
    finished: Vec<(LeaseId, LeaseOutcome)>,
    completed: HashMap<Kind, u64>,
    late: HashMap<Kind, u64>,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.saved.is_empty()
    }

    fn save(&mut self, id: ItemId, result: Option<Value>) {
        match self.saved.iter_mut().find(|(s, _)| *s == id) {
            Some(slot) => {
                if result.is_some() {
                    slot.1 = result;
                }
            }
            None => self.saved.push((id, result)),
        }
    }
}

/// A completion's answer, waiting for its ledger sequence number when it wrote anything.
enum Pending {
    Done(Completed),
    Sealed {
        lease_id: LeaseId,
        digest: [u8; 32],
        answer: Completed,
        /// Index of its `completed` entry in the batch's ledger entries.
        entry: usize,
    },
}

impl Pending {
    fn finish(self) -> Completed {
        match self {
            Pending::Done(answer) | Pending::Sealed { answer, .. } => answer,
        }
    }
}

/// What `lease_in` granted, and what the caller must write for it.
#[derive(Default)]
struct Leased {
    /// Per want, in want order.
    granted: Vec<Vec<LeaseGranted>>,
    saved: Vec<(Item, Option<Value>)>,
    records: Vec<LeaseRecord>,
    entries: Vec<muster_ledger::SealedEntry>,
    exhausted: u64,
    /// Leasable items were left because of the payload budget.
    truncated: bool,
}
