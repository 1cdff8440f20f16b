//! Least privilege in Logbook: `serve` as the runtime role, a misconfigured role named on
//! `/readyz`, and `ledger-verify --head` / `--against`.

use std::process::Command;

use hyper::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestApp;

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
    db.client()
        .await
        .batch_execute("REVOKE UPDATE ON core.items FROM muster_app")
        .await
        .expect("revoke");
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
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.items").await, 1);
}

/// `muster ledger-verify ARGS` against the app's database: (exit success, stdout, stderr).
fn ledger_verify(app: &TestApp, args: &[&str]) -> (bool, String, String) {
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
