use super::*;

fn unavailable(retry_after: Option<Duration>) -> ClientError {
    ClientError::Unavailable {
        status: 503,
        code: Some("E_UNAVAILABLE".into()),
        message: "down".into(),
        retry_after,
    }
}

fn fast_policy() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(10),
        factor: 2,
        cap: Duration::from_secs(5),
        max_attempts: None,
    }
}

#[test]
fn a_retry_after_longer_than_the_backoff_is_waited_out() {
    let delay = fast_policy().delay_after(1, &unavailable(Some(Duration::from_secs(2))));
    assert_eq!(delay, Duration::from_secs(2));
}

#[test]
fn a_retry_after_beyond_the_cap_waits_the_cap() {
    let delay = fast_policy().delay_after(1, &unavailable(Some(Duration::from_secs(3600))));
    assert_eq!(delay, Duration::from_secs(5));
}

#[test]
fn without_a_retry_after_the_backoff_stays_within_its_bounds() {
    let delay = fast_policy().delay_after(1, &unavailable(None));
    assert!(delay >= Duration::from_millis(5) && delay <= Duration::from_millis(10));
}

#[test]
fn retry_after_is_read_in_seconds_and_anything_else_is_ignored() {
    let read = |v: &str| {
        let mut h = hyper::HeaderMap::new();
        h.insert(hyper::header::RETRY_AFTER, v.parse().unwrap());
        retry_after(&h)
    };
    assert_eq!(
        [
            read("1"),
            read(" 30 "),
            read("Wed, 21 Oct 2015 07:28:00 GMT"),
            read("-1")
        ],
        [
            Some(Duration::from_secs(1)),
            Some(Duration::from_secs(30)),
            None,
            None
        ]
    );
}

#[test]
fn backoff_grows_by_the_factor_and_stays_within_jitter_and_cap() {
    let p = RetryPolicy {
        base: Duration::from_millis(100),
        factor: 2,
        cap: Duration::from_millis(1000),
        max_attempts: None,
    };
    for (attempt, full) in [
        (1, 100),
        (2, 200),
        (3, 400),
        (4, 800),
        (5, 1000),
        (40, 1000),
    ] {
        let d = p.delay(attempt).as_millis() as u64;
        assert!((full / 2..=full).contains(&d), "attempt {attempt}: {d} ms");
    }
}

#[test]
fn a_base_url_other_than_http_host_is_refused() {
    let dir = std::env::temp_dir().join(format!("muster-worker-unit-{}", uuid::Uuid::now_v7()));
    for bad in ["not a url", "https://muster:8080", "/v1"] {
        let err = WorkerClient::new(bad, "t", "trawl", "w", &dir).unwrap_err();
        assert_eq!(err.code(), "E_INVALID_ARGUMENT", "{bad}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A lease answer with `traceparent` set to `value`.
fn lease_with(value: serde_json::Value) -> Lease {
    serde_json::from_value(json!({
        "lease_id": "l", "fence": 1, "expires_at": "2030-01-01T00:00:00Z", "heartbeat_ms": 1000,
        "item": {"id": "i", "kind": "trawl", "priority": "normal", "attempt": 1, "payload": null},
        "traceparent": value,
    }))
    .unwrap()
}

#[test]
fn a_lease_answer_keeps_its_traceparent_and_its_calls_send_it() {
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let lease = lease_with(json!(traceparent));
    assert_eq!(
        (lease.traceparent(), lease.sent_traceparent()),
        (Some(traceparent), Some(traceparent))
    );
}

#[test]
fn a_malformed_traceparent_in_a_lease_answer_is_read_as_none() {
    for bad in [
        json!("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
        json!("not a traceparent"),
        json!(null),
    ] {
        assert_eq!(lease_with(bad.clone()).traceparent(), None, "{bad}");
    }
}

#[test]
fn a_lease_propagating_a_span_sends_that_span_and_still_reads_its_own() {
    let own = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let span = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";
    let lease = lease_with(json!(own)).propagating(span.to_owned());
    assert_eq!(
        (lease.traceparent(), lease.sent_traceparent()),
        (Some(own), Some(span))
    );
}
