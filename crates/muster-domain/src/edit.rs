//! Edit proposals: the review gate. Pure.
//!
//! ```text
//!   (none) ──submit──▶ pending_approval ──approve (target's owner)──▶ approved
//!                              └─────────reject (target's owner)───▶ rejected
//! ```
//! Nothing leaves `pending_approval` without an explicit decision by the target's owner.

use std::fmt;

use muster_ledger::{ChainHead, Entry, SealedEntry};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::Principal;

/// The id of an edit proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EditId(pub Uuid);

impl fmt::Display for EditId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditState {
    PendingApproval,
    Approved,
    Rejected,
}

impl EditState {
    pub const fn as_str(self) -> &'static str {
        match self {
            EditState::PendingApproval => "pending_approval",
            EditState::Approved => "approved",
            EditState::Rejected => "rejected",
        }
    }
}

named_values!(
    EditState,
    all: [EditState::PendingApproval, EditState::Approved, EditState::Rejected],
    error: String = |s: &str| format!("unknown edit state {s:?}")
);

/// An owner's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Reject,
}

impl Decision {
    pub const fn outcome(self) -> EditState {
        match self {
            Decision::Approve => EditState::Approved,
            Decision::Reject => EditState::Rejected,
        }
    }
}

/// Why a decision was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecisionError {
    #[error("only the target's owner may decide on this edit")]
    NotOwner,
    #[error("this edit was already {0}")]
    AlreadyDecided(&'static str),
}

/// An edit proposal's working state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub id: EditId,
    pub target: String,
    pub owner: String,
    pub state: EditState,
    pub chain: ChainHead,
}

/// What a decision did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// The edit moved to its final state; this entry records it.
    Now(Box<SealedEntry>),
    /// The same decision was made before: nothing changes.
    Already,
}

/// The digest of a proposal's text that its `submitted` ledger entry records: BLAKE3, hex.
pub fn body_digest(body: &str) -> String {
    blake3::hash(body.as_bytes()).to_hex().to_string()
}

impl Edit {
    /// A new proposal, held for review, and the ledger entry that records it. The proposal's
    /// text is not in the ledger entry, its BLAKE3 is (`body_blake3`, [`body_digest`]): the
    /// stored text can be checked against the chain.
    pub fn submit(
        id: EditId,
        target: &str,
        owner: &str,
        body: &str,
        actor: Principal,
        now: OffsetDateTime,
    ) -> (Edit, SealedEntry) {
        let mut edit = Edit {
            id,
            target: target.to_owned(),
            owner: owner.to_owned(),
            state: EditState::PendingApproval,
            chain: ChainHead::genesis(),
        };
        let data = json!({"target": target, "owner": owner, "body_blake3": body_digest(body)});
        let entry = edit.record(
            "submitted",
            None,
            EditState::PendingApproval,
            actor,
            now,
            data,
        );
        (edit, entry)
    }

    /// The target's owner approves or rejects; `owner` is who the decision is made for, and
    /// `current_owner` the target's owner now.
    pub fn decide(
        &mut self,
        decision: Decision,
        owner: &str,
        current_owner: &str,
        actor: Principal,
        now: OffsetDateTime,
    ) -> Result<Decided, DecisionError> {
        if owner != current_owner {
            return Err(DecisionError::NotOwner);
        }
        match self.state {
            EditState::PendingApproval => {
                let to = decision.outcome();
                self.state = to;
                let data = json!({"target": self.target, "owner": owner, "decision": decision});
                let entry = self.record(
                    "decided",
                    Some(EditState::PendingApproval),
                    to,
                    actor,
                    now,
                    data,
                );
                Ok(Decided::Now(Box::new(entry)))
            }
            s if s == decision.outcome() => Ok(Decided::Already),
            s => Err(DecisionError::AlreadyDecided(s.as_str())),
        }
    }

    fn record(
        &mut self,
        event: &str,
        from: Option<EditState>,
        to: EditState,
        actor: Principal,
        at: OffsetDateTime,
        data: serde_json::Value,
    ) -> SealedEntry {
        self.chain.seal(Entry {
            subject_type: "edit".to_owned(),
            subject_id: self.id.to_string(),
            event: event.to_owned(),
            from_state: from.map(|s| s.as_str().to_owned()),
            to_state: Some(to.as_str().to_owned()),
            actor: actor.to_string(),
            fence: None,
            at,
            data: data.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const T: OffsetDateTime = datetime!(2026-12-02 12:00:00 UTC);
    const CS: Principal = Principal::Worker(crate::Kind::Countersign);

    /// Alice's edit of `docs/intro`, submitted at `T`, and its entry.
    fn submitted() -> (Edit, SealedEntry) {
        Edit::submit(
            EditId(Uuid::from_u128(1)),
            "docs/intro",
            "alice",
            "better wording",
            Principal::Conn,
            T,
        )
    }

    fn pending() -> Edit {
        submitted().0
    }

    #[test]
    fn a_submitted_edit_waits_for_review() {
        let (edit, _) = submitted();
        assert_eq!(edit.state, EditState::PendingApproval);
    }

    #[test]
    fn the_submitted_entry_commits_to_the_bodys_blake3() {
        let (_, entry) = submitted();
        assert_eq!(
            entry.entry.data,
            format!(
                r#"{{"body_blake3":"{}","owner":"alice","target":"docs/intro"}}"#,
                blake3::hash(b"better wording").to_hex()
            )
        );
    }

    #[test]
    fn the_owner_approves() {
        let mut e = pending();
        assert!(matches!(
            e.decide(Decision::Approve, "alice", "alice", CS, T),
            Ok(Decided::Now(_))
        ));
        assert_eq!(e.state, EditState::Approved);
    }

    #[test]
    fn someone_else_may_not_decide() {
        let mut e = pending();
        assert_eq!(
            e.decide(Decision::Approve, "mallory", "alice", CS, T),
            Err(DecisionError::NotOwner)
        );
        assert_eq!(e.state, EditState::PendingApproval);
    }

    #[test]
    fn the_same_decision_twice_changes_nothing_and_the_opposite_is_refused() {
        let mut e = pending();
        e.decide(Decision::Reject, "alice", "alice", CS, T).unwrap();
        assert_eq!(
            e.decide(Decision::Reject, "alice", "alice", CS, T),
            Ok(Decided::Already)
        );
        assert_eq!(
            e.decide(Decision::Approve, "alice", "alice", CS, T),
            Err(DecisionError::AlreadyDecided("rejected"))
        );
    }
}
