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

type Bounded<T> = Result<Result<T, tokio_postgres::Error>, tokio::time::error::Elapsed>;

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

    /// The answer of a bounded round trip; past the deadline the connection is closed.
    fn answer<T>(&mut self, bounded: Bounded<T>) -> Result<T, StoreError> {
        match bounded {
            Ok(answer) => answer.map_err(store_err),
            Err(_) => Err(self.silent("a read")),
        }
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

    pub(crate) async fn prepare_cached(&mut self, sql: &str) -> Result<Statement, StoreError> {
        let bounded = {
            let c = self.client()?;
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, c.prepare_cached(sql)).await
        };
        self.answer(bounded)
    }

    pub(crate) async fn query<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let bounded = {
            let c = self.client()?;
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, c.query(statement, params)).await
        };
        self.answer(bounded)
    }

    pub(crate) async fn query_opt<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        let bounded = {
            let c = self.client()?;
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, c.query_opt(statement, params)).await
        };
        self.answer(bounded)
    }

    pub(crate) async fn query_one<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, StoreError> {
        let bounded = {
            let c = self.client()?;
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, c.query_one(statement, params)).await
        };
        self.answer(bounded)
    }

    pub(crate) async fn execute<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let bounded = {
            let c = self.client()?;
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, c.execute(statement, params)).await
        };
        self.answer(bounded)
    }
}
