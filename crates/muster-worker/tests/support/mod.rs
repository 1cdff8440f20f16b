//! Test fixtures on top of `muster_testkit::TestApp` (a real `muster` server on port 0 against a
//! fresh database): worker clients on it or on a server that is down, a TCP proxy that loses
//! answers, an HTTP proxy that records every call, a fake server that answers nonsense, and
//! what the runtime tests ask of the ledger and of worker processes.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use muster_worker::runtime::{Metrics, MetricsSnapshot, PANIC_CODE, RunReport};
use muster_worker::{
    Lease, RetryPolicy, Runner, RunnerError, ShutdownHandle, Worker, WorkerClient,
};
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

mod counting;
mod gate;

#[allow(unused_imports)]
pub use counting::CountingProxy;
#[allow(unused_imports)]
pub use gate::Gate;
#[allow(unused_imports)]
pub use muster_testkit::eventually;
pub use muster_testkit::{TempDir, TestApp, dead_addr, token};

/// How long a test waits for what a worker or a worker process should do soon.
pub const GENEROUS: Duration = Duration::from_secs(30);

/// A fast, bounded retry policy for tests.
pub fn quick_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(10),
        factor: 2,
        cap: Duration::from_millis(50),
        max_attempts: Some(max_attempts),
    }
}

/// A worker client on the test server.
pub trait Workers {
    /// A worker client of `kind` on this server, spooling to `spool`.
    fn worker(&self, kind: &str, worker_id: &str, spool: &TempDir) -> WorkerClient;
}

impl Workers for TestApp {
    fn worker(&self, kind: &str, worker_id: &str, spool: &TempDir) -> WorkerClient {
        worker_at(&self.url(), kind, worker_id, spool)
    }
}

/// A worker client of `kind` sending to `url` (the test server, or a proxy in front of it),
/// spooling to `spool`.
pub fn worker_at(url: &str, kind: &str, worker_id: &str, spool: &TempDir) -> WorkerClient {
    WorkerClient::new(
        url,
        &token(&format!("worker:{kind}")),
        kind,
        worker_id,
        &spool.0,
    )
    .unwrap()
}

/// The trace id and the span id of a `traceparent` (`00-<trace>-<span>-<flags>`).
pub fn trace_and_span(traceparent: &str) -> (&str, &str) {
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    (fields[1], fields[2])
}

/// A server with one queued trawl item, `{"n": 1}`, leased by `trawl-1` spooling to `spool`.
pub struct OneLeased {
    pub server: TestApp,
    pub spool: TempDir,
    pub worker: WorkerClient,
    pub item_id: String,
    pub lease: Lease,
}

/// One `trawl` item leased by the worker `trawl-1` on a server with the default settings.
pub async fn one_leased() -> OneLeased {
    one_leased_on(TestApp::spawn().await).await
}

/// One `trawl` item leased by the worker `trawl-1` on `server`.
pub async fn one_leased_on(server: TestApp) -> OneLeased {
    let spool = TempDir::new("spool");
    let worker = server.worker("trawl", "trawl-1", &spool);
    let item_id = server.enqueue("trawl", "normal", json!({"n": 1})).await;
    let lease = worker.lease(1_000).await.unwrap().expect("a lease");
    OneLeased {
        server,
        spool,
        worker,
        item_id,
        lease,
    }
}

/// A `trawl-1` worker of kind `trawl` whose Muster is down, spooling to `spool`.
pub async fn unreachable_trawl(spool: &TempDir, retry: RetryPolicy) -> WorkerClient {
    WorkerClient::new(
        &format!("http://{}", dead_addr().await),
        &token("worker:trawl"),
        "trawl",
        "trawl-1",
        &spool.0,
    )
    .unwrap()
    .with_retry(retry)
}

/// How many ledger rows of the item record a panic of its handler ([`PANIC_CODE`]).
pub async fn panics_logged(app: &TestApp, item_id: &str) -> i64 {
    app.count(&format!(
        "core.ledger WHERE subject_id = '{item_id}' AND data LIKE '%{PANIC_CODE}%'"
    ))
    .await
}

/// Sends the signal `name` (`TERM`, `KILL`) to `child`.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A TCP proxy to `upstream` that forwards the first `lose` requests but closes the client's
/// connection as soon as the answer starts (a lost acknowledgement); later connections pass.
pub struct LossyProxy {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
}

impl LossyProxy {
    pub async fn start(upstream: SocketAddr, lose: usize) -> LossyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        let to_lose = Arc::new(AtomicUsize::new(lose));
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let lose_this = to_lose
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    if lose_this {
                        let (mut client_read, _client_write) = client.split();
                        let (mut server_read, mut server_write) = server.split();
                        let mut first = [0u8; 1];
                        tokio::select! {
                            _ = tokio::io::copy(&mut client_read, &mut server_write) => {}
                            _ = server_read.read(&mut first) => {}
                        }
                        // Both sockets close here: the answer never reaches the client.
                    } else {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        LossyProxy { addr, connections }
    }
}

/// A fake server answering `(status, body)` from `route(path)`; counts requests per path.
pub struct FakeServer {
    pub addr: SocketAddr,
    pub hits: Arc<Mutex<HashMap<String, u32>>>,
}

impl FakeServer {
    pub async fn start(route: fn(&str) -> (u16, &'static [u8])) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let path = req.uri().path().to_owned();
                            *counted.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                            let (status, body) = route(&path);
                            async move {
                                let _ = req.into_body().collect().await;
                                Ok::<_, std::convert::Infallible>(
                                    Response::builder()
                                        .status(status)
                                        .body(Full::new(Bytes::from_static(body)))
                                        .unwrap(),
                                )
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeServer { addr, hits }
    }

    pub fn hits(&self, path: &str) -> u32 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// A runner working in a task of its own until the test stops it.
pub struct Running {
    metrics: Metrics,
    stop: ShutdownHandle,
    run: JoinHandle<Result<RunReport, RunnerError>>,
}

impl Running {
    /// Starts `runner` on `worker`.
    pub fn start(runner: Runner, worker: impl Worker) -> Running {
        Running {
            metrics: runner.metrics(),
            stop: runner.shutdown_handle(),
            run: tokio::spawn(runner.run(worker)),
        }
    }

    /// The runner's counters now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Asks the runner to stop, without waiting for it.
    pub fn shutdown(&self) {
        self.stop.shutdown();
    }

    /// Waits for the runner to stop: its report. Its counters stay readable.
    pub async fn stopped(&mut self) -> RunReport {
        (&mut self.run)
            .await
            .expect("the runner did not panic")
            .expect("the runner ran")
    }

    /// Stops the runner gracefully: its report. Its counters stay readable.
    pub async fn stop(&mut self) -> RunReport {
        self.shutdown();
        self.stopped().await
    }
}
