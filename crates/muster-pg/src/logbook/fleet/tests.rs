//! Digest reports against a real database.

use muster_app::ports::Logbook;
use muster_domain::Kind;
use time::OffsetDateTime;

use crate::PgLogbook;

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// Reports `digests` for trawl in order, each in a transaction of its own, on a fresh
/// database; answers the previous digest each report was told.
async fn previous_digests(digests: &[char]) -> Vec<Option<String>> {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let mut answers = Vec::new();
    for &c in digests {
        let mut tx = logbook.begin().await.expect("begin");
        let previous = tx
            .record_digest(Kind::Trawl, &digest(c), OffsetDateTime::now_utc())
            .await
            .expect("record the digest");
        tx.commit().await.expect("commit");
        answers.push(previous);
    }
    answers
}

#[tokio::test]
async fn the_first_report_of_a_kind_has_no_previous_digest() {
    assert_eq!(previous_digests(&['a']).await, [None]);
}

#[tokio::test]
async fn recording_a_digest_answers_the_one_deployed_before() {
    assert_eq!(
        previous_digests(&['a', 'b']).await,
        [None, Some(digest('a'))]
    );
}

#[tokio::test]
async fn re_reporting_the_deployed_digest_answers_that_digest_as_the_previous_one() {
    assert_eq!(
        previous_digests(&['a', 'a']).await,
        [None, Some(digest('a'))]
    );
}
