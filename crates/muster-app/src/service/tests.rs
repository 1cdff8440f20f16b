//! Use cases against mockall ports: no database.

use super::*;
use crate::ports::{
    Leasable, MockClock, MockHealthLog, MockIds, MockItemReads, MockJitter, MockLogbook,
    MockLogbookTx, StoreError, logbook_with,
};
use crate::views::{CompleteRequest, Completed, EnqueueRequest, NextStep};
use muster_domain::{Fence, LeaseGrant, Priority};
use muster_domain::{
    Item, ItemId, ItemState, LeaseOutcome, OutcomeKind, Principal, request_digest,
};
use muster_ledger::ChainHead;
use serde_json::json;
use time::OffsetDateTime;
use time::macros::datetime;
use uuid::Uuid;

const NOW: OffsetDateTime = datetime!(2026-12-02 12:00:00 UTC);
const TRAWL: Principal = Principal::Worker(Kind::Trawl);

fn lease_id() -> LeaseId {
    LeaseId(Uuid::from_u128(7))
}

fn leased_item(fence: u64) -> Item {
    Item {
        id: ItemId(Uuid::from_u128(1)),
        kind: Kind::Trawl,
        priority: Priority::Urgent,
        state: ItemState::Leased,
        attempt: 1,
        fence: Fence(fence),
        lease: Some(LeaseGrant {
            lease_id: LeaseId(Uuid::from_u128(fence as u128)),
            worker_id: "w".into(),
            expires_at: NOW,
        }),
        not_before: None,
        parked_digest: None,
        chain: ChainHead::genesis(),
    }
}

fn record(fence: u64) -> LeaseRecord {
    LeaseRecord {
        lease_id: lease_id(),
        item_id: ItemId(Uuid::from_u128(1)),
        fence: Fence(fence),
        worker_id: "w".into(),
        granted_at: datetime!(2026-01-01 00:00 UTC),
        outcome: None,
    }
}

fn muster_with(logbook: MockLogbook) -> Muster {
    let mut clock = MockClock::new();
    clock.expect_now().return_const(NOW);
    let mut ids = MockIds::new();
    let mut n = 100u128;
    ids.expect_item_id().returning(move || {
        n += 1;
        ItemId(Uuid::from_u128(n))
    });
    ids.expect_lease_id()
        .returning(|| LeaseId(Uuid::from_u128(55)));
    let mut jitter = MockJitter::new();
    jitter.expect_sample().return_const(0.0);
    Muster::new(
        Stores {
            logbook: Arc::new(logbook),
            items: Arc::new(MockItemReads::new()),
            health: Arc::new(MockHealthLog::new()),
        },
        Arc::new(clock),
        Arc::new(ids),
        Arc::new(jitter),
        WorkSignal::new(),
        Config::default(),
    )
}

/// `item` as the lease scan offers it, with `payload` (`None`: past the budget), keeping no
/// trace context.
fn offered(item: Item, payload: Option<serde_json::Value>) -> Leasable {
    Leasable {
        item,
        payload,
        trace: None,
        queued_since: NOW,
    }
}

/// A transaction whose database time is `NOW`.
fn tx_at_now() -> MockLogbookTx {
    let mut tx = MockLogbookTx::new();
    tx.expect_now().returning(|| Ok(NOW));
    tx
}

/// A transaction at `NOW` whose lock of the lease finds `rec` and `item`.
fn tx_locking(rec: LeaseRecord, item: Item) -> MockLogbookTx {
    let mut tx = tx_at_now();
    tx.expect_lock_leases()
        .return_once(move |_| Ok(vec![(rec, item, None)]));
    tx
}

fn complete_req(next: Vec<NextStep>) -> CompleteRequest {
    CompleteRequest {
        worker_id: None,
        result: json!({"pages": 3}),
        next,
        trace: None,
    }
}

