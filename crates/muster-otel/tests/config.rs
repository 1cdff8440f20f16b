//! The exporter's settings from the `OTEL_*` variables, and the sampler they choose.

use std::collections::HashMap;
use std::time::Duration;

use muster_otel::{Config, ConfigError, RootSampler, Sampler, TraceId};

fn read(vars: &[(&str, &str)]) -> Result<Option<Config>, ConfigError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::from_env(|name| vars.get(name).cloned())
}

fn config(vars: &[(&str, &str)]) -> Config {
    read(vars).expect("valid settings").expect("tracing on")
}

fn error(vars: &[(&str, &str)]) -> ConfigError {
    read(vars).expect_err("refused settings")
}

const BASE: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");

#[test]
fn tracing_is_off_without_an_endpoint() {
    assert!(read(&[("OTEL_SERVICE_NAME", "x")]).unwrap().is_none());
}

#[test]
fn tracing_is_off_when_the_sdk_is_disabled() {
    assert!(
        read(&[BASE, ("OTEL_SDK_DISABLED", "TRUE")])
            .unwrap()
            .is_none()
    );
}

#[test]
fn an_empty_endpoint_counts_as_unset() {
    assert!(
        read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])
            .unwrap()
            .is_none()
    );
}

#[test]
fn the_defaults_follow_the_specification() {
    let config = config(&[BASE]);
    assert_eq!(
        config.endpoint.to_string(),
        "http://collector:4318/v1/traces"
    );
    assert!(config.headers.is_empty());
    assert_eq!(config.timeout, Duration::from_millis(10_000));
    assert_eq!(config.service_name, "muster");
    assert_eq!(config.service_instance_id, None);
    assert!(config.resource_attributes.is_empty());
    assert_eq!(
        config.sampler,
        Sampler {
            root: RootSampler::AlwaysOn,
            parent_based: true
        }
    );
    assert_eq!(config.max_queue_size, 2048);
    assert_eq!(config.max_export_batch_size, 512);
    assert_eq!(config.schedule_delay, Duration::from_millis(5000));
}

#[test]
fn the_base_endpoint_s_path_gets_v1_traces_appended() {
    let config = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/otlp/")]);
    assert_eq!(
        config.endpoint.to_string(),
        "http://collector:4318/otlp/v1/traces"
    );
}

#[test]
fn the_traces_endpoint_is_used_as_is_and_wins_over_the_base() {
    let config = config(&[
        BASE,
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://agent:9999/custom",
        ),
    ]);
    assert_eq!(config.endpoint.to_string(), "http://agent:9999/custom");
}

#[test]
fn headers_are_read_percent_decoded_and_the_traces_variable_wins() {
    let config = config(&[
        BASE,
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-general=1"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            " Authorization = Bearer%20s3cr3t , x-tenant=a%2Cb",
        ),
    ]);
    let headers: Vec<(String, String)> = config
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        headers,
        [
            ("authorization".to_owned(), "Bearer s3cr3t".to_owned()),
            ("x-tenant".to_owned(), "a,b".to_owned()),
        ]
    );
}

