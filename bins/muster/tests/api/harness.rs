//! What only the API suite needs on top of `muster_testkit::TestApp` (the real server on port 0,
//! its client and the live feed's reader, re-exported here for the suite's modules).

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use hyper::StatusCode;
use muster::Settings;
use muster_domain::Kind;
pub use muster_testkit::{
    Resp, SseEvent, SseStream, TempDir, TestApp, lease_path, token, write_tokens,
};

/// Settings with a pipeline file of fast retries for trawl: 1 ms backoff, `max_attempts`.
pub fn fast_retries(max_attempts: u32) -> impl FnOnce(&mut Settings) {
    muster_testkit::retry_pipeline(&[Kind::Trawl], 1, 1, 1, max_attempts)
}

/// `muster serve` as a process of its own on a free loopback port, against the database at `url`,
/// with the dev tokens written into `dir`, its stdout and stderr discarded unless the caller
/// says otherwise: the command, for more settings, and the address it will listen on.
pub fn serve_process(url: &str, dir: &TempDir) -> (Command, SocketAddr) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_muster"));
    serve
        .arg("serve")
        .env("MUSTER_DATABASE_URL", url)
        .env("MUSTER_LISTEN", addr.to_string())
        .env("MUSTER_TOKENS", write_tokens(&dir.0))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    (serve, addr)
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

/// Makes PostgreSQL refuse (with a non-transient error) any item update whose result holds the
/// key `poison`: a body the checks before the database let through but the database refuses.
pub async fn refuse_poisoned_results(app: &TestApp) {
    app.execute(
        "CREATE FUNCTION core.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'poisoned result refused'; END $$;
         CREATE TRIGGER refuse_poison BEFORE UPDATE ON core.items
           FOR EACH ROW WHEN (NEW.result ? 'poison') EXECUTE FUNCTION core.refuse_poison();",
    )
    .await;
}

/// Injected failure: the last write of a completion transaction (recording the lease's
/// outcome) raises inside PostgreSQL, after the item, its next items and the ledger rows were
/// written in the same transaction. `DROP TRIGGER inject ON core.leases` lifts it.
pub async fn fail_recording_lease_outcomes(app: &TestApp) {
    app.execute(
        "CREATE FUNCTION core.inject_failure() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
         CREATE TRIGGER inject BEFORE UPDATE OF outcome ON core.leases
           FOR EACH ROW EXECUTE FUNCTION core.inject_failure();",
    )
    .await;
}

/// Waits until `n` replicas' wake-up bridges listen (idle after their LISTEN).
pub async fn until_bridges_listen(app: &TestApp, n: i64) {
    let listening = format!(
        "application_name = '{}' AND state = 'idle'",
        muster_pg::WAKE_APPLICATION_NAME
    );
    until_backends(app, &listening, n, "wake-up bridges listening").await;
}

/// A connection holding the row lock of the item `lease` names, in an open transaction: a
/// use case on that item waits until `release_item` (or the connection's drop) ends it.
pub async fn hold_item(app: &TestApp, lease: &serde_json::Value) -> tokio_postgres::Client {
    let blocker = app.db.client().await;
    let item = lease["item"]["id"].as_str().expect("a leased item's id");
    blocker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM core.items WHERE id = '{item}' FOR UPDATE"
        ))
        .await
        .expect("lock the item's row");
    blocker
}

/// Ends `hold_item`'s transaction: the waiting use case goes on.
pub async fn release_item(blocker: &tokio_postgres::Client) {
    blocker
        .batch_execute("ROLLBACK")
        .await
        .expect("roll back the lock");
}

/// Waits until `n` backends of the test's database wait for a lock (a row or an advisory lock).
pub async fn until_waiting_for_locks(app: &TestApp, n: i64) {
    until_backends(
        app,
        "wait_event_type = 'Lock'",
        n,
        "backends waiting for a lock",
    )
    .await;
}

/// Waits (up to ten seconds) until at least `n` backends of the test's database match
/// `condition` on `pg_stat_activity`.
async fn until_backends(app: &TestApp, condition: &str, n: i64, what: &str) {
    let rows = format!("pg_stat_activity WHERE datname = current_database() AND {condition}");
    for _ in 0..1000 {
        if app.count(&rows).await >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never {n} {what}");
}

/// `n` transitions of made-up items written straight into the ledger (about 230 bytes each on
/// the feed).
pub async fn fill_ledger(app: &TestApp, n: i64) {
    app.execute(&format!(
        "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at, data, prev_hash, hash)
         SELECT 'item', 'filler-' || g, 1, 'test', 'operator', now(), '{{}}',
                decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex')
         FROM generate_series(1, {n}) AS g"
    ))
    .await;
}

/// `GET path` answers conn and the operator, and refuses a worker and shipkeeper with 403.
pub async fn only_conn_and_the_operator_may_get(app: &TestApp, path: &str) {
    for who in ["conn", "operator"] {
        assert_eq!(app.get(path, who).await.status, StatusCode::OK, "{who}");
    }
    for who in ["worker:trawl", "shipkeeper"] {
        app.get(path, who)
            .await
            .assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
    }
}
