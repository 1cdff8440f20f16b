//! Test fixtures on a real PostgreSQL.
//!
//! The cluster comes from, in this order:
//! 1. `MUSTER_TEST_DATABASE_URL` (a superuser URL), when set;
//! 2. `MUSTER_TEST_POSTGRES=docker`: a PostgreSQL 15 container started through testcontainers
//!    from the image `cargo xtask images` builds here (`MUSTER_TEST_POSTGRES_IMAGE`, default
//!    `muster-local/postgres:15`), removed by a watchdog when the test process exits; the test
//!    fails when the `docker` feature is off or no engine answers — it never falls back.
//!    `cargo xtask test` chooses this path;
//! 3. `MUSTER_TEST_POSTGRES=binaries`, or nothing set: a throwaway cluster this test process
//!    starts itself from the installed PostgreSQL binaries (stopped by the devdb watchdog when the
//!    process exits). `cargo xtask test --local-postgres` chooses this path.
//!
//! Each test gets its own database, created from a template that was migrated once per process
//! by the production migration code. Beside them, `TempDir`, `CapturedLogs` (what a test's
//! code logs, through `tracing`) and `eventually` (polls a condition up to a deadline).
//!
//! With the `yaml` feature: `yaml::documents`, a YAML text as JSON values.
//!
//! With the `otlp` feature: `OtlpReceiver`, an OTLP/HTTP trace collector on port 0.
//!
//! With the `server` feature: `TestApp`, a real `muster` server on port 0 against such a
//! database, a token for every principal, and an HTTP client with one helper per use case.

use std::sync::OnceLock;

use muster_devdb::TempCluster;
use muster_pg::PoolSettings;
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;

mod logs;
mod tempdir;
mod wait;
pub use logs::CapturedLogs;
pub use tempdir::TempDir;
pub use wait::eventually;

#[cfg(feature = "yaml")]
pub mod yaml;

#[cfg(feature = "otlp")]
mod otlp;
#[cfg(feature = "otlp")]
pub use otlp::{OtlpMode, OtlpReceiver, OtlpRequest};

#[cfg(feature = "server")]
mod client;
#[cfg(feature = "server")]
mod server;
#[cfg(feature = "server")]
mod sse;
#[cfg(feature = "server")]
pub use client::{Resp, lease_path};
#[cfg(feature = "server")]
pub use server::{TestApp, dead_addr, principals, retry_pipeline, token, write_tokens};
#[cfg(feature = "server")]
pub use sse::{SseEvent, SseStream, received_feed_items};

static OWN_CLUSTER: OnceLock<TempCluster> = OnceLock::new();
static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// A superuser URL of the cluster the tests use, for database `db`.
pub fn server_url(db: &str) -> String {
    if let Ok(base) = std::env::var("MUSTER_TEST_DATABASE_URL") {
        return replace_db(&base, db);
    }
    match std::env::var("MUSTER_TEST_POSTGRES").as_deref() {
        Ok("docker") => replace_db(container_url(), db),
        Ok("binaries") | Err(_) => {
            let cluster = OWN_CLUSTER.get_or_init(|| {
                TempCluster::start().expect(
                    "start a throwaway PostgreSQL (set MUSTER_TEST_DATABASE_URL to use another)",
                )
            });
            cluster.url(db)
        }
        Ok(other) => panic!("MUSTER_TEST_POSTGRES={other}: expected `docker` or `binaries`"),
    }
}

/// The superuser URL of this process's PostgreSQL container, started on first use.
#[cfg(feature = "docker")]
fn container_url() -> &'static str {
    static CONTAINER: OnceLock<String> = OnceLock::new();
    CONTAINER.get_or_init(|| match docker::start() {
        Ok(url) => url,
        Err(error) => panic!("MUSTER_TEST_POSTGRES=docker: {error}"),
    })
}

#[cfg(not(feature = "docker"))]
fn container_url() -> &'static str {
    panic!(
        "MUSTER_TEST_POSTGRES=docker needs the `muster-testkit/docker` feature \
         (`cargo xtask test` turns it on)"
    )
}

#[cfg(feature = "docker")]
mod docker;

fn replace_db(url: &str, db: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let scheme_end = head.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&server_url("postgres"), NoTls)
        .await
        .expect("connect to the test cluster");
    tokio::spawn(conn);
    client
}

async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let name = format!("muster_tpl_{}", std::process::id());
            let client = admin().await;
            for sql in [
                format!("DROP DATABASE IF EXISTS {name}"),
                format!("CREATE DATABASE {name}"),
            ] {
                client
                    .batch_execute(&sql)
                    .await
                    .expect("create the template database");
            }
            let pool = muster_pg::connect_pool(&server_url(&name), &PoolSettings::default())
                .expect("pool");
            muster_pg::migrate(&pool, muster_pg::DEFAULT_RUNTIME_ROLE)
                .await
                .expect("migrate the template database");
            pool.close();
            give_runtime_role_a_login(&client).await;
            name
        })
        .await
}

