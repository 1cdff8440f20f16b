//! Test fixtures: a real `muster` server on port 0 against a fresh database, a TCP proxy that
//! loses answers, and a fake server that answers nonsense.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use muster_worker::{RetryPolicy, WorkerClient};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const PRINCIPALS: [&str; 3] = ["operator", "worker:trawl", "worker:sextant"];

pub fn token(principal: &str) -> String {
    format!("test-token-{principal}")
}

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    /// The file names in the directory, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fast, bounded retry policy for tests.
pub fn quick_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(10),
        factor: 2,
        cap: Duration::from_millis(50),
        max_attempts: Some(max_attempts),
    }
}

/// A real Muster server.
pub struct Server {
    pub addr: SocketAddr,
    pub db: muster_testkit::TestDb,
    http: Client<HttpConnector, Full<Bytes>>,
    shutdown: Option<oneshot::Sender<()>>,
    _dir: TempDir,
}

impl Server {
    pub async fn start() -> Server {
        Self::start_with_ttl_ms(30_000).await
    }

    pub async fn start_with_ttl_ms(lease_ttl_ms: u64) -> Server {
        let db = muster_testkit::fresh_db().await;
        let dir = TempDir::new("muster-worker-test");
        let lines: Vec<String> = PRINCIPALS
            .iter()
            .map(|p| {
                format!(
                    r#"{{"blake3": "{}", "principal": "{p}"}}"#,
                    blake3::hash(token(p).as_bytes()).to_hex()
                )
            })
            .collect();
        let tokens = dir.0.join("tokens.json");
        std::fs::write(&tokens, format!(r#"{{"tokens": [{}]}}"#, lines.join(","))).unwrap();
        let mut settings = muster::Settings::new(db.url.clone());
        settings.tokens = Some(tokens);
        settings.lease_ttl_ms = lease_ttl_ms;
        let app = muster::build(&settings).expect("build the app");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(muster::serve(app, listener, async move {
            let _ = rx.await;
        }));
        Server {
            addr,
            db,
            http: Client::builder(TokioExecutor::new()).build_http(),
            shutdown: Some(tx),
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A worker client of `kind` on this server.
    pub fn worker(&self, kind: &str, worker_id: &str, spool: &TempDir) -> WorkerClient {
        WorkerClient::new(
            &self.url(),
            &token(&format!("worker:{kind}")),
            kind,
            worker_id,
            &spool.0,
        )
        .unwrap()
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url()))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {}", token("operator")))
            .body(Full::new(Bytes::from(
                body.map(|b| b.to_string()).unwrap_or_default(),
            )))
            .unwrap();
        let res = self.http.request(req).await.unwrap();
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Enqueues an item as the operator; its id.
    pub async fn enqueue(&self, kind: &str, payload: Value) -> String {
        let (status, body) = self
            .call(
                Method::POST,
                "/v1/items",
                Some(json!({"kind": kind, "priority": "normal", "payload": payload})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["item_id"].as_str().unwrap().to_owned()
    }

    /// `GET /v1/items/{id}` as the operator.
    pub async fn item(&self, id: &str) -> Value {
        let (status, body) = self
            .call(Method::GET, &format!("/v1/items/{id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// An address with nothing listening (a server that is down).
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
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
