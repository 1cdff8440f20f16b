//! Checkpoints taken by the serving replica, and `muster ledger-verify` around them: the
//! latest printed, `--since` verifying what came after one, a bad one refused in one line.

use std::time::Duration;

use serde_json::json;

use crate::harness::TestApp;
use crate::roles::ledger_verify;

/// A server that takes a checkpoint after every ledger entry, with two items enqueued and a
/// checkpoint taken after them; answers the checkpoint's sequence.
async fn checkpointed() -> (TestApp, i64) {
    let db = muster_testkit::fresh_db().await;
    let app = TestApp::spawn_on(db, |s| s.checkpoint_every_entries = 1).await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let newest = app.scalar_i64("SELECT max(seq) FROM core.ledger").await;
    for _ in 0..200 {
        let seq = app
            .scalar_i64("SELECT coalesce(max(seq), 0) FROM core.ledger_checkpoints")
            .await;
        if seq == newest {
            return (app, seq);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no checkpoint at {newest} within 20 s");
}

#[tokio::test]
async fn the_serving_replica_takes_a_checkpoint_that_ledger_verify_prints() {
    let (app, seq) = checkpointed().await;
    let (ok, stdout, stderr) = ledger_verify(&app, &[]);
    let digest = stdout
        .split_once(&format!("latest checkpoint {seq}:"))
        .map(|(_, d)| d.len());
    assert_eq!((ok, digest), (true, Some(64)), "{stdout} {stderr}");
}

#[tokio::test]
async fn ledger_verify_since_a_checkpoint_verifies_what_came_after_it() {
    let (app, seq) = checkpointed().await;
    app.enqueue("trawl", "normal", json!({})).await;
    let (ok, stdout, stderr) = ledger_verify(&app, &["--since", &seq.to_string()]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "ledger verified since checkpoint {seq}: 1 subjects, 1 entries"
        )),
        "{stdout}"
    );
}

#[tokio::test]
async fn ledger_verify_since_a_checkpoint_that_does_not_exist_fails_in_one_line() {
    let app = TestApp::spawn().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["ledger-verify", "--since", "999"])
        .env("MUSTER_DATABASE_URL", &app.db.url)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run muster ledger-verify");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).as_ref()
        ),
        (
            Some(1),
            "ledger-verify: ledger: there is no checkpoint 999 (`muster ledger-verify` prints the latest)\n"
        )
    );
}

#[tokio::test]
async fn ledger_verify_of_a_checkpoint_name_that_is_no_number_fails_in_one_line() {
    let app = TestApp::spawn().await;
    let (ok, _, stderr) = ledger_verify(&app, &["--since", "yesterday"]);
    assert_eq!(
        (ok, stderr.as_str()),
        (
            false,
            "ledger-verify: ledger: \"yesterday\" is not a checkpoint: SEQ or SEQ:DIGEST (as `ledger-verify` prints it)"
        )
    );
}
