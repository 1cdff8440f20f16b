//! The pipeline against a real database: a write that cannot be sent never lets its COMMIT
//! through.

use super::{Param, PgTx};
use crate::PgLogbook;
use muster_app::ports::LogbookTx;

async fn tx_on(logbook: &PgLogbook) -> PgTx {
    PgTx::new(
        logbook.pool().get().await.expect("connection"),
        std::sync::Arc::clone(&logbook.hints),
    )
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
