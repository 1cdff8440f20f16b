//! Test fixtures on a real PostgreSQL.
//!
//! The cluster comes from, in this order:
//! 1. `MUSTER_TEST_DATABASE_URL` (a superuser URL; `cargo xtask test` sets it to a throwaway
//!    cluster it started);
//! 2. with the `docker` feature, when a Docker engine answers: a PostgreSQL 15 container started
//!    through testcontainers (removed by a watchdog when the test process exits);
//! 3. a throwaway cluster this test process starts itself from the installed PostgreSQL
//!    binaries (stopped by the devdb watchdog when the process exits).
//!
//! Each test gets its own database, created from a template that was migrated once per process
//! by the production migration code.
//!
//! With the `server` feature: `TestApp`, a real `muster` server on port 0 against such a
//! database, a token for every principal, and an HTTP client with one helper per use case.

use std::sync::OnceLock;

use muster_devdb::TempCluster;
use muster_pg::PoolSettings;
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;

mod tempdir;
pub use tempdir::TempDir;

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
    #[cfg(feature = "docker")]
    {
        static CONTAINER: OnceLock<Option<String>> = OnceLock::new();
        if let Some(base) = CONTAINER.get_or_init(docker::start) {
            return replace_db(base, db);
        }
    }
    let cluster = OWN_CLUSTER.get_or_init(|| {
        TempCluster::start()
            .expect("start a throwaway PostgreSQL (set MUSTER_TEST_DATABASE_URL to use another)")
    });
    cluster.url(db)
}

#[cfg(feature = "docker")]
mod docker {
    use std::process::{Command, Stdio};

    /// Starts a PostgreSQL container if a Docker engine answers; its superuser URL.
    pub fn start() -> Option<String> {
        let engine = Command::new("docker")
            .args(["info", "--format", "{{.ServerVersion}}"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !engine {
            return None;
        }
        // The blocking runner makes its own runtime: keep it off the test's runtime thread.
        std::thread::spawn(|| {
            use testcontainers_modules::postgres::Postgres;
            use testcontainers_modules::testcontainers::ImageExt;
            use testcontainers_modules::testcontainers::runners::SyncRunner;
            let container = Postgres::default().with_tag("15-alpine").start().ok()?;
            let port = container.get_host_port_ipv4(5432).ok()?;
            let id = container.id().to_owned();
            // The container outlives this handle (statics are not dropped); a watchdog removes it
            // once the test process is gone.
            let watchdog = format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; docker rm -f {id} >/dev/null 2>&1",
                std::process::id()
            );
            Command::new("sh")
                .args(["-c", &watchdog])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            std::mem::forget(container);
            Some(format!(
                "postgresql://postgres:postgres@127.0.0.1:{port}/postgres"
            ))
        })
        .join()
        .ok()
        .flatten()
    }
}

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
            muster_pg::migrate(&pool)
                .await
                .expect("migrate the template database");
            pool.close();
            name
        })
        .await
}

/// A fresh, migrated database of its own.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
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
    TestDb {
        url: server_url(&name),
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::replace_db;

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
