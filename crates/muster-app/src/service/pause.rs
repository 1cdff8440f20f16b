//! Pausing a kind (`PUT /v1/kinds/{kind}/paused`): while a kind is paused the lease statement
//! hands out none of its items (the condition rides inside that statement, so leasing pays no
//! round trip for it); leases already out go on, so no result a worker holds is lost. Operators
//! only.
//!
//! One transaction: lock the kind's pause row (and so its ledger chain), ask the domain, write
//! the row, append the entry, commit. Asking for the state the kind is already in writes
//! nothing (the transaction is dropped, so rolled back) and answers the state as it is, the
//! first pause's `since` included. A resume wakes the kind's waiting lease calls here and, over
//! the work signal's bridge, on every other replica, as new work does.

use muster_domain::{Kind, Principal};

use super::Muster;
use super::controls::check_reason;
use crate::auth::may_pause_kinds;
use crate::error::AppError;
use crate::views::KindPaused;

impl Muster {
    /// `PUT /v1/kinds/{kind}/paused`: pauses (`reason` required, 1 to
    /// [`super::MAX_REASON`] bytes) or resumes (`reason` optional) `kind`; idempotent.
    pub async fn set_paused(
        &self,
        actor: Principal,
        kind: Kind,
        paused: bool,
        reason: Option<&str>,
    ) -> Result<KindPaused, AppError> {
        may_pause_kinds(actor)?;
        match reason {
            Some(reason) => check_reason(reason)?,
            None if paused => {
                return Err(AppError::BadRequest("a pause needs a reason".into()));
            }
            None => {}
        }
        let now = self.clock.now();
        let mut tx = self.stores.logbook.begin().await?;
        let mut pause = tx.lock_kind(kind).await?;
        let entry = if paused {
            reason.and_then(|reason| pause.pause(reason, actor, now))
        } else {
            pause.resume(reason, actor, now)
        };
        if let Some(entry) = entry {
            tx.save_kind(&pause).await?;
            self.commit_with(tx, &[entry]).await?;
            if paused {
                tracing::info!(%kind, "kind paused");
            } else {
                // Its queued items are leasable again: wake the waiting lease calls.
                self.signal.notify(kind);
                tracing::info!(%kind, "kind resumed");
            }
        }
        Ok(KindPaused {
            kind,
            paused: pause.paused,
            since: pause.since,
        })
    }
}

#[cfg(test)]
mod tests;
