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
//! that time (it expires a lease time after its own transaction's `now`; this assumes the
//! lease time, 30 s by default, is longer than the clocks of the replicas differ plus how long
//! a transaction works with its `now`), so only such a held-and-released lease can wait behind
//! the bound, for at most [`HINT_TTL`] (expired leases are found by the waiting requests' periodic rechecks, not
//! by a wake-up, so no request waits on it).
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
mod tests {
    use super::*;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-12-03 12:00 UTC);
    const MS: time::Duration = time::Duration::milliseconds(1);

    fn place(n: u128) -> Place {
        (T0, Uuid::from_u128(n))
    }

    fn found(full: bool, firsts: Starts, expired_all_taken: bool) -> Found {
        Found {
            full,
            firsts,
            expired_all_taken,
        }
    }

    fn recorded(found: Found) -> LeaseHints {
        let hints = LeaseHints::default();
        hints.record(Kind::Trawl, T0, Scan::FROM_START, found);
        hints
    }

    #[test]
    fn a_kind_without_a_hint_is_scanned_from_the_start() {
        let hints = LeaseHints::default();
        assert_eq!(hints.starts(Kind::Trawl, T0), Scan::FROM_START);
    }

    #[test]
    fn a_full_scan_from_the_start_leaves_each_prioritys_first_place() {
        let hints = recorded(found(true, [None, Some(place(7)), Some(place(9))], false));
        assert_eq!(
            hints.starts(Kind::Trawl, T0 + 5 * MS).queued,
            Some(Live {
                at: [None, Some(place(7)), Some(place(9))],
                since: T0,
            })
        );
    }

    #[test]
    fn a_short_scan_leaves_no_queued_hint() {
        let hints = recorded(found(true, [None, Some(place(7)), None], false));
        let scan = hints.starts(Kind::Trawl, T0);
        hints.record(Kind::Trawl, T0, scan, found(false, [None; 3], false));
        assert_eq!(hints.starts(Kind::Trawl, T0), Scan::FROM_START);
    }

    #[test]
    fn a_hint_is_not_used_once_its_time_to_live_is_over() {
        let hints = recorded(found(true, [None, Some(place(7)), None], true));
        assert_eq!(hints.starts(Kind::Trawl, T0 + HINT_TTL), Scan::FROM_START);
    }

    #[test]
    fn a_hint_is_not_used_when_the_clock_went_back() {
        let hints = recorded(found(true, [None, Some(place(7)), None], true));
        assert_eq!(hints.starts(Kind::Trawl, T0 - MS), Scan::FROM_START);
    }

    #[test]
    fn a_full_bounded_scan_moves_the_starts_but_keeps_the_hints_age() {
        let hints = recorded(found(true, [None, Some(place(7)), Some(place(9))], false));
        let later = T0 + 50 * MS;
        let scan = hints.starts(Kind::Trawl, later);
        hints.record(
            Kind::Trawl,
            later,
            scan,
            found(true, [None, Some(place(8)), None], false),
        );
        assert_eq!(
            hints.starts(Kind::Trawl, later).queued,
            Some(Live {
                at: [None, Some(place(8)), Some(place(9))],
                since: T0,
            })
        );
    }

    #[test]
    fn a_scan_that_took_every_expired_lease_it_found_bounds_the_next_at_its_time() {
        let hints = recorded(found(false, [None; 3], true));
        assert_eq!(
            hints.starts(Kind::Trawl, T0 + MS).expired,
            Some(Live { at: T0, since: T0 })
        );
    }

    #[test]
    fn a_bounded_scan_that_took_every_expired_lease_moves_the_bound_but_keeps_its_age() {
        let hints = recorded(found(false, [None; 3], true));
        let later = T0 + 50 * MS;
        let scan = hints.starts(Kind::Trawl, later);
        hints.record(Kind::Trawl, later, scan, found(false, [None; 3], true));
        assert_eq!(
            hints.starts(Kind::Trawl, later).expired,
            Some(Live {
                at: later,
                since: T0
            })
        );
    }

    #[test]
    fn a_scan_that_left_expired_leases_keeps_the_bound_where_it_was() {
        let hints = recorded(found(false, [None; 3], true));
        let later = T0 + 50 * MS;
        let scan = hints.starts(Kind::Trawl, later);
        hints.record(Kind::Trawl, later, scan, found(true, [None; 3], false));
        assert_eq!(
            hints.starts(Kind::Trawl, later).expired,
            Some(Live { at: T0, since: T0 })
        );
    }

    #[test]
    fn a_full_scan_that_found_no_queued_item_leaves_no_queued_hint() {
        let hints = recorded(found(true, [None; 3], false));
        assert_eq!(hints.starts(Kind::Trawl, T0).queued, None);
    }

    #[test]
    fn kinds_keep_hints_of_their_own() {
        let hints = recorded(found(true, [None, Some(place(7)), None], true));
        assert_eq!(hints.starts(Kind::Sextant, T0), Scan::FROM_START);
    }
}

