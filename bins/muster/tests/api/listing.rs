//! Finding items (`GET /v1/items`) and sending a kind's failed items back (`POST
//! /v1/items/retry`): filters, keyset paging, who may, one ledger row per retried item.

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::harness::TestApp;

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("an items array")
        .iter()
        .map(|i| i["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// Enqueues one `kind` item, leases it and fails it for good; its id.
async fn failed_item(app: &TestApp, kind: &str) -> String {
    let id = app.enqueue(kind, "normal", json!({})).await;
    let lease = app.lease(kind, "w").await.expect("a lease");
    assert_eq!(lease["item"]["id"], id.as_str());
    let r = app.fail_with(&lease, "E_PARSE", "bad page", false).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    id
}

#[tokio::test]
async fn items_are_listed_oldest_first_with_their_summary() {
    let app = TestApp::spawn().await;
    let a = app.enqueue("trawl", "urgent", json!({"n": 1})).await;
    let b = app.enqueue("sextant", "backfill", json!({"n": 2})).await;
    let r = app.get("/v1/items", "operator").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(ids(&r.body), vec![a.clone(), b]);
    let first = &r.body["items"][0];
    assert_eq!(
        (
            &first["kind"],
            &first["priority"],
            &first["state"],
            &first["attempt"],
            &first["last_error"]
        ),
        (
            &json!("trawl"),
            &json!("urgent"),
            &json!("queued"),
            &json!(0),
            &Value::Null
        )
    );
    assert_eq!(first["created_at"], first["updated_at"]);
    assert_eq!(r.body["next"], Value::Null);
}

#[tokio::test]
async fn the_filters_combine() {
    let app = TestApp::spawn().await;
    let failed = failed_item(&app, "trawl").await;
    let queued_trawl = app.enqueue("trawl", "normal", json!({})).await;
    let urgent_trawl = app.enqueue("trawl", "urgent", json!({})).await;
    let queued_sextant = app.enqueue("sextant", "normal", json!({})).await;
    let get = |q: &'static str| {
        let app = &app;
        async move { ids(&app.get(&format!("/v1/items?{q}"), "conn").await.body) }
    };
    assert_eq!(get("state=failed").await, vec![failed.clone()]);
    assert_eq!(
        get("kind=trawl").await,
        vec![failed, queued_trawl.clone(), urgent_trawl.clone()]
    );
    assert_eq!(
        get("state=queued&kind=trawl").await,
        vec![queued_trawl.clone(), urgent_trawl.clone()]
    );
    assert_eq!(
        get("state=queued&kind=trawl&priority=normal").await,
        vec![queued_trawl.clone()]
    );
    assert_eq!(
        get("priority=normal&state=queued").await,
        vec![queued_trawl, queued_sextant]
    );
    assert_eq!(get("priority=urgent").await, vec![urgent_trawl]);
}

#[tokio::test]
async fn paging_with_next_visits_every_item_once_in_order_and_ends_with_null() {
    let app = TestApp::spawn().await;
    let made = app.enqueue_many("assay", "normal", 7).await;
    let mut seen = Vec::new();
    let mut path = "/v1/items?kind=assay&limit=3".to_owned();
    let mut pages = 0;
    loop {
        let r = app.get(&path, "operator").await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        pages += 1;
        seen.extend(ids(&r.body));
        match r.body["next"].as_str() {
            Some(next) => path = format!("/v1/items?kind=assay&limit=3&after={next}"),
            None => break,
        }
    }
    assert_eq!((seen, pages), (made, 3));
}

#[tokio::test]
async fn paging_with_next_through_leased_done_and_queued_items_of_a_kind_visits_each_once_in_order()
{
    let app = TestApp::spawn().await;
    let made = app.enqueue_many("assay", "normal", 7).await;
    let done = app.lease("assay", "w").await.expect("an item");
    let r = app.complete(&done, json!({"result": {}})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    app.lease("assay", "w").await.expect("an item");
    let mut seen = Vec::new();
    let mut path = "/v1/items?kind=assay&limit=3".to_owned();
    loop {
        let r = app.get(&path, "operator").await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        seen.extend(ids(&r.body));
        match r.body["next"].as_str() {
            Some(next) => path = format!("/v1/items?kind=assay&limit=3&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, made);
}

#[tokio::test]
async fn a_full_last_page_says_there_is_no_next_page() {
    let app = TestApp::spawn().await;
    app.enqueue_many("assay", "normal", 2).await;
    let r = app.get("/v1/items?limit=2", "operator").await;
    assert_eq!((ids(&r.body).len(), &r.body["next"]), (2, &Value::Null));
}

#[tokio::test]
async fn a_failed_item_is_listed_with_its_last_error_and_when_it_changed() {
    let app = TestApp::spawn().await;
    let id = failed_item(&app, "trawl").await;
    let r = app.get("/v1/items?state=failed", "operator").await;
    let item = &r.body["items"][0];
    assert_eq!(item["id"], id.as_str());
    assert_eq!(
        (&item["attempt"], &item["last_error"]),
        (
            &json!(1),
            &json!({"code": "E_PARSE", "message": "bad page"})
        )
    );
    let history = app.item(&id).await["history"].clone();
    let newest = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(item["updated_at"], newest["at"]);
}

#[tokio::test]
async fn an_unknown_filter_value_or_a_limit_out_of_range_is_a_bad_request() {
    let app = TestApp::spawn().await;
    for q in [
        "state=lost",
        "kind=plainforge",
        "priority=high",
        "limit=0",
        "limit=501",
        "limit=-1",
        "after=not-an-id",
        "colour=red",
    ] {
        app.get(&format!("/v1/items?{q}"), "operator")
            .await
            .assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
    }
}

#[tokio::test]
async fn a_page_of_five_hundred_is_allowed() {
    let app = TestApp::spawn().await;
    let r = app.get("/v1/items?limit=500", "operator").await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn conn_and_operator_may_list_items_and_a_worker_may_not() {
    let app = TestApp::spawn().await;
    crate::harness::only_conn_and_the_operator_may_get(&app, "/v1/items").await;
}

#[tokio::test]
async fn a_bulk_retry_requeues_the_oldest_failed_items_of_the_kind_with_attempts_reset() {
    let app = TestApp::spawn().await;
    let a = failed_item(&app, "trawl").await;
    let b = failed_item(&app, "trawl").await;
    let c = failed_item(&app, "trawl").await;
    let other = failed_item(&app, "sextant").await;
    let r = app.bulk_retry(json!({"kind": "trawl", "max": 2})).await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::OK,
            json!({"retried": 2, "item_ids": [a.clone(), b.clone()]})
        )
    );
    for (id, state, attempt) in [
        (&a, "queued", 0),
        (&b, "queued", 0),
        (&c, "failed", 1),
        (&other, "failed", 1),
    ] {
        let item = app.item(id).await;
        assert_eq!(
            (&item["state"], &item["attempt"]),
            (&json!(state), &json!(attempt)),
            "{id}"
        );
    }
}

#[tokio::test]
async fn a_bulk_retry_writes_one_ledger_row_per_item() {
    let app = TestApp::spawn().await;
    let a = failed_item(&app, "trawl").await;
    let b = failed_item(&app, "trawl").await;
    let r = app.bulk_retry(json!({"kind": "trawl", "max": 10})).await;
    assert_eq!(r.body["retried"], 2);
    let rows = app
        .count("core.ledger WHERE event = 'retried' AND actor = 'operator'")
        .await;
    assert_eq!(rows, 2);
    for id in [a, b] {
        let history = app.item(&id).await["history"].clone();
        let last = history.as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (&last["event"], &last["from"], &last["to"]),
            (&json!("retried"), &json!("failed"), &json!("queued"))
        );
    }
    app.verify_ledger().await;
}

#[tokio::test]
async fn a_retried_item_can_be_leased_again() {
    let app = TestApp::spawn().await;
    let id = failed_item(&app, "trawl").await;
    app.bulk_retry(json!({"kind": "trawl"})).await;
    let lease = app.lease_eventually("trawl", "w2").await;
    assert_eq!(lease["item"]["id"], id.as_str());
}

#[tokio::test]
async fn a_bulk_retry_with_no_failed_items_retries_none() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let r = app.bulk_retry(json!({"kind": "trawl", "max": 5})).await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::OK, json!({"retried": 0, "item_ids": []}))
    );
}

#[tokio::test]
async fn only_an_operator_may_bulk_retry() {
    let app = TestApp::spawn().await;
    failed_item(&app, "trawl").await;
    for who in ["conn", "worker:trawl", "shipkeeper"] {
        app.post("/v1/items/retry", who, json!({"kind": "trawl", "max": 1}))
            .await
            .assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
    }
    assert_eq!(app.count("core.items WHERE state = 'failed'").await, 1);
}

#[tokio::test]
async fn a_bulk_retry_outside_one_to_a_thousand_or_of_no_kind_is_a_bad_request() {
    let app = TestApp::spawn().await;
    for body in [
        json!({"kind": "trawl", "max": 0}),
        json!({"kind": "trawl", "max": 1001}),
        json!({"kind": "plainforge", "max": 1}),
        json!({"max": 1}),
        // A bulk retry takes failed (the default) or needs_subtool items, nothing else.
        json!({"kind": "trawl", "max": 1, "state": "queued"}),
        json!({"kind": "trawl", "max": 1, "state": "soon"}),
        json!({"kind": "trawl", "max": 1, "priority": "urgent"}),
    ] {
        app.bulk_retry(body)
            .await
            .assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
    }
}
