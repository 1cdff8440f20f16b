//! The exporter's settings from the standard `OTEL_*` environment variables.
//!
//! Read as the OpenTelemetry specification says: an empty variable counts as unset, a
//! traces-specific variable (`OTEL_EXPORTER_OTLP_TRACES_*`) wins over the general one, and the
//! base endpoint gets `/v1/traces` appended to its path while the traces endpoint is used as is.
//! Unlike the specification's SDKs, a bad value is an error (the server refuses to start) rather
//! than a warning and a default, and tracing is off (not sent to `localhost:4318`) when no
//! endpoint is set. Header values are secrets: no error and no `Debug` output shows them.

use std::fmt;
use std::time::Duration;

use hyper::Uri;
use hyper::header::{HeaderName, HeaderValue};
use muster_domain::trace::TraceId;

/// Everything the exporter needs; `Config::from_env` reads it.
#[derive(Clone)]
pub struct Config {
    /// Where batches are posted: the full URL of the traces endpoint (`http://` only).
    pub endpoint: Uri,
    /// Sent with every export (authentication to the collector): secret, never shown.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// One export's limit, connection included.
    pub timeout: Duration,
    pub service_name: String,
    /// `service.version`: this crate's version unless the binary sets its own.
    pub service_version: String,
    /// `service.instance.id`, when the binary knows one (a pod name).
    pub service_instance_id: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES` without `service.name` (which [`Config::service_name`] holds).
    pub resource_attributes: Vec<(String, String)>,
    pub sampler: Sampler,
    /// At most this many spans wait for export; more are dropped and counted.
    pub max_queue_size: usize,
    /// At most this many spans per export request.
    pub max_export_batch_size: usize,
    /// What is queued is sent at least this often.
    pub schedule_delay: Duration,
}

/// Header names only: their values are secrets.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(name, _)| format!("{name}: <hidden>"))
            .collect();
        f.debug_struct("Config")
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("service_name", &self.service_name)
            .field("service_version", &self.service_version)
            .field("service_instance_id", &self.service_instance_id)
            .field("resource_attributes", &self.resource_attributes)
            .field("sampler", &self.sampler)
            .field("max_queue_size", &self.max_queue_size)
            .field("max_export_batch_size", &self.max_export_batch_size)
            .field("schedule_delay", &self.schedule_delay)
            .finish()
    }
}

/// A bad `OTEL_*` variable. The message names the variable, and never shows a header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "{var}={value}: only http/protobuf is supported (grpc and http/json are not); unset it or set http/protobuf"
    )]
    Protocol { var: &'static str, value: String },
    #[error(
        "{var}: https endpoints are not supported; send to a collector agent on the node or in the pod over http://"
    )]
    Tls { var: &'static str },
    #[error("{var}={value}: expected {expected}")]
    Invalid {
        var: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{var}: expected {expected} (the value is not shown: it may hold a secret)")]
    InvalidSecret {
        var: &'static str,
        expected: &'static str,
    },
}

impl ConfigError {
    /// A stable code for each kind of error.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::Protocol { .. } => "E_OTEL_PROTOCOL",
            ConfigError::Tls { .. } => "E_OTEL_TLS",
            ConfigError::Invalid { .. } | ConfigError::InvalidSecret { .. } => "E_OTEL_VALUE",
        }
    }

    /// The variable at fault.
    pub fn var(&self) -> &'static str {
        match self {
            ConfigError::Protocol { var, .. }
            | ConfigError::Tls { var }
            | ConfigError::Invalid { var, .. }
            | ConfigError::InvalidSecret { var, .. } => var,
        }
    }
}

/// Whether a new span is sampled (`OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// The decision for a root span; for every span when not parent-based.
    pub root: RootSampler,
    /// A span with a parent takes the parent's sampled flag (the `parentbased_*` samplers).
    pub parent_based: bool,
}

/// The decision taken without a parent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RootSampler {
    AlwaysOn,
    AlwaysOff,
    /// Samples this share of traces, decided by the trace id alone, so every process that
    /// sees one trace decides alike.
    TraceIdRatio(f64),
}

