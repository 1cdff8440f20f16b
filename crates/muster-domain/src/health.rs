//! Worker health from Shipkeeper: sanitising and summarising a report. Pure.
//!
//! Every free-text field goes through [`crate::redact::redact_with`] (with what is known of the
//! cluster's node names, [`NodeKnowledge`]) before anything is stored, logged or published, and
//! is cut to [`MAX_TEXT`] characters. While the node names are not known yet (or no longer),
//! an event's message — the only field that names nodes in prose — is withheld whole and the
//! event keeps only its reason. Pods are summarised per kind:
//! the kind is ready only if every reported pod is; restarts are summed; the phase is the first
//! phase other than `Running` among its pods, else `Running`.

use std::collections::BTreeMap;

use crate::Kind;
use crate::redact::{NodeNames, redact_with};

/// Longest text kept of any field, in characters.
pub const MAX_TEXT: usize = 512;
/// Events kept per kind; older ones are dropped.
pub const MAX_EVENTS_PER_KIND: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodHealth {
    pub kind: Kind,
    pub ready: bool,
    pub restarts: u32,
    pub phase: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HealthEvent {
    pub kind: Kind,
    pub reason: String,
    pub message: String,
}

/// The health of one kind in one report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindHealth {
    pub kind: Kind,
    pub pods: u32,
    pub ready: Option<bool>,
    pub restarts: u32,
    pub phase: Option<String>,
    pub events: Vec<HealthEvent>,
}

/// What is known of the cluster's node names when a report is sanitised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKnowledge<'a> {
    /// The cluster's current node names: redacted wherever they appear.
    Names(&'a NodeNames),
    /// No source of names is configured: node names are redacted by form and position only.
    FormOnly,
    /// A source is configured but its names are not known (not listed yet, or unreachable for
    /// too long): messages are withheld whole.
    Unknown,
}

fn clean(text: &str, nodes: &NodeNames, redacted: &mut usize) -> String {
    let (out, n) = redact_with(text, nodes);
    *redacted += n;
    out.chars().take(MAX_TEXT).collect()
}

/// Redacts every text field by form and position only and summarises the report per kind
/// (see [`sanitize_with`]).
pub fn sanitize(pods: &[PodHealth], events: &[HealthEvent]) -> (Vec<KindHealth>, usize) {
    sanitize_with(pods, events, NodeKnowledge::FormOnly)
}

