//! `muster ledger-prune --archive FILE`: the schema owner removes an archived segment from
//! Logbook; item reads, the feed's resume and `ledger-verify` keep working across the boundary;
//! bad input removes nothing and fails in one line.

use std::path::PathBuf;
use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;

use crate::harness::{TempDir, TestApp};
use crate::ledger_checkpoints::muster;
use crate::roles::ledger_verify;

/// A checkpoint of everything in the ledger now, taken at once; its sequence.
async fn checkpoint(app: &TestApp) -> i64 {
    muster_pg::take_checkpoint(&app.db.pool(), None)
        .await
        .expect("a checkpoint")
        .expect("something new to take a checkpoint of")
        .seq as i64
}

/// `muster ledger-archive` of the ledger after checkpoint `from` up to checkpoint `until`.
fn archive(app: &TestApp, dir: &TempDir, name: &str, from: i64, until: i64) -> PathBuf {
    let file = dir.path().join(name);
    let to = file.to_str().expect("utf-8 path");
    let (code, _, stderr) = muster(
        Some(&app.db.url),
        &[
            "ledger-archive",
            "--to",
            to,
            "--from",
            &from.to_string(),
            "--until",
            &until.to_string(),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    file
}

/// `muster ledger-prune --archive FILE` as the database `url`'s role.
fn prune(url: &str, file: &std::path::Path) -> (Option<i32>, String, String) {
    muster(
        Some(url),
        &[
            "ledger-prune",
            "--archive",
            file.to_str().expect("utf-8 path"),
        ],
    )
}

/// The world before a prune: a done item removed by retention (its id), a queued item that
/// goes on after the boundary (its id), a paused kind (`trawl`), a checkpoint over them and an
/// archive up to it.
struct Archived {
    app: TestApp,
    dir: TempDir,
    file: PathBuf,
    boundary: i64,
    removed: String,
    live: String,
}

async fn archived() -> Archived {
    let app = TestApp::spawn_with(|s| s.retain_days = 0).await;
    let lease = app.enqueue_and_lease("trawl").await;
    let r = app.complete(&lease, json!({"result": {}})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let removed = lease["item"]["id"].as_str().unwrap().to_owned();
    let live = app.enqueue("sextant", "normal", json!({})).await;
    pause_trawl(&app, true).await;
    muster::retention_pass(&app.settings)
        .await
        .expect("a retention pass");
    let boundary = checkpoint(&app).await;
    let dir = TempDir::new("muster-prune");
    let file = archive(&app, &dir, "ledger.jsonl", 0, boundary);
    Archived {
        app,
        dir,
        file,
        boundary,
        removed,
        live,
    }
}

/// `PUT /v1/kinds/trawl/paused` as the operator.
async fn pause_trawl(app: &TestApp, paused: bool) {
    let r = app
        .put(
            "/v1/kinds/trawl/paused",
            "operator",
            json!({"paused": paused, "reason": "nets mended"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

/// [`archived`], pruned, with the live item leased and completed and `trawl` resumed after the
/// boundary (beside one more sextant item enqueued: a chain that begins after it).
async fn pruned() -> Archived {
    let a = archived().await;
    let (code, stdout, stderr) = prune(&a.app.db.url, &a.file);
    assert_eq!(code, Some(0), "{stdout} {stderr}");
    pause_trawl(&a.app, false).await;
    let lease = a.app.enqueue_and_lease("sextant").await;
    assert_eq!(lease["item"]["id"].as_str(), Some(a.live.as_str()));
    let r = a.app.complete(&lease, json!({"result": {}})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    a
}

/// How many ledger entries Logbook holds.
async fn entries(app: &TestApp) -> i64 {
    app.count("core.ledger").await
}

#[tokio::test]
async fn a_prune_removes_every_entry_up_to_the_archives_checkpoint_and_records_the_boundary() {
    let a = archived().await;
    let (code, stdout, stderr) = prune(&a.app.db.url, &a.file);
    let digest = a
        .app
        .scalar_text(&format!(
            "SELECT encode(digest, 'hex') FROM core.ledger_checkpoints WHERE seq = {}",
            a.boundary
        ))
        .await;
    assert_eq!(
        (code, stdout),
        (
            Some(0),
            format!(
                "{n} ledger entries after checkpoint 0 up to checkpoint {n} removed from Logbook; archived boundary {n}:{digest}",
                n = a.boundary
            )
        ),
        "{stderr}"
    );
    assert_eq!(entries(&a.app).await, 0);
    assert_eq!(
        a.app
            .scalar_text(
                "SELECT through_seq || ':' || encode(digest, 'hex') FROM core.ledger_archived"
            )
            .await,
        format!("{}:{digest}", a.boundary)
    );
}

#[tokio::test]
async fn the_runtime_role_cannot_prune() {
    let a = archived().await;
    let (code, _, stderr) = prune(&a.app.db.app_url, &a.file);
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with("ledger-prune: ") && !stderr.contains('\n'),
        "{stderr}"
    );
    assert_eq!(entries(&a.app).await, a.boundary);
}

#[tokio::test]
async fn an_item_whose_entries_were_archived_is_gone() {
    let a = pruned().await;
    a.app
        .get(&format!("/v1/items/{}", a.removed), "operator")
        .await
        .assert_error(StatusCode::GONE, "E_GONE");
}

#[tokio::test]
async fn an_id_minted_after_the_archived_entries_is_still_not_found() {
    let a = pruned().await;
    let young = uuid::Uuid::now_v7();
    a.app
        .get(&format!("/v1/items/{young}"), "operator")
        .await
        .assert_error(StatusCode::NOT_FOUND, "E_NOT_FOUND");
}

#[tokio::test]
async fn cancelling_an_item_whose_entries_were_archived_is_gone() {
    let a = pruned().await;
    a.app
        .post(
            &format!("/v1/items/{}/cancel", a.removed),
            "operator",
            json!({"reason": "late"}),
        )
        .await
        .assert_error(StatusCode::GONE, "E_GONE");
}

#[tokio::test]
async fn retrying_an_item_whose_entries_were_archived_is_gone() {
    let a = pruned().await;
    a.app
        .retry(&a.removed, "operator")
        .await
        .assert_error(StatusCode::GONE, "E_GONE");
}

#[tokio::test]
async fn a_live_item_goes_on_past_the_boundary_and_reads_as_done() {
    let a = pruned().await;
    assert_eq!(a.app.item(&a.live).await["state"], json!("done"));
}

#[tokio::test]
async fn ledger_verify_passes_across_the_boundary() {
    let a = pruned().await;
    checkpoint(&a.app).await;
    let (ok, stdout, stderr) = ledger_verify(&a.app, &[]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with("ledger verified 3 subjects, 4 entries, 1 checkpoints"),
        "{stdout}"
    );
}

#[tokio::test]
async fn ledger_verify_since_the_boundary_walks_a_chain_from_its_anchor() {
    let a = pruned().await;
    let (ok, stdout, stderr) = ledger_verify(&a.app, &["--since", &a.boundary.to_string()]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "ledger verified since checkpoint {}: 3 subjects, 4 entries",
            a.boundary
        )),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_chain_whose_first_entry_after_the_boundary_does_not_link_to_its_anchor_fails() {
    let a = pruned().await;
    a.app
        .execute(&format!(
            "ALTER TABLE core.ledger_anchors DISABLE TRIGGER USER;
             UPDATE core.ledger_anchors SET hash = decode(repeat('ab', 32), 'hex')
             WHERE subject_id = '{}';
             ALTER TABLE core.ledger_anchors ENABLE TRIGGER USER",
            a.live
        ))
        .await;
    let (ok, _, stderr) = ledger_verify(&a.app, &[]);
    assert!(!ok && stderr.contains(&a.live), "{stderr}");
}

#[tokio::test]
async fn a_feed_resume_from_inside_the_archived_range_is_reset() {
    let a = pruned().await;
    let mut feed = a.app.events("operator", Some("1")).await;
    let reset = feed
        .next_named("reset", Duration::from_secs(5))
        .await
        .expect("a reset event");
    assert_eq!(
        reset.data["reason"],
        json!("event id 1 is older than the retained window; reload /v1/queues")
    );
}

/// Runs a prune of `file` that must be refused: its stderr, after checking the exit code, the
/// one line, and that the ledger still holds `held` entries.
async fn refused(app: &TestApp, file: &std::path::Path, held: i64) -> String {
    let (code, _, stderr) = prune(&app.db.url, file);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stderr.contains('\n'), "{stderr}");
    assert_eq!(entries(app).await, held);
    assert_eq!(app.count("core.ledger_archived").await, 0);
    stderr
}

#[tokio::test]
async fn a_foreign_file_is_refused_and_nothing_removed() {
    let a = archived().await;
    let file = a.dir.write("foreign.jsonl", "{\"hello\": \"world\"}\n");
    let stderr = refused(&a.app, &file, a.boundary).await;
    assert!(
        stderr.starts_with("ledger-prune: nothing removed: not a ledger archive"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_file_with_a_line_over_64_mib_is_refused_without_reading_it_whole() {
    let a = archived().await;
    let file = a.dir.path().join("huge.jsonl");
    std::fs::write(&file, vec![b'a'; 64 * 1024 * 1024 + 1]).expect("write");
    let stderr = refused(&a.app, &file, a.boundary).await;
    assert_eq!(
        stderr,
        format!(
            "ledger-prune: nothing removed: line 1 of {} is longer than 64 MiB: not a ledger archive",
            file.display()
        )
    );
}

#[tokio::test]
async fn a_truncated_file_is_refused_and_nothing_removed() {
    let a = archived().await;
    let text = std::fs::read_to_string(&a.file).expect("read");
    let cut: Vec<&str> = text.lines().collect();
    let file = a
        .dir
        .write("cut.jsonl", &(cut[..cut.len() - 1].join("\n") + "\n"));
    let stderr = refused(&a.app, &file, a.boundary).await;
    assert!(
        stderr.starts_with("ledger-prune: nothing removed: the archive is truncated"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_archive_whose_checkpoint_is_not_in_logbook_is_refused_and_nothing_removed() {
    let a = archived().await;
    let other = TestApp::spawn().await;
    other.enqueue("trawl", "normal", json!({})).await;
    let held = entries(&other).await;
    let stderr = refused(&other, &a.file, held).await;
    assert_eq!(
        stderr,
        format!(
            "ledger-prune: ledger: nothing removed: checkpoint {} of the archive is not in Logbook",
            a.boundary
        )
    );
}

#[tokio::test]
async fn an_archive_whose_entries_differ_from_logbooks_is_refused_and_nothing_removed() {
    let a = archived().await;
    a.app
        .execute(&format!(
            "ALTER TABLE core.ledger DISABLE TRIGGER USER;
             UPDATE core.ledger SET data = '{{\"forged\": true}}' WHERE subject_id = '{}' AND subject_seq = 1;
             ALTER TABLE core.ledger ENABLE TRIGGER USER",
            a.live
        ))
        .await;
    let stderr = refused(&a.app, &a.file, a.boundary).await;
    assert!(
        stderr.starts_with(&format!(
            "ledger-prune: ledger: nothing removed: Logbook's entries after checkpoint 0 up to {} do not match the archive: ",
            a.boundary
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_archive_that_does_not_start_at_the_boundary_is_refused_and_nothing_removed() {
    let a = archived().await;
    a.app.enqueue("trawl", "normal", json!({})).await;
    let later = checkpoint(&a.app).await;
    let file = archive(&a.app, &a.dir, "later.jsonl", a.boundary, later);
    let stderr = refused(&a.app, &file, later).await;
    assert!(
        stderr.starts_with(&format!(
            "ledger-prune: ledger: nothing removed: the archive starts after checkpoint {}:",
            a.boundary
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn ledger_verify_since_a_checkpoint_inside_the_archived_range_fails_in_one_line() {
    let a = archived().await;
    a.app.enqueue("trawl", "normal", json!({})).await;
    let later = checkpoint(&a.app).await;
    let file = archive(&a.app, &a.dir, "all.jsonl", 0, later);
    let (code, _, stderr) = prune(&a.app.db.url, &file);
    assert_eq!(code, Some(0), "{stderr}");
    let (ok, _, stderr) = ledger_verify(&a.app, &["--since", &a.boundary.to_string()]);
    assert_eq!(
        (ok, stderr),
        (
            false,
            format!(
                "ledger-verify: ledger: checkpoint {} lies in the archived segment (Logbook's ledger is archived up to checkpoint {later}): verify --since {later} here, and what came before with --archive",
                a.boundary
            )
        )
    );
}

#[tokio::test]
async fn a_prune_run_again_after_it_ended_removes_nothing_more() {
    let a = pruned().await;
    let held = entries(&a.app).await;
    let (code, stdout, stderr) = prune(&a.app.db.url, &a.file);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "0 ledger entries after checkpoint 0 up to checkpoint {} removed from Logbook (already pruned)",
            a.boundary
        )),
        "{stdout}"
    );
    assert_eq!(entries(&a.app).await, held);
}

#[tokio::test]
async fn archiving_from_inside_the_archived_range_fails_in_one_line_and_writes_no_file() {
    let a = pruned().await;
    let later = checkpoint(&a.app).await;
    let file = a.dir.path().join("again.jsonl");
    let (code, _, stderr) = muster(
        Some(&a.app.db.url),
        &[
            "ledger-archive",
            "--to",
            file.to_str().expect("utf-8 path"),
            "--until",
            &later.to_string(),
        ],
    );
    assert_eq!(
        (code, stderr, file.exists()),
        (
            Some(1),
            format!(
                "ledger-archive: ledger: the entries up to checkpoint {b} are archived out of Logbook already: archive from there (--from {b})",
                b = a.boundary
            ),
            false
        )
    );
}

/// [`archived`], with a prune of its file stopped after its first batch of one entry: the
/// segment is recorded, entry 1 deleted, the rest of the segment still in Logbook.
async fn stopped() -> Archived {
    let a = archived().await;
    a.app
        .execute(
            "CREATE FUNCTION public.stop_prune() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF OLD.seq > 1 THEN RAISE EXCEPTION 'prune stopped'; END IF;
                 RETURN OLD;
             END $$;
             CREATE TRIGGER stop_prune BEFORE DELETE ON core.ledger
                 FOR EACH ROW EXECUTE FUNCTION public.stop_prune()",
        )
        .await;
    let (header, n) = muster::verify_archive(&a.file).expect("the archive verifies");
    let run = muster_pg::prune_archive(&a.app.db.pool(), &header, n, 1).await;
    assert!(run.is_err(), "{run:?}");
    a.app
        .execute("DROP TRIGGER stop_prune ON core.ledger; DROP FUNCTION public.stop_prune()")
        .await;
    assert_eq!(entries(&a.app).await, a.boundary - 1);
    a
}

#[tokio::test]
async fn the_next_segment_is_refused_while_a_stopped_prune_left_entries_below_the_boundary() {
    let a = stopped().await;
    a.app.enqueue("trawl", "normal", json!({})).await;
    let later = checkpoint(&a.app).await;
    let file = archive(&a.app, &a.dir, "later.jsonl", a.boundary, later);
    let held = entries(&a.app).await;
    let (code, _, stderr) = prune(&a.app.db.url, &file);
    assert_eq!(
        (code, stderr),
        (
            Some(1),
            format!(
                "ledger-prune: ledger: nothing removed: Logbook still holds entries up to checkpoint {b}: finish the previous prune first (muster ledger-prune --archive with the archive up to checkpoint {b})",
                b = a.boundary
            )
        )
    );
    assert_eq!(entries(&a.app).await, held);
}

#[tokio::test]
async fn a_stopped_prune_run_again_removes_the_rest_of_its_segment() {
    let a = stopped().await;
    let (code, stdout, stderr) = prune(&a.app.db.url, &a.file);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "{} ledger entries after checkpoint 0 up to checkpoint {} removed from Logbook (a prune stopped before its end, taken up again)",
            a.boundary - 1,
            a.boundary
        )),
        "{stdout}"
    );
    assert_eq!(entries(&a.app).await, 0);
}

#[tokio::test]
async fn the_next_segment_prunes_once_the_stopped_prune_was_finished() {
    let a = stopped().await;
    a.app.enqueue("trawl", "normal", json!({})).await;
    let later = checkpoint(&a.app).await;
    let file = archive(&a.app, &a.dir, "later.jsonl", a.boundary, later);
    let (code, _, stderr) = prune(&a.app.db.url, &a.file);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = prune(&a.app.db.url, &file);
    assert_eq!((code, entries(&a.app).await), (Some(0), 0), "{stderr}");
}

#[tokio::test]
async fn ledger_verify_passes_while_a_prune_has_deleted_part_of_its_segment() {
    let a = stopped().await;
    let (ok, _, stderr) = ledger_verify(&a.app, &[]);
    assert!(ok, "{stderr}");
}

#[tokio::test]
async fn an_item_whose_whole_chain_was_archived_fails_verification_once_its_recorded_head_changes()
{
    let a = archived().await;
    let (code, _, stderr) = prune(&a.app.db.url, &a.file);
    assert_eq!(code, Some(0), "{stderr}");
    a.app
        .execute(&format!(
            "UPDATE core.items SET chain_head = decode(repeat('ab', 32), 'hex') WHERE id = '{}'",
            a.live
        ))
        .await;
    let (ok, _, stderr) = ledger_verify(&a.app, &[]);
    assert!(!ok && stderr.contains(&a.live), "{stderr}");
}

#[tokio::test]
async fn a_prune_checks_its_segment_past_the_pools_statement_timeout() {
    let a = archived().await;
    a.app
        .execute(
            "CREATE FUNCTION public.slow_record() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(0.6); RETURN NEW; END $$;
             CREATE TRIGGER slow_record BEFORE INSERT ON core.ledger_archived
                 FOR EACH ROW EXECUTE FUNCTION public.slow_record()",
        )
        .await;
    let pool = muster_pg::connect_pool(
        &a.app.db.url,
        &muster_pg::PoolSettings {
            statement_timeout: Duration::from_millis(300),
            ..muster_pg::PoolSettings::default()
        },
    )
    .expect("a pool");
    let (header, n) = muster::verify_archive(&a.file).expect("the archive verifies");
    let pruned = muster_pg::prune_archive(&pool, &header, n, muster_pg::PRUNE_BATCH)
        .await
        .expect("a prune whose checks outlast the pool's statement_timeout");
    assert_eq!(pruned.deleted, a.boundary as u64);
}

#[tokio::test]
async fn a_finished_item_whose_newest_entry_was_archived_stays_until_the_archive_is_older_than_the_period()
 {
    let app = TestApp::spawn().await;
    let lease = app.enqueue_and_lease("trawl").await;
    let id = lease["item"]["id"].as_str().unwrap().to_owned();
    // The id is older than the period by the time the item finishes; its last entry is not.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let r = app.complete(&lease, json!({"result": {}})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let boundary = checkpoint(&app).await;
    let dir = TempDir::new("muster-prune");
    let file = archive(&app, &dir, "ledger.jsonl", 0, boundary);
    let (code, _, stderr) = prune(&app.db.url, &file);
    assert_eq!(code, Some(0), "{stderr}");
    let removed = app
        .scalar_i64(&format!(
            "SELECT r.n_removed::bigint FROM core.items AS i,
                 core.remove_finished(i.state, i.kind, i.priority,
                                      '00000000-0000-0000-0000-000000000000', 8, 100) AS r
             WHERE i.id = '{id}'"
        ))
        .await;
    assert_eq!(
        (
            removed,
            app.count(&format!("core.items WHERE id = '{id}'")).await
        ),
        (0, 1)
    );
}

#[tokio::test]
async fn of_two_prunes_of_one_segment_at_once_the_second_is_told_another_recorded_it() {
    let a = archived().await;
    // Both prunes check the segment before either records it.
    a.app
        .execute(
            "CREATE FUNCTION public.slow_record() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$;
             CREATE TRIGGER slow_record BEFORE INSERT ON core.ledger_archived
                 FOR EACH ROW EXECUTE FUNCTION public.slow_record()",
        )
        .await;
    let (header, n) = muster::verify_archive(&a.file).expect("the archive verifies");
    let pool = a.app.db.pool();
    let run = || muster_pg::prune_archive(&pool, &header, n, muster_pg::PRUNE_BATCH);
    let (one, two) = tokio::join!(run(), run());
    let mut errors: Vec<String> = [one, two]
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    errors.sort();
    assert_eq!(
        (errors, entries(&a.app).await),
        (
            vec![
                "ledger: nothing removed: another prune recorded this segment meanwhile".to_owned()
            ],
            0
        )
    );
}
