use std::time::Duration;

use muster_testkit::CapturedLogs;

use super::{RouteClass, Unanswered, log_answer};

/// The levels of the lines one answer (3 ms) logs under the production default filter.
fn levels_logged_at_info(method: &str, route: &str, status: u16, code: &str) -> Vec<String> {
    levels_logged(tracing::Level::INFO, method, route, status, code, 3)
}

/// The JSON lines `f` logs under a subscriber filtering at `filter`.
fn logged(filter: tracing::Level, f: impl FnOnce()) -> Vec<serde_json::Value> {
    let captured = CapturedLogs::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(filter)
        .with_writer(captured.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    captured
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn levels_logged(
    filter: tracing::Level,
    method: &str,
    route: &str,
    status: u16,
    code: &str,
    millis: u64,
) -> Vec<String> {
    let lines = logged(filter, || {
        let class = RouteClass::of(method, route);
        log_answer(status, code, Duration::from_millis(millis), class);
    });
    lines
        .iter()
        .map(|v| v["level"].as_str().unwrap().to_owned())
        .collect()
}

const COMPLETE: &str = "/v1/leases/{id}/complete";

#[test]
fn a_success_is_not_logged_at_the_default_level() {
    let levels = levels_logged_at_info("POST", COMPLETE, 200, "");
    assert_eq!(levels, Vec::<String>::new());
}

#[test]
fn a_refused_worker_request_is_logged_at_info() {
    let levels = levels_logged_at_info("POST", COMPLETE, 409, "E_LEASE_LOST");
    assert_eq!(levels, vec!["INFO"]);
}

#[test]
fn a_server_side_failure_is_logged_as_a_warning() {
    let levels = levels_logged_at_info("POST", COMPLETE, 503, "E_UNAVAILABLE");
    assert_eq!(levels, vec!["WARN"]);
}

#[test]
fn a_refused_anonymous_edit_proposal_is_not_logged_at_the_default_level() {
    let levels = levels_logged_at_info("POST", "/v1/edits", 400, "E_BAD_REQUEST");
    assert_eq!(levels, Vec::<String>::new());
}

/// The messages logged at info while a request's guard is dropped.
fn messages_when_dropped(armed: bool, class: RouteClass) -> Vec<String> {
    let lines = logged(tracing::Level::INFO, || {
        let span = tracing::info_span!("request", id = "r-1");
        drop(Unanswered {
            span,
            started: std::time::Instant::now(),
            armed,
            class,
        });
    });
    lines
        .iter()
        .map(|v| format!("{} {}", v["span"]["id"], v["fields"]["message"]))
        .collect()
}

#[test]
fn a_request_dropped_before_its_answer_is_logged_with_its_id() {
    assert_eq!(
        messages_when_dropped(true, RouteClass::Other),
        vec![r#""r-1" "no answer: the client went away or the request timed out""#]
    );
}

#[test]
fn an_answered_request_logs_no_drop_line() {
    assert_eq!(
        messages_when_dropped(false, RouteClass::Other),
        Vec::<String>::new()
    );
}

#[test]
fn an_anonymous_request_dropped_before_its_answer_is_not_logged_at_the_default_level() {
    assert_eq!(
        messages_when_dropped(true, RouteClass::Anonymous),
        Vec::<String>::new()
    );
}

#[test]
fn a_success_is_logged_at_debug() {
    let levels = levels_logged(tracing::Level::DEBUG, "POST", COMPLETE, 200, "", 3);
    assert_eq!(levels, vec!["DEBUG"]);
}

#[test]
fn a_success_slower_than_a_second_is_logged_at_info() {
    let levels = levels_logged(tracing::Level::INFO, "POST", COMPLETE, 200, "", 1_500);
    assert_eq!(levels, vec!["INFO"]);
}

#[test]
fn a_long_poll_lease_that_waited_is_not_logged_at_the_default_level() {
    let levels = levels_logged(tracing::Level::INFO, "POST", "/v1/leases", 200, "", 5_000);
    assert_eq!(levels, Vec::<String>::new());
}

#[test]
fn a_successful_retry_by_an_operator_is_logged_at_info() {
    let levels = levels_logged_at_info("POST", "/v1/items/{id}/retry", 200, "");
    assert_eq!(levels, vec!["INFO"]);
}

#[test]
fn a_reported_worker_image_digest_is_logged_at_info() {
    let levels = levels_logged_at_info("PUT", "/v1/workers/{kind}/digest", 200, "");
    assert_eq!(levels, vec!["INFO"]);
}

#[test]
fn a_request_with_a_wrong_token_is_not_logged_at_the_default_level() {
    let levels = levels_logged_at_info("POST", COMPLETE, 401, "E_UNAUTHENTICATED");
    assert_eq!(levels, Vec::<String>::new());
}

#[test]
fn a_refused_operator_decision_on_an_edit_is_logged_at_info() {
    let levels = levels_logged_at_info("POST", "/v1/edits/{id}/decision", 409, "E_CONFLICT");
    assert_eq!(levels, vec!["INFO"]);
}

/// The exposition of `figures` alone.
fn exposed(figures: muster_app::auth::ReviewFigures) -> String {
    #[derive(Debug)]
    struct Figures(muster_app::auth::ReviewFigures);
    impl prometheus_client::collector::Collector for Figures {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder,
        ) -> Result<(), std::fmt::Error> {
            super::encode_review_figures(&mut encoder, &self.0)
        }
    }
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Figures(figures)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

#[test]
fn the_tokenreview_admission_figures_are_exported_by_class_outcome_and_reason() {
    let text = exposed(muster_app::auth::ReviewFigures {
        reviews: vec![("known", "positive", 7), ("unknown", "unavailable", 2)],
        rejected: vec![("peer_rate", 5), ("queue", 1)],
        served_stale: 3,
        refreshes: 4,
        in_flight: 6,
    });
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            r#"muster_tokenreview_answers_total{class="known",outcome="positive"} 7"#,
            r#"muster_tokenreview_answers_total{class="unknown",outcome="unavailable"} 2"#,
            r#"muster_tokenreview_rejected_total{reason="peer_rate"} 5"#,
            r#"muster_tokenreview_rejected_total{reason="queue"} 1"#,
            "muster_tokenreview_served_stale_total 3",
            "muster_tokenreview_refreshes_total 4",
            "muster_tokenreview_in_flight 6",
        ]
    );
}
