//! Spans recorded, exported over real HTTP to an OTLP receiver that decodes the protobuf with
//! opentelemetry-proto's messages (the reference, not muster-otel's own declarations); the
//! queue's bounds with a dead, a refusing and a stalled collector; shutdown's flush.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use muster_otel::{
    AttrValue, Config, ExportFigures, FinishedSpan, MAX_ATTRIBUTES, MAX_EVENTS, MAX_LINKS,
    MAX_VALUE_BYTES, SpanEvent, SpanId, SpanKind, Telemetry, TraceContext, TraceId,
};
use muster_testkit::{OtlpMode, OtlpReceiver, eventually};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link, SpanKind as ProtoKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};

const TRACE: TraceId = TraceId([
    0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36,
]);
const PARENT: SpanId = SpanId([0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);

fn config(endpoint: &str, vars: &[(&str, &str)]) -> Config {
    let mut all: HashMap<&str, String> = vars.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    all.insert("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned());
    Config::from_env(|name| all.get(name).cloned())
        .expect("valid settings")
        .expect("tracing on")
}

/// Settings that send each span at once (a batch of one, a short delay).
fn prompt(endpoint: &str) -> Config {
    config(
        endpoint,
        &[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
        ],
    )
}

/// `prompt`, naming the service, its version and instance, and one more resource attribute.
fn named(endpoint: &str) -> Config {
    let mut config = prompt(endpoint);
    config.service_name = "muster-eu".to_owned();
    config.service_version = "0.1.0-draft".to_owned();
    config.service_instance_id = Some("muster-0".to_owned());
    config.resource_attributes = vec![("deployment.environment".to_owned(), "prod".to_owned())];
    config
}

fn at(seconds: u64, nanos: u32) -> SystemTime {
    UNIX_EPOCH + Duration::new(seconds, nanos)
}

/// A sampled INTERNAL span `name` with span id `[n; 8]`.
fn span(n: u8, name: &'static str) -> FinishedSpan {
    FinishedSpan {
        context: TraceContext {
            trace_id: TRACE,
            span_id: SpanId([n; 8]),
            sampled: true,
        },
        parent: None,
        name: Cow::Borrowed(name),
        kind: SpanKind::Internal,
        start: at(1_800_000_000, 0),
        end: at(1_800_000_001, 0),
        attributes: Vec::new(),
        links: Vec::new(),
        events: Vec::new(),
        error: None,
    }
}

fn names(spans: &[Span]) -> Vec<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone()?.value)
}

fn string(text: &str) -> Option<Value> {
    Some(Value::StringValue(text.to_owned()))
}

/// An attribute as the reference messages hold it.
fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

/// An address nothing listens on.
async fn dead_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[tokio::test]
async fn a_recorded_span_reaches_the_collector_with_its_ids_times_kind_attributes_and_links() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(prompt(&receiver.endpoint()));
    let linked = TraceContext {
        trace_id: TraceId([7; 16]),
        span_id: SpanId([8; 8]),
        sampled: false,
    };
    telemetry.record(FinishedSpan {
        parent: Some(PARENT),
        name: Cow::Borrowed("POST /v1/items"),
        kind: SpanKind::Server,
        start: at(1_800_000_000, 123_456_789),
        end: at(1_800_000_000, 987_654_321),
        attributes: vec![
            ("http.route", AttrValue::from("/v1/items")),
            ("http.response.status_code", AttrValue::from(201_u32)),
            ("muster.replayed", AttrValue::from(false)),
            ("muster.ratio", AttrValue::from(0.25)),
        ],
        links: vec![linked],
        ..span(1, "unused")
    });

    let spans = receiver.wait_for_spans(1, Duration::from_secs(5)).await;
    let got = &spans[0];
    assert_eq!(got.trace_id, TRACE.0);
    assert_eq!(got.span_id, [1; 8]);
    assert_eq!(got.parent_span_id, PARENT.0);
    assert_eq!(got.name, "POST /v1/items");
    assert_eq!(got.kind, ProtoKind::Server as i32);
    assert_eq!(got.flags, 1);
    assert_eq!(got.start_time_unix_nano, 1_800_000_000_123_456_789);
    assert_eq!(got.end_time_unix_nano, 1_800_000_000_987_654_321);
    assert_eq!(
        got.attributes
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.clone().and_then(|v| v.value)))
            .collect::<Vec<_>>(),
        [
            ("http.route", string("/v1/items")),
            ("http.response.status_code", Some(Value::IntValue(201))),
            ("muster.replayed", Some(Value::BoolValue(false))),
            ("muster.ratio", Some(Value::DoubleValue(0.25))),
        ]
    );
    assert_eq!(
        got.links
            .iter()
            .map(|l| (l.trace_id.clone(), l.span_id.clone(), l.flags))
            .collect::<Vec<_>>(),
        [(vec![7; 16], vec![8; 8], 0)]
    );
    assert_eq!(got.status, None);
}

