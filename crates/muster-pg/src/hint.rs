//! Where a kind's lease scan starts in `items_queued_order`.
//!
//! Leasing an item takes it out of the queued index's predicate, but its entry stays in the
//! index until VACUUM removes it: the head of every kind's queue is a growing run of dead
//! entries (already marked dead by earlier scans, so no heap visits, but every leaf page of
//! them is still read). Measured on the perf rig at 64 workers: the scan read 724–778 buffers
//! for 16 rows, 2.7 ms of the lease statement's 3.7 ms, and grew with every item leased since
//! the last VACUUM.
//!
//! A scan that filled its whole batch tells where each priority's queue now begins: at the
//! first item it returned of that priority (everything before it was dead, locked by another
//! transaction, or waiting out a backoff). The next scans start there ([`Starts`]). Three
//! rules keep the queue's order and completeness:
//!
//! - **A short scan looks at everything.** A bounded scan that returns fewer items than asked
//!   is run again from the start of the queue, and a scan from the start that comes back short
//!   leaves no hint. So a lease request never gets fewer items than an unbounded scan would
//!   give it, and a waiting long poll never misses an item because of a hint.
//! - **A hint lives at most [`HINT_TTL`].** While the queue stays longer than the batches, an
//!   item that became leasable behind a hint (a retry whose backoff ended, a row another
//!   transaction held and released untouched, an item another replica enqueued with a clock
//!   that runs behind) waits at most this long for its turn. Rows held and released untouched
//!   are routine, not rare, when lease transactions of one kind overlap (several replicas,
//!   `--group-commits` above 1): a lease statement that finds both queued items and expired
//!   leases locks up to `limit` rows more than it returns, for the rest of its transaction.
//! - **Each priority has its own start**, so an urgent item enqueued after the hint was taken
//!   is still leased before every normal one.
//!
//! The expired side (`items_lease_expiry`, read up to `now`) has the same problem one lease
//! time later: every item leased since the last VACUUM leaves an entry that falls into the
//! read range once its lease time has passed, whether the lease ended long ago or not. A scan
//! that returned every expired lease it found (fewer than asked, none left to the queued side)
//! proves that no lease that expired before its `now` is left unleased, except one another
//! transaction held at that moment; the next scans read from there. A new lease expires after
//! that time (it expires a lease time after its own transaction's `now`, the database's clock
//! on every replica; this assumes the lease time, 30 s by default, is longer than a transaction
//! works with its `now`), so only such a held-and-released lease can wait behind
//! the bound, for at most [`HINT_TTL`] (expired leases are found by the waiting requests' periodic rechecks, not
//! by a wake-up, so no request waits on it). A lease on an item's last attempt that is still
//! inside its final grace is skipped by the scan that proves the bound, so it too is left
//! behind the bound once its grace ends and is found up to [`HINT_TTL`] (100 ms) late. Its
//! worker loses nothing by it: any use of that lease after the grace fails the item anyway.
//!
//! A scan of a paused kind (the statement's pause check) finds nothing, and so moves the expired
//! side's bound as if it had taken every expired lease. After the resume such a lease is found
//! by the first scan once that hint lapses, at most [`HINT_TTL`] later; queued items are found
//! at once (a short scan leaves no queued hint).
//!
//! The hints live in the process (each replica has its own) and cost nothing when lost.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use muster_domain::Kind;
use time::OffsetDateTime;
use uuid::Uuid;

/// How long a hint is used before a scan from the start of the queue renews it.
pub const HINT_TTL: time::Duration = time::Duration::milliseconds(100);

/// An item's place in its priority's queue: `(enqueued_at, id)`, the order of
/// `items_queued_order` after `(kind, priority)`.
pub type Place = (OffsetDateTime, Uuid);

/// Where a scan starts, per priority (urgent, normal, backfill); `None`: at the beginning.
pub type Starts = [Option<Place>; 3];

/// One side's hint: where its scans start, and when the scan from the beginning that began the
/// chain of scans which moved it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live<T> {
    pub at: T,
    pub since: OffsetDateTime,
}

impl<T: Copy> Live<T> {
    /// `hint` if it may still be used at `now`.
    fn at_time(hint: Option<Live<T>>, now: OffsetDateTime) -> Option<Live<T>> {
        hint.filter(|h| now >= h.since && now - h.since < HINT_TTL)
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Hint {
    queued: Option<Live<Starts>>,
    /// No lease that expired before this time was left unleased by the scan that set it.
    expired: Option<Live<OffsetDateTime>>,
}

/// The hints of every kind.
#[derive(Debug, Default)]
pub struct LeaseHints {
    kinds: Mutex<HashMap<Kind, Hint>>,
}

/// What [`LeaseHints::starts`] answers: where a scan starts, to be handed back to
/// [`LeaseHints::record`]. `None`: at the beginning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    /// Per priority, where the queued side starts.
    pub queued: Option<Live<Starts>>,
    /// The least `lease_expires_at` the expired side reads.
    pub expired: Option<Live<OffsetDateTime>>,
}

impl Scan {
    /// A scan from the beginning of both sides.
    pub const FROM_START: Scan = Scan {
        queued: None,
        expired: None,
    };
}

/// What a scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// It returned every item asked for.
    pub full: bool,
    /// The place of the first queued item it returned of each priority.
    pub firsts: Starts,
    /// Every expired lease it found (none skipped as locked) is among the items it returned.
    pub expired_all_taken: bool,
}

impl LeaseHints {
    fn kinds(&self) -> std::sync::MutexGuard<'_, HashMap<Kind, Hint>> {
        // Never held across a call that can panic halfway through a change.
        self.kinds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where `kind`'s scan at `now` starts.
    pub fn starts(&self, kind: Kind, now: OffsetDateTime) -> Scan {
        let hint = self.kinds().get(&kind).copied().unwrap_or_default();
        Scan {
            queued: Live::at_time(hint.queued, now),
            expired: Live::at_time(hint.expired, now),
        }
    }

    /// After `scan` ran at `now` and found `found`.
    pub fn record(&self, kind: Kind, now: OffsetDateTime, scan: Scan, found: Found) {
        let mut kinds = self.kinds();
        let hint = kinds.entry(kind).or_default();
        hint.queued = found.full.then(|| {
            let mut starts = found.firsts;
            if let Some(old) = scan.queued {
                // A priority this bounded scan found nothing of keeps its start: nothing
                // before it was leasable then either.
                for (start, old) in starts.iter_mut().zip(old.at) {
                    if start.is_none() {
                        *start = old;
                    }
                }
            }
            Live {
                at: starts,
                since: scan.queued.map_or(now, |h| h.since),
            }
        });
        if hint
            .queued
            .is_some_and(|h| h.at.iter().all(Option::is_none))
        {
            // Starts nowhere but at the beginning: no hint (and no rescan when short).
            hint.queued = None;
        }
        if found.expired_all_taken {
            hint.expired = Some(Live {
                at: now,
                since: scan.expired.map_or(now, |h| h.since),
            });
        }
        // Otherwise the expired side's hint still holds: its scan found leases after it.
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod scan_tests;
