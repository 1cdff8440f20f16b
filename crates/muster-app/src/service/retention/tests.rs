//! Retention against mockall ports: the pass's batches, a removed item's view, unknown leases.

use super::*;
use crate::ports::{
    MockClock, MockHealthLog, MockItemReads, MockLogbook, MockRetentionStore, Removed,
};
use crate::views::HistoryEntry;
use crate::{Config, Stores};
use serde_json::json;
use time::macros::datetime;
use uuid::Uuid;

const NOW: OffsetDateTime = datetime!(2026-12-02 12:00:00 UTC);

fn clock() -> Arc<MockClock> {
    let mut clock = MockClock::new();
    clock.expect_now().return_const(NOW);
    Arc::new(clock)
}

fn entry(event: &str, to: &str, at: OffsetDateTime, data: serde_json::Value) -> RecordedEntry {
    RecordedEntry {
        history: HistoryEntry {
            seq: 1,
            at,
            event: event.into(),
            from: None,
            to: Some(to.into()),
            actor: "operator".into(),
            fence: None,
        },
        kind: Some(Kind::Trawl),
        priority: Some(Priority::Normal),
        data,
    }
}

const T1: OffsetDateTime = datetime!(2026-11-01 10:00 UTC);
const T2: OffsetDateTime = datetime!(2026-11-01 10:01 UTC);

#[test]
fn a_removed_item_reads_its_state_attempts_and_creation_from_the_ledger() {
    let entries = [
        entry("enqueued", "queued", T1, json!({})),
        entry("leased", "leased", T1, json!({"attempt": 1})),
        entry("failed", "queued", T1, json!({"attempt": 1})),
        entry("leased", "leased", T2, json!({"attempt": 2})),
        entry("completed", "done", T2, json!({"result": {}})),
    ];
    let id = ItemId(Uuid::from_u128(9));
    let view = removed_view(id, &entries).unwrap().unwrap();
    assert_eq!(
        (view.state, view.attempt, view.created_at, view.removed),
        (ItemState::Done, 2, T1, true)
    );
    assert_eq!((view.kind, view.priority), (Kind::Trawl, Priority::Normal));
    assert_eq!(
        (&view.payload, &view.result),
        (&serde_json::Value::Null, &None)
    );
    assert_eq!(view.history.len(), 5);
}

#[test]
fn an_item_without_ledger_entries_has_no_removed_view() {
    assert_eq!(removed_view(ItemId(Uuid::from_u128(9)), &[]).unwrap(), None);
}

#[test]
fn a_retry_resets_the_attempts_and_a_plain_park_refunds_one() {
    let retried = [
        entry("leased", "leased", T1, json!({"attempt": 3})),
        entry("failed", "failed", T1, json!({"attempt": 3})),
        entry("retried", "queued", T2, json!({"previous_attempts": 3})),
        entry("cancelled", "cancelled", T2, json!({})),
    ];
    assert_eq!(attempt(&retried), 0);
    let parked = [
        entry("leased", "leased", T1, json!({"attempt": 2})),
        entry("parked", "needs_subtool", T1, json!({})),
        entry("cancelled", "cancelled", T2, json!({})),
    ];
    assert_eq!(attempt(&parked), 1);
    let charged = [
        entry("leased", "leased", T1, json!({"attempt": 2})),
        entry("parked", "needs_subtool", T2, json!({})),
        entry("replayed", "queued", T2, json!({})),
    ];
    assert_eq!(attempt(&charged), 2);
}

fn muster(retention: Duration) -> Muster {
    Muster::new(
        Stores {
            logbook: Arc::new(MockLogbook::new()),
            items: Arc::new(MockItemReads::new()),
            health: Arc::new(MockHealthLog::new()),
        },
        clock(),
        Arc::new(crate::ports::MockIds::new()),
        Arc::new(crate::ports::MockJitter::new()),
        WorkSignal::new(),
        Config {
            retention,
            ..Config::default()
        },
    )
}

/// A UUIDv7 lease id minted at `at`.
fn v7_at(at: OffsetDateTime) -> LeaseId {
    let ts =
        uuid::Timestamp::from_unix(uuid::NoContext, at.unix_timestamp() as u64, at.nanosecond());
    LeaseId(Uuid::new_v7(ts))
}

#[test]
fn an_unknown_lease_granted_before_the_retention_period_is_lost() {
    let m = muster(Duration::days(30));
    let old = v7_at(NOW - Duration::days(31));
    assert!(matches!(m.unknown_lease(old), AppError::LeaseLost));
}

