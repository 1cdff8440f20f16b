//! Batching, the opt-in extension of the lease protocol: `"max"` on `POST /v1/leases` and
//! `POST /v1/completions` (docs/batching.md).

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestApp, lease_path};

async fn lease_max(app: &TestApp, kind: &str, max: u32) -> (StatusCode, Value) {
    let r = app
        .post(
            "/v1/leases",
            &format!("worker:{kind}"),
            json!({"worker_id": "batcher", "wait_ms": 0, "max": max}),
        )
        .await;
    (r.status, r.body)
}

fn lease_ids(body: &Value) -> Vec<String> {
    body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lease_id"].as_str().unwrap().to_owned())
        .collect()
}

fn item_ids(body: &Value) -> Vec<String> {
    body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["item"]["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A server with two queued trawl items, both leased by one `"max": 2` request.
async fn two_leased_in_one_batch() -> (TestApp, Value) {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let (_, leased) = lease_max(&app, "trawl", 2).await;
    (app, leased)
}

/// One completion entry per lease of a `"max"` answer, made by `entry` from the lease id.
fn for_each_lease(leased: &Value, entry: impl Fn(&String) -> Value) -> Vec<Value> {
    lease_ids(leased).iter().map(entry).collect()
}

/// `POST /v1/completions` as a trawl worker.
async fn post_completions(app: &TestApp, body: Value) -> crate::harness::Resp {
    app.post("/v1/completions", "worker:trawl", body).await
}

/// Each entry's `status`, in order.
fn statuses(results: &Value) -> Vec<u64> {
    results["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_lease_request_with_max_hands_out_up_to_max_items_in_lease_order() {
    let app = TestApp::spawn().await;
    let a = app.enqueue("trawl", "backfill", json!({})).await;
    let b = app.enqueue("trawl", "normal", json!({})).await;
    let c = app.enqueue("trawl", "urgent", json!({})).await;
    let d = app.enqueue("trawl", "normal", json!({})).await;
    let (status, first) = lease_max(&app, "trawl", 3).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(item_ids(&first), [c, b, d]);
    let (_, second) = lease_max(&app, "trawl", 3).await;
    assert_eq!(item_ids(&second), [a]);
    assert_eq!(lease_max(&app, "trawl", 3).await.0, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn each_lease_of_a_batch_carries_the_single_lease_fields() {
    let app = TestApp::spawn().await;
    let id = app.enqueue("trawl", "urgent", json!({"u": 1})).await;
    let (_, body) = lease_max(&app, "trawl", 5).await;
    let l = &body["leases"][0];
    assert_eq!(
        (l["fence"].as_u64(), l["heartbeat_ms"].as_u64(), &l["item"]),
        (
            Some(1),
            Some(10_000),
            &json!({"id": id, "kind": "trawl", "priority": "urgent", "attempt": 1, "payload": {"u": 1}})
        )
    );
}

#[tokio::test]
async fn max_outside_one_to_256_is_a_bad_request() {
    let app = TestApp::spawn().await;
    for max in [0, 257] {
        let (status, body) = lease_max(&app, "trawl", max).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("E_BAD_REQUEST")),
            "max {max}"
        );
    }
}

#[tokio::test]
async fn a_batch_completes_every_lease_and_enqueues_each_next_step() {
    let app = TestApp::spawn().await;
    for n in 0..3 {
        app.enqueue("trawl", "normal", json!({ "n": n })).await;
    }
    let (_, leased) = lease_max(&app, "trawl", 3).await;
    let completions = for_each_lease(
        &leased,
        |id| json!({"lease_id": id, "result": {"ok": id}, "next": [{"kind": "sextant", "payload": {"from": id}}]}),
    );
    let r = post_completions(&app, json!({ "completions": completions })).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(statuses(&r.body), [200, 200, 200]);
    let first = &r.body["results"][0];
    assert_eq!(
        (
            first["lease_id"].as_str(),
            first["state"].as_str(),
            first["replayed"].as_bool()
        ),
        (
            Some(lease_ids(&leased)[0].as_str()),
            Some("done"),
            Some(false)
        )
    );
    assert_eq!(app.items_in("sextant", "queued").await, 3);
    assert_eq!(app.items_in("trawl", "done").await, 3);
    app.verify_ledger().await;
}

#[tokio::test]
async fn each_completion_of_a_batch_answers_the_ledger_seq_of_its_own_completed_row() {
    let (app, leased) = two_leased_in_one_batch().await;
    let completions = for_each_lease(
        &leased,
        |id| json!({"lease_id": id, "result": {}, "next": [{"kind": "sextant", "payload": {}}]}),
    );
    let r = post_completions(&app, json!({ "completions": completions })).await;
    for result in r.body["results"].as_array().unwrap() {
        let seq = result["ledger_seq"].as_i64().unwrap();
        let item = result["item_id"].as_str().unwrap();
        let rows = format!(
            "core.ledger WHERE seq = {seq} AND subject_id = '{item}' AND event = 'completed'"
        );
        assert_eq!(app.count(&rows).await, 1, "{result}");
    }
}

#[tokio::test]
async fn a_retried_batch_is_answered_as_replayed_with_the_first_answers() {
    let (app, leased) = two_leased_in_one_batch().await;
    let completions = for_each_lease(&leased, |id| json!({"lease_id": id, "result": {"r": 1}}));
    let body = json!({ "completions": completions });
    let first = post_completions(&app, body.clone()).await;
    let rows = app.count("core.ledger").await;
    let again = post_completions(&app, body).await;
    let seqs = |r: &Value| -> Vec<(i64, bool)> {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["ledger_seq"].as_i64().unwrap(),
                    x["replayed"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let replayed: Vec<(i64, bool)> = seqs(&first.body)
        .into_iter()
        .map(|(s, _)| (s, true))
        .collect();
    assert_eq!(seqs(&again.body), replayed);
    assert_eq!(app.count("core.ledger").await, rows);
}

#[tokio::test]
async fn a_batch_answers_unknown_malformed_repeated_and_refused_entries_one_by_one() {
    let (app, leased) = two_leased_in_one_batch().await;
    let ids = lease_ids(&leased);
    let r = app
        .post(
            "/v1/completions",
            "worker:trawl",
            json!({"completions": [
                {"lease_id": ids[0], "result": {}},
                {"lease_id": "00000000-0000-0000-0000-000000000000", "result": {}},
                {"lease_id": "not-a-lease", "result": {}},
                {"lease_id": ids[0], "result": {}},
                {"lease_id": ids[1], "result": {}, "next": [{"kind": "waybill", "payload": {}}]},
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(statuses(&r.body), [200, 404, 404, 400, 422]);
    let codes: Vec<&str> = r.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["error"]["code"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        codes,
        [
            "-",
            "E_NOT_FOUND",
            "E_NOT_FOUND",
            "E_BAD_REQUEST",
            "E_ROUTE"
        ]
    );
    // The refused completion left its item leased, as a refused single completion would.
    assert_eq!(app.count("core.items WHERE state = 'leased'").await, 1);
}

#[tokio::test]
async fn a_late_completion_in_a_batch_answers_lease_lost_and_keeps_its_result_in_the_ledger() {
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 200).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let (_, old) = lease_max(&app, "trawl", 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, new) = lease_max(&app, "trawl", 1).await;
    let r = app
        .post(
            "/v1/completions",
            "worker:trawl",
            json!({"completions": [
                {"lease_id": lease_ids(&new)[0], "result": {"by": "new"}},
                {"lease_id": lease_ids(&old)[0], "result": {"by": "old"}},
            ]}),
        )
        .await;
    assert_eq!(statuses(&r.body), [200, 409]);
    assert_eq!(r.body["results"][1]["error"]["code"], "E_LEASE_LOST");
    assert_eq!(
        app.count("core.ledger WHERE event = 'late_result'").await,
        1
    );
    app.verify_ledger().await;
}

#[tokio::test]
async fn a_batch_whose_every_entry_the_database_refuses_writes_none_of_them() {
    let (app, leased) = two_leased_in_one_batch().await;
    let before = app.count("core.ledger").await;
    crate::harness::fail_recording_lease_outcomes(&app).await;
    let completions = for_each_lease(
        &leased,
        |id| json!({"lease_id": id, "result": {}, "next": [{"kind": "sextant", "payload": {}}]}),
    );
    let body = json!({ "completions": completions });
    let r = post_completions(&app, body.clone()).await;
    assert_eq!(statuses(&r.body), [500, 500]);
    assert_eq!(
        (
            app.count("core.ledger").await,
            app.count("core.items WHERE state = 'leased'").await,
            app.count("core.items WHERE kind = 'sextant'").await,
        ),
        (before, 2, 0)
    );
    app.execute("DROP TRIGGER inject ON core.leases").await;
    let r = post_completions(&app, body).await;
    assert_eq!(statuses(&r.body), [200, 200]);
    app.verify_ledger().await;
}

#[tokio::test]
async fn an_empty_batch_is_a_bad_request() {
    let app = TestApp::spawn().await;
    let r = post_completions(&app, json!({"completions": []})).await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
}

#[tokio::test]
async fn a_batch_from_another_principal_than_the_lease_holder_kind_is_refused_entry_by_entry() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let (_, leased) = lease_max(&app, "trawl", 1).await;
    let r = app
        .post(
            "/v1/completions",
            "worker:sextant",
            json!({"completions": [{"lease_id": lease_ids(&leased)[0], "result": {}}]}),
        )
        .await;
    assert_eq!(
        (
            statuses(&r.body),
            r.body["results"][0]["error"]["code"].as_str()
        ),
        (vec![403], Some("E_FORBIDDEN"))
    );
}

#[tokio::test]
async fn a_completion_with_lease_next_answers_the_next_item_leased_to_the_same_worker() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let second = app.enqueue("trawl", "normal", json!({"n": 2})).await;
    let first = app.lease("trawl", "w-7").await.unwrap();
    let r = app
        .complete(&first, json!({"result": {}, "lease_next": true}))
        .await;
    assert_eq!(
        (
            r.status,
            r.body["state"].as_str(),
            r.body["next_lease"]["item"]["id"].as_str()
        ),
        (StatusCode::OK, Some("done"), Some(second.as_str()))
    );
    let next = r.body["next_lease"]["lease_id"].as_str().unwrap();
    let rows = format!("core.leases WHERE id = '{next}' AND worker_id = 'w-7'");
    assert_eq!(app.count(&rows).await, 1);
    app.verify_ledger().await;
}

#[tokio::test]
async fn a_completion_with_lease_next_on_an_empty_queue_answers_a_null_next_lease() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let r = app
        .complete(&l, json!({"result": {}, "lease_next": true}))
        .await;
    assert_eq!(
        (r.status, r.body.get("next_lease")),
        (StatusCode::OK, Some(&Value::Null))
    );
}

#[tokio::test]
async fn a_completion_without_lease_next_has_no_next_lease_field() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let l = app.enqueue_and_lease("trawl").await;
    let r = app.complete(&l, json!({"result": {}})).await;
    assert_eq!((r.status, r.body.get("next_lease")), (StatusCode::OK, None));
    assert_eq!(app.count("core.leases").await, 1);
}

#[tokio::test]
async fn a_refused_completion_with_lease_next_leases_nothing() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let l = app.enqueue_and_lease("trawl").await;
    let r = app
        .complete(
            &l,
            json!({"result": {}, "next": [{"kind": "waybill", "payload": {}}], "lease_next": true}),
        )
        .await;
    r.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "E_ROUTE");
    assert_eq!(app.count("core.leases").await, 1);
}

#[tokio::test]
async fn a_replayed_completion_with_lease_next_leases_afresh() {
    let app = TestApp::spawn().await;
    app.enqueue_many("trawl", "normal", 3).await;
    let l = app.lease("trawl", "w").await.unwrap();
    let body = json!({"result": {"r": 1}, "lease_next": true});
    let first = app.complete(&l, body.clone()).await;
    let again = app.complete(&l, body).await;
    assert_eq!(again.body["replayed"], true);
    assert_ne!(
        again.body["next_lease"]["item"]["id"],
        first.body["next_lease"]["item"]["id"]
    );
    assert_eq!(app.count("core.leases").await, 3);
}

/// Settings: trawl items get one attempt, leases live 200 ms, and an expired lease on the last
/// attempt has no final grace (it is taken over, failing the item, as soon as it expired).
fn one_attempt_short_leases() -> impl FnOnce(&mut muster::Settings) {
    let retries = crate::harness::fast_retries(1);
    move |s| {
        retries(s);
        s.lease_ttl_ms = 200;
        s.final_grace_ms = Some(0);
    }
}

async fn expired_last_attempt_then(max: Option<u32>) -> (TestApp, String, Value) {
    let app = TestApp::spawn_with(one_attempt_short_leases()).await;
    let poison = app.enqueue("trawl", "normal", json!({"n": "poison"})).await;
    let l = app.lease("trawl", "crashing-worker").await.unwrap();
    assert_eq!(l["item"]["id"], poison.as_str());
    let next = app.enqueue("trawl", "normal", json!({"n": "next"})).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let body = match max {
        None => json!({"worker_id": "w", "wait_ms": 0}),
        Some(max) => json!({"worker_id": "w", "wait_ms": 0, "max": max}),
    };
    let r = app.post("/v1/leases", "worker:trawl", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let granted = match max {
        None => r.body["item"]["id"].clone(),
        Some(_) => r.body["leases"][0]["item"]["id"].clone(),
    };
    assert_eq!(granted, json!(next));
    (app, poison, r.body)
}

#[tokio::test]
async fn a_lease_fails_an_expired_item_without_attempts_left_and_hands_out_the_next() {
    let (app, poison, _) = expired_last_attempt_then(None).await;
    let rows = format!(
        "core.ledger WHERE subject_id = '{poison}' AND event = 'expired' AND to_state = 'failed'"
    );
    assert_eq!(app.count(&rows).await, 1);
    app.verify_ledger().await;
}

#[tokio::test]
async fn a_batch_lease_fails_an_expired_item_without_attempts_left_and_hands_out_the_rest() {
    let (app, poison, body) = expired_last_attempt_then(Some(1)).await;
    assert_eq!(body["leases"].as_array().map(Vec::len), Some(1));
    let sql = format!("SELECT state FROM core.items WHERE id = '{poison}'");
    let state = app.scalar_text(&sql).await;
    assert_eq!(state, "failed");
    app.verify_ledger().await;
}

#[tokio::test]
async fn a_completion_with_lease_next_leases_to_the_worker_it_names() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let l = app.lease("trawl", "before-restart").await.unwrap();
    let r = app
        .complete(
            &l,
            json!({"result": {}, "lease_next": true, "worker_id": "after-restart"}),
        )
        .await;
    let next = r.body["next_lease"]["lease_id"].as_str().unwrap();
    let rows = format!("core.leases WHERE id = '{next}' AND worker_id = 'after-restart'");
    assert_eq!(app.count(&rows).await, 1);
}

#[tokio::test]
async fn a_worker_id_without_lease_next_must_be_the_leases_worker() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let r = app
        .complete(&l, json!({"result": {}, "worker_id": "someone-else"}))
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
    let r = app
        .complete(&l, json!({"result": {}, "worker_id": "w"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

#[tokio::test]
async fn a_completion_naming_another_worker_changes_nothing() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let ledger_before = app.count("core.ledger").await;
    let r = app
        .complete(
            &l,
            json!({"result": {}, "worker_id": "someone-else",
                   "next": [{"kind": "sextant", "payload": {}}]}),
        )
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
    let item = app.item(l["item"]["id"].as_str().unwrap()).await;
    assert_eq!(item["state"], "leased");
    assert_eq!(app.count("core.ledger").await, ledger_before);
    assert_eq!(app.count("core.items WHERE kind = 'sextant'").await, 0);
}

#[tokio::test]
async fn a_finished_lease_named_by_another_worker_is_refused_not_replayed() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let body = json!({"result": {"n": 1}, "worker_id": "w"});
    let first = app.complete(&l, body).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let again = app
        .complete(&l, json!({"result": {"n": 1}, "worker_id": "someone-else"}))
        .await;
    again.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
}

#[tokio::test]
async fn fail_and_needs_subtool_check_a_worker_id_they_are_sent() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let fail = app
        .fail(
            &l,
            json!({"error": {"code": "X", "message": "m"}, "retryable": true, "worker_id": "other"}),
        )
        .await;
    fail.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
    let park = app
        .needs_subtool(
            &l,
            json!({"worker_digest": format!("sha256:{}", "a".repeat(64)),
                   "layout": {"signature": "s"}, "worker_id": "other"}),
        )
        .await;
    park.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
    let ok = app
        .fail(
            &l,
            json!({"error": {"code": "X", "message": "m"}, "retryable": true, "worker_id": "w"}),
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{:?}", ok.body);
}

#[tokio::test]
async fn another_kinds_lease_stays_403_whatever_the_worker_id() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let r = app
        .post(
            &lease_path(&l, "fail"),
            "worker:sextant",
            json!({"error": {"code": "X", "message": "m"}, "retryable": true, "worker_id": "w"}),
        )
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
}

#[tokio::test]
async fn a_batch_of_more_than_256_entries_is_a_bad_request_even_with_malformed_ids() {
    let app = TestApp::spawn().await;
    let entries: Vec<Value> = (0..257)
        .map(|_| json!({"lease_id": "not-a-lease", "result": {}}))
        .collect();
    let r = post_completions(&app, json!({ "completions": entries })).await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
}

/// Two leases completed in one batch whose first result the database refuses; the second
/// lease's fine completion is sent `fine_copies` times.
async fn batch_after_a_refused_entry(fine_copies: usize) -> (TestApp, crate::harness::Resp) {
    let (app, leased) = two_leased_in_one_batch().await;
    crate::harness::refuse_poisoned_results(&app).await;
    let ids = lease_ids(&leased);
    let mut entries = vec![json!({"lease_id": ids[0], "result": {"poison": true}})];
    entries.extend(std::iter::repeat_n(
        json!({"lease_id": ids[1], "result": {"fine": true}}),
        fine_copies,
    ));
    let r = post_completions(&app, json!({ "completions": entries })).await;
    (app, r)
}

/// Two leases completed in one batch whose first result the database refuses.
async fn batch_with_one_refused_entry() -> (TestApp, crate::harness::Resp) {
    batch_after_a_refused_entry(1).await
}

#[tokio::test]
async fn an_entry_the_database_refuses_fails_only_itself_and_the_others_are_applied() {
    let (app, r) = batch_with_one_refused_entry().await;
    assert_eq!(
        (
            statuses(&r.body),
            app.count("core.items WHERE state = 'done'").await
        ),
        (vec![500, 200], 1)
    );
    app.verify_ledger().await;
}

#[tokio::test]
async fn a_batch_redone_one_entry_at_a_time_is_counted_in_the_metrics() {
    let (app, _) = batch_with_one_refused_entry().await;
    let text = app.metrics().await;
    assert!(
        text.lines()
            .any(|l| l == r#"muster_completion_splits_total{kind="trawl"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_lease_named_twice_in_a_batch_redone_one_entry_at_a_time_is_still_refused_the_second_time()
 {
    let (_app, r) = batch_after_a_refused_entry(2).await;
    assert_eq!(statuses(&r.body), [500, 200, 400]);
}