/// One span with every field muster-otel writes, each with a value that is not the protobuf
/// default (a default is not on the wire, so it would prove nothing), read back from the request
/// decoded with opentelemetry-proto's generated messages. The proof that `proto.rs`'s
/// hand-declared field numbers and types are the reference's: a wrong number leaves a field at
/// its default here, a wrong type fails the decoding (the receiver answers 400, keeps nothing).
#[tokio::test]
async fn every_field_written_is_read_back_by_the_reference_decoder() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(named(&receiver.endpoint()));
    // Beyond each limit by one or two, so that every dropped count is sent.
    let filler = ("muster.filler", AttrValue::from(7_u32));
    let mut attributes = vec![
        ("muster.kind", AttrValue::from("page")),
        ("muster.replayed", AttrValue::from(true)),
        ("muster.offset", AttrValue::from(-3_i64)),
        ("muster.ratio", AttrValue::from(0.25)),
    ];
    attributes.resize(MAX_ATTRIBUTES + 2, filler.clone());
    let mut first_event_attributes = vec![("muster.attempt", AttrValue::from(2_u32))];
    first_event_attributes.resize(MAX_ATTRIBUTES + 1, filler);
    let events = (0..=MAX_EVENTS as u32)
        .map(|i| SpanEvent {
            name: Cow::Borrowed("retry"),
            time: at(1_800_000_000, 500 + i),
            attributes: if i == 0 {
                first_event_attributes.clone()
            } else {
                Vec::new()
            },
        })
        .collect();
    let link = TraceContext {
        trace_id: TraceId([7; 16]),
        span_id: SpanId([8; 8]),
        sampled: true,
    };
    telemetry.record(FinishedSpan {
        context: TraceContext {
            trace_id: TRACE,
            span_id: SpanId([1; 8]),
            sampled: true,
        },
        parent: Some(PARENT),
        name: Cow::Borrowed("POST /v1/items/{id}/complete"),
        kind: SpanKind::Server,
        start: at(1_800_000_000, 123_456_789),
        end: at(1_800_000_000, 987_654_321),
        attributes,
        links: vec![link; MAX_LINKS + 1],
        events,
        error: Some("E_LEASE_LOST".to_owned()),
    });
    receiver.wait_for_spans(1, Duration::from_secs(5)).await;

    let request = receiver.requests().remove(0).body;
    assert_eq!(request.resource_spans.len(), 1);
    let resource_spans = &request.resource_spans[0];
    let version = env!("CARGO_PKG_VERSION");
    let resource_attributes = [
        ("service.name", "muster-eu"),
        ("service.version", "0.1.0-draft"),
        ("service.instance.id", "muster-0"),
        ("deployment.environment", "prod"),
        ("telemetry.sdk.name", "muster-otel"),
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.version", version),
    ]
    .into_iter()
    .map(|(key, value)| kv(key, Value::StringValue(value.to_owned())))
    .collect();
    assert_eq!(
        resource_spans.resource,
        Some(Resource {
            attributes: resource_attributes,
            ..Resource::default()
        })
    );
    assert_eq!(resource_spans.scope_spans.len(), 1);
    let scope_spans = &resource_spans.scope_spans[0];
    assert_eq!(
        scope_spans.scope,
        Some(InstrumentationScope {
            name: "muster".to_owned(),
            version: version.to_owned(),
            ..InstrumentationScope::default()
        })
    );
    assert_eq!(scope_spans.spans.len(), 1);

    // The span's own fields first, its lists apart (each of their elements is encoded alike).
    let mut span = scope_spans.spans[0].clone();
    let attributes = std::mem::take(&mut span.attributes);
    let mut events = std::mem::take(&mut span.events);
    let links = std::mem::take(&mut span.links);
    assert_eq!(
        span,
        Span {
            trace_id: TRACE.0.to_vec(),
            span_id: vec![1; 8],
            parent_span_id: PARENT.0.to_vec(),
            flags: 1,
            name: "POST /v1/items/{id}/complete".to_owned(),
            kind: ProtoKind::Server as i32,
            start_time_unix_nano: 1_800_000_000_123_456_789,
            end_time_unix_nano: 1_800_000_000_987_654_321,
            dropped_attributes_count: 2,
            dropped_events_count: 1,
            dropped_links_count: 1,
            status: Some(Status {
                message: "E_LEASE_LOST".to_owned(),
                code: StatusCode::Error as i32,
            }),
            ..Span::default()
        }
    );
    let filler = kv("muster.filler", Value::IntValue(7));
    assert_eq!(
        (attributes.len(), &attributes[..5]),
        (
            MAX_ATTRIBUTES,
            &[
                kv("muster.kind", Value::StringValue("page".to_owned())),
                kv("muster.replayed", Value::BoolValue(true)),
                kv("muster.offset", Value::IntValue(-3)),
                kv("muster.ratio", Value::DoubleValue(0.25)),
                filler.clone(),
            ][..]
        )
    );
    assert_eq!(events.len(), MAX_EVENTS);
    let first_event_attributes = std::mem::take(&mut events[0].attributes);
    assert_eq!(
        (first_event_attributes.len(), &first_event_attributes[..2]),
        (
            MAX_ATTRIBUTES,
            &[kv("muster.attempt", Value::IntValue(2)), filler][..]
        )
    );
    assert_eq!(
        events[..2],
        [
            Event {
                time_unix_nano: 1_800_000_000_000_000_500,
                name: "retry".to_owned(),
                attributes: Vec::new(),
                dropped_attributes_count: 1,
            },
            Event {
                time_unix_nano: 1_800_000_000_000_000_501,
                name: "retry".to_owned(),
                attributes: Vec::new(),
                dropped_attributes_count: 0,
            },
        ]
    );
    assert_eq!(
        (links.len(), &links[0]),
        (
            MAX_LINKS,
            &Link {
                trace_id: vec![7; 16],
                span_id: vec![8; 8],
                flags: 1,
                ..Link::default()
            }
        )
    );
}

