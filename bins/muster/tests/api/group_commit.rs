//! Group commit: concurrent single lease and complete calls of one worker kind are written
//! together in shared transactions. Each caller must still get exactly the answer it would
//! have got alone.

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Resp, TestApp};

/// Runs `n` requests at once, made by `request(app, i)`; the answers in `i` order.
async fn all_at_once<F, Fut>(app: &Arc<TestApp>, n: usize, request: F) -> Vec<Resp>
where
    F: Fn(Arc<TestApp>, usize) -> Fut,
    Fut: std::future::Future<Output = Resp> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let fut = request(Arc::clone(app), i);
        set.spawn(async move { (i, fut.await) });
    }
    let mut answers: Vec<(usize, Resp)> = set.join_all().await;
    answers.sort_by_key(|(i, _)| *i);
    answers.into_iter().map(|(_, r)| r).collect()
}

async fn lease_as(app: Arc<TestApp>, worker: String) -> Resp {
    app.lease_waiting("trawl", &worker, 0).await
}

async fn complete(app: Arc<TestApp>, lease: Value, result: Value) -> Resp {
    app.complete(&lease, json!({ "result": result })).await
}

/// An app with `n` queued trawl items, each leased by its own worker `w{i}` (in order).
async fn leased_by_n_workers(n: usize) -> (Arc<TestApp>, Vec<Value>) {
    let app = Arc::new(TestApp::spawn().await);
    for _ in 0..n {
        app.enqueue("trawl", "normal", json!({})).await;
    }
    let mut leases = Vec::new();
    for i in 0..n {
        leases.push(app.lease("trawl", &format!("w{i}")).await.unwrap());
    }
    (app, leases)
}

/// `n` leases, each of its own worker, completed all at once, lease `i` with `{"n": i}`:
/// the app, the leases and the answers (in lease order).
async fn completed_all_at_once(n: usize) -> (Arc<TestApp>, Vec<Value>, Vec<Resp>) {
    let (app, leases) = leased_by_n_workers(n).await;
    let answers = all_at_once(&app, n, |app, i| {
        complete(app, leases[i].clone(), json!({ "n": i }))
    })
    .await;
    (app, leases, answers)
}

/// The rows of the lease `lease_id` if worker `w{i}` holds it.
fn held_by_worker(i: usize, lease_id: &str) -> String {
    format!("core.leases WHERE id = '{lease_id}' AND worker_id = 'w{i}'")
}

/// How many of the `rows`, each expected to name one row, name none.
async fn rows_missing(app: &TestApp, rows: impl IntoIterator<Item = String>) -> i64 {
    let mut missing = 0;
    for named in rows {
        missing += 1 - app.count(&named).await;
    }
    missing
}

#[tokio::test]
async fn concurrent_single_leases_each_get_an_item_of_their_own() {
    let app = Arc::new(TestApp::spawn().await);
    app.enqueue_many("trawl", "normal", 24).await;
    let answers = all_at_once(&app, 24, |app, i| lease_as(app, format!("w{i}"))).await;
    let mut items: Vec<&str> = answers
        .iter()
        .map(|r| r.body["item"]["id"].as_str().unwrap())
        .collect();
    items.sort_unstable();
    items.dedup();
    assert_eq!(items.len(), 24);
}

#[tokio::test]
async fn concurrent_single_leases_are_recorded_for_the_worker_that_asked() {
    let app = Arc::new(TestApp::spawn().await);
    app.enqueue_many("trawl", "normal", 24).await;
    let answers = all_at_once(&app, 24, |app, i| lease_as(app, format!("w{i}"))).await;
    let held = answers
        .iter()
        .enumerate()
        .map(|(i, r)| held_by_worker(i, r.body["lease_id"].as_str().unwrap()));
    assert_eq!(rows_missing(&app, held).await, 0);
}

#[tokio::test]
async fn concurrent_single_leases_beyond_the_queue_answer_no_content() {
    let app = Arc::new(TestApp::spawn().await);
    app.enqueue_many("trawl", "normal", 3).await;
    let answers = all_at_once(&app, 12, |app, i| lease_as(app, format!("w{i}"))).await;
    let mut statuses: Vec<u16> = answers.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [200, 200, 200, 204, 204, 204, 204, 204, 204, 204, 204, 204]
    );
}

#[tokio::test]
async fn concurrent_single_completions_all_answer_ok() {
    let (_app, _leases, answers) = completed_all_at_once(24).await;
    let statuses: Vec<StatusCode> = answers.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![StatusCode::OK; 24]);
}

