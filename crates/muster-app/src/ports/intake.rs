//! The edit intake: daily salts and counters, spent challenges and edits inside a
//! transaction; the shared key, the moderators' listing and the daily purge outside one.

use async_trait::async_trait;
use muster_domain::edit::{Edit, EditId, EditState};
use time::OffsetDateTime;

use super::StoreError;
use crate::views::EditView;

/// The edit intake's records that need no transaction: its key, its listing, its upkeep.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait IntakeLog: Send + Sync {
    /// The proof-of-work MAC key shared by every replica, created from `candidate` on first use.
    async fn pow_key(&self, candidate: [u8; 32]) -> Result<[u8; 32], StoreError>;
    /// Edit proposals in `state`, oldest first, after `after`, at most `limit`.
    async fn list_edits(
        &self,
        state: EditState,
        after: Option<EditId>,
        limit: i64,
    ) -> Result<Vec<EditView>, StoreError>;
    /// Deletes salts and counters of days before `today` and challenges expired at `now`;
    /// answers how many rows went.
    async fn purge_intake(&self, today: time::Date, now: OffsetDateTime)
    -> Result<u64, StoreError>;
}

/// The edit intake inside a transaction: daily salts and counters, spent challenges, edits.
#[async_trait]
pub trait IntakeStore: Send {
    /// The salt of UTC day `day`, created from `candidate` if the day has none yet.
    async fn day_salt(
        &mut self,
        day: time::Date,
        candidate: [u8; 32],
    ) -> Result<[u8; 32], StoreError>;
    /// Counts one submission of `client_hash` on `day` if it has fewer than `limit`; answers
    /// whether it was counted.
    async fn count_submission(
        &mut self,
        day: time::Date,
        client_hash: [u8; 32],
        limit: u32,
    ) -> Result<bool, StoreError>;
    /// Spends a proof-of-work challenge; answers false if it was spent before.
    async fn spend_challenge(
        &mut self,
        spend_key: [u8; 32],
        expires_at: OffsetDateTime,
    ) -> Result<bool, StoreError>;
    /// Stores a new edit proposal with its (plain-text) body.
    async fn insert_edit(
        &mut self,
        edit: &Edit,
        body: &str,
        at: OffsetDateTime,
    ) -> Result<(), StoreError>;
    /// Locks and returns an edit proposal.
    async fn lock_edit(&mut self, id: EditId) -> Result<Option<Edit>, StoreError>;
    /// Writes back an edit's state after a decision.
    async fn save_edit(&mut self, edit: &Edit, at: OffsetDateTime) -> Result<(), StoreError>;
}