#[tokio::test]
async fn the_export_names_the_service_its_version_and_the_muster_scope() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(named(&receiver.endpoint()));
    telemetry.record(span(1, "one"));

    receiver.wait_for_spans(1, Duration::from_secs(5)).await;
    let request = &receiver.requests()[0].body.resource_spans[0];
    let resource = request.resource.clone().unwrap().attributes;
    assert_eq!(attribute(&resource, "service.name"), string("muster-eu"));
    assert_eq!(
        attribute(&resource, "service.version"),
        string("0.1.0-draft")
    );
    assert_eq!(
        attribute(&resource, "service.instance.id"),
        string("muster-0")
    );
    assert_eq!(
        attribute(&resource, "deployment.environment"),
        string("prod")
    );
    assert_eq!(request.scope_spans[0].scope.clone().unwrap().name, "muster");
}

#[tokio::test]
async fn the_export_is_protobuf_with_the_configured_headers() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr3t%21"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
        ],
    ));
    telemetry.record(span(1, "one"));

    receiver.wait_for_spans(1, Duration::from_secs(5)).await;
    let headers = &receiver.requests()[0].headers;
    assert_eq!(headers["content-type"], "application/x-protobuf");
    assert_eq!(headers["api-key"], "s3cr3t!");
}

#[tokio::test]
async fn an_unsampled_span_is_not_exported() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(prompt(&receiver.endpoint()));
    let mut unsampled = span(1, "unsampled");
    unsampled.context.sampled = false;
    telemetry.record(unsampled);
    telemetry.record(span(2, "sampled"));

    receiver.wait_for_spans(1, Duration::from_secs(5)).await;
    telemetry.shutdown(Duration::from_secs(5)).await;
    assert_eq!(names(&receiver.spans()), ["sampled"]);
    assert_eq!(telemetry.figures().spans_exported, 1);
}