/// The hints as the lease statement uses them, on a real database.
#[cfg(test)]
mod scan_tests {
    use super::HINT_TTL;
    use crate::PgLogbook;
    use muster_app::ports::Logbook;
    use muster_domain::Kind;
    use time::OffsetDateTime;
    use time::macros::datetime;
    use uuid::Uuid;

    const T0: OffsetDateTime = datetime!(2026-12-03 12:00 UTC);

    /// A database with one logbook, and items queued at known places.
    struct Queue {
        db: muster_testkit::TestDb,
        logbook: PgLogbook,
    }

    impl Queue {
        async fn new() -> Queue {
            let db = muster_testkit::fresh_db().await;
            let logbook = PgLogbook::new(db.pool());
            Queue { db, logbook }
        }

        /// Queues trawl item `n` at priority `rank`, `n` ms after T0 in line.
        async fn add(&self, rank: i16, n: u128) {
            let at = T0 + time::Duration::milliseconds(i64::try_from(n).unwrap());
            self.db
                .client()
                .await
                .execute(
                    "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
                       payload, created_at, chain_len, chain_head)
                     VALUES ($1, 'trawl', $2, 'queued', 0, 0, $3, '{}', $3, 0, decode(repeat('00', 32), 'hex'))",
                    &[&Uuid::from_u128(n), &rank, &at],
                )
                .await
                .expect("queue an item");
        }

