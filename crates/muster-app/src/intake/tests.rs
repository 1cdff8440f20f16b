//! The intake's layer order against mockall ports: spam is refused before any transaction.

use super::*;
use crate::ports::{MockClock, MockIds, MockIntakeLog, MockLogbook, MockLogbookTx};
use time::macros::datetime;
use uuid::Uuid;

const NOW: OffsetDateTime = datetime!(2026-12-02 12:00:00 UTC);
const KEY: [u8; 32] = [7; 32];

/// A logbook that hands out the key once and must never open a transaction.
fn no_transactions() -> (MockLogbook, MockIntakeLog) {
    let mut lb = MockLogbook::new();
    let mut log = MockIntakeLog::new();
    log.expect_pow_key().times(1).returning(|_| Ok(KEY));
    lb.expect_begin().never();
    (lb, log)
}

/// A logbook that hands out the key once and opens exactly one transaction, `tx`.
fn one_transaction(tx: MockLogbookTx) -> (MockLogbook, MockIntakeLog) {
    let lb = crate::ports::logbook_with(tx);
    let mut log = MockIntakeLog::new();
    log.expect_pow_key().times(1).returning(|_| Ok(KEY));
    (lb, log)
}

fn intake((lb, log): (MockLogbook, MockIntakeLog)) -> Intake {
    let mut clock = MockClock::new();
    clock.expect_now().return_const(NOW);
    let mut ids = MockIds::new();
    ids.expect_edit_id()
        .returning(|| EditId(Uuid::from_u128(9)));
    ids.expect_random32().return_const([1u8; 32]);
    let ownership = Ownership::default();
    ownership.set(
        OwnershipMap::from_json(
            r#"{"version": 1, "targets": {"docs/intro": {"owner": "alice", "title": "Intro"}}}"#,
        )
        .unwrap(),
    );
    Intake::new(IntakeParts {
        logbook: Arc::new(lb),
        records: Arc::new(log),
        clock: Arc::new(clock),
        ids: Arc::new(ids),
        signal: WorkSignal::new(),
        settings: IntakeSettings {
            difficulty: 4,
            daily_limit: 10,
        },
        ownership,
    })
}

fn solved(i: &Intake) -> (String, String) {
    let c = spam::pow::issue(&ChallengeKey::from_bytes(KEY), NOW, 4, [3; 16]);
    let nonce = spam::solve(&c.token, 4, 1_000_000).unwrap();
    let _ = i;
    (c.token, nonce)
}

fn submission(challenge: String, nonce: String) -> Submission {
    Submission {
        target: "docs/intro".into(),
        body: "<b>better</b> wording".into(),
        website: String::new(),
        challenge,
        nonce,
    }
}

/// A submission of the solved challenge.
fn solved_submission(i: &Intake) -> Submission {
    let (token, nonce) = solved(i);
    submission(token, nonce)
}

/// `s` with the honeypot field filled in, as a bot fills it.
fn honeypot(mut s: Submission) -> Submission {
    s.website = "http://spam.example".into();
    s
}

fn honeypot_hits(i: &Intake) -> u64 {
    i.stats()
        .honeypot
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// A transaction that salts the day and counts the submission once: under the daily cap
/// (`under_cap`) or over it.
fn counting(under_cap: bool) -> MockLogbookTx {
    let mut tx = MockLogbookTx::new();
    tx.expect_day_salt().times(1).returning(|_, c| Ok(c));
    tx.expect_count_submission()
        .times(1)
        .returning(move |_, _, _| Ok(under_cap));
    tx
}

/// Conn submits `s` from a client IP.
async fn conn_submits(i: &Intake, s: Submission) -> Result<Submitted, AppError> {
    i.submit(Principal::Conn, Some("203.0.113.9"), s).await
}

#[tokio::test]
async fn a_honeypot_with_a_wrong_proof_of_work_gets_the_same_e_pow_without_a_transaction() {
    let i = intake(no_transactions());
    let (token, _) = solved(&i);
    let s = honeypot(submission(token, "0".into()));
    let r = conn_submits(&i, s).await;
    assert!(matches!(r.unwrap_err(), AppError::Pow(_)));
    assert_eq!(honeypot_hits(&i), 0);
}

#[tokio::test]
async fn a_honeypot_with_a_valid_proof_of_work_spends_and_counts_and_stores_nothing() {
    let mut tx = counting(true);
    tx.expect_spend_challenge()
        .times(1)
        .returning(|_, _| Ok(true));
    tx.expect_insert_edit().never();
    tx.expect_append().never();
    tx.expect_commit().times(1).returning(|| Ok(()));
    let i = intake(one_transaction(tx));
    let s = honeypot(solved_submission(&i));
    let r = conn_submits(&i, s).await.unwrap();
    assert_eq!(r.state, EditState::PendingApproval);
    assert_eq!(honeypot_hits(&i), 1);
}

#[tokio::test]
async fn a_honeypot_over_the_daily_cap_gets_the_same_429() {
    let mut tx = counting(false);
    tx.expect_spend_challenge().never();
    tx.expect_commit().never();
    let i = intake(one_transaction(tx));
    let s = honeypot(solved_submission(&i));
    let r = conn_submits(&i, s).await;
    assert!(matches!(r.unwrap_err(), AppError::RateLimited { .. }));
}

#[tokio::test]
async fn a_wrong_proof_of_work_is_refused_without_a_transaction() {
    let i = intake(no_transactions());
    let (token, _) = solved(&i);
    let r = conn_submits(&i, submission(token, "0".into())).await;
    assert!(matches!(r.unwrap_err(), AppError::Pow(_)));
}

#[tokio::test]
async fn a_tampered_challenge_is_refused_without_a_transaction() {
    let i = intake(no_transactions());
    let (mut token, nonce) = solved(&i);
    token.replace_range(5..6, if &token[5..6] == "0" { "1" } else { "0" });
    let r = conn_submits(&i, submission(token, nonce)).await;
    assert!(matches!(r.unwrap_err(), AppError::Pow(_)));
}

#[tokio::test]
async fn an_unknown_target_is_refused_without_a_transaction() {
    let i = intake(no_transactions());
    let mut s = solved_submission(&i);
    s.target = "docs/nowhere".into();
    assert!(matches!(
        conn_submits(&i, s).await.unwrap_err(),
        AppError::Target(_)
    ));
}

#[tokio::test]
async fn a_missing_or_unparsable_client_ip_is_a_bad_request() {
    let mut lb = MockLogbook::new();
    lb.expect_begin().never();
    let i = intake((lb, MockIntakeLog::new()));
    for ip in [None, Some("10.0.0.1:80"), Some("")] {
        let r = i
            .submit(Principal::Conn, ip, submission("x".into(), "1".into()))
            .await;
        assert!(matches!(r.unwrap_err(), AppError::BadRequest(_)), "{ip:?}");
    }
}

#[tokio::test]
async fn only_conn_submits() {
    let i = intake((MockLogbook::new(), MockIntakeLog::new()));
    let r = i
        .submit(
            Principal::Operator,
            Some("203.0.113.9"),
            submission("x".into(), "1".into()),
        )
        .await;
    assert!(matches!(r.unwrap_err(), AppError::Forbidden(_)));
}

#[test]
fn the_daily_cap_resets_at_the_next_utc_midnight() {
    assert_eq!(until_midnight(datetime!(2026-12-02 23:59:00 UTC)), 60);
}
