//! The worker client against a real Muster server (and a fake one that answers nonsense).

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use muster_worker::{Action, ClientError, LeaseState, NextStep, SpoolEntry, WorkerClient};
use serde_json::json;
use support::{
    CountingProxy, FakeServer, LossyProxy, OneLeased, TempDir, TestApp, Workers, dead_addr,
    one_leased, one_leased_on, quick_retry, token, trace_and_span, unreachable_trawl, worker_at,
};

const GENEROUS: Duration = Duration::from_secs(20);

#[tokio::test]
async fn lease_then_complete_marks_the_item_done_and_enqueues_the_next_step() {
    let server = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let trawl = server.worker("trawl", "trawl-1", &spool);
    let item_id = server
        .enqueue("trawl", "normal", json!({"url": "https://example.org"}))
        .await;

    let lease = trawl.lease(1_000).await.unwrap().expect("a lease");
    assert_eq!(lease.item.id, item_id);
    assert_eq!(lease.item.kind, "trawl");
    assert_eq!(lease.item.priority, "normal");
    assert_eq!(lease.item.attempt, 1);
    assert_eq!(lease.item.payload, json!({"url": "https://example.org"}));
    assert_eq!(lease.fence, 1);
    assert_eq!(lease.heartbeat_ms, 10_000);

    let ack = trawl
        .complete(
            &lease,
            json!({"echo": lease.item.payload}),
            vec![NextStep::new("sextant", json!({"from": item_id}))],
        )
        .await
        .unwrap();
    assert_eq!(ack.item_id.as_deref(), Some(item_id.as_str()));
    assert_eq!(ack.state, "done");
    assert!(!ack.replayed);
    assert!(ack.ledger_seq.is_some());
    assert_eq!(spool.names(), Vec::<String>::new());

    let item = server.item(&item_id).await;
    assert_eq!(item["state"], "done");
    assert_eq!(
        item["result"],
        json!({"echo": {"url": "https://example.org"}})
    );

    let sextant = server.worker("sextant", "sextant-1", &spool);
    let next = sextant.lease(1_000).await.unwrap().expect("the next step");
    assert_eq!(next.item.payload, json!({"from": item_id}));
}

#[tokio::test]
async fn lease_answers_none_when_nothing_becomes_leasable_within_the_wait() {
    let server = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let trawl = server.worker("trawl", "trawl-1", &spool);
    assert_eq!(trawl.lease(50).await.unwrap(), None);
}

#[tokio::test]
async fn fail_and_needs_subtool_are_delivered_and_unspooled() {
    let server = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let trawl = server.worker("trawl", "trawl-1", &spool);
    let failed_id = server.enqueue("trawl", "normal", json!({"n": 1})).await;
    let parked_id = server.enqueue("trawl", "normal", json!({"n": 2})).await;

    let first = trawl.lease(1_000).await.unwrap().unwrap();
    assert_eq!(first.item.id, failed_id);
    let ack = trawl
        .fail(&first, "E_BROKEN", "cannot parse", false)
        .await
        .unwrap();
    assert_eq!(ack.state, "failed");

    let second = trawl.lease(1_000).await.unwrap().unwrap();
    assert_eq!(second.item.id, parked_id);
    let digest = format!("sha256:{}", "ab".repeat(32));
    let ack = trawl
        .needs_subtool(&second, &digest, "table/v2", json!({"columns": 7}))
        .await
        .unwrap();
    assert_eq!(
        (ack.item_id.as_deref(), ack.state.as_str()),
        (Some(parked_id.as_str()), "needs_subtool")
    );

    assert_eq!(server.item(&failed_id).await["state"], "failed");
    assert_eq!(server.item(&parked_id).await["state"], "needs_subtool");
    assert_eq!(spool.names(), Vec::<String>::new());
}