        /// Trawl item `n`, normal, `n` ms after T0 in line, under a lease that expires
        /// `expires` ms after T0.
        async fn add_leased(&self, n: u128, expires: i64) {
            let at = T0 + time::Duration::milliseconds(i64::try_from(n).unwrap());
            let expires = T0 + time::Duration::milliseconds(expires);
            self.db
                .client()
                .await
                .execute(
                    "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
                       lease_id, lease_worker, lease_expires_at,
                       payload, created_at, chain_len, chain_head)
                     VALUES ($1, 'trawl', 1, 'leased', 1, 1, $2, $1, 'w', $3,
                       '{}', $2, 0, decode(repeat('00', 32), 'hex'))",
                    &[&Uuid::from_u128(n), &at, &expires],
                )
                .await
                .expect("queue a leased item");
        }

        /// One lease scan at `now` asking for `limit` within a payload budget of `budget`
        /// bytes: each item it locked and whether its payload came with it. Only those that
        /// came with it are taken out of the queue, as `lease_in` does.
        async fn lease_within(
            &self,
            now: OffsetDateTime,
            limit: u32,
            budget: u64,
        ) -> Vec<(u128, bool)> {
            let mut tx = self.logbook.begin().await.expect("begin");
            let got = tx
                .lock_next_leasable(Kind::Trawl, now, limit, budget)
                .await
                .expect("lease scan");
            drop(tx);
            let taken: Vec<Uuid> = got
                .iter()
                .filter(|(_, payload)| payload.is_some())
                .map(|(item, _)| item.id.0)
                .collect();
            self.db
                .client()
                .await
                .execute(
                    "UPDATE core.items SET state = 'done', lease_id = NULL, lease_worker = NULL,
                       lease_expires_at = NULL WHERE id = ANY($1)",
                    &[&taken],
                )
                .await
                .expect("take the items");
            got.iter()
                .map(|(item, payload)| (item.id.0.as_u128(), payload.is_some()))
                .collect()
        }

        /// The items one lease scan at `now` locks (asking for `limit`), which are then taken
        /// out of the queue as a lease would.
        async fn lease(&self, now: OffsetDateTime, limit: u32) -> Vec<u128> {
            let got = self.lease_within(now, limit, u64::MAX).await;
            got.into_iter().map(|(n, _)| n).collect()
        }
    }

    /// Normal items 10..=13 queued, 10 and 11 leased at T0 (the hint starts at 10), then item
    /// 5 queued before all of them.
    async fn hinted_queue_and_an_item_before_the_hint() -> Queue {
        let q = Queue::new().await;
        for n in 10..=13 {
            q.add(1, n).await;
        }
        assert_eq!(q.lease(T0, 2).await, [10, 11]);
        q.add(1, 5).await;
        q
    }

    const SOON: time::Duration = time::Duration::milliseconds(10);

    #[tokio::test]
    async fn an_item_behind_a_fresh_hint_waits_while_the_queue_after_it_fills_the_batch() {
        let q = hinted_queue_and_an_item_before_the_hint().await;
        assert_eq!(q.lease(T0 + SOON, 2).await, [12, 13]);
    }

    #[tokio::test]
    async fn a_scan_behind_a_hint_that_comes_back_short_looks_from_the_start() {
        let q = hinted_queue_and_an_item_before_the_hint().await;
        assert_eq!(q.lease(T0 + SOON, 3).await, [5, 12, 13]);
    }

    #[tokio::test]
    async fn a_hint_is_not_used_once_its_time_to_live_is_over() {
        let q = hinted_queue_and_an_item_before_the_hint().await;
        assert_eq!(q.lease(T0 + HINT_TTL, 2).await, [5, 12]);
    }

    #[tokio::test]
    async fn an_urgent_item_placed_before_a_normal_hint_is_leased_first() {
        let q = hinted_queue_and_an_item_before_the_hint().await;
        q.add(0, 1).await;
        assert_eq!(q.lease(T0 + SOON, 2).await, [1, 12]);
    }

    #[tokio::test]
    async fn a_short_scan_from_the_start_leaves_no_hint_behind() {
        let q = Queue::new().await;
        q.add(1, 10).await;
        assert_eq!(q.lease(T0, 2).await, [10]);
        q.add(1, 5).await;
        q.add(1, 11).await;
        assert_eq!(q.lease(T0 + SOON, 1).await, [5]);
    }

    #[tokio::test]
    async fn a_lease_that_expires_after_the_bound_is_taken_by_the_bounded_scan() {
        let q = Queue::new().await;
        assert_eq!(q.lease(T0, 2).await, Vec::<u128>::new());
        q.add_leased(10, 5).await;
        assert_eq!(q.lease(T0 + SOON, 2).await, [10]);
    }

    /// A lease that expired at T0 + 5 ms, held by another transaction while a scan at
    /// T0 + 10 ms sets the expired bound, then released untouched.
    async fn an_expired_lease_skipped_while_locked() -> Queue {
        let q = Queue::new().await;
        q.add_leased(10, 5).await;
        let holder = q.db.client().await;
        holder.batch_execute("BEGIN").await.expect("begin");
        holder
            .execute(
                "SELECT 1 FROM core.items WHERE id = $1 FOR UPDATE",
                &[&Uuid::from_u128(10)],
            )
            .await
            .expect("lock");
        assert_eq!(q.lease(T0 + SOON, 2).await, Vec::<u128>::new());
        holder.batch_execute("ROLLBACK").await.expect("rollback");
        q
    }

    #[tokio::test]
    async fn an_expired_lease_skipped_while_locked_waits_behind_the_bound() {
        let q = an_expired_lease_skipped_while_locked().await;
        assert_eq!(q.lease(T0 + 2 * SOON, 2).await, Vec::<u128>::new());
    }

    #[tokio::test]
    async fn an_expired_lease_skipped_while_locked_is_taken_once_the_bound_is_too_old() {
        let q = an_expired_lease_skipped_while_locked().await;
        assert_eq!(q.lease(T0 + SOON + HINT_TTL, 2).await, [10]);
    }

    #[tokio::test]
    async fn expired_leases_beyond_the_limit_stay_in_reach_of_the_next_scan() {
        let q = Queue::new().await;
        for n in 10..=12 {
            q.add_leased(n, 5).await;
        }
        assert_eq!(q.lease(T0 + SOON, 2).await, [10, 11]);
        assert_eq!(q.lease(T0 + 2 * SOON, 2).await, [12]);
    }

    #[tokio::test]
    async fn an_expired_lease_past_the_payload_budget_stays_in_reach_of_the_next_scan() {
        let q = Queue::new().await;
        q.add_leased(10, 5).await;
        q.add_leased(11, 5).await;
        // `{}` is stored in a few bytes: the first item fits a budget of 1, the second not.
        assert_eq!(
            q.lease_within(T0 + SOON, 10, 1).await,
            [(10, true), (11, false)]
        );
        assert_eq!(q.lease(T0 + 2 * SOON, 10).await, [11]);
    }
}