#[test]
fn the_debug_output_shows_header_names_but_never_their_values() {
    let config = config(&[BASE, ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr3t")]);
    let shown = format!("{config:?}");
    assert!(shown.contains("api-key: <hidden>"), "{shown}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
}

#[test]
fn the_traces_timeout_wins_over_the_general_one() {
    let config = config(&[
        BASE,
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "250"),
    ]);
    assert_eq!(config.timeout, Duration::from_millis(250));
}

#[test]
fn the_service_name_variable_wins_over_the_resource_attribute() {
    let config = config(&[
        BASE,
        ("OTEL_SERVICE_NAME", "muster-eu"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=other,deployment.environment=prod%20eu",
        ),
    ]);
    assert_eq!(config.service_name, "muster-eu");
    assert_eq!(
        config.resource_attributes,
        [("deployment.environment".to_owned(), "prod eu".to_owned())]
    );
}

#[test]
fn the_resource_attributes_name_the_service_when_the_variable_does_not() {
    let config = config(&[BASE, ("OTEL_RESOURCE_ATTRIBUTES", "service.name=other")]);
    assert_eq!(config.service_name, "other");
}

#[test]
fn the_batch_settings_are_read_in_spans_and_milliseconds() {
    let config = config(&[
        BASE,
        ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100"),
        ("OTEL_BSP_SCHEDULE_DELAY", "20"),
    ]);
    assert_eq!(
        (
            config.max_queue_size,
            config.max_export_batch_size,
            config.schedule_delay
        ),
        (100, 100, Duration::from_millis(20))
    );
}

#[test]
fn http_protobuf_is_accepted_as_the_protocol() {
    let config = config(&[BASE, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]);
    assert_eq!(
        config.endpoint.to_string(),
        "http://collector:4318/v1/traces"
    );
}

#[test]
fn grpc_is_refused_naming_the_supported_protocol() {
    let error = error(&[BASE, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
    assert_eq!(error.code(), "E_OTEL_PROTOCOL");
    assert_eq!(
        error.to_string(),
        "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only http/protobuf is supported (grpc and http/json \
         are not); unset it or set http/protobuf"
    );
}

#[test]
fn http_json_in_the_traces_protocol_is_refused() {
    let error = error(&[
        BASE,
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
    ]);
    assert_eq!(
        (error.code(), error.var()),
        ("E_OTEL_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    );
}

#[test]
fn an_https_endpoint_is_refused_pointing_to_a_local_collector_agent() {
    let error = error(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")]);
    assert_eq!(error.code(), "E_OTEL_TLS");
    assert_eq!(
        error.to_string(),
        "OTEL_EXPORTER_OTLP_ENDPOINT: https endpoints are not supported; send to a collector \
         agent on the node or in the pod over http://"
    );
}

#[test]
fn an_endpoint_without_a_scheme_is_refused() {
    let error = error(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")]);
    assert_eq!(
        error.to_string(),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector:4318: expected an http:// URL with a host \
         (http://collector:4318)"
    );
}

#[test]
fn an_endpoint_with_credentials_is_refused_without_showing_them() {
    let error = error(&[(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "http://user:s3cr3t@collector:4318",
    )]);
    assert_eq!(error.var(), "OTEL_EXPORTER_OTLP_ENDPOINT");
    assert!(!error.to_string().contains("s3cr3t"), "{error}");
}

#[test]
fn a_malformed_header_is_refused_without_showing_the_variable_s_value() {
    let error = error(&[
        BASE,
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr3t,broken"),
    ]);
    assert_eq!(
        error.to_string(),
        "OTEL_EXPORTER_OTLP_HEADERS: expected name=value pairs separated by commas, values \
         percent-encoded (the value is not shown: it may hold a secret)"
    );
}

#[test]
fn a_header_value_that_decodes_to_no_utf8_is_refused_without_showing_it() {
    let error = error(&[
        BASE,
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=s3cr3t%ff"),
    ]);
    assert_eq!(error.var(), "OTEL_EXPORTER_OTLP_TRACES_HEADERS");
    assert!(!error.to_string().contains("s3cr3t"), "{error}");
}

#[test]
fn a_timeout_that_is_not_a_positive_number_of_milliseconds_is_refused() {
    for bad in ["0", "-1", "10s"] {
        let error = error(&[BASE, ("OTEL_EXPORTER_OTLP_TIMEOUT", bad)]);
        assert_eq!(
            error.to_string(),
            format!(
                "OTEL_EXPORTER_OTLP_TIMEOUT={bad}: expected a whole number of milliseconds above 0"
            )
        );
    }
}

#[test]
fn a_queue_size_of_zero_is_refused() {
    let error = error(&[BASE, ("OTEL_BSP_MAX_QUEUE_SIZE", "0")]);
    assert_eq!(
        error.to_string(),
        "OTEL_BSP_MAX_QUEUE_SIZE=0: expected a whole number above 0"
    );
}

#[test]
fn a_batch_larger_than_the_queue_is_refused() {
    let error = error(&[
        BASE,
        ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "101"),
    ]);
    assert_eq!(
        error.to_string(),
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=101: expected at most OTEL_BSP_MAX_QUEUE_SIZE"
    );
}

#[test]
fn a_schedule_delay_that_is_not_a_number_is_refused() {
    let error = error(&[BASE, ("OTEL_BSP_SCHEDULE_DELAY", "soon")]);
    assert_eq!(error.var(), "OTEL_BSP_SCHEDULE_DELAY");
}

#[test]
fn malformed_resource_attributes_are_refused() {
    let error = error(&[BASE, ("OTEL_RESOURCE_ATTRIBUTES", "team")]);
    assert_eq!(
        error.to_string(),
        "OTEL_RESOURCE_ATTRIBUTES=team: expected key=value pairs separated by commas, values \
         percent-encoded"
    );
}

#[test]
fn an_unknown_sampler_is_refused_naming_the_supported_ones() {
    let error = error(&[BASE, ("OTEL_TRACES_SAMPLER", "jaeger_remote")]);
    assert_eq!(
        error.to_string(),
        "OTEL_TRACES_SAMPLER=jaeger_remote: expected always_on, always_off, traceidratio, \
         parentbased_always_on, parentbased_always_off or parentbased_traceidratio"
    );
}

#[test]
fn a_ratio_outside_zero_to_one_is_refused() {
    for bad in ["1.5", "-0.1", "half"] {
        let error = error(&[
            BASE,
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", bad),
        ]);
        assert_eq!(error.var(), "OTEL_TRACES_SAMPLER_ARG", "{bad}");
    }
}

// The sampler table.

fn sampler(name: &str, arg: Option<&str>) -> Sampler {
    let mut vars = vec![BASE, ("OTEL_TRACES_SAMPLER", name)];
    if let Some(arg) = arg {
        vars.push(("OTEL_TRACES_SAMPLER_ARG", arg));
    }
    config(&vars).sampler
}

/// A trace id whose low 8 bytes (the ratio sampler's draw) are `low`.
fn trace_id(low: u64) -> TraceId {
    let mut id = [0xab; 16];
    id[8..].copy_from_slice(&low.to_be_bytes());
    TraceId(id)
}

const ANY: u64 = 0x1234_5678_9abc_def0;

/// (decision for a root, under a sampled parent, under an unsampled parent).
fn decisions(sampler: Sampler, id: TraceId) -> (bool, bool, bool) {
    (
        sampler.sample(id, None),
        sampler.sample(id, Some(true)),
        sampler.sample(id, Some(false)),
    )
}

#[test]
fn always_on_samples_every_span_whatever_its_parent() {
    assert_eq!(
        decisions(sampler("always_on", None), trace_id(ANY)),
        (true, true, true)
    );
}

#[test]
fn always_off_samples_no_span_whatever_its_parent() {
    assert_eq!(
        decisions(sampler("always_off", None), trace_id(ANY)),
        (false, false, false)
    );
}

#[test]
fn parentbased_always_on_samples_roots_and_follows_the_parent() {
    assert_eq!(
        decisions(sampler("parentbased_always_on", None), trace_id(ANY)),
        (true, true, false)
    );
}

#[test]
fn parentbased_always_off_drops_roots_and_follows_the_parent() {
    assert_eq!(
        decisions(sampler("parentbased_always_off", None), trace_id(ANY)),
        (false, true, false)
    );
}

#[test]
fn traceidratio_zero_samples_no_trace_even_the_lowest_id() {
    assert_eq!(
        decisions(sampler("traceidratio", Some("0")), trace_id(0)),
        (false, false, false)
    );
}

#[test]
fn traceidratio_one_samples_every_trace_even_the_highest_id() {
    assert_eq!(
        decisions(sampler("traceidratio", Some("1")), trace_id(u64::MAX)),
        (true, true, true)
    );
}

#[test]
fn traceidratio_without_an_argument_samples_every_trace() {
    assert_eq!(
        sampler("traceidratio", None).root,
        RootSampler::TraceIdRatio(1.0)
    );
}

#[test]
fn traceidratio_samples_the_ids_below_the_ratio_s_share_of_the_draw_space() {
    let half = sampler("traceidratio", Some("0.5"));
    // The draw is the low 8 bytes shifted right once: 2^62 is the first draw at or above half.
    assert!(half.sample(trace_id((1 << 63) - 2), None));
    assert!(!half.sample(trace_id(1 << 63), None));
}

#[test]
fn parentbased_traceidratio_decides_roots_by_ratio_and_follows_the_parent() {
    let zero = sampler("parentbased_traceidratio", Some("0"));
    assert_eq!(decisions(zero, trace_id(0)), (false, true, false));
    let one = sampler("parentbased_traceidratio", Some("1"));
    assert_eq!(decisions(one, trace_id(u64::MAX)), (true, true, false));
}
