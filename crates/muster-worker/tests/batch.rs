//! The worker client's batch calls (`lease_many`, `complete_many`, `complete_and_lease`)
//! against a real Muster server.

mod support;

use muster_worker::{Ack, ClientError, Completion, Lease, NextStep, WorkerClient};
use serde_json::json;
use support::{
    CountingProxy, TempDir, TestApp, Workers, quick_retry, trace_and_span, unreachable_trawl,
    worker_at,
};

/// A server with `n` queued trawl items, and a trawl worker spooling to `spool`.
async fn queued(n: usize, spool: &TempDir) -> (TestApp, WorkerClient, Vec<String>) {
    let server = TestApp::spawn().await;
    let trawl = server.worker("trawl", "trawl-1", spool);
    let ids = server.enqueue_numbered("trawl", n).await;
    (server, trawl, ids)
}

/// A server with `n` queued trawl items of which the trawl worker leased the first and
/// completed it with `complete_and_lease`: the server, the items and the acknowledgement.
async fn complete_and_lease_the_first_of(n: usize, spool: &TempDir) -> (TestApp, Vec<String>, Ack) {
    let (server, trawl, ids) = queued(n, spool).await;
    let first = trawl.lease(1_000).await.unwrap().unwrap();
    let ack = trawl
        .complete_and_lease(&first, json!({}), vec![])
        .await
        .unwrap();
    (server, ids, ack)
}

/// A server with two queued trawl items, both leased in one call by the trawl worker
/// spooling to `spool`.
async fn two_leased(spool: &TempDir) -> (TestApp, WorkerClient, Vec<String>, Vec<Lease>) {
    let (server, trawl, ids) = queued(2, spool).await;
    let leases = trawl.lease_many(2, 1_000).await.unwrap();
    (server, trawl, ids, leases)
}

/// One completion with `{"ok": true}` per lease.
fn completed_ok(leases: &[Lease]) -> Vec<Completion> {
    leases
        .iter()
        .map(|l| Completion::new(l, json!({"ok": true}), vec![]))
        .collect()
}

fn item_ids(leases: &[Lease]) -> Vec<String> {
    leases.iter().map(|l| l.item.id.clone()).collect()
}

#[tokio::test]
async fn lease_many_leases_up_to_max_items_in_queue_order() {
    let spool = TempDir::new("spool");
    let (_server, trawl, ids) = queued(5, &spool).await;
    let leases = trawl.lease_many(3, 1_000).await.unwrap();
    assert_eq!(item_ids(&leases), ids[..3]);
}

#[tokio::test]
async fn lease_many_answers_what_is_left_when_fewer_than_max_are_queued() {
    let spool = TempDir::new("spool");
    let (_server, trawl, ids) = queued(5, &spool).await;
    trawl.lease_many(3, 1_000).await.unwrap();
    let rest = trawl.lease_many(10, 1_000).await.unwrap();
    assert_eq!(item_ids(&rest), ids[3..]);
}

#[tokio::test]
async fn lease_many_answers_empty_when_nothing_becomes_leasable_within_the_wait() {
    let spool = TempDir::new("spool");
    let (_server, trawl, _) = queued(0, &spool).await;
    assert_eq!(trawl.lease_many(8, 50).await.unwrap(), Vec::<Lease>::new());
}

#[tokio::test]
async fn lease_many_refuses_a_max_outside_the_contract_before_sending_anything() {
    let spool = TempDir::new("spool");
    let client = unreachable_trawl(&spool, quick_retry(1)).await;
    for max in [0, 257] {
        let err = client.lease_many(max, 0).await.unwrap_err();
        assert_eq!(err.code(), "E_INVALID_ARGUMENT", "max {max}");
    }
}

#[tokio::test]
async fn complete_many_answers_every_entry_in_order_and_leaves_no_spool_file() {
    let spool = TempDir::new("spool");
    let (server, trawl, ids) = queued(3, &spool).await;
    let leases = trawl.lease_many(3, 1_000).await.unwrap();
    let batch: Vec<Completion> = leases
        .iter()
        .map(|l| Completion::new(l, json!({"echo": l.item.payload}), vec![]))
        .collect();
    let acks = trawl.complete_many(&batch).await.unwrap();
    let answered: Vec<(Option<String>, String, bool)> = acks
        .into_iter()
        .map(|a| {
            let a = a.unwrap();
            (a.item_id, a.state, a.replayed)
        })
        .collect();
    let expected: Vec<(Option<String>, String, bool)> = ids
        .iter()
        .map(|id| (Some(id.clone()), "done".to_owned(), false))
        .collect();
    assert_eq!(answered, expected);
    assert_eq!(spool.names(), Vec::<String>::new());
    assert_eq!(
        server.item(&ids[1]).await["result"],
        json!({"echo": {"n": 1}})
    );
}

#[tokio::test]
async fn a_refused_entry_is_its_own_final_error_and_the_others_complete() {
    let spool = TempDir::new("spool");
    let (server, trawl, ids, leases) = two_leased(&spool).await;
    let batch = vec![
        Completion::new(&leases[0], json!({}), vec![]),
        Completion::new(
            &leases[1],
            json!({}),
            vec![NextStep::new("bellbuoy", json!({}))],
        ),
    ];
    let acks = trawl.complete_many(&batch).await.unwrap();
    assert_eq!(acks[0].as_ref().unwrap().state, "done");
    let Err(ClientError::Rejected { status, code, .. }) = &acks[1] else {
        panic!("expected Rejected, got {:?}", acks[1]);
    };
    assert_eq!((*status, code.as_deref()), (422, Some("E_ROUTE")));
    assert_eq!(spool.names(), Vec::<String>::new());
    assert_eq!(server.item(&ids[1]).await["state"], "leased");
}