#[tokio::test]
async fn complete_on_a_superseded_lease_records_the_late_result_and_answers_lease_lost() {
    let mut tx = tx_locking(record(1), leased_item(2));
    tx.expect_save_items()
        .withf(|i| i.len() == 1 && i[0].1.is_none())
        .times(1)
        .returning(|_| Ok(()));
    tx.expect_append()
        .withf(|e| e.len() == 1 && e[0].entry.event == "late_result" && e[0].entry.fence == Some(1))
        .times(1)
        .returning(|_| Ok(vec![9]));
    tx.expect_finish_leases()
        .withf(|o, _| o.len() == 1 && o[0].1.kind == OutcomeKind::Late)
        .times(1)
        .returning(|_, _| Ok(()));
    tx.expect_commit().times(1).returning(|| Ok(()));
    let m = muster_with(logbook_with(tx));
    assert_eq!(
        m.complete(TRAWL, lease_id(), complete_req(vec![])).await,
        Err(AppError::LeaseLost)
    );
}

#[tokio::test]
async fn complete_with_a_next_step_outside_the_routes_is_refused_and_commits_nothing() {
    let mut tx = tx_locking(record(1), leased_item(1));
    tx.expect_commit().never();
    let m = muster_with(logbook_with(tx));
    let next = vec![NextStep {
        kind: Kind::Waybill,
        payload: json!({}),
        priority: None,
    }];
    let r = m.complete(TRAWL, lease_id(), complete_req(next)).await;
    assert!(matches!(r.unwrap_err(), AppError::Route(_)));
}

#[tokio::test]
async fn complete_writes_the_item_the_next_items_and_their_ledger_rows_in_one_transaction() {
    let mut tx = tx_locking(record(1), leased_item(1));
    tx.expect_save_items()
        .withf(|i| {
            i.len() == 1 && i[0].0.state == ItemState::Done && i[0].1 == Some(json!({"pages": 3}))
        })
        .times(1)
        .returning(|_| Ok(()));
    tx.expect_insert_items()
        .withf(|n| {
            n.len() == 2
                && n.iter()
                    .all(|c| c.item.priority == Priority::Urgent && c.parent.is_some())
        })
        .times(1)
        .returning(|_| Ok(()));
    tx.expect_append()
        .withf(|e| {
            e.iter().map(|x| x.entry.event.as_str()).collect::<Vec<_>>()
                == ["completed", "enqueued", "enqueued"]
        })
        .times(1)
        .returning(|_| Ok(vec![40, 41, 42]));
    tx.expect_finish_leases()
        .withf(|o, _| {
            o.len() == 1
                && o[0].1.kind == OutcomeKind::Completed
                && o[0].1.response["ledger_seq"] == json!(40)
        })
        .times(1)
        .returning(|_, _| Ok(()));
    tx.expect_commit().times(1).returning(|| Ok(()));
    let m = muster_with(logbook_with(tx));
    let step = NextStep {
        kind: Kind::Sextant,
        payload: json!({"doc": 1}),
        priority: None,
    };
    let r = m
        .complete(TRAWL, lease_id(), complete_req(vec![step.clone(), step]))
        .await;
    assert_eq!(
        r,
        Ok(Completed {
            item_id: ItemId(Uuid::from_u128(1)).to_string(),
            state: ItemState::Done,
            ledger_seq: 40,
            replayed: false,
            trace: None,
        })
    );
}

#[tokio::test]
async fn an_identical_retried_completion_answers_the_stored_response_as_replayed() {
    let body = complete_req(vec![]);
    let canonical = json!({"result": body.result, "next": []});
    let stored = json!({"item_id": "x", "state": "done", "ledger_seq": 12, "replayed": false});
    let mut rec = record(1);
    rec.outcome = Some(LeaseOutcome {
        kind: OutcomeKind::Completed,
        digest: request_digest(OutcomeKind::Completed, &canonical),
        response: stored,
    });
    let mut item = leased_item(1);
    item.state = ItemState::Done;
    let mut tx = tx_locking(rec, item);
    tx.expect_append().never();
    tx.expect_commit().never();
    let m = muster_with(logbook_with(tx));
    let r = m.complete(TRAWL, lease_id(), body).await.unwrap();
    assert_eq!((r.ledger_seq, r.replayed), (12, true));
}

