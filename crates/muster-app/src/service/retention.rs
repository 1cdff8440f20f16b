//! Retention: finished items (`done`, `failed`, `cancelled`) whose newest ledger entry is older
//! than the retention period leave the working tables with their leases; the text of a rejected
//! edit proposal leaves after its own, shorter period. The ledger keeps everything.
//!
//! Algorithm: every replica runs a pass every [`RetentionSettings::every`]. A pass visits each
//! (state, kind, priority) group of finished items in id order (UUIDv7: creation order) and
//! removes it batch by batch, each batch one short transaction of at most
//! [`RetentionSettings::batch`] items that skips rows another transaction holds. Two replicas'
//! passes therefore take disjoint rows, and a pass is idempotent: what one leaves, the next
//! takes. A batch that would wait for a lock gives way (its group is left for the next pass,
//! and the pass does not count as complete); a Logbook outage ends the pass.
//!
//! What a removal leaves behind, each answered here or beside it:
//! - `GET /v1/items/{id}` reads the item from the ledger ([`removed_view`]: `removed: true`,
//!   payload and result null); once its entries are archived out of Logbook, `Gone`
//!   ([`Muster::removed_item`]). Cancel and retry read it the same way.
//! - A call on a lease the working tables do not hold answers `E_LEASE_LOST` when the lease's
//!   id (UUIDv7) dates from before the retention period: its item may have been removed
//!   ([`Muster::unknown_lease`]); a younger unknown lease is `E_NOT_FOUND`.
//! - An idempotency key is held by its item's row: once the row is gone, the key may name a
//!   new item.
//! - Queue depths: Logbook counts the removed items per group in the batch's transaction; every
//!   replica's live feed subtracts them (`feed`).

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration as StdDuration;

use muster_domain::{ItemId, ItemState, Kind, LeaseId, Priority};
use time::{Duration, OffsetDateTime};

use super::Muster;
use crate::error::AppError;
use crate::ports::{Clock, RecordedEntry, RemovalBatch, RetentionStore, StoreError};
use crate::signal::WorkSignal;
use crate::views::ItemView;

/// `--retain-days`' default.
pub const DEFAULT_RETAIN_DAYS: u32 = 30;
/// `--retain-edit-text-days`' default.
pub const DEFAULT_RETAIN_EDIT_TEXT_DAYS: u32 = 7;

/// The states whose items retention removes.
pub const FINISHED: [ItemState; 3] = [ItemState::Done, ItemState::Failed, ItemState::Cancelled];

/// Settings of retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Finished items whose newest ledger entry is this old go (`--retain-days`).
    pub retain: Duration,
    /// The text of a proposal rejected this long ago goes (`--retain-edit-text-days`).
    pub retain_edit_text: Duration,
    /// Time between two passes.
    pub every: StdDuration,
    /// Items (or edit texts) per transaction.
    pub batch: u32,
    /// After each batch the pass rests this many times as long as the batch took, so that a
    /// large backlog (the first pass after retention is turned on, a year of items) takes at
    /// most a share of Logbook's WAL and CPU from the workers: 3, a quarter of the time.
    pub pace: u32,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            retain: Duration::days(i64::from(DEFAULT_RETAIN_DAYS)),
            retain_edit_text: Duration::days(i64::from(DEFAULT_RETAIN_EDIT_TEXT_DAYS)),
            every: StdDuration::from_secs(60),
            batch: 500,
            pace: 3,
        }
    }
}

/// What one pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassReport {
    pub items: u64,
    pub leases: u64,
    pub edit_texts: u64,
    /// Groups left for the next pass because a batch gave way (a lock it would have waited
    /// for, or a statement that failed).
    pub groups_left: u32,
}

/// What `/metrics` shows of retention on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RetentionFigures {
    pub items_removed: u64,
    pub leases_removed: u64,
    pub edit_texts_removed: u64,
    /// When this replica's last complete pass ended.
    pub last_pass: Option<OffsetDateTime>,
    /// At the last pass: how long ago the oldest-created finished item of any group last
    /// changed (0 when none is left).
    pub oldest_finished_age: f64,
    /// The retention period, in seconds.
    pub retain_seconds: f64,
}

/// The housekeeping task that removes what the retention period no longer keeps.
#[derive(Clone)]
pub struct Retention {
    store: Arc<dyn RetentionStore>,
    clock: Arc<dyn Clock>,
    settings: RetentionSettings,
    figures: Arc<Mutex<RetentionFigures>>,
}

