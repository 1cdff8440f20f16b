//! Redaction of network addresses and host names in free text.
//!
//! Health is defence in depth: worker pods should never report where they run, but whatever
//! slips through — IP addresses, host names, Kubernetes node names — is replaced by
//! [`REDACTED`] before anything is stored, logged or published, and the replacements are
//! counted. [`redact`] is a pure function — no I/O, no clock — and runs in time linear in the
//! length of the input whatever the input is: there is no backtracking, every scanner walks the
//! text once per round, every candidate it validates is bounded in length, and the number of
//! rounds is bounded (see *Stability*).
//!
//! # What is redacted
//!
//! * **IPv4.** A *dotted run* is a maximal run of the form `digits(.digits)*`. If a dotted run
//!   holds four consecutive numbers that are octets (one to three digits, value 0–255, leading
//!   zeros allowed) the *whole* run is redacted, so `1.2.3.4.5` becomes `[redacted]` rather than
//!   `[redacted].5` or `1.[redacted]`: a version string is indistinguishable from an address
//!   with something glued to it, and no part of an address may remain. Runs with fewer than four
//!   numbers (`v1.2.3`, `3.14`) or without four valid octets in a row (`10.0.0.256`) stay.
//!   The run may touch letters and punctuation on either side (`ip=10.1.2.3,`, `(10.0.0.1)`,
//!   `host10.0.0.1`). A following `:port` is part of the span; a port is one to five digits not
//!   followed by a letter, digit or `_` (`10.0.0.1:80` is one span, in `10.0.0.1:80x` only the
//!   address is redacted). The same holds for ports after host names and bracketed IPv6.
//! * **IPv6**, in every textual form [`std::net::Ipv6Addr`] accepts: full, compressed (`::`),
//!   with an embedded IPv4 tail (`::ffff:192.0.2.128`). A candidate is a maximal run of hex
//!   digits, `:` and `.`, cut at every dot that is not inside an IPv4 tail after a colon (so
//!   `fe80::1.Connection` yields `fe80::1`); it is redacted if `Ipv6Addr::from_str` accepts it,
//!   or accepts it after dropping a trailing single `:`, a leading single `:`, a trailing `:port`
//!   (for an unbracketed address followed by a port), or a first group glued to a label
//!   (`ipv6:fe80::1` gives the run `6:fe80::1`). Further:
//!   - a zone id (`fe80::1%eth0`, `%25eth0` in URLs) is part of the span;
//!   - square brackets and a following `:port` are part of the span: `[2001:db8::1]:8443` and
//!     `http://[::1]:8080/x` become `[redacted]` and `http://[redacted]/x`;
//!   - the address must not be glued to a letter, digit or `_` on either side, so that paths
//!     such as `std::io`, `Type::abc` or `Self::def` are left alone (a consequence: `ip6fe80::1`
//!     is not redacted, `ip6=fe80::1` and `ip6:fe80::1` are);
//!   - the candidate must contain at least one hex digit: the bare unspecified address `::`
//!     names no host and appears in ordinary text (`f :: Int`), so it stays;
//!   - a hex-only token such as `a:b::c` or `dead::beef` *is* an address by the grammar and is
//!     redacted; ordinary text with colons is not (`12:30:45`, `key:value`, `sha256:abcd…`,
//!     `E_UNAVAILABLE: x`, MAC addresses), because std rejects it.
//! * **Host names.** A *token* is a maximal run of `[A-Za-z0-9.-]`, trimmed of leading and
//!   trailing `.` and `-`. A token that matches one of the rules in the host table (see
//!   `HOST_RULES` in the source) is redacted whole, with a following `:port`. Matching is
//!   case-insensitive. The rules, where the *first label* is the token up to its first dot:
//!   - the name `localhost`, or any dotted name ending in `.localhost`;
//!   - any dotted name ending in an internal suffix: `.local`, `.cluster.local`,
//!     `.localdomain`, `.lan`, `.internal`, `.compute.internal`, `.ec2.internal`, `.svc`;
//!   - AWS node names: first label `ip-` followed by four dash-separated octets
//!     (`ip-10-0-1-23`, `ip-10-0-1-23.eu-west-1.compute.internal`);
//!   - GKE node names: first label starting with `gke-` with at least two more dashes;
//!   - AKS node names: first label starting with `aks-` and containing `-vmss` after it;
//!   - generic node names: first label `node-<rest>` where the rest holds at least one digit
//!     (`node-1`, `node-a7f3`; not `node-affinity` or `node-level`), or `<name>-node-<digits>`
//!     (`worker-node-3`).
//!
//!   A pod name (`trawl-7f9c`) is not a node name and stays; so do UUIDs and RFC 3339 times.
//! * **URLs.** The scanners do not care about URL syntax: in `scheme://user@HOST:port/path` the
//!   host (with its port, and brackets for IPv6) is a span like anywhere else.
//!
//! # Counting
//!
//! Spans found by the three scanners are merged when they overlap or touch; every merged span
//! is replaced by one [`REDACTED`] and counts one. `10.0.0.1:80` is one span,
//! `10.0.0.1, 10.0.0.2` two. Text in which nothing matches is returned byte for byte.
//!
//! # Stability
//!
//! Redacting the answer again finds nothing more: `redact(&redact(t).0).1 == 0`. A second call
//! sees `[redacted]` where spans were, and that can uncover matches (in `fe80::1.node-3x` the
//! token `1.node-3x` is no host name, but once `fe80::1` is gone `node-3x` is). So the
//! scanners run in rounds, each seeing what earlier rounds masked exactly as a second call
//! would see `[redacted]`: IPv4 first, then host names, then IPv6; until a round adds nothing.
//! Ordinary text settles in one round plus the one that confirms it. Text that keeps
//! uncovering matches after four rounds (only crafted chains do) has every whitespace-
//! delimited word that changed in the last round redacted whole, which uncovers nothing more
//! because no scanner looks across whitespace.