#[tokio::test]
async fn an_unknown_lease_is_not_found() {
    let mut tx = tx_at_now();
    tx.expect_lock_lease().returning(|_| Ok(None));
    let m = muster_with(logbook_with(tx));
    let r = m.heartbeat(TRAWL, lease_id(), "w").await;
    assert!(matches!(r.unwrap_err(), AppError::NotFound(_)));
}

#[tokio::test]
async fn a_worker_may_not_enqueue_a_kind_its_routes_do_not_allow() {
    let mut lb = MockLogbook::new();
    lb.expect_begin().never();
    let m = muster_with(lb);
    let req = EnqueueRequest {
        kind: Kind::Assay,
        priority: Priority::Normal,
        payload: json!({}),
        idempotency_key: None,
        not_before: None,
        trace: None,
    };
    assert!(matches!(
        m.enqueue(TRAWL, req).await.unwrap_err(),
        AppError::Forbidden(_)
    ));
}

#[tokio::test]
async fn only_workers_lease() {
    let m = muster_with(MockLogbook::new());
    assert!(matches!(
        m.lease(Principal::Conn, "c", 0).await.unwrap_err(),
        AppError::Forbidden(_)
    ));
}

#[tokio::test]
async fn a_wait_longer_than_thirty_seconds_is_a_bad_request() {
    let m = muster_with(MockLogbook::new());
    assert!(matches!(
        m.lease(TRAWL, "w", 30_001).await.unwrap_err(),
        AppError::BadRequest(_)
    ));
}

#[tokio::test]
async fn an_unreachable_logbook_answers_unavailable() {
    let mut lb = MockLogbook::new();
    lb.expect_begin()
        .returning(|| Err(StoreError::Unavailable("pool timeout".into())));
    let m = muster_with(lb);
    assert_eq!(m.lease(TRAWL, "w", 0).await, Err(AppError::Unavailable));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_lease_request_is_woken_by_new_work_of_its_kind() {
    let mut lb = MockLogbook::new();
    let mut calls = 0;
    lb.expect_begin().returning(move || {
        calls += 1;
        let mut tx = tx_at_now();
        if calls == 1 {
            tx.expect_lock_next_leasable().returning(|_| Ok(vec![]));
            tx.expect_commit().returning(|| Ok(()));
        } else {
            let mut item = leased_item(0);
            item.state = ItemState::Queued;
            item.lease = None;
            item.attempt = 0;
            tx.expect_lock_next_leasable()
                .return_once(move |_| Ok(vec![offered(item, Some(json!({"u": 1})))]));
            tx.expect_save_items().returning(|_| Ok(()));
            tx.expect_insert_leases().returning(|_, _, _| Ok(()));
            tx.expect_append_and_commit().returning(|_| Ok(()));
        }
        Ok(Box::new(tx))
    });
    let mut m = muster_with(lb);
    Arc::get_mut(&mut m.config).unwrap().recheck = StdDuration::from_secs(3600);
    let waiter = {
        let m = m.clone();
        tokio::spawn(async move { m.lease(TRAWL, "w", 30_000).await })
    };
    tokio::time::sleep(StdDuration::from_millis(10)).await;
    let before = tokio::time::Instant::now();
    m.signal().notify(Kind::Trawl);
    let granted = waiter.await.unwrap().unwrap().unwrap();
    assert_eq!((granted.fence, granted.item.attempt), (1, 1));
    assert!(tokio::time::Instant::now() - before < StdDuration::from_secs(1));
}

fn queued_item(n: u128) -> Item {
    let mut item = leased_item(0);
    item.id = ItemId(Uuid::from_u128(n));
    item.state = ItemState::Queued;
    item.lease = None;
    item.attempt = 0;
    item
}

/// Expects one transaction to save the items `ids` (their ids are `queued_item`'s), leased,
/// with a lease and a `leased` entry each, and to commit.
fn expect_leased(tx: &mut MockLogbookTx, ids: &'static [u128]) {
    let n = ids.len();
    tx.expect_save_items()
        .withf(move |items| {
            items
                .iter()
                .map(|(i, _)| i.id)
                .eq(ids.iter().map(|&n| ItemId(Uuid::from_u128(n))))
                && items.iter().all(|(i, _)| i.state == ItemState::Leased)
        })
        .times(1)
        .returning(|_| Ok(()));
    tx.expect_insert_leases()
        .withf(move |l, _, _| l.len() == n)
        .times(1)
        .returning(|_, _, _| Ok(()));
    tx.expect_append_and_commit()
        .withf(move |e| e.len() == n && e.iter().all(|e| e.entry.event == "leased"))
        .times(1)
        .returning(|_| Ok(()));
}

#[tokio::test]
async fn a_lease_request_with_max_leases_every_offered_item_in_one_transaction() {
    let mut tx = tx_at_now();
    tx.expect_lock_next_leasable()
        .withf(|wanted| wanted.limit == 3)
        .times(1)
        .return_once(|_| {
            Ok(vec![
                offered(queued_item(1), Some(json!({"n": 1}))),
                offered(queued_item(2), Some(json!({"n": 2}))),
            ])
        });
    expect_leased(&mut tx, &[1, 2]);
    let m = muster_with(logbook_with(tx));
    let granted = m.lease_many(TRAWL, "w", 0, 3).await.unwrap();
    assert_eq!(
        granted
            .iter()
            .map(|g| g.item.payload.clone())
            .collect::<Vec<_>>(),
        [json!({"n": 1}), json!({"n": 2})]
    );
}

#[tokio::test]
async fn a_lease_leaves_the_items_offered_past_the_payload_budget() {
    let mut tx = tx_at_now();
    tx.expect_lock_next_leasable().times(1).return_once(|_| {
        Ok(vec![
            offered(queued_item(1), Some(json!({"n": 1}))),
            offered(queued_item(2), None),
        ])
    });
    expect_leased(&mut tx, &[1]);
    let m = muster_with(logbook_with(tx));
    let granted = m.lease_many(TRAWL, "w", 0, 2).await.unwrap();
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0].item.id, Uuid::from_u128(1).to_string());
}

