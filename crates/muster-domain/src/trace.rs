//! W3C trace context (`traceparent`): the identity of the span an item's work continues.
//!
//! An item keeps the context of the span that created it (the enqueue call, or the completion
//! that named it as `next`); every span of its later life is a descendant of that one, so one
//! piece of work is one trace from enqueue to its last step. Ids are chosen by the caller (the
//! transport draws them): this module only reads, writes and stores them.

use std::fmt;

/// A trace's id: 16 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span's id: 8 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

/// One span's place in one trace, and whether the trace is sampled (the `traceparent` flags'
/// low bit). Other flag bits are not kept: W3C version 00 defines only this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub sampled: bool,
}

/// The stored form's length: trace id, span id, flags.
pub const STORED_LEN: usize = 16 + 8 + 1;

impl TraceContext {
    /// Reads a `traceparent` header value (version `00`, or a later version read as `00` as the
    /// W3C rules ask). `None` for anything malformed, or an all-zero id: the caller then starts
    /// a new trace, as the recommendation says.
    pub fn parse(header: &str) -> Option<TraceContext> {
        let b = header.as_bytes();
        // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55.
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let version = hex::<1>(&b[0..2])?[0];
        match version {
            0x00 if b.len() != 55 => return None,
            0xff => return None,
            0x00 => {}
            _ if b.len() > 55 && b[55] != b'-' => return None,
            _ => {}
        }
        let trace_id = TraceId(hex::<16>(&b[3..35])?);
        let span_id = SpanId(hex::<8>(&b[36..52])?);
        let flags = hex::<1>(&b[53..55])?[0];
        if trace_id.0 == [0; 16] || span_id.0 == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The same trace and sampling, with `span_id` as the parent: the context a child span of
    /// this one hands on.
    pub fn child(self, span_id: SpanId) -> TraceContext {
        TraceContext { span_id, ..self }
    }

    /// The 25 bytes kept in Logbook: trace id, span id, flags.
    pub fn to_stored(self) -> [u8; STORED_LEN] {
        let mut out = [0; STORED_LEN];
        out[..16].copy_from_slice(&self.trace_id.0);
        out[16..24].copy_from_slice(&self.span_id.0);
        out[24] = u8::from(self.sampled);
        out
    }

    /// Reads [`TraceContext::to_stored`]'s form back; `None` for any other length or a zero id.
    pub fn from_stored(bytes: &[u8]) -> Option<TraceContext> {
        if bytes.len() != STORED_LEN {
            return None;
        }
        let mut trace_id = [0; 16];
        trace_id.copy_from_slice(&bytes[..16]);
        let mut span_id = [0; 8];
        span_id.copy_from_slice(&bytes[16..24]);
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id: TraceId(trace_id),
            span_id: SpanId(span_id),
            sampled: bytes[24] & 1 == 1,
        })
    }
}

/// The `traceparent` header value, version `00`.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id,
            self.span_id,
            u8::from(self.sampled)
        )
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// `N` bytes from `2N` lowercase hex digits (W3C forbids upper case).
fn hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    fn nibble(d: u8) -> Option<u8> {
        match d {
            b'0'..=b'9' => Some(d - b'0'),
            b'a'..=b'f' => Some(d - b'a' + 10),
            _ => None,
        }
    }
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_version_00_header_reads_its_ids_and_sampled_flag() {
        let cx = TraceContext::parse(SAMPLE).unwrap();
        assert_eq!(cx.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(cx.span_id.to_string(), "00f067aa0ba902b7");
        assert!(cx.sampled);
    }

    #[test]
    fn a_context_writes_back_the_header_it_was_read_from() {
        assert_eq!(TraceContext::parse(SAMPLE).unwrap().to_string(), SAMPLE);
    }

    #[test]
    fn flags_without_the_low_bit_are_not_sampled() {
        let cx = TraceContext::parse(&SAMPLE.replace("-01", "-02")).unwrap();
        assert!(!cx.sampled);
    }

    #[test]
    fn malformed_headers_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_as_version_00_and_its_extra_fields_ignored() {
        let header = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds";
        let cx = TraceContext::parse(header).unwrap();
        assert_eq!(cx.to_string(), SAMPLE);
    }

    #[test]
    fn the_stored_form_reads_back_the_same_context() {
        let cx = TraceContext::parse(SAMPLE).unwrap();
        assert_eq!(TraceContext::from_stored(&cx.to_stored()), Some(cx));
    }

    #[test]
    fn a_stored_form_of_another_length_is_refused() {
        let cx = TraceContext::parse(SAMPLE).unwrap();
        assert_eq!(TraceContext::from_stored(&cx.to_stored()[..24]), None);
    }

    #[test]
    fn a_child_keeps_the_trace_and_sampling_with_its_own_span() {
        let cx = TraceContext::parse(SAMPLE).unwrap();
        let child = cx.child(SpanId([1, 2, 3, 4, 5, 6, 7, 8]));
        assert_eq!(
            child.to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01"
        );
    }
}
