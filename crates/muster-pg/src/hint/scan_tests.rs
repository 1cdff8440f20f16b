//! The hints as the lease statement uses them, on a real database.

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
            .lock_next_leasable(muster_app::ports::LeasableQuery {
                kind: Kind::Trawl,
                now,
                limit,
                payload_budget: budget,
                final_grace: muster_app::ports::FinalGrace {
                    max_attempts: 5,
                    grace: time::Duration::seconds(90),
                },
            })
            .await
            .expect("lease scan");
        drop(tx);
        let taken: Vec<Uuid> = got
            .iter()
            .filter(|o| o.payload.is_some())
            .map(|o| o.item.id.0)
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
            .map(|o| (o.item.id.0.as_u128(), o.payload.is_some()))
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

/// What one lease scan at `now` (asking for `limit`) takes from the hinted queue with an
/// item before its hint.
async fn lease_behind_the_hint(now: OffsetDateTime, limit: u32) -> Vec<u128> {
    let q = hinted_queue_and_an_item_before_the_hint().await;
    q.lease(now, limit).await
}

const SOON: time::Duration = time::Duration::milliseconds(10);

#[tokio::test]
async fn an_item_behind_a_fresh_hint_waits_while_the_queue_after_it_fills_the_batch() {
    assert_eq!(lease_behind_the_hint(T0 + SOON, 2).await, [12, 13]);
}

#[tokio::test]
async fn a_scan_behind_a_hint_that_comes_back_short_looks_from_the_start() {
    assert_eq!(lease_behind_the_hint(T0 + SOON, 3).await, [5, 12, 13]);
}

#[tokio::test]
async fn a_hint_is_not_used_once_its_time_to_live_is_over() {
    assert_eq!(lease_behind_the_hint(T0 + HINT_TTL, 2).await, [5, 12]);
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