#[tokio::test]
async fn a_delivery_spooled_while_the_server_is_down_is_delivered_when_it_is_back() {
    let OneLeased {
        server,
        spool,
        worker: live,
        item_id,
        lease,
    } = one_leased().await;

    // The same worker, while Muster is unreachable.
    let down = unreachable_trawl(&spool, quick_retry(3)).await;
    let err = down
        .complete(
            &lease,
            json!({"ok": true}),
            vec![NextStep::new("sextant", json!({}))],
        )
        .await
        .unwrap_err();
    let ClientError::Undelivered { attempts, last } = &err else {
        panic!("expected Undelivered, got {err:?}");
    };
    assert_eq!((*attempts, last.code()), (3, "E_TRANSPORT"));
    assert_eq!(err.code(), "E_UNDELIVERED");

    let file = format!("{}.complete.json", lease.lease_id);
    assert_eq!(spool.names(), vec![file.clone()]);
    let spooled: SpoolEntry =
        serde_json::from_slice(&std::fs::read(spool.0.join(&file)).unwrap()).unwrap();
    assert_eq!(
        spooled,
        SpoolEntry {
            lease_id: lease.lease_id.clone(),
            action: Action::Complete,
            body: json!({"result": {"ok": true}, "next": [{"kind": "sextant", "payload": {}}]}),
            traceparent: lease.traceparent().map(str::to_owned),
        }
    );
    assert_eq!(server.item(&item_id).await["state"], "leased");

    // Muster is back: the worker's start-up redelivery sends it.
    let redelivered = live.redeliver_spool().await.unwrap();
    assert_eq!(redelivered.len(), 1);
    assert_eq!(redelivered[0].file, spool.0.join(&file));
    let ack = redelivered[0].outcome.as_ref().unwrap();
    assert_eq!((ack.state.as_str(), ack.replayed), ("done", false));
    assert_eq!(spool.names(), Vec::<String>::new());
    assert_eq!(server.item(&item_id).await["state"], "done");
    assert!(live.redeliver_spool().await.unwrap().is_empty());
}

#[tokio::test]
async fn redeliver_spool_sends_the_oldest_delivery_first() {
    let server = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let live = server.worker("trawl", "trawl-1", &spool);
    server.enqueue("trawl", "normal", json!({"n": 1})).await;
    server.enqueue("trawl", "normal", json!({"n": 2})).await;
    let a = live.lease(1_000).await.unwrap().unwrap();
    let b = live.lease(1_000).await.unwrap().unwrap();
    let down = unreachable_trawl(&spool, quick_retry(1)).await;
    down.complete(&a, json!({"n": 1}), vec![])
        .await
        .unwrap_err();
    down.complete(&b, json!({"n": 2}), vec![])
        .await
        .unwrap_err();
    // b's delivery is an hour older (its name sorts after a's: lease ids are UUIDv7).
    assert!(b.lease_id > a.lease_id);
    std::fs::File::options()
        .write(true)
        .open(spool.0.join(format!("{}.complete.json", b.lease_id)))
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3_600))
        .unwrap();
    let redelivered = live.redeliver_spool().await.unwrap();
    let files: Vec<_> = redelivered.iter().map(|r| r.file.clone()).collect();
    assert_eq!(
        files,
        vec![
            spool.0.join(format!("{}.complete.json", b.lease_id)),
            spool.0.join(format!("{}.complete.json", a.lease_id)),
        ]
    );
    assert!(
        redelivered
            .iter()
            .all(|r| r.outcome.as_ref().unwrap().state == "done")
    );
    assert_eq!(spool.names(), Vec::<String>::new());
}

