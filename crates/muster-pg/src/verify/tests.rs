//! What verification catches: a changed edit text, a cut chain, a ledger rewritten with its
//! heads (`--against`), and what the head digest is.

use muster_app::ports::Logbook;
use muster_domain::Principal;
use muster_domain::edit::{Decided, Decision, Edit, EditId};
use muster_testkit::{TestDb, fresh_db};

use super::*;
use crate::PgLogbook;

const CS: Principal = Principal::Worker(muster_domain::Kind::Countersign);

/// A database with one edit, submitted and approved by the runtime role; answers the edit's id.
async fn one_approved_edit() -> (TestDb, String) {
    one_decided_edit(Decision::Approve).await
}

/// A database with one edit, submitted and decided by the runtime role; answers the edit's id.
async fn one_decided_edit(decision: Decision) -> (TestDb, String) {
    let db = fresh_db().await;
    let logbook = PgLogbook::new(
        crate::connect_pool(&db.app_url, &crate::PoolSettings::default()).expect("pool"),
    );
    let now = muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc());
    let id = EditId(uuid::Uuid::now_v7());
    let (mut edit, entry) = Edit::submit(
        id,
        "docs/intro",
        "alice",
        "better wording",
        Principal::Conn,
        now,
    );
    let mut tx = logbook.begin().await.expect("begin");
    tx.insert_edit(&edit, "better wording", now)
        .await
        .expect("insert");
    tx.append(&[entry]).await.expect("append");
    tx.commit().await.expect("commit");
    let Ok(Decided::Now(decided)) = edit.decide(decision, "alice", "alice", CS, now) else {
        panic!("decided");
    };
    let mut tx = logbook.begin().await.expect("begin");
    tx.save_edit(&edit, now).await.expect("save");
    tx.append(&[*decided]).await.expect("append");
    tx.commit().await.expect("commit");
    (db, id.to_string())
}

/// Runs `sql` as the superuser with the ledger's guard switched off (what only the schema
/// owner or a superuser can do).
async fn behind_muster(db: &TestDb, sql: &str) {
    db.client()
        .await
        .batch_execute(&format!(
            "ALTER TABLE core.ledger DISABLE TRIGGER USER; {sql}; ALTER TABLE core.ledger ENABLE TRIGGER USER;"
        ))
        .await
        .expect("the change behind muster");
}

async fn error_code(db: &TestDb) -> &'static str {
    verify_ledger(&db.pool())
        .await
        .expect_err("verification fails")
        .code()
}

#[tokio::test]
async fn an_intact_edit_verifies_with_its_text() {
    let (db, _) = one_approved_edit().await;
    let report = verify_ledger(&db.pool()).await.expect("verifies");
    assert_eq!(
        (report.edit_subjects, report.entries, report.bodies),
        (1, 2, 1)
    );
}

#[tokio::test]
async fn an_edit_text_changed_after_submission_fails_verification() {
    let (db, _) = one_approved_edit().await;
    db.client()
        .await
        .batch_execute("UPDATE core.edits SET body = 'worse wording'")
        .await
        .expect("change the text");
    assert_eq!(error_code(&db).await, "E_LEDGER_BODY");
}

#[tokio::test]
async fn a_rejected_edits_text_removed_by_retention_verifies_and_is_counted_as_removed() {
    let (db, _) = one_decided_edit(Decision::Reject).await;
    db.client()
        .await
        .batch_execute("UPDATE core.edits SET body = NULL")
        .await
        .expect("retention's removal");
    let report = verify_ledger(&db.pool()).await.expect("verifies");
    assert_eq!((report.bodies, report.texts_removed), (0, 1));
}

#[tokio::test]
async fn an_approved_edits_text_removed_fails_verification() {
    let (db, _) = one_approved_edit().await;
    db.client()
        .await
        .batch_execute("UPDATE core.edits SET body = NULL")
        .await
        .expect("remove the text");
    assert_eq!(error_code(&db).await, "E_LEDGER_BODY");
}