#[tokio::test]
async fn concurrent_single_completions_store_each_result_on_its_own_item() {
    let (app, leases, _) = completed_all_at_once(24).await;
    let placed = leases.iter().enumerate().map(|(i, lease)| {
        format!(
            "core.items WHERE id = '{}' AND state = 'done' AND result = '{{\"n\": {i}}}'::jsonb",
            lease["item"]["id"].as_str().unwrap()
        )
    });
    assert_eq!(rows_missing(&app, placed).await, 0);
}

#[tokio::test]
async fn concurrent_single_completions_answer_their_own_item() {
    let (_app, leases, answers) = completed_all_at_once(24).await;
    let answered: Vec<&Value> = answers.iter().map(|r| &r.body["item_id"]).collect();
    let expected: Vec<&Value> = leases.iter().map(|l| &l["item"]["id"]).collect();
    assert_eq!(answered, expected);
}

#[tokio::test]
async fn the_same_completion_sent_concurrently_is_written_once_and_replayed_to_the_rest() {
    let (app, leases) = leased_by_n_workers(1).await;
    let lease = leases[0].clone();
    let answers = all_at_once(&app, 8, |app, _| {
        complete(app, lease.clone(), json!({"n": 1}))
    })
    .await;
    let mut replayed: Vec<(u16, bool)> = answers
        .iter()
        .map(|r| (r.status.as_u16(), r.body["replayed"].as_bool().unwrap()))
        .collect();
    replayed.sort_unstable();
    assert_eq!(
        replayed,
        [
            (200, false),
            (200, true),
            (200, true),
            (200, true),
            (200, true),
            (200, true),
            (200, true),
            (200, true)
        ]
    );
}

#[tokio::test]
async fn the_same_completion_sent_concurrently_leaves_one_ledger_row() {
    let (app, leases) = leased_by_n_workers(1).await;
    let lease = leases[0].clone();
    all_at_once(&app, 8, |app, _| {
        complete(app, lease.clone(), json!({"n": 1}))
    })
    .await;
    let item = leases[0]["item"]["id"].as_str().unwrap();
    assert_eq!(app.ledger_events(item, "completed").await, 1);
}

#[tokio::test]
async fn concurrent_completions_with_different_bodies_for_one_lease_conflict_after_the_first() {
    let (app, leases) = leased_by_n_workers(1).await;
    let lease = leases[0].clone();
    let answers = all_at_once(&app, 6, |app, i| {
        complete(app, lease.clone(), json!({ "n": i }))
    })
    .await;
    let mut statuses: Vec<u16> = answers.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409, 409, 409, 409, 409]);
}