debug_showing!(Retention, settings = settings);

impl Retention {
    pub fn new(
        store: Arc<dyn RetentionStore>,
        clock: Arc<dyn Clock>,
        settings: RetentionSettings,
    ) -> Self {
        let figures = RetentionFigures {
            retain_seconds: settings.retain.as_seconds_f64(),
            ..RetentionFigures::default()
        };
        Retention {
            store,
            clock,
            settings,
            figures: Arc::new(Mutex::new(figures)),
        }
    }

    pub fn figures(&self) -> RetentionFigures {
        *self.figures.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut RetentionFigures)) {
        f(&mut self.figures.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// One pass: every group of finished items, then the edit texts. A Logbook outage ends it
    /// (`Unavailable`); what it removed before is counted.
    pub async fn pass(&self) -> Result<PassReport, AppError> {
        let mut report = PassReport::default();
        for state in FINISHED {
            for kind in Kind::ALL {
                for priority in Priority::ALL {
                    self.remove_group(state, kind, priority, &mut report)
                        .await?;
                }
            }
        }
        let max = self.settings.batch;
        loop {
            let n = self
                .store
                .remove_edit_texts(self.settings.retain_edit_text, max)
                .await;
            let n = match n {
                Ok(n) => n,
                Err(e) => {
                    report.groups_left += 1;
                    give_way(e, "edit texts")?;
                    break;
                }
            };
            report.edit_texts += n;
            self.count(|f| f.edit_texts_removed += n);
            if n < u64::from(max) {
                break;
            }
        }
        let oldest = self.store.oldest_finished().await?;
        let now = self.clock.now();
        self.count(|f| {
            f.oldest_finished_age = oldest.map_or(0.0, |at| (now - at).as_seconds_f64().max(0.0));
            if report.groups_left == 0 {
                f.last_pass = Some(now);
            }
        });
        Ok(report)
    }

    async fn remove_group(
        &self,
        state: ItemState,
        kind: Kind,
        priority: Priority,
        report: &mut PassReport,
    ) -> Result<(), AppError> {
        let mut after = None;
        loop {
            let batch = RemovalBatch {
                state,
                kind,
                priority,
                after,
                retain: self.settings.retain,
                max: self.settings.batch,
            };
            let started = tokio::time::Instant::now();
            let removed = match self.store.remove_finished(batch).await {
                Ok(removed) => removed,
                Err(e) => {
                    report.groups_left += 1;
                    return give_way(e, "finished items");
                }
            };
            if removed.gave_way {
                report.groups_left += 1;
                return Ok(());
            }
            report.items += removed.items;
            report.leases += removed.leases;
            self.count(|f| {
                f.items_removed += removed.items;
                f.leases_removed += removed.leases;
            });
            if removed.scanned < batch.max || removed.last.is_none() {
                return Ok(());
            }
            after = removed.last;
            tokio::time::sleep(rest_after(started.elapsed(), self.settings.pace)).await;
        }
    }

    /// Runs a pass every [`RetentionSettings::every`] until shutdown.
    pub async fn run(self, signal: WorkSignal) {
        while !signal.is_shut_down() {
            tokio::select! {
                () = tokio::time::sleep(self.settings.every) => {}
                () = signal.shutting_down() => return,
            }
            match self.pass().await {
                Ok(r) if r.items + r.edit_texts > 0 || r.groups_left > 0 => tracing::info!(
                    items = r.items,
                    leases = r.leases,
                    edit_texts = r.edit_texts,
                    groups_left = r.groups_left,
                    "retention pass"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "retention pass ended early; the next one goes on")
                }
            }
        }
    }
}

/// How long a pass rests after a batch that took `took`, at `pace` (see
/// [`RetentionSettings::pace`]).
pub(crate) fn rest_after(took: StdDuration, pace: u32) -> StdDuration {
    took.saturating_mul(pace)
}

/// A batch that failed: an outage ends the pass, anything else (a lock it would have waited
/// for) leaves the group to the next pass.
fn give_way(e: StoreError, what: &str) -> Result<(), AppError> {
    match e {
        StoreError::Unavailable(_) => Err(e.into()),
        StoreError::Internal(m) => {
            tracing::debug!(error = %m, what, "retention batch gave way; the next pass takes it");
            Ok(())
        }
    }
}

