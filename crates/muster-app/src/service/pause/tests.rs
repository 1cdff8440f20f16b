//! Pausing and resuming a kind against mockall ports: no database.

use std::sync::Arc;

use muster_domain::pause::KindPause;
use muster_domain::{Kind, Principal};
use time::OffsetDateTime;
use time::macros::datetime;

use super::super::{Config, Muster, Stores};
use crate::error::AppError;
use crate::ports::{
    MockClock, MockHealthLog, MockIds, MockItemReads, MockJitter, MockLogbook, MockLogbookTx,
    logbook_with,
};
use crate::signal::WorkSignal;

const NOW: OffsetDateTime = datetime!(2026-12-07 12:00:00 UTC);
const EARLIER: OffsetDateTime = datetime!(2026-12-07 11:00:00 UTC);

fn muster_with(logbook: MockLogbook) -> (Muster, WorkSignal) {
    let mut clock = MockClock::new();
    clock.expect_now().return_const(NOW);
    let signal = WorkSignal::new();
    let muster = Muster::new(
        Stores {
            logbook: Arc::new(logbook),
            items: Arc::new(MockItemReads::new()),
            health: Arc::new(MockHealthLog::new()),
        },
        Arc::new(clock),
        Arc::new(MockIds::new()),
        Arc::new(MockJitter::new()),
        signal.clone(),
        Config::default(),
    );
    (muster, signal)
}

/// Trawl paused an hour ago for "first".
fn paused_earlier() -> KindPause {
    let mut k = KindPause::never_paused(Kind::Trawl);
    k.pause("first", Principal::Operator, EARLIER).unwrap();
    k
}

/// A transaction that finds `found` locked and expects a change to be written: the row as
/// the domain left it, and its one entry, `event`.
fn tx_writing(found: KindPause, paused: bool, event: &'static str) -> MockLogbookTx {
    let mut tx = MockLogbookTx::new();
    tx.expect_lock_kind()
        .withf(|k| *k == Kind::Trawl)
        .times(1)
        .returning(move |_| Ok(found.clone()));
    tx.expect_save_kind()
        .withf(move |k| k.paused == paused && k.since == Some(NOW))
        .times(1)
        .returning(|_| Ok(()));
    tx.expect_append_and_commit()
        .withf(move |e| {
            e.len() == 1
                && e[0].entry.event == event
                && e[0].entry.subject_type == "kind"
                && e[0].entry.subject_id == "trawl"
                && e[0].entry.actor == "operator"
        })
        .times(1)
        .returning(|_| Ok(()));
    tx
}

#[tokio::test]
async fn a_pause_locks_the_kind_writes_its_row_and_one_ledger_entry_in_one_transaction() {
    let tx = tx_writing(KindPause::never_paused(Kind::Trawl), true, "paused");
    let (muster, signal) = muster_with(logbook_with(tx));
    let generation = signal.generation(Kind::Trawl);
    let answer = muster
        .set_paused(Principal::Operator, Kind::Trawl, true, Some("bad image"))
        .await
        .unwrap();
    assert_eq!(
        (answer.kind, answer.paused, answer.since),
        (Kind::Trawl, true, Some(NOW))
    );
    assert_eq!(
        signal.generation(Kind::Trawl),
        generation,
        "a pause wakes nobody"
    );
}

#[tokio::test]
async fn pausing_a_paused_kind_writes_nothing_and_answers_the_first_since() {
    let mut tx = MockLogbookTx::new();
    tx.expect_lock_kind().returning(|_| Ok(paused_earlier()));
    // No save, append or commit expected: the transaction is dropped (rolled back).
    let (muster, _) = muster_with(logbook_with(tx));
    let answer = muster
        .set_paused(Principal::Operator, Kind::Trawl, true, Some("second"))
        .await
        .unwrap();
    assert_eq!((answer.paused, answer.since), (true, Some(EARLIER)));
}

#[tokio::test]
async fn a_resume_writes_its_entry_and_wakes_the_kinds_waiting_lease_calls() {
    let tx = tx_writing(paused_earlier(), false, "resumed");
    let (muster, signal) = muster_with(logbook_with(tx));
    let generation = signal.generation(Kind::Trawl);
    let answer = muster
        .set_paused(Principal::Operator, Kind::Trawl, false, None)
        .await
        .unwrap();
    assert_eq!((answer.paused, answer.since), (false, Some(NOW)));
    assert_ne!(signal.generation(Kind::Trawl), generation);
    assert_eq!(
        signal.generation(Kind::Sextant),
        0,
        "only the resumed kind is woken"
    );
}

#[tokio::test]
async fn resuming_a_kind_never_paused_writes_nothing_and_has_no_since() {
    let mut tx = MockLogbookTx::new();
    tx.expect_lock_kind()
        .returning(|k| Ok(KindPause::never_paused(k)));
    let (muster, _) = muster_with(logbook_with(tx));
    let answer = muster
        .set_paused(Principal::Operator, Kind::Trawl, false, None)
        .await
        .unwrap();
    assert_eq!((answer.paused, answer.since), (false, None));
}

#[tokio::test]
async fn only_an_operator_may_pause_or_resume_and_nothing_is_opened_for_the_others() {
    for who in [
        Principal::Conn,
        Principal::Shipkeeper,
        Principal::Worker(Kind::Trawl),
    ] {
        // No transaction expected.
        let (muster, _) = muster_with(MockLogbook::new());
        for paused in [true, false] {
            let e = muster
                .set_paused(who, Kind::Trawl, paused, Some("x"))
                .await
                .unwrap_err();
            assert!(matches!(e, AppError::Forbidden(_)), "{who}: {e:?}");
        }
    }
}

#[tokio::test]
async fn a_pause_needs_a_reason_of_1_to_1000_bytes_and_a_resume_takes_one_if_given() {
    let long = "x".repeat(1001);
    for (paused, reason) in [
        (true, None),
        (true, Some("")),
        (true, Some("   ")),
        (true, Some(long.as_str())),
        (true, Some("nul \0")),
        (false, Some("")),
        (false, Some(long.as_str())),
    ] {
        let (muster, _) = muster_with(MockLogbook::new());
        let e = muster
            .set_paused(Principal::Operator, Kind::Trawl, paused, reason)
            .await
            .unwrap_err();
        assert!(matches!(e, AppError::BadRequest(_)), "{reason:?}: {e:?}");
    }
}
