//! The lease protocol of protocol.md, "Items and leases".

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;

use crate::harness::{TestApp, lease_path};

fn id_of(lease: &serde_json::Value) -> String {
    lease["item"]["id"].as_str().unwrap().to_owned()
}

/// A fresh server with one trawl item enqueued and leased: the server, the lease and the
/// item's id.
async fn one_leased_trawl() -> (TestApp, serde_json::Value, String) {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let item = id_of(&l);
    (app, l, item)
}

#[tokio::test]
async fn leases_hand_out_urgent_then_normal_then_backfill_oldest_first() {
    let app = TestApp::spawn().await;
    let a = app.enqueue("trawl", "backfill", json!({"n": "a"})).await;
    let b = app.enqueue("trawl", "normal", json!({"n": "b"})).await;
    let c = app.enqueue("trawl", "urgent", json!({"n": "c"})).await;
    let d = app.enqueue("trawl", "normal", json!({"n": "d"})).await;
    let e = app.enqueue("trawl", "urgent", json!({"n": "e"})).await;
    let mut order = Vec::new();
    while let Some(l) = app.lease("trawl", "w1").await {
        order.push(id_of(&l));
    }
    assert_eq!(order, [c, e, b, d, a]);
}

#[tokio::test]
async fn a_lease_carries_the_contracts_fields() {
    let app = TestApp::spawn().await;
    let id = app
        .enqueue("trawl", "urgent", json!({"url": "https://example.org"}))
        .await;
    let l = app.lease("trawl", "trawl-7f9c").await.unwrap();
    assert_eq!(l["fence"], 1);
    assert_eq!(l["heartbeat_ms"], 10_000);
    assert_eq!(
        l["item"],
        json!({"id": id, "kind": "trawl", "priority": "urgent", "attempt": 1, "payload": {"url": "https://example.org"}})
    );
    assert!(l["expires_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn a_worker_only_leases_items_of_its_own_kind() {
    let app = TestApp::spawn().await;
    app.enqueue("sextant", "normal", json!({})).await;
    assert!(app.lease("trawl", "w").await.is_none());
    assert!(app.lease("sextant", "w").await.is_some());
}

#[tokio::test]
async fn thirty_two_concurrent_lease_requests_never_share_an_item() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    for n in 0..20 {
        app.enqueue("trawl", "normal", json!({ "n": n })).await;
    }
    let tasks: Vec<_> = (0..32)
        .map(|w| {
            let app = app.clone();
            tokio::spawn(async move { app.lease("trawl", &format!("w{w}")).await })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        if let Some(l) = t.await.unwrap() {
            ids.push(id_of(&l));
        }
    }
    let distinct: HashSet<_> = ids.iter().collect();
    assert_eq!((ids.len(), distinct.len()), (20, 20));
    assert_eq!(app.count("core.leases").await, 20);
}

#[tokio::test]
async fn a_waiting_lease_request_is_woken_when_work_arrives() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    let waiter = {
        let app = app.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = app.lease_waiting("trawl", "w", 20000).await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let (r, waited) = waiter.await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(id_of(&r.body), id);
    // Woken by the enqueue, not by the end of the 20 s wait.
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
}

#[tokio::test]
async fn a_lease_request_with_no_work_answers_204_after_its_wait() {
    let app = TestApp::spawn().await;
    let r = app.lease_waiting("trawl", "w", 200).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn an_item_retried_with_backoff_is_not_leasable_before_not_before() {
    let (app, l, _) = one_leased_trawl().await;
    let r = app.fail_with(&l, "E_FETCH", "timeout", true).await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (StatusCode::OK, Some("queued"))
    );
    assert!(r.body["not_before"].is_string());
    assert!(
        app.lease("trawl", "w").await.is_none(),
        "leasable before its backoff ended"
    );
    // The default first backoff is 1-2 s; a waiting request picks it up once it passes.
    let r = app.lease_waiting("trawl", "w", 5000).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["item"]["attempt"], 2);
    assert_eq!(r.body["fence"], 2);
}

#[tokio::test]
async fn a_superseded_lease_is_fenced_off_and_its_late_result_is_only_recorded() {
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 300).await;
    let item = app.enqueue("trawl", "normal", json!({})).await;
    let old = app.lease("trawl", "w-old").await.unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    let new = app
        .lease("trawl", "w-new")
        .await
        .expect("the expired lease is re-leasable");
    assert_eq!(
        (id_of(&new), new["fence"].as_i64()),
        (item.clone(), Some(2))
    );

    let c = app.complete(&old, json!({"result": {"late": true}})).await;
    c.assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    let h = app.heartbeat(&old, "w-old").await;
    h.assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    let f = app.fail_with(&old, "E", "m", true).await;
    f.assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");

    let view = app.item(&item).await;
    assert_eq!(
        (view["state"].as_str(), view["result"].is_null()),
        (Some("leased"), true)
    );
    let events: Vec<&str> = view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["enqueued", "leased", "leased", "late_result"]);

    let ok = app.complete(&new, json!({"result": {"n": 1}})).await;
    assert_eq!(ok.status, StatusCode::OK);
}

