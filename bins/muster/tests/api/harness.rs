//! `TestApp`: a real `muster` server on port 0 against a fresh, migrated database, and a small
//! HTTP client that speaks to it over a real socket.

use std::net::SocketAddr;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster::Settings;
use muster_testkit::TestDb;
use serde_json::Value;
use tokio::sync::oneshot;

pub const PRINCIPALS: [&str; 14] = [
    "operator",
    "conn",
    "shipkeeper",
    "worker:trawl",
    "worker:sextant",
    "worker:assay",
    "worker:countersign",
    "worker:waybill",
    "worker:moldloft",
    "worker:shakedown",
    "worker:chartroom",
    "worker:tidegauge",
    "worker:bellbuoy",
    "worker:trawl",
];

/// Server logs are shown only when `TEST_LOG` is set (e.g. `TEST_LOG=debug`).
fn init_test_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(level) = std::env::var("TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(level))
                .with_test_writer()
                .try_init();
        }
    });
}

/// Settings with a pipeline file of fast retries for trawl: 1 ms backoff, `max_attempts`.
pub fn fast_retries(max_attempts: u32) -> impl FnOnce(&mut Settings) {
    move |s| {
        let path =
            std::env::temp_dir().join(format!("muster-pipeline-{}.json", uuid::Uuid::now_v7()));
        let text = format!(
            r#"{{"retry": {{"trawl": {{"base_ms": 1, "factor": 1, "cap_ms": 1, "max_attempts": {max_attempts}}}}}}}"#
        );
        std::fs::write(&path, text).unwrap();
        s.pipeline = Some(path);
    }
}

