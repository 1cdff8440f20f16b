//! The pipeline against a real database: a write that cannot be sent never lets its COMMIT
//! through; in a traced call, a transaction's figures are what it sent.

use super::{Param, PgTx};
use crate::PgLogbook;
use muster_app::ports::{Logbook, LogbookTx};
use muster_app::telemetry::{self, CallTrace, Gathered, TxFigures, TxOutcome};
use muster_domain::trace::{SpanId, TraceContext, TraceId};

async fn tx_on(logbook: &PgLogbook) -> PgTx {
    PgTx::new(
        logbook.pool().get().await.expect("connection"),
        std::sync::Arc::clone(&logbook.hints),
        None,
    )
}

fn traced_call() -> CallTrace {
    CallTrace {
        server: TraceContext {
            trace_id: TraceId([1; 16]),
            span_id: SpanId([1; 8]),
            sampled: true,
        },
        draw: || SpanId([2; 8]),
    }
}

/// The figures of the transactions `f` ran in a traced call.
async fn figures_of(f: impl Future<Output = ()>) -> Vec<TxFigures> {
    let ((), Gathered { transactions, .. }) = telemetry::scope(traced_call(), f).await;
    transactions.into_iter().map(|t| t.figures).collect()
}

/// A transaction measured as in a traced call.
async fn traced_tx_on(logbook: &PgLogbook) -> PgTx {
    let now = std::time::SystemTime::now();
    PgTx::new(
        logbook.pool().get().await.expect("connection"),
        std::sync::Arc::clone(&logbook.hints),
        Some(TxFigures::new(now, now)),
    )
}

/// `now()` and COMMIT through `Logbook::begin`.
async fn now_and_commit(logbook: &PgLogbook) {
    let mut tx = logbook.begin().await.expect("begin");
    tx.now().await.expect("now");
    tx.commit().await.expect("commit");
}
/// A table of its own, and a transaction that defers `before` writes to it, then one whose
/// parameter cannot be encoded for its column (an `int4` for a `text`), then one more.
/// Above 30 statements the pipeline's futures are polled through `FuturesOrdered`.
async fn unencodable_write_before_commit(before: usize) -> (muster_testkit::TestDb, PgTx) {
    let db = muster_testkit::fresh_db().await;
    db.execute("CREATE TABLE core.pipeline_probe (v text NOT NULL)")
        .await;
    let logbook = PgLogbook::new(db.pool());
    let mut tx = tx_on(&logbook).await;
    let sql = "INSERT INTO core.pipeline_probe (v) VALUES ($1)";
    for i in 0..before {
        let good: Vec<Param> = vec![Box::new(format!("written before {i}"))];
        tx.defer(sql, good).await.expect("defer");
    }
    let unencodable: Vec<Param> = vec![Box::new(7_i32)];
    tx.defer(sql, unencodable).await.expect("defer");
    let after: Vec<Param> = vec![Box::new("written after".to_owned())];
    tx.defer(sql, after).await.expect("defer");
    (db, tx)
}

#[tokio::test]
async fn a_commit_behind_a_write_that_could_not_be_sent_reports_the_error() {
    let (_db, tx) = unencodable_write_before_commit(1).await;
    let err = Box::new(tx).commit().await.expect_err("the commit fails");
    assert!(
        err.to_string().contains("error serializing parameter 0"),
        "{err}"
    );
}

async fn rows_committed_after_a_write_that_could_not_be_sent(before: usize) -> i64 {
    let (db, tx) = unencodable_write_before_commit(before).await;
    let _ = Box::new(tx).commit().await;
    let rows = db
        .client()
        .await
        .query_one("SELECT count(*) FROM core.pipeline_probe", &[])
        .await
        .expect("count");
    rows.get(0)
}

#[tokio::test]
async fn a_commit_behind_a_write_that_could_not_be_sent_commits_nothing() {
    assert_eq!(
        rows_committed_after_a_write_that_could_not_be_sent(1).await,
        0
    );
}

