//! When checkpoints are taken, what they commit to, and that writers committing out of
//! sequence order never leave an entry behind a checkpoint.

use std::time::Duration;

use muster_testkit::fresh_db;

use super::*;
use crate::PgLogbook;
use crate::verify::tests::{submit_and_approve, writers};

fn runtime_pool(db: &muster_testkit::TestDb) -> Pool {
    crate::connect_pool(&db.app_url, &crate::PoolSettings::default()).expect("pool")
}

/// The checkpoint the ledger's entries up to `seq` fold to, computed here from every row.
async fn folded_here(db: &muster_testkit::TestDb, seq: u64) -> Checkpoint {
    let rows = db
        .client()
        .await
        .query(
            "SELECT seq, hash FROM core.ledger WHERE seq <= $1 ORDER BY seq",
            &[&(seq as i64)],
        )
        .await
        .expect("ledger");
    let mut fold = CheckpointFold::new(Checkpoint::ORIGIN, seq);
    for r in rows {
        let hash: Vec<u8> = r.get(1);
        fold.push(
            r.get::<_, i64>(0) as u64,
            &hash.try_into().expect("32 bytes"),
        )
        .expect("in order");
    }
    fold.finish()
}

#[tokio::test]
async fn a_checkpoint_commits_to_every_entry_up_to_the_newest() {
    let db = fresh_db().await;
    let pool = runtime_pool(&db);
    submit_and_approve(&PgLogbook::new(pool.clone()), Duration::ZERO).await;
    let taken = take_checkpoint(&pool, None).await.expect("taken");
    assert_eq!(taken, Some(folded_here(&db, 2).await));
}

#[tokio::test]
async fn the_latest_checkpoint_reads_back_as_taken() {
    let db = fresh_db().await;
    let pool = runtime_pool(&db);
    submit_and_approve(&PgLogbook::new(pool.clone()), Duration::ZERO).await;
    let taken = take_checkpoint(&pool, None).await.expect("taken");
    let latest = latest_checkpoint(&pool).await.expect("read");
    assert_eq!(latest.map(|l| l.checkpoint), taken);
}

#[tokio::test]
async fn no_checkpoint_is_taken_when_nothing_is_new() {
    let db = fresh_db().await;
    let pool = runtime_pool(&db);
    submit_and_approve(&PgLogbook::new(pool.clone()), Duration::ZERO).await;
    take_checkpoint(&pool, None).await.expect("taken");
    assert_eq!(take_checkpoint(&pool, None).await.expect("looked"), None);
}

#[tokio::test]
async fn no_checkpoint_is_due_before_enough_entries_or_time() {
    let db = fresh_db().await;
    let pool = runtime_pool(&db);
    submit_and_approve(&PgLogbook::new(pool.clone()), Duration::ZERO).await;
    take_checkpoint(&pool, None).await.expect("taken");
    submit_and_approve(&PgLogbook::new(pool.clone()), Duration::ZERO).await;
    let settings = CheckpointSettings {
        every_entries: 3,
        every: Duration::from_secs(3600),
    };
    assert_eq!(
        take_checkpoint(&pool, Some(&settings))
            .await
            .expect("looked"),
        None
    );
}

#[tokio::test]
async fn a_checkpoint_is_due_after_enough_entries() {
    let db = fresh_db().await;
    let pool = runtime_pool(&db);
    submit_and_approve(&PgLogbook::new(pool.clone()), Duration::ZERO).await;
    let settings = CheckpointSettings {
        every_entries: 2,
        every: Duration::from_secs(3600),
    };
    let taken = take_checkpoint(&pool, Some(&settings))
        .await
        .expect("taken");
    assert_eq!(taken.map(|c| c.seq), Some(2));
}

#[tokio::test]
async fn the_runtime_role_cannot_change_a_checkpoint() {
    let db = fresh_db().await;
    let pool = runtime_pool(&db);
    submit_and_approve(&PgLogbook::new(pool.clone()), Duration::ZERO).await;
    take_checkpoint(&pool, None).await.expect("taken");
    let e = pool
        .get()
        .await
        .expect("client")
        .execute("DELETE FROM core.ledger_checkpoints", &[])
        .await
        .expect_err("refused");
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkpoints_taken_while_writers_commit_out_of_order_leave_no_entry_behind() {
    let db = fresh_db().await;
    let writing = writers(&db, 150);
    let pool = runtime_pool(&db);
    let mut taken = Vec::new();
    while !writing.iter().all(|w| w.is_finished()) {
        if let Some(c) = take_checkpoint(&pool, None).await.expect("taken") {
            taken.push(c);
        }
    }
    for w in writing {
        w.await.expect("writer");
    }
    let report = crate::verify_ledger(&db.pool()).await.expect("verifies");
    assert!(
        taken.len() >= 2,
        "{} checkpoints taken while writing",
        taken.len()
    );
    assert_eq!(report.checkpoints, taken.len() as u64);
}

#[test]
fn a_checkpoint_is_named_by_its_sequence_with_or_without_its_digest() {
    assert_eq!(parse_checkpoint("42").expect("parsed"), (42, None));
    let named = format!("42:{}", "07".repeat(32));
    assert_eq!(
        parse_checkpoint(&named).expect("parsed"),
        (42, Some([7; 32]))
    );
    assert_eq!(
        checkpoint_text(&Checkpoint {
            seq: 42,
            digest: [7; 32]
        }),
        named
    );
}

#[test]
fn a_checkpoint_name_that_is_not_a_number_is_refused() {
    assert_eq!(
        parse_checkpoint("latest").expect_err("refused").to_string(),
        "ledger: \"latest\" is not a checkpoint: SEQ or SEQ:DIGEST (as `ledger-verify` prints it)"
    );
}

/// Inserts one ledger entry of its own subject on `c` (a transaction may be open on it).
async fn insert_entry(c: &tokio_postgres::Client, subject: &str) {
    c.batch_execute(&format!(
        "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at, data,
             prev_hash, hash)
         VALUES ('edit', '{subject}', 1, 'submitted', 'conn', now(), '{{}}',
             decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'))"
    ))
    .await
    .expect("an entry");
}

#[tokio::test]
async fn a_checkpoint_waits_for_an_entry_whose_transaction_id_is_newer_than_the_last_committed() {
    // U takes its transaction id first, T second; T inserts (a lower seq) and stays open, U
    // inserts and commits. A snapshot's xmax is then U's id + 1 = T's id: T is not among the
    // snapshot's running transactions, yet its entry lies below the newest visible one.
    let db = fresh_db().await;
    let pool = runtime_pool(&db);
    let (u, t) = (db.client().await, db.client().await);
    u.batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .await
        .expect("U's id");
    t.batch_execute("BEGIN").await.expect("T begins");
    insert_entry(&t, "t").await;
    insert_entry(&u, "u").await;
    u.batch_execute("COMMIT").await.expect("U commits");
    let taking = tokio::spawn({
        let pool = pool.clone();
        async move { take_checkpoint(&pool, None).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!taking.is_finished(), "taken while T's entry was open");
    t.batch_execute("COMMIT").await.expect("T commits");
    let taken = taking.await.expect("task").expect("taken");
    assert_eq!(taken, Some(folded_here(&db, 2).await));
}