#[tokio::test]
async fn an_expired_lease_that_nobody_superseded_can_still_complete() {
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 200).await;
    let l = app.enqueue_and_lease("trawl").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = app.complete(&l, json!({"result": {}})).await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (StatusCode::OK, Some("done"))
    );
}

#[tokio::test]
async fn a_heartbeat_extends_the_lease_so_it_is_not_re_leased() {
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 600).await;
    let l = app.enqueue_and_lease("trawl").await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let h = app.heartbeat(&l, "w").await;
        assert_eq!(h.status, StatusCode::OK);
    }
    assert!(app.lease("trawl", "w2").await.is_none());
}

#[tokio::test]
async fn the_same_completion_twice_is_replayed_and_enqueues_next_once() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "urgent", json!({})).await;
    let l = app.lease("trawl", "w").await.unwrap();
    let body =
        json!({"result": {"pages": 2}, "next": [{"kind": "sextant", "payload": {"doc": 1}}]});
    let first = app.complete(&l, body.clone()).await;
    let second = app.complete(&l, body).await;
    assert_eq!(
        (first.status, first.body["replayed"].as_bool()),
        (StatusCode::OK, Some(false))
    );
    assert_eq!(
        (second.status, second.body["replayed"].as_bool()),
        (StatusCode::OK, Some(true))
    );
    assert_eq!(first.body["ledger_seq"], second.body["ledger_seq"]);
    assert_eq!(app.count("core.items WHERE kind = 'sextant'").await, 1);
    let next = app.lease("sextant", "s").await.unwrap();
    assert_eq!(
        next["item"]["priority"], "urgent",
        "next inherits the parent's priority"
    );
}

#[tokio::test]
async fn a_different_body_for_a_finished_lease_is_a_conflict() {
    let (app, l, _) = one_leased_trawl().await;
    app.complete(&l, json!({"result": {"v": 1}})).await;
    let r = app.complete(&l, json!({"result": {"v": 2}})).await;
    r.assert_error(StatusCode::CONFLICT, "E_CONFLICT");
}

#[tokio::test]
async fn a_next_step_the_routes_do_not_allow_is_refused_and_nothing_changes() {
    let (app, l, item) = one_leased_trawl().await;
    let r = app
        .complete(
            &l,
            json!({"result": {}, "next": [{"kind": "assay", "payload": {}}]}),
        )
        .await;
    r.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "E_ROUTE");
    let view = app.item(&item).await;
    assert_eq!(view["state"], "leased");
    assert_eq!(app.count("core.items").await, 1);
}

