//! `/metrics`: what an operator graphs.

use serde_json::json;

use crate::harness::TestApp;

async fn scrape(app: &TestApp) -> String {
    app.metrics().await
}

fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix))
}

#[tokio::test]
async fn metrics_count_the_work_and_the_answers_without_a_token() {
    let app = TestApp::spawn().await;
    app.enqueue_many("trawl", "urgent", 2).await;
    let l = app.lease("trawl", "w").await.unwrap();
    app.complete(&l, json!({"result": {}})).await;
    app.heartbeat(&l, "w").await;
    let m = app
        .metrics_with_line(|l| {
            l == r#"muster_queue_depth{kind="trawl",priority="urgent",state="queued"} 1"#
        })
        .await;
    assert_eq!(
        line(&m, r#"muster_leases_granted_total{kind="trawl"}"#),
        Some(r#"muster_leases_granted_total{kind="trawl"} 1"#)
    );
    assert_eq!(
        line(&m, r#"muster_completions_total{kind="trawl"}"#),
        Some(r#"muster_completions_total{kind="trawl"} 1"#)
    );
    assert_eq!(
        line(
            &m,
            r#"muster_queue_depth{kind="trawl",priority="urgent",state="queued"}"#
        ),
        Some(r#"muster_queue_depth{kind="trawl",priority="urgent",state="queued"} 1"#)
    );
    assert!(
        m.contains(r#"muster_http_requests_total{route="/v1/leases/{id}/heartbeat",method="POST",status="409",code="E_LEASE_LOST"} 1"#),
        "{m}"
    );
    assert!(
        line(
            &m,
            r#"muster_oldest_queued_age_seconds{kind="trawl",priority="urgent"}"#
        )
        .is_some()
    );
    assert!(line(&m, "muster_db_pool_max ").is_some());
    assert!(
        line(
            &m,
            r#"muster_http_request_duration_seconds_count{route="/v1/leases",method="POST"}"#
        )
        .is_some()
    );
}

#[tokio::test]
async fn metrics_count_group_commit_transactions_and_the_requests_in_them() {
    let app = TestApp::spawn().await;
    let l = app.enqueue_and_lease("trawl").await;
    app.complete(&l, json!({"result": {}})).await;
    let m = scrape(&app).await;
    let wanted = [
        r#"muster_lease_groups_total{kind="trawl"} 1"#,
        r#"muster_lease_group_requests_total{kind="trawl"} 1"#,
        r#"muster_completion_groups_total{kind="trawl"} 1"#,
        r#"muster_completion_group_requests_total{kind="trawl"} 1"#,
    ];
    let found: Vec<Option<&str>> = wanted
        .iter()
        .map(|w| line(&m, w.split(' ').next().unwrap()))
        .collect();
    assert_eq!(found, wanted.map(Some));
}

#[tokio::test]
async fn answers_to_invented_methods_are_counted_in_one_series() {
    let app = TestApp::spawn().await;
    for i in 0..5 {
        let method = hyper::Method::from_bytes(format!("PROBE{i}").as_bytes()).unwrap();
        let r = app.raw(method, "/v1/items", None, Vec::new()).await;
        assert_eq!(r.status, 405);
    }
    let m = scrape(&app).await;
    let counted: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with(r#"muster_http_requests_total{route="/v1/items""#))
        .collect();
    assert_eq!(
        counted,
        vec![
            r#"muster_http_requests_total{route="/v1/items",method="other",status="405",code="E_BAD_REQUEST"} 5"#
        ]
    );
}
