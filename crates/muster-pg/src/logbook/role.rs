//! The role `serve` is connected as, checked at the first connection that works: the runtime
//! role with every grant it needs serves; a role that lacks one is named in the log and keeps
//! `/readyz` at 503 (checked again at every readiness probe until it is fixed); the schema
//! owner, a superuser, a role with `CREATEROLE`, or a member of one of them serves with a
//! warning that says which (development and tests); a runtime role that holds more than its
//! grants serves with a warning naming each privilege beyond them.

use std::time::Duration;

use muster_app::ports::StoreError;

use super::PgLogbook;
use crate::PgError;
use crate::error::pool_err;
use crate::grants::{RoleCheck, check_connected_role};

impl PgLogbook {
    /// Checks the connected role and records the verdict (logged when it changes).
    pub async fn check_role(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        // A few catalog reads, bounded together; past the bound the connection is closed.
        let bound = crate::pool::ROUND_TRIP_TIMEOUT * 2;
        let Ok(checked) = tokio::time::timeout(bound, check_connected_role(&client)).await else {
            drop(deadpool_postgres::Object::take(client));
            return Err(StoreError::Unavailable(format!(
                "Logbook did not answer the role check within {} ms; the connection was closed",
                bound.as_millis()
            )));
        };
        let check = checked.map_err(|e| match e {
            PgError::Unavailable(m) => StoreError::Unavailable(m),
            other => StoreError::Internal(other.to_string()),
        })?;
        let verdict = match &check {
            RoleCheck::Runtime { .. } | RoleCheck::Privileged { .. } => Ok(()),
            RoleCheck::Missing { role, missing, .. } => Err(format!(
                "database role {role} lacks {}: run `muster migrate --runtime-role {role}` as the schema owner",
                missing.join(", ")
            )),
        };
        if self.role.record(verdict.clone()) {
            match (&check, &verdict) {
                (RoleCheck::Privileged { role, why }, _) => tracing::warn!(
                    role = %role,
                    "connected to Logbook as {why}: serving, but nothing stops this process from rewriting the ledger; in production serve as the runtime role (--runtime-role of `muster migrate`)"
                ),
                (RoleCheck::Runtime { role, extra }, _) if extra.is_empty() => {
                    tracing::info!(role = %role, "connected to Logbook as the runtime role; every grant present")
                }
                (RoleCheck::Runtime { role, extra }, _) => tracing::warn!(
                    role = %role,
                    "connected to Logbook as the runtime role with privileges beyond its grants: {}; serving, but revoke them (`muster migrate` takes back what was granted to the role itself)",
                    extra.join(", ")
                ),
                (RoleCheck::Missing { extra, .. }, Err(why)) => tracing::error!(
                    reason = %why, beyond_its_grants = %extra.join(", "),
                    "not ready: the database role is misconfigured"
                ),
                (RoleCheck::Missing { .. }, Ok(())) => {}
            }
        }
        Ok(())
    }

    /// The check at `serve`'s start: retried every second until Logbook answers once.
    pub async fn check_role_when_reachable(self) {
        loop {
            match self.check_role().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "role check waits for Logbook");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// For readiness: the misconfiguration found, checked again while there is one.
    pub(crate) async fn role_problem(&self) -> Option<String> {
        match self.role.verdict() {
            Some(Ok(())) => None,
            // Not known yet (Logbook never answered) or wrong: ask now.
            _ => {
                if let Err(e) = self.check_role().await {
                    tracing::debug!(error = %e, "role check failed");
                }
                self.role.verdict().and_then(Result::err)
            }
        }
    }
}
