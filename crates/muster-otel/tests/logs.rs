//! What the exporter logs when the collector fails: one warning a minute at most, with the
//! error's kind, never a header value. Alone in its test binary: tracing's per-callsite interest
//! cache does not mix a scoped subscriber on one test thread with none on the others.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use muster_otel::{Config, FinishedSpan, SpanId, SpanKind, Telemetry, TraceContext, TraceId};
use muster_testkit::{CapturedLogs, OtlpMode, OtlpReceiver, eventually};

/// The export task runs on this test's one thread, so the thread's subscriber sees its logs.
#[tokio::test(flavor = "current_thread")]
async fn failed_exports_are_logged_once_a_minute_with_their_kind_and_no_header_value() {
    let captured = CapturedLogs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(captured.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let receiver = OtlpReceiver::start_in(OtlpMode::Unavailable).await;
    let vars: HashMap<&str, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr3t".to_owned()),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "10".to_owned()),
    ]
    .into_iter()
    .collect();
    let config = Config::from_env(|name| vars.get(name).cloned())
        .unwrap()
        .unwrap();
    let telemetry = Telemetry::start(config);
    for n in 1..=3_u8 {
        telemetry.record(FinishedSpan {
            context: TraceContext {
                trace_id: TraceId([1; 16]),
                span_id: SpanId([n; 8]),
                sampled: true,
            },
            parent: None,
            name: Cow::Borrowed("refused"),
            kind: SpanKind::Internal,
            start: SystemTime::now(),
            end: SystemTime::now(),
            attributes: Vec::new(),
            links: Vec::new(),
            events: Vec::new(),
            error: None,
        });
        eventually(Duration::from_secs(5), "the export was refused", || {
            let failures = telemetry.figures().export_failures;
            async move { failures == u64::from(n) }
        })
        .await;
    }

    let logs = captured.text();
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(warnings[0].contains("error.kind=\"status\""), "{logs}");
    assert!(
        warnings[0].contains("http.response.status_code=503"),
        "{logs}"
    );
    assert!(!logs.contains("s3cr3t"), "{logs}");
}