#[tokio::test]
async fn a_retried_delivery_after_a_lost_ack_is_answered_replayed_without_duplicate_next_items() {
    let OneLeased {
        server,
        spool,
        worker: _live,
        item_id,
        lease,
    } = one_leased().await;

    let proxy = LossyProxy::start(server.addr, 1).await;
    let through_proxy = WorkerClient::new(
        &format!("http://{}", proxy.addr),
        &token("worker:trawl"),
        "trawl",
        "trawl-1",
        &spool.0,
    )
    .unwrap()
    .with_retry(quick_retry(5));
    let ack = through_proxy
        .complete(
            &lease,
            json!({"ok": true}),
            vec![NextStep::new("sextant", json!({"from": item_id}))],
        )
        .await
        .unwrap();
    assert_eq!((ack.state.as_str(), ack.replayed), ("done", true));
    assert_eq!(proxy.connections.load(Ordering::SeqCst), 2);
    assert_eq!(spool.names(), Vec::<String>::new());

    let sextant = server.worker("sextant", "sextant-1", &spool);
    let next = sextant.lease(0).await.unwrap().expect("one next item");
    assert_eq!(next.item.payload, json!({"from": item_id}));
    assert_eq!(
        sextant.lease(0).await.unwrap(),
        None,
        "a second next item was enqueued"
    );
}

#[tokio::test]
async fn a_different_body_for_a_completed_lease_is_a_final_conflict() {
    let one = one_leased().await;
    let (trawl, lease) = (&one.worker, &one.lease);
    trawl
        .complete(lease, json!({"v": 1}), vec![])
        .await
        .unwrap();

    let err = trawl
        .complete(lease, json!({"v": 2}), vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "E_CONFLICT");
    assert!(err.is_final());
    assert_eq!(one.spool.names(), Vec::<String>::new());
}

#[tokio::test]
async fn a_delivery_on_a_superseded_lease_is_a_final_lease_lost_and_leaves_no_spool_file() {
    let OneLeased {
        server,
        spool,
        worker: slow,
        item_id,
        lease: old,
    } = one_leased_on(TestApp::spawn_with(|s| s.lease_ttl_ms = 100).await).await;

    let other_spool = TempDir::new("spool");
    let fast = server.worker("trawl", "trawl-fast", &other_spool);
    let newer = lease_within(&fast, GENEROUS).await;
    assert_eq!((newer.item.id.as_str(), newer.fence), (item_id.as_str(), 2));

    let err = slow
        .with_retry(quick_retry(5))
        .complete(&old, json!({"late": true}), vec![])
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::LeaseLost { .. }), "{err:?}");
    assert!(err.is_final());
    assert_eq!(spool.names(), Vec::<String>::new());
    assert_eq!(server.item(&item_id).await["state"], "leased");
}

#[tokio::test]
async fn a_refused_next_route_is_a_final_rejection_and_leaves_no_spool_file() {
    let one = one_leased().await;

    let err = one
        .worker
        .complete(
            &one.lease,
            json!({}),
            vec![NextStep::new("bellbuoy", json!({}))],
        )
        .await
        .unwrap_err();
    let ClientError::Rejected { status, code, .. } = &err else {
        panic!("expected Rejected, got {err:?}");
    };
    assert_eq!((*status, code.as_deref()), (422, Some("E_ROUTE")));
    assert_eq!(one.spool.names(), Vec::<String>::new());
}

#[tokio::test]
async fn heartbeat_keeps_a_short_lease_alive_past_its_ttl() {
    let OneLeased {
        server,
        spool: _spool,
        worker: holder,
        item_id,
        lease,
    } = one_leased_on(TestApp::spawn_with(|s| s.lease_ttl_ms = 300).await).await;
    assert_eq!(lease.heartbeat_ms, 100);

    let heartbeat = lease.keepalive(&holder);
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let other_spool = TempDir::new("spool");
    let other = server.worker("trawl", "trawl-other", &other_spool);
    assert_eq!(
        other.lease(0).await.unwrap(),
        None,
        "the held lease was re-leased"
    );
    assert!(!heartbeat.lost());
    let LeaseState::Held { expires_at } = heartbeat.state() else {
        panic!("lease lost");
    };
    assert!(expires_at > lease.expires_at);

    drop(heartbeat);
    let ack = holder.complete(&lease, json!({}), vec![]).await.unwrap();
    assert_eq!(
        (ack.item_id.as_deref(), ack.state.as_str()),
        (Some(item_id.as_str()), "done")
    );
}