#[tokio::test]
async fn a_deleted_tail_of_an_edits_chain_fails_verification() {
    let (db, id) = one_approved_edit().await;
    behind_muster(
        &db,
        &format!("DELETE FROM core.ledger WHERE subject_id = '{id}' AND subject_seq = 2"),
    )
    .await;
    assert_eq!(error_code(&db).await, "E_LEDGER_HEAD");
}

#[tokio::test]
async fn an_edit_without_any_chain_fails_verification() {
    let (db, id) = one_approved_edit().await;
    behind_muster(
        &db,
        &format!("DELETE FROM core.ledger WHERE subject_id = '{id}'"),
    )
    .await;
    assert_eq!(error_code(&db).await, "E_LEDGER_NO_CHAIN");
}

#[tokio::test]
async fn the_head_digest_is_the_same_when_taken_twice() {
    let (db, _) = one_approved_edit().await;
    let (_, first) = ledger_head(&db.pool()).await.expect("head");
    let (_, second) = ledger_head(&db.pool()).await.expect("head");
    assert_eq!(first, second);
}

#[tokio::test]
async fn a_recorded_head_still_verifies_after_more_entries_are_appended() {
    let (db, _) = one_approved_edit().await;
    let (_, head) = ledger_head(&db.pool()).await.expect("head");
    let logbook = PgLogbook::new(db.pool());
    let now = muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc());
    let id = EditId(uuid::Uuid::now_v7());
    let (edit, entry) = Edit::submit(id, "docs/other", "bob", "more", Principal::Conn, now);
    let mut tx = logbook.begin().await.expect("begin");
    tx.insert_edit(&edit, "more", now).await.expect("insert");
    tx.append(&[entry]).await.expect("append");
    tx.commit().await.expect("commit");
    assert!(verify_against(&db.pool(), head).await.is_ok());
}

#[tokio::test]
async fn a_tail_deleted_with_its_head_rewritten_passes_the_chains_but_not_the_recorded_digest() {
    let (db, id) = one_approved_edit().await;
    let (_, head) = ledger_head(&db.pool()).await.expect("head");
    // A superuser's forgery: the last entry removed and the edit's row set back to match.
    behind_muster(
        &db,
        &format!(
            "DELETE FROM core.ledger WHERE subject_id = '{id}' AND subject_seq = 2;
             UPDATE core.edits SET state = 'pending_approval', decided_at = NULL, chain_len = 1,
                 chain_head = (SELECT hash FROM core.ledger WHERE subject_id = '{id}' AND subject_seq = 1)"
        ),
    )
    .await;
    assert!(verify_ledger(&db.pool()).await.is_ok());
    let e = verify_against(&db.pool(), head).await.expect_err("caught");
    assert_eq!(e.code(), "E_LEDGER_DIGEST");
}

#[test]
fn a_head_reads_back_as_it_is_printed() {
    let head = LedgerHead {
        seq: 42,
        digest: [7; 32],
    };
    assert_eq!(
        head.to_string().parse::<LedgerHead>().expect("parsed"),
        head
    );
    assert_eq!(head.to_string(), format!("42:{}", "07".repeat(32)));
}

#[test]
fn a_head_without_a_digest_is_refused() {
    assert_eq!(
        "42".parse::<LedgerHead>().expect_err("refused").code(),
        "E_LEDGER"
    );
}

/// A database where `trawl` was paused and resumed by the runtime role.
async fn a_kind_paused_and_resumed() -> TestDb {
    let db = fresh_db().await;
    for paused in [true, false] {
        pause_or_resume(&db, paused).await;
    }
    db
}

/// Pauses (or resumes) `trawl` as the runtime role.
async fn pause_or_resume(db: &TestDb, paused: bool) {
    let logbook = PgLogbook::new(
        crate::connect_pool(&db.app_url, &crate::PoolSettings::default()).expect("pool"),
    );
    let now = muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc());
    let mut tx = logbook.begin().await.expect("begin");
    let mut pause = tx
        .lock_kind(muster_domain::Kind::Trawl)
        .await
        .expect("lock");
    let entry = if paused {
        pause.pause("a bad image", Principal::Operator, now)
    } else {
        pause.resume(None, Principal::Operator, now)
    }
    .expect("a change");
    tx.save_kind(&pause).await.expect("save");
    tx.append_and_commit(&[entry]).await.expect("commit");
}