use std::net::Ipv6Addr;
use std::str::FromStr;

/// The text put in place of every address or host name.
pub const REDACTED: &str = "[redacted]";

/// Redacts `text`; answers the cleaned text and how many spans were replaced.
pub fn redact(text: &str) -> (String, usize) {
    let b = text.as_bytes();
    let mut mask = vec![false; b.len()];
    let mut added = Vec::new();
    for _ in 0..MAX_ROUNDS {
        added.clear();
        scan(b, &mut mask, &mut added);
        if added.is_empty() {
            break;
        }
    }
    if !added.is_empty() {
        mask_words_around(b, &mut mask, &added);
    }

    // A masked run starts at an ASCII byte or a word start and ends after an ASCII byte or at a
    // word end (words are delimited by ASCII whitespace), so every slice is on char boundaries.
    let mut out = String::new();
    let mut count = 0;
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if !mask[i] {
            i += 1;
            continue;
        }
        if count == 0 {
            out.reserve(text.len());
        }
        out.push_str(&text[copied..i]);
        while i < b.len() && mask[i] {
            i += 1;
        }
        out.push_str(REDACTED);
        count += 1;
        copied = i;
    }
    if count == 0 {
        return (text.to_owned(), 0);
    }
    out.push_str(&text[copied..]);
    (out, count)
}

/// How many times the scanners are run over the text before giving up on precision.
const MAX_ROUNDS: usize = 4;

/// One round of all three scanners, each seeing the bytes masked so far as separators — as
/// they would see `[redacted]` on a second call. Spans that add anything are masked and
/// listed in `added`.
fn scan(b: &[u8], mask: &mut [bool], added: &mut Vec<(usize, usize)>) {
    let mut mark = |mask: &mut [bool], (s, e): (usize, usize)| {
        if mask[s..e].contains(&false) {
            mask[s..e].fill(true);
            added.push((s, e));
        }
    };
    for span in find_ipv4(b, mask) {
        mark(mask, span);
    }
    for span in find_hosts(b, mask) {
        mark(mask, span);
    }
    for span in find_ipv6(b, mask) {
        mark(mask, span);
    }
}

/// The last resort when matches keep uncovering further matches: masks every whitespace-
/// delimited word that holds a span added in the last round. No scanner looks across ASCII
/// whitespace, so this cannot uncover anything else.
fn mask_words_around(b: &[u8], mask: &mut [bool], spans: &[(usize, usize)]) {
    let mut hot = vec![false; b.len()];
    for &(s, _) in spans {
        hot[s] = true;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let mut is_hot = false;
        while i < b.len() && !b[i].is_ascii_whitespace() {
            is_hot |= hot[i];
            i += 1;
        }
        if is_hot {
            mask[start..i].fill(true);
        }
    }
}

/// The longest text `Ipv6Addr::from_str` could accept is 45 bytes; longer candidates are not
/// parsed at all, which keeps the cost of every candidate bounded.
const MAX_IPV6_LEN: usize = 45;

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether the byte at `at` is free, that is neither masked nor past the end.
fn free(b: &[u8], mask: &[bool], at: usize) -> bool {
    at < b.len() && !mask[at]
}