#[tokio::test]
async fn heartbeat_reports_loss_once_the_lease_is_superseded() {
    let server = TestApp::spawn_with(|s| s.lease_ttl_ms = 100).await;
    let spool = TempDir::new("spool");
    let holder = server.worker("trawl", "trawl-holder", &spool);
    server.enqueue("trawl", "normal", json!({"n": 1})).await;
    let mut lease = holder.lease(1_000).await.unwrap().unwrap();
    // Heartbeat far too rarely, so the lease expires and is taken over in between.
    lease.heartbeat_ms = 1_000;
    let heartbeat = lease.keepalive(&holder);
    let mut watch = heartbeat.watch();

    let other_spool = TempDir::new("spool");
    let other = server.worker("trawl", "trawl-other", &other_spool);
    let newer = lease_within(&other, GENEROUS).await;
    assert_eq!(newer.fence, lease.fence + 1);

    tokio::time::timeout(GENEROUS, heartbeat.wait_lost())
        .await
        .expect("loss reported");
    assert!(heartbeat.lost());
    assert_eq!(*watch.borrow_and_update(), LeaseState::Lost);
}

/// Leases one item, polling until one becomes leasable (e.g. after another lease expired).
async fn lease_within(client: &WorkerClient, limit: Duration) -> muster_worker::Lease {
    tokio::time::timeout(limit, async {
        loop {
            if let Some(l) = client.lease(200).await.unwrap() {
                return l;
            }
        }
    })
    .await
    .expect("an item became leasable")
}

