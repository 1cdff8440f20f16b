//! Safe through a rollout: a park racing a digest report, the final attempt's grace, one clock
//! for every replica, and wake-ups across replicas.

use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestApp;
use crate::harness::{until_bridges_listen, until_waiting_for_locks};

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// The interleaving of issue 24 item 1, forced: a digest report holds its transaction open
/// (its digest written, its replay waiting for a parked row the test holds) while a park of a
/// leased item arrives and waits for the report's lock. The park must see the new digest when
/// it gets the lock.
#[tokio::test]
async fn a_park_that_waited_for_a_digest_report_sees_the_reported_digest_and_replays_the_item() {
    let app = Arc::new(TestApp::spawn().await);
    let (old, new) = (digest('a'), digest('b'));
    app.put_digest("trawl", "shipkeeper", &old).await;
    // A parked item the report will replay: the test holds its row to keep the report open.
    app.enqueue("trawl", "normal", json!({"n": 1})).await;
    let first = app.lease("trawl", "old-pod").await.expect("queued");
    let layout = json!({"worker_digest": old, "layout": {"signature": "s"}});
    assert_eq!(
        app.needs_subtool(&first, layout.clone()).await.body["state"],
        "needs_subtool"
    );
    // The item whose park races the report: leased while the report runs.
    app.enqueue("trawl", "normal", json!({"n": 2})).await;
    let second = app.lease("trawl", "old-pod").await.expect("queued");
    let holder = app
        .open_transaction(&format!(
            "SELECT 1 FROM core.items WHERE id = '{}' FOR UPDATE",
            first["item"]["id"].as_str().unwrap()
        ))
        .await;

    let report = {
        let app = app.clone();
        let new = new.clone();
        tokio::spawn(async move { app.put_digest("trawl", "shipkeeper", &new).await })
    };
    until_waiting_for_locks(&app, 1).await;
    let park = {
        let app = app.clone();
        tokio::spawn(async move { app.needs_subtool(&second, layout).await })
    };
    until_waiting_for_locks(&app, 2).await;
    holder.batch_execute("COMMIT").await.expect("commit");

    let report = report.await.unwrap();
    assert_eq!(report.body["replayed"], 1, "{:?}", report.body);
    let park = park.await.unwrap();
    assert_eq!(park.status, StatusCode::OK);
    assert_eq!(park.body["state"], "queued");
    assert_eq!(
        app.count("core.items WHERE state = 'needs_subtool'").await,
        0
    );
}

