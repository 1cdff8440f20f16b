//! Retention: finished items leave the working tables, their ledger entries stay; a removed
//! item reads from the ledger, its leases are lost, its idempotency key is free again; the
//! text of a rejected proposal goes, its hash stays in the chain.

use std::time::Duration;

use hyper::StatusCode;
use muster_app::ports::Logbook;
use muster_domain::Principal;
use muster_domain::edit::{Decided, Decision, Edit, EditId};
use muster_ledger::{Entry, SealedEntry};
use muster_testkit::TestApp;
use serde_json::{Value, json};

/// A server whose retention period is 0 days (and 0 for rejected edit texts).
async fn zero_retention() -> TestApp {
    TestApp::spawn_with(|s| {
        s.retain_days = 0;
        s.retain_edit_text_days = 0;
    })
    .await
}

/// One retention pass, as `muster retention-pass` runs it (as the runtime role).
async fn pass(app: &TestApp) -> muster_app::service::PassReport {
    muster::retention_pass(&app.settings)
        .await
        .expect("a retention pass")
}

/// Enqueues, leases and completes one trawl item; its id and its lease.
async fn done_item(app: &TestApp) -> (String, Value) {
    let lease = app.enqueue_and_lease("trawl").await;
    let r = app.complete(&lease, json!({"result": {"pages": 3}})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    (lease["item"]["id"].as_str().unwrap().to_owned(), lease)
}

#[tokio::test]
async fn a_pass_with_zero_retain_days_removes_finished_items_and_their_leases_and_keeps_the_ledger()
{
    let app = zero_retention().await;
    done_item(&app).await;
    let failed = app.enqueue_and_lease("trawl").await;
    app.fail_with(&failed, "E_BROKEN", "broken", false).await;
    let cancelled = app.enqueue("sextant", "urgent", json!({})).await;
    let r = app
        .post(
            &format!("/v1/items/{cancelled}/cancel"),
            "operator",
            json!({"reason": "not needed"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let ledger = app.scalar_i64("SELECT count(*) FROM core.ledger").await;
    let report = pass(&app).await;
    assert_eq!((report.items, report.leases, report.groups_left), (3, 2, 0));
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.items").await, 0);
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.leases").await, 0);
    assert_eq!(
        app.scalar_i64("SELECT count(*) FROM core.ledger").await,
        ledger
    );
    assert_eq!(
        app.scalar_i64("SELECT sum(removed)::bigint FROM core.retention_removed")
            .await,
        3
    );
}

#[tokio::test]
async fn an_unfinished_item_is_never_removed() {
    let app = zero_retention().await;
    app.enqueue("trawl", "normal", json!({})).await;
    app.enqueue_and_lease("sextant").await;
    let parked = app.enqueue_and_lease("assay").await;
    let r = app
        .needs_subtool(
            &parked,
            json!({"worker_digest": format!("sha256:{}", "a".repeat(64)), "layout": {"signature": "s", "detail": {}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let report = pass(&app).await;
    assert_eq!((report.items, report.leases), (0, 0));
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.items").await, 3);
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.leases").await, 2);
}

#[tokio::test]
async fn a_finished_item_younger_than_the_retention_period_stays() {
    let app = TestApp::spawn().await;
    done_item(&app).await;
    let report = pass(&app).await;
    assert_eq!(report.items, 0);
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.items").await, 1);
}

#[tokio::test]
async fn a_removed_item_reads_from_the_ledger_with_removed_true() {
    let app = zero_retention().await;
    let (id, _) = done_item(&app).await;
    let before = app.item(&id).await;
    assert_eq!(before["removed"], json!(false));
    pass(&app).await;
    let item = app.item(&id).await;
    assert_eq!(
        (
            &item["removed"],
            &item["state"],
            &item["kind"],
            &item["priority"],
            &item["attempt"],
            &item["payload"],
            &item["result"]
        ),
        (
            &json!(true),
            &json!("done"),
            &json!("trawl"),
            &json!("normal"),
            &json!(1),
            &Value::Null,
            &Value::Null
        )
    );
    assert_eq!(item["history"], before["history"]);
    assert_eq!(item["created_at"], before["created_at"]);
}

#[tokio::test]
async fn an_item_that_never_was_is_still_not_found() {
    let app = zero_retention().await;
    let r = app
        .get("/v1/items/0192f1f4-8a4e-7cc0-b3c1-4f4f7d0a1b2c", "operator")
        .await;
    r.assert_error(StatusCode::NOT_FOUND, "E_NOT_FOUND");
}

#[tokio::test]
async fn calls_on_a_lease_of_a_removed_item_are_lease_lost() {
    let app = zero_retention().await;
    let (_, lease) = done_item(&app).await;
    pass(&app).await;
    app.heartbeat(&lease, "w")
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    app.complete(&lease, json!({"result": {"pages": 3}}))
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
    app.fail_on_purpose(&lease, false)
        .await
        .assert_error(StatusCode::CONFLICT, "E_LEASE_LOST");
}

#[tokio::test]
async fn an_idempotency_key_names_a_new_item_once_its_item_was_removed() {
    let app = zero_retention().await;
    let enqueue = || {
        app.post(
            "/v1/items",
            "operator",
            json!({"kind": "trawl", "priority": "normal", "payload": {}, "idempotency_key": "k-1"}),
        )
    };
    let first = enqueue().await;
    assert_eq!(first.status, StatusCode::CREATED);
    let lease = app.lease("trawl", "w").await.unwrap();
    app.complete(&lease, json!({"result": {}})).await;
    let again = enqueue().await;
    assert_eq!(
        (again.status, &again.body["item_id"]),
        (StatusCode::OK, &first.body["item_id"])
    );
    pass(&app).await;
    let after = enqueue().await;
    assert_eq!(after.status, StatusCode::CREATED);
    assert_ne!(after.body["item_id"], first.body["item_id"]);
}

#[tokio::test]
async fn a_batch_skips_an_item_another_transaction_holds_and_the_next_pass_takes_it() {
    let app = zero_retention().await;
    let (id, _) = done_item(&app).await;
    let holder = app
        .open_transaction(&format!(
            "SELECT 1 FROM core.items WHERE id = '{id}' FOR UPDATE"
        ))
        .await;
    let started = std::time::Instant::now();
    let report = pass(&app).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.items, 0);
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(pass(&app).await.items, 1);
}

/// Waits (up to a minute) until `GET /v1/queues` counts `done` done and `queued` queued items.
async fn until_depths(app: &TestApp, done: i64, queued: i64) {
    let count = |q: &Value, state: &str| {
        q["depths"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["state"] == state)
            .map(|d| d["count"].as_i64().unwrap())
            .sum::<i64>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let q = app.get("/v1/queues", "operator").await.body;
        if (count(&q, "done"), count(&q, "queued")) == (done, queued) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "depths still {q}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn the_depths_of_finished_states_follow_a_pass_within_a_minute() {
    let app = zero_retention().await;
    done_item(&app).await;
    app.enqueue("trawl", "normal", json!({})).await;
    until_depths(&app, 1, 1).await;
    pass(&app).await;
    until_depths(&app, 0, 1).await;
}

#[tokio::test]
async fn a_replica_started_after_a_pass_counts_only_what_the_working_tables_hold() {
    let app = zero_retention().await;
    done_item(&app).await;
    done_item(&app).await;
    pass(&app).await;
    done_item(&app).await;
    let second = TestApp::spawn_on(app.db.clone(), |_| {}).await;
    until_depths(&second, 1, 0).await;
}

#[tokio::test]
async fn metrics_show_the_retention_period() {
    let app = TestApp::spawn().await;
    let m = app.metrics().await;
    assert!(m.contains("muster_retention_period_seconds 2592000"), "{m}");
    assert!(m.contains("muster_retention_items_removed_total 0"), "{m}");
}

/// A proposal for `docs/intro` submitted and rejected through the adapter, as the runtime
/// role; its id.
async fn rejected_edit(app: &TestApp, text: &str) -> EditId {
    let pool = muster_pg::connect_pool(&app.db.app_url, &muster_pg::PoolSettings::default())
        .expect("pool");
    let logbook = muster_pg::PgLogbook::new(pool);
    let now = muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc());
    let id = EditId(uuid::Uuid::now_v7());
    let (mut edit, submitted) = Edit::submit(id, "docs/intro", "alice", text, Principal::Conn, now);
    let mut tx = logbook.begin().await.unwrap();
    tx.insert_edit(&edit, text, now).await.unwrap();
    tx.append(&[submitted]).await.unwrap();
    tx.commit().await.unwrap();
    let countersign = Principal::Worker(muster_domain::Kind::Countersign);
    let Ok(Decided::Now(decided)) =
        edit.decide(Decision::Reject, "alice", "alice", countersign, now)
    else {
        panic!("decided");
    };
    let mut tx = logbook.begin().await.unwrap();
    tx.save_edit(&edit, now).await.unwrap();
    tx.append(&[*decided]).await.unwrap();
    tx.commit().await.unwrap();
    id
}

#[tokio::test]
async fn a_rejected_proposals_text_is_removed_and_its_chain_still_verifies() {
    let app = zero_retention().await;
    let id = rejected_edit(&app, "worse wording").await;
    assert_eq!(pass(&app).await.edit_texts, 1);
    let listed = app.get("/v1/edits?state=rejected", "operator").await;
    assert_eq!(
        (listed.status, &listed.body["edits"][0]["body"]),
        (StatusCode::OK, &Value::Null)
    );
    let c = app.db.client().await;
    let row = c
        .query_one(
            "SELECT body, chain_len, chain_head FROM core.edits WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0), None);
    let rows = c
        .query(
            "SELECT subject_seq, event, from_state, to_state, actor, fence, at, data, prev_hash, hash
             FROM core.ledger WHERE subject_type = 'edit' AND subject_id = $1 ORDER BY subject_seq",
            &[&id.to_string()],
        )
        .await
        .unwrap();
    let chain: Vec<SealedEntry> = rows
        .iter()
        .map(|r| SealedEntry {
            entry: Entry {
                subject_type: "edit".into(),
                subject_id: id.to_string(),
                event: r.get(1),
                from_state: r.get(2),
                to_state: r.get(3),
                actor: r.get(4),
                fence: r.get::<_, Option<i64>>(5).map(|f| f as u64),
                at: r.get(6),
                data: r.get(7),
            },
            subject_seq: r.get::<_, i64>(0) as u64,
            prev_hash: r.get::<_, Vec<u8>>(8).try_into().unwrap(),
            hash: r.get::<_, Vec<u8>>(9).try_into().unwrap(),
        })
        .collect();
    let head = muster_ledger::verify_chain("edit", &id.to_string(), &chain).expect("intact");
    assert_eq!(
        (head.len as i64, head.hash.to_vec()),
        (row.get::<_, i64>(1), row.get::<_, Vec<u8>>(2))
    );
    let submitted: Value = serde_json::from_str(&chain[0].entry.data).unwrap();
    assert_eq!(
        submitted["body_blake3"],
        json!(muster_domain::edit::body_digest("worse wording"))
    );
}

#[tokio::test]
async fn a_rejected_proposals_text_stays_within_its_period() {
    let app = TestApp::spawn().await;
    rejected_edit(&app, "worse wording").await;
    assert_eq!(pass(&app).await.edit_texts, 0);
    assert_eq!(
        app.scalar_i64("SELECT count(*) FROM core.edits WHERE body IS NOT NULL")
            .await,
        1
    );
}

#[tokio::test]
async fn muster_retention_pass_runs_one_pass_and_prints_what_it_removed() {
    let app = TestApp::spawn().await;
    done_item(&app).await;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_muster"));
    cmd.args(["retention-pass", "--retain-days", "0"])
        .env("MUSTER_DATABASE_URL", &app.db.app_url)
        .env("MUSTER_LOG_FORMAT", "json");
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("the blocking task")
        .expect("run muster");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref()
        ),
        (
            Some(0),
            "retention pass: 1 finished items and 1 leases removed, 0 edit texts removed\n"
        )
    );
    assert_eq!(app.scalar_i64("SELECT count(*) FROM core.items").await, 0);
}

/// An item created 40 days ago (its UUIDv7 id says so) in `state`, whose one ledger entry is
/// `finished_days_ago` old; its id.
async fn old_item(app: &TestApp, n: u8, state: &str, finished_days_ago: i64) -> String {
    let created = time::OffsetDateTime::now_utc() - time::Duration::days(40);
    let ms = (created.unix_timestamp_nanos() / 1_000_000) as u128;
    let id = uuid::Uuid::from_u128((ms << 80) | (0x7 << 76) | (0x8 << 60) | u128::from(n));
    app.execute(&format!(
        "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, payload,
             created_at, chain_len, chain_head)
         VALUES ('{id}', 'trawl', 1, '{state}', 1, 1, now(), '{{}}', now(), 1, decode(repeat('00', 32), 'hex'));
         INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at, data,
             prev_hash, hash)
         VALUES ('item', '{id}', 1, 'completed', 'worker:trawl', now() - interval '{finished_days_ago} days',
             '{{}}', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'))"
    ))
    .await;
    id.to_string()
}

#[tokio::test]
async fn an_item_counts_as_finished_at_its_newest_ledger_entry_not_at_its_creation() {
    let app = TestApp::spawn_with(|s| s.retain_days = 30).await;
    let recent = old_item(&app, 1, "done", 1).await;
    old_item(&app, 2, "done", 31).await;
    assert_eq!(pass(&app).await.items, 1);
    assert_eq!(
        app.scalar_text("SELECT string_agg(id::text, ',') FROM core.items")
            .await,
        recent
    );
}

/// A trawl item cancelled by the operator; its id.
async fn cancelled_item(app: &TestApp) -> String {
    let id = app.enqueue("trawl", "normal", json!({})).await;
    let r = app
        .post(
            &format!("/v1/items/{id}/cancel"),
            "operator",
            json!({"reason": "not needed"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    id
}

/// A trawl item failed for good; its id.
async fn failed_item(app: &TestApp) -> String {
    let lease = app.enqueue_and_lease("trawl").await;
    app.fail_with(&lease, "E_BROKEN", "broken", false).await;
    lease["item"]["id"].as_str().unwrap().to_owned()
}

async fn cancel(app: &TestApp, id: &str) -> muster_testkit::Resp {
    app.post(
        &format!("/v1/items/{id}/cancel"),
        "operator",
        json!({"reason": "again"}),
    )
    .await
}

#[tokio::test]
async fn cancelling_a_removed_cancelled_item_answers_200_and_records_nothing() {
    let app = zero_retention().await;
    let id = cancelled_item(&app).await;
    assert_eq!(pass(&app).await.items, 1, "the pass removed the item");
    let ledger = app.scalar_i64("SELECT count(*) FROM core.ledger").await;
    let r = cancel(&app, &id).await;
    assert_eq!(
        (r.status, &r.body),
        (
            StatusCode::OK,
            &json!({"item_id": id, "state": "cancelled"})
        )
    );
    assert_eq!(
        app.scalar_i64("SELECT count(*) FROM core.ledger").await,
        ledger
    );
}

#[tokio::test]
async fn cancelling_a_removed_done_item_is_a_conflict() {
    let app = zero_retention().await;
    let (id, _) = done_item(&app).await;
    assert_eq!(pass(&app).await.items, 1, "the pass removed the item");
    cancel(&app, &id)
        .await
        .assert_error(StatusCode::CONFLICT, "E_CONFLICT");
}

#[tokio::test]
async fn cancelling_a_removed_failed_item_is_a_conflict() {
    let app = zero_retention().await;
    let id = failed_item(&app).await;
    assert_eq!(pass(&app).await.items, 1, "the pass removed the item");
    cancel(&app, &id)
        .await
        .assert_error(StatusCode::CONFLICT, "E_CONFLICT");
}

#[tokio::test]
async fn retrying_a_removed_failed_item_is_a_conflict_and_records_nothing() {
    let app = zero_retention().await;
    let id = failed_item(&app).await;
    assert_eq!(pass(&app).await.items, 1, "the pass removed the item");
    let ledger = app.scalar_i64("SELECT count(*) FROM core.ledger").await;
    app.retry(&id, "operator")
        .await
        .assert_error(StatusCode::CONFLICT, "E_CONFLICT");
    assert_eq!(
        app.scalar_i64("SELECT count(*) FROM core.ledger").await,
        ledger
    );
}

#[tokio::test]
async fn retrying_a_removed_done_item_is_a_conflict() {
    let app = zero_retention().await;
    let (id, _) = done_item(&app).await;
    assert_eq!(pass(&app).await.items, 1, "the pass removed the item");
    app.retry(&id, "operator")
        .await
        .assert_error(StatusCode::CONFLICT, "E_CONFLICT");
}

#[tokio::test]
async fn cancelling_or_retrying_an_item_that_never_was_is_not_found() {
    let app = zero_retention().await;
    let id = "0192f1f4-8a4e-7cc0-b3c1-4f4f7d0a1b2c";
    cancel(&app, id)
        .await
        .assert_error(StatusCode::NOT_FOUND, "E_NOT_FOUND");
    app.retry(id, "operator")
        .await
        .assert_error(StatusCode::NOT_FOUND, "E_NOT_FOUND");
}

/// One batch of `core.remove_finished` of up to `max` done trawl items of priority normal,
/// with a retention period of 30 days, on the client `c`: the rows it locked, the last of them
/// and the items it removed, or `None` when it gave way (a macro: this crate does not name the
/// client's type).
macro_rules! remove_batch {
    ($c:expr, $max:expr) => {
        $c.query_one(
            &format!(
                "SELECT n_scanned, last_id::text, n_removed FROM core.remove_finished('done', 'trawl', 1::int2,
                     '00000000-0000-0000-0000-000000000000', 30 * 86400, {})",
                $max
            ),
            &[],
        )
        .await
        .ok()
        .map(|r| {
            (
                r.get::<_, i32>(0),
                r.get::<_, Option<String>>(1),
                r.get::<_, i32>(2),
            )
        })
    };
}

#[tokio::test]
async fn an_item_whose_late_result_committed_while_a_batch_scanned_stays() {
    // The race: a batch's snapshot is taken before a late result's transaction commits, the
    // batch reaches the item after it committed, locks its newest version (the longer chain)
    // and must judge it by that chain's newest entry, which its snapshot does not hold. The
    // batch is kept scanning by 200,000 older done items another transaction holds (it skips
    // them one by one), the late result's item last in its path. An archived segment whose
    // newest entry is 40 days old makes a judgement that missed the late entry remove the
    // item (a missing entry is judged by the archived segments' newest `at`).
    let app = TestApp::spawn_with(|s| s.retain_days = 30).await;
    let target = old_item(&app, 255, "done", 31).await;
    app.execute(
        "INSERT INTO core.ledger_checkpoints (seq, prev_seq, digest, entries, taken_at)
         VALUES (1, 0, decode(repeat('00', 32), 'hex'), 1, now() - interval '40 days');
         INSERT INTO core.ledger_archived (through_seq, from_seq, digest, entries, last_at)
         VALUES (1, 0, decode(repeat('00', 32), 'hex'), 1, now() - interval '40 days')",
    )
    .await;
    app.execute(&format!(
        "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, payload,
             created_at, chain_len, chain_head)
         SELECT (left('{target}', 19) || '0000-' || lpad(to_hex(g), 12, '0'))::uuid, 'trawl', 1, 'done', 1,
             1, now(), '{{}}', now(), 1, decode(repeat('00', 32), 'hex')
         FROM generate_series(1, 200000) g"
    ))
    .await;
    let holder = app
        .open_transaction(&format!(
            "SELECT count(*) FROM (SELECT 1 FROM core.items WHERE id < '{target}' FOR UPDATE) h"
        ))
        .await;
    let batch = app.db.client().await;
    let late = app
        .open_transaction(&format!(
            "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at,
                 data, prev_hash, hash)
             VALUES ('item', '{target}', 2, 'late_result', 'worker:trawl', now(), '{{}}',
                 decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'));
             UPDATE core.items SET chain_len = 2 WHERE id = '{target}'"
        ))
        .await;
    let removing = async { remove_batch!(batch, 1_000_000) };
    let commit = async {
        // The batch's statement has its snapshot within a moment of starting; its scan of the
        // held items takes far longer.
        while app
            .count("pg_stat_activity WHERE query LIKE '%remove_finished%' AND state = 'active' AND pid <> pg_backend_pid()")
            .await
            == 0
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        late.batch_execute("COMMIT")
            .await
            .expect("the late result commits");
    };
    let (removed, ()) = tokio::join!(removing, commit);
    holder.batch_execute("ROLLBACK").await.expect("released");
    // It locked the target, the only row not held, and removed nothing.
    assert_eq!(removed, Some((1, Some(target.clone()), 0)));
    assert_eq!(
        app.count(&format!("core.items WHERE id = '{target}'"))
            .await,
        1,
        "an item whose newest ledger entry is a moment old was removed"
    );
}

#[tokio::test]
async fn core_remove_finished_refuses_each_null_argument_and_removes_nothing() {
    let app = zero_retention().await;
    done_item(&app).await;
    let c = app.db.client().await;
    let args = [
        "'done'",
        "'trawl'",
        "1::int2",
        "'00000000-0000-0000-0000-000000000000'::uuid",
        "0::float8",
        "100",
    ];
    for null in 0..args.len() {
        let mut called = args;
        called[null] = "NULL";
        let e = c
            .query_one(
                &format!("SELECT * FROM core.remove_finished({})", called.join(", ")),
                &[],
            )
            .await
            .expect_err("a NULL argument is refused");
        assert_eq!(
            e.code().map(|s| s.code()),
            Some("MU002"),
            "argument {null}: {e}"
        );
    }
    assert_eq!(app.count("core.items").await, 1);
}

#[tokio::test]
async fn the_oldest_finished_item_is_read_across_every_group_of_finished_items() {
    let app = TestApp::spawn().await;
    let before = muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc());
    done_item(&app).await;
    let after_first = time::OffsetDateTime::now_utc();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let failed = app.enqueue_and_lease("sextant").await;
    app.fail_with(&failed, "E_BROKEN", "broken", false).await;
    let pool = muster_pg::connect_pool(&app.db.app_url, &muster_pg::PoolSettings::default())
        .expect("pool");
    let logbook = muster_pg::PgLogbook::new(pool);
    let oldest = muster_app::ports::RetentionStore::oldest_finished(&logbook)
        .await
        .expect("the read")
        .expect("an oldest finished item");
    assert!(
        before <= oldest && oldest <= after_first,
        "{oldest} is not the done trawl item's completion ({before} .. {after_first})"
    );
}
