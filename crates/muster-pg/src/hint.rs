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
//!   that runs behind) waits at most this long for its turn.
//! - **Each priority has its own start**, so an urgent item enqueued after the hint was taken
//!   is still leased before every normal one.
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

#[derive(Debug, Clone, Copy)]
struct Hint {
    /// When the scan from the start of the queue that began this hint ran.
    since: OffsetDateTime,
    starts: Starts,
}

/// The hints of every kind.
#[derive(Debug, Default)]
pub struct LeaseHints {
    kinds: Mutex<HashMap<Kind, Hint>>,
}

/// What [`LeaseHints::starts`] answers: where to scan, and what to hand back to
/// [`LeaseHints::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    pub starts: Starts,
    /// `Some(since)` when the scan follows a live hint; `None` when it starts at the beginning.
    pub since: Option<OffsetDateTime>,
}

impl Scan {
    /// A scan from the beginning of every priority's queue.
    pub const FROM_START: Scan = Scan {
        starts: [None; 3],
        since: None,
    };
}

impl LeaseHints {
    fn kinds(&self) -> std::sync::MutexGuard<'_, HashMap<Kind, Hint>> {
        // Never held across a call that can panic halfway through a change.
        self.kinds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where `kind`'s scan at `now` starts.
    pub fn starts(&self, kind: Kind, now: OffsetDateTime) -> Scan {
        match self.kinds().get(&kind) {
            Some(hint) if now >= hint.since && now - hint.since < HINT_TTL => Scan {
                starts: hint.starts,
                since: Some(hint.since),
            },
            _ => Scan::FROM_START,
        }
    }

    /// After `scan` ran at `now`: `full` when it returned every item asked for, `firsts` the
    /// place of the first queued item it returned of each priority.
    pub fn record(&self, kind: Kind, now: OffsetDateTime, scan: Scan, full: bool, firsts: Starts) {
        let mut kinds = self.kinds();
        if !full {
            kinds.remove(&kind);
            return;
        }
        let mut starts = firsts;
        if scan.since.is_some() {
            // A priority this bounded scan found nothing of keeps its start: nothing before
            // it was leasable then either.
            for (start, old) in starts.iter_mut().zip(scan.starts) {
                if start.is_none() {
                    *start = old;
                }
            }
        }
        kinds.insert(
            kind,
            Hint {
                since: scan.since.unwrap_or(now),
                starts,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-12-03 12:00 UTC);

    fn place(n: u128) -> Place {
        (T0, Uuid::from_u128(n))
    }

    fn recorded(full: bool, firsts: Starts) -> LeaseHints {
        let hints = LeaseHints::default();
        hints.record(Kind::Trawl, T0, Scan::FROM_START, full, firsts);
        hints
    }

    #[test]
    fn a_kind_without_a_hint_is_scanned_from_the_start() {
        let hints = LeaseHints::default();
        assert_eq!(hints.starts(Kind::Trawl, T0), Scan::FROM_START);
    }

    #[test]
    fn a_full_scan_from_the_start_leaves_each_prioritys_first_place() {
        let hints = recorded(true, [None, Some(place(7)), Some(place(9))]);
        assert_eq!(
            hints.starts(Kind::Trawl, T0 + time::Duration::milliseconds(5)),
            Scan {
                starts: [None, Some(place(7)), Some(place(9))],
                since: Some(T0),
            }
        );
    }

    #[test]
    fn a_short_scan_leaves_no_hint() {
        let hints = recorded(true, [None, Some(place(7)), None]);
        let scan = hints.starts(Kind::Trawl, T0);
        hints.record(Kind::Trawl, T0, scan, false, [None, Some(place(8)), None]);
        assert_eq!(hints.starts(Kind::Trawl, T0), Scan::FROM_START);
    }

    #[test]
    fn a_hint_is_not_used_once_its_time_to_live_is_over() {
        let hints = recorded(true, [None, Some(place(7)), None]);
        assert_eq!(hints.starts(Kind::Trawl, T0 + HINT_TTL), Scan::FROM_START);
    }

    #[test]
    fn a_hint_is_not_used_when_the_clock_went_back() {
        let hints = recorded(true, [None, Some(place(7)), None]);
        let earlier = T0 - time::Duration::milliseconds(1);
        assert_eq!(hints.starts(Kind::Trawl, earlier), Scan::FROM_START);
    }

    #[test]
    fn a_full_bounded_scan_moves_the_starts_but_keeps_the_hints_age() {
        let hints = recorded(true, [None, Some(place(7)), Some(place(9))]);
        let later = T0 + time::Duration::milliseconds(50);
        let scan = hints.starts(Kind::Trawl, later);
        hints.record(Kind::Trawl, later, scan, true, [None, Some(place(8)), None]);
        assert_eq!(
            hints.starts(Kind::Trawl, later),
            Scan {
                starts: [None, Some(place(8)), Some(place(9))],
                since: Some(T0),
            }
        );
    }

    #[test]
    fn kinds_keep_hints_of_their_own() {
        let hints = recorded(true, [None, Some(place(7)), None]);
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

        /// The items one lease scan at `now` locks (asking for `limit`), which are then taken
        /// out of the queue as a lease would.
        async fn lease(&self, now: OffsetDateTime, limit: u32) -> Vec<u128> {
            let mut tx = self.logbook.begin().await.expect("begin");
            let got = tx
                .lock_next_leasable(Kind::Trawl, now, limit, u64::MAX)
                .await
                .expect("lease scan");
            drop(tx);
            let ids: Vec<Uuid> = got.iter().map(|(item, _)| item.id.0).collect();
            self.db
                .client()
                .await
                .execute(
                    "UPDATE core.items SET state = 'done' WHERE id = ANY($1)",
                    &[&ids],
                )
                .await
                .expect("take the items");
            ids.iter().map(|id| id.as_u128()).collect()
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
    async fn an_urgent_item_queued_after_a_normal_hint_is_leased_first() {
        let q = hinted_queue_and_an_item_before_the_hint().await;
        q.add(0, 20).await;
        assert_eq!(q.lease(T0 + SOON, 2).await, [20, 12]);
    }

    #[tokio::test]
    async fn a_backfill_item_waits_for_the_normal_ones_behind_the_hint() {
        let q = hinted_queue_and_an_item_before_the_hint().await;
        q.add(2, 1).await;
        assert_eq!(q.lease(T0 + SOON, 2).await, [12, 13]);
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
}
