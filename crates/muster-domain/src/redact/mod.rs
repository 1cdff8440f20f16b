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
//!   - provider node forms: EKS instance ids (`i-` and 8 or 17 hex digits), kind
//!     (`kind-worker`, `kind-worker2`, any `…-control-plane`), minikube (`minikube`,
//!     `minikube-m02`), k3d/k3s and `k8s-` names ending in a digit (`k3d-dev-agent-1`,
//!     `k8s-prod-03`).
//!
//!   A pod name (`trawl-7f9c`) is not a node name and stays; so do UUIDs and RFC 3339 times.
//!   These forms are the last line of defence: a node's name is whatever its operator chose.
//! * **Known node names** ([`redact_with`] and [`NodeNames`]): a host-name token in which a run
//!   of whole labels is one of the cluster's node names (any case), or a label is the first
//!   label of a dotted one.
//! * **Node positions** (`nodes.rs`): the token after `node` and whitespace (unless it is a word
//!   such as `is`, `was`, `affinity`), after `node/`, a quoted token after `node` or `nodes`,
//!   after `kubelet,`, `kubelet on` and `place pod on`, and after `to` in `assigned … to …` —
//!   where the scheduler, the kubelet, the DaemonSet and node controllers name a node —
//!   whatever its spelling. These tokens are bounded by the text, not by a length: the scan
//!   stays linear because each position is looked at once.
//! * **URLs.** The scanners do not care about URL syntax: in `scheme://user@HOST:port/path` the
//!   host (with its port, and brackets for IPv6) is a span like anywhere else.
//!
//! # Counting
//!
//! Spans found by the scanners are merged when they overlap or touch; every merged span
//! is replaced by one [`REDACTED`] and counts one. `10.0.0.1:80` is one span,
//! `10.0.0.1, 10.0.0.2` two. Text in which nothing matches is returned byte for byte.
//!
//! # Stability
//!
//! Redacting the answer again finds nothing more: `redact(&redact(t).0).1 == 0`. A second call
//! sees `[redacted]` where spans were, and that can uncover matches (in `fe80::1.node-3x` the
//! token `1.node-3x` is no host name, but once `fe80::1` is gone `node-3x` is). So the
//! scanners run in rounds, each seeing what earlier rounds masked exactly as a second call
//! would see `[redacted]`: IPv4 first, then host names, then node positions, then IPv6; until a round adds nothing.
//! Ordinary text settles in one round plus the one that confirms it. Text that keeps
//! uncovering matches after four rounds (only crafted chains do) has every whitespace-
//! delimited word that changed in the last round redacted whole, which uncovers nothing more
//! because no scanner looks across whitespace.

use std::net::Ipv6Addr;
use std::str::FromStr;

mod hosts;
mod nodes;

use hosts::find_hosts;
pub use nodes::NodeNames;
use nodes::find_node_positions;

/// The text put in place of every address or host name.
pub const REDACTED: &str = "[redacted]";

/// Redacts `text` by form only (no known node names); answers the cleaned text and how many
/// spans were replaced.
pub fn redact(text: &str) -> (String, usize) {
    redact_with(text, &NodeNames::default())
}

/// Redacts `text`, the names in `nodes` included; answers the cleaned text and how many spans
/// (merged runs of redacted bytes) were replaced.
pub fn redact_with(text: &str, nodes: &NodeNames) -> (String, usize) {
    let b = text.as_bytes();
    let mut mask = vec![false; b.len()];
    let mut added = Vec::new();
    for _ in 0..MAX_ROUNDS {
        added.clear();
        scan(b, nodes, &mut mask, &mut added);
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

/// One round of all the scanners, each seeing the bytes masked so far as separators — as
/// they would see `[redacted]` on a second call. Spans that add anything are masked and
/// listed in `added`.
fn scan(b: &[u8], nodes: &NodeNames, mask: &mut [bool], added: &mut Vec<(usize, usize)>) {
    let mut mark = |mask: &mut [bool], (s, e): (usize, usize)| {
        if mask[s..e].contains(&false) {
            mask[s..e].fill(true);
            added.push((s, e));
        }
    };
    for span in find_ipv4(b, mask) {
        mark(mask, span);
    }
    for span in find_hosts(b, mask, nodes) {
        mark(mask, span);
    }
    for span in find_node_positions(b, mask) {
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
mod tests;
