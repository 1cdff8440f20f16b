//! Anonymous edit intake: the five layers and the review gate, on a real PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Resp, TestApp};

const MAP: &str = r#"{"version": 1, "targets": {"docs/intro": {"owner": "alice", "title": "Intro"},
                                                 "docs/faq": {"owner": "bob", "title": "FAQ"}}}"#;

/// An ownership map file, removed when the test is done.
struct MapFile(std::path::PathBuf);

impl std::ops::Deref for MapFile {
    type Target = std::path::PathBuf;
    fn deref(&self) -> &std::path::PathBuf {
        &self.0
    }
}

impl AsRef<std::path::Path> for MapFile {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for MapFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A server with an ownership map, a quick proof of work and a daily cap of `cap`.
async fn intake_app(cap: u32) -> (TestApp, MapFile) {
    let map = std::env::temp_dir().join(format!("muster-map-{}.json", uuid::Uuid::now_v7()));
    std::fs::write(&map, MAP).unwrap();
    let app = TestApp::spawn_with(intake_settings(&map, cap)).await;
    (app, MapFile(map))
}

/// An intake with the ownership map at `map`, proofs of work of difficulty 8 and a daily cap
/// of `cap` edits per client.
fn intake_settings(map: &std::path::Path, cap: u32) -> impl FnOnce(&mut muster::Settings) {
    let map = map.to_path_buf();
    move |s| {
        s.ownership_map = Some(map);
        s.pow_difficulty = 8;
        s.edit_daily_limit = cap;
    }
}

async fn solved_pow(app: &TestApp) -> Value {
    let c = app.post("/v1/edits/challenge", "conn", json!({})).await;
    assert_eq!(c.status, StatusCode::OK, "{:?}", c.body);
    let token = c.body["challenge"].as_str().unwrap().to_owned();
    let nonce = muster_antispam::solve(
        &token,
        c.body["difficulty"].as_u64().unwrap() as u8,
        10_000_000,
    )
    .unwrap();
    json!({"challenge": token, "nonce": nonce})
}

async fn submit(app: &TestApp, ip: Option<&str>, body: Value) -> Resp {
    let mut req = hyper::Request::builder()
        .method(Method::POST)
        .uri(format!("http://{}/v1/edits", app.addr))
        .header(
            "authorization",
            format!("Bearer {}", crate::harness::token("conn")),
        )
        .header("content-type", "application/json");
    if let Some(ip) = ip {
        req = req.header("x-client-ip", ip);
    }
    app.send(req, body.to_string().into_bytes()).await
}

async fn proposal(app: &TestApp, text: &str) -> Value {
    json!({"target": "docs/intro", "body": text, "website": "", "pow": solved_pow(app).await})
}

#[tokio::test]
async fn a_valid_proposal_is_held_for_review_as_plain_text_and_announced_on_the_feed() {
    let (app, _map) = intake_app(10).await;
    let mut feed = app.events("conn", None).await;
    let body = proposal(
        &app,
        "<p>Better <b>wording</b><script>alert(1)</script> &amp; more</p>",
    )
    .await;
    let r = submit(&app, Some("203.0.113.7"), body).await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (StatusCode::ACCEPTED, Some("pending_approval"))
    );
    let id = r.body["edit_id"].as_str().unwrap().to_owned();
    let list = app
        .get("/v1/edits?state=pending_approval", "worker:countersign")
        .await;
    assert_eq!(list.status, StatusCode::OK);
    let e = &list.body["edits"][0];
    assert_eq!(
        (
            e["edit_id"].as_str(),
            e["target"].as_str(),
            e["owner"].as_str(),
            e["body"].as_str(),
            e["state"].as_str()
        ),
        (
            Some(id.as_str()),
            Some("docs/intro"),
            Some("alice"),
            Some("Better wording & more"),
            Some("pending_approval")
        )
    );
    let ev = feed
        .next_named("edit", Duration::from_secs(5))
        .await
        .expect("an edit event");
    assert_eq!(
        (
            ev.data["edit_id"].as_str(),
            ev.data["target"].as_str(),
            ev.data["state"].as_str()
        ),
        (
            Some(id.as_str()),
            Some("docs/intro"),
            Some("pending_approval")
        )
    );
    app.verify_ledger().await;
}

