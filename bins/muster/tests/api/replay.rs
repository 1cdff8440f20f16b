//! needs_subtool parking and the automatic replay on a new worker digest.

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// Enqueues, leases and parks `n` items of `kind` under `worker_digest`.
async fn park(
    app: &TestApp,
    kind: &str,
    priority: &str,
    n: usize,
    worker_digest: &str,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        app.enqueue(kind, priority, json!({ "i": i })).await;
        let l = app.lease(kind, "w").await.expect("just enqueued");
        let r = app
            .needs_subtool(
                &l,
                json!({"worker_digest": worker_digest, "layout": {"signature": "tbl-v9"}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        ids.push(l["item"]["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Shipkeeper reports `digest` as the deployed trawl image: how many parked items that replayed.
async fn deploy_trawl(app: &TestApp, digest: &str) -> serde_json::Value {
    app.put_digest("trawl", "shipkeeper", digest).await.body["replayed"].clone()
}

#[tokio::test]
async fn a_new_digest_replays_exactly_that_kinds_parked_items_once_while_other_work_goes_on() {
    let app = Arc::new(TestApp::spawn().await);
    let old = digest('a');
    let kinds: [&'static str; 4] = ["trawl", "sextant", "assay", "countersign"];
    let parkers: Vec<_> = kinds
        .into_iter()
        .map(|k| {
            let app = app.clone();
            let old = old.clone();
            tokio::spawn(async move { park(&app, k, "normal", 250, &old).await })
        })
        .collect();
    for p in parkers {
        p.await.unwrap();
    }
    assert_eq!(
        app.count("core.items WHERE state = 'needs_subtool'").await,
        1000
    );

    // Other workers keep leasing and completing waybill items during the report.
    for i in 0..40 {
        app.enqueue("waybill", "normal", json!({ "i": i })).await;
    }
    let busy = {
        let app = app.clone();
        tokio::spawn(async move {
            let mut done = 0;
            while let Some(l) = app.lease("waybill", "wb").await {
                let r = app.complete(&l, json!({"result": {}})).await;
                assert_eq!(r.status, StatusCode::OK);
                done += 1;
            }
            done
        })
    };
    let r = app.put_digest("sextant", "shipkeeper", &digest('b')).await;
    assert_eq!(
        r.body,
        json!({"kind": "sextant", "digest": digest('b'), "replayed": 250})
    );
    assert_eq!(busy.await.unwrap(), 40);

    assert_eq!(
        app.count("core.items WHERE kind = 'sextant' AND state = 'queued'")
            .await,
        250
    );
    assert_eq!(
        app.count("core.items WHERE kind <> 'sextant' AND state = 'needs_subtool'")
            .await,
        750
    );
    // One `replayed` ledger row per sextant item, none for any other item.
    assert_eq!(
        app.scalar_i64(
            "SELECT count(DISTINCT l.subject_id) FROM core.ledger l JOIN core.items i ON i.id::text = l.subject_id
             WHERE l.event = 'replayed' AND i.kind = 'sextant'"
        )
        .await,
        250
    );
    assert_eq!(app.count("core.ledger WHERE event = 'replayed'").await, 250);
    app.verify_ledger().await;
}

#[tokio::test]
async fn reporting_the_same_digest_again_replays_nothing() {
    let app = TestApp::spawn().await;
    park(&app, "trawl", "normal", 2, &digest('a')).await;
    assert_eq!(deploy_trawl(&app, &digest('b')).await, 2);
    park(&app, "trawl", "normal", 1, &digest('b')).await;
    assert_eq!(deploy_trawl(&app, &digest('b')).await, 0);
    assert_eq!(
        app.count("core.items WHERE state = 'needs_subtool'").await,
        1
    );
}

#[tokio::test]
async fn an_item_parked_by_the_image_already_reported_waits_for_the_next_digest() {
    let app = TestApp::spawn().await;
    app.put_digest("trawl", "shipkeeper", &digest('a')).await;
    park(&app, "trawl", "normal", 1, &digest('a')).await;
    assert!(app.lease("trawl", "w").await.is_none());
    assert_eq!(deploy_trawl(&app, &digest('c')).await, 1);
}

#[tokio::test]
async fn an_item_parked_by_an_older_image_than_the_deployed_one_is_replayed_at_once() {
    let app = TestApp::spawn().await;
    app.put_digest("trawl", "shipkeeper", &digest('b')).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let l = app.lease("trawl", "old-pod").await.unwrap();
    let r = app
        .needs_subtool(
            &l,
            json!({"worker_digest": digest('a'), "layout": {"signature": "s"}}),
        )
        .await;
    assert_eq!(r.body["state"], "queued");
    let again = app
        .lease("trawl", "new-pod")
        .await
        .expect("replayed at once");
    assert_eq!(
        again["item"]["attempt"], 2,
        "a park by an outdated image is charged"
    );
}

#[tokio::test]
async fn a_replayed_urgent_item_goes_ahead_of_normal_work() {
    let app = TestApp::spawn().await;
    let urgent = park(&app, "trawl", "urgent", 1, &digest('a')).await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.put_digest("trawl", "shipkeeper", &digest('b')).await;
    let l = app.lease("trawl", "w").await.unwrap();
    assert_eq!(l["item"]["id"].as_str().unwrap(), urgent[0]);
}

#[tokio::test]
async fn digest_reports_are_checked() {
    let app = TestApp::spawn().await;
    let cases = [
        (
            "trawl",
            "worker:trawl",
            digest('a'),
            StatusCode::FORBIDDEN,
            "E_FORBIDDEN",
        ),
        (
            "plainforge",
            "shipkeeper",
            digest('a'),
            StatusCode::NOT_FOUND,
            "E_NOT_FOUND",
        ),
        (
            "trawl",
            "shipkeeper",
            "sha256:abc".to_owned(),
            StatusCode::BAD_REQUEST,
            "E_BAD_REQUEST",
        ),
        (
            "trawl",
            "shipkeeper",
            digest('A'),
            StatusCode::BAD_REQUEST,
            "E_BAD_REQUEST",
        ),
    ];
    for (kind, who, d, status, code) in cases {
        let r = app.put_digest(kind, who, &d).await;
        assert_eq!((r.status, r.code()), (status, code), "{kind} {who} {d}");
    }
    assert_eq!(app.count("core.worker_digests").await, 0);
}

#[tokio::test]
async fn a_replay_that_fails_halfway_replays_nothing_and_records_no_digest() {
    let app = TestApp::spawn().await;
    park(&app, "trawl", "normal", 20, &digest('a')).await;
    // Injected failure: the 11th `replayed` ledger row raises inside PostgreSQL, after the
    // digest and the items were already updated in the same transaction.
    app.execute("CREATE SEQUENCE core.inject_count;
             CREATE FUNCTION core.inject_failure() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN IF nextval('core.inject_count') > 10 THEN RAISE EXCEPTION 'injected failure'; END IF;
                        RETURN NEW; END $$;
             CREATE TRIGGER inject BEFORE INSERT ON core.ledger FOR EACH ROW
               WHEN (NEW.event = 'replayed') EXECUTE FUNCTION core.inject_failure();").await;
    let r = app.put_digest("trawl", "shipkeeper", &digest('b')).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        app.count("core.items WHERE state = 'needs_subtool'").await,
        20
    );
    assert_eq!(app.count("core.worker_digests").await, 0);
    assert_eq!(app.count("core.ledger WHERE event = 'replayed'").await, 0);
    app.execute("DROP TRIGGER inject ON core.ledger").await;
    assert_eq!(deploy_trawl(&app, &digest('b')).await, 20);
}

#[tokio::test]
async fn replayed_items_that_keep_failing_end_in_failed_through_the_attempt_limit() {
    let app = TestApp::spawn_with(crate::harness::fast_retries(3)).await;
    park(&app, "trawl", "normal", 1, &digest('a')).await;
    app.put_digest("trawl", "shipkeeper", &digest('b')).await;
    let mut last = String::new();
    for _ in 0..3 {
        let l = app.lease_eventually("trawl", "w").await;
        last = app.fail_on_purpose(&l, true).await.body["state"]
            .as_str()
            .unwrap()
            .to_owned();
    }
    assert_eq!(last, "failed");
    assert!(app.lease("trawl", "w").await.is_none());
}

#[tokio::test]
async fn an_item_bounced_between_outdated_pods_ends_in_failed() {
    let app = TestApp::spawn().await;
    app.put_digest("trawl", "shipkeeper", &digest('b')).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let mut states = Vec::new();
    for _ in 0..5 {
        let l = app
            .lease("trawl", "old-pod")
            .await
            .expect("replayed at once");
        let r = app
            .needs_subtool(
                &l,
                json!({"worker_digest": digest('a'), "layout": {"signature": "s"}}),
            )
            .await;
        states.push(r.body["state"].as_str().unwrap().to_owned());
    }
    assert_eq!(states, ["queued", "queued", "queued", "queued", "failed"]);
}
