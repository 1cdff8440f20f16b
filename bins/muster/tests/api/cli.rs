//! The operator CLI end to end: the real `muster` binary against a real server, through the
//! HTTP API with a token, its output and exit codes exactly.

use std::process::Command;

use hyper::StatusCode;
use serde_json::{Value, json};

use crate::harness::{TestApp, token};

/// What one run of the binary did.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `muster ARGS` against `url` with the token of `principal` (run off the runtime's thread,
/// which serves the app).
async fn muster_at(url: String, principal: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_muster"));
    cmd.args(args)
        .env("MUSTER_URL", url)
        .env("MUSTER_API_TOKEN", token(principal));
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("the blocking task")
        .expect("run muster");
    Run {
        code: out.status.code().expect("an exit code"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8"),
    }
}

async fn muster(app: &TestApp, principal: &str, args: &[&str]) -> Run {
    muster_at(app.url(), principal, args).await
}

fn ok(stdout: impl Into<String>) -> Run {
    Run {
        code: 0,
        stdout: stdout.into(),
        stderr: String::new(),
    }
}

/// The `E_…` error answer of a call as the CLI prints it.
fn refused(code: i32, status: u16, answer: &Value) -> Run {
    Run {
        code,
        stdout: String::new(),
        stderr: format!(
            "muster: the server answered {status} {}: {}\n",
            answer["error"]["code"].as_str().unwrap(),
            answer["error"]["message"].as_str().unwrap()
        ),
    }
}

/// Enqueues one `kind` item, leases it and fails it for good; its id.
async fn failed_item(app: &TestApp, kind: &str) -> String {
    let id = app.enqueue(kind, "normal", json!({})).await;
    let lease = app.lease(kind, "w").await.expect("a lease");
    let r = app.fail_with(&lease, "E_PARSE", "bad page", false).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    id
}

/// Waits until `GET /v1/queues`, answered from the feed's depths (which follow the ledger a
/// moment after each commit), counts `items` items in all.
async fn until_depths_count(app: &TestApp, items: i64) {
    let mut counted = -1;
    for _ in 0..300 {
        let q = app.get("/v1/queues", "operator").await;
        counted = q.body["depths"]
            .as_array()
            .expect("depths")
            .iter()
            .map(|d| d["count"].as_i64().expect("a count"))
            .sum();
        if counted == items {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the depths counted {counted} items, not {items}");
}

fn s(v: &Value) -> &str {
    v.as_str().expect("a string")
}

/// A row of `items list` as the API describes the item.
fn list_row(item: &Value) -> String {
    let error = if item["last_error"].is_null() {
        String::new()
    } else {
        format!(
            "{}: {}",
            s(&item["last_error"]["code"]),
            s(&item["last_error"]["message"])
        )
    };
    let line = format!(
        "{:<36}  {:<11}  {:<8}  {:<13}  {:>7}  {:<27}  {error}",
        s(&item["id"]),
        s(&item["kind"]),
        s(&item["priority"]),
        s(&item["state"]),
        item["attempt"].to_string(),
        s(&item["updated_at"]),
    );
    format!("{}\n", line.trim_end())
}

const LIST_HEADING: &str = "ID                                    KIND         PRIORITY  STATE          ATTEMPT  UPDATED                      LAST ERROR\n";

#[tokio::test]
async fn items_list_prints_every_matching_item_oldest_first_as_a_table() {
    let app = TestApp::spawn().await;
    let failed = failed_item(&app, "trawl").await;
    app.enqueue("sextant", "normal", json!({})).await;
    let queued = app.enqueue("trawl", "urgent", json!({})).await;
    let api = app.get("/v1/items?kind=trawl", "operator").await.body;
    let [a, b] = [&api["items"][0], &api["items"][1]];
    assert_eq!(
        (s(&a["id"]), s(&b["id"])),
        (failed.as_str(), queued.as_str())
    );
    assert_eq!(
        muster(&app, "operator", &["items", "list", "--kind", "trawl"]).await,
        ok(format!("{LIST_HEADING}{}{}", list_row(a), list_row(b)))
    );
}

#[tokio::test]
async fn items_list_filters_by_state_and_priority() {
    let app = TestApp::spawn().await;
    failed_item(&app, "trawl").await;
    app.enqueue("trawl", "normal", json!({})).await;
    let urgent = app.enqueue("trawl", "urgent", json!({})).await;
    let run = muster(
        &app,
        "conn",
        &[
            "items",
            "list",
            "--state",
            "queued",
            "--priority",
            "urgent",
            "--json",
        ],
    )
    .await;
    let ids: Vec<String> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line")["id"].to_string())
        .collect();
    assert_eq!((run.code, ids), (0, vec![format!("\"{urgent}\"")]));
}

#[tokio::test]
async fn items_list_json_pages_through_more_than_one_page_one_item_a_line() {
    let app = TestApp::spawn().await;
    app.enqueue_many("assay", "backfill", 501).await;
    let run = muster(&app, "operator", &["items", "list", "--json"]).await;
    let mut api = app.get("/v1/items?limit=500", "operator").await.body["items"]
        .as_array()
        .unwrap()
        .clone();
    let next = s(&api[499]["id"]).to_owned();
    api.extend(
        app.get(&format!("/v1/items?limit=500&after={next}"), "operator")
            .await
            .body["items"]
            .as_array()
            .unwrap()
            .clone(),
    );
    let printed: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!((run.code, printed.len(), printed), (0, 501, api));
}

#[tokio::test]
async fn items_show_prints_the_item_and_its_history() {
    let app = TestApp::spawn().await;
    let id = failed_item(&app, "trawl").await;
    let item = app.item(&id).await;
    let h = item["history"].as_array().unwrap();
    assert_eq!(h.len(), 3, "{h:?}");
    let mut expected = format!(
        "id          {id}\nkind        trawl\npriority    normal\nstate       failed\nattempt     1\n\
         not_before  -\ncreated_at  {}\npayload     {{}}\nresult      -\nhistory:\n",
        s(&item["created_at"])
    );
    let rows: Vec<[String; 7]> = h
        .iter()
        .map(|e| {
            ["seq", "at", "event", "from", "to", "actor", "fence"].map(|f| match &e[f] {
                Value::Null => "-".to_owned(),
                Value::String(v) => v.clone(),
                v => v.to_string(),
            })
        })
        .collect();
    let width = |i: usize, title: &str| {
        rows.iter()
            .map(|r| r[i].len())
            .chain([title.len()])
            .max()
            .unwrap()
    };
    let titles = ["SEQ", "AT", "EVENT", "FROM", "TO", "ACTOR", "FENCE"];
    let w: Vec<usize> = titles
        .iter()
        .enumerate()
        .map(|(i, t)| width(i, t))
        .collect();
    for row in std::iter::once(titles.map(str::to_owned)).chain(rows) {
        let line = format!(
            "{:>w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:<w4$}  {:<w5$}  {:>w6$}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5],
            w6 = w[6]
        );
        expected.push_str(line.trim_end());
        expected.push('\n');
    }
    assert_eq!(
        muster(&app, "conn", &["items", "show", &id]).await,
        ok(expected)
    );
}

#[tokio::test]
async fn items_show_json_prints_the_apis_answer() {
    let app = TestApp::spawn().await;
    let id = app.enqueue("trawl", "normal", json!({"page": 7})).await;
    let run = muster(&app, "operator", &["items", "show", &id, "--json"]).await;
    let printed: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!((run.code, printed), (0, app.item(&id).await));
}

#[tokio::test]
async fn items_show_of_an_unknown_item_exits_1_with_not_found() {
    let app = TestApp::spawn().await;
    let id = "0192a3b4-0000-7000-8000-000000000000";
    let answer = app.get(&format!("/v1/items/{id}"), "operator").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(
        muster(&app, "operator", &["items", "show", id]).await,
        refused(1, 404, &answer.body)
    );
}

#[tokio::test]
async fn items_retry_sends_one_failed_item_back_to_the_queue() {
    let app = TestApp::spawn().await;
    let id = failed_item(&app, "trawl").await;
    assert_eq!(
        muster(&app, "operator", &["items", "retry", &id]).await,
        ok(format!("{id}  queued\n"))
    );
    assert_eq!(app.item(&id).await["state"], "queued");
}

#[tokio::test]
async fn items_retry_kind_sends_the_kinds_failed_items_back_oldest_first() {
    let app = TestApp::spawn().await;
    let a = failed_item(&app, "trawl").await;
    let b = failed_item(&app, "trawl").await;
    failed_item(&app, "sextant").await;
    assert_eq!(
        muster(&app, "operator", &["items", "retry", "--kind", "trawl"]).await,
        ok(format!("retried 2\n{a}\n{b}\n"))
    );
}

#[tokio::test]
async fn items_retry_kind_max_retries_at_most_that_many() {
    let app = TestApp::spawn().await;
    let a = failed_item(&app, "trawl").await;
    failed_item(&app, "trawl").await;
    let run = muster(
        &app,
        "operator",
        &["items", "retry", "--kind", "trawl", "--max", "1", "--json"],
    )
    .await;
    let printed: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(
        (run.code, printed),
        (0, json!({"retried": 1, "item_ids": [a]}))
    );
}

#[tokio::test]
async fn conn_may_not_retry_and_exits_1_with_the_refusal() {
    let app = TestApp::spawn().await;
    let id = failed_item(&app, "trawl").await;
    let answer = app
        .post("/v1/items/retry", "conn", json!({"kind": "trawl"}))
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(
        muster(&app, "conn", &["items", "retry", "--kind", "trawl"]).await,
        refused(1, 403, &answer.body)
    );
    assert_eq!(app.item(&id).await["state"], "failed");
}

#[tokio::test]
async fn a_worker_token_is_refused_listing_with_403_and_exit_1() {
    let app = TestApp::spawn().await;
    let answer = app.get("/v1/items?limit=500", "worker:trawl").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(
        muster(&app, "worker:trawl", &["items", "list"]).await,
        refused(1, 403, &answer.body)
    );
}

#[tokio::test]
async fn a_worker_token_is_refused_health_with_403_and_exit_1() {
    let app = TestApp::spawn().await;
    let answer = app.get("/v1/health", "worker:trawl").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(
        muster(&app, "worker:trawl", &["health"]).await,
        refused(1, 403, &answer.body)
    );
}

#[tokio::test]
async fn an_unknown_token_exits_1_and_is_not_printed() {
    let app = TestApp::spawn().await;
    let run = muster(&app, "nobody", &["queues"]).await;
    assert_eq!(
        (
            run.code,
            run.stderr
                .starts_with("muster: the server answered 401 E_UNAUTHENTICATED: ")
        ),
        (1, true),
        "{run:?}"
    );
    assert!(!run.stderr.contains(&token("nobody")), "{run:?}");
}

#[tokio::test]
async fn queues_prints_a_row_per_kind_and_priority_with_a_column_per_state() {
    let app = TestApp::spawn().await;
    failed_item(&app, "trawl").await;
    app.enqueue_many("trawl", "normal", 2).await;
    app.enqueue("trawl", "urgent", json!({})).await;
    app.enqueue("countersign", "backfill", json!({})).await;
    until_depths_count(&app, 5).await;
    assert_eq!(
        muster(&app, "conn", &["queues"]).await,
        ok(
            "KIND         PRIORITY  QUEUED  LEASED  PARKED  FAILED  DONE  CANCELLED\n\
            trawl        urgent         1       0       0       0     0          0\n\
            trawl        normal         2       0       0       1     0          0\n\
            countersign  backfill       1       0       0       0     0          0\n"
        )
    );
}

#[tokio::test]
async fn health_prints_each_kinds_state_and_its_newest_reports_events() {
    let app = TestApp::spawn().await;
    let r = app
        .report_health(json!({
            "pods": [{"kind": "assay", "ready": false, "restarts": 4, "phase": "Running"}],
            "events": [{"kind": "assay", "reason": "BackOff", "message": "restarting"}]}))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let at = app.get("/v1/health", "operator").await.body["kinds"][0]["at"].clone();
    let at = s(&at);
    assert_eq!(
        muster(&app, "operator", &["health"]).await,
        ok(format!(
            "KIND   READY  PHASE    RESTARTS  DIGEST  AT\n\
             assay  false  Running         4  -       {at}\n\
             \n\
             KIND   EVENT    MESSAGE\n\
             assay  BackOff  restarting\n"
        ))
    );
}

#[tokio::test]
async fn a_server_that_cannot_be_reached_exits_3() {
    let addr = muster_testkit::dead_addr().await;
    let run = muster_at(format!("http://{addr}"), "operator", &["queues"]).await;
    assert_eq!(
        (
            run.code,
            run.stderr
                .starts_with(&format!("muster: cannot reach http://{addr}: "))
        ),
        (3, true),
        "{run:?}"
    );
}

#[tokio::test]
async fn an_unknown_state_is_a_usage_error_exiting_2() {
    let app = TestApp::spawn().await;
    let run = muster(&app, "operator", &["items", "list", "--state", "lost"]).await;
    assert_eq!((run.code, run.stdout.as_str()), (2, ""));
}

/// Enqueues one `kind` item, leases it and parks it (needs_subtool); its id.
async fn parked_item(app: &TestApp, kind: &str) -> String {
    let id = app.enqueue(kind, "normal", json!({})).await;
    let lease = app.lease(kind, "w").await.expect("a lease");
    let digest = format!("sha256:{}", "a".repeat(64));
    let r = app
        .needs_subtool(
            &lease,
            json!({"worker_digest": digest, "layout": {"signature": "s"}}),
        )
        .await;
    assert_eq!(r.body["state"], "needs_subtool", "{:?}", r.body);
    id
}

#[tokio::test]
async fn items_retry_takes_parked_items_one_or_a_kinds_with_state_needs_subtool() {
    let app = TestApp::spawn().await;
    let one = parked_item(&app, "trawl").await;
    assert_eq!(
        muster(&app, "operator", &["items", "retry", &one]).await,
        ok(format!("{one}  queued\n"))
    );
    let a = parked_item(&app, "sextant").await;
    failed_item(&app, "sextant").await;
    assert_eq!(
        muster(
            &app,
            "operator",
            &[
                "items",
                "retry",
                "--kind",
                "sextant",
                "--state",
                "needs_subtool"
            ]
        )
        .await,
        ok(format!("retried 1\n{a}\n"))
    );
    assert_eq!(app.item(&a).await["state"], "queued");
}

#[tokio::test]
async fn items_cancel_cancels_one_item_or_a_kinds_items_in_a_state_with_the_reason() {
    let app = TestApp::spawn().await;
    let one = app.enqueue("trawl", "normal", json!({})).await;
    assert_eq!(
        muster(
            &app,
            "operator",
            &["items", "cancel", &one, "--reason", "wrong payload"]
        )
        .await,
        ok(format!("{one}  cancelled\n"))
    );
    let history = app.item(&one).await["history"].clone();
    assert_eq!(history[1]["event"], "cancelled");
    let a = failed_item(&app, "sextant").await;
    let b = failed_item(&app, "sextant").await;
    let run = muster(
        &app,
        "operator",
        &[
            "items",
            "cancel",
            "--kind",
            "sextant",
            "--state",
            "failed",
            "--max",
            "1",
            "--reason",
            "never again",
            "--json",
        ],
    )
    .await;
    let printed: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(
        (run.code, printed),
        (0, json!({"cancelled": 1, "item_ids": [a]}))
    );
    assert_eq!(app.item(&b).await["state"], "failed");
    // A done item cannot be cancelled: the refusal, exit 1.
    let done = app.enqueue("assay", "normal", json!({})).await;
    let lease = app.lease("assay", "w").await.unwrap();
    app.complete(&lease, json!({"result": {}})).await;
    let answer = app.cancel(&done, "x").await;
    assert_eq!(
        muster(
            &app,
            "operator",
            &["items", "cancel", &done, "--reason", "x"]
        )
        .await,
        refused(1, 409, &answer.body)
    );
    // A bulk cancel names its state.
    let run = muster(
        &app,
        "operator",
        &["items", "cancel", "--kind", "trawl", "--reason", "x"],
    )
    .await;
    assert_eq!(run.code, 2, "{run:?}");
}

#[tokio::test]
async fn kinds_pause_and_resume_print_the_state_and_queues_lists_the_paused_kinds() {
    let app = TestApp::spawn().await;
    let run = muster(
        &app,
        "operator",
        &["kinds", "pause", "trawl", "--reason", "bad image"],
    )
    .await;
    let since = app
        .scalar_text(
            "SELECT to_char(since AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') FROM core.kind_pauses",
        )
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .starts_with(&format!("trawl  paused  since {since}")),
        "{run:?}"
    );
    assert!(app.lease("trawl", "w").await.is_none());
    app.enqueue("trawl", "normal", json!({})).await;
    until_depths_count(&app, 1).await;
    let mut listed = String::new();
    for _ in 0..300 {
        listed = muster(&app, "conn", &["queues"]).await.stdout;
        if listed.ends_with("\npaused: trawl\n") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        listed,
        "KIND   PRIORITY  QUEUED  LEASED  PARKED  FAILED  DONE  CANCELLED\n\
         trawl  normal         1       0       0       0     0          0\n\
         \n\
         paused: trawl\n"
    );
    let run = muster(&app, "operator", &["kinds", "resume", "trawl", "--json"]).await;
    let printed: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!((run.code, &printed["paused"]), (0, &json!(false)));
    assert!(app.lease("trawl", "w").await.is_some());
    // Conn may not; an unknown kind is a usage error.
    let answer = app
        .put("/v1/kinds/trawl/paused", "conn", json!({"paused": false}))
        .await;
    assert_eq!(
        muster(&app, "conn", &["kinds", "resume", "trawl"]).await,
        refused(1, 403, &answer.body)
    );
    assert_eq!(
        muster(
            &app,
            "operator",
            &["kinds", "pause", "dredge", "--reason", "x"]
        )
        .await
        .code,
        2
    );
}
