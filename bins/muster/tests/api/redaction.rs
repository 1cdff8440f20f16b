//! Health redaction with the cluster's node names from `--node-names` (docs/redaction.md).

use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;

use crate::harness::{TempDir, TestApp};

/// A report of one trawl event with `message`.
fn report(message: &str) -> serde_json::Value {
    json!({"pods": [], "events": [{"kind": "trawl", "reason": "NodeNotReady", "message": message}]})
}

/// A server whose `--node-names` file holds `names`, and that file (kept while the app lives).
async fn with_node_file(names: &str) -> (TestApp, TempDir, std::path::PathBuf) {
    let dir = TempDir::new("muster-nodes");
    let file = dir.0.join("nodes.txt");
    std::fs::write(&file, names).unwrap();
    let app = TestApp::spawn_with(|s| s.node_names = Some(file.clone())).await;
    (app, dir, file)
}

/// Reports one trawl event with `message`: the answer's status and body.
async fn report_event(app: &TestApp, message: &str) -> (StatusCode, serde_json::Value) {
    let r = app.post("/v1/health", "shipkeeper", report(message)).await;
    (r.status, r.body)
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
    assert_eq!(
        report_event(&app, "trawl-0 lost tidewater at https://TIDEWATER:10250").await,
        (StatusCode::ACCEPTED, json!({"accepted": 1, "redacted": 2}))
    );
    assert_eq!(
        stored_message(&app).await,
        "trawl-0 lost [redacted] at https://[redacted]"
    );
}

#[tokio::test]
async fn a_changed_node_names_file_is_picked_up_while_serving() {
    let (app, _dir, file) = with_node_file("tidewater\n").await;
    // A modification time the watcher can tell apart on every filesystem.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&file, "tidewater\nbigiron\n").unwrap();
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
    assert_eq!(
        report_event(&app, "Node rack3-blade12 status is now: NodeNotReady").await,
        (StatusCode::ACCEPTED, json!({"accepted": 1, "redacted": 1}))
    );
    assert_eq!(
        stored_message(&app).await,
        "Node [redacted] status is now: NodeNotReady"
    );
}

#[test]
fn an_unreadable_node_names_file_fails_the_start() {
    let mut settings = muster::Settings::new("postgres://unused@127.0.0.1:1/x");
    settings.node_names = Some("/nonexistent/muster-nodes.txt".into());
    let error = muster::build(&settings).err().expect("the start fails");
    assert!(
        format!("{error:#}").contains("read node names /nonexistent/muster-nodes.txt"),
        "{error:#}"
    );
}

#[test]
fn a_node_names_file_without_a_name_fails_the_start() {
    let dir = TempDir::new("muster-nodes");
    let file = dir.0.join("nodes.txt");
    std::fs::write(&file, "# nothing yet\n\n").unwrap();
    let mut settings = muster::Settings::new("postgres://unused@127.0.0.1:1/x");
    settings.node_names = Some(file.clone());
    let error = muster::build(&settings).err().expect("the start fails");
    assert!(
        format!("{error:#}").contains("the file lists no node name"),
        "{error:#}"
    );
}

#[tokio::test]
async fn a_node_names_file_emptied_while_serving_keeps_the_last_names() {
    let (app, _dir, file) = with_node_file("tidewater\n").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&file, "").unwrap();
    // Two housekeeping ticks: the empty file has been looked at.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(
        report_event(&app, "tidewater rebooted").await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(stored_message(&app).await, "[redacted] rebooted");
}
