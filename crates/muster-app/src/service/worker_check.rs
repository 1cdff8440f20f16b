//! `complete`, `fail` and `needs_subtool` take an optional `worker_id`: when a caller sends
//! one, it must be the worker the lease was granted to, as a heartbeat's must.

use muster_domain::{LeaseId, Principal, TransitionError};

use super::{Muster, check_worker_id, lock_lease};
use crate::error::AppError;

impl Muster {
    /// Refuses (403 `E_FORBIDDEN`) a call on `lease_id` that names another worker than the
    /// lease's, or comes from another kind than the item's (the contract's 403 stays first).
    /// A lease's worker never changes, so this check before the call's own transaction holds
    /// for it.
    pub async fn check_lease_worker(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        worker_id: &str,
    ) -> Result<(), AppError> {
        check_worker_id(worker_id)?;
        let mut tx = self.stores.logbook.begin().await?;
        let (record, item) = lock_lease(tx.as_mut(), lease_id).await?;
        drop(tx);
        if actor != Principal::Worker(item.kind) {
            return Err(AppError::Forbidden(format!(
                "{actor} may not act on a {} lease",
                item.kind
            )));
        }
        if record.worker_id != worker_id {
            return Err(TransitionError::WrongWorker.into());
        }
        Ok(())
    }
}