fn nonsense(path: &str) -> (u16, &'static [u8]) {
    match path {
        "/v1/leases" => (200, b"<html>definitely not a lease</html>"),
        "/v1/leases/garbage/heartbeat" => (200, br#"{"expires_at": 5}"#),
        "/v1/leases/garbage/complete" => (200, b"[1, 2"),
        "/v1/leases/redirect/fail" => (302, b""),
        "/v1/leases/teapot/needs_subtool" => (418, b"\xff\xfe\x00 short and stout"),
        "/v1/leases/down/complete" => (
            503,
            br#"{"error": {"code": "E_UNAVAILABLE", "message": "logbook unreachable"}}"#,
        ),
        _ => (500, b"{\"error\": 7}"),
    }
}

fn fake_lease(lease_id: &str) -> muster_worker::Lease {
    serde_json::from_value(json!({
        "lease_id": lease_id, "fence": 1, "expires_at": "2030-01-01T00:00:00Z", "heartbeat_ms": 1000,
        "item": {"id": "i", "kind": "trawl", "priority": "normal", "attempt": 1, "payload": null}
    }))
    .unwrap()
}

#[tokio::test]
async fn garbage_lease_and_heartbeat_answers_are_typed_errors() {
    let fake = FakeServer::start(nonsense).await;
    let spool = TempDir::new("spool");
    let client = WorkerClient::new(
        &format!("http://{}/", fake.addr),
        "t",
        "trawl",
        "w",
        &spool.0,
    )
    .unwrap();

    let err = client.lease(0).await.unwrap_err();
    assert!(
        matches!(err, ClientError::BadResponse { status: 200, .. }),
        "{err:?}"
    );
    let err = client.heartbeat(&fake_lease("garbage")).await.unwrap_err();
    assert!(
        matches!(err, ClientError::BadResponse { status: 200, .. }),
        "{err:?}"
    );
    let err = client
        .heartbeat(&fake_lease("anything-else"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ClientError::Unavailable {
                status: 500,
                code: None,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn garbage_and_unexpected_delivery_answers_are_typed_errors_and_keep_or_drop_the_spool_as_documented()
 {
    let fake = FakeServer::start(nonsense).await;
    let spool = TempDir::new("spool");
    let client = WorkerClient::new(
        &format!("http://{}", fake.addr),
        "t",
        "trawl",
        "w",
        &spool.0,
    )
    .unwrap()
    .with_retry(quick_retry(3));

    // 200 with a body that is not an acknowledgement: kept for redelivery, not retried in a loop.
    let err = client
        .complete(&fake_lease("garbage"), json!({}), vec![])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::BadResponse { status: 200, .. }),
        "{err:?}"
    );
    assert_eq!(fake.hits("/v1/leases/garbage/complete"), 1);

    // A status outside the contract: kept, not retried in a loop.
    let err = client
        .fail(&fake_lease("redirect"), "E_X", "x", true)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::UnexpectedStatus { status: 302 }),
        "{err:?}"
    );
    assert_eq!(fake.hits("/v1/leases/redirect/fail"), 1);

    // A 4xx with a garbage body: final, dropped.
    let err = client
        .needs_subtool(&fake_lease("teapot"), "sha256:00", "sig", json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ClientError::Rejected {
                status: 418,
                code: None,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(fake.hits("/v1/leases/teapot/needs_subtool"), 1);

    // 503: retried up to the budget, then kept.
    let err = client
        .complete(&fake_lease("down"), json!({}), vec![])
        .await
        .unwrap_err();
    let ClientError::Undelivered { attempts, last } = &err else {
        panic!("expected Undelivered, got {err:?}");
    };
    assert_eq!(*attempts, 3);
    assert!(
        matches!(&**last, ClientError::Unavailable { status: 503, code: Some(c), .. } if c == "E_UNAVAILABLE"),
        "{last:?}"
    );
    assert_eq!(fake.hits("/v1/leases/down/complete"), 3);

    assert_eq!(
        spool.names(),
        vec![
            "down.complete.json",
            "garbage.complete.json",
            "redirect.fail.json"
        ]
    );
}

#[tokio::test]
async fn a_corrupt_spool_file_is_reported_and_set_aside_while_the_rest_is_delivered() {
    let server = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let trawl = server.worker("trawl", "trawl-1", &spool);
    std::fs::write(spool.0.join("broken.complete.json"), b"{\"lease_id\": 1").unwrap();

    let redelivered = trawl.redeliver_spool().await.unwrap();
    assert_eq!(redelivered.len(), 1);
    assert_eq!(
        redelivered[0].outcome.as_ref().unwrap_err().code(),
        "E_SPOOL_CORRUPT"
    );
    assert_eq!(spool.names(), vec!["broken.complete.json.corrupt"]);
}

#[tokio::test]
async fn a_lease_id_that_could_escape_the_spool_directory_is_refused_before_anything_is_written() {
    let spool = TempDir::new("spool");
    let client = WorkerClient::new(
        &format!("http://{}", dead_addr().await),
        "t",
        "trawl",
        "w",
        &spool.0,
    )
    .unwrap();
    let err = client
        .complete(&fake_lease("..%2f"), json!({}), vec![])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "E_INVALID_ARGUMENT");
    assert_eq!(spool.names(), Vec::<String>::new());
}

#[tokio::test]
async fn a_lease_hands_the_worker_the_trace_its_item_was_enqueued_in() {
    let server = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let trawl = server.worker("trawl", "trawl-1", &spool);
    let enqueued_in = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let enqueue = hyper::Request::post(format!("{}/v1/items", server.url()))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", token("operator")))
        .header("traceparent", enqueued_in);
    let body = json!({"kind": "trawl", "priority": "normal", "payload": {}});
    let answer = server.send(enqueue, body.to_string().into_bytes()).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);

    let lease = trawl.lease(1_000).await.unwrap().expect("a lease");
    let traceparent = lease.traceparent().expect("the lease's traceparent");
    let (trace, span) = trace_and_span(traceparent);
    let (enqueue_trace, enqueue_span) = trace_and_span(enqueued_in);
    assert_eq!(trace, enqueue_trace);
    assert_ne!(span, enqueue_span);
    assert!(traceparent.ends_with("-01"), "{traceparent}");
}

#[tokio::test]
async fn every_call_on_a_lease_sends_the_leases_traceparent() {
    let server = TestApp::spawn().await;
    let proxy = CountingProxy::start(server.addr).await;
    let spool = TempDir::new("spool");
    let trawl = worker_at(&proxy.url(), "trawl", "trawl-1", &spool);
    server.enqueue_numbered("trawl", 3).await;
    let completed = trawl.lease(1_000).await.unwrap().unwrap();
    let failed = trawl.lease(1_000).await.unwrap().unwrap();
    let parked = trawl.lease(1_000).await.unwrap().unwrap();

    trawl.heartbeat(&completed).await.unwrap();
    trawl.complete(&completed, json!({}), vec![]).await.unwrap();
    trawl.fail(&failed, "E_BROKEN", "no", false).await.unwrap();
    let digest = format!("sha256:{}", "ab".repeat(32));
    trawl
        .needs_subtool(&parked, &digest, "table/v2", json!({}))
        .await
        .unwrap();

    let sent = |lease: &muster_worker::Lease| vec![lease.traceparent().map(str::to_owned)];
    assert!(completed.traceparent().is_some());
    assert_eq!(proxy.traceparents("heartbeat 200"), sent(&completed));
    assert_eq!(proxy.traceparents("complete 200"), sent(&completed));
    assert_eq!(proxy.traceparents("fail 200"), sent(&failed));
    assert_eq!(proxy.traceparents("needs_subtool 200"), sent(&parked));
    assert_eq!(proxy.traceparents("lease 200"), vec![None, None, None]);
}

#[tokio::test]
async fn a_delivery_spooled_while_the_server_is_down_is_redelivered_with_its_traceparent() {
    let OneLeased {
        server,
        spool,
        lease,
        ..
    } = one_leased().await;
    let down = unreachable_trawl(&spool, quick_retry(1)).await;
    down.complete(&lease, json!({}), vec![]).await.unwrap_err();
    let file = spool.0.join(format!("{}.complete.json", lease.lease_id));
    let spooled: SpoolEntry = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let traceparent = lease.traceparent().expect("the lease's traceparent");
    assert_eq!(spooled.traceparent.as_deref(), Some(traceparent));

    // A later run of the worker, Muster back.
    let proxy = CountingProxy::start(server.addr).await;
    let later = worker_at(&proxy.url(), "trawl", "trawl-1", &spool);
    let redelivered = later.redeliver_spool().await.unwrap();
    assert_eq!(redelivered[0].outcome.as_ref().unwrap().state, "done");
    assert_eq!(
        proxy.traceparents("complete 200"),
        vec![Some(traceparent.to_owned())]
    );
}

#[tokio::test]
async fn a_spool_file_written_without_a_traceparent_is_delivered_without_one() {
    let OneLeased {
        server,
        spool,
        item_id,
        lease,
        ..
    } = one_leased().await;
    let old = json!({
        "lease_id": lease.lease_id,
        "action": "complete",
        "body": {"result": {"old": true}, "next": []},
    });
    let file = spool.0.join(format!("{}.complete.json", lease.lease_id));
    std::fs::write(&file, old.to_string()).unwrap();

    let proxy = CountingProxy::start(server.addr).await;
    let later = worker_at(&proxy.url(), "trawl", "trawl-1", &spool);
    let redelivered = later.redeliver_spool().await.unwrap();
    assert_eq!(redelivered[0].outcome.as_ref().unwrap().state, "done");
    assert_eq!(proxy.traceparents("complete 200"), vec![None]);
    assert_eq!(server.item(&item_id).await["result"], json!({"old": true}));
}
