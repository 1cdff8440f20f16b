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
pub use sse::{SseEvent, SseStream};

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