#[tokio::test]
async fn a_final_failure_fails_the_item_and_an_operator_retry_requeues_it_with_attempts_reset() {
    let (app, l, item) = one_leased_trawl().await;
    let r = app.fail_with(&l, "E_PARSE", "bad", false).await;
    assert_eq!(r.body["state"], "failed");
    let retry = app.retry(&item, "operator").await;
    assert_eq!(
        (retry.status, retry.body["state"].as_str()),
        (StatusCode::OK, Some("queued"))
    );
    let view = app.item(&item).await;
    assert_eq!(
        (view["state"].as_str(), view["attempt"].as_i64()),
        (Some("queued"), Some(0))
    );
}

#[tokio::test]
async fn attempts_exhausted_by_retryable_failures_end_in_failed() {
    let app = TestApp::spawn_with(crate::harness::fast_retries(2)).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let mut states = Vec::new();
    for _ in 0..2 {
        let l = app.lease_eventually("trawl", "w").await;
        let r = app.fail_on_purpose(&l, true).await;
        states.push(r.body["state"].as_str().unwrap().to_owned());
    }
    assert_eq!(states, ["queued", "failed"]);
}

#[tokio::test]
async fn needs_subtool_parks_the_item_with_the_digest() {
    let (app, l, item) = one_leased_trawl().await;
    let digest = format!("sha256:{}", "a".repeat(64));
    let r = app
        .needs_subtool(
            &l,
            json!({"worker_digest": digest, "layout": {"signature": "tbl-v9", "detail": {"cols": 7}}}),
        )
        .await;
    assert_eq!(r.body, json!({"item_id": item, "state": "needs_subtool"}));
    assert!(app.lease("trawl", "w").await.is_none());
    let parked = app
        .scalar_text("SELECT parked_digest FROM core.items")
        .await;
    assert_eq!(parked, digest);
}

#[tokio::test]
async fn a_worker_of_another_kind_may_not_touch_a_lease() {
    let (app, l, _) = one_leased_trawl().await;
    let r = app
        .post(
            &lease_path(&l, "complete"),
            "worker:sextant",
            json!({"result": {}}),
        )
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
}

#[tokio::test]
async fn reusing_an_idempotency_key_answers_the_first_item_without_a_second() {
    let app = TestApp::spawn().await;
    let body =
        json!({"kind": "trawl", "priority": "normal", "payload": {}, "idempotency_key": "feed-42"});
    let first = app.post("/v1/items", "conn", body.clone()).await;
    let again = app.post("/v1/items", "conn", body).await;
    assert_eq!(
        (first.status, again.status),
        (StatusCode::CREATED, StatusCode::OK)
    );
    assert_eq!(first.body, again.body);
    assert_eq!(app.count("core.items").await, 1);
}

#[tokio::test]
async fn one_principal_cannot_claim_another_principals_idempotency_key() {
    let app = TestApp::spawn().await;
    let body = json!({"kind": "sextant", "priority": "normal", "payload": {}, "idempotency_key": "notice-42"});
    // A trawl worker may enqueue sextant items; it takes the key first.
    let squatter = app.post("/v1/items", "worker:trawl", body.clone()).await;
    let operator = app.post("/v1/items", "operator", body).await;
    assert_eq!(
        (squatter.status, operator.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert_ne!(squatter.body["item_id"], operator.body["item_id"]);
}

#[tokio::test]
async fn an_items_history_lists_every_transition_with_actor_and_fence() {
    let app = TestApp::spawn().await;
    let item = app.enqueue("trawl", "normal", json!({"u": 1})).await;
    let l = app.lease("trawl", "w").await.unwrap();
    app.complete(&l, json!({"result": {"ok": 1}})).await;
    let view = app.get(&format!("/v1/items/{item}"), "conn").await.body;
    assert_eq!(view["result"], json!({"ok": 1}));
    let h: Vec<_> = view["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap(),
                e["from"].clone(),
                e["to"].clone(),
                e["actor"].as_str().unwrap(),
                e["fence"].clone(),
            )
        })
        .collect();
    assert_eq!(
        h,
        [
            (
                "enqueued",
                json!(null),
                json!("queued"),
                "operator",
                json!(null)
            ),
            (
                "leased",
                json!("queued"),
                json!("leased"),
                "worker:trawl",
                json!(1)
            ),
            (
                "completed",
                json!("leased"),
                json!("done"),
                "worker:trawl",
                json!(1)
            ),
        ]
    );
}

