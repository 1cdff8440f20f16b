//! The runner takes each slot's next lease with its completion (`"lease_next": true`): one
//! round trip per item while work is queued, a plain lease call whenever it has nothing to
//! complete, and none after shutdown was asked. Every call is counted by a proxy in front of a
//! real Muster server.

mod support;

use std::sync::Arc;

use muster_worker::runtime::MetricsSnapshot;
use muster_worker::{Lease, Outcome, Runner, Worker};
use serde_json::json;
use support::{CountingProxy, GENEROUS, Running, TempDir, TestApp, eventually, token};
use tokio::sync::{Notify, mpsc};

/// `n` numbered trawl items queued on `app` and a runner of trawl (one item at a time) working
/// them with `worker` through a proxy that counts its calls.
struct Counted {
    proxy: CountingProxy,
    ids: Vec<String>,
    running: Running,
    _spool: TempDir,
}

async fn counted(app: &TestApp, n: usize, lease_next: bool, worker: impl Worker) -> Counted {
    let proxy = CountingProxy::start(app.addr).await;
    let spool = TempDir::new("spool");
    let ids = app.enqueue_numbered("trawl", n).await;
    let runner = Runner::builder(&proxy.url(), &token("worker:trawl"), "trawl")
        .worker_id("trawl-lease-next")
        .spool_dir(&spool.0)
        .wait_ms(200)
        .lease_next(lease_next)
        .build()
        .unwrap();
    Counted {
        proxy,
        ids,
        running: Running::start(runner, worker),
        _spool: spool,
    }
}

/// `n` queued items worked by a runner that completes every item, through a proxy that counts
/// its calls: every call answered 200 until all were done, and the runner's counters then.
async fn calls_to_complete(
    app: &TestApp,
    n: usize,
    lease_next: bool,
) -> (Vec<String>, MetricsSnapshot) {
    let Counted {
        proxy,
        mut running,
        _spool,
        ..
    } = counted(app, n, lease_next, |_lease: Lease| async {
        Outcome::done(json!({}))
    })
    .await;
    eventually(GENEROUS, "every item done", || async {
        running.snapshot().done == n as u64
    })
    .await;
    running.stop().await;
    (proxy.answered_200(), running.snapshot())
}

#[tokio::test]
async fn with_work_queued_each_item_costs_one_round_trip_its_completion_bringing_the_next_lease() {
    let app = TestApp::spawn().await;

    let (calls, s) = calls_to_complete(&app, 20, true).await;

    let mut expected = vec!["lease"];
    expected.extend(std::iter::repeat_n("complete+lease_next", 20));
    assert_eq!(calls, expected);
    assert_eq!((s.leased, s.leased_with_completion), (20, 19));
    assert_eq!(app.count("core.items WHERE state = 'done'").await, 20);
}

#[tokio::test]
async fn with_lease_next_off_each_item_costs_a_lease_call_and_a_completion() {
    let app = TestApp::spawn().await;

    let (calls, s) = calls_to_complete(&app, 5, false).await;

    assert_eq!(calls, ["lease", "complete"].repeat(5));
    assert_eq!((s.leased, s.leased_with_completion), (5, 0));
}

#[tokio::test]
async fn a_failure_and_a_completion_answered_without_a_next_lease_fall_back_to_a_lease_call() {
    let app = TestApp::spawn().await;
    let Counted {
        proxy,
        ids,
        mut running,
        _spool,
    } = counted(&app, 3, true, |lease: Lease| async move {
        if lease.item.payload["n"] == 1 {
            Outcome::fail("E_BAD", "not this one")
        } else {
            Outcome::done(json!({}))
        }
    })
    .await;
    eventually(GENEROUS, "two done, one failed", || async {
        let s = running.snapshot();
        (s.done, s.failed) == (2, 1)
    })
    .await;
    // The last completion found nothing to lease: the next call is a plain (long-poll) lease.
    eventually(
        GENEROUS,
        "a lease call after the last completion",
        || async { proxy.calls().len() >= 6 },
    )
    .await;
    running.stop().await;

    assert_eq!(
        proxy.calls()[..6],
        [
            "lease 200",
            "complete+lease_next 200",
            "fail 200",
            "lease 200",
            "complete+lease_next 200",
            "lease 204",
        ]
    );
    assert_eq!(running.snapshot().leased_with_completion, 1);
    assert_eq!(app.item(&ids[1]).await["state"], "failed");
    assert_eq!(app.item(&ids[2]).await["state"], "done");
}

#[tokio::test]
async fn an_item_finished_after_shutdown_was_asked_completes_without_taking_a_next_lease() {
    let app = TestApp::spawn().await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let gate = release.clone();
    let Counted {
        proxy,
        ids,
        mut running,
        _spool,
    } = counted(&app, 2, true, move |_lease: Lease| {
        let (started_tx, gate) = (started_tx.clone(), gate.clone());
        async move {
            started_tx.send(()).unwrap();
            gate.notified().await;
            Outcome::done(json!({}))
        }
    })
    .await;
    tokio::time::timeout(GENEROUS, started.recv())
        .await
        .expect("the first item started")
        .unwrap();
    running.shutdown();
    release.notify_one();
    let report = running.stopped().await;

    assert_eq!(report.abandoned, Vec::<String>::new());
    assert_eq!(proxy.calls(), ["lease 200", "complete 200"]);
    assert_eq!(app.item(&ids[0]).await["state"], "done");
    assert_eq!(app.item(&ids[1]).await["state"], "queued");
    let s = running.snapshot();
    assert_eq!((s.leased, s.leased_with_completion, s.done), (1, 0, 1));
    assert!(started.try_recv().is_err(), "a second item was started");
}
