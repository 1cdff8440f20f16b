//! An operator's controls on items (protocol.md, "Additions of 2026-12-07"): cancel one or a
//! kind's oldest, retry failed and parked items, and a worker's `fail` with `E_NEEDS_SUBTOOL`.

use hyper::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

const DIGEST_A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const DIGEST_B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// A fresh server with one trawl item brought to `state`: the item's id.
async fn item_in(app: &TestApp, state: &str) -> String {
    let id = app.enqueue("trawl", "normal", json!({})).await;
    if state == "queued" {
        return id;
    }
    let lease = app.lease("trawl", "w").await.expect("leasable");
    match state {
        "leased" => {}
        "done" => assert_eq!(
            app.complete(&lease, json!({"result": {}})).await.status,
            200
        ),
        "failed" => assert_eq!(app.fail_on_purpose(&lease, false).await.status, 200),
        "needs_subtool" => {
            let r = app
                .needs_subtool(
                    &lease,
                    json!({"worker_digest": DIGEST_A, "layout": {"signature": "s"}}),
                )
                .await;
            assert_eq!(r.status, 200, "{:?}", r.body);
        }
        "cancelled" => {
            let r = app.cancel(&id, "test").await;
            assert_eq!(r.status, 200, "{:?}", r.body);
        }
        other => panic!("no setup for {other}"),
    }
    id
}

async fn ledger_rows(app: &TestApp, id: &str) -> i64 {
    app.count(&format!("core.ledger WHERE subject_id = '{id}'"))
        .await
}

#[tokio::test]
async fn every_state_answers_each_control_as_the_contract_says() {
    // (state, control, status, code or resulting state)
    let table = [
        ("queued", "cancel", 200, "cancelled"),
        ("leased", "cancel", 200, "cancelled"),
        ("needs_subtool", "cancel", 200, "cancelled"),
        ("failed", "cancel", 200, "cancelled"),
        ("done", "cancel", 409, "E_CONFLICT"),
        ("cancelled", "cancel", 200, "cancelled"),
        ("queued", "retry", 409, "E_CONFLICT"),
        ("leased", "retry", 409, "E_CONFLICT"),
        ("needs_subtool", "retry", 200, "queued"),
        ("failed", "retry", 200, "queued"),
        ("done", "retry", 409, "E_CONFLICT"),
        ("cancelled", "retry", 409, "E_CONFLICT"),
    ];
    for (state, control, status, outcome) in table {
        // A fresh server for each row: the setup leases the oldest queued item.
        let app = TestApp::spawn().await;
        let id = item_in(&app, state).await;
        let before = ledger_rows(&app, &id).await;
        let r = match control {
            "cancel" => app.cancel(&id, "test").await,
            _ => app.retry(&id, "operator").await,
        };
        assert_eq!(r.status, status, "{state} × {control}: {:?}", r.body);
        let changed = status == 200 && state != "cancelled";
        if status == 200 {
            assert_eq!(r.body["state"], outcome, "{state} × {control}");
            assert_eq!(app.item(&id).await["state"], outcome, "{state} × {control}");
        } else {
            assert_eq!(r.code(), outcome, "{state} × {control}");
            assert_eq!(app.item(&id).await["state"], state, "{state} × {control}");
        }
        assert_eq!(
            ledger_rows(&app, &id).await,
            before + i64::from(changed),
            "{state} × {control}: one ledger row for a change, none otherwise"
        );
    }
}

#[tokio::test]
async fn a_cancel_names_the_operator_and_the_reason_in_the_ledger() {
    let app = TestApp::spawn().await;
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let r = app.cancel(&id, "wrong payload").await;
    assert_eq!(r.status, 200);
    let item = app.item(&id).await;
    let last = item["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["event"], &last["from"], &last["to"], &last["actor"]),
        (
            &json!("cancelled"),
            &json!("queued"),
            &json!("cancelled"),
            &json!("operator")
        )
    );
    let reason = app
        .scalar_text(&format!(
            "SELECT data::jsonb ->> 'reason' FROM core.ledger WHERE subject_id = '{id}' AND event = 'cancelled'"
        ))
        .await;
    assert_eq!(reason, "wrong payload");
}

#[tokio::test]
async fn a_cancelled_leases_worker_is_fenced_off_at_once_and_its_late_result_kept() {
    let app = TestApp::spawn().await;
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    assert_eq!(app.cancel(&id, "test").await.status, 200);
    app.heartbeat(&lease, "w")
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    app.complete(&lease, json!({"result": {"late": true}}))
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    assert_eq!(app.ledger_events(&id, "late_result").await, 1);
    assert_eq!(app.item(&id).await["state"], "cancelled");
}

