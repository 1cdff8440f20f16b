//! Checkpoints taken by the serving replica, and `muster ledger-verify` around them: the
//! latest printed, `--since` verifying what came after one, a bad one refused in one line.

use std::time::Duration;

use serde_json::json;

use crate::harness::{TempDir, TestApp};
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
    let (code, _, stderr) = muster(Some(&app.db.url), &["ledger-verify", "--since", "999"]);
    assert_eq!(
        (code, stderr.as_str()),
        (
            Some(1),
            "ledger-verify: ledger: there is no checkpoint 999 (`muster ledger-verify` prints the latest)"
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

/// `muster ARGS` with the database at `db` (none: no database at all) and `RUST_BACKTRACE=1`
/// (an operator's error is one line whatever it says): (exit code, stdout, stderr).
pub(crate) fn muster(db: Option<&str>, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_muster"));
    command
        .args(args)
        .env("MUSTER_LOG_FORMAT", "pretty")
        .env("RUST_BACKTRACE", "1");
    match db {
        Some(url) => command.env("MUSTER_DATABASE_URL", url),
        None => command.env_remove("MUSTER_DATABASE_URL"),
    };
    let out = command.output().expect("run muster");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

/// `muster ledger-verify --archive FILE`, with no database at all.
fn verify_offline(file: &std::path::Path) -> (Option<i32>, String, String) {
    muster(
        None,
        &[
            "ledger-verify",
            "--archive",
            file.to_str().expect("utf-8 path"),
        ],
    )
}

/// An archive of the ledger up to the checkpoint of [`checkpointed`]: its file and checkpoint.
async fn archived() -> (TempDir, std::path::PathBuf, i64) {
    let (app, seq) = checkpointed().await;
    let dir = TempDir::new("muster-archive");
    let file = dir.path().join("ledger.jsonl");
    let to = file.to_str().expect("utf-8 path");
    let (code, stdout, stderr) = muster(
        Some(&app.db.url),
        &["ledger-archive", "--to", to, "--until", &seq.to_string()],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (
            Some(0),
            format!("{seq} ledger entries archived to {to}").as_str()
        ),
        "{stderr}"
    );
    (dir, file, seq)
}

#[tokio::test]
async fn an_archive_verifies_offline_from_the_start_to_its_checkpoint() {
    let (_dir, file, seq) = archived().await;
    let (code, stdout, _) = verify_offline(&file);
    assert_eq!(
        (code, stdout.split(" up to checkpoint ").next()),
        (
            Some(0),
            Some(
                format!(
                    "archive verified: {seq} entries after checkpoint 0:{}",
                    "0".repeat(64)
                )
                .as_str()
            )
        )
    );
}

#[tokio::test]
async fn an_archive_with_an_entry_changed_fails_offline_verification() {
    let (_dir, file, _) = archived().await;
    let text = std::fs::read_to_string(&file).expect("read");
    std::fs::write(
        &file,
        text.replacen("\"event\":\"enqueued\"", "\"event\":\"forged\"", 1),
    )
    .expect("write");
    let (code, _, stderr) = verify_offline(&file);
    assert_eq!(
        (
            code,
            stderr.contains("was altered (its hash does not match its contents)")
        ),
        (Some(1), true),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_archive_cut_short_fails_offline_verification() {
    let (_dir, file, _) = archived().await;
    let text = std::fs::read_to_string(&file).expect("read");
    let cut: Vec<&str> = text.lines().collect();
    std::fs::write(&file, cut[..cut.len() - 1].join("\n")).expect("write");
    let (code, _, stderr) = verify_offline(&file);
    assert_eq!(
        (
            code,
            stderr.starts_with("ledger-verify: the archive is truncated")
        ),
        (Some(1), true),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_file_that_is_no_archive_fails_offline_verification_in_one_line() {
    let dir = TempDir::new("muster-archive");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "dear auditor\n").expect("write");
    let (code, _, stderr) = verify_offline(&file);
    assert_eq!(
        (
            code,
            stderr.lines().count(),
            stderr.starts_with("ledger-verify: not a ledger archive")
        ),
        (Some(1), 1, true),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_archive_until_a_checkpoint_that_does_not_exist_is_refused_and_no_file_left() {
    let app = TestApp::spawn().await;
    let dir = TempDir::new("muster-archive");
    let file = dir.path().join("ledger.jsonl");
    let (code, _, stderr) = muster(
        Some(&app.db.url),
        &[
            "ledger-archive",
            "--to",
            file.to_str().expect("utf-8"),
            "--until",
            "7",
        ],
    );
    assert_eq!(
        (code, stderr.as_str(), file.exists()),
        (
            Some(1),
            "ledger-archive: ledger: there is no checkpoint 7 (`muster ledger-verify` prints the latest)",
            false
        )
    );
}
