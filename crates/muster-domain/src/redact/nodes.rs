//! Node names: the cluster's own, and the places in Kubernetes' event messages that name a node
//! whatever its spelling.
//!
//! A node's name is whatever its operator chose (`rack3-blade12`), so no naming rule can find
//! them all. Two things can: knowing the names ([`NodeNames`], from the API server's node list
//! or a file of names), and knowing where the Kubernetes components put a node's name in their
//! event messages ([`find_node_positions`]): the scheduler's `Successfully assigned ns/pod to
//! NODE`, the node controllers' and kubelet's `Node NODE status is now: …`, `Registered Node
//! NODE in Controller`, `Deleting node NODE because …`, preemption's `… on node NODE`, the
//! `kubelet, NODE` of an event's source.

use std::collections::BTreeSet;

use super::hosts::is_host_char;
use super::{extend_port, free};

/// The cluster's node names, lower-cased. A host-name token (see the module docs of
/// [`crate::redact`]) is a known node when a run of its whole dot-separated labels is one of the
/// names (`kind-worker2`, `kind-worker2.example.com`, `metrics.rack3-blade12.corp`,
/// `https://kubelet.rack3-blade12:10250`), or one of its labels is the first label of a dotted
/// name (`bigiron` of the node `bigiron.lab.example`: its short host name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeNames {
    names: BTreeSet<String>,
    first_labels: BTreeSet<String>,
    /// The most labels any name has: longer runs of a token's labels are never looked up.
    most_labels: usize,
}

impl NodeNames {
    /// The names given, trimmed and lower-cased; empty ones are skipped.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names: BTreeSet<String> = names
            .into_iter()
            .map(|name| name.as_ref().trim().trim_matches('.').to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        let first_labels = names
            .iter()
            .filter_map(|name| name.split_once('.').map(|(label, _)| label.to_owned()))
            .collect();
        let most_labels = names
            .iter()
            .map(|name| name.split('.').count())
            .max()
            .unwrap_or(0);
        NodeNames {
            names,
            first_labels,
            most_labels,
        }
    }

    /// A file of names: one a line; blank lines and lines starting with `#` are skipped.
    pub fn from_lines(text: &str) -> Self {
        NodeNames::new(
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with('#')),
        )
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether the lower-cased token names a known node. Each label start is tried with runs of
    /// at most `most_labels` labels, so a token costs O(labels × most_labels) lookups.
    pub(super) fn knows(&self, token: &str) -> bool {
        if self.names.is_empty() {
            return false;
        }
        let starts: Vec<usize> = std::iter::once(0)
            .chain(token.match_indices('.').map(|(at, _)| at + 1))
            .collect();
        let ends: Vec<usize> = token
            .match_indices('.')
            .map(|(at, _)| at)
            .chain(std::iter::once(token.len()))
            .collect();
        starts.iter().enumerate().any(|(i, &start)| {
            self.first_labels.contains(&token[start..ends[i]])
                || ends[i..]
                    .iter()
                    .take(self.most_labels)
                    .any(|&end| start < end && self.names.contains(&token[start..end]))
        })
    }
}

/// Words that follow "node" in the components' messages without being a node's name
/// (`The node was low on resource`, `Updated Node Allocatable limit`, `node affinity`).
const NOT_A_NAME: &[&str] = &[
    "a",
    "affinity",
    "allocatable",
    "an",
    "and",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "by",
    "can",
    "condition",
    "conditions",
    "controller",
    "could",
    "did",
    "didn",
    "does",
    "event",
    "events",
    "for",
    "from",
    "had",
    "has",
    "have",
    "if",
    "in",
    "info",
    "is",
    "it",
    "its",
    "label",
    "labels",
    "lease",
    "lifecycle",
    "may",
    "must",
    "name",
    "names",
    "not",
    "of",
    "on",
    "or",
    "pool",
    "port",
    "ports",
    "pressure",
    "ready",
    "resource",
    "resources",
    "selector",
    "selectors",
    "should",
    "status",
    "taint",
    "taints",
    "that",
    "the",
    "this",
    "to",
    "was",
    "were",
    "which",
    "will",
    "with",
    "without",
];

/// Phrases after which the components put a node's name, matched case-insensitively at a word
/// start and followed by whitespace: the next token is a node. (`node` itself, `nodes` and
/// `assigned … to` are handled apart.)
const BEFORE_A_NAME: &[&str] = &["kubelet,", "kubelet on", "place pod on"];