#[tokio::test]
async fn an_error_becomes_an_error_status_and_events_keep_their_time_and_attributes() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(prompt(&receiver.endpoint()));
    telemetry.record(FinishedSpan {
        error: Some("E_LEASE_LOST".to_owned()),
        events: vec![SpanEvent {
            name: Cow::Borrowed("retry"),
            time: at(1_800_000_000, 500),
            attributes: vec![("muster.attempt", AttrValue::from(2_u32))],
        }],
        ..span(1, "complete page")
    });

    let spans = receiver.wait_for_spans(1, Duration::from_secs(5)).await;
    assert_eq!(
        spans[0].status,
        Some(Status {
            message: "E_LEASE_LOST".to_owned(),
            code: StatusCode::Error as i32
        })
    );
    let event = &spans[0].events[0];
    assert_eq!(
        (event.name.as_str(), event.time_unix_nano),
        ("retry", 1_800_000_000_000_000_500)
    );
    assert_eq!(
        attribute(&event.attributes, "muster.attempt"),
        Some(Value::IntValue(2))
    );
}

#[tokio::test]
async fn long_values_and_links_beyond_the_limit_are_cut_and_counted() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(prompt(&receiver.endpoint()));
    let link = TraceContext {
        trace_id: TraceId([7; 16]),
        span_id: SpanId([8; 8]),
        sampled: true,
    };
    telemetry.record(FinishedSpan {
        attributes: vec![("muster.note", AttrValue::from("x".repeat(1000)))],
        links: vec![link; MAX_LINKS + 5],
        ..span(1, "replay")
    });

    let spans = receiver.wait_for_spans(1, Duration::from_secs(5)).await;
    assert_eq!(
        attribute(&spans[0].attributes, "muster.note"),
        string(&"x".repeat(MAX_VALUE_BYTES))
    );
    assert_eq!(
        (spans[0].links.len(), spans[0].dropped_links_count),
        (MAX_LINKS, 5)
    );
}

/// On a current-thread runtime the export task cannot run between these `record` calls, so
/// the count is exact: the queue takes 4, the other 6 are dropped.
#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_drops_and_counts_exactly_the_overflow() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    ));
    let all = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
    for (n, name) in (1..).zip(all) {
        telemetry.record(span(n, name));
    }
    assert_eq!(
        telemetry.figures(),
        ExportFigures {
            spans_dropped: 6,
            queue_len: 4,
            ..ExportFigures::default()
        }
    );

    telemetry.shutdown(Duration::from_secs(5)).await;
    assert_eq!(names(&receiver.spans()), ["a", "b", "c", "d"]);
    assert_eq!(telemetry.figures().spans_exported, 4);
}

/// 10,000 spans against a collector that is not there: each `record` returns at once, the
/// queue never holds more than its size, and the failed batches are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_never_blocks_record_and_its_failures_are_counted() {
    let telemetry = Telemetry::start(config(
        &dead_endpoint().await,
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
        ],
    ));
    let took = record_many(&telemetry, 10_000);
    assert!(
        took < Duration::from_secs(1),
        "10,000 record calls took {took:?}"
    );

    eventually(
        Duration::from_secs(5),
        "the queue is emptied by failed exports",
        || {
            let figures = telemetry.figures();
            async move { figures.queue_len == 0 && figures.export_failures > 0 }
        },
    )
    .await;
    telemetry.shutdown(Duration::from_secs(1)).await;
    let figures = telemetry.figures();
    assert_eq!(figures.spans_exported, 0);
    assert_eq!(figures.spans_dropped + figures.spans_failed, 10_000);
}

