//! The worker runtime (`Runner`) against a real Muster server: in process, and as a real worker
//! process (`muster-echo-worker`, the echo example) that is stopped with SIGTERM or SIGKILL.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_worker::runtime::SpoolLock;
use muster_worker::{Lease, NextStep, Outcome, RetryPolicy, Runner};
use serde_json::json;
use support::{
    CountingProxy, GENEROUS, Gate, Running, TempDir, TestApp, eventually, panics_logged, signal,
    token,
};

/// A runner of `trawl` on `url` spooling to `spool`.
fn runner(url: &str, spool: &TempDir, concurrency: usize) -> Runner {
    Runner::builder(url, &token("worker:trawl"), "trawl")
        .worker_id("trawl-runtime")
        .spool_dir(&spool.0)
        .concurrency(concurrency)
        .wait_ms(200)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_runner_works_up_to_its_concurrency_at_once_and_completes_every_item() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let ids = app.enqueue_numbered("trawl", 8).await;
    let runner = runner(&app.url(), &spool, 4);
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (n, m) = (now.clone(), most.clone());
    let mut running = Running::start(runner, move |lease: Lease| {
        let (n, m) = (n.clone(), m.clone());
        async move {
            m.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            n.fetch_sub(1, Ordering::SeqCst);
            Outcome::done_then(
                json!({"echo": lease.item.payload}),
                vec![NextStep::new("sextant", lease.item.payload)],
            )
        }
    });
    eventually(GENEROUS, "8 items done", || async {
        running.snapshot().done == 8
    })
    .await;
    let report = running.stop().await;

    assert_eq!(report.abandoned, Vec::<String>::new());
    assert_eq!(most.load(Ordering::SeqCst), 4);
    assert_eq!(app.items_in("trawl", "done").await, 8);
    assert_eq!(app.items_in("sextant", "queued").await, 8);
    for id in &ids {
        assert_eq!(
            app.item(id).await["result"]["echo"],
            app.item(id).await["payload"]
        );
    }
    let after = running.snapshot();
    assert_eq!(
        (after.leased, after.in_flight, after.spool_depth),
        (8, 0, 0)
    );
}

#[tokio::test]
async fn a_panicking_worker_function_fails_its_item_retryably_and_the_runner_works_on() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let bad = app.enqueue("trawl", "normal", json!({"panic": true})).await;
    let good = app.enqueue("trawl", "normal", json!({"n": 2})).await;
    let runner = runner(&app.url(), &spool, 1);
    let mut running = Running::start(runner, |lease: Lease| async move {
        assert!(lease.item.payload.get("panic").is_none(), "asked to panic");
        Outcome::done(json!({}))
    });
    eventually(GENEROUS, "one retried, one done", || async {
        let s = running.snapshot();
        (s.retried, s.done) == (1, 1)
    })
    .await;
    running.stop().await;

    assert_eq!(running.snapshot().panicked, 1);
    let bad_view = app.item(&bad).await;
    assert_eq!(bad_view["state"], "queued");
    assert!(bad_view["not_before"].is_string());
    assert_eq!(panics_logged(&app, &bad).await, 1);
    assert_eq!(app.item(&good).await["state"], "done");
}

#[tokio::test]
async fn a_lost_lease_cancels_the_work_and_delivers_nothing() {
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 600).await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let gate = Gate::closed(app.addr).await;
    gate.open();
    let runner = runner(&gate.url(), &spool, 1);
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let mut running = Running::start(runner, move |_lease: Lease| {
        let f = f.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(8)).await;
            f.fetch_add(1, Ordering::SeqCst);
            Outcome::done(json!({}))
        }
    });
    eventually(GENEROUS, "leased", || async {
        running.snapshot().leased == 1
    })
    .await;
    // The runner's heartbeats cannot get through; once the lease has expired another worker
    // supersedes it, and the runner's next heartbeat is answered E_LEASE_LOST.
    gate.close();
    let thief = app.lease_eventually("trawl", "thief").await;
    gate.open();
    eventually(GENEROUS, "the loss seen", || async {
        running.snapshot().lost_leases == 1
    })
    .await;
    running.stop().await;

    assert_eq!(finished.load(Ordering::SeqCst), 0);
    assert_eq!(running.snapshot().done, 0);
    assert_eq!(thief["item"]["id"], id.as_str());
    assert_eq!(app.item(&id).await["state"], "leased");
    assert_eq!(spool.names(), vec![".lock".to_owned()]);
}

#[tokio::test]
async fn a_second_runner_on_a_locked_spool_directory_is_refused_before_it_starts() {
    let spool = TempDir::new("spool");
    let _first = runner("http://127.0.0.1:9", &spool, 1);
    let second = Runner::builder("http://127.0.0.1:9", &token("worker:trawl"), "trawl")
        .spool_dir(&spool.0)
        .build()
        .err()
        .expect("refused");
    assert_eq!(second.code(), "E_SPOOL_LOCKED");
}