#[tokio::test]
async fn a_chain_continued_after_a_checkpoint_verifies_from_the_entry_before_it() {
    let db = fresh_db().await;
    pause_or_resume(&db, true).await;
    let checkpoint = crate::take_checkpoint(&db.pool(), None)
        .await
        .expect("taken")
        .expect("a checkpoint");
    pause_or_resume(&db, false).await;
    let report = verify_since(&db.pool(), checkpoint.seq, None)
        .await
        .expect("verifies");
    assert_eq!(
        (report.kind_subjects, report.subjects, report.entries),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn a_kinds_pause_chain_verifies_against_its_row() {
    let db = a_kind_paused_and_resumed().await;
    let report = verify_ledger(&db.pool()).await.expect("verifies");
    assert_eq!(
        (report.kind_subjects, report.subjects, report.entries),
        (1, 1, 2)
    );
}

#[tokio::test]
async fn a_kinds_pause_chain_cut_short_fails_verification() {
    let db = a_kind_paused_and_resumed().await;
    behind_muster(
        &db,
        "DELETE FROM core.ledger WHERE subject_type = 'kind' AND subject_seq = 2",
    )
    .await;
    assert_eq!(error_code(&db).await, "E_LEDGER_HEAD");
}

/// Submits one edit as the runtime role, holding its transaction open `hold` after the entry
/// is written (so that entries commit out of their sequence order), then approves it.
pub(crate) async fn submit_and_approve(logbook: &PgLogbook, hold: std::time::Duration) {
    let now = muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc());
    let id = EditId(uuid::Uuid::now_v7());
    let (mut edit, entry) = Edit::submit(id, "docs/intro", "alice", "words", Principal::Conn, now);
    let mut tx = logbook.begin().await.expect("begin");
    tx.insert_edit(&edit, "words", now).await.expect("insert");
    tx.append(&[entry]).await.expect("append");
    tokio::time::sleep(hold).await;
    tx.commit().await.expect("commit");
    let Ok(Decided::Now(decided)) = edit.decide(Decision::Approve, "alice", "alice", CS, now)
    else {
        panic!("decided");
    };
    let mut tx = logbook.begin().await.expect("begin");
    tx.save_edit(&edit, now).await.expect("save");
    tx.append(&[*decided]).await.expect("append");
    tokio::time::sleep(hold).await;
    tx.commit().await.expect("commit");
}

/// Eight writers, each submitting and approving `rounds` edits with its transactions held
/// open a varying few milliseconds; answers their tasks.
pub(crate) fn writers(db: &TestDb, rounds: u64) -> Vec<tokio::task::JoinHandle<()>> {
    (0..8u64)
        .map(|w| {
            let logbook = PgLogbook::new(
                crate::connect_pool(&db.app_url, &crate::PoolSettings::default()).expect("pool"),
            );
            tokio::spawn(async move {
                for i in 0..rounds {
                    let hold = std::time::Duration::from_millis((w * 7 + i * 3) % 25);
                    submit_and_approve(&logbook, hold).await;
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verification_while_writers_commit_in_parallel_passes_every_time() {
    let db = fresh_db().await;
    let writing = writers(&db, 40);
    let pool = db.pool();
    let mut runs = 0;
    while !writing.iter().all(|w| w.is_finished()) {
        verify_ledger(&pool)
            .await
            .expect("an untouched ledger verifies");
        ledger_head(&pool).await.expect("and so does its head");
        runs += 1;
    }
    for w in writing {
        w.await.expect("writer");
    }
    let report = verify_ledger(&pool).await.expect("verifies");
    assert!(runs >= 2, "verified {runs} times while writing");
    assert_eq!((report.edit_subjects, report.entries), (320, 640));
}

/// A database with one approved edit, a checkpoint after it, then one more edit submitted and
/// approved; answers the checkpoint and the first edit's id.
async fn a_checkpoint_then_more() -> (TestDb, Checkpoint, String) {
    let (db, id) = one_approved_edit().await;
    let pool = crate::connect_pool(&db.app_url, &crate::PoolSettings::default()).expect("pool");
    let checkpoint = crate::take_checkpoint(&pool, None)
        .await
        .expect("taken")
        .expect("a checkpoint");
    submit_and_approve(&PgLogbook::new(pool), std::time::Duration::ZERO).await;
    (db, checkpoint, id)
}

#[tokio::test]
async fn since_a_checkpoint_only_the_entries_after_it_are_read() {
    let (db, checkpoint, _) = a_checkpoint_then_more().await;
    let report = verify_since(&db.pool(), checkpoint.seq, None)
        .await
        .expect("verifies");
    assert_eq!(
        (
            checkpoint.seq,
            report.subjects,
            report.entries,
            report.edit_subjects
        ),
        (2, 1, 2, 1)
    );
}

#[tokio::test]
async fn since_a_checkpoint_with_its_digest_verifies() {
    let (db, checkpoint, _) = a_checkpoint_then_more().await;
    assert!(
        verify_since(&db.pool(), checkpoint.seq, Some(checkpoint.digest))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn since_a_checkpoint_with_another_digest_is_refused() {
    let (db, checkpoint, _) = a_checkpoint_then_more().await;
    let e = verify_since(&db.pool(), checkpoint.seq, Some([1; 32]))
        .await
        .expect_err("refused");
    assert_eq!(e.code(), "E_LEDGER_CHECKPOINT");
}

#[tokio::test]
async fn since_a_checkpoint_that_does_not_exist_is_refused() {
    let (db, _, _) = a_checkpoint_then_more().await;
    let e = verify_since(&db.pool(), 3, None)
        .await
        .expect_err("refused");
    assert_eq!(
        e.to_string(),
        "ledger: there is no checkpoint 3 (`muster ledger-verify` prints the latest)"
    );
}

#[tokio::test]
async fn an_entry_changed_after_a_checkpoint_fails_verification_since_it() {
    let (db, checkpoint, _) = a_checkpoint_then_more().await;
    behind_muster(
        &db,
        &format!(
            "UPDATE core.ledger SET data = '{{}}' WHERE seq = {}",
            checkpoint.seq + 1
        ),
    )
    .await;
    let e = verify_since(&db.pool(), checkpoint.seq, None)
        .await
        .expect_err("caught");
    assert_eq!(e.code(), "E_LEDGER_TAMPERED");
}

#[tokio::test]
async fn a_chain_continued_after_a_checkpoint_must_link_to_the_entry_before_it() {
    let (db, checkpoint, id) = a_checkpoint_then_more().await;
    // A third entry for the first edit, linked to a hash that is not its second entry's.
    behind_muster(
        &db,
        &format!(
            "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at, data, prev_hash, hash)
             VALUES ('edit', '{id}', 3, 'noted', 'operator', now(), '{{}}', '\\x{zeros}', '\\x{zeros}')",
            zeros = "00".repeat(32)
        ),
    )
    .await;
    let e = verify_since(&db.pool(), checkpoint.seq, None)
        .await
        .expect_err("caught");
    assert_eq!(e.code(), "E_LEDGER_LINK");
}

#[tokio::test]
async fn a_rewrite_below_a_checkpoint_that_keeps_the_chains_whole_fails_the_checkpoint() {
    let (db, _, id) = a_checkpoint_then_more().await;
    // The forgery of the test above with the recorded head: chains and rows agree again.
    behind_muster(
        &db,
        &format!(
            "DELETE FROM core.ledger WHERE subject_id = '{id}' AND subject_seq = 2;
             UPDATE core.edits SET state = 'pending_approval', decided_at = NULL, chain_len = 1,
                 chain_head = (SELECT hash FROM core.ledger WHERE subject_id = '{id}' AND subject_seq = 1)
             WHERE id = '{id}'"
        ),
    )
    .await;
    let e = verify_ledger(&db.pool()).await.expect_err("caught");
    assert_eq!(e.code(), "E_LEDGER_CHECKPOINT");
}

#[tokio::test]
async fn a_full_verification_recomputes_every_checkpoint() {
    let (db, checkpoint, _) = a_checkpoint_then_more().await;
    let report = verify_ledger(&db.pool()).await.expect("verifies");
    assert_eq!(
        (report.checkpoints, report.latest_checkpoint),
        (1, Some(checkpoint))
    );
}