/// A collector that takes each request and never answers: one batch waits in flight (until the
/// export timeout), the queue fills to its size, everything else is dropped at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_collector_never_blocks_record_and_the_queue_stays_at_its_size() {
    let receiver = OtlpReceiver::start_in(OtlpMode::Stall).await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
        ],
    ));
    telemetry.record(span(1, "first"));
    eventually(
        Duration::from_secs(5),
        "the first batch is held by the collector",
        || {
            let arrived = receiver.arrived();
            async move { arrived == 1 }
        },
    )
    .await;

    let took = record_many(&telemetry, 10_000);
    assert!(
        took < Duration::from_secs(1),
        "10,000 record calls took {took:?}"
    );
    let figures = telemetry.figures();
    assert_eq!((figures.queue_len, figures.spans_dropped), (100, 9_900));

    eventually(Duration::from_secs(5), "the held export timed out", || {
        let failures = telemetry.figures().export_failures;
        async move { failures >= 1 }
    })
    .await;
}

#[tokio::test]
async fn a_collector_answering_503_counts_a_failure_and_drops_the_batch() {
    let receiver = OtlpReceiver::start_in(OtlpMode::Unavailable).await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "3"),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    ));
    for n in 1..=3 {
        telemetry.record(span(n, "refused"));
    }
    eventually(Duration::from_secs(5), "the batch was refused", || {
        let failures = telemetry.figures().export_failures;
        async move { failures == 1 }
    })
    .await;
    assert_eq!(
        telemetry.figures(),
        ExportFigures {
            export_failures: 1,
            spans_failed: 3,
            ..ExportFigures::default()
        }
    );
    assert_eq!(receiver.arrived(), 1);
}

/// Three spans in one batch, sent to `receiver` at once.
fn record_batch_of_three(receiver: &OtlpReceiver) -> Telemetry {
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "3"),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    ));
    for n in 1..=3 {
        telemetry.record(span(n, "partly"));
    }
    telemetry
}

/// Waits until the batch sent to `receiver` is counted, exported or failed.
async fn batch_settled(telemetry: &Telemetry) {
    eventually(Duration::from_secs(5), "the batch was answered", || {
        let f = telemetry.figures();
        async move { f.spans_exported + f.spans_failed == 3 }
    })
    .await;
}

#[tokio::test]
async fn a_partial_success_counts_its_rejected_spans_as_failed_and_the_rest_as_exported() {
    let receiver = OtlpReceiver::start_in(OtlpMode::PartialSuccess { rejected_spans: 2 }).await;
    let telemetry = record_batch_of_three(&receiver);
    batch_settled(&telemetry).await;
    assert_eq!(
        telemetry.figures(),
        ExportFigures {
            spans_exported: 1,
            spans_failed: 2,
            ..ExportFigures::default()
        }
    );
    assert_eq!(receiver.arrived(), 1);
}

#[tokio::test]
async fn a_partial_success_rejecting_more_spans_than_sent_fails_the_batch_and_no_more() {
    let receiver = OtlpReceiver::start_in(OtlpMode::PartialSuccess { rejected_spans: 7 }).await;
    let telemetry = record_batch_of_three(&receiver);
    batch_settled(&telemetry).await;
    assert_eq!(
        telemetry.figures(),
        ExportFigures {
            spans_failed: 3,
            ..ExportFigures::default()
        }
    );
}

#[tokio::test]
async fn a_partial_success_rejecting_no_span_exports_the_batch() {
    let receiver = OtlpReceiver::start_in(OtlpMode::PartialSuccess { rejected_spans: 0 }).await;
    let telemetry = record_batch_of_three(&receiver);
    batch_settled(&telemetry).await;
    assert_eq!(
        telemetry.figures(),
        ExportFigures {
            spans_exported: 3,
            ..ExportFigures::default()
        }
    );
}

