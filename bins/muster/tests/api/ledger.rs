//! The ledger: append-only in PostgreSQL itself, every chain verifiable, every transition whole.

use hyper::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

async fn run_a_small_pipeline(app: &TestApp) {
    for n in 0..5 {
        app.enqueue("trawl", "normal", json!({ "n": n })).await;
    }
    while let Some(l) = app.lease("trawl", "w").await {
        let r = app
            .complete(
                &l,
                json!({"result": {}, "next": [{"kind": "sextant", "payload": {}}]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let l = app.lease("sextant", "s").await.unwrap();
    app.fail_with(&l, "E", "m", false).await;
}

#[tokio::test]
async fn postgres_refuses_update_delete_and_truncate_on_the_ledger() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let c = app.db.client().await;
    for sql in [
        "UPDATE core.ledger SET data = '{}'",
        "DELETE FROM core.ledger",
        "TRUNCATE core.ledger",
    ] {
        let err = c.batch_execute(sql).await.expect_err(sql);
        assert!(
            err.to_string().contains("append-only") || format!("{err:?}").contains("append-only"),
            "{sql}: {err:?}"
        );
    }
    assert_eq!(app.count("core.ledger").await, 1);
}

#[tokio::test]
async fn every_chain_verifies_after_a_run() {
    let app = TestApp::spawn().await;
    run_a_small_pipeline(&app).await;
    let report = app.verify_ledger().await;
    // 5 trawl items (enqueued, leased, completed) + 5 sextant items (enqueued), one of them
    // leased and failed.
    assert_eq!((report.subjects, report.entries), (10, 5 * 3 + 5 + 2));
}

#[tokio::test]
async fn a_ledger_row_altered_behind_muster_fails_verification() {
    let app = TestApp::spawn().await;
    run_a_small_pipeline(&app).await;
    let c = app.db.client().await;
    // Only a table owner can switch the guard off; verification still catches the change.
    c.batch_execute(
        "ALTER TABLE core.ledger DISABLE TRIGGER ledger_no_update_delete;
         UPDATE core.ledger SET actor = 'operator' WHERE seq = (SELECT max(seq) FROM core.ledger);
         ALTER TABLE core.ledger ENABLE TRIGGER ledger_no_update_delete;",
    )
    .await
    .unwrap();
    let err = muster_pg::verify_ledger(&app.db.pool()).await.unwrap_err();
    assert_eq!(err.code(), "E_LEDGER_TAMPERED");
}

#[tokio::test]
async fn a_completion_that_fails_at_its_last_statement_leaves_no_trace() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    let item = l["item"]["id"].as_str().unwrap().to_owned();
    let before = (
        app.count("core.items").await,
        app.count("core.ledger").await,
    );
    crate::harness::fail_recording_lease_outcomes(&app).await;
    let body = json!({"result": {"r": 1}, "next": [{"kind": "sextant", "payload": {}}]});
    let r = app.complete(&l, body.clone()).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    let after = (
        app.count("core.items").await,
        app.count("core.ledger").await,
    );
    assert_eq!(after, before, "a half-written completion is visible");
    let view = app.item(&item).await;
    assert_eq!(
        (view["state"].as_str(), view["result"].is_null()),
        (Some("leased"), true)
    );

    // With the fault gone, the worker's retried delivery goes through once.
    app.execute("DROP TRIGGER inject ON core.leases").await;
    let r = app.complete(&l, body).await;
    assert_eq!(
        (r.status, r.body["replayed"].as_bool()),
        (StatusCode::OK, Some(false))
    );
    assert_eq!(app.count("core.items WHERE kind = 'sextant'").await, 1);
    app.verify_ledger().await;
}