#[tokio::test]
async fn the_same_challenge_submitted_twice_at_once_is_accepted_exactly_once() {
    let (app, _map) = intake_app(10).await;
    let app = Arc::new(app);
    let body = proposal(&app, "text").await;
    let tasks: Vec<_> = (0..2)
        .map(|i| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(
                async move { submit(&app, Some(&format!("203.0.113.{}", 10 + i)), body).await },
            )
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        let r = t.await.unwrap();
        statuses.push((r.status.as_u16(), r.code().to_owned()));
    }
    statuses.sort();
    assert_eq!(statuses, [(202, String::new()), (400, "E_POW".to_owned())]);
    assert_eq!(app.count("core.edits").await, 1);
}

#[tokio::test]
async fn a_filled_honeypot_gets_an_ordinary_answer_and_nothing_is_stored_or_published() {
    let (app, _map) = intake_app(10).await;
    let mut feed = app.events("conn", None).await;
    let mut body = proposal(&app, "buy now").await;
    body["website"] = json!("http://spam.example");
    let r = submit(&app, Some("203.0.113.7"), body).await;
    assert_eq!(
        (r.status, r.body["state"].as_str()),
        (StatusCode::ACCEPTED, Some("pending_approval"))
    );
    assert!(r.body["edit_id"].is_string());
    for table in ["core.edits", "core.ledger"] {
        assert_eq!(app.count(table).await, 0, "{table}");
    }
    assert!(
        feed.next_named("transition", std::time::Duration::from_millis(500))
            .await
            .is_none()
    );
}

#[tokio::test]
async fn a_filled_honeypot_spends_its_challenge_and_counts_against_the_cap_like_an_accepted_one() {
    let (app, _map) = intake_app(10).await;
    let mut body = proposal(&app, "buy now").await;
    body["website"] = json!("http://spam.example");
    submit(&app, Some("203.0.113.7"), body.clone()).await;
    assert_eq!(
        (
            app.count("core.pow_spent").await,
            app.count("core.intake_counts").await
        ),
        (1, 1)
    );
    // The same challenge again: refused as a spent one, as anyone's would be.
    let again = submit(&app, Some("203.0.113.7"), body).await;
    again.assert_error(StatusCode::BAD_REQUEST, "E_POW");
}

#[tokio::test]
async fn a_filled_honeypot_with_a_wrong_proof_of_work_gets_the_same_e_pow() {
    let (app, _map) = intake_app(10).await;
    let mut body = proposal(&app, "buy now").await;
    body["website"] = json!("http://spam.example");
    body["pow"]["nonce"] = json!("1");
    let r = submit(&app, Some("203.0.113.7"), body).await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_POW");
}

#[tokio::test]
async fn each_bad_submission_gets_its_contract_error() {
    let (app, _map) = intake_app(10).await;
    let big = json!({"target": "docs/intro", "body": "x".repeat(5000), "website": "", "pow": {"challenge": "c", "nonce": "1"}});
    let r = submit(&app, Some("203.0.113.7"), big).await;
    r.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "E_TOO_LARGE");
    let r = submit(&app, None, proposal(&app, "t").await).await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
    let r = submit(&app, Some("not-an-ip"), proposal(&app, "t").await).await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
    let mut wrong = proposal(&app, "t").await;
    wrong["target"] = json!("docs/nowhere");
    let r = submit(&app, Some("203.0.113.7"), wrong).await;
    r.assert_error(StatusCode::UNPROCESSABLE_ENTITY, "E_TARGET");
    let mut lazy = proposal(&app, "t").await;
    lazy["pow"]["nonce"] = json!("99999999999999999999");
    let r = submit(&app, Some("203.0.113.7"), lazy).await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_POW");
    let r = submit(&app, Some("203.0.113.7"), json!({"target": "docs/intro", "body": "t", "pow": {"challenge": "c", "nonce": "1"}, "extra": 1})).await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
    assert_eq!(app.count("core.edits").await, 0);
}

#[tokio::test]
async fn the_daily_cap_holds_across_two_processes_and_an_ipv6_64_counts_as_one_client() {
    let (a, map) = intake_app(3).await;
    let b = TestApp::spawn_on(a.db.clone(), intake_settings(&map, 3)).await;
    let mut statuses = Vec::new();
    for (i, app) in [&a, &b, &a, &b].into_iter().enumerate() {
        let ip = format!("2001:db8:1:2::{}", i + 1);
        let r = submit(app, Some(&ip), proposal(app, "t").await).await;
        statuses.push(r.status.as_u16());
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(r.code(), "E_RATE_LIMITED");
            let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
            assert!((1..=86_400).contains(&retry));
        }
    }
    assert_eq!(statuses, [202, 202, 202, 429]);
    let other = submit(&b, Some("2001:db8:1:3::1"), proposal(&b, "t").await).await;
    assert_eq!(
        other.status,
        StatusCode::ACCEPTED,
        "another /64 is another client"
    );
}

