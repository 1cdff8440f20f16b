//! Pausing a kind: while a kind is paused none of its items is leased; leases already out go on
//! (heartbeat, complete, fail, needs_subtool), so a pause never loses a result a worker holds.
//!
//! A kind's pause state is a subject of its own in the ledger (subject type `kind`, subject id
//! the kind's name): each change is one entry, `paused` (`active` → `paused`, the operator's
//! reason in its data) or `resumed` (`paused` → `active`), sealed into the kind's chain. Asking
//! for the state the kind is already in changes nothing and records nothing: a second pause
//! keeps the first one's `since` and reason.

use muster_ledger::{ChainHead, Entry, SealedEntry};
use serde_json::json;
use time::OffsetDateTime;

use crate::{Kind, Principal};

/// The subject type of a kind's ledger chain.
pub const SUBJECT: &str = "kind";

/// A kind's pause state, with the head of its ledger chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindPause {
    pub kind: Kind,
    pub paused: bool,
    /// When the current state began; `None` for a kind that was never paused.
    pub since: Option<OffsetDateTime>,
    /// The pause's reason, while paused.
    pub reason: Option<String>,
    /// Who made the current state (`None` before the first pause).
    pub actor: Option<String>,
    pub chain: ChainHead,
}

impl KindPause {
    /// A kind that was never paused.
    pub fn never_paused(kind: Kind) -> Self {
        KindPause {
            kind,
            paused: false,
            since: None,
            reason: None,
            actor: None,
            chain: ChainHead::genesis(),
        }
    }

    /// Pauses the kind for `reason`; the entry that records it, or `None` when it was paused
    /// already (the first pause's `since` and reason stay).
    pub fn pause(
        &mut self,
        reason: &str,
        actor: Principal,
        now: OffsetDateTime,
    ) -> Option<SealedEntry> {
        if self.paused {
            return None;
        }
        let entry = self.record("paused", "active", "paused", Some(reason), actor, now);
        self.paused = true;
        self.reason = Some(reason.to_owned());
        Some(entry)
    }

    /// Resumes the kind (`reason` optional); the entry that records it, or `None` when it was
    /// not paused.
    pub fn resume(
        &mut self,
        reason: Option<&str>,
        actor: Principal,
        now: OffsetDateTime,
    ) -> Option<SealedEntry> {
        if !self.paused {
            return None;
        }
        let entry = self.record("resumed", "paused", "active", reason, actor, now);
        self.paused = false;
        self.reason = None;
        Some(entry)
    }

    fn record(
        &mut self,
        event: &str,
        from: &str,
        to: &str,
        reason: Option<&str>,
        actor: Principal,
        now: OffsetDateTime,
    ) -> SealedEntry {
        let sealed = self.chain.seal(Entry {
            subject_type: SUBJECT.to_owned(),
            subject_id: self.kind.as_str().to_owned(),
            event: event.to_owned(),
            from_state: Some(from.to_owned()),
            to_state: Some(to.to_owned()),
            actor: actor.to_string(),
            fence: None,
            at: now,
            data: json!({ "reason": reason }).to_string(),
        });
        // The time as sealed (whole microseconds), so the row and the entry agree.
        self.since = Some(sealed.entry.at);
        self.actor = Some(sealed.entry.actor.clone());
        sealed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_ledger::verify_chain;
    use time::macros::datetime;

    const T: OffsetDateTime = datetime!(2026-12-07 12:00:00.123456789 UTC);

    #[test]
    fn a_pause_is_an_entry_of_the_kinds_chain_naming_the_operator_and_the_reason() {
        let mut k = KindPause::never_paused(Kind::Trawl);
        let e = k
            .pause("bad image", Principal::Operator, T)
            .expect("an entry");
        assert_eq!(e.entry.subject_type, "kind");
        assert_eq!(e.entry.subject_id, "trawl");
        assert_eq!(e.entry.event, "paused");
        assert_eq!(
            (e.entry.from_state.as_deref(), e.entry.to_state.as_deref()),
            (Some("active"), Some("paused"))
        );
        assert_eq!(e.entry.actor, "operator");
        assert_eq!(e.entry.data, r#"{"reason":"bad image"}"#);
        assert_eq!(e.subject_seq, 1);
        assert!(k.paused);
        assert_eq!(k.reason.as_deref(), Some("bad image"));
        assert_eq!(k.since, Some(datetime!(2026-12-07 12:00:00.123456 UTC)));
        assert_eq!(k.chain.len, 1);
        assert_eq!(k.chain.hash, e.hash);
    }

    #[test]
    fn pausing_a_paused_kind_records_nothing_and_keeps_the_first_since_and_reason() {
        let mut k = KindPause::never_paused(Kind::Trawl);
        k.pause("first", Principal::Operator, T).unwrap();
        let before = k.clone();
        let later = T + time::Duration::minutes(5);
        assert_eq!(k.pause("second", Principal::Operator, later), None);
        assert_eq!(k, before);
    }

    #[test]
    fn resuming_a_kind_that_is_not_paused_records_nothing() {
        let mut k = KindPause::never_paused(Kind::Sextant);
        assert_eq!(k.resume(None, Principal::Operator, T), None);
        assert_eq!(k, KindPause::never_paused(Kind::Sextant));
    }

    #[test]
    fn pause_then_resume_is_one_chain_that_verifies() {
        let mut k = KindPause::never_paused(Kind::Assay);
        let a = k.pause("fixing", Principal::Operator, T).unwrap();
        let later = T + time::Duration::seconds(90);
        let b = k.resume(None, Principal::Operator, later).unwrap();
        assert_eq!(b.entry.event, "resumed");
        assert_eq!(b.entry.data, r#"{"reason":null}"#);
        assert_eq!(b.subject_seq, 2);
        assert!(!k.paused);
        assert_eq!(k.reason, None);
        assert_eq!(k.since, Some(b.entry.at));
        let c = k.pause("again", Principal::Operator, later).unwrap();
        let head = verify_chain("kind", "assay", [&a, &b, &c]).expect("the chain verifies");
        assert_eq!(head, k.chain);
    }
}
