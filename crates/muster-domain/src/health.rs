//! Worker health from Shipkeeper: sanitising and summarising a report. Pure.
//!
//! Every free-text field goes through [`crate::redact::redact`] before anything is stored,
//! logged or published, and is cut to [`MAX_TEXT`] characters. Pods are summarised per kind:
//! the kind is ready only if every reported pod is; restarts are summed; the phase is the first
//! phase other than `Running` among its pods, else `Running`.

use std::collections::BTreeMap;

use crate::Kind;
use crate::redact::redact;

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

fn clean(text: &str, redacted: &mut usize) -> String {
    let (out, n) = redact(text);
    *redacted += n;
    out.chars().take(MAX_TEXT).collect()
}

/// Redacts every text field and summarises the report per kind. Answers the summaries (in
/// kind order) and how many spans were redacted.
pub fn sanitize(pods: &[PodHealth], events: &[HealthEvent]) -> (Vec<KindHealth>, usize) {
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
        let phase = clean(&p.phase, &mut redacted);
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
        let clean_event = HealthEvent {
            kind: e.kind,
            reason: clean(&e.reason, &mut redacted),
            message: clean(&e.message, &mut redacted),
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

    fn pod(kind: Kind, ready: bool, restarts: u32, phase: &str) -> PodHealth {
        PodHealth {
            kind,
            ready,
            restarts,
            phase: phase.into(),
        }
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