/// Redacts every text field and summarises the report per kind. Answers the summaries (in
/// kind order) and the `redacted` count: the spans replaced by `[redacted]` plus the messages
/// withheld whole (one each) while the node names are [`NodeKnowledge::Unknown`].
pub fn sanitize_with(
    pods: &[PodHealth],
    events: &[HealthEvent],
    knowledge: NodeKnowledge<'_>,
) -> (Vec<KindHealth>, usize) {
    let none = NodeNames::default();
    let nodes = match knowledge {
        NodeKnowledge::Names(names) => names,
        NodeKnowledge::FormOnly | NodeKnowledge::Unknown => &none,
    };
    let mut redacted = 0;
    let mut by_kind: BTreeMap<Kind, KindHealth> = BTreeMap::new();
    let entry = |map: &mut BTreeMap<Kind, KindHealth>, kind: Kind| {
        map.entry(kind)
            .or_insert_with(|| KindHealth {
                kind,
                pods: 0,
                ready: None,
                restarts: 0,
                phase: None,
                events: Vec::new(),
            })
            .kind
    };
    for p in pods {
        entry(&mut by_kind, p.kind);
        let phase = clean(&p.phase, nodes, &mut redacted);
        let k = by_kind.get_mut(&p.kind).expect("inserted above");
        k.pods += 1;
        k.ready = Some(k.ready.unwrap_or(true) && p.ready);
        k.restarts = k.restarts.saturating_add(p.restarts);
        let worse = phase != "Running";
        match &k.phase {
            None => k.phase = Some(phase),
            Some(current) if current == "Running" && worse => k.phase = Some(phase),
            Some(_) => {}
        }
    }
    for e in events {
        entry(&mut by_kind, e.kind);
        let message = if knowledge == NodeKnowledge::Unknown && !e.message.is_empty() {
            redacted += 1;
            String::new()
        } else {
            clean(&e.message, nodes, &mut redacted)
        };
        let clean_event = HealthEvent {
            kind: e.kind,
            reason: clean(&e.reason, nodes, &mut redacted),
            message,
        };
        let k = by_kind.get_mut(&e.kind).expect("inserted above");
        k.events.push(clean_event);
    }
    for k in by_kind.values_mut() {
        let excess = k.events.len().saturating_sub(MAX_EVENTS_PER_KIND);
        k.events.drain(..excess);
    }
    (by_kind.into_values().collect(), redacted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(message: &str) -> HealthEvent {
        HealthEvent {
            kind: Kind::Trawl,
            reason: "NodeNotReady".into(),
            message: message.into(),
        }
    }

    /// One trawl event with `message` sanitised: its (reason, message) and the count.
    fn sanitized(message: &str, knowledge: NodeKnowledge<'_>) -> ((String, String), usize) {
        let (kinds, redacted) = sanitize_with(&[], &[event(message)], knowledge);
        let e = &kinds[0].events[0];
        ((e.reason.clone(), e.message.clone()), redacted)
    }

    fn pod(kind: Kind, ready: bool, restarts: u32, phase: &str) -> PodHealth {
        PodHealth {
            kind,
            ready,
            restarts,
            phase: phase.into(),
        }
    }

    #[test]
    fn a_known_node_name_is_redacted_in_a_message() {
        let nodes = NodeNames::new(["tidewater"]);
        assert_eq!(
            sanitized("pod trawl-0 lost tidewater", NodeKnowledge::Names(&nodes)),
            (
                ("NodeNotReady".into(), "pod trawl-0 lost [redacted]".into()),
                1
            )
        );
    }

    #[test]
    fn while_node_names_are_unknown_a_message_is_withheld_and_counted_once() {
        assert_eq!(
            sanitized(
                "pod trawl-0 lost tidewater at 10.0.0.1",
                NodeKnowledge::Unknown
            ),
            (("NodeNotReady".into(), String::new()), 1)
        );
    }

    #[test]
    fn form_only_redaction_misses_a_name_of_no_known_form() {
        assert_eq!(
            sanitized("pod trawl-0 lost tidewater", NodeKnowledge::FormOnly),
            (
                ("NodeNotReady".into(), "pod trawl-0 lost tidewater".into()),
                0
            )
        );
    }

    #[test]
    fn pods_are_summarised_per_kind() {
        let (kinds, _) = sanitize(
            &[
                pod(Kind::Trawl, true, 1, "Running"),
                pod(Kind::Trawl, false, 2, "CrashLoopBackOff"),
                pod(Kind::Assay, true, 0, "Running"),
            ],
            &[],
        );
        assert_eq!(
            kinds
                .iter()
                .map(|k| (k.kind, k.pods, k.ready, k.restarts, k.phase.as_deref()))
                .collect::<Vec<_>>(),
            [
                (Kind::Trawl, 2, Some(false), 3, Some("CrashLoopBackOff")),
                (Kind::Assay, 1, Some(true), 0, Some("Running")),
            ]
        );
    }

    #[test]
    fn addresses_in_events_are_redacted_and_counted() {
        let ev = HealthEvent {
            kind: Kind::Trawl,
            reason: "BackOff".into(),
            message: "dial tcp 10.0.3.7:5432: refused".into(),
        };
        let (kinds, redacted) = sanitize(&[], &[ev]);
        assert_eq!(redacted, 1);
        assert_eq!(kinds[0].events[0].message, "dial tcp [redacted]: refused");
        assert_eq!(kinds[0].ready, None);
    }

    #[test]
    fn only_the_newest_events_of_a_kind_are_kept() {
        let events: Vec<_> = (0..30)
            .map(|i| HealthEvent {
                kind: Kind::Trawl,
                reason: format!("r{i}"),
                message: String::new(),
            })
            .collect();
        let (kinds, _) = sanitize(&[], &events);
        assert_eq!(kinds[0].events.len(), MAX_EVENTS_PER_KIND);
        assert_eq!(kinds[0].events[0].reason, "r10");
    }

    #[test]
    fn long_text_is_cut() {
        let ev = HealthEvent {
            kind: Kind::Trawl,
            reason: "x".repeat(5000),
            message: String::new(),
        };
        let (kinds, _) = sanitize(&[], &[ev]);
        assert_eq!(kinds[0].events[0].reason.chars().count(), MAX_TEXT);
    }
}