impl Sampler {
    /// The decision for a new span of trace `trace_id` whose parent (local or remote) has the
    /// sampled flag `parent_sampled`; `None` for a root.
    pub fn sample(&self, trace_id: TraceId, parent_sampled: Option<bool>) -> bool {
        match parent_sampled {
            Some(sampled) if self.parent_based => sampled,
            _ => self.root.sample(trace_id),
        }
    }
}

impl RootSampler {
    fn sample(self, trace_id: TraceId) -> bool {
        match self {
            RootSampler::AlwaysOn => true,
            RootSampler::AlwaysOff => false,
            RootSampler::TraceIdRatio(ratio) => {
                // As the OTel SDKs do: the trace id's low 8 bytes, shifted to 63 bits, against
                // the ratio of 2^63. Ratio 1 takes every id, ratio 0 none.
                let mut low = [0; 8];
                low.copy_from_slice(&trace_id.0[8..]);
                let draw = u64::from_be_bytes(low) >> 1;
                let bound = (ratio * (1u64 << 63) as f64) as u64;
                draw < bound
            }
        }
    }
}

const DEFAULT_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_QUEUE: usize = 2048;
const DEFAULT_BATCH: usize = 512;
const DEFAULT_DELAY_MS: u64 = 5000;

impl Config {
    /// The settings from the environment, read through `var` (`|name| std::env::var(name).ok()`
    /// in the binary). `Ok(None)` when tracing is off: no `OTEL_EXPORTER_OTLP_ENDPOINT` nor
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_SDK_DISABLED=true`.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Config>, ConfigError> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let endpoint = if let Some(url) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            http_uri("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url, None)?
        } else if let Some(url) = get("OTEL_EXPORTER_OTLP_ENDPOINT") {
            http_uri("OTEL_EXPORTER_OTLP_ENDPOINT", &url, Some("/v1/traces"))?
        } else {
            return Ok(None);
        };
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = get(name) {
                if protocol.trim() != "http/protobuf" {
                    return Err(ConfigError::Protocol {
                        var: name,
                        value: protocol,
                    });
                }
                break;
            }
        }
        let headers = match pick(
            &get,
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ) {
            Some((name, text)) => headers(name, &text)?,
            None => Vec::new(),
        };
        let timeout = match pick(
            &get,
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ) {
            Some((name, text)) => millis(name, &text)?,
            None => Duration::from_millis(DEFAULT_TIMEOUT_MS),
        };
        let mut resource_attributes = match get("OTEL_RESOURCE_ATTRIBUTES") {
            Some(text) => pairs(&text).ok_or(ConfigError::Invalid {
                var: "OTEL_RESOURCE_ATTRIBUTES",
                value: text.clone(),
                expected: "key=value pairs separated by commas, values percent-encoded",
            })?,
            None => Vec::new(),
        };
        let from_resource = resource_attributes
            .iter()
            .position(|(key, _)| key == "service.name")
            .map(|i| resource_attributes.remove(i).1);
        let service_name = get("OTEL_SERVICE_NAME")
            .map(|name| name.trim().to_owned())
            .or(from_resource)
            .unwrap_or_else(|| "muster".to_owned());
        let sampler = sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))?;
        let max_queue_size = count(&get, "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_QUEUE)?;
        let max_export_batch_size = count(&get, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_BATCH)?;
        if max_export_batch_size > max_queue_size {
            return Err(ConfigError::Invalid {
                var: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                value: max_export_batch_size.to_string(),
                expected: "at most OTEL_BSP_MAX_QUEUE_SIZE",
            });
        }
        let schedule_delay = match get("OTEL_BSP_SCHEDULE_DELAY") {
            Some(text) => millis("OTEL_BSP_SCHEDULE_DELAY", &text)?,
            None => Duration::from_millis(DEFAULT_DELAY_MS),
        };
        Ok(Some(Config {
            endpoint,
            headers,
            timeout,
            service_name,
            service_version: env!("CARGO_PKG_VERSION").to_owned(),
            service_instance_id: None,
            resource_attributes,
            sampler,
            max_queue_size,
            max_export_batch_size,
            schedule_delay,
        }))
    }
}

/// The traces-specific variable when set, else the general one: (its name, its value).
fn pick(
    get: &impl Fn(&str) -> Option<String>,
    specific: &'static str,
    general: &'static str,
) -> Option<(&'static str, String)> {
    get(specific)
        .map(|v| (specific, v))
        .or_else(|| get(general).map(|v| (general, v)))
}

fn http_uri(var: &'static str, text: &str, append: Option<&str>) -> Result<Uri, ConfigError> {
    let text = text.trim();
    let invalid = || ConfigError::Invalid {
        var,
        value: text.to_owned(),
        expected: "an http:// URL with a host (http://collector:4318)",
    };
    let uri: Uri = text.parse().map_err(|_| invalid())?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => return Err(ConfigError::Tls { var }),
        _ => return Err(invalid()),
    }
    let authority = uri.authority().ok_or_else(invalid)?.clone();
    if authority.as_str().contains('@') {
        // Credentials in the URL would be logged with it; the headers variable is the place.
        return Err(ConfigError::InvalidSecret {
            var,
            expected: "an http:// URL without user information (use OTEL_EXPORTER_OTLP_HEADERS)",
        });
    }
    let Some(append) = append else {
        return Ok(uri);
    };
    let path = uri.path().trim_end_matches('/');
    let path_and_query = match uri.query() {
        Some(query) => format!("{path}{append}?{query}"),
        None => format!("{path}{append}"),
    };
    Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(path_and_query)
        .build()
        .map_err(|_| invalid())
}

fn headers(var: &'static str, text: &str) -> Result<Vec<(HeaderName, HeaderValue)>, ConfigError> {
    let invalid = || ConfigError::InvalidSecret {
        var,
        expected: "name=value pairs separated by commas, values percent-encoded",
    };
    pairs(text)
        .ok_or_else(invalid)?
        .into_iter()
        .map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            let mut value = HeaderValue::from_str(&value).map_err(|_| invalid())?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// `key=value,key2=value2` (the W3C baggage form the spec uses): keys trimmed, values trimmed
/// and percent-decoded (a `%` without two hex digits is kept as it is); empty members skipped.
/// `None` when a member has no `=` or no key, or a decoded value is not UTF-8.
fn pairs(text: &str) -> Option<Vec<(String, String)>> {
    text.split(',')
        .filter(|member| !member.trim().is_empty())
        .map(|member| {
            let (key, value) = member.split_once('=')?;
            let key = key.trim();
            if key.is_empty() {
                return None;
            }
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .ok()?;
            Some((key.to_owned(), value.into_owned()))
        })
        .collect()
}

fn millis(var: &'static str, text: &str) -> Result<Duration, ConfigError> {
    match text.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::Invalid {
            var,
            value: text.to_owned(),
            expected: "a whole number of milliseconds above 0",
        }),
    }
}

fn count(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    default: usize,
) -> Result<usize, ConfigError> {
    let Some(text) = get(var) else {
        return Ok(default);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError::Invalid {
            var,
            value: text,
            expected: "a whole number above 0",
        }),
    }
}

fn sampler(name: Option<String>, arg: Option<String>) -> Result<Sampler, ConfigError> {
    let name = name.map_or_else(
        || "parentbased_always_on".to_owned(),
        |n| n.trim().to_owned(),
    );
    let ratio = || -> Result<f64, ConfigError> {
        let Some(text) = &arg else {
            return Ok(1.0);
        };
        match text.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(ConfigError::Invalid {
                var: "OTEL_TRACES_SAMPLER_ARG",
                value: text.clone(),
                expected: "a ratio from 0 to 1 (0.25 samples a quarter of the traces)",
            }),
        }
    };
    let (root, parent_based) = match name.as_str() {
        "always_on" => (RootSampler::AlwaysOn, false),
        "always_off" => (RootSampler::AlwaysOff, false),
        "traceidratio" => (RootSampler::TraceIdRatio(ratio()?), false),
        "parentbased_always_on" => (RootSampler::AlwaysOn, true),
        "parentbased_always_off" => (RootSampler::AlwaysOff, true),
        "parentbased_traceidratio" => (RootSampler::TraceIdRatio(ratio()?), true),
        _ => {
            return Err(ConfigError::Invalid {
                var: "OTEL_TRACES_SAMPLER",
                value: name,
                expected: "always_on, always_off, traceidratio, parentbased_always_on, \
                           parentbased_always_off or parentbased_traceidratio",
            });
        }
    };
    Ok(Sampler { root, parent_based })
}
