//! The end of the final grace, enforced on every use of a lease, not only when a lease
//! request comes by: a heartbeat or a result under the lease on an item's last attempt that
//! expired the final grace ago (by the database's clock) fails the item in its own
//! transaction and is answered `409 E_LEASE_LOST`.

use muster_domain::{Item, LeaseRecord, Principal};
use muster_ledger::SealedEntry;

use super::Muster;
use crate::error::AppError;
use crate::ports::LogbookTx;

impl Muster {
    /// The `expired` entry that fails `item` when `record` is used after its final grace.
    pub(super) fn past_final_grace(
        &self,
        record: &LeaseRecord,
        item: &mut Item,
        actor: Principal,
        now: time::OffsetDateTime,
    ) -> Result<Option<SealedEntry>, AppError> {
        let grace = self.config.final_grace(item.kind).grace;
        let policy = self.config.policy(item.kind);
        let entry = item.expire_past_grace(record, actor, &policy, grace, now)?;
        if entry.is_some() {
            tracing::info!(lease_id = %record.lease_id, item_id = %item.id, kind = %item.kind,
                "lease used after its final grace; item failed");
        }
        Ok(entry)
    }

    /// Writes the failure of `item` past its final grace (`entry`) and commits: the lease
    /// that was used is lost.
    pub(super) async fn lose_past_final_grace(
        &self,
        mut tx: Box<dyn LogbookTx>,
        item: &Item,
        entry: SealedEntry,
    ) -> AppError {
        let written = async {
            tx.save_item(item).await?;
            self.commit_with(tx, &[entry]).await
        };
        match written.await {
            Ok(()) => {
                self.stats.failed_final.add(item.kind, 1);
                AppError::LeaseLost
            }
            Err(e) => e,
        }
    }
}