/// The view of an item that retention removed, from its ledger entries (oldest first): its
/// state is where its last entry left it; `None` when there are none.
pub(crate) fn removed_view(
    id: ItemId,
    entries: &[RecordedEntry],
) -> Result<Option<ItemView>, AppError> {
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Ok(None);
    };
    let unreadable =
        |what: &str| AppError::Internal(format!("item {id}: the ledger records no {what}"));
    let recorded = |name: &str| first.data[name].as_str().map(str::to_owned);
    let kind = match entries.iter().find_map(|e| e.kind) {
        Some(k) => k,
        None => recorded("kind")
            .and_then(|k| k.parse().ok())
            .ok_or_else(|| unreadable("kind"))?,
    };
    let priority = match entries.iter().find_map(|e| e.priority) {
        Some(p) => p,
        None => recorded("priority")
            .and_then(|p| Priority::ALL.into_iter().find(|q| q.as_str() == p))
            .ok_or_else(|| unreadable("priority"))?,
    };
    let state = last
        .history
        .to
        .as_deref()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| unreadable("state"))?;
    Ok(Some(ItemView {
        id: id.to_string(),
        kind,
        priority,
        state,
        attempt: attempt(entries),
        payload: serde_json::Value::Null,
        result: None,
        not_before: None,
        created_at: first.history.at,
        history: entries.iter().map(|e| e.history.clone()).collect(),
        removed: true,
    }))
}

/// The item's attempt count as its entries leave it, by the rules of `Item`: a lease counts
/// the attempt it records, so does a failure; an operator's retry resets it; a park refunds
/// it, unless a replay or a failure followed in the same transaction (a park by an outdated
/// image during a rollout is charged: `Item::park_and_replay`).
fn attempt(entries: &[RecordedEntry]) -> u32 {
    let mut attempt = 0;
    for (i, e) in entries.iter().enumerate() {
        match e.history.event.as_str() {
            "leased" | "failed" => {
                if let Some(n) = e.data["attempt"].as_u64() {
                    attempt = u32::try_from(n).unwrap_or(u32::MAX);
                }
            }
            "retried" => attempt = 0,
            "parked" => {
                let charged = entries.get(i + 1).is_some_and(|next| {
                    next.history.at == e.history.at
                        && matches!(next.history.event.as_str(), "replayed" | "failed")
                });
                if !charged {
                    attempt = attempt.saturating_sub(1);
                }
            }
            _ => {}
        }
    }
    attempt
}

impl Muster {
    /// The answer to a call on a lease the working tables do not hold. Lease ids are UUIDv7:
    /// one granted before the retention period may belong to an item retention removed, and
    /// its worker must drop the work (`LeaseLost`, as for any lease lost); any other is
    /// `NotFound`.
    pub(super) fn unknown_lease(&self, id: LeaseId) -> AppError {
        match minted_at(id.0) {
            Some(at) if at <= self.clock.now() - self.config.retention => AppError::LeaseLost,
            _ => AppError::NotFound(format!("no lease {id}")),
        }
    }

    /// `GET /v1/items/{id}` of an item the working tables do not hold: read from the ledger.
    /// When Logbook holds none of its entries, or not its first (`enqueued`), and its id
    /// (UUIDv7, minted when it was enqueued) dates from no later than the newest archived
    /// entry, its entries were archived: `Gone`. An id that never named an item but dates from
    /// then is answered `Gone` too (the archive file, not Logbook, can tell the two apart);
    /// a younger one is `NotFound`.
    pub(super) async fn removed_item(&self, id: ItemId) -> Result<ItemView, AppError> {
        let entries = self.stores.items.item_ledger(id).await?;
        let whole = entries
            .first()
            .is_some_and(|e| e.history.event == "enqueued");
        if !whole
            && let Some(until) = self.stores.items.archived_until().await?
            && minted_at(id.0).is_some_and(|at| at <= until)
        {
            return Err(AppError::Gone(format!(
                "item {id} was removed and its ledger entries archived out of Logbook"
            )));
        }
        removed_view(id, &entries)?.ok_or_else(|| AppError::NotFound(format!("no item {id}")))
    }
}

/// When a UUIDv7 id was minted (`None` for another version).
fn minted_at(id: uuid::Uuid) -> Option<OffsetDateTime> {
    id.get_timestamp().and_then(|t| {
        let (secs, nanos) = t.to_unix();
        let at = OffsetDateTime::from_unix_timestamp(i64::try_from(secs).ok()?).ok()?;
        Some(at + Duration::nanoseconds(i64::from(nanos)))
    })
}

#[cfg(test)]
mod tests;
