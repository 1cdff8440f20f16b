//! `muster watch`'s loop against real servers: the model it builds from the feed, and the
//! resumption after a replica goes away.

use std::time::Duration;

use muster_ops::Client;
use muster_ops::watch::{self, Model};
use muster_testkit::{TestApp, dead_addr, token};
use serde_json::json;

fn client(app: &TestApp, principal: &str) -> Client {
    Client::new(&app.url(), &token(principal)).expect("a client")
}

async fn watch_until(
    clients: Vec<Client>,
    until: impl Fn(&Model) -> bool + Send + Sync + 'static,
) -> Model {
    tokio::time::timeout(
        Duration::from_secs(30),
        watch::run_hidden(clients, Some(Box::new(until))),
    )
    .await
    .expect("the watch saw it within 30 s")
    .expect("the watch ran")
}

#[tokio::test]
async fn the_model_has_the_depths_of_the_queues_events_per_kind_and_state() {
    let app = TestApp::spawn().await;
    app.enqueue_many("trawl", "normal", 2).await;
    app.enqueue("sextant", "urgent", json!({})).await;
    // A snapshot may be up to 2 s old: wait for one that counts all three.
    let m = watch_until(vec![client(&app, "conn")], |m| m.totals() == (0, 3)).await;
    assert_eq!(
        (m.depth("trawl", "queued"), m.depth("sextant", "queued")),
        (2, 1)
    );
}

#[tokio::test]
async fn a_refused_token_ends_the_watch_with_403() {
    let app = TestApp::spawn().await;
    let err = watch::run_hidden(vec![client(&app, "worker:trawl")], None)
        .await
        .expect_err("a worker may not watch the feed");
    assert_eq!(
        (
            err.exit().code(),
            err.to_string().contains("403 E_FORBIDDEN")
        ),
        (1, true)
    );
}

#[tokio::test]
async fn a_replica_that_cannot_be_reached_is_skipped_for_the_next() {
    let app = TestApp::spawn().await;
    let down = Client::new(&format!("http://{}", dead_addr().await), &token("conn")).unwrap();
    let m = watch_until(vec![down, client(&app, "conn")], |m| m.depths_at.is_some()).await;
    assert_eq!(m.base, app.url());
}

#[tokio::test]
async fn after_a_replica_stops_the_watch_resumes_on_the_next_and_sees_every_transition_once() {
    let a = TestApp::spawn().await;
    let b = TestApp::spawn_on(a.db.clone(), |_| {}).await;
    let (clients, url_b) = (
        vec![client(&a, "operator"), client(&b, "operator")],
        b.url(),
    );
    let watcher = tokio::spawn(watch_until(clients, move |m| {
        m.base == url_b && m.transitions >= 3
    }));
    // The watch is on replica a when the first transition (the enqueue) happens; then a
    // drains and stops.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let id = a.enqueue("trawl", "normal", json!({})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.stop().await;
    // Two more, on replica b: a lease and its completion.
    let lease = b.lease("trawl", "w").await.expect("a lease");
    assert_eq!(lease["item"]["id"], id.as_str());
    b.complete(&lease, json!({"result": {}})).await;
    let m = watcher.await.expect("the watch task");
    let ledger = b.count("core.ledger").await;
    assert_eq!((m.transitions, m.reconnects, ledger), (3, 1, 3));
}
