//! A finished span as the transport hands it over, the limits that bound it, and its OTLP form.

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use muster_domain::trace::{SpanId, TraceContext};

use crate::proto;

/// At most this many bytes of an attribute's string value, a span's or an event's name and an
/// error message are kept (cut at a character boundary).
pub const MAX_VALUE_BYTES: usize = 256;
/// At most this many attributes of a span and of each of its events (the OTel default).
pub const MAX_ATTRIBUTES: usize = 128;
/// At most this many links of a span (the OTel default).
pub const MAX_LINKS: usize = 128;
/// At most this many events of a span (the OTel default).
pub const MAX_EVENTS: usize = 128;

/// What a span stands for, as OTLP knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Server,
    Internal,
    Client,
    Producer,
    Consumer,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(Cow<'static, str>),
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl From<&'static str> for AttrValue {
    fn from(value: &'static str) -> Self {
        AttrValue::Str(Cow::Borrowed(value))
    }
}

impl From<String> for AttrValue {
    fn from(value: String) -> Self {
        AttrValue::Str(Cow::Owned(value))
    }
}

impl From<bool> for AttrValue {
    fn from(value: bool) -> Self {
        AttrValue::Bool(value)
    }
}

impl From<i64> for AttrValue {
    fn from(value: i64) -> Self {
        AttrValue::Int(value)
    }
}

impl From<u32> for AttrValue {
    fn from(value: u32) -> Self {
        AttrValue::Int(i64::from(value))
    }
}