#[tokio::test]
async fn a_lease_refused_with_retry_after_is_not_asked_again_sooner_and_work_resumes_when_the_server_is_back()
 {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let gate = Gate::closed(app.addr).await;
    let runner = Runner::builder(&gate.url(), &token("worker:trawl"), "trawl")
        .spool_dir(&spool.0)
        .wait_ms(200)
        .retry(RetryPolicy {
            base: Duration::from_millis(10),
            factor: 2,
            cap: Duration::from_secs(5),
            max_attempts: None,
        })
        .build()
        .unwrap();
    let mut running = Running::start(runner, |_lease: Lease| async { Outcome::done(json!({})) });
    eventually(GENEROUS, "three refusals", || async {
        gate.refused().len() >= 3
    })
    .await;
    gate.open();
    eventually(GENEROUS, "done once the server is back", || async {
        running.snapshot().done == 1
    })
    .await;
    running.stop().await;

    let refused = gate.refused();
    for pair in refused.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(990),
            "asked again after {gap:?}"
        );
    }
    assert_eq!(app.item(&id).await["state"], "done");
}

#[tokio::test]
async fn a_runner_fails_over_to_the_next_replica_and_its_hook_sees_every_answer() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let dead = format!("http://{}", support::dead_addr().await);
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let runner = Runner::builder(&dead, &token("worker:trawl"), "trawl")
        .spool_dir(&spool.0)
        .wait_ms(200)
        .failover(vec![dead.clone(), app.url()])
        .answer_hook(Arc::new(move |op, answer| {
            let status = match answer {
                Ok((status, _)) => status.to_string(),
                Err(e) => e.code().to_owned(),
            };
            log.lock().unwrap().push(format!("{op} {status}"));
        }))
        .build()
        .unwrap();
    let mut running = Running::start(runner, |_lease: Lease| async { Outcome::done(json!({})) });
    eventually(GENEROUS, "done on the live replica", || async {
        running.snapshot().done == 1
    })
    .await;
    running.stop().await;

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0], "lease E_TRANSPORT");
    assert_eq!(seen[1], "lease 200");
    assert_eq!(seen[2], "complete 200");
    assert_eq!(app.item(&id).await["state"], "done");
}

/// The echo example as a real process on `url`, spooling to `spool`.
fn echo_worker(url: &str, spool: &TempDir, envs: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_muster-echo-worker"))
        .env("MUSTER_URL", url)
        .env("MUSTER_TOKEN", token("worker:trawl"))
        .env("SPOOL_DIR", &spool.0)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start muster-echo-worker")
}

/// Every line the child has written to stdout so far, read by a thread until it ends.
#[derive(Clone)]
struct Lines(Arc<std::sync::Mutex<Vec<String>>>);

impl Lines {
    fn of(child: &mut Child) -> Lines {
        use std::io::BufRead;
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Lines(Arc::default());
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.0.lock().unwrap().push(line);
            }
        });
        lines
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Waits until `n` lines start with `prefix`.
    async fn wait_for(&self, prefix: &str, n: usize) {
        eventually(GENEROUS, prefix, || async {
            self.all().iter().filter(|l| l.starts_with(prefix)).count() >= n
        })
        .await;
    }
}

/// Reads the child's stdout (all of it, in the background) until `n` lines start with
/// `prefix`.
async fn lines_until(child: &mut Child, prefix: &str, n: usize) -> Lines {
    let lines = Lines::of(child);
    lines.wait_for(prefix, n).await;
    lines
}

/// Drains the child's stdout in the background.
fn drain_stdout(child: &mut Child) {
    if let Some(mut stdout) = child.stdout.take() {
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    }
}

async fn exit_of(mut child: Child) -> std::process::Output {
    let waited = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
        }
        std::process::Output {
            status,
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
        }
    });
    tokio::time::timeout(GENEROUS, waited)
        .await
        .expect("the worker exits in time")
        .unwrap()
}

#[tokio::test]
async fn sigterm_with_items_in_flight_lets_them_finish_and_deliver_each_once() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let ids = app.enqueue_numbered("trawl", 4).await;
    let mut child = echo_worker(
        &app.url(),
        &spool,
        &[("ECHO_CONCURRENCY", "4"), ("ECHO_WORK_MS", "1500")],
    );
    lines_until(&mut child, "working ", 4).await;
    signal(&child, "TERM");
    let out = exit_of(child).await;

    assert!(out.status.success(), "{out:?}");
    for id in &ids {
        assert_eq!(app.item(id).await["state"], "done", "{id}");
        assert_eq!(app.ledger_events(id, "completed").await, 1, "{id}");
    }
    assert_eq!(app.items_in("sextant", "queued").await, 4);
    assert_eq!(spool.names(), vec![".lock".to_owned()]);
}

