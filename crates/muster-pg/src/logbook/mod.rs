//! [`PgLogbook`]: Logbook's ports on PostgreSQL, one module per role as in
//! `muster_app::ports`: `items`, `leases`, `ledger`, `fleet`, `intake` and `kinds` each
//! implement their role inside a transaction (`tx::PgTx`) and outside one ([`PgLogbook`]);
//! `rows` maps rows to domain values. Here: the pool, opening and ending transactions,
//! readiness and the pool gauge.

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use muster_app::ports::{Logbook, LogbookTx, NotReady, PoolGauge, PoolStatus, StoreError};
use muster_app::shared::Shared;
use muster_app::telemetry::{self, TxFigures};
use muster_domain::ItemState;
use muster_ledger::SealedEntry;

use crate::error::{pool_err, store_err};
use crate::hint::LeaseHints;
use ledger::{LEDGER_INSERT, ledger_params};
use tx::PgTx;

mod fleet;
mod intake;
mod items;
mod kinds;
mod leases;
mod ledger;
mod listing;
pub(crate) mod read;
mod retention;
mod role;
mod rows;
mod tx;

#[cfg(test)]
pub(crate) use rows::ITEM_COLS;

/// The readiness verdict until a schema check has reached Logbook.
const NOT_CHECKED: &str = "the schema has not been checked yet: Logbook has not answered";

/// Logbook on a PostgreSQL connection pool.
#[derive(Clone)]
pub struct PgLogbook {
    pool: Pool,
    hints: Arc<LeaseHints>,
    /// The readiness verdict on the schema of the last check that reached Logbook; not ready
    /// before the first ([`NOT_CHECKED`]).
    schema_verdict: Arc<Shared<Result<(), String>>>,
    /// The connected role's privileges (`role.rs`).
    role: Arc<muster_app::dependency::Configuration>,
}

impl std::fmt::Debug for PgLogbook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLogbook")
            .field("status", &self.pool.status())
            .finish()
    }
}

impl PgLogbook {
    pub fn new(pool: Pool) -> Self {
        PgLogbook {
            pool,
            hints: Arc::default(),
            schema_verdict: Arc::new(Shared::new(Err(NOT_CHECKED.to_owned()))),
            role: Arc::default(),
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Whether a connection can be had and answers (within the round-trip deadline; one that
    /// does not is closed, as a transaction's would be).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let c = self.pool.get().await.map_err(pool_err)?;
        let asked = tokio::time::timeout(
            crate::pool::ROUND_TRIP_TIMEOUT,
            c.simple_query(include_str!("sql/ping.sql")),
        )
        .await;
        match asked {
            Ok(answer) => answer.map(drop).map_err(store_err),
            Err(_) => {
                drop(deadpool_postgres::Object::take(c));
                Err(StoreError::Unavailable(
                    "Logbook did not answer a ping in time; the connection was closed".into(),
                ))
            }
        }
    }
}

#[async_trait]
impl Logbook for PgLogbook {
    async fn begin(&self) -> Result<Box<dyn LogbookTx>, StoreError> {
        // Traced calls only: when the pool was asked, so that the wait is known.
        let asked = telemetry::active().then(SystemTime::now);
        let got = self.pool.get().await;
        let figures = asked.map(|asked| TxFigures::new(asked, SystemTime::now()));
        let client = match got {
            Ok(client) => client,
            Err(e) => {
                // A transaction that never got its connection: failed, after its wait.
                if let Some(figures) = figures {
                    telemetry::record(figures);
                }
                return Err(pool_err(e));
            }
        };
        // BEGIN goes out with the first statement. The guard exists before it is sent: if a
        // future is dropped mid-pipeline, the guard's Drop rolls back (or discards the
        // connection) instead of pooling it in a transaction.
        Ok(Box::new(PgTx::new(
            client,
            Arc::clone(&self.hints),
            figures,
        )))
    }
}

impl PoolGauge for PgLogbook {
    fn pool_status(&self) -> PoolStatus {
        let s = self.pool.status();
        PoolStatus {
            open: s.size as u64,
            idle: s.available as u64,
            max: s.max_size as u64,
            waiting: s.waiting as u64,
        }
    }
}

#[async_trait]
impl LogbookTx for PgTx {
    async fn commit(self: Box<Self>) -> Result<(), StoreError> {
        self.send_commit().await
    }

    async fn now(&mut self) -> Result<time::OffsetDateTime, StoreError> {
        if let Some(now) = self.now {
            return Ok(now);
        }
        // Sent with BEGIN when it is the transaction's first statement.
        let rows = self.query(include_str!("sql/now.sql"), &[]).await?;
        let now = rows
            .first()
            .map(|r| r.get(0))
            .ok_or_else(|| rows::internal("now() answered no row"))?;
        self.now = Some(now);
        Ok(now)
    }

    async fn append_and_commit(
        mut self: Box<Self>,
        entries: &[SealedEntry],
    ) -> Result<(), StoreError> {
        if !entries.is_empty() {
            self.defer(LEDGER_INSERT, ledger_params(entries)).await?;
        }
        self.send_commit().await
    }
}

// Keep the state names in one place: the CHECK constraint (V12) lists these.
const _: [ItemState; 6] = ItemState::ALL;

#[async_trait]
impl muster_app::ports::Readiness for PgLogbook {
    /// Ready unless the schema is behind this binary. A Logbook outage does not fail readiness
    /// (the contract's "Readiness"): every `/v1` call that needs Logbook answers a fast 503
    /// `E_UNAVAILABLE` with `Retry-After`, which callers prefer to the refused connection of a
    /// Service without endpoints. While Logbook cannot be reached, the schema verdict of the
    /// last check that reached it stands; before any has, the replica is not ready (it has
    /// never seen its schema).
    async fn check(&self) -> Result<(), NotReady> {
        let status = match crate::schema_status(&self.pool).await {
            Ok(status) => status,
            Err(e) => {
                tracing::debug!(error = %e, "readiness: Logbook unreachable; the last schema verdict stands");
                return self.schema_verdict.get().map_err(NotReady::Internal);
            }
        };
        let verdict = match status {
            crate::SchemaStatus::Current => Ok(()),
            crate::SchemaStatus::Behind { applied, expected } => Err(format!(
                "the schema is at migration {applied}, this binary needs {expected}: run `muster migrate`"
            )),
            // Migrations expand before they contract: one drops only what the previous release no
            // longer reads (V9 drops the index V8 replaced), so a binary one release behind
            // keeps serving while the new release rolls out, and a rollback stays possible.
            crate::SchemaStatus::Ahead { applied, expected } => {
                tracing::warn!(
                    applied,
                    expected,
                    "the schema is newer than this binary; serving (a migration drops only what the previous release no longer reads)"
                );
                Ok(())
            }
        };
        let _previous = self.schema_verdict.replace(verdict.clone());
        verdict.map_err(NotReady::Internal)?;
        // A role that lacks a grant `serve` needs: not ready until it is fixed.
        self.role_problem()
            .await
            .map_or(Ok(()), |problem| Err(NotReady::Configuration(problem)))
    }
}
