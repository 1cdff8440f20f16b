//! Least privilege in Logbook: `serve` as the runtime role, a misconfigured role named on
//! `/readyz`, and `ledger-verify --head` / `--against`.

use std::process::{Command, Stdio};
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;

use muster_testkit::TestDb;

use crate::harness::{KillOnDrop, TempDir, TestApp, serve_process};

async fn readyz(app: &TestApp) -> (StatusCode, serde_json::Value) {
    let r = app.raw(Method::GET, "/readyz", None, vec![]).await;
    (r.status, r.body)
}

#[tokio::test]
async fn the_server_of_the_tests_is_connected_as_the_runtime_role() {
    let app = TestApp::spawn().await;
    assert_eq!(
        app.settings.database_url.as_deref(),
        Some(app.db.app_url.as_str())
    );
    assert!(app.db.app_url.contains("://muster_app:"));
    assert_eq!(readyz(&app).await.0, StatusCode::OK);
}

/// A server started on a database where the runtime role lacks UPDATE on `core.items`.
async fn spawn_lacking_a_grant() -> TestApp {
    let db = muster_testkit::fresh_db().await;
    db.execute("REVOKE UPDATE ON core.items FROM muster_app")
        .await;
    TestApp::spawn_on(db, |_| {}).await
}

#[tokio::test]
async fn a_runtime_role_that_lacks_a_grant_is_not_ready_and_the_grant_is_named() {
    let app = spawn_lacking_a_grant().await;
    let (status, body) = readyz(&app).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body.to_string()
            .contains("database role muster_app lacks UPDATE on core.items"),
        "{body}"
    );
}

#[tokio::test]
async fn a_misconfigured_role_is_ready_again_once_the_grant_is_back() {
    let app = spawn_lacking_a_grant().await;
    assert_eq!(readyz(&app).await.0, StatusCode::SERVICE_UNAVAILABLE);
    app.execute("GRANT UPDATE ON core.items TO muster_app")
        .await;
    // Readiness is checked at most once a second (/readyz answers from that check).
    let mut status = readyz(&app).await.0;
    for _ in 0..30 {
        if status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        status = readyz(&app).await.0;
    }
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn serve_as_the_superuser_still_serves() {
    let db = muster_testkit::fresh_db().await;
    let superuser = db.url.clone();
    let app = TestApp::spawn_on(db, move |s| s.database_url = Some(superuser)).await;
    assert_eq!(readyz(&app).await.0, StatusCode::OK);
    app.enqueue("trawl", "normal", json!({})).await;
    assert_eq!(app.count("core.items").await, 1);
}

/// `muster ledger-verify ARGS` against the app's database: (exit success, stdout, stderr).
pub(crate) fn ledger_verify(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("ledger-verify")
        .args(args)
        .env("MUSTER_DATABASE_URL", &app.db.url)
        .env("MUSTER_LOG_FORMAT", "pretty")
        .output()
        .expect("run muster ledger-verify");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

#[tokio::test]
async fn ledger_verify_head_prints_the_newest_sequence_and_a_digest() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let newest = app.scalar_i64("SELECT max(seq) FROM core.ledger").await;
    let (ok, stdout, _) = ledger_verify(&app, &["--head"]);
    let (seq, digest) = stdout.split_once(':').expect("N:DIGEST");
    assert_eq!(
        (ok, seq, digest.len()),
        (true, newest.to_string().as_str(), 64)
    );
}

#[tokio::test]
async fn ledger_verify_against_a_recorded_head_passes_after_more_work() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let (_, head, _) = ledger_verify(&app, &["--head"]);
    app.enqueue("trawl", "normal", json!({})).await;
    let (ok, _, stderr) = ledger_verify(&app, &["--against", &head]);
    assert!(ok, "{stderr}");
}

#[tokio::test]
async fn ledger_verify_against_a_head_the_ledger_no_longer_has_fails() {
    let app = TestApp::spawn().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let (_, head, _) = ledger_verify(&app, &["--head"]);
    let (seq, _) = head.split_once(':').expect("N:DIGEST");
    let forged = format!("{seq}:{}", "0".repeat(64));
    let (ok, _, stderr) = ledger_verify(&app, &["--against", &forged]);
    assert_eq!(
        (ok, stderr.contains("no longer hashes to")),
        (false, true),
        "{stderr}"
    );
}