/// If `b[end..]` starts with `:` and one to five digits that are not followed by a letter,
/// digit or `_`, the end of those digits; else `end`.
fn extend_port(b: &[u8], mask: &[bool], end: usize) -> usize {
    if !free(b, mask, end) || b[end] != b':' {
        return end;
    }
    let mut i = end + 1;
    while free(b, mask, i) && b[i].is_ascii_digit() && i - end <= 6 {
        i += 1;
    }
    let digits = i - end - 1;
    if (1..=5).contains(&digits) && !(free(b, mask, i) && is_word(b[i])) {
        i
    } else {
        end
    }
}

// ---------------------------------------------------------------------------------------------
// IPv4

fn find_ipv4(b: &[u8], mask: &[bool]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if mask[i] || !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        let mut octets_in_a_row = 0;
        let mut found = false;
        loop {
            let digits_start = i;
            let mut value: u32 = 0;
            while free(b, mask, i) && b[i].is_ascii_digit() {
                if i - digits_start < 3 {
                    value = value * 10 + u32::from(b[i] - b'0');
                }
                i += 1;
            }
            if i - digits_start <= 3 && value <= 255 {
                octets_in_a_row += 1;
                found |= octets_in_a_row >= 4;
            } else {
                octets_in_a_row = 0;
            }
            if free(b, mask, i) && b[i] == b'.' && free(b, mask, i + 1) && b[i + 1].is_ascii_digit()
            {
                i += 1;
            } else {
                break;
            }
        }
        if found {
            i = extend_port(b, mask, i);
            spans.push((start, i));
        }
    }
    spans
}

// ---------------------------------------------------------------------------------------------
// Host names

/// How a host-name rule matches a token (lower-cased, trimmed of leading and trailing `.`/`-`).
/// The *first label* is the token up to its first `.`.
#[derive(Debug, Clone, Copy)]
enum HostRule {
    /// The whole token is this name.
    Name(&'static str),
    /// The token ends with this suffix (given with its leading dot) and has something before it.
    Suffix(&'static str),
    /// The first label is this prefix followed by four dash-separated octets (0–255).
    PrefixOctets(&'static str),
    /// The first label starts with this prefix and has at least this many more dashes.
    PrefixDashes(&'static str, usize),
    /// The first label starts with this prefix and contains the needle after it.
    PrefixContains(&'static str, &'static str),
    /// The first label starts with this prefix and the rest holds at least one digit.
    PrefixDigit(&'static str),
    /// The first label is something non-empty, this infix, then only digits (at least one).
    InfixDigits(&'static str),
}

/// Every host-name rule. To redact another kind of name, add a line here and a unit test.
const HOST_RULES: &[HostRule] = &[
    HostRule::Name("localhost"),
    HostRule::Suffix(".localhost"),
    HostRule::Suffix(".local"),
    HostRule::Suffix(".cluster.local"),
    HostRule::Suffix(".localdomain"),
    HostRule::Suffix(".lan"),
    HostRule::Suffix(".internal"),
    HostRule::Suffix(".compute.internal"),
    HostRule::Suffix(".ec2.internal"),
    HostRule::Suffix(".svc"),
    // AWS: ip-10-0-1-23[.eu-west-1.compute.internal]
    HostRule::PrefixOctets("ip-"),
    // GKE: gke-<cluster>-<pool>-<hash>-<suffix>
    HostRule::PrefixDashes("gke-", 2),
    // AKS: aks-<pool>-<digits>-vmss<hex>
    HostRule::PrefixContains("aks-", "-vmss"),
    // Generic: node-1, node-a7f3
    HostRule::PrefixDigit("node-"),
    // Generic: worker-node-3
    HostRule::InfixDigits("-node-"),
];

fn is_octet(s: &str) -> bool {
    (1..=3).contains(&s.len())
        && s.bytes().all(|c| c.is_ascii_digit())
        && s.parse::<u16>().is_ok_and(|v| v <= 255)
}

impl HostRule {
    fn matches(self, token: &str) -> bool {
        let label = token.split('.').next().unwrap_or(token);
        match self {
            HostRule::Name(name) => token == name,
            HostRule::Suffix(suffix) => token.len() > suffix.len() && token.ends_with(suffix),
            HostRule::PrefixOctets(prefix) => label.strip_prefix(prefix).is_some_and(|rest| {
                let mut parts = 0;
                rest.split('-').all(|p| {
                    parts += 1;
                    parts <= 4 && is_octet(p)
                }) && parts == 4
            }),
            HostRule::PrefixDashes(prefix, dashes) => label
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.bytes().filter(|&c| c == b'-').count() >= dashes),
            HostRule::PrefixContains(prefix, needle) => label
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.contains(needle)),
            HostRule::PrefixDigit(prefix) => label
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.bytes().any(|c| c.is_ascii_digit())),
            HostRule::InfixDigits(infix) => label.rfind(infix).is_some_and(|at| {
                let digits = &label[at + infix.len()..];
                at > 0 && !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit())
            }),
        }
    }
}

fn is_host_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'.' || c == b'-'
}

fn find_hosts(b: &[u8], mask: &[bool]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut lower = String::new();
    let mut i = 0;
    while i < b.len() {
        if mask[i] || !is_host_char(b[i]) {
            i += 1;
            continue;
        }
        let run_start = i;
        while free(b, mask, i) && is_host_char(b[i]) {
            i += 1;
        }
        let run_end = i;
        let trim = |c: &u8| *c == b'.' || *c == b'-';
        let lead = b[run_start..run_end].iter().take_while(|c| trim(c)).count();
        let s = run_start + lead;
        let tail = b[s..run_end].iter().rev().take_while(|c| trim(c)).count();
        let e = run_end - tail;
        if s >= e {
            continue;
        }
        lower.clear();
        lower.extend(b[s..e].iter().map(|c| char::from(c.to_ascii_lowercase())));
        if HOST_RULES.iter().any(|rule| rule.matches(&lower)) {
            let end = if e == run_end {
                extend_port(b, mask, e)
            } else {
                e
            };
            spans.push((s, end));
            i = i.max(end);
        }
    }
    spans
}

// ---------------------------------------------------------------------------------------------
// IPv6

fn is_v6_char(c: u8) -> bool {
    c.is_ascii_hexdigit() || c == b':' || c == b'.'
}

fn is_zone_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-'
}