/// Writes a token file for every test principal into `dir` and answers its path.
pub fn write_tokens(dir: &std::path::Path) -> std::path::PathBuf {
    let lines: Vec<String> = PRINCIPALS
        .iter()
        .map(|p| {
            format!(
                r#"{{"blake3": "{}", "principal": "{p}"}}"#,
                blake3::hash(token(p).as_bytes()).to_hex()
            )
        })
        .collect();
    let tokens = dir.join("tokens.json");
    std::fs::write(&tokens, format!(r#"{{"tokens": [{}]}}"#, lines.join(","))).unwrap();
    tokens
}

/// The plain token of a principal in tests.
pub fn token(principal: &str) -> String {
    format!("test-token-{principal}")
}

#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub db: TestDb,
    client: Client<HttpConnector, Full<Bytes>>,
    shutdown: std::sync::Mutex<Option<oneshot::Sender<()>>>,
    server: std::sync::Mutex<Option<tokio::task::JoinHandle<anyhow::Result<()>>>>,
    _dir: TempDir,
}

/// A child process killed (SIGKILL) when dropped, so a failing test leaks no server.
pub struct KillOnDrop(pub Option<std::process::Child>);

impl KillOnDrop {
    /// Takes the child out (to signal and wait for it); it is then no longer killed on drop.
    pub fn take(&mut self) -> std::process::Child {
        self.0.take().expect("child already taken")
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().map(|c| c.id()).unwrap_or(0)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A temporary directory removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let db = muster_testkit::fresh_db().await;
        Self::spawn_on(db, adjust).await
    }

    /// A server on an existing database (a second replica, or a database of a given cluster).
    pub async fn spawn_on(db: TestDb, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        init_test_log();
        let dir =
            TempDir(std::env::temp_dir().join(format!("muster-test-{}", uuid::Uuid::now_v7())));
        std::fs::create_dir_all(&dir.0).unwrap();
        let tokens = write_tokens(&dir.0);
        let mut settings = Settings::new(db.url.clone());
        settings.tokens = Some(tokens);
        adjust(&mut settings);
        let app = muster::build(&settings).expect("build the app");
        if let Some(p) = settings.pipeline.as_ref().filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("muster-pipeline-"))
        }) {
            // Read at build time; not needed afterwards.
            let _ = std::fs::remove_file(p);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(muster::serve(app, listener, async move {
            let _ = rx.await;
        }));
        TestApp {
            addr,
            db,
            client: Client::builder(TokioExecutor::new()).build_http(),
            shutdown: std::sync::Mutex::new(Some(tx)),
            server: std::sync::Mutex::new(Some(server)),
            _dir: dir,
        }
    }

    /// A client for a server running elsewhere (a real `muster` process) on `db`.
    pub async fn attach(db: TestDb, addr: SocketAddr) -> TestApp {
        let app = TestApp {
            addr,
            db,
            client: Client::builder(TokioExecutor::new()).build_http(),
            shutdown: std::sync::Mutex::new(None),
            server: std::sync::Mutex::new(None),
            _dir: TempDir(
                std::env::temp_dir().join(format!("muster-attach-{}", uuid::Uuid::now_v7())),
            ),
        };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return app;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("no server answered at {addr}");
    }

    /// Sends a request with the token of `principal` (if any) and a raw body.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        principal: Option<&str>,
        body: Vec<u8>,
    ) -> Resp {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json");
        if let Some(p) = principal {
            req = req.header("authorization", format!("Bearer {}", token(p)));
        }
        self.send(req, body).await
    }

    /// Sends a prepared request with a raw body.
    pub async fn send(&self, req: hyper::http::request::Builder, body: Vec<u8>) -> Resp {
        let res = self
            .client
            .request(req.body(Full::new(Bytes::from(body))).unwrap())
            .await
            .expect("request");
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    pub async fn post(&self, path: &str, principal: &str, body: Value) -> Resp {
        self.raw(
            Method::POST,
            path,
            Some(principal),
            body.to_string().into_bytes(),
        )
        .await
    }

    pub async fn get(&self, path: &str, principal: &str) -> Resp {
        self.raw(Method::GET, path, Some(principal), Vec::new())
            .await
    }

    /// Enqueues an item as the operator and answers its id.
    pub async fn enqueue(&self, kind: &str, priority: &str, payload: Value) -> String {
        let r = self
            .post(
                "/v1/items",
                "operator",
                serde_json::json!({"kind": kind, "priority": priority, "payload": payload}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["item_id"].as_str().unwrap().to_owned()
    }

    /// Leases one item of `kind`, polling until one is leasable (e.g. after a backoff).
    pub async fn lease_eventually(&self, kind: &str, worker_id: &str) -> Value {
        for _ in 0..2000 {
            if let Some(l) = self.lease(kind, worker_id).await {
                return l;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("no {kind} item became leasable");
    }

    /// Reports a failure of the lease `lease` held by a worker of `kind`.
    pub async fn fail(&self, lease: &Value, kind: &str, retryable: bool) -> Resp {
        let lid = lease["lease_id"].as_str().unwrap();
        self.post(
            &format!("/v1/leases/{lid}/fail"),
            &format!("worker:{kind}"),
            serde_json::json!({"error": {"code": "E_TEST", "message": "failed on purpose"}, "retryable": retryable}),
        )
        .await
    }

    /// Leases one item of `kind` without waiting; `None` on 204.
    pub async fn lease(&self, kind: &str, worker_id: &str) -> Option<Value> {
        let r = self
            .post(
                "/v1/leases",
                &format!("worker:{kind}"),
                serde_json::json!({"worker_id": worker_id, "wait_ms": 0}),
            )
            .await;
        match r.status {
            StatusCode::OK => Some(r.body),
            StatusCode::NO_CONTENT => None,
            other => panic!("lease answered {other}: {:?}", r.body),
        }
    }

    /// A single value from the test's database.
    /// The `/metrics` exposition text (no token needed).
    pub async fn metrics(&self) -> String {
        let r = self.raw(Method::GET, "/metrics", None, vec![]).await;
        assert_eq!(r.status.as_u16(), 200);
        r.body.as_str().expect("metrics are text").to_owned()
    }

    /// Makes PostgreSQL refuse (with a non-transient error) any item update whose result
    /// holds the key `poison`: a body the checks before the database let through but the
    /// database refuses.
    pub async fn refuse_poisoned_results(&self) {
        self.db
            .client()
            .await
            .batch_execute(
                "CREATE FUNCTION core.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS
                   $$ BEGIN RAISE EXCEPTION 'poisoned result refused'; END $$;
                 CREATE TRIGGER refuse_poison BEFORE UPDATE ON core.items
                   FOR EACH ROW WHEN (NEW.result ? 'poison') EXECUTE FUNCTION core.refuse_poison();",
            )
            .await
            .unwrap();
    }

    pub async fn scalar_i64(&self, sql: &str) -> i64 {
        self.db
            .client()
            .await
            .query_one(sql, &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(&self) {
        if let Some(tx) = self.shutdown.lock().unwrap().take() {
            let _ = tx.send(());
        }
        let server = self.server.lock().unwrap().take();
        if let Some(h) = server {
            h.await.unwrap().unwrap();
        }
    }

    /// Verifies every ledger chain of the test's database.
    pub async fn verify_ledger(&self) -> muster_pg::LedgerReport {
        muster_pg::verify_ledger(&self.db.pool())
            .await
            .expect("every ledger chain verifies")
    }
}

/// One Server-Sent Event as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub event: String,
    pub data: Value,
}

/// A live `GET /v1/events` response read frame by frame over the socket.
pub struct SseStream {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: hyper::body::Incoming,
    buf: String,
    pub retry_ms: Option<u64>,
    /// Everything received, for checks over the raw text.
    pub raw: String,
}

impl SseStream {
    /// The next event, or `None` when the stream ended or nothing came within `wait`.
    pub async fn next_within(&mut self, wait: std::time::Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = SseEvent {
                    id: None,
                    event: String::new(),
                    data: Value::Null,
                };
                let mut is_event = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("retry: ") {
                        self.retry_ms = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        ev.id = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        ev.event = v.to_owned();
                        is_event = true;
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        ev.data = serde_json::from_str(v).expect("data is JSON");
                    }
                }
                if is_event {
                    return Some(ev);
                }
                continue;
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??
                .ok()?;
            if let Ok(data) = frame.into_data() {
                let text = String::from_utf8(data.to_vec()).expect("utf-8");
                self.raw.push_str(&text);
                self.buf.push_str(&text);
            }
        }
    }

    /// The next event named `name`, skipping others (heartbeats, queues, …).
    pub async fn next_named(&mut self, name: &str, wait: std::time::Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.next_within(left).await?;
            if e.event == name {
                return Some(e);
            }
        }
    }
}

impl TestApp {
    /// Opens the live feed as `principal`, resuming after `last_event_id` if given.
    pub async fn events(&self, principal: &str, last_event_id: Option<&str>) -> SseStream {
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(format!("http://{}/v1/events", self.addr))
            .header("authorization", format!("Bearer {}", token(principal)));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let res = self
            .client
            .request(req.body(Full::new(Bytes::new())).unwrap())
            .await
            .expect("request");
        SseStream {
            status: res.status(),
            headers: res.headers().clone(),
            body: res.into_body(),
            buf: String::new(),
            retry_ms: None,
            raw: String::new(),
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.get_mut().unwrap().take() {
            let _ = tx.send(());
        }
    }
}
