//! The model check of the lease protocol: every reachable state of bounded configurations,
//! breadth first. See `docs/lease-model.md`.
//!
//! The unique state counts are asserted exactly: a change to the model, to the use cases it
//! mirrors or to the domain rules it calls shows up here, and the new figure has to be looked
//! at (and written into the doc) before it is accepted.

use std::collections::BTreeSet;
use std::time::Instant;

use muster_model::model::{
    ACKNOWLEDGED_IS_APPLIED, ALL_DONE, EXHAUSTED, EXPIRED_LEASE_COMPLETES, FAILED_FOR_GOOD,
    LATE_RESULT_REFUSED, LEASE_LOST_IS_NOT_APPLIED, NO_EFFECT_TWICE, NO_INTERNAL_ERROR,
    NO_TWO_LIVE_LEASES, ONLY_NEWEST_LEASE_CHANGES, PARKED, RELEASED_AFTER_EXPIRY,
    REQUEUED_AND_LEASED_AGAIN, RETRY_REPLAYED, SPOOL_SETTLES,
};
use muster_model::{Config, Flaw, LeaseModel};
use stateright::{Checker, Expectation, Model};

const ALWAYS: [&str; 7] = [
    NO_TWO_LIVE_LEASES,
    NO_EFFECT_TWICE,
    ACKNOWLEDGED_IS_APPLIED,
    LEASE_LOST_IS_NOT_APPLIED,
    ONLY_NEWEST_LEASE_CHANGES,
    SPOOL_SETTLES,
    NO_INTERNAL_ERROR,
];

const SOMETIMES: [&str; 9] = [
    RELEASED_AFTER_EXPIRY,
    RETRY_REPLAYED,
    LATE_RESULT_REFUSED,
    EXPIRED_LEASE_COMPLETES,
    REQUEUED_AND_LEASED_AGAIN,
    PARKED,
    EXHAUSTED,
    FAILED_FOR_GOOD,
    ALL_DONE,
];

/// What one exhaustive check found.
#[derive(Debug)]
struct Verdict {
    unique_states: usize,
    /// `always` properties with a counterexample.
    violated: BTreeSet<&'static str>,
    /// `sometimes` properties with an example.
    reached: BTreeSet<&'static str>,
}

