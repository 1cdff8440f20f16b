//! One transaction on one pooled connection: the pipeline that sends BEGIN with the first
//! statement and deferred writes with the next, and the COMMIT behind them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use deadpool_postgres::Object;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, join_all};
use muster_app::ports::StoreError;
use muster_app::telemetry::{self, TxFigures, TxOutcome};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::rows::internal;
use crate::error::store_err;
use crate::hint::LeaseHints;
use crate::pool::ROUND_TRIP_TIMEOUT;

/// A statement parameter owned by a [`Deferred`] write until its pipeline is sent.
pub(super) type Param = Box<dyn ToSql + Sync + Send>;

/// A write nobody waits for: it travels in the same pipeline as the next statement whose answer
/// is needed, or as the COMMIT, so that a use case's writes cost one round trip together.
///
/// Row-count expectations are checked by the database itself (`core.expect_rows`, V6), because
/// a COMMIT sent in the same pipeline must not commit a transaction whose write touched the wrong
/// rows: the failed check aborts the transaction, and the COMMIT then answers ROLLBACK.
struct Deferred {
    stmt: Statement,
    params: Vec<Param>,
}

/// What one statement of a pipeline answered.
enum Answer {
    Rows(Vec<Row>),
    Done,
    /// Not sent, because an earlier statement of the pipeline failed before it was sent.
    Withheld,
}

/// One transaction on one pooled connection. Dropped without `commit`, it is rolled back before
/// the connection can be used again.
///
/// Every round trip (a pipeline, the COMMIT, a statement's preparation, the ROLLBACK of a
/// dropped transaction) is bounded by [`ROUND_TRIP_TIMEOUT`]; past it the connection is closed
/// and the transaction answers `StoreError::Unavailable` from then on ([`PgTx::silent`]).
///
/// BEGIN is not a round trip of its own: it is sent in one pipeline with the transaction's first
/// statement, and writes that answer nothing ([`Deferred`]) wait for the next statement. So a
/// lease is two round trips (BEGIN + lock; writes + COMMIT) and a completion three.
///
/// In a traced call (`muster_app::telemetry`) it counts what it sends and hands the figures to
/// the call's sink when it ends; otherwise `figures` stays `None` and nothing is measured.
pub(super) struct PgTx {
    client: Option<Object>,
    /// BEGIN has been sent: the connection is (or was) in a transaction.
    begun: bool,
    deferred: Vec<Deferred>,
    /// The transaction's `now()`, once a statement answered it.
    pub(super) now: Option<time::OffsetDateTime>,
    /// Where lease scans start (shared by every transaction of the logbook).
    pub(super) hints: Arc<LeaseHints>,
    /// What it did so far, in a traced call only.
    figures: Option<TxFigures>,
    /// A statement or the COMMIT failed (or Logbook went silent).
    failed: bool,
}

impl PgTx {
    /// A transaction on `client`; BEGIN goes out with its first statement. `figures`: the
    /// connection's wait, when the call is traced.
    pub(super) fn new(client: Object, hints: Arc<LeaseHints>, figures: Option<TxFigures>) -> Self {
        PgTx {
            client: Some(client),
            begun: false,
            deferred: Vec::new(),
            now: None,
            hints,
            figures,
            failed: false,
        }
    }

    /// Counts a round trip that carried `statements` statements (traced calls only).
    fn count(&mut self, statements: usize) {
        if let Some(f) = &mut self.figures {
            f.statements += u32::try_from(statements).unwrap_or(u32::MAX);
            f.round_trips += 1;
        }
    }

    /// Hands the figures to the call's sink, once, with how the transaction ended.
    fn ended(&mut self, outcome: TxOutcome) {
        if let Some(mut f) = self.figures.take() {
            f.end = SystemTime::now();
            f.outcome = outcome;
            telemetry::record(f);
        }
    }

