//! Shipkeeper's health intake: redacted before storage, bounded storage.

use hyper::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

#[tokio::test]
async fn a_health_report_is_accepted_with_its_addresses_redacted_and_counted() {
    let app = TestApp::spawn().await;
    let r = app
        .report_health(json!({
                "pods": [{"kind": "trawl", "ready": false, "restarts": 3, "phase": "CrashLoopBackOff"}],
                "events": [{"kind": "trawl", "reason": "BackOff",
                            "message": "dial tcp 10.0.3.7:5432 from ip-10-0-1-23.eu-west-1.compute.internal via [fe80::1]:80"}]
            }),
        )
        .await;
    assert_eq!(
        (r.status, r.body.clone()),
        (StatusCode::ACCEPTED, json!({"accepted": 2, "redacted": 3}))
    );
    let stored = app
        .scalar_text("SELECT events::text FROM core.worker_health WHERE kind = 'trawl'")
        .await;
    for raw in ["10.0.3.7", "ip-10-0-1-23", "compute.internal", "fe80"] {
        assert!(!stored.contains(raw), "{raw} stored in {stored}");
    }
    assert!(stored.contains("[redacted]"));
}

#[tokio::test]
async fn health_storage_keeps_one_record_per_kind_and_the_newest_reports_events() {
    let app = TestApp::spawn().await;
    for i in 0..30 {
        let r = app
            .report_health(json!({"pods": [{"kind": "assay", "ready": true, "restarts": i, "phase": "Running"}],
                       "events": [{"kind": "assay", "reason": format!("r{i}"), "message": "m"}]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED);
    }
    assert_eq!(app.count("core.worker_health").await, 1);
    let (events, first, restarts): (i64, String, i32) = {
        let row = app
            .db
            .client()
            .await
            .query_one(
                "SELECT jsonb_array_length(events)::int8, events->0->>'reason', restarts FROM core.worker_health",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!((events, first.as_str(), restarts), (1, "r29", 29));
}

#[tokio::test]
async fn only_shipkeeper_reports_health() {
    let app = TestApp::spawn().await;
    let r = app
        .post("/v1/health", "conn", json!({"pods": [], "events": []}))
        .await;
    r.assert_error(StatusCode::FORBIDDEN, "E_FORBIDDEN");
}

#[tokio::test]
async fn a_health_report_naming_an_unknown_kind_is_refused() {
    let app = TestApp::spawn().await;
    let r = app
        .report_health(json!({"pods": [{"kind": "plainforge", "ready": true, "restarts": 0, "phase": "Running"}]}))
        .await;
    r.assert_error(StatusCode::BAD_REQUEST, "E_BAD_REQUEST");
}

#[tokio::test]
async fn the_latest_health_per_kind_is_available_to_the_live_feed_port() {
    use muster_app::ports::HealthLog;
    let app = TestApp::spawn().await;
    app.report_health(json!({"pods": [{"kind": "sextant", "ready": true, "restarts": 1, "phase": "Running"}],
               "events": [{"kind": "sextant", "reason": "Pulled", "message": "on node gke-prod-pool-1-abcd"}]}),
    )
    .await;
    let logbook = muster_pg::PgLogbook::new(app.db.pool());
    let latest = logbook.latest_health().await.unwrap();
    assert_eq!(latest.len(), 1);
    let h = serde_json::to_value(&latest[0]).unwrap();
    let stored = ["kind", "ready", "restarts", "phase", "events"].map(|field| h[field].clone());
    assert_eq!(
        stored,
        [
            json!("sextant"),
            json!(true),
            json!(1),
            json!("Running"),
            json!([{"kind": "sextant", "reason": "Pulled", "message": "on node [redacted]"}])
        ]
    );
}

#[tokio::test]
async fn an_oversized_health_report_is_refused_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let event = json!({"kind": "trawl", "reason": "r", "message": "m".repeat(1000)});
    let body = json!({"events": vec![event; 1100]})
        .to_string()
        .into_bytes();
    assert!(body.len() > 1024 * 1024);
    let r = app
        .raw(hyper::Method::POST, "/v1/health", Some("shipkeeper"), body)
        .await;
    r.assert_error(StatusCode::PAYLOAD_TOO_LARGE, "E_TOO_LARGE");
    assert_eq!(app.count("core.worker_health").await, 0);
}