/// Explores every state of `config` breadth first and collects the discoveries. A
/// counterexample is printed, and replayed to check that its last state really breaks the
/// property.
fn check(config: Config) -> Verdict {
    let started = Instant::now();
    let model = LeaseModel::new(config);
    let properties = model.properties();
    let checker = model.checker().spawn_bfs().join();
    assert!(checker.is_done(), "the check must run to the end");
    let mut violated = BTreeSet::new();
    let mut reached = BTreeSet::new();
    for p in &properties {
        let Some(path) = checker.discovery(p.name) else {
            continue;
        };
        match p.expectation {
            Expectation::Always => {
                let last = path.last_state();
                assert!(
                    !(p.condition)(checker.model(), last),
                    "the counterexample of {:?} ends in a state that keeps it",
                    p.name
                );
                println!("counterexample of {:?}:\n{path}", p.name);
                violated.insert(p.name);
            }
            Expectation::Sometimes => {
                reached.insert(p.name);
            }
            Expectation::Eventually => unreachable!("the model has no eventually property"),
        }
    }
    let verdict = Verdict {
        unique_states: checker.unique_state_count(),
        violated,
        reached,
    };
    println!(
        "{config:?}: {} unique states ({} generated, depth {}) in {:.2?}",
        verdict.unique_states,
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    verdict
}

fn set(names: &[&'static str]) -> BTreeSet<&'static str> {
    names.iter().copied().collect()
}

fn all_sometimes_but(unreached: &[&str]) -> BTreeSet<&'static str> {
    SOMETIMES
        .into_iter()
        .filter(|p| !unreached.contains(p))
        .collect()
}

/// The configuration the broken servers are run in: one item, two workers, one expiry, and
/// no symmetry reduction, so that the counterexamples printed read as they happened.
fn small() -> Config {
    Config {
        items: 1,
        max_time: 1,
        max_leases: 2,
        symmetry: false,
        ..Config::default()
    }
}

/// The small configuration's verdict with `flaw` built into the protocol, asserted to violate
/// exactly the properties `violated`.
#[track_caller]
fn check_violates(flaw: Flaw, violated: &[&'static str]) -> Verdict {
    let v = check(Config {
        flaw: Some(flaw),
        ..small()
    });
    assert_eq!(v.violated, set(violated), "{flaw:?}");
    v
}

/// Checks `config`, which must break no property.
fn keeps_every_property(config: Config) -> Verdict {
    let v = check(config);
    assert_eq!(v.violated, BTreeSet::new());
    v
}

#[test]
fn two_items_and_two_workers_keep_every_property_through_two_expiries() {
    let v = keeps_every_property(Config::default());
    assert_eq!(v.reached, set(&SOMETIMES));
    assert_eq!(v.unique_states, 232_444);
}

#[test]
fn two_items_and_three_workers_keep_every_property_through_one_expiry() {
    let v = keeps_every_property(Config {
        workers: 3,
        max_time: 1,
        ..Config::default()
    });
    // Failing an item whose expired lease used the last attempt takes two expiries.
    assert_eq!(v.reached, all_sometimes_but(&[EXHAUSTED]));
    assert_eq!(v.unique_states, 165_611);
}

#[test]
fn with_a_final_grace_the_small_configuration_keeps_every_property_and_still_exhausts_an_item() {
    let v = keeps_every_property(Config {
        max_attempts: 1,
        final_grace: 1,
        max_time: 2,
        ..small()
    });
    assert!(v.reached.contains(EXHAUSTED), "{:?}", v.reached);
}

#[test]
fn the_small_configuration_keeps_every_property_with_the_server_as_built() {
    let v = keeps_every_property(small());
    assert_eq!(v.reached, all_sometimes_but(&[EXHAUSTED]));
    assert_eq!(v.unique_states, 1_758);
}

#[test]
fn without_fencing_a_superseded_lease_is_revived_and_changes_its_item() {
    check_violates(
        Flaw::NoFencing,
        &[NO_TWO_LIVE_LEASES, ONLY_NEWEST_LEASE_CHANGES],
    );
}

#[test]
fn without_outcome_records_a_retried_completion_is_told_its_applied_result_was_lost() {
    let v = check_violates(Flaw::NoOutcomeRecords, &[LEASE_LOST_IS_NOT_APPLIED]);
    // Nothing is ever answered from a record, and a late result is not told from a retry.
    assert!(!v.reached.contains(RETRY_REPLAYED));
    assert!(!v.reached.contains(LATE_RESULT_REFUSED));
}

#[test]
fn trusting_the_fence_alone_applies_a_retried_result_twice() {
    check_violates(
        Flaw::FenceOnly,
        &[NO_EFFECT_TWICE, LEASE_LOST_IS_NOT_APPLIED],
    );
}

#[test]
fn treating_expired_leases_as_lost_throws_away_a_spooled_result_nobody_superseded() {
    let v = check_violates(
        Flaw::ExpiredLeasesAreLost,
        &[
            LEASE_LOST_IS_NOT_APPLIED,
            ONLY_NEWEST_LEASE_CHANGES,
            SPOOL_SETTLES,
        ],
    );
    assert!(!v.reached.contains(EXPIRED_LEASE_COMPLETES));
}

#[test]
fn acknowledging_a_late_result_tells_the_worker_it_was_applied_when_it_was_not() {
    check_violates(Flaw::AcknowledgeLateResults, &[ACKNOWLEDGED_IS_APPLIED]);
}

#[test]
fn every_property_is_listed_once() {
    let names: Vec<&str> = LeaseModel::new(Config::default())
        .properties()
        .iter()
        .map(|p| p.name)
        .collect();
    let expected: Vec<&str> = ALWAYS.into_iter().chain(SOMETIMES).collect();
    assert_eq!(names, expected);
}