#[tokio::test]
async fn a_batch_that_cannot_be_delivered_stays_spooled_as_single_completions() {
    let spool = TempDir::new("spool");
    let (server, _live, ids, leases) = two_leased(&spool).await;
    let down = unreachable_trawl(&spool, quick_retry(2)).await;
    let batch = completed_ok(&leases);
    let err = down.complete_many(&batch).await.unwrap_err();
    assert_eq!(err.code(), "E_UNDELIVERED");
    let mut files: Vec<String> = leases
        .iter()
        .map(|l| format!("{}.complete.json", l.lease_id))
        .collect();
    files.sort();
    assert_eq!(spool.names(), files);
    assert_eq!(server.item(&ids[0]).await["state"], "leased");
}

#[tokio::test]
async fn a_spooled_batch_entry_is_redelivered_alone_as_the_same_completion() {
    let spool = TempDir::new("spool");
    let (_server, live, ids, leases) = two_leased(&spool).await;
    let batch = completed_ok(&leases);
    let down = unreachable_trawl(&spool, quick_retry(1)).await;
    // The first entry reached the server once already; then the whole batch failed to
    // reach it and stayed spooled.
    assert!(live.complete_many(&batch[..1]).await.unwrap()[0].is_ok());
    down.complete_many(&batch).await.unwrap_err();
    let redelivered = live.redeliver_spool().await.unwrap();
    let mut replayed: Vec<(String, bool)> = redelivered
        .iter()
        .map(|r| {
            let ack = r.outcome.as_ref().unwrap();
            (ack.item_id.clone().unwrap(), ack.replayed)
        })
        .collect();
    replayed.sort();
    let mut expected = vec![(ids[0].clone(), true), (ids[1].clone(), false)];
    expected.sort();
    assert_eq!(replayed, expected);
    assert_eq!(spool.names(), Vec::<String>::new());
}

#[tokio::test]
async fn complete_many_refuses_an_empty_batch_before_sending_anything() {
    let spool = TempDir::new("spool");
    let (_server, trawl, _) = queued(0, &spool).await;
    let err = trawl.complete_many(&[]).await.unwrap_err();
    assert_eq!(err.code(), "E_INVALID_ARGUMENT");
}

#[tokio::test]
async fn complete_and_lease_answers_the_completion_and_the_next_lease() {
    let spool = TempDir::new("spool");
    let (server, ids, ack) = complete_and_lease_the_first_of(2, &spool).await;
    assert_eq!(
        (
            ack.state.as_str(),
            ack.next_lease.map(|l| l.item.id),
            spool.names()
        ),
        ("done", Some(ids[1].clone()), Vec::<String>::new())
    );
    assert_eq!(server.item(&ids[1]).await["state"], "leased");
}

#[tokio::test]
async fn complete_and_lease_answers_no_next_lease_when_nothing_is_queued() {
    let spool = TempDir::new("spool");
    let (_server, _, ack) = complete_and_lease_the_first_of(1, &spool).await;
    assert_eq!((ack.state.as_str(), ack.next_lease), ("done", None));
}

#[tokio::test]
async fn complete_many_refuses_a_lease_named_twice_before_writing_anything() {
    let spool = TempDir::new("spool");
    let (_server, trawl, _) = queued(1, &spool).await;
    let lease = trawl.lease(1_000).await.unwrap().unwrap();
    let twice = Completion::new(&lease, json!({}), vec![]);
    let err = trawl
        .complete_many(&[twice.clone(), twice])
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), spool.names()),
        ("E_INVALID_ARGUMENT", Vec::<String>::new())
    );
}

/// Completes `leases` in one batch through a proxy in front of `server`: the `traceparent`
/// header the batch carried.
async fn batch_traceparent(server: &TestApp, leases: &[Lease], spool: &TempDir) -> Option<String> {
    let proxy = CountingProxy::start(server.addr).await;
    let trawl = worker_at(&proxy.url(), "trawl", "trawl-1", spool);
    let acks = trawl.complete_many(&completed_ok(leases)).await.unwrap();
    assert!(acks.iter().all(Result::is_ok), "{acks:?}");
    let mut sent = proxy.traceparents("completions 200");
    assert_eq!(sent.len(), 1);
    sent.remove(0)
}

#[tokio::test]
async fn a_batch_of_leases_in_different_traces_sends_no_traceparent() {
    let spool = TempDir::new("spool");
    let (server, _, _, leases) = two_leased(&spool).await;
    let traces: Vec<_> = leases
        .iter()
        .map(|l| trace_and_span(l.traceparent().unwrap()).0)
        .collect();
    assert_ne!(traces[0], traces[1]);
    assert_eq!(batch_traceparent(&server, &leases, &spool).await, None);
}

#[tokio::test]
async fn a_batch_of_one_completion_sends_its_leases_traceparent() {
    let spool = TempDir::new("spool");
    let (server, _, _, leases) = two_leased(&spool).await;
    let sent = batch_traceparent(&server, &leases[..1], &spool).await;
    assert_eq!(sent.as_deref(), leases[0].traceparent());
    assert!(sent.is_some());
}

#[tokio::test]
async fn the_next_lease_of_a_completion_carries_its_items_traceparent() {
    let spool = TempDir::new("spool");
    let (_server, _, ack) = complete_and_lease_the_first_of(2, &spool).await;
    let next = ack.next_lease.expect("a next lease");
    assert_eq!(next.traceparent().map(str::len), Some(55));
}