#[tokio::test]
async fn an_over_limit_client_burns_no_challenge() {
    let (app, _map) = intake_app(1).await;
    submit(&app, Some("198.51.100.1"), proposal(&app, "t").await).await;
    let body = proposal(&app, "t").await;
    let refused = submit(&app, Some("198.51.100.1"), body.clone()).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let other = submit(&app, Some("198.51.100.2"), body).await;
    assert_eq!(
        other.status,
        StatusCode::ACCEPTED,
        "the refused request spent the challenge"
    );
}

#[tokio::test]
async fn only_the_targets_owner_decides_and_nothing_changes_without_a_decision() {
    let (app, _map) = intake_app(10).await;
    let r = submit(&app, Some("203.0.113.7"), proposal(&app, "t").await).await;
    let id = r.body["edit_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/edits/{id}/decision");
    let decide = |principal, decision, owner| {
        app.post(
            &path,
            principal,
            json!({"decision": decision, "owner": owner}),
        )
    };
    let wrong = decide("worker:countersign", "approve", "bob").await;
    wrong.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
    let not_countersign = decide("operator", "approve", "alice").await;
    assert_eq!(not_countersign.status, StatusCode::FORBIDDEN);
    let pending = app
        .get("/v1/edits?state=pending_approval", "operator")
        .await;
    assert_eq!(pending.body["edits"].as_array().unwrap().len(), 1);
    let ok = decide("worker:countersign", "approve", "alice").await;
    assert_eq!(ok.body, json!({"edit_id": id, "state": "approved"}));
    let again = decide("worker:countersign", "reject", "alice").await;
    again.assert_error(StatusCode::CONFLICT, "E_CONFLICT");
    let approved = app.get("/v1/edits?state=approved", "operator").await;
    assert_eq!(approved.body["edits"][0]["edit_id"], json!(id));
    app.verify_ledger().await;
}

/// Several hundred submissions from as many addresses through a real `muster` process with
/// debug logging: neither a full dump of Logbook nor the process's whole log holds any address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_ip_reaches_the_database_or_the_log() {
    let db = muster_testkit::fresh_db().await;
    let dir = crate::harness::TempDir::new("muster-ips");
    let map = dir.0.join("ownership_map.json");
    std::fs::write(&map, MAP).unwrap();
    let log = dir.0.join("muster.log");
    let (mut serve, addr) = crate::harness::serve_process(&db.app_url, &dir);
    let mut child = crate::harness::KillOnDrop(Some(
        serve
            .env("MUSTER_OWNERSHIP_MAP", &map)
            .env("MUSTER_POW_DIFFICULTY", "8")
            .env("MUSTER_EDIT_DAILY_LIMIT", "2")
            .env("RUST_LOG", "debug")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start muster"),
    ));
    let app = TestApp::attach(db, addr).await;
    let ips: Vec<String> = (0..300)
        .map(|i| {
            if i % 3 == 0 {
                format!("2001:db8:{:x}:{:x}::{:x}", i / 7, i, i + 1)
            } else {
                format!("198.51.{}.{}", i / 200, i % 200 + 1)
            }
        })
        .collect();
    for (i, ip) in ips.iter().enumerate() {
        let mut body = proposal(&app, &format!("proposal {i}")).await;
        match i % 10 {
            0 => body["website"] = json!("bot"),
            1 => body["pow"]["nonce"] = json!("1"),
            _ => {}
        }
        let r = submit(&app, Some(ip), body.clone()).await;
        assert!(matches!(r.status.as_u16(), 202 | 400), "{ip}: {:?}", r.body);
        if i % 10 == 2 {
            // Over the daily cap of 2: the third from the same address is refused.
            submit(&app, Some(ip), proposal(&app, "again").await).await;
            let r = submit(&app, Some(ip), proposal(&app, "and again").await).await;
            assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        }
    }
    assert!(app.count("core.edits").await >= 200);
    let pg_dump = muster_devdb::find_bin("pg_dump").expect("pg_dump");
    let out = std::process::Command::new(pg_dump)
        .args(["-d", &app.db.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump = String::from_utf8_lossy(&out.stdout).into_owned();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.take().wait().unwrap().success());
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        dump.contains("proposal 5") && logged.contains("muster serving"),
        "the dump and the log are real"
    );
    for ip in &ips {
        assert!(
            !dump.contains(ip.as_str()),
            "{ip} found in the database dump"
        );
        assert!(
            !logged.contains(ip.as_str()),
            "{ip} found in the server log"
        );
    }
}