/// The runtime role's password in throwaway clusters (some authenticate TCP by password).
pub const RUNTIME_PASSWORD: &str = "muster-test";

/// `migrate` creates the runtime role `NOLOGIN`; in a throwaway cluster the tests log in as it.
/// The role is the cluster's, shared by every test process on it: a concurrent `ALTER ROLE`
/// of the same role is retried.
async fn give_runtime_role_a_login(admin: &tokio_postgres::Client) {
    let sql = format!(
        "ALTER ROLE {} LOGIN PASSWORD '{RUNTIME_PASSWORD}'",
        muster_pg::DEFAULT_RUNTIME_ROLE
    );
    for _ in 0..50 {
        if admin.batch_execute(&sql).await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    admin
        .batch_execute(&sql)
        .await
        .expect("give the runtime role a login");
}

/// `url` with its user (and password) replaced.
pub fn with_user(url: &str, user: &str, password: &str) -> String {
    let scheme_end = url.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = &url[scheme_end..];
    let host_start = match (rest.find('@'), rest.find('/')) {
        (Some(at), Some(slash)) if at < slash => at + 1,
        (Some(at), None) => at + 1,
        _ => 0,
    };
    format!(
        "{}{user}:{password}@{}",
        &url[..scheme_end],
        &rest[host_start..]
    )
}

/// A fresh, migrated database of its own.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub name: String,
    /// As the cluster's superuser (for setting rows up and injecting faults).
    pub url: String,
    /// As the runtime role `muster migrate` granted (`muster_app`): what `serve` connects as.
    pub app_url: String,
}

impl TestDb {
    /// Migrates the database at `url` (a superuser URL of a cluster of the test's own) and
    /// gives its runtime role a login, as the shared template is.
    pub async fn migrate_own(name: &str, url: String) -> TestDb {
        let pool = muster_pg::connect_pool(&url, &PoolSettings::default()).expect("pool");
        muster_pg::migrate(&pool, muster_pg::DEFAULT_RUNTIME_ROLE)
            .await
            .expect("migrate");
        let client = pool.get().await.expect("connect");
        give_runtime_role_a_login(&client).await;
        drop(client);
        pool.close();
        TestDb {
            name: name.to_owned(),
            app_url: with_user(&url, muster_pg::DEFAULT_RUNTIME_ROLE, RUNTIME_PASSWORD),
            url,
        }
    }

    /// A pool on this database with the production settings.
    pub fn pool(&self) -> deadpool_postgres::Pool {
        muster_pg::connect_pool(&self.url, &PoolSettings::default()).expect("pool")
    }

    /// A plain client for assertions made straight on the tables.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url, NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client
    }

    /// Runs `sql` (one statement or several separated by `;`) as the superuser, to set rows,
    /// tables or roles up; a failure panics with the statements and the error.
    pub async fn execute(&self, sql: &str) {
        self.client()
            .await
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// Creates a new database from the migrated template.
pub async fn fresh_db() -> TestDb {
    let template = template().await;
    let name = format!("muster_t_{}", uuid::Uuid::now_v7().simple());
    let client = admin().await;
    // The template may still be in use by a closing pool connection for a moment.
    let mut tries = 0;
    loop {
        match client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
        {
            Ok(()) => break,
            Err(e) if tries < 50 => {
                tries += 1;
                let _ = e;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("create test database: {e}"),
        }
    }
    let url = server_url(&name);
    TestDb {
        app_url: with_user(&url, muster_pg::DEFAULT_RUNTIME_ROLE, RUNTIME_PASSWORD),
        url,
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::{replace_db, with_user};

    #[test]
    fn the_user_of_a_url_is_replaced() {
        assert_eq!(
            with_user("postgresql://postgres@h:5/a", "app", "pw"),
            "postgresql://app:pw@h:5/a"
        );
        assert_eq!(
            with_user("postgresql://postgres:postgres@h:5/a?x=1", "app", "pw"),
            "postgresql://app:pw@h:5/a?x=1"
        );
        assert_eq!(
            with_user("postgresql://h:5/a", "app", "pw"),
            "postgresql://app:pw@h:5/a"
        );
    }

    #[test]
    fn the_database_name_of_a_url_is_replaced() {
        assert_eq!(
            replace_db("postgresql://u@h:5/a", "b"),
            "postgresql://u@h:5/b"
        );
        assert_eq!(
            replace_db("postgresql://u@h:5", "b"),
            "postgresql://u@h:5/b"
        );
        assert_eq!(
            replace_db("postgresql://u@h:5/a?x=1", "b"),
            "postgresql://u@h:5/b?x=1"
        );
    }
}
