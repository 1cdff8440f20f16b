//! The view rendered into ratatui's test backend, and what it shows.

use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::model::Model;
use super::model::tests::{connected, ev};
use super::view;

/// The screen as lines, trailing blanks cut.
fn screen(model: &Model, now: Instant) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(160, 16)).expect("a test terminal");
    terminal
        .draw(|frame| view::draw(frame, model, now))
        .expect("drawn");
    let buffer = terminal.backend().buffer();
    (0..buffer.area.height)
        .map(|y| {
            let line: String = (0..buffer.area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect();
            line.trim_end().to_owned()
        })
        .collect()
}

/// A model that has seen a snapshot, health, and 20 trawl transitions in its first 2 s.
fn watched(t0: Instant) -> Model {
    let mut m = connected("http://127.0.0.1:8080", t0);
    m.apply(
        &ev(
            "queues",
            None,
            r#"{"at": "2026-12-04T10:00:00Z", "depths": [
                {"kind": "trawl", "priority": "normal", "state": "queued", "count": 12},
                {"kind": "trawl", "priority": "urgent", "state": "queued", "count": 3},
                {"kind": "trawl", "priority": "normal", "state": "leased", "count": 2},
                {"kind": "sextant", "priority": "normal", "state": "needs_subtool", "count": 1},
                {"kind": "sextant", "priority": "normal", "state": "failed", "count": 4},
                {"kind": "sextant", "priority": "normal", "state": "done", "count": 1200}]}"#,
        ),
        t0,
    );
    m.apply(
        &ev(
            "health",
            None,
            r#"{"kind": "trawl", "digest": "sha256:ab", "ready": true, "restarts": 0,
                "phase": "Running", "events": [], "at": "x"}"#,
        ),
        t0,
    );
    m.apply(
        &ev(
            "health",
            None,
            r#"{"kind": "sextant", "digest": null, "ready": false, "restarts": 7,
                "phase": "CrashLoopBackOff", "events": [{"kind": "sextant", "reason": "BackOff",
                "message": "back-off restarting failed container"}], "at": "x"}"#,
        ),
        t0,
    );
    for seq in 1..=20u64 {
        m.apply(
            &ev(
                "transition",
                Some(&seq.to_string()),
                &format!(r#"{{"seq": {seq}, "subject": "item", "id": "i", "kind": "trawl", "from": "queued", "to": "leased"}}"#),
            ),
            t0 + Duration::from_millis(100 * seq - 100),
        );
    }
    m
}

/// The screen `at` after the start of a [`watched`] model that `change` altered first.
fn screen_at(at: Duration, change: impl FnOnce(&mut Model)) -> Vec<String> {
    let t0 = Instant::now();
    let mut m = watched(t0);
    change(&mut m);
    screen(&m, t0 + at)
}

#[test]
fn a_kinds_oldest_lease_age_is_shown_from_the_metrics() {
    let lines = screen_at(Duration::from_millis(2_500), |m| {
        m.apply_metrics("muster_oldest_lease_age_seconds{kind=\"trawl\"} 125\n");
    });
    assert_eq!(
        lines[3],
        "trawl            15       2       0       0        0         0    8.0     2m05s yes   Running                 0"
    );
}

#[test]
fn the_header_shows_the_link_the_streams_age_the_sequence_and_the_rate() {
    let lines = screen_at(Duration::from_millis(2_500), |_| {});
    assert_eq!(lines[0], "Muster live feed from http://127.0.0.1:8080");
    assert_eq!(
        lines[1],
        "live · connected 2.5 s · last event 0.6 s ago · ledger seq 20 · 8.0 transitions/s · 0 reconnects"
    );
}

#[test]
fn a_row_per_kind_shows_its_depths_rate_and_health() {
    let lines = screen_at(Duration::from_millis(2_500), |_| {});
    assert_eq!(
        lines[2],
        "KIND         QUEUED  LEASED  PARKED  FAILED     DONE CANCELLED   TR/S LEASE AGE READY PHASE            RESTARTS NEWEST HEALTH EVENT"
    );
    assert_eq!(
        lines[3],
        "trawl            15       2       0       0        0         0    8.0         - yes   Running                 0"
    );
    assert_eq!(
        lines[4],
        "sextant           0       0       1       4     1200         0    0.0         - NO    CrashLoopBackOff        7 BackOff: back-off restarting failed container"
    );
    assert_eq!(
        lines[5],
        "assay             0       0       0       0        0         0    0.0         - -"
    );
}

#[test]
fn the_footer_counts_finished_items_and_says_when_the_depths_are_from() {
    let lines = screen_at(Duration::from_millis(2_500), |_| {});
    assert_eq!(
        lines[15],
        "1204/1222 items finished · depths at 2026-12-04T10:00:00Z · q quits"
    );
}

#[test]
fn a_lost_stream_shows_that_it_is_reconnecting_and_why() {
    let lines = screen_at(Duration::from_secs(3), |m| {
        m.disconnected("the stream ended")
    });
    assert_eq!(
        lines[1],
        "reconnecting (the stream ended) · not connected · last event 1.1 s ago · ledger seq 20 · 6.7 transitions/s · 1 reconnects"
    );
}

#[test]
fn a_stream_quiet_for_twenty_seconds_is_shown_stalled() {
    let lines = screen_at(Duration::from_secs(22), |_| {});
    assert!(
        lines[1].starts_with("STALLED · connected 22.0 s · last event 20.1 s ago"),
        "{}",
        lines[1]
    );
}