/// How far after `assigned ` the ` to ` is looked for: `assigned ` + a namespace (63) + `/` +
/// a pod name (253) + ` to `, rounded up.
const ASSIGNED_REACH: usize = 336;

/// The longest word of [`NOT_A_NAME`]: longer tokens are names without a look.
const LONGEST_NOT_A_NAME: usize = 11;

/// A word starts at `at`: the text's start, or after a byte that is no word byte (a masked
/// byte counts as a boundary, as `[redacted]` would on a second call).
fn word_start(b: &[u8], mask: &[bool], at: usize) -> bool {
    at == 0
        || mask[at - 1]
        || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b'-')
}

fn starts_with_at(b: &[u8], at: usize, phrase: &str) -> bool {
    b.len() >= at + phrase.len() && b[at..at + phrase.len()].eq_ignore_ascii_case(phrase.as_bytes())
}

fn is_space(b: &[u8], mask: &[bool], at: usize) -> bool {
    free(b, mask, at) && b[at].is_ascii_whitespace()
}

fn is_quote(c: u8) -> bool {
    matches!(c, b'"' | b'\'')
}

/// The host-name token at `at`, after whitespace and an opening quote, trimmed
/// of trailing `.` and `-`; and whether it was quoted.
fn token_at(b: &[u8], mask: &[bool], mut at: usize) -> Option<((usize, usize), bool)> {
    while is_space(b, mask, at) {
        at += 1;
    }
    let quoted = free(b, mask, at) && is_quote(b[at]);
    if quoted {
        at += 1;
    }
    let start = at;
    while free(b, mask, at) && is_host_char(b[at]) {
        at += 1;
    }
    let end = start
        + b[start..at]
            .iter()
            .rposition(|c| c.is_ascii_alphanumeric())?
        + 1;
    Some(((start, end), quoted))
}

/// Where the token naming a node starts after a phrase at `at`, and whether that token could
/// also be an ordinary word (only after `node` and whitespace, unquoted).
fn after_phrase(b: &[u8], mask: &[bool], at: usize) -> Option<(usize, bool)> {
    if starts_with_at(b, at, "node") {
        let next = at + 4;
        if free(b, mask, next) && (b[next] == b'/' || is_quote(b[next])) {
            // node/NAME (kubectl's resource/name), node"NAME"
            return Some((next + usize::from(b[next] == b'/'), false));
        }
        if is_space(b, mask, next) {
            return Some((next, true)); // node NAME, unless NAME is a word such as "is"
        }
        if starts_with_at(b, next, "s") && is_space(b, mask, next + 1) {
            // nodes "NAME" not found: only a quoted name
            let mut q = next + 1;
            while is_space(b, mask, q) {
                q += 1;
            }
            return (free(b, mask, q) && is_quote(b[q])).then_some((q, false));
        }
        return None;
    }
    BEFORE_A_NAME
        .iter()
        .find(|p| starts_with_at(b, at, p) && is_space(b, mask, at + p.len()))
        .map(|p| (at + p.len(), false))
}

/// Spans of node names at the positions the components' messages put them.
pub(super) fn find_node_positions(b: &[u8], mask: &[bool]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut push = |((s, e), quoted): ((usize, usize), bool), may_be_a_word: bool| {
        let word = may_be_a_word && !quoted && e - s <= LONGEST_NOT_A_NAME && {
            let lower = String::from_utf8_lossy(&b[s..e]).to_ascii_lowercase();
            NOT_A_NAME.contains(&lower.as_str())
        };
        if !word {
            spans.push((s, extend_port(b, mask, e)));
        }
    };
    for at in 0..b.len() {
        if mask[at] || !word_start(b, mask, at) {
            continue;
        }
        if let Some((from, may_be_a_word)) = after_phrase(b, mask, at) {
            if let Some(token) = token_at(b, mask, from) {
                push(token, may_be_a_word);
            }
        } else if starts_with_at(b, at, "assigned") && is_space(b, mask, at + 8) {
            // The name follows `to` within the same line and a bounded reach (a namespace and
            // a pod name), so a text of many "assigned" costs linear time.
            let reach = b.len().min(at + ASSIGNED_REACH);
            let line_end = b[at..reach]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(reach, |n| at + n);
            let to = (at + 8..line_end.saturating_sub(2)).find(|&i| {
                is_space(b, mask, i) && starts_with_at(b, i + 1, "to") && is_space(b, mask, i + 3)
            });
            if let Some(token) = to.and_then(|to| token_at(b, mask, to + 3)) {
                push(token, false);
            }
        }
    }
    spans
}