#[tokio::test]
async fn a_worker_may_enqueue_only_the_kinds_its_routes_allow() {
    let app = TestApp::spawn().await;
    let enqueue_as_trawl = |kind: &str| {
        app.post(
            "/v1/items",
            "worker:trawl",
            json!({"kind": kind, "payload": {}}),
        )
    };
    let ok = enqueue_as_trawl("sextant").await;
    let no = enqueue_as_trawl("assay").await;
    assert_eq!(
        (ok.status, no.status, no.code()),
        (StatusCode::CREATED, StatusCode::FORBIDDEN, "E_FORBIDDEN")
    );
}

#[tokio::test]
async fn identical_completions_racing_each_other_apply_once_and_both_answer_200() {
    let app = std::sync::Arc::new(TestApp::spawn().await);
    for round in 0..10 {
        app.enqueue("trawl", "normal", json!({ "round": round }))
            .await;
        let l = app.lease("trawl", "w").await.unwrap();
        let body =
            json!({"result": {"round": round}, "next": [{"kind": "sextant", "payload": {}}]});
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (app, l, body) = (app.clone(), l.clone(), body.clone());
                tokio::spawn(async move { app.complete(&l, body).await })
            })
            .collect();
        let mut replayed = Vec::new();
        for r in racers {
            let r = r.await.unwrap();
            assert_eq!(r.status, StatusCode::OK, "round {round}: {:?}", r.body);
            replayed.push(r.body["replayed"].as_bool().unwrap());
        }
        replayed.sort();
        assert_eq!(replayed, [false, true], "round {round}");
    }
    assert_eq!(app.count("core.items WHERE kind = 'sextant'").await, 10);
    assert_eq!(
        app.count("core.ledger WHERE event = 'late_result'").await,
        0
    );
}

/// `not_before` `ms` milliseconds from now, as RFC 3339.
fn in_ms(ms: i64) -> String {
    (time::OffsetDateTime::now_utc() + time::Duration::milliseconds(ms))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

#[tokio::test]
async fn a_delayed_item_is_leased_only_from_its_not_before_and_in_line_as_if_enqueued_then() {
    let app = TestApp::spawn().await;
    let enqueue = |not_before: Option<String>| {
        let app = &app;
        async move {
            let mut body = json!({"kind": "trawl", "payload": {}});
            if let Some(t) = not_before {
                body["not_before"] = json!(t);
            }
            let r = app.post("/v1/items", "operator", body).await;
            assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
            r.body["item_id"].as_str().unwrap().to_owned()
        }
    };
    let delayed = enqueue(Some(in_ms(1_500))).await;
    let before_it = enqueue(None).await;
    assert_eq!(
        id_of(&app.lease("trawl", "w").await.unwrap()),
        before_it,
        "the delayed item is not leasable yet"
    );
    assert!(app.lease("trawl", "w").await.is_none());
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    let after_it = enqueue(None).await;
    assert_eq!(id_of(&app.lease("trawl", "w").await.unwrap()), delayed);
    assert_eq!(id_of(&app.lease("trawl", "w").await.unwrap()), after_it);
}

#[tokio::test]
async fn a_not_before_more_than_thirty_days_ahead_is_a_bad_request() {
    let app = TestApp::spawn().await;
    let r = app
        .post(
            "/v1/items",
            "operator",
            json!({"kind": "trawl", "payload": {}, "not_before": in_ms(31 * 86_400_000)}),
        )
        .await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
}