/// A 200 whose body never ends is read only up to the cap: the export ends long before its
/// 10 s timeout (no body kept growing until then) and the batch counts as exported, the status
/// being the collector's verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_with_an_endless_body_is_read_no_further_than_the_cap_and_counts_as_exported() {
    let receiver = OtlpReceiver::start_in(OtlpMode::EndlessBody).await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000"),
        ],
    ));
    let start = Instant::now();
    telemetry.record(span(1, "endless"));
    eventually(Duration::from_secs(3), "the export ended", || {
        let f = telemetry.figures();
        async move { f.spans_exported + f.spans_failed == 1 }
    })
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(
        telemetry.figures(),
        ExportFigures {
            spans_exported: 1,
            ..ExportFigures::default()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_after_an_endless_answer_is_sent_on_a_new_connection_and_exported() {
    let receiver = OtlpReceiver::start_in(OtlpMode::EndlessBody).await;
    let telemetry = Telemetry::start(prompt(&receiver.endpoint()));
    telemetry.record(span(1, "endless"));
    eventually(Duration::from_secs(3), "the first export ended", || {
        let exported = telemetry.figures().spans_exported;
        async move { exported == 1 }
    })
    .await;
    receiver.set_mode(OtlpMode::Accept);
    telemetry.record(span(2, "after"));
    let spans = receiver.wait_for_spans(2, Duration::from_secs(3)).await;
    assert_eq!(names(&spans), ["endless", "after"]);
    assert_eq!(telemetry.figures().spans_exported, 2);
}

#[tokio::test]
async fn shutdown_sends_what_is_queued_before_it_returns() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2"),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    ));
    // A full batch wakes the export of "a" and "b"; "c" waits for a timer a minute away, and
    // shutdown sends it.
    for (n, name) in (1..).zip(["a", "b", "c"]) {
        telemetry.record(span(n, name));
    }

    telemetry.shutdown(Duration::from_secs(5)).await;
    assert_eq!(names(&receiver.spans()), ["a", "b", "c"]);
    assert_eq!(telemetry.figures().spans_exported, 3);
}

#[tokio::test]
async fn dropping_the_last_handle_sends_what_is_queued() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[("OTEL_BSP_SCHEDULE_DELAY", "60000")],
    ));
    telemetry.record(span(1, "queued"));
    drop(telemetry);

    let spans = receiver.wait_for_spans(1, Duration::from_secs(5)).await;
    assert_eq!(names(&spans), ["queued"]);
}

/// No receiver and nothing recorded, so the export task is the only task this test adds to the
/// runtime: the count of alive tasks shows whether it still runs (its 10 ms timer would wake it
/// for as long as the runtime lives).
#[tokio::test(flavor = "current_thread")]
async fn the_export_task_ends_when_the_last_handle_is_dropped() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let telemetry = Telemetry::start(prompt(&dead_endpoint().await));
    let clone = telemetry.clone();
    assert_eq!(metrics.num_alive_tasks(), before + 1);

    drop(telemetry);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(metrics.num_alive_tasks(), before + 1, "a clone keeps it");

    drop(clone);
    eventually(Duration::from_secs(5), "the export task ended", || {
        let alive = metrics.num_alive_tasks();
        async move { alive == before }
    })
    .await;
}

#[tokio::test]
async fn a_span_recorded_after_shutdown_is_dropped_and_counted() {
    let receiver = OtlpReceiver::start().await;
    let telemetry = Telemetry::start(prompt(&receiver.endpoint()));
    telemetry.shutdown(Duration::from_secs(1)).await;
    telemetry.record(span(1, "late"));
    assert_eq!(telemetry.figures().spans_dropped, 1);
}

#[tokio::test]
async fn shutdown_returns_by_its_deadline_when_the_collector_stalls() {
    let receiver = OtlpReceiver::start_in(OtlpMode::Stall).await;
    let telemetry = Telemetry::start(config(
        &receiver.endpoint(),
        &[
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
        ],
    ));
    for n in 1..=3 {
        telemetry.record(span(n, "held"));
    }

    let started = Instant::now();
    telemetry.shutdown(Duration::from_millis(300)).await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(800), "shutdown took {took:?}");
    let figures = telemetry.figures();
    assert_eq!(figures.spans_exported, 0);
    assert_eq!(figures.spans_failed + figures.spans_dropped, 3);
    assert_eq!(figures.queue_len, 0);
}

/// Records `n` spans; how long that took (a `record` that waited for the collector would take
/// at least the export timeout).
fn record_many(telemetry: &Telemetry, n: u32) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        let mut span = span(1, "many");
        span.context.span_id = SpanId((u64::from(i) + 1).to_be_bytes());
        telemetry.record(span);
    }
    started.elapsed()
}