    /// `result`, counted as a failure of the transaction when it is one.
    fn noted<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if result.is_err() {
            self.failed = true;
        }
        result
    }

    /// The transaction's connection; gone once it stopped answering ([`PgTx::silent`]), and
    /// `commit` consumes the transaction.
    fn client(&self) -> Result<&Object, StoreError> {
        self.client.as_ref().ok_or_else(closed)
    }

    /// Logbook did not answer `what` within [`ROUND_TRIP_TIMEOUT`]: the connection is closed
    /// (what it would answer next is unknown, so it never goes back to the pool; the server
    /// rolls back whatever it has not committed when it sees the close), its host is marked
    /// (`pool/hosts.rs`), and the caller is told Logbook is unavailable.
    fn silent(&mut self, what: &str) -> StoreError {
        self.failed = true;
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
        self.deferred.clear();
        StoreError::Unavailable(format!(
            "Logbook did not answer {what} within {} ms; the connection was closed",
            ROUND_TRIP_TIMEOUT.as_millis()
        ))
    }

    /// `sql` prepared on the connection (from its cache, or one round trip).
    async fn prepared(&mut self, sql: &str, cached: bool) -> Result<Statement, StoreError> {
        let c = self.client()?;
        // Traced: a preparation is a round trip unless the connection's cache had it.
        let cache = self
            .figures
            .is_some()
            .then(|| c.statement_cache.size())
            .filter(|_| cached);
        let prepared = if cached {
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, c.prepare_cached(sql)).await
        } else {
            tokio::time::timeout(ROUND_TRIP_TIMEOUT, c.prepare(sql)).await
        };
        let missed = match (cache, &self.client) {
            (Some(before), Some(c)) => c.statement_cache.size() != before,
            _ => !cached,
        };
        if missed && let Some(f) = &mut self.figures {
            f.round_trips += 1;
        }
        match prepared {
            Ok(stmt) => {
                let stmt = stmt.map_err(store_err);
                self.noted(stmt)
            }
            Err(_) => Err(self.silent("a statement's preparation")),
        }
    }

    /// Sends BEGIN (once), every deferred write and then `last`, as one pipeline, and answers
    /// what each said, in order. A statement after a failed one is refused by the server
    /// (the transaction is aborted), so the first error is the one that matters. `what` names
    /// the round trip if it goes unanswered.
    async fn pipeline(
        &mut self,
        last: Option<(&Statement, &[&(dyn ToSql + Sync)])>,
        what: &str,
    ) -> Result<Vec<Result<Answer, tokio_postgres::Error>>, StoreError> {
        let begin = if self.begun {
            None
        } else {
            Some(self.prepared("BEGIN", true).await?)
        };

        // The field, not `client()`: `begun` and `deferred` change while it is borrowed.
        let c = self.client.as_ref().ok_or_else(closed)?;
        let deferred = std::mem::take(&mut self.deferred);
        let params: Vec<Vec<&(dyn ToSql + Sync)>> = deferred
            .iter()
            .map(|d| d.params.iter().map(|p| p.as_ref() as _).collect())
            .collect();
        // Set when a statement of this pipeline fails before it was sent: the driver encodes
        // the parameters on a statement's first poll and answers an error right there, without
        // sending it (a Rust value that does not fit the statement's parameter type). The
        // server never hears of that statement, so the transaction is not aborted and a COMMIT
        // behind it would commit the transaction without that write.
        let unsent = AtomicBool::new(false);
        let unsent = &unsent;
        let mut sent: Vec<BoxFuture<'_, Result<Answer, tokio_postgres::Error>>> =
            Vec::with_capacity(deferred.len() + 2);
        if let Some(begin) = &begin {
            sent.push(async move { c.execute(begin, &[]).await.map(|_| Answer::Done) }.boxed());
        }
        for (d, p) in deferred.iter().zip(&params) {
            sent.push(
                async move {
                    let answer = c.execute(&d.stmt, p).await.map(|_| Answer::Done);
                    if answer.is_err() {
                        unsent.store(true, Ordering::Relaxed);
                    }
                    answer
                }
                .boxed(),
            );
        }
        if let Some((stmt, p)) = last {
            sent.push(
                async move {
                    // First polled after every earlier statement's first poll (join_all polls
                    // in order): a write that failed unsent has set the flag by now, and one
                    // that failed in the server has not, but then the server aborted the
                    // transaction and answers this statement (or COMMIT) accordingly.
                    if unsent.load(Ordering::Relaxed) {
                        return Ok(Answer::Withheld);
                    }
                    c.query(stmt, p).await.map(Answer::Rows)
                }
                .boxed(),
            );
        }
        // From the first poll on, BEGIN may be on the wire even if this future is dropped: the
        // guard must roll back from here on.
        self.begun = true;
        // join_all polls the futures in order, so they enter the connection's queue in order
        // and go out in one write. One timer for the whole round trip.
        let Ok(mut answers) = tokio::time::timeout(ROUND_TRIP_TIMEOUT, join_all(sent)).await else {
            return Err(self.silent(what));
        };
        if begin.is_some() {
            answers.remove(0).map_err(store_err)?;
        }
        Ok(answers)
    }

    pub(super) async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let stmt = self.prepared(sql, true).await?;
        self.query_prepared(&stmt, params).await
    }

    /// A statement without parameters that is prepared for this one use, not cached (its text
    /// carries its values, so it is planned for them).
    pub(super) async fn query_once(&mut self, sql: &str) -> Result<Vec<Row>, StoreError> {
        let stmt = self.prepared(sql, false).await?;
        self.query_prepared(&stmt, &[]).await
    }

    async fn query_prepared(
        &mut self,
        stmt: &tokio_postgres::Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.count(self.deferred.len() + 1);
        let answers = self.pipeline(Some((stmt, params)), "a statement").await;
        let rows = answers.and_then(|mut answers| {
            let last = answers.pop();
            for answer in answers {
                answer.map_err(store_err)?;
            }
            match last {
                Some(Ok(Answer::Rows(rows))) => Ok(rows),
                Some(Err(e)) => Err(store_err(e)),
                Some(Ok(Answer::Done | Answer::Withheld)) | None => {
                    Err(internal("pipeline lost its last answer"))
                }
            }
        });
        self.noted(rows)
    }

    pub(super) async fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), StoreError> {
        self.query(sql, params).await.map(drop)
    }

    /// Queues a write for the next pipeline. `sql` must not return rows the caller needs.
    pub(super) async fn defer(&mut self, sql: &str, params: Vec<Param>) -> Result<(), StoreError> {
        let stmt = self.prepared(sql, true).await?;
        self.deferred.push(Deferred { stmt, params });
        Ok(())
    }

    /// Sends the deferred writes and COMMIT as one pipeline (nothing when nothing was sent),
    /// and hands the transaction's figures on when the call is traced.
    pub(super) async fn send_commit(mut self: Box<Self>) -> Result<(), StoreError> {
        let outcome = self.commit_pipeline().await;
        self.ended(match outcome {
            Ok(()) => TxOutcome::Committed,
            Err(_) => TxOutcome::Failed,
        });
        outcome
    }

    async fn commit_pipeline(&mut self) -> Result<(), StoreError> {
        if !self.begun && self.deferred.is_empty() {
            // Nothing was ever sent: there is no transaction to end.
            return Ok(());
        }
        let commit = self.prepared("COMMIT", true).await?;
        // The deferred writes are statements; BEGIN and COMMIT are not counted as ones.
        self.count(self.deferred.len());
        let sent = self.figures.is_some().then(SystemTime::now);
        // Unanswered, the COMMIT is in doubt: it may have committed. The 503 claims neither
        // outcome; the client's retry finds out (a completion's is replayed if it committed).
        let mut answers = self
            .pipeline(
                Some((&commit, &[])),
                "a COMMIT (its outcome is unknown: it may have committed)",
            )
            .await?;
        if let (Some(f), Some(sent)) = (&mut self.figures, sent) {
            f.commit = Some((sent, sent.elapsed().unwrap_or_default()));
        }
        let committed = answers.pop();
        let first_error = answers.into_iter().find_map(Result::err);
        if let Some(Ok(Answer::Withheld)) = committed {
            // A write never reached the server: no COMMIT was sent, and dropping `self` rolls
            // the transaction back before the connection is used again.
            return Err(first_error
                .map(store_err)
                .unwrap_or_else(|| internal("COMMIT withheld without a failed write")));
        }
        let client = self.client.take().expect("committed twice");
        match committed {
            // A statement of the pipeline failed: the transaction was aborted and the COMMIT
            // answered ROLLBACK. The connection is out of the transaction and usable.
            Some(Ok(_)) => match first_error {
                Some(e) => Err(store_err(e)),
                None => Ok(()),
            },
            // The server answered the COMMIT with an error: the transaction was rolled back
            // and the connection is out of it, usable.
            Some(Err(e)) if e.as_db_error().is_some() => Err(store_err(first_error.unwrap_or(e))),
            // The outcome of a COMMIT that failed in flight (the connection broke) is unknown
            // to us; the connection is not trusted again.
            Some(Err(e)) => {
                drop(Object::take(client));
                Err(store_err(first_error.unwrap_or(e)))
            }
            None => {
                drop(Object::take(client));
                Err(internal("pipeline lost the COMMIT's answer"))
            }
        }
    }
}

/// What a transaction answers once its connection was closed for not answering.
fn closed() -> StoreError {
    StoreError::Unavailable(
        "the transaction's Logbook connection stopped answering and was closed".into(),
    )
}

impl Drop for PgTx {
    fn drop(&mut self) {
        let outcome = if self.failed {
            TxOutcome::Failed
        } else {
            TxOutcome::RolledBack
        };
        self.ended(outcome);
        let Some(client) = self.client.take() else {
            return;
        };
        if !self.begun {
            // Nothing was sent: the connection is not in a transaction.
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let rollback =
                        tokio::time::timeout(ROUND_TRIP_TIMEOUT, client.batch_execute("ROLLBACK"))
                            .await;
                    if !matches!(rollback, Ok(Ok(()))) {
                        // Unanswered or failed: the connection is unusable; closing it ends
                        // the transaction on the server. Keep it out of the pool.
                        drop(Object::take(client));
                    }
                });
            }
            // No runtime to roll back on: close the connection, which aborts the transaction.
            Err(_) => drop(Object::take(client)),
        }
    }
}

#[cfg(test)]
mod tests;