#[tokio::test]
async fn a_replica_is_not_ready_while_the_schema_is_behind_it() {
    let app = TestApp::spawn().await;
    app.execute(
        "DELETE FROM core.schema_migrations
         WHERE version = (SELECT max(version) FROM core.schema_migrations)",
    )
    .await;
    let r = app.raw(Method::GET, "/readyz", None, vec![]).await;
    r.assert_error(StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE");
}

/// Issue 24 item 5: the lease request re-checks every second; without a wake-up from the other
/// replica it is answered about 800 ms after the enqueue here.
#[tokio::test]
async fn a_lease_request_waiting_on_one_replica_is_woken_by_an_enqueue_on_another() {
    let a = TestApp::spawn().await;
    let b = Arc::new(TestApp::spawn_on(a.db.clone(), |_| {}).await);
    until_bridges_listen(&a, 2).await;
    assert_woken_across(&a, &b).await;
}

/// The bridges' connections cut by the database (as a failover or an idle-session killer
/// would): each replica reconnects on its own, and the wake-up works again.
#[tokio::test]
async fn the_wake_up_bridges_reconnect_after_their_connections_are_terminated() {
    let a = TestApp::spawn().await;
    let b = Arc::new(TestApp::spawn_on(a.db.clone(), |_| {}).await);
    until_bridges_listen(&a, 2).await;
    let bridges = format!(
        "FROM pg_stat_activity WHERE datname = current_database() AND application_name = '{}'",
        muster_pg::WAKE_APPLICATION_NAME
    );
    let old = a
        .scalar_text(&format!("SELECT string_agg(pid::text, ',') {bridges}"))
        .await;
    let terminated = a
        .scalar_i64(&format!(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) {bridges}"
        ))
        .await;
    assert_eq!(terminated, 2);
    let mut new_listening = 0;
    for _ in 0..500 {
        new_listening = a
            .scalar_i64(&format!(
                "SELECT count(*) {bridges} AND state = 'idle' AND pid NOT IN ({old})"
            ))
            .await;
        if new_listening == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(new_listening, 2, "the bridges did not listen again");
    assert_woken_across(&a, &b).await;
}

/// A lease request waiting on `b` is answered within 250 ms of an enqueue on `a` (the
/// contract's 50 ms is a figure of `cargo xtask bench`'s pickup rows, not of a timed test).
async fn assert_woken_across(a: &TestApp, b: &Arc<TestApp>) {
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let r = b.lease_waiting("sextant", "w", 5_000).await;
            (r, std::time::Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.enqueue("sextant", "normal", json!({})).await;
    let enqueued = std::time::Instant::now();
    let (r, answered) = waiter.await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let took = answered.saturating_duration_since(enqueued);
    // The waiter's own re-check comes a second after it began to wait, 800 ms after the
    // enqueue: anything well under that is the wake-up (on a loaded machine it has taken
    // 400 ms).
    assert!(
        took < Duration::from_millis(600),
        "picked up {took:?} after the enqueue on the other replica"
    );
}

/// A Clock port `skew` off the system clock.
struct Skewed(time::Duration);

impl muster_app::ports::Clock for Skewed {
    fn now(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc() + self.0
    }
}

/// A second replica on `app`'s database whose clock is `skew` off, with lease TTL `ttl_ms`.
async fn skewed_replica(app: &TestApp, skew: time::Duration, ttl_ms: u64) -> TestApp {
    TestApp::spawn_on(app.db.clone(), |s| {
        s.clock = muster::config::ClockAdapter(Arc::new(Skewed(skew)));
        s.lease_ttl_ms = ttl_ms;
    })
    .await
}

#[tokio::test]
async fn a_replica_whose_clock_runs_ahead_does_not_take_a_live_lease() {
    let a = TestApp::spawn().await;
    let ahead = skewed_replica(&a, time::Duration::minutes(2), 30_000).await;
    a.enqueue_and_lease("trawl").await;
    assert_eq!(
        ahead.lease_waiting("trawl", "w", 0).await.status,
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn a_replica_whose_clock_runs_behind_takes_an_expired_lease() {
    let a = TestApp::spawn_with(|s| s.lease_ttl_ms = 300).await;
    let behind = skewed_replica(&a, -time::Duration::minutes(2), 300).await;
    let first = a.enqueue_and_lease("trawl").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = behind.lease("trawl", "w").await.expect("the lease expired");
    assert_eq!(
        (again["item"]["id"].clone(), again["fence"].clone()),
        (first["item"]["id"].clone(), json!(2))
    );
}

#[tokio::test]
async fn a_heartbeat_on_a_replica_whose_clock_runs_behind_extends_the_lease_by_the_databases_clock()
{
    let a = TestApp::spawn().await;
    let behind = skewed_replica(&a, -time::Duration::minutes(2), 30_000).await;
    let lease = a.enqueue_and_lease("trawl").await;
    let ack = behind.heartbeat(&lease, "w").await;
    let expires_at = time::OffsetDateTime::parse(
        ack.body["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let from_now = expires_at - time::OffsetDateTime::now_utc();
    assert!(
        from_now > time::Duration::seconds(25) && from_now <= time::Duration::seconds(30),
        "{from_now}"
    );
}

/// One attempt allowed (so the first lease is the last), a lease time of 300 ms, and a final
/// grace of `grace_ms` (`None`: the default, three lease times).
fn final_attempt_only(grace_ms: Option<u64>) -> impl FnOnce(&mut muster::Settings) {
    move |s| {
        crate::harness::fast_retries(1)(s);
        s.lease_ttl_ms = 300;
        s.final_grace_ms = grace_ms;
    }
}

#[tokio::test]
async fn a_spooled_result_delivered_after_an_outage_longer_than_the_lease_time_completes_the_final_attempt()
 {
    let app = TestApp::spawn_with(final_attempt_only(None)).await;
    let lease = app.enqueue_and_lease("trawl").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Another worker of the kind asks for work while the lease is expired but in its grace.
    assert_eq!(
        app.lease_waiting("trawl", "other", 0).await.status,
        StatusCode::NO_CONTENT
    );
    let done = app
        .complete(&lease, json!({"result": {"spooled": true}}))
        .await;
    assert_eq!(
        (done.status, done.body["state"].clone()),
        (StatusCode::OK, json!("done"))
    );
}

#[tokio::test]
async fn past_the_final_grace_the_next_lease_request_fails_the_item_and_a_late_result_is_lease_lost()
 {
    let app = TestApp::spawn_with(final_attempt_only(Some(200))).await;
    let lease = app.enqueue_and_lease("trawl").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        app.lease_waiting("trawl", "other", 0).await.status,
        StatusCode::NO_CONTENT
    );
    let item = app.item(lease["item"]["id"].as_str().unwrap()).await;
    assert_eq!(item["state"], "failed");
    let late = app
        .complete(&lease, json!({"result": {"spooled": true}}))
        .await;
    late.assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    assert_eq!(
        app.scalar_text(&format!(
            "SELECT outcome FROM core.leases WHERE id = '{}'",
            lease["lease_id"].as_str().unwrap()
        ))
        .await,
        "late"
    );
}

/// Sleeps past the end of the final grace of `final_attempt_only(Some(200))` (300 ms lease
/// time + 200 ms grace) with a margin.
async fn past_the_final_grace() {
    tokio::time::sleep(Duration::from_millis(700)).await;
}

#[tokio::test]
async fn a_completion_after_the_final_grace_is_lease_lost_and_fails_the_item_without_a_lease_request()
 {
    let app = TestApp::spawn_with(final_attempt_only(Some(200))).await;
    let lease = app.enqueue_and_lease("trawl").await;
    past_the_final_grace().await;
    let late = app
        .complete(&lease, json!({"result": {"spooled": true}}))
        .await;
    late.assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    let item = app.item(lease["item"]["id"].as_str().unwrap()).await;
    assert_eq!(item["state"], "failed");
}

#[tokio::test]
async fn a_completion_after_the_final_grace_is_kept_in_the_ledger_as_a_late_result() {
    let app = TestApp::spawn_with(final_attempt_only(Some(200))).await;
    let lease = app.enqueue_and_lease("trawl").await;
    past_the_final_grace().await;
    app.complete(&lease, json!({"result": {"spooled": true}}))
        .await;
    let events = app
        .scalar_text(&format!(
            "SELECT string_agg(event, ',' ORDER BY seq) FROM core.ledger
             WHERE subject_id = '{}'",
            lease["item"]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(events, "enqueued,leased,expired,late_result");
}

#[tokio::test]
async fn a_heartbeat_after_the_final_grace_is_lease_lost_and_fails_the_item() {
    let app = TestApp::spawn_with(final_attempt_only(Some(200))).await;
    let lease = app.enqueue_and_lease("trawl").await;
    past_the_final_grace().await;
    app.heartbeat(&lease, "w")
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    let item = app.item(lease["item"]["id"].as_str().unwrap()).await;
    assert_eq!(item["state"], "failed");
}

#[tokio::test]
async fn a_failure_report_after_the_final_grace_is_lease_lost() {
    let app = TestApp::spawn_with(final_attempt_only(Some(200))).await;
    let lease = app.enqueue_and_lease("trawl").await;
    past_the_final_grace().await;
    app.fail_on_purpose(&lease, true)
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
}

#[tokio::test]
async fn a_park_after_the_final_grace_is_lease_lost() {
    let app = TestApp::spawn_with(final_attempt_only(Some(200))).await;
    let lease = app.enqueue_and_lease("trawl").await;
    past_the_final_grace().await;
    app.needs_subtool(
        &lease,
        json!({"worker_digest": digest('a'), "layout": {"signature": "s"}}),
    )
    .await
    .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
}

#[tokio::test]
async fn a_batched_completion_after_the_final_grace_is_lease_lost() {
    let app = TestApp::spawn_with(final_attempt_only(Some(200))).await;
    let lease = app.enqueue_and_lease("trawl").await;
    past_the_final_grace().await;
    let answer = app
        .post(
            "/v1/completions",
            "worker:trawl",
            json!({"completions": [{
                "lease_id": lease["lease_id"], "result": {"spooled": true}
            }]}),
        )
        .await;
    assert_eq!(answer.body["results"][0]["error"]["code"], "E_LEASE_LOST");
}

#[tokio::test]
async fn a_draining_replica_is_not_ready() {
    let app = Arc::new(TestApp::spawn().await);
    // Answered on a connection the client keeps open, and asks on again while draining.
    let before = app.raw(Method::GET, "/readyz", None, vec![]).await;
    assert_eq!(before.status, StatusCode::OK);
    let stopping = {
        let app = app.clone();
        tokio::spawn(async move { app.stop().await })
    };
    // Within the lame-duck second, while connections already open are still served.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let draining = app.raw(Method::GET, "/readyz", None, vec![]).await;
    draining.assert_error(StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE");
    stopping.await.unwrap();
}