#[tokio::test]
async fn a_commit_behind_forty_writes_and_one_that_could_not_be_sent_commits_nothing() {
    assert_eq!(
        rows_committed_after_a_write_that_could_not_be_sent(40).await,
        0
    );
}

#[tokio::test]
async fn a_traced_transaction_counts_its_statements_and_round_trips() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    // The first transaction prepares BEGIN, now() and COMMIT on the connection; the second
    // finds them in its cache: BEGIN + now() in one round trip, COMMIT in another.
    now_and_commit(&logbook).await;
    let figures = figures_of(now_and_commit(&logbook)).await;
    assert_eq!(figures.len(), 1);
    assert_eq!(figures[0].statements, 1);
    assert_eq!(figures[0].round_trips, 2);
    assert_eq!(figures[0].outcome, TxOutcome::Committed);
    let (sent, _) = figures[0].commit.expect("commit sent");
    assert!(figures[0].asked <= sent && sent <= figures[0].end);
}

#[tokio::test]
async fn a_traced_transaction_counts_deferred_writes_as_statements() {
    let db = muster_testkit::fresh_db().await;
    db.execute("CREATE TABLE core.pipeline_probe (v text NOT NULL)")
        .await;
    let logbook = PgLogbook::new(db.pool());
    let figures = figures_of(async {
        let mut tx = traced_tx_on(&logbook).await;
        let sql = "INSERT INTO core.pipeline_probe (v) VALUES ($1)";
        for v in ["a", "b"] {
            let write: Vec<Param> = vec![Box::new(v.to_owned())];
            tx.defer(sql, write).await.expect("defer");
        }
        tx.query("SELECT count(*) FROM core.pipeline_probe", &[])
            .await
            .expect("count");
        Box::new(tx).send_commit().await.expect("commit");
    })
    .await;
    assert_eq!(figures[0].statements, 3);
}

#[tokio::test]
async fn a_traced_transaction_dropped_without_commit_is_rolled_back() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let figures = figures_of(async {
        let mut tx = traced_tx_on(&logbook).await;
        tx.query("SELECT 1", &[]).await.expect("select");
        drop(tx);
    })
    .await;
    assert_eq!(figures[0].outcome, TxOutcome::RolledBack);
    assert_eq!(figures[0].commit, None);
}

#[tokio::test]
async fn a_traced_transaction_whose_statement_failed_is_failed() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let figures = figures_of(async {
        let mut tx = traced_tx_on(&logbook).await;
        tx.query("SELECT 1 / 0", &[])
            .await
            .expect_err("division by zero");
        drop(tx);
    })
    .await;
    assert_eq!(figures[0].outcome, TxOutcome::Failed);
}

#[tokio::test]
async fn a_traced_commit_that_fails_is_failed() {
    let (_db, tx) = unencodable_write_before_commit(1).await;
    let mut tx = tx;
    let now = std::time::SystemTime::now();
    tx.figures = Some(TxFigures::new(now, now));
    let figures = figures_of(async {
        let _ = Box::new(tx).send_commit().await;
    })
    .await;
    assert_eq!(figures[0].outcome, TxOutcome::Failed);
}

#[tokio::test]
async fn a_transaction_begun_outside_a_traced_call_measures_nothing() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let mut tx = logbook.begin().await.expect("begin");
    let figures = figures_of(async {
        tx.now().await.expect("now");
        tx.commit().await.expect("commit");
    })
    .await;
    assert_eq!(figures, []);
}

#[tokio::test]
async fn a_traced_transaction_that_gets_no_connection_is_failed_with_nothing_sent() {
    // A port nothing listens on once its listener is dropped: Logbook is down.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("address");
    let url = format!("postgres://muster@{addr}/muster");
    let pool = crate::connect_pool(&url, &crate::PoolSettings::default()).expect("pool");
    let logbook = PgLogbook::new(pool);
    let figures = figures_of(async {
        assert!(logbook.begin().await.is_err(), "Logbook is down");
    })
    .await;
    let [f] = figures[..] else {
        panic!("{} transactions", figures.len())
    };
    assert_eq!(
        (f.outcome, f.statements, f.round_trips),
        (TxOutcome::Failed, 0, 0)
    );
}
