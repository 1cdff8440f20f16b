//! Host names: the table of naming rules for hosts and nodes, and the scanner that applies it
//! together with the cluster's known node names.

use super::nodes::NodeNames;
use super::{extend_port, free};

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
    /// The first label is this prefix followed by exactly one of these numbers of hex digits.
    PrefixHex(&'static str, &'static [usize]),
    /// The first label is this prefix followed by nothing or only digits.
    PrefixThenDigits(&'static str),
    /// The first label starts with this prefix, has more after it, and ends with a digit.
    PrefixEndsWithDigit(&'static str),
    /// The first label ends with this suffix, optionally followed by digits, and has something
    /// before it.
    LabelSuffixDigits(&'static str),
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
    // EKS: the EC2 instance id as node name, i-0abc123d or i-0abc123def4567890
    HostRule::PrefixHex("i-", &[8, 17]),
    // kind: kind-control-plane, kind-worker, kind-worker2 (clusters of other names: the
    // control plane by its suffix; their workers by the cluster's known names or a template)
    HostRule::PrefixThenDigits("kind-worker"),
    HostRule::LabelSuffixDigits("-control-plane"),
    // minikube: minikube, minikube-m02
    HostRule::Name("minikube"),
    HostRule::PrefixEndsWithDigit("minikube-m"),
    // k3d and k3s: k3d-dev-server-0, k3d-dev-agent-1, k3s-agent-2; naming schemes such as
    // k8s-prod-03
    HostRule::PrefixEndsWithDigit("k3d-"),
    HostRule::PrefixEndsWithDigit("k3s-"),
    HostRule::PrefixEndsWithDigit("k8s-"),
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
            HostRule::PrefixHex(prefix, lengths) => {
                label.strip_prefix(prefix).is_some_and(|rest| {
                    lengths.contains(&rest.len()) && rest.bytes().all(|c| c.is_ascii_hexdigit())
                })
            }
            HostRule::PrefixThenDigits(prefix) => label
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.bytes().all(|c| c.is_ascii_digit())),
            HostRule::PrefixEndsWithDigit(prefix) => label
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.bytes().last().is_some_and(|c| c.is_ascii_digit())),
            HostRule::LabelSuffixDigits(suffix) => {
                let name = label.trim_end_matches(|c: char| c.is_ascii_digit());
                name.len() > suffix.len() && name.ends_with(suffix)
            }
        }
    }
}

pub(super) fn is_host_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'.' || c == b'-'
}

/// Host-name tokens that a rule of the table matches or that name a known node.
pub(super) fn find_hosts(b: &[u8], mask: &[bool], nodes: &NodeNames) -> Vec<(usize, usize)> {
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
        if nodes.knows(&lower) || HOST_RULES.iter().any(|rule| rule.matches(&lower)) {
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