#[tokio::test]
async fn expired_salts_counters_and_challenges_are_purged_at_the_day_boundary() {
    use muster_app::ports::IntakeLog;
    let app = TestApp::spawn().await;
    let c = app.db.client().await;
    c.batch_execute(
        "INSERT INTO core.intake_salts VALUES ('2026-12-01', decode(repeat('01', 32), 'hex')), ('2026-12-02', decode(repeat('02', 32), 'hex'));
         INSERT INTO core.intake_counts VALUES ('2026-12-01', decode(repeat('0a', 32), 'hex'), 3), ('2026-12-02', decode(repeat('0b', 32), 'hex'), 1);
         INSERT INTO core.pow_spent VALUES (decode(repeat('0c', 32), 'hex'), '2026-12-02 00:04:00+00'), (decode(repeat('0d', 32), 'hex'), '2026-12-02 00:06:00+00');",
    )
    .await
    .unwrap();
    let logbook = muster_pg::PgLogbook::new(app.db.pool());
    let now = time::macros::datetime!(2026-12-02 00:05:00 UTC);
    let purged = logbook.purge_intake(now.date(), now).await.unwrap();
    assert_eq!(purged, 3);
    let days: Vec<String> = c.query("SELECT day::text FROM core.intake_salts UNION ALL SELECT day::text FROM core.intake_counts", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(days, ["2026-12-02", "2026-12-02"]);
}

#[tokio::test]
async fn a_changed_ownership_map_is_picked_up_and_a_broken_one_keeps_the_last_good_map() {
    let (app, map) = intake_app(10).await;
    std::fs::write(&map, "{ not json").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = submit(&app, Some("203.0.113.7"), proposal(&app, "t").await).await;
    assert_eq!(
        r.status,
        StatusCode::ACCEPTED,
        "the last good map stays in force"
    );
    std::fs::write(
        &map,
        r#"{"version": 1, "targets": {"docs/new": {"owner": "carol", "title": "New"}}}"#,
    )
    .unwrap();
    let mut accepted = false;
    for _ in 0..50 {
        let mut body = proposal(&app, "t").await;
        body["target"] = json!("docs/new");
        if submit(&app, Some("203.0.113.8"), body).await.status == StatusCode::ACCEPTED {
            accepted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(accepted, "the new map was not picked up");
}

#[tokio::test]
async fn a_restart_does_not_reset_the_daily_cap() {
    let (first, map) = intake_app(1).await;
    let r = submit(&first, Some("192.0.2.44"), proposal(&first, "t").await).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    first.stop().await;
    let again = TestApp::spawn_on(first.db.clone(), intake_settings(&map, 1)).await;
    let r = submit(&again, Some("192.0.2.44"), proposal(&again, "t").await).await;
    r.assert_error(StatusCode::TOO_MANY_REQUESTS, "E_RATE_LIMITED");
}

#[tokio::test]
async fn an_edits_transitions_on_the_feed_carry_its_target_and_its_decision_event_too() {
    let (app, _map) = intake_app(10).await;
    let mut feed = app.events("conn", None).await;
    let r = submit(&app, Some("203.0.113.7"), proposal(&app, "t").await).await;
    let id = r.body["edit_id"].as_str().unwrap().to_owned();
    let ok = app.decide_edit(&id, "reject").await;
    assert_eq!(ok.status, StatusCode::OK, "{:?}", ok.body);
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let e = feed
            .next_within(Duration::from_secs(5))
            .await
            .expect("an event");
        if e.event == "transition" || e.event == "edit" {
            seen.push((
                e.event,
                e.data["to"]
                    .as_str()
                    .or(e.data["state"].as_str())
                    .map(str::to_owned),
                e.data["target"].clone(),
            ));
        }
    }
    let target = json!("docs/intro");
    assert_eq!(
        seen,
        [
            (
                "transition".to_owned(),
                Some("pending_approval".to_owned()),
                target.clone()
            ),
            (
                "edit".to_owned(),
                Some("pending_approval".to_owned()),
                target.clone()
            ),
            (
                "transition".to_owned(),
                Some("rejected".to_owned()),
                target.clone()
            ),
            ("edit".to_owned(), Some("rejected".to_owned()), target),
        ]
    );
}

#[tokio::test]
async fn an_items_transition_carries_no_target() {
    let app = TestApp::spawn().await;
    let mut feed = app.events("conn", None).await;
    app.enqueue("trawl", "normal", json!({})).await;
    let t = feed
        .next_named("transition", Duration::from_secs(5))
        .await
        .expect("a transition");
    assert_eq!(
        (t.data["subject"].as_str(), t.data.get("target")),
        (Some("item"), None)
    );
}