/// The level and message of the log line in which `muster serve`, a process of its own
/// connected with `url`, says which role it is connected as (JSON log on stderr).
fn connected_as_log_line(url: &str) -> (String, String) {
    use std::io::BufRead;
    let dir = TempDir::new("muster-roles-log");
    let (mut serve, _) = serve_process(url, &dir);
    let mut child = KillOnDrop(Some(
        serve
            .env("MUSTER_LOG_FORMAT", "json")
            .env_remove("RUST_LOG")
            .stderr(Stdio::piped())
            .spawn()
            .expect("start muster serve"),
    ));
    let stderr = child.0.as_mut().unwrap().stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let message = v["message"].as_str().unwrap_or_default().to_owned();
            if message.starts_with("connected to Logbook as") {
                let level = v["level"].as_str().unwrap_or_default().to_owned();
                let _ = tx.send((level, message));
                return;
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("serve said which role it is connected as within 30 s");
    drop(child);
    line
}

#[tokio::test]
async fn serve_as_a_superuser_warns_at_start() {
    let db = muster_testkit::fresh_db().await;
    let (level, message) = connected_as_log_line(&db.url);
    assert_eq!(
        (level.as_str(), message.split(':').next()),
        ("WARN", Some("connected to Logbook as a superuser"))
    );
}

#[tokio::test]
async fn serve_as_the_runtime_role_says_so_without_a_warning() {
    let db = muster_testkit::fresh_db().await;
    let (level, message) = connected_as_log_line(&db.app_url);
    assert_eq!(
        (level.as_str(), message.as_str()),
        (
            "INFO",
            "connected to Logbook as the runtime role; every grant present"
        )
    );
}

/// A database owned by a login role that is no superuser (only `CREATEROLE`, for the runtime
/// role `migrate` creates), migrated by `muster migrate` as that owner with a runtime role
/// that does not exist yet. Answers the database with the runtime role's URL (given a login
/// out of band, as deploy/README says).
async fn migrated_by_an_owner_that_is_no_superuser() -> TestDb {
    let unique = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let (name, owner, runtime) = (
        format!("muster_own_{unique}"),
        format!("owner_{unique}"),
        format!("app_{unique}"),
    );
    let admin = muster_testkit::fresh_db().await.client().await;
    for statement in [
        format!("CREATE ROLE {owner} LOGIN PASSWORD 'owner-pw' CREATEROLE NOSUPERUSER"),
        format!("CREATE DATABASE {name} OWNER {owner}"),
    ] {
        admin
            .batch_execute(&statement)
            .await
            .expect("the owner and its database");
    }
    let superuser_url = muster_testkit::server_url(&name);
    let out = Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("migrate")
        .env(
            "MUSTER_DATABASE_URL",
            muster_testkit::with_user(&superuser_url, &owner, "owner-pw"),
        )
        .env("MUSTER_RUNTIME_ROLE", &runtime)
        .env("MUSTER_LOG_FORMAT", "pretty")
        .output()
        .expect("run muster migrate");
    assert!(
        out.status.success(),
        "migrate as {owner}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    TestDb {
        name,
        app_url: muster_testkit::with_user(&superuser_url, &runtime, "app-pw"),
        url: superuser_url,
    }
}

#[tokio::test]
async fn migrate_as_an_owner_that_is_no_superuser_creates_the_runtime_role_without_login() {
    let db = migrated_by_an_owner_that_is_no_superuser().await;
    let runtime = format!("app_{}", &db.name["muster_own_".len()..]);
    let row = db
        .client()
        .await
        .query_one(
            "SELECT r.rolcanlogin, r.rolsuper, pg_get_userbyid(c.relowner)::text
               FROM pg_roles r, pg_class c
              WHERE r.rolname = $1 AND c.oid = 'core.ledger'::regclass",
            &[&runtime],
        )
        .await
        .expect("the runtime role and the ledger's owner");
    assert_eq!(
        (
            row.get::<_, bool>(0),
            row.get::<_, bool>(1),
            row.get::<_, String>(2)
        ),
        (
            false,
            false,
            format!("owner_{}", &db.name["muster_own_".len()..])
        )
    );
}

#[tokio::test]
async fn serve_as_the_runtime_role_of_an_owner_that_is_no_superuser_is_ready_and_completes_work() {
    let db = migrated_by_an_owner_that_is_no_superuser().await;
    let runtime = format!("app_{}", &db.name["muster_own_".len()..]);
    db.execute(&format!("ALTER ROLE {runtime} LOGIN PASSWORD 'app-pw'"))
        .await;
    let app = TestApp::spawn_on(db, |_| {}).await;
    let ready = readyz(&app).await.0;
    let lease = app.enqueue_and_lease("trawl").await;
    let completed = app.complete(&lease, json!({"result": {}})).await.status;
    let id = lease["item"]["id"]
        .as_str()
        .expect("the leased item's id")
        .to_owned();
    assert_eq!(
        (ready, completed, app.item(&id).await["state"].clone()),
        (StatusCode::OK, StatusCode::OK, json!("done"))
    );
}
