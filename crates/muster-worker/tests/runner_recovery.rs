//! The runner where stopping, delivering or a panic outside the worker function could lose an
//! item: against a real Muster server, in process and as a real worker process.

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_worker::runtime::RunnerBuilder;
use muster_worker::{Lease, Outcome, Runner};
use serde_json::json;
use support::{
    GENEROUS, Gate, Running, TempDir, TestApp, eventually, panics_logged, quick_retry, signal,
    token,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A `trawl` runner on `url` spooling to `spool`.
fn builder(url: &str, spool: &TempDir) -> RunnerBuilder {
    Runner::builder(url, &token("worker:trawl"), "trawl")
        .worker_id("trawl-recovery")
        .spool_dir(&spool.0)
        .wait_ms(200)
}

async fn state_of(app: &TestApp, id: &str) -> String {
    app.item(id).await["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A TCP proxy to `upstream` that holds every chunk of every answer back `delay`.
async fn slow_answers(upstream: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let mut chunk = [0u8; 16 * 1024];
                while let Ok(n @ 1..) = server_read.read(&mut chunk).await {
                    tokio::time::sleep(delay).await;
                    if client_write.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_item_granted_to_the_lease_request_in_flight_at_stop_is_worked_and_completed_once() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let proxy = slow_answers(app.addr, Duration::from_millis(800)).await;
    let runner = builder(&format!("http://{proxy}"), &spool)
        .wait_ms(10_000)
        .grace(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut running = Running::start(runner, |lease: Lease| async move {
        Outcome::done(json!({"echo": lease.item.payload}))
    });
    // The runner's long poll is waiting on the server when the item arrives.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let id = app.enqueue("trawl", "normal", json!({"n": 1})).await;
    eventually(GENEROUS, "granted to the long poll", || async {
        state_of(&app, &id).await == "leased"
    })
    .await;
    // The grant is committed; its answer is still on its way to the runner.
    let report = running.stop().await;

    assert_eq!(report.abandoned, Vec::<String>::new());
    assert_eq!(state_of(&app, &id).await, "done");
    assert_eq!(app.ledger_events(&id, "completed").await, 1);
    assert_eq!((running.snapshot().leased, running.snapshot().done), (1, 1));
}

#[tokio::test]
async fn a_panicking_image_digest_source_fails_the_item_retryably_instead_of_losing_it() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let runner = builder(&app.url(), &spool)
        .image_digest_from(|| panic!("no digest today"))
        .build()
        .unwrap();
    let mut running = Running::start(runner, |_lease: Lease| async {
        Outcome::needs_subtool("pdf/v9", json!({}))
    });
    eventually(GENEROUS, "the failure acknowledged", || async {
        running.snapshot().retried == 1
    })
    .await;
    running.stop().await;

    assert_eq!(state_of(&app, &id).await, "queued");
    assert_eq!(running.snapshot().panicked, 1);
    assert_eq!(panics_logged(&app, &id).await, 1);
    assert_eq!(spool.names(), vec![".lock".to_owned()]);
}

#[tokio::test]
async fn an_outcome_left_in_the_spool_is_redelivered_while_the_runner_runs() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let gate = Arc::new(Gate::closed(app.addr).await);
    gate.open();
    let runner = builder(&gate.url(), &spool)
        .retry(quick_retry(2))
        .build()
        .unwrap();
    let closing = gate.clone();
    let mut running = Running::start(runner, move |_lease: Lease| {
        let gate = closing.clone();
        async move {
            // The server is gone while the outcome is delivered.
            gate.close();
            Outcome::done(json!({}))
        }
    });
    eventually(GENEROUS, "the delivery given up", || async {
        running.snapshot().undelivered == 1
    })
    .await;
    assert_eq!(running.snapshot().spool_depth, 1);
    gate.open();
    eventually(GENEROUS, "redelivered without a restart", || async {
        running.snapshot().redelivered == 1
    })
    .await;
    running.stop().await;

    assert_eq!(state_of(&app, &id).await, "done");
    assert_eq!(app.ledger_events(&id, "completed").await, 1);
    assert_eq!(spool.names(), vec![".lock".to_owned()]);
}

#[tokio::test]
async fn a_second_sigterm_exits_at_once_without_waiting_for_the_grace() {
    use std::io::BufRead;
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster-echo-worker"))
        .env("MUSTER_URL", app.url())
        .env("MUSTER_TOKEN", token("worker:trawl"))
        .env("SPOOL_DIR", &spool.0)
        .env("ECHO_WORK_MS", "120000")
        .env("ECHO_GRACE_MS", "120000")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start muster-echo-worker");
    let stdout = child.stdout.take().unwrap();
    let working = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        let found = lines.any(|l| l.is_ok_and(|l| l.starts_with("working ")));
        // Keep draining so the child never blocks on a full pipe.
        for _ in lines {}
        found
    });
    eventually(GENEROUS, "working", || async {
        state_of(&app, &id).await == "leased"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&child, "TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = Instant::now();
    signal(&child, "TERM");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();

    assert!(
        second.elapsed() < Duration::from_secs(10),
        "{:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(working.await.unwrap());
    assert_eq!(state_of(&app, &id).await, "leased");
}

#[tokio::test]
async fn a_retry_answered_failed_on_the_last_attempt_counts_as_failed_not_retried() {
    let pipeline = TempDir::new("pipeline");
    let path = pipeline.0.join("pipeline.json");
    let retry = json!({"base_ms": 1, "factor": 1, "cap_ms": 1, "max_attempts": 1});
    std::fs::write(&path, json!({"retry": {"trawl": retry}}).to_string()).unwrap();
    let app = TestApp::spawn_with(move |s| s.pipeline = Some(path)).await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let runner = builder(&app.url(), &spool).build().unwrap();
    let mut running = Running::start(runner, |_lease: Lease| async {
        Outcome::retry("E_LATER", "try again")
    });
    eventually(GENEROUS, "the failure acknowledged", || async {
        let s = running.snapshot();
        s.retried + s.failed == 1
    })
    .await;
    running.stop().await;

    assert_eq!(state_of(&app, &id).await, "failed");
    let s = running.snapshot();
    assert_eq!((s.retried, s.failed), (0, 1));
}
