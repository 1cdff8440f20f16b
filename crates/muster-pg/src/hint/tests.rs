use super::*;
use time::macros::datetime;

const T0: OffsetDateTime = datetime!(2026-12-03 12:00 UTC);
const MS: time::Duration = time::Duration::milliseconds(1);

fn place(n: u128) -> Place {
    (T0, Uuid::from_u128(n))
}

fn found(full: bool, firsts: Starts, expired_all_taken: bool) -> Found {
    Found {
        full,
        firsts,
        expired_all_taken,
    }
}

fn recorded(found: Found) -> LeaseHints {
    let hints = LeaseHints::default();
    hints.record(Kind::Trawl, T0, Scan::FROM_START, found);
    hints
}

/// Where a scan at `at` starts after a scan at `at` that started where `hints` said and found
/// `found`.
fn starts_after_rescan(hints: &LeaseHints, at: OffsetDateTime, found: Found) -> Scan {
    let scan = hints.starts(Kind::Trawl, at);
    hints.record(Kind::Trawl, at, scan, found);
    hints.starts(Kind::Trawl, at)
}

/// The expired-lease bound after a scan that took every expired lease it found, then a
/// second scan at `at` that found `second`.
fn expired_bound_after_a_second_scan(
    at: OffsetDateTime,
    second: Found,
) -> Option<Live<OffsetDateTime>> {
    let hints = recorded(found(false, [None; 3], true));
    starts_after_rescan(&hints, at, second).expired
}

#[test]
fn a_kind_without_a_hint_is_scanned_from_the_start() {
    let hints = LeaseHints::default();
    assert_eq!(hints.starts(Kind::Trawl, T0), Scan::FROM_START);
}

#[test]
fn a_full_scan_from_the_start_leaves_each_prioritys_first_place() {
    let hints = recorded(found(true, [None, Some(place(7)), Some(place(9))], false));
    assert_eq!(
        hints.starts(Kind::Trawl, T0 + 5 * MS).queued,
        Some(Live {
            at: [None, Some(place(7)), Some(place(9))],
            since: T0,
        })
    );
}

#[test]
fn a_short_scan_leaves_no_queued_hint() {
    let hints = recorded(found(true, [None, Some(place(7)), None], false));
    assert_eq!(
        starts_after_rescan(&hints, T0, found(false, [None; 3], false)),
        Scan::FROM_START
    );
}

#[test]
fn a_hint_is_not_used_once_its_time_to_live_is_over() {
    let hints = recorded(found(true, [None, Some(place(7)), None], true));
    assert_eq!(hints.starts(Kind::Trawl, T0 + HINT_TTL), Scan::FROM_START);
}

#[test]
fn a_hint_is_not_used_when_the_clock_went_back() {
    let hints = recorded(found(true, [None, Some(place(7)), None], true));
    assert_eq!(hints.starts(Kind::Trawl, T0 - MS), Scan::FROM_START);
}

#[test]
fn a_full_bounded_scan_moves_the_starts_but_keeps_the_hints_age() {
    let hints = recorded(found(true, [None, Some(place(7)), Some(place(9))], false));
    let later = T0 + 50 * MS;
    assert_eq!(
        starts_after_rescan(
            &hints,
            later,
            found(true, [None, Some(place(8)), None], false)
        )
        .queued,
        Some(Live {
            at: [None, Some(place(8)), Some(place(9))],
            since: T0,
        })
    );
}

#[test]
fn a_scan_that_took_every_expired_lease_it_found_bounds_the_next_at_its_time() {
    let hints = recorded(found(false, [None; 3], true));
    assert_eq!(
        hints.starts(Kind::Trawl, T0 + MS).expired,
        Some(Live { at: T0, since: T0 })
    );
}

#[test]
fn a_bounded_scan_that_took_every_expired_lease_moves_the_bound_but_keeps_its_age() {
    let later = T0 + 50 * MS;
    assert_eq!(
        expired_bound_after_a_second_scan(later, found(false, [None; 3], true)),
        Some(Live {
            at: later,
            since: T0
        })
    );
}

#[test]
fn a_scan_that_left_expired_leases_keeps_the_bound_where_it_was() {
    assert_eq!(
        expired_bound_after_a_second_scan(T0 + 50 * MS, found(true, [None; 3], false)),
        Some(Live { at: T0, since: T0 })
    );
}

#[test]
fn a_full_scan_that_found_no_queued_item_leaves_no_queued_hint() {
    let hints = recorded(found(true, [None; 3], false));
    assert_eq!(hints.starts(Kind::Trawl, T0).queued, None);
}

#[test]
fn kinds_keep_hints_of_their_own() {
    let hints = recorded(found(true, [None, Some(place(7)), None], true));
    assert_eq!(hints.starts(Kind::Sextant, T0), Scan::FROM_START);
}