/// OTLP integers are signed: a value above `i64::MAX` is sent as `i64::MAX`.
impl From<u64> for AttrValue {
    fn from(value: u64) -> Self {
        AttrValue::Int(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

impl From<f64> for AttrValue {
    fn from(value: f64) -> Self {
        AttrValue::Float(value)
    }
}

/// A moment in a span's life.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub name: Cow<'static, str>,
    pub time: SystemTime,
    pub attributes: Vec<(&'static str, AttrValue)>,
}

/// A span whose work is over, with the ids drawn when it started.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedSpan {
    /// Its trace, its own span id, and whether it is sampled: the decision taken when its ids
    /// were drawn (see `Telemetry::sample`). An unsampled span is not exported.
    pub context: TraceContext,
    /// The parent span in the same trace; `None` for a root.
    pub parent: Option<SpanId>,
    pub name: Cow<'static, str>,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, AttrValue)>,
    /// Spans of this or other traces this one relates to (a replayed item's origin).
    pub links: Vec<TraceContext>,
    pub events: Vec<SpanEvent>,
    /// `Some(message)`: the span's status is ERROR with that message; `None`: UNSET.
    pub error: Option<String>,
}

/// A span cut to the limits, with what was cut counted (OTLP's `dropped_*_count`).
#[derive(Debug)]
pub(crate) struct Bounded {
    span: FinishedSpan,
    dropped_attributes: u32,
    dropped_links: u32,
    dropped_events: u32,
    dropped_event_attributes: Vec<u32>,
}

impl Bounded {
    pub(crate) fn new(mut span: FinishedSpan) -> Bounded {
        cut_cow(&mut span.name);
        let dropped_attributes = cut_attributes(&mut span.attributes);
        let dropped_links = cut_vec(&mut span.links, MAX_LINKS);
        let dropped_events = cut_vec(&mut span.events, MAX_EVENTS);
        let dropped_event_attributes = span
            .events
            .iter_mut()
            .map(|event| {
                cut_cow(&mut event.name);
                cut_attributes(&mut event.attributes)
            })
            .collect();
        if let Some(message) = &mut span.error {
            cut_string(message);
        }
        Bounded {
            span,
            dropped_attributes,
            dropped_links,
            dropped_events,
            dropped_event_attributes,
        }
    }

    pub(crate) fn into_proto(self) -> proto::Span {
        let Bounded {
            span,
            dropped_attributes,
            dropped_links,
            dropped_events,
            dropped_event_attributes,
        } = self;
        let kind = match span.kind {
            SpanKind::Server => proto::span::SpanKind::Server,
            SpanKind::Internal => proto::span::SpanKind::Internal,
            SpanKind::Client => proto::span::SpanKind::Client,
            SpanKind::Producer => proto::span::SpanKind::Producer,
            SpanKind::Consumer => proto::span::SpanKind::Consumer,
        };
        let status = span.error.map(|message| proto::Status {
            message,
            code: proto::status::StatusCode::Error as i32,
        });
        proto::Span {
            trace_id: span.context.trace_id.0.to_vec(),
            span_id: span.context.span_id.0.to_vec(),
            trace_state: String::new(),
            parent_span_id: span.parent.map_or_else(Vec::new, |p| p.0.to_vec()),
            flags: flags(span.context),
            name: span.name.into_owned(),
            kind: kind as i32,
            start_time_unix_nano: unix_nanos(span.start),
            end_time_unix_nano: unix_nanos(span.end),
            attributes: key_values(span.attributes),
            dropped_attributes_count: dropped_attributes,
            events: span
                .events
                .into_iter()
                .zip(dropped_event_attributes)
                .map(|(event, dropped)| proto::span::Event {
                    time_unix_nano: unix_nanos(event.time),
                    name: event.name.into_owned(),
                    attributes: key_values(event.attributes),
                    dropped_attributes_count: dropped,
                })
                .collect(),
            dropped_events_count: dropped_events,
            links: span
                .links
                .into_iter()
                .map(|link| proto::span::Link {
                    trace_id: link.trace_id.0.to_vec(),
                    span_id: link.span_id.0.to_vec(),
                    trace_state: String::new(),
                    attributes: Vec::new(),
                    dropped_attributes_count: 0,
                    flags: flags(link),
                })
                .collect(),
            dropped_links_count: dropped_links,
            status,
        }
    }
}

/// The W3C trace flags (only `sampled` is defined) in the low byte, as OTLP's `flags` wants.
fn flags(context: TraceContext) -> u32 {
    u32::from(context.sampled)
}

/// Nanoseconds since the Unix epoch; 0 for a time before it.
pub(crate) fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

pub(crate) fn key_value(key: String, value: AttrValue) -> proto::KeyValue {
    use proto::any_value::Value;
    let value = match value {
        AttrValue::Str(s) => Value::String(s.into_owned()),
        AttrValue::Bool(b) => Value::Bool(b),
        AttrValue::Int(i) => Value::Int(i),
        AttrValue::Float(f) => Value::Double(f),
    };
    proto::KeyValue {
        key,
        value: Some(proto::AnyValue { value: Some(value) }),
    }
}

fn key_values(attributes: Vec<(&'static str, AttrValue)>) -> Vec<proto::KeyValue> {
    attributes
        .into_iter()
        .map(|(key, value)| key_value(key.to_owned(), value))
        .collect()
}

/// Keeps the first `max` elements; how many went.
fn cut_vec<T>(items: &mut Vec<T>, max: usize) -> u32 {
    let dropped = items.len().saturating_sub(max);
    items.truncate(max);
    u32::try_from(dropped).unwrap_or(u32::MAX)
}

fn cut_attributes(attributes: &mut Vec<(&'static str, AttrValue)>) -> u32 {
    let dropped = cut_vec(attributes, MAX_ATTRIBUTES);
    for (_, value) in attributes.iter_mut() {
        if let AttrValue::Str(s) = value {
            cut_cow(s);
        }
    }
    dropped
}

fn cut_cow(text: &mut Cow<'static, str>) {
    if text.len() > MAX_VALUE_BYTES {
        let end = boundary(text);
        match text {
            Cow::Borrowed(s) => *s = &s[..end],
            Cow::Owned(s) => s.truncate(end),
        }
    }
}

fn cut_string(text: &mut String) {
    if text.len() > MAX_VALUE_BYTES {
        let end = boundary(text);
        text.truncate(end);
    }
}

/// The largest character boundary at most [`MAX_VALUE_BYTES`] into `text`.
fn boundary(text: &str) -> usize {
    (0..=MAX_VALUE_BYTES)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_cut_at_a_character_boundary_within_the_limit() {
        // 255 ASCII bytes, then a 2-byte character that straddles the limit.
        let mut text: Cow<'static, str> = Cow::Owned(format!("{}é tail", "a".repeat(255)));
        cut_cow(&mut text);
        assert_eq!(text, "a".repeat(255));
    }

    #[test]
    fn a_value_at_the_limit_is_kept_whole() {
        let mut text: Cow<'static, str> = Cow::Owned("b".repeat(MAX_VALUE_BYTES));
        cut_cow(&mut text);
        assert_eq!(text.len(), MAX_VALUE_BYTES);
    }
}