/// A payload of about `kib` KiB that PostgreSQL cannot compress (hex of a BLAKE3 stream), so
/// that its stored size is its size.
fn incompressible_payload(seed: u8, kib: usize) -> Value {
    let mut bytes = vec![0u8; kib * 512];
    blake3::Hasher::new()
        .update(&[seed])
        .finalize_xof()
        .fill(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    json!({ "blob": hex })
}

/// An app with `n` queued trawl items of about `kib` KiB each.
async fn large_items(n: u8, kib: usize) -> Arc<TestApp> {
    let app = Arc::new(TestApp::spawn().await);
    for seed in 0..n {
        app.enqueue("trawl", "normal", incompressible_payload(seed, kib))
            .await;
    }
    app
}

async fn four_large_items() -> Arc<TestApp> {
    large_items(4, 800).await
}

async fn lease_max(app: &TestApp, max: u32) -> usize {
    let r = app
        .post(
            "/v1/leases",
            "worker:trawl",
            json!({"worker_id": "big", "wait_ms": 0, "max": max}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.status);
    r.body["leases"].as_array().unwrap().len()
}

#[tokio::test]
async fn a_batch_lease_stops_adding_items_after_the_payload_budget() {
    let app = four_large_items().await;
    // 2 MiB budget: 0, 800 and 1,600 KiB come before the first three; 2,400 KiB before the fourth.
    assert_eq!(lease_max(&app, 4).await, 3);
}

#[tokio::test]
async fn items_left_by_the_payload_budget_go_to_the_next_lease() {
    let app = four_large_items().await;
    lease_max(&app, 4).await;
    assert_eq!(lease_max(&app, 4).await, 1);
}

#[tokio::test]
async fn concurrent_single_leases_each_get_a_large_item_despite_the_payload_budget() {
    // At most three of these fit one transaction's budget: a group of more must be split.
    let app = large_items(8, 900).await;
    let answers = all_at_once(&app, 8, |app, i| lease_as(app, format!("w{i}"))).await;
    let statuses: Vec<StatusCode> = answers.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![StatusCode::OK; 8]);
}

async fn complete_and_lease_next(app: Arc<TestApp>, lease: Value) -> Resp {
    app.complete(&lease, json!({"result": {}, "lease_next": true}))
        .await
}

/// `leased_by_n_workers(n)` with `n` more items queued behind the leased ones.
async fn leased_with_n_more_queued(n: usize) -> (Arc<TestApp>, Vec<Value>) {
    let (app, leases) = leased_by_n_workers(n).await;
    for _ in 0..n {
        app.enqueue("trawl", "normal", json!({})).await;
    }
    (app, leases)
}

/// `n` leases, each of its own worker and with `n` more items queued, completed all at once
/// with `lease_next`: the app and the answers (in lease order).
async fn completed_with_lease_next_all_at_once(n: usize) -> (Arc<TestApp>, Vec<Resp>) {
    let (app, leases) = leased_with_n_more_queued(n).await;
    let answers = all_at_once(&app, n, |app, i| {
        complete_and_lease_next(app, leases[i].clone())
    })
    .await;
    (app, answers)
}

#[tokio::test]
async fn concurrent_completions_with_lease_next_each_get_a_next_item_of_their_own() {
    let (_app, answers) = completed_with_lease_next_all_at_once(12).await;
    let mut next_items: Vec<&str> = answers
        .iter()
        .filter_map(|r| r.body["next_lease"]["item"]["id"].as_str())
        .collect();
    next_items.sort_unstable();
    next_items.dedup();
    assert_eq!(next_items.len(), 12);
}

#[tokio::test]
async fn concurrent_completions_with_lease_next_lease_to_the_worker_of_each_completed_lease() {
    let (app, answers) = completed_with_lease_next_all_at_once(12).await;
    let held = answers.iter().enumerate().map(|(i, r)| {
        let lease_id = r.body["next_lease"]["lease_id"].as_str();
        held_by_worker(
            i,
            lease_id.unwrap_or("00000000-0000-0000-0000-000000000000"),
        )
    });
    assert_eq!(rows_missing(&app, held).await, 0);
}

#[tokio::test]
async fn a_result_with_u0000_is_a_bad_request_and_fails_none_of_its_group() {
    let (app, leases) = leased_by_n_workers(8).await;
    let answers = all_at_once(&app, 8, |app, i| {
        let result = if i == 3 {
            json!({"s": "a\u{0}b"})
        } else {
            json!({ "n": i })
        };
        complete(app, leases[i].clone(), result)
    })
    .await;
    let statuses: Vec<u16> = answers.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(statuses, [200, 200, 200, 400, 200, 200, 200, 200]);
}

#[tokio::test]
async fn a_payload_with_u0000_in_a_key_is_a_bad_request() {
    let app = TestApp::spawn().await;
    let r = app
        .post(
            "/v1/items",
            "operator",
            json!({"kind": "trawl", "priority": "normal", "payload": {"a\u{0}": 1}}),
        )
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (400, "E_BAD_REQUEST"));
}

/// Eight completions, the fourth with a result the database refuses; the last seven go in
/// one group: the first one's transaction waits on a row lock held here while they queue.
async fn eight_completions_one_poisoned() -> (Arc<TestApp>, Vec<Resp>) {
    let (app, leases) = leased_by_n_workers(8).await;
    crate::harness::refuse_poisoned_results(&app).await;
    let blocker = crate::harness::hold_item(&app, &leases[0]).await;
    let first = tokio::spawn(complete(
        Arc::clone(&app),
        leases[0].clone(),
        json!({ "n": 0 }),
    ));
    crate::harness::until_waiting_for_locks(&app, 1).await;
    let rest = tokio::spawn({
        let app = Arc::clone(&app);
        async move {
            all_at_once(&app, 7, |app, i| {
                let result = if i == 2 {
                    json!({ "poison": true })
                } else {
                    json!({ "n": i + 1 })
                };
                complete(app, leases[i + 1].clone(), result)
            })
            .await
        }
    });
    // The seven reach the server's queue long before this; were one late, it would only
    // make a group of its own (the assertions hold for any grouping).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    crate::harness::release_item(&blocker).await;
    let mut answers = vec![first.await.unwrap()];
    answers.extend(rest.await.unwrap());
    (app, answers)
}

#[tokio::test]
async fn a_completion_the_database_refuses_fails_only_itself_not_its_group() {
    let (_app, answers) = eight_completions_one_poisoned().await;
    let statuses: Vec<u16> = answers.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(statuses, [200, 200, 200, 500, 200, 200, 200, 200]);
}

#[tokio::test]
async fn the_group_mates_of_a_refused_completion_are_written_with_their_ledger_rows() {
    let (app, _answers) = eight_completions_one_poisoned().await;
    assert_eq!(
        (
            app.count("core.items WHERE state = 'done'").await,
            app.count("core.ledger WHERE event = 'completed'").await,
        ),
        (7, 7)
    );
    app.verify_ledger().await;
}
