//! Reads outside a transaction (an item's view, a page of items, health, edits, the metrics'
//! ages, the intake's key and purge) on a pooled connection, each round trip bounded by
//! [`ROUND_TRIP_TIMEOUT`] as a transaction's are: past it the connection is closed (what it
//! would answer next is unknown, so it never goes back to the pool; its host is marked, see
//! `pool/hosts.rs`) and the read answers `StoreError::Unavailable` (503), so a frozen Logbook
//! holds no read for longer than the deadline.

use deadpool_postgres::Object;
use muster_app::ports::StoreError;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement, ToStatement};

use super::PgLogbook;
use crate::error::{pool_err, store_err};
use crate::pool::ROUND_TRIP_TIMEOUT;

/// A pooled connection whose every round trip has a deadline.
pub(crate) struct Reader {
    client: Option<Object>,
}

impl PgLogbook {
    /// A connection from the pool for reads (the checkout has the pool's own timeout).
    pub(crate) async fn reader(&self) -> Result<Reader, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        Ok(Reader {
            client: Some(client),
        })
    }
}

impl Reader {
    fn client(&self) -> Result<&Object, StoreError> {
        self.client
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("the connection was closed".into()))
    }

    /// Logbook did not answer `what` in time: the connection is closed, never pooled again.
    pub(crate) fn silent(&mut self, what: &str) -> StoreError {
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
        StoreError::Unavailable(format!(
            "Logbook did not answer {what} in time; the connection was closed"
        ))
    }

    /// The connection, for a caller that bounds a round trip of its own kind (a read-only
    /// transaction) and calls [`Reader::silent`] when it passes its bound.
    pub(crate) fn object_mut(&mut self) -> Result<&mut Object, StoreError> {
        self.client
            .as_mut()
            .ok_or_else(|| StoreError::Unavailable("the connection was closed".into()))
    }

    /// One round trip on the connection, bounded by [`ROUND_TRIP_TIMEOUT`]: past it the
    /// connection is closed and the read answers `Unavailable`.
    async fn round_trip<R>(
        &mut self,
        call: impl AsyncFnOnce(&Object) -> Result<R, tokio_postgres::Error>,
    ) -> Result<R, StoreError> {
        let bounded = {
            let c = self.client()?;
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, call(c)).await
        };
        match bounded {
            Ok(answer) => answer.map_err(store_err),
            Err(_) => Err(self.silent("a read")),
        }
    }

    pub(crate) async fn prepare_cached(&mut self, sql: &str) -> Result<Statement, StoreError> {
        self.round_trip(async |c| c.prepare_cached(sql).await).await
    }

    pub(crate) async fn query<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.round_trip(async |c| c.query(statement, params).await)
            .await
    }

    pub(crate) async fn query_opt<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        self.round_trip(async |c| c.query_opt(statement, params).await)
            .await
    }

    pub(crate) async fn query_one<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, StoreError> {
        self.round_trip(async |c| c.query_one(statement, params).await)
            .await
    }

    pub(crate) async fn execute<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        self.round_trip(async |c| c.execute(statement, params).await)
            .await
    }
}

impl PgLogbook {
    /// The newest `at` of the ledger entries archived out of Logbook (`None`: none were).
    pub(crate) async fn archived_until_at(
        &self,
    ) -> Result<Option<time::OffsetDateTime>, StoreError> {
        let mut client = self.reader().await?;
        let rows = client
            .query(include_str!("sql/archived_until.sql"), &[])
            .await?;
        Ok(rows.first().and_then(|r| r.get(0)))
    }
}
