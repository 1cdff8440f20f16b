//! Leasing: the long poll, the lease transaction (shared by the lease requests of a group
//! commit and by completions that ask for their next lease), and heartbeats.

use std::time::Duration as StdDuration;

use muster_domain::item::LeaseResult;
use muster_domain::{Item, Kind, LeaseId, LeaseRecord, Principal, TransitionError};
use serde_json::Value;

use super::{
    LEASE_PAYLOAD_BUDGET, LeaseWant, MAX_BATCH, MAX_CANDIDATES, MAX_WAIT_MS, Muster,
    check_worker_id,
};
use crate::error::AppError;
use crate::ports::{ItemStore, Leasable, LeasableQuery, LeaseStore, LogbookTx};
use crate::views::{HeartbeatAck, ItemTrace, LeaseGranted, LeasedItem};

impl Muster {
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

    /// Leases for every want in one transaction; the grants of each, in want order, and
    /// whether leasable items were left for the payload budget.
    pub(super) async fn lease_for(
        &self,
        kind: Kind,
        actor: Principal,
        wants: &[LeaseWant],
    ) -> Result<(Vec<Vec<LeaseGranted>>, bool), AppError> {
        let mut tx = self.stores.logbook.begin().await?;
        // Leases expire by the database's clock, whatever this replica's says.
        let now = tx.now().await?;
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
    pub(super) async fn write_leased(
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
    pub(super) async fn lease_in(
        &self,
        tx: &mut (impl LeaseStore + ItemStore + ?Sized),
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
                .lock_next_leasable(LeasableQuery {
                    kind,
                    now,
                    limit: max,
                    payload_budget: LEASE_PAYLOAD_BUDGET,
                    final_grace: self.config.final_grace(kind),
                })
                .await?;
            let found = candidates.len();
            let mut exhausted = Vec::new();
            for Leasable {
                mut item,
                payload,
                trace,
                queued_since,
            } in candidates
            {
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
                            granted_at: now,
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
                            traceparent: None,
                            trace: ItemTrace::of(&item, item.fence, trace),
                            queued_since,
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
        let mut tx = self.stores.logbook.begin().await?;
        let (record, mut item, trace) = self.lock_lease(tx.as_mut(), lease_id).await?;
        let now = tx.now().await?;
        if let Some(entry) = self.past_final_grace(&record, &mut item, actor, now)? {
            return Err(self.lose_past_final_grace(tx, &item, entry).await);
        }
        let max_run = self.config.max_run(item.kind);
        let ttl = self.config.lease_ttl;
        match item.heartbeat(&record, actor, worker_id, ttl, max_run, now) {
            Ok(expires_at) => {
                tx.save_item(&item).await?;
                self.commit(tx).await?;
                Ok(HeartbeatAck {
                    expires_at,
                    trace: ItemTrace::of(&item, record.fence, trace),
                })
            }
            Err(refused @ TransitionError::TimedOut { .. }) => {
                // Past its maximum run time: cut at the limit (once), then refused.
                if let Some(entry) = item.time_out(&record, actor, max_run, now) {
                    tx.save_item(&item).await?;
                    self.commit_with(tx, &[entry]).await?;
                    self.stats.timed_out.add(item.kind, 1);
                    self.signal.notify(item.kind);
                    tracing::warn!(kind = %item.kind, item = %item.id, lease = %lease_id,
                        "a lease passed its maximum run time; the item is leasable again");
                }
                Err(refused.into())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// What `lease_in` granted, and what the caller must write for it.
#[derive(Default)]
pub(super) struct Leased {
    /// Per want, in want order.
    pub(super) granted: Vec<Vec<LeaseGranted>>,
    pub(super) saved: Vec<(Item, Option<Value>)>,
    pub(super) records: Vec<LeaseRecord>,
    pub(super) entries: Vec<muster_ledger::SealedEntry>,
    pub(super) exhausted: u64,
    /// Leasable items were left because of the payload budget.
    pub(super) truncated: bool,
}
