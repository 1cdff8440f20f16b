//! Digest reports against a real database.

use muster_app::ports::Logbook;
use muster_domain::Kind;
use time::OffsetDateTime;

use crate::PgLogbook;

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// Records `digest` for trawl in a transaction of its own; answers the previous digest.
async fn record(logbook: &PgLogbook, digest: &str) -> Option<String> {
    let mut tx = logbook.begin().await.expect("begin");
    let previous = tx
        .record_digest(Kind::Trawl, digest, OffsetDateTime::now_utc())
        .await
        .expect("record the digest");
    tx.commit().await.expect("commit");
    previous
}

#[tokio::test]
async fn the_first_report_of_a_kind_has_no_previous_digest() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    assert_eq!(record(&logbook, &digest('a')).await, None);
}

#[tokio::test]
async fn recording_a_digest_answers_the_one_deployed_before() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    record(&logbook, &digest('a')).await;
    assert_eq!(record(&logbook, &digest('b')).await, Some(digest('a')));
}

#[tokio::test]
async fn re_reporting_the_deployed_digest_answers_that_digest_as_the_previous_one() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    record(&logbook, &digest('a')).await;
    assert_eq!(record(&logbook, &digest('a')).await, Some(digest('a')));
}
