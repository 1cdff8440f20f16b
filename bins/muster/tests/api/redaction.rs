//! Health redaction with the cluster's node names from `--node-names` (docs/redaction.md).

use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;

use crate::harness::{TempDir, TestApp};

/// A report of one trawl event with `message`.
fn report(message: &str) -> serde_json::Value {
    json!({"pods": [], "events": [{"kind": "trawl", "reason": "NodeNotReady", "message": message}]})
}

/// A node names file holding `names` (removed with the folder).
fn node_file(names: &str) -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new("muster-nodes");
    let file = dir.0.join("nodes.txt");
    std::fs::write(&file, names).unwrap();
    (dir, file)
}

/// A server whose `--node-names` file holds `names`, and that file (kept while the app lives).
async fn with_node_file(names: &str) -> (TestApp, TempDir, std::path::PathBuf) {
    let (dir, file) = node_file(names);
    let app = TestApp::spawn_with(|s| s.node_names = Some(file.clone())).await;
    (app, dir, file)
}

/// Reports one trawl event with `message`: the answer's status and body.
async fn report_event(app: &TestApp, message: &str) -> (StatusCode, serde_json::Value) {
    let r = app.post("/v1/health", "shipkeeper", report(message)).await;
    (r.status, r.body)
}

/// Rewrites the node names `file` with `names` once a modification time the watcher can tell
/// apart on every filesystem has passed.
async fn rewrite_later(file: &std::path::Path, names: &str) {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(file, names).unwrap();
}

/// Why the server refuses to start with `--node-names` at `file`.
fn start_error(file: std::path::PathBuf) -> String {
    let mut settings = muster::Settings::new("postgres://unused@127.0.0.1:1/x");
    settings.node_names = Some(file);
    let error = muster::build(&settings).err().expect("the start fails");
    format!("{error:#}")
}

/// Reports one trawl event with `message`: it is accepted with `redacted` spans redacted, and
/// stored as `stored`.
async fn assert_report_stored_as(app: &TestApp, message: &str, redacted: u32, stored: &str) {
    assert_eq!(
        report_event(app, message).await,
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 1, "redacted": redacted})
        )
    );
    assert_eq!(stored_message(app).await, stored);
}

async fn stored_message(app: &TestApp) -> String {
    let events: serde_json::Value = app
        .db
        .client()
        .await
        .query_one(
            "SELECT events FROM core.worker_health WHERE kind = 'trawl'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    events[0]["message"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_node_named_in_the_node_names_file_is_redacted_wherever_it_stands() {
    let (app, _dir, _file) = with_node_file("# rack 3\nTidewater\n").await;
    assert_report_stored_as(
        &app,
        "trawl-0 lost tidewater at https://TIDEWATER:10250",
        2,
        "trawl-0 lost [redacted] at https://[redacted]",
    )
    .await;
}

#[tokio::test]
async fn a_changed_node_names_file_is_picked_up_while_serving() {
    let (app, _dir, file) = with_node_file("tidewater\n").await;
    rewrite_later(&file, "tidewater\nbigiron\n").await;
    let mut message = String::new();
    for _ in 0..50 {
        assert_eq!(
            report_event(&app, "bigiron rebooted").await.0,
            StatusCode::ACCEPTED
        );
        message = stored_message(&app).await;
        if message == "[redacted] rebooted" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(message, "[redacted] rebooted");
}

#[tokio::test]
async fn without_a_source_of_names_a_node_is_still_redacted_by_its_position() {
    let app = TestApp::spawn().await;
    assert_report_stored_as(
        &app,
        "Node rack3-blade12 status is now: NodeNotReady",
        1,
        "Node [redacted] status is now: NodeNotReady",
    )
    .await;
}

#[test]
fn an_unreadable_node_names_file_fails_the_start() {
    let error = start_error("/nonexistent/muster-nodes.txt".into());
    assert!(
        error.contains("read node names /nonexistent/muster-nodes.txt"),
        "{error}"
    );
}

#[test]
fn a_node_names_file_without_a_name_fails_the_start() {
    let (_dir, file) = node_file("# nothing yet\n\n");
    let error = start_error(file);
    assert!(error.contains("the file lists no node name"), "{error}");
}

#[tokio::test]
async fn a_node_names_file_emptied_while_serving_keeps_the_last_names() {
    let (app, _dir, file) = with_node_file("tidewater\n").await;
    rewrite_later(&file, "").await;
    // Two housekeeping ticks: the empty file has been looked at.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(
        report_event(&app, "tidewater rebooted").await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(stored_message(&app).await, "[redacted] rebooted");
}