#[tokio::test]
async fn items_still_running_after_the_grace_are_left_to_expire_and_said_so() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let mut child = echo_worker(
        &app.url(),
        &spool,
        &[("ECHO_WORK_MS", "60000"), ("ECHO_GRACE_MS", "200")],
    );
    let lines = lines_until(&mut child, "working ", 1).await;
    signal(&child, "TERM");
    let out = exit_of(child).await;

    assert!(out.status.success(), "{out:?}");
    lines.wait_for("stopped ", 1).await;
    assert!(
        lines.all().contains(&format!("abandoned {id}")),
        "{:?}",
        lines.all()
    );
    assert_eq!(app.item(&id).await["state"], "leased");
    assert_eq!(spool.names(), vec![".lock".to_owned()]);
}

#[tokio::test]
async fn a_worker_killed_mid_item_loses_nothing_the_item_is_leased_again_after_expiry() {
    let app = TestApp::spawn_with(|s| s.lease_ttl_ms = 1_000).await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let mut first = echo_worker(&app.url(), &spool, &[("ECHO_WORK_MS", "60000")]);
    lines_until(&mut first, "working ", 1).await;
    signal(&first, "KILL");
    exit_of(first).await;

    restarted_until_done(&app, &spool, &id, "done by the second worker").await;

    assert_eq!(app.item(&id).await["attempt"], 2);
    assert_eq!(app.ledger_events(&id, "completed").await, 1);
}

#[tokio::test]
async fn a_worker_killed_with_a_spooled_outcome_delivers_it_once_on_restart() {
    let app = TestApp::spawn().await;
    let spool = TempDir::new("spool");
    let id = app.enqueue("trawl", "normal", json!({})).await;
    // The first worker leases through an open gate; the gate closes before it delivers.
    let gate = Gate::closed(app.addr).await;
    gate.open();
    let mut first = echo_worker(&gate.url(), &spool, &[("ECHO_WORK_MS", "500")]);
    lines_until(&mut first, "working ", 1).await;
    gate.close();
    eventually(GENEROUS, "the outcome spooled and refused", || async {
        !gate.refused().is_empty()
    })
    .await;
    signal(&first, "KILL");
    exit_of(first).await;
    assert_eq!(
        spool.names(),
        vec![
            ".lock".to_owned(),
            format!("{}.complete.json", lease_of(&spool))
        ]
    );

    restarted_until_done(&app, &spool, &id, "redelivered").await;

    assert_eq!(app.item(&id).await["attempt"], 1);
    assert_eq!(app.ledger_events(&id, "completed").await, 1);
    assert_eq!(spool.names(), vec![".lock".to_owned()]);
}

/// A fresh echo worker on `spool` until the item `id` is done (`what` names the wait), then
/// stopped with SIGTERM.
async fn restarted_until_done(app: &TestApp, spool: &TempDir, id: &str, what: &str) {
    let mut worker = echo_worker(&app.url(), spool, &[]);
    drain_stdout(&mut worker);
    eventually(GENEROUS, what, || async {
        app.item(id).await["state"] == "done"
    })
    .await;
    signal(&worker, "TERM");
    exit_of(worker).await;
}

/// The lease id of the one spooled outcome.
fn lease_of(spool: &TempDir) -> String {
    let name = spool
        .names()
        .into_iter()
        .find(|n| n.ends_with(".complete.json"))
        .expect("a spooled completion");
    name.trim_end_matches(".complete.json").to_owned()
}

#[tokio::test]
async fn a_second_worker_process_on_the_same_spool_exits_non_zero_without_contacting_the_server() {
    let spool = TempDir::new("spool");
    let _held = SpoolLock::acquire(&spool.0).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let started = Instant::now();
    let child = echo_worker(&url, &spool, &[]);
    let out = exit_of(child).await;

    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() < Duration::from_secs(5));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is locked by another worker process") && stderr.contains("E_SPOOL_LOCKED"),
        "{stderr}"
    );
    let contacted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
    assert!(contacted.is_err(), "the server was contacted");
}

#[tokio::test]
async fn without_a_tracer_provider_the_completion_sends_the_leases_traceparent_unchanged() {
    let app = TestApp::spawn().await;
    let proxy = CountingProxy::start(app.addr).await;
    let spool = TempDir::new("spool");
    app.enqueue("trawl", "normal", json!({})).await;
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let s = seen.clone();
    let mut running = Running::start(runner(&proxy.url(), &spool, 1), move |lease: Lease| {
        *s.lock().unwrap() = lease.traceparent().map(str::to_owned);
        async { Outcome::done(json!({})) }
    });
    eventually(GENEROUS, "done", || async { running.snapshot().done == 1 }).await;
    running.stop().await;

    let traceparent = seen.lock().unwrap().clone();
    assert!(traceparent.is_some());
    assert_eq!(
        proxy.traceparents("complete+lease_next 200"),
        vec![traceparent]
    );
}
