//! Kinds: a kind's pause state, locked and written back inside a transaction.

use async_trait::async_trait;
use muster_domain::Kind;
use muster_domain::pause::KindPause;

use super::StoreError;

/// A kind's pause state inside a transaction.
#[async_trait]
pub trait KindStore: Send {
    /// Locks and returns `kind`'s pause state (never paused when it has no row yet: the lock
    /// holds from the first pause on as well), so that the changes of one kind, and the entries
    /// of its ledger chain, come one after the other.
    async fn lock_kind(&mut self, kind: Kind) -> Result<KindPause, StoreError>;
    /// Writes back a kind's pause state and chain head.
    async fn save_kind(&mut self, pause: &KindPause) -> Result<(), StoreError>;
}