/// Finds IPv6 spans. A run of hex digits, `:` and `.` is tried whole (masked bytes included,
/// so that `::ffff:192.0.2.128` is one address although its IPv4 tail is already masked) and,
/// if it holds masked bytes, piece by piece between them. Either way it is first cut into
/// segments at every dot that is not part of an IPv4 tail.
fn find_ipv6(b: &[u8], mask: &[bool]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut segments = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_v6_char(b[i]) {
            i += 1;
            continue;
        }
        let s = i;
        while i < b.len() && is_v6_char(b[i]) {
            i += 1;
        }
        let e = i;
        segments.clear();
        push_segments(b, s, e, &mut segments);
        if mask[s..e].contains(&true) {
            let mut p = s;
            while p < e {
                if mask[p] {
                    p += 1;
                    continue;
                }
                let ps = p;
                while p < e && !mask[p] {
                    p += 1;
                }
                push_segments(b, ps, p, &mut segments);
            }
        }
        for &(ss, se) in &segments {
            if let Some(span) = ipv6_in(b, mask, ss, se) {
                spans.push(span);
                i = i.max(span.1);
            }
        }
    }
    spans
}

/// If `b[at..end]` starts with an IPv4 tail — four groups of one to three digits joined by
/// dots — the end of that tail.
fn ipv4_tail_end(b: &[u8], at: usize, end: usize) -> Option<usize> {
    let mut i = at;
    for group in 0..4 {
        if group > 0 {
            if i >= end || b[i] != b'.' {
                return None;
            }
            i += 1;
        }
        let digits_start = i;
        while i < end && b[i].is_ascii_digit() && i - digits_start < 4 {
            i += 1;
        }
        if !(1..=3).contains(&(i - digits_start)) {
            return None;
        }
    }
    Some(i)
}

/// Cuts `b[s..e]` at every dot that is not inside an IPv4 tail following a colon: nowhere
/// else can a dot be part of an IPv6 address (`fe80::1.Connection` holds `fe80::1`).
fn push_segments(b: &[u8], s: usize, e: usize, out: &mut Vec<(usize, usize)>) {
    let mut segment_start = s;
    let mut tail_end = s;
    for i in s..e {
        match b[i] {
            b':' => {
                if let Some(t) = ipv4_tail_end(b, i + 1, e) {
                    tail_end = tail_end.max(t);
                }
            }
            b'.' if i >= tail_end => {
                if segment_start < i {
                    out.push((segment_start, i));
                }
                segment_start = i + 1;
            }
            _ => {}
        }
    }
    if segment_start < e {
        out.push((segment_start, e));
    }
}

fn is_ipv6(candidate: &[u8]) -> bool {
    candidate.len() <= MAX_IPV6_LEN
        && candidate.iter().filter(|&&c| c == b':').count() >= 2
        && candidate.iter().any(u8::is_ascii_hexdigit)
        && std::str::from_utf8(candidate).is_ok_and(|s| Ipv6Addr::from_str(s).is_ok())
}