#[tokio::test]
async fn a_lease_request_for_more_than_the_batch_limit_is_a_bad_request() {
    let m = muster_with(MockLogbook::new());
    let r = m.lease_many(TRAWL, "w", 0, MAX_BATCH + 1).await;
    assert!(matches!(r.unwrap_err(), AppError::BadRequest(_)));
}

#[tokio::test]
async fn an_empty_batch_of_completions_is_a_bad_request() {
    let m = muster_with(MockLogbook::new());
    let r = m.complete_many(TRAWL, vec![]).await;
    assert!(matches!(r.unwrap_err(), AppError::BadRequest(_)));
}

#[tokio::test]
async fn a_batch_answers_each_completion_on_its_own() {
    let known = lease_id();
    let unknown = LeaseId(Uuid::from_u128(999));
    let mut tx = tx_at_now();
    tx.expect_lock_leases()
        .withf(move |ids| ids == [known, unknown, known])
        .return_once(|_| Ok(vec![(record(1), leased_item(1), None)]));
    tx.expect_save_items()
        .withf(|i| i.len() == 1)
        .times(1)
        .returning(|_| Ok(()));
    tx.expect_append().times(1).returning(|_| Ok(vec![7]));
    tx.expect_finish_leases()
        .withf(|o, _| o.len() == 1)
        .times(1)
        .returning(|_, _| Ok(()));
    tx.expect_commit().times(1).returning(|| Ok(()));
    let m = muster_with(logbook_with(tx));
    let answers = m
        .complete_many(
            TRAWL,
            vec![
                (known, complete_req(vec![])),
                (unknown, complete_req(vec![])),
                (known, complete_req(vec![])),
            ],
        )
        .await
        .unwrap();
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    assert!(
        matches!(answers[1], Err(AppError::NotFound(_))),
        "{:?}",
        answers[1]
    );
    assert!(
        matches!(answers[2], Err(AppError::BadRequest(_))),
        "{:?}",
        answers[2]
    );
    assert_eq!(answers[0].as_ref().unwrap().ledger_seq, 7);
}