#[tokio::test]
async fn a_cancel_racing_a_completion_lets_exactly_one_win() {
    let app = TestApp::spawn().await;
    for _ in 0..8 {
        let id = app.enqueue("trawl", "normal", json!({})).await;
        let lease = app.lease("trawl", "w").await.unwrap();
        let (done, cancelled) = tokio::join!(
            app.complete(&lease, json!({"result": {}})),
            app.cancel(&id, "test")
        );
        let state = app.item(&id).await["state"].clone();
        match (done.status.as_u16(), cancelled.status.as_u16()) {
            (200, 409) => {
                assert_eq!(cancelled.code(), "E_CONFLICT");
                assert_eq!(state, "done");
            }
            (409, 200) => {
                assert_eq!(done.code(), "E_LEASE_LOST");
                assert_eq!(state, "cancelled");
            }
            other => panic!("both or neither won: {other:?}"),
        }
        let finishing = app
            .count(&format!(
                "core.ledger WHERE subject_id = '{id}' AND event IN ('completed', 'cancelled')"
            ))
            .await;
        assert_eq!(finishing, 1, "the ledger records exactly the winner");
    }
}

#[tokio::test]
async fn only_an_operator_cancels_and_a_reason_is_required() {
    let app = TestApp::spawn().await;
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let path = format!("/v1/items/{id}/cancel");
    for (who, body, status, code) in [
        (
            "conn",
            json!({"reason": "r"}),
            StatusCode::FORBIDDEN,
            "E_FORBIDDEN",
        ),
        (
            "operator",
            json!({}),
            StatusCode::BAD_REQUEST,
            "E_BAD_REQUEST",
        ),
        (
            "operator",
            json!({"reason": "  "}),
            StatusCode::BAD_REQUEST,
            "E_BAD_REQUEST",
        ),
    ] {
        app.post(&path, who, body).await.assert_error(status, code);
    }
    assert_eq!(app.item(&id).await["state"], "queued");
}

#[tokio::test]
async fn a_bulk_cancel_takes_the_oldest_items_of_a_kind_in_one_state() {
    let app = TestApp::spawn().await;
    let ids = app.enqueue_many("trawl", "normal", 3).await;
    let other = app.enqueue("sextant", "normal", json!({})).await;
    let r = app
        .post(
            "/v1/items/cancel",
            "operator",
            json!({"kind": "trawl", "state": "queued", "max": 2, "reason": "drain"}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        r.body,
        json!({"cancelled": 2, "item_ids": [ids[0], ids[1]]})
    );
    assert_eq!(app.item(&ids[2]).await["state"], "queued");
    assert_eq!(app.item(&other).await["state"], "queued");
}

#[tokio::test]
async fn a_bulk_cancel_refuses_the_leased_state() {
    let app = TestApp::spawn().await;
    app.post(
        "/v1/items/cancel",
        "operator",
        json!({"kind": "trawl", "state": "leased", "reason": "r"}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
}

#[tokio::test]
async fn a_bulk_retry_sends_parked_items_back_with_their_attempts_reset() {
    let app = TestApp::spawn().await;
    let parked = item_in(&app, "needs_subtool").await;
    let failed = item_in(&app, "failed").await;
    let r = app
        .bulk_retry(json!({"kind": "trawl", "state": "needs_subtool"}))
        .await;
    assert_eq!(r.body, json!({"retried": 1, "item_ids": [parked]}));
    let item = app.item(&parked).await;
    assert_eq!(
        (&item["state"], &item["attempt"]),
        (&json!("queued"), &json!(0))
    );
    assert_eq!(app.item(&failed).await["state"], "failed");
}

#[tokio::test]
async fn a_fail_with_e_needs_subtool_parks_the_item_under_the_reported_digest() {
    let app = TestApp::spawn().await;
    let put = app.put_digest("trawl", "shipkeeper", DIGEST_A).await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let r = app
        .fail(
            &lease,
            json!({"error": {"code": "E_NEEDS_SUBTOOL", "message": "unknown layout"}, "retryable": true}),
        )
        .await;
    assert_eq!(r.body, json!({"item_id": id, "state": "needs_subtool"}));
    let parked = app
        .scalar_text(&format!(
            "SELECT parked_digest FROM core.items WHERE id = '{id}'"
        ))
        .await;
    assert_eq!(parked, DIGEST_A);
    let again = app.put_digest("trawl", "shipkeeper", DIGEST_B).await;
    assert_eq!(again.body["replayed"], 1);
    assert_eq!(app.item(&id).await["state"], "queued");
}

#[tokio::test]
async fn a_fail_with_e_needs_subtool_and_no_reported_digest_is_replayed_by_the_first_report() {
    let app = TestApp::spawn().await;
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let lease = app.lease("trawl", "w").await.unwrap();
    let body = json!({"error": {"code": "E_NEEDS_SUBTOOL", "message": "m"}, "retryable": false});
    assert_eq!(
        app.fail(&lease, body.clone()).await.body["state"],
        "needs_subtool"
    );
    let replayed = app.fail(&lease, body).await;
    assert_eq!(
        replayed.body,
        json!({"item_id": id, "state": "needs_subtool"}),
        "the same fail again answers as the first"
    );
    let report = app.put_digest("trawl", "shipkeeper", DIGEST_B).await;
    assert_eq!(report.body["replayed"], 1);
    assert_eq!(app.item(&id).await["state"], "queued");
}