#[test]
fn an_unknown_lease_granted_within_the_retention_period_is_not_found() {
    let m = muster(Duration::days(30));
    let young = v7_at(NOW - Duration::days(29));
    assert!(matches!(m.unknown_lease(young), AppError::NotFound(_)));
    // Not a UUIDv7: no time to go by.
    let v4 = LeaseId(Uuid::from_u128(7));
    assert!(matches!(m.unknown_lease(v4), AppError::NotFound(_)));
}

#[test]
fn after_a_batch_the_pass_rests_pace_times_as_long_as_the_batch_took() {
    assert_eq!(
        super::rest_after(std::time::Duration::from_millis(40), 3),
        std::time::Duration::from_millis(120)
    );
}

#[test]
fn by_default_a_pass_rests_three_times_as_long_as_each_batch_took() {
    assert_eq!(RetentionSettings::default().pace, 3);
}

fn settings(batch: u32) -> RetentionSettings {
    RetentionSettings {
        batch,
        ..RetentionSettings::default()
    }
}

#[tokio::test]
async fn a_pass_takes_a_group_batch_by_batch_until_a_short_batch() {
    let mut store = MockRetentionStore::new();
    let first = ItemId(Uuid::from_u128(2));
    store
        .expect_remove_finished()
        .withf(|b| {
            (b.state, b.kind, b.priority) == (ItemState::Done, Kind::Trawl, Priority::Urgent)
        })
        .times(2)
        .returning(move |b| {
            Ok(match b.after {
                None => Removed {
                    scanned: 2,
                    last: Some(first),
                    items: 2,
                    leases: 3,
                    gave_way: false,
                },
                Some(after) => {
                    assert_eq!(after, first);
                    Removed {
                        scanned: 1,
                        last: Some(ItemId(Uuid::from_u128(3))),
                        items: 1,
                        leases: 1,
                        gave_way: false,
                    }
                }
            })
        });
    store
        .expect_remove_finished()
        .returning(|_| Ok(Removed::default()));
    store
        .expect_remove_edit_texts()
        .times(1)
        .returning(|_, _| Ok(0));
    store
        .expect_oldest_finished()
        .returning(|| Ok(Some(NOW - Duration::hours(1))));
    let retention = Retention::new(Arc::new(store), clock(), settings(2));
    let report = retention.pass().await.unwrap();
    assert_eq!((report.items, report.leases, report.groups_left), (3, 4, 0));
    let f = retention.figures();
    assert_eq!((f.items_removed, f.last_pass), (3, Some(NOW)));
    assert_eq!(f.oldest_finished_age, 3600.0);
}

#[tokio::test]
async fn a_batch_that_gives_way_leaves_its_group_and_the_pass_incomplete() {
    let mut store = MockRetentionStore::new();
    store
        .expect_remove_finished()
        .withf(|b| b.kind == Kind::Sextant && b.state == ItemState::Failed)
        .returning(|_| {
            Ok(Removed {
                gave_way: true,
                ..Removed::default()
            })
        });
    store
        .expect_remove_finished()
        .returning(|_| Ok(Removed::default()));
    store.expect_remove_edit_texts().returning(|_, _| Ok(0));
    store.expect_oldest_finished().returning(|| Ok(None));
    let retention = Retention::new(Arc::new(store), clock(), settings(500));
    let report = retention.pass().await.unwrap();
    assert_eq!(report.groups_left, 3);
    assert_eq!(retention.figures().last_pass, None);
}

#[tokio::test]
async fn an_outage_ends_the_pass() {
    let mut store = MockRetentionStore::new();
    store
        .expect_remove_finished()
        .times(1)
        .returning(|_| Err(StoreError::Unavailable("down".into())));
    let retention = Retention::new(Arc::new(store), clock(), settings(500));
    assert!(matches!(retention.pass().await, Err(AppError::Unavailable)));
}

#[tokio::test]
async fn rejected_edit_texts_go_in_batches_until_a_short_one() {
    let mut store = MockRetentionStore::new();
    store
        .expect_remove_finished()
        .returning(|_| Ok(Removed::default()));
    let mut answers = vec![Ok(2), Ok(2), Ok(1)].into_iter();
    store
        .expect_remove_edit_texts()
        .withf(|retain, max| (*retain, *max) == (Duration::days(7), 2))
        .times(3)
        .returning(move |_, _| answers.next().unwrap());
    store.expect_oldest_finished().returning(|| Ok(None));
    let retention = Retention::new(Arc::new(store), clock(), settings(2));
    assert_eq!(retention.pass().await.unwrap().edit_texts, 5);
}
