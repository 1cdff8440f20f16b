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
/// [`crate::redact`]) is a known node when it is one of the names, starts with one followed
/// by `.` (`kind-worker2.example.com`), or is the first label of a dotted name
/// (`k8s-prod-03` of `k8s-prod-03.corp.example`) that holds a `-` or a digit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeNames {
    names: BTreeSet<String>,
    first_labels: BTreeSet<String>,
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
            .map(|name| name.as_ref().trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        let first_labels = names
            .iter()
            .filter_map(|name| name.split_once('.').map(|(label, _)| label))
            .filter(|label| label.bytes().any(|c| c == b'-' || c.is_ascii_digit()))
            .map(str::to_owned)
            .collect();
        NodeNames {
            names,
            first_labels,
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

    /// Whether the lower-cased token names a known node.
    pub(super) fn knows(&self, token: &str) -> bool {
        if self.names.is_empty() {
            return false;
        }
        if self.names.contains(token) || self.first_labels.contains(token) {
            return true;
        }
        token
            .match_indices('.')
            .any(|(at, _)| self.names.contains(&token[..at]))
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

/// The phrases after which the components put a node's name: the next token is redacted.
/// `assigned` is special: the name comes after the next ` to ` on the same line.
const BEFORE_A_NAME: &[&str] = &["node ", "kubelet, ", "kubelet on "];

/// How far after `assigned ` the ` to ` is looked for: `assigned ` + a namespace (63) + `/` +
/// a pod name (253) + ` to `, rounded up.
const ASSIGNED_REACH: usize = 336;

fn word_start(b: &[u8], at: usize) -> bool {
    at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b'-')
}

fn starts_with_at(b: &[u8], at: usize, phrase: &str) -> bool {
    b.len() >= at + phrase.len() && b[at..at + phrase.len()].eq_ignore_ascii_case(phrase.as_bytes())
}

/// The host-name token starting at `at` (after spaces), trimmed of trailing `.` and `-`.
fn token_at(b: &[u8], mask: &[bool], mut at: usize) -> Option<(usize, usize)> {
    while free(b, mask, at) && b[at] == b' ' {
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
    Some((start, end))
}

/// Spans of node names at the positions the components' messages put them.
pub(super) fn find_node_positions(b: &[u8], mask: &[bool]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut push = |(s, e): (usize, usize), check_word: bool| {
        let word = String::from_utf8_lossy(&b[s..e]).to_ascii_lowercase();
        if !(check_word && NOT_A_NAME.contains(&word.as_str())) {
            spans.push((s, extend_port(b, mask, e)));
        }
    };
    for at in 0..b.len() {
        if mask[at] || !word_start(b, at) {
            continue;
        }
        if let Some(phrase) = BEFORE_A_NAME.iter().find(|p| starts_with_at(b, at, p)) {
            if let Some(span) = token_at(b, mask, at + phrase.len()) {
                push(span, *phrase == "node ");
            }
        } else if starts_with_at(b, at, "assigned ") {
            // The name follows within the same line and a bounded reach (a namespace and a pod
            // name), so a text of many "assigned" costs linear time.
            let reach = b.len().min(at + ASSIGNED_REACH);
            let line_end = b[at..reach]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(reach, |n| at + n);
            let to = (at..line_end).find(|&i| starts_with_at(b, i, " to "));
            if let Some(span) = to.and_then(|to| token_at(b, mask, to + 4)) {
                push(span, false);
            }
        }
    }
    spans
}
