//! `TestApp`: a real `muster` server in-process on port 0 against a fresh, migrated database,
//! with a token for every principal. Its HTTP client is in `client.rs`, the live feed's reader
//! in `sse.rs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster::Settings;
use muster_domain::{Kind, Principal};
use serde_json::json;
use tokio::sync::oneshot;

use crate::{TempDir, TestDb};

/// Every principal a token can name: the services and a worker of every kind
/// (`muster_domain::Kind::ALL`), in their wire spelling.
pub fn principals() -> Vec<String> {
    [Principal::Operator, Principal::Conn, Principal::Shipkeeper]
        .into_iter()
        .chain(Kind::ALL.into_iter().map(Principal::Worker))
        .map(|p| p.to_string())
        .collect()
}

/// The plain token of a principal in tests.
pub fn token(principal: &str) -> String {
    format!("test-token-{principal}")
}

/// Writes a token file (blake3 hashes) for every principal into `dir` and answers its path.
pub fn write_tokens(dir: &Path) -> PathBuf {
    let entries: Vec<_> = principals()
        .iter()
        .map(|p| json!({"blake3": blake3::hash(token(p).as_bytes()).to_hex().as_str(), "principal": p}))
        .collect();
    let tokens = dir.join("tokens.json");
    std::fs::write(&tokens, json!({ "tokens": entries }).to_string()).expect("write the tokens");
    tokens
}

/// Settings with a pipeline file whose retry policy for each of `kinds` is the given backoff.
pub fn retry_pipeline(
    kinds: &[Kind],
    base_ms: u64,
    factor: u32,
    cap_ms: u64,
    max_attempts: u32,
) -> impl FnOnce(&mut Settings) + use<> {
    let retry: serde_json::Map<String, serde_json::Value> = kinds
        .iter()
        .map(|k| {
            let policy = json!({"base_ms": base_ms, "factor": factor, "cap_ms": cap_ms, "max_attempts": max_attempts});
            (k.to_string(), policy)
        })
        .collect();
    move |s| {
        let path =
            std::env::temp_dir().join(format!("{PIPELINE_PREFIX}{}.json", uuid::Uuid::now_v7()));
        std::fs::write(&path, json!({ "retry": retry }).to_string()).expect("write the pipeline");
        s.pipeline = Some(path);
    }
}

/// Pipeline files written by `retry_pipeline`: read when the app is built, removed afterwards.
const PIPELINE_PREFIX: &str = "muster-pipeline-";

/// An address with nothing listening (a server that is down).
pub async fn dead_addr() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    listener.local_addr().expect("the bound address")
}

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

/// A real server (or a client attached to one running elsewhere) and its database.
pub struct TestApp {
    pub addr: SocketAddr,
    pub db: TestDb,
    /// The settings the server was built from (its tokens file lives as long as the app).
    pub settings: Settings,
    pub(crate) client: Client<HttpConnector, Full<Bytes>>,
    shutdown: Mutex<Option<oneshot::Sender<()>>>,
    server: Mutex<Option<tokio::task::JoinHandle<()>>>,
    _dir: TempDir,
}

impl TestApp {
    /// A server with the default settings on a fresh database.
    pub async fn spawn() -> TestApp {
        Self::spawn_with(|_| {}).await
    }

    /// A server on a fresh database, its settings adjusted by `adjust`.
    pub async fn spawn_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
        let db = crate::fresh_db().await;
        Self::spawn_on(db, adjust).await
    }

    /// A server on an existing database (a second replica, or a database of a given cluster).
    pub async fn spawn_on(db: TestDb, adjust: impl FnOnce(&mut Settings)) -> TestApp {
        init_test_log();
        let dir = TempDir::new("muster-test");
        // The server runs with production privileges: as the runtime role.
        let mut settings = Settings::new(db.app_url.clone());
        settings.tokens = Some(write_tokens(&dir.0));
        adjust(&mut settings);
        let app = muster::build(&settings).expect("build the app");
        if let Some(p) = settings.pipeline.as_ref().filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(PIPELINE_PREFIX))
        }) {
            // Read at build time; not needed afterwards.
            let _ = std::fs::remove_file(p);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind port 0");
        let addr = listener.local_addr().expect("the bound address");
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            muster::serve(app, listener, async move {
                let _ = rx.await;
            })
            .await
            .expect("the server ran and stopped cleanly");
        });
        TestApp {
            addr,
            db,
            settings,
            client: Client::builder(TokioExecutor::new()).build_http(),
            shutdown: Mutex::new(Some(tx)),
            server: Mutex::new(Some(server)),
            _dir: dir,
        }
    }

    /// A client for a server running elsewhere (a real `muster` process) on `db`; waits until it
    /// accepts connections.
    pub async fn attach(db: TestDb, addr: SocketAddr) -> TestApp {
        let app = TestApp {
            addr,
            settings: Settings::new(db.app_url.clone()),
            db,
            client: Client::builder(TokioExecutor::new()).build_http(),
            shutdown: Mutex::new(None),
            server: Mutex::new(None),
            _dir: TempDir::new("muster-attach"),
        };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return app;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("no server answered at {addr}");
    }

    /// The server's base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(&self) {
        if let Some(tx) = self.shutdown.lock().expect("lock").take() {
            let _ = tx.send(());
        }
        let server = self.server.lock().expect("lock").take();
        if let Some(h) = server {
            h.await.expect("the server task ended without a panic");
        }
    }

    /// A single value from the test's database.
    pub async fn scalar_i64(&self, sql: &str) -> i64 {
        self.scalar(sql).await
    }

    /// How many rows `rows` names in the test's database: `core.items WHERE state = 'done'`.
    pub async fn count(&self, rows: &str) -> i64 {
        self.scalar(&format!("SELECT count(*) FROM {rows}")).await
    }

    /// How many items of `kind` are in `state`.
    pub async fn items_in(&self, kind: &str, state: &str) -> i64 {
        self.count(&format!(
            "core.items WHERE kind = '{kind}' AND state = '{state}'"
        ))
        .await
    }

    /// How many ledger rows of the subject `id` (an item or an edit) record `event`.
    pub async fn ledger_events(&self, id: &str, event: &str) -> i64 {
        self.count(&format!(
            "core.ledger WHERE subject_id = '{id}' AND event = '{event}'"
        ))
        .await
    }

    /// A single text value from the test's database.
    pub async fn scalar_text(&self, sql: &str) -> String {
        self.scalar(sql).await
    }

    async fn scalar<T: for<'a> tokio_postgres::types::FromSql<'a>>(&self, sql: &str) -> T {
        self.db
            .client()
            .await
            .query_one(sql, &[])
            .await
            .expect("the query answers one row")
            .get(0)
    }

    /// Runs SQL straight on the test's database (to inject a fault, or set a row up).
    pub async fn execute(&self, sql: &str) {
        self.db.execute(sql).await;
    }

    /// A connection of its own with a transaction left open after running `sql` (the test
    /// commits or rolls it back later through the connection).
    pub async fn open_transaction(&self, sql: &str) -> tokio_postgres::Client {
        let c = self.db.client().await;
        c.batch_execute(&format!("BEGIN; {sql};"))
            .await
            .expect("the transaction's SQL runs");
        c
    }

    /// Verifies every ledger chain of the test's database.
    pub async fn verify_ledger(&self) -> muster_pg::LedgerReport {
        muster_pg::verify_ledger(&self.db.pool())
            .await
            .expect("every ledger chain verifies")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.get_mut().expect("lock").take() {
            let _ = tx.send(());
        }
    }
}