/// The span of the IPv6 address in the run `b[s0..e0]` of hex digits, `:` and `.`, if any.
fn ipv6_in(b: &[u8], mask: &[bool], s0: usize, e0: usize) -> Option<(usize, usize)> {
    if !b[s0..e0].contains(&b':') {
        return None;
    }
    let separates = |at: usize| mask[at] || !is_word(b[at]);
    let mut s = s0;
    while s < e0 && b[s] == b'.' {
        s += 1;
    }
    let mut e = e0;
    while e > s && b[e - 1] == b'.' {
        e -= 1;
    }
    if e - s < 2 {
        return None;
    }
    // `addr:fe80::1`: the run starts with the colon after a label.
    if b[s] == b':' && b[s + 1] != b':' {
        s += 1;
    }

    // Where the address may start: at the run, or after a first group glued to a label
    // (`ipv6:fe80::1` gives the run `6:fe80::1`).
    let mut starts = [Some(s), None];
    if let Some(colon) = b[s..e].iter().position(|&c| c == b':').map(|p| s + p)
        && colon > s
        && colon + 1 < e
        && b[colon + 1] != b':'
    {
        starts[1] = Some(colon + 1);
    }

    // Where it may end: (end of the address text, end of the span).
    let mut ends = [Some((e, e)), None, None];
    if e - s >= 2 && b[e - 1] == b':' && b[e - 2] != b':' {
        // A trailing single colon is punctuation, unless it leads into a masked span.
        let span_end = if e == e0 && e0 < b.len() && mask[e0] {
            e
        } else {
            e - 1
        };
        ends[1] = Some((e - 1, span_end));
    }
    let port_digits = b[s..e]
        .iter()
        .rev()
        .take(6)
        .take_while(|c| c.is_ascii_digit())
        .count();
    if (1..=5).contains(&port_digits) && e - port_digits > s && b[e - port_digits - 1] == b':' {
        ends[2] = Some((e - port_digits - 1, e));
    }

    for start in starts.into_iter().flatten() {
        if start > 0 && !separates(start - 1) {
            continue;
        }
        for (addr_end, span_end) in ends.into_iter().flatten() {
            if addr_end <= start || !is_ipv6(&b[start..addr_end]) {
                continue;
            }
            let mut end = span_end;
            if addr_end == e0 && free(b, mask, e0) && b[e0] == b'%' {
                let mut z = e0 + 1;
                while free(b, mask, z) && is_zone_char(b[z]) {
                    z += 1;
                }
                while z > e0 + 1 && (b[z - 1] == b'.' || b[z - 1] == b'-') {
                    z -= 1;
                }
                if z > e0 + 1 {
                    end = z;
                }
            }
            if end < b.len() && !separates(end) {
                continue;
            }
            let mut span_start = start;
            if start > 0
                && free(b, mask, start - 1)
                && b[start - 1] == b'['
                && free(b, mask, end)
                && b[end] == b']'
            {
                span_start = start - 1;
                end = extend_port(b, mask, end + 1);
            }
            return Some((span_start, end));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn r(text: &str) -> (String, usize) {
        redact(text)
    }

    fn unchanged(text: &str) {
        assert_eq!(redact(text), (text.to_owned(), 0), "{text:?}");
    }

    // --- IPv4 ------------------------------------------------------------------------------

    #[test]
    fn an_ipv4_address_is_redacted() {
        assert_eq!(
            r("cannot reach 10.0.3.7 now"),
            ("cannot reach [redacted] now".into(), 1)
        );
    }

    #[test]
    fn an_ipv4_address_with_its_port_is_one_span() {
        assert_eq!(
            r("dial 10.0.3.7:8080 failed"),
            ("dial [redacted] failed".into(), 1)
        );
    }

    #[test]
    fn an_ipv4_address_touching_punctuation_or_letters_is_redacted() {
        assert_eq!(
            r("peer (192.168.1.20) said no"),
            ("peer ([redacted]) said no".into(), 1)
        );
        assert_eq!(
            r("ip=10.1.2.3,port=80"),
            ("ip=[redacted],port=80".into(), 1)
        );
        assert_eq!(r("host10.0.0.1x"), ("host[redacted]x".into(), 1));
        assert_eq!(r("at 10.0.0.1."), ("at [redacted].".into(), 1));
    }

    #[test]
    fn separate_ipv4_addresses_count_separately() {
        assert_eq!(
            r("10.0.0.1, 10.0.0.2 and 0.0.0.0"),
            ("[redacted], [redacted] and [redacted]".into(), 3)
        );
    }

    #[test]
    fn a_dotted_run_longer_than_four_numbers_is_redacted_whole_if_it_holds_an_address() {
        assert_eq!(r("v1.2.3.4.5 ok"), ("v[redacted] ok".into(), 1));
        assert_eq!(r("x 300.1.2.3.4"), ("x [redacted]".into(), 1));
    }

    #[test]
    fn version_strings_and_invalid_octets_are_not_redacted() {
        unchanged("running v1.2.3");
        unchanged("pi is 3.14, version 2026.12.02");
        unchanged("10.0.0.256 is no address");
        unchanged("1.2.3.1000");
        unchanged("1234.5.6.7");
    }

    // --- IPv6 ------------------------------------------------------------------------------

    #[test]
    fn a_full_form_ipv6_address_is_redacted() {
        assert_eq!(
            r("from 2001:0db8:0000:0000:0000:ff00:0042:8329 ok"),
            ("from [redacted] ok".into(), 1)
        );
    }

    #[test]
    fn a_compressed_ipv6_address_is_redacted() {
        assert_eq!(
            r("from 2001:db8::ff00:42:8329."),
            ("from [redacted].".into(), 1)
        );
        assert_eq!(r("loopback ::1 up"), ("loopback [redacted] up".into(), 1));
        assert_eq!(r("prefix fe80:: on"), ("prefix [redacted] on".into(), 1));
        assert_eq!(r("IP=FE80::ABCD"), ("IP=[redacted]".into(), 1));
    }

    #[test]
    fn an_ipv6_address_with_a_zone_id_is_redacted_with_the_zone() {
        assert_eq!(
            r("link fe80::1%eth0 down"),
            ("link [redacted] down".into(), 1)
        );
        assert_eq!(r("link fe80::1%eth0."), ("link [redacted].".into(), 1));
    }

    #[test]
    fn an_ipv4_mapped_ipv6_address_is_one_span() {
        assert_eq!(
            r("client ::ffff:192.0.2.128 closed"),
            ("client [redacted] closed".into(), 1)
        );
        assert_eq!(
            r("client ::ffff:192.0.2.128:443 closed"),
            ("client [redacted] closed".into(), 1)
        );
    }

    #[test]
    fn a_bracketed_ipv6_address_with_its_port_is_one_span() {
        assert_eq!(
            r("connect [2001:db8::1]:8443: refused"),
            ("connect [redacted]: refused".into(), 1)
        );
        assert_eq!(r("[::1]"), ("[redacted]".into(), 1));
    }

    #[test]
    fn an_unbracketed_full_form_ipv6_address_with_a_port_is_one_span() {
        assert_eq!(
            r("to 2001:db8:0:0:0:0:0:1:443 x"),
            ("to [redacted] x".into(), 1)
        );
    }

    #[test]
    fn an_ipv6_address_glued_to_a_sentence_by_a_dot_is_redacted() {
        assert_eq!(
            r("dial fe80::1.Connection refused"),
            ("dial [redacted].Connection refused".into(), 1)
        );
        assert_eq!(r("::1.fe80::2"), ("[redacted].[redacted]".into(), 2));
        assert_eq!(r("v2.dead::beef"), ("v2.[redacted]".into(), 1));
    }

    #[test]
    fn an_ipv6_address_after_a_label_and_colon_is_redacted() {
        assert_eq!(r("ipv6:fe80::1"), ("ipv6:[redacted]".into(), 1));
        assert_eq!(r("addr:fe80::1"), ("addr:[redacted]".into(), 1));
        assert_eq!(
            r("peer fe80::1: reset"),
            ("peer [redacted]: reset".into(), 1)
        );
    }

    #[test]
    fn a_hex_only_double_colon_token_counts_as_an_address() {
        assert_eq!(r("a:b::c"), ("[redacted]".into(), 1));
        assert_eq!(r("dead::beef"), ("[redacted]".into(), 1));
    }

    #[test]
    fn text_with_colons_that_is_no_ipv6_address_is_not_redacted() {
        unchanged("time 12:30:45");
        unchanged("key:value");
        unchanged("E_UNAVAILABLE: x");
        unchanged("E_LEASE_LOST: lease 3");
        unchanged("sha256:abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
        unchanged("mac 00:1a:2b:3c:4d:5e");
        unchanged("at 2026-12-02T14:49:55Z and 2026-12-02T14:49:55.123+01:00");
    }

    #[test]
    fn code_paths_with_double_colons_are_not_redacted() {
        unchanged("muster_domain::item::Error at std::io::Read");
        unchanged("Type::default() and Self::Abc and Cafe::new");
        unchanged("f :: Int -> Int");
        unchanged("listening on [::]:80");
    }

    #[test]
    fn an_ipv6_address_glued_to_a_word_is_not_redacted() {
        unchanged("ip6fe80::1");
        unchanged("fe80::1x");
    }

    // --- Host names -----------------------------------------------------------------------

    #[test]
    fn internal_host_names_are_redacted() {
        assert_eq!(
            r("GET http://db.default.svc.cluster.local:5432/x"),
            ("GET http://[redacted]/x".into(), 1)
        );
        assert_eq!(r("on build-7.lan."), ("on [redacted].".into(), 1));
        assert_eq!(r("printer.local"), ("[redacted]".into(), 1));
        assert_eq!(r("box.localdomain"), ("[redacted]".into(), 1));
        assert_eq!(r("cache.corp.internal"), ("[redacted]".into(), 1));
        assert_eq!(r("api.my-ns.svc"), ("[redacted]".into(), 1));
        assert_eq!(r("a.ec2.internal"), ("[redacted]".into(), 1));
        assert_eq!(r("APP.Cluster.Local"), ("[redacted]".into(), 1));
    }

    #[test]
    fn localhost_is_redacted_with_its_port() {
        assert_eq!(
            r("dial tcp localhost:8080: refused"),
            ("dial tcp [redacted]: refused".into(), 1)
        );
        assert_eq!(r("LocalHost"), ("[redacted]".into(), 1));
        assert_eq!(r("app.localhost"), ("[redacted]".into(), 1));
    }

    #[test]
    fn aws_node_names_are_redacted() {
        assert_eq!(
            r("node ip-10-0-1-23 lost"),
            ("node [redacted] lost".into(), 1)
        );
        assert_eq!(
            r("on ip-10-0-1-23.eu-west-1.compute.internal,"),
            ("on [redacted],".into(), 1)
        );
        unchanged("ip-10-0-1-256 and ip-10-0-1 and zip-10-0-1-2");
    }

    #[test]
    fn gke_node_names_are_redacted() {
        assert_eq!(
            r("node gke-prod-pool-1-a1b2c3d4-xyz9 ready"),
            ("node [redacted] ready".into(), 1)
        );
        unchanged("gke-cluster only");
    }

    #[test]
    fn aks_node_names_are_redacted() {
        assert_eq!(
            r("on aks-nodepool1-12345678-vmss00000a."),
            ("on [redacted].".into(), 1)
        );
        unchanged("aks-nodepool1 only");
    }

    #[test]
    fn generic_node_names_are_redacted() {
        assert_eq!(
            r("evicted from node-1"),
            ("evicted from [redacted]".into(), 1)
        );
        assert_eq!(r("NODE-A7F3:10250"), ("[redacted]".into(), 1));
        assert_eq!(r("on worker-node-3."), ("on [redacted].".into(), 1));
        assert_eq!(r("node-1.example.com"), ("[redacted]".into(), 1));
    }

    #[test]
    fn words_that_merely_mention_nodes_are_not_redacted() {
        unchanged("node affinity; node-affinity; node-level; 3 node(s) ready; -node-");
        unchanged("worker-node-x and node- and node-abc");
    }

    #[test]
    fn a_pod_name_is_not_a_node_name() {
        unchanged("pod trawl-7f9c restarted 3 times");
    }

    #[test]
    fn uuids_and_times_are_not_redacted() {
        unchanged("item 0193a0b0-0000-7000-8000-000000000001 failed");
        unchanged("at 2026-12-02T14:49:55Z");
    }

    // --- URLs and mixtures ----------------------------------------------------------------

    #[test]
    fn the_host_of_a_url_is_redacted() {
        assert_eq!(r("http://[::1]:8080/x"), ("http://[redacted]/x".into(), 1));
        assert_eq!(
            r("https://user@10.0.0.9:6443/api?x=1"),
            ("https://user@[redacted]/api?x=1".into(), 1)
        );
        assert_eq!(
            r("http://[fe80::1%25eth0]:80/"),
            ("http://[redacted]/".into(), 1)
        );
        assert_eq!(
            r("redis://node-2.cache.svc.cluster.local:6379/0"),
            ("redis://[redacted]/0".into(), 1)
        );
    }

    #[test]
    fn touching_matches_are_one_span() {
        assert_eq!(r("10.0.0.1node-1"), ("[redacted]".into(), 1));
        assert_eq!(r("g1.2.3.4::1"), ("g[redacted]".into(), 1));
    }

    #[test]
    fn text_without_addresses_comes_back_byte_for_byte() {
        unchanged("");
        unchanged("all good 🚀 — café, e\u{301}, 日本語, ünïcödé: ok");
        unchanged("retrying in 3s (attempt 2/5); exit code 137");
    }

    #[test]
    fn unicode_around_an_address_is_kept() {
        assert_eq!(r("🚀 10.0.0.1 café"), ("🚀 [redacted] café".into(), 1));
    }

    #[test]
    fn redacted_text_is_not_redacted_again() {
        unchanged(REDACTED);
        unchanged("[redacted]:[redacted] [redacted].");
    }

    #[test]
    fn a_match_uncovered_by_another_is_redacted_in_the_same_call() {
        assert_eq!(
            r("on fe80::1.node-3x ok"),
            ("on [redacted].[redacted] ok".into(), 2)
        );
        assert_eq!(r("node-3.fe80::1"), ("[redacted]".into(), 1));
    }

    #[test]
    fn a_chain_of_matches_uncovering_each_other_is_redacted_word_by_word() {
        // Each `::1` is glued to a word until the node name before it is gone, and each node
        // name is hidden in a longer token until the `::1` before it is gone.
        let chain = "fe80::1.node-3g::1.node-4g::1.node-5g::1.node-6g::1.node-7g::1";
        let (once, count) = redact(&format!("at {chain} ok"));
        assert_eq!((once.as_str(), count), ("at [redacted] ok", 1));
        assert_eq!(redact(&once).1, 0);
    }

    #[test]
    fn pathological_inputs_take_linear_time() {
        for unit in [
            "1.", "1:", "a:", "::", "1.2.3.", "f", "-node-", "node-", ":1", "[::1]", "1.2.3.4:",
        ] {
            let text = unit.repeat(60_000 / unit.len());
            let (once, _) = redact(&text);
            assert_eq!(redact(&once).1, 0, "{unit:?}");
        }
    }

    // --- Properties -------------------------------------------------------------------------

    /// Renders every group with four digits, no compression.
    fn full_form(ip: Ipv6Addr) -> String {
        ip.segments()
            .iter()
            .map(|g| format!("{g:04x}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// IPv6 addresses with runs of zero groups now and then, so compression is exercised.
    fn ipv6() -> impl Strategy<Value = Ipv6Addr> {
        prop_oneof![
            any::<u128>().prop_map(Ipv6Addr::from),
            proptest::array::uniform8(prop_oneof![Just(0u16), any::<u16>()])
                .prop_map(Ipv6Addr::from),
            any::<u32>().prop_map(|v4| Ipv4Addr::from(v4).to_ipv6_mapped()),
        ]
    }

    /// An address as text, and the text it is written as (with brackets, port).
    fn address() -> impl Strategy<Value = (String, String)> {
        let v4 = (any::<u32>(), proptest::option::of(any::<u16>())).prop_map(|(v, port)| {
            let ip = Ipv4Addr::from(v).to_string();
            match port {
                Some(p) => (ip.clone(), format!("{ip}:{p}")),
                None => (ip.clone(), ip),
            }
        });
        let v6 =
            (ipv6(), any::<bool>(), 0..4u8, any::<u16>()).prop_map(|(ip, full, shape, port)| {
                let ip = if full { full_form(ip) } else { ip.to_string() };
                let rendered = match shape {
                    0 => ip.clone(),
                    1 => format!("[{ip}]"),
                    2 => format!("[{ip}]:{port}"),
                    _ => format!("{ip}:{port}"),
                };
                (ip, rendered)
            });
        prop_oneof![v4, v6]
    }

    const SAFE_TEXT: &str = "[a-zA-Z ,;()=]{0,24}";
    const SEPARATOR: &str = "[ =(),;]";

    proptest! {
        // Default case count; failures are reported, not written to a regressions file.
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn an_embedded_address_never_survives(
            prefix in SAFE_TEXT,
            before in SEPARATOR,
            (ip, rendered) in address(),
            after in SEPARATOR,
            suffix in SAFE_TEXT,
        ) {
            // The bare unspecified address `::` is left alone on purpose (see the module docs).
            prop_assume!(ip != "::");
            let text = format!("{prefix}{before}{rendered}{after}{suffix}");
            let (out, count) = redact(&text);
            prop_assert!(!out.contains(&ip), "{text:?} -> {out:?}");
            prop_assert!(out.contains(REDACTED), "{text:?} -> {out:?}");
            prop_assert!(count >= 1);
        }

        #[test]
        fn text_that_cannot_hold_an_address_comes_back_unchanged(
            text in "[g-zG-Z ,;!?éü🚀]{0,64}"
        ) {
            prop_assert_eq!(redact(&text), (text.clone(), 0));
        }

        #[test]
        fn redacting_twice_changes_nothing_more(
            parts in proptest::collection::vec(
                prop_oneof![
                    "[a-zA-Z0-9 ,;()=:.%\\[\\]/@-]{0,12}",
                    address().prop_map(|(_, rendered)| rendered),
                    Just("node-7".to_owned()),
                    Just("ip-10-0-1-23.compute.internal".to_owned()),
                    Just("fe80::1%eth0".to_owned()),
                ],
                0..8,
            )
        ) {
            let text = parts.concat();
            let (once, _) = redact(&text);
            let (twice, count) = redact(&once);
            prop_assert_eq!(&twice, &once, "{:?}", text);
            prop_assert_eq!(count, 0);
        }
    }
}
