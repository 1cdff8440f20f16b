use muster_devdb::StopMode;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;

use super::finish::merge;
use super::summary::slowest;
use super::{
    FAULT_WINDOW, Fault, fault_order, network_scenarios, parse_options, scenarios, thresholds,
};

#[test]
fn fault_thresholds_rise_inside_the_window_and_repeat_per_seed() {
    let mut a = StdRng::seed_from_u64(3);
    let marks = thresholds(&mut a, 6);
    assert_eq!(marks.len(), 6);
    assert!(marks.windows(2).all(|w| w[0] < w[1]), "{marks:?}");
    assert!(
        marks
            .iter()
            .all(|m| (FAULT_WINDOW.0..FAULT_WINDOW.1).contains(m))
    );
    let mut b = StdRng::seed_from_u64(3);
    assert_eq!(thresholds(&mut b, 6), marks);
}

#[test]
fn the_short_run_injects_one_fault_of_each_kind_on_two_replicas() {
    let short = scenarios(true, None);
    assert_eq!(short.len(), 1);
    assert_eq!((short[0].roots, short[0].replicas), (300, 2));
    assert_eq!(
        short[0].faults,
        vec![
            Fault::KillMuster,
            Fault::PgRestart(StopMode::Fast),
            Fault::PgRestart(StopMode::Immediate),
            Fault::KillSim,
            Fault::LoseReplica,
            Fault::Storm,
        ]
    );
}

#[test]
fn the_full_run_has_each_fault_alone_then_all_together_on_5000_roots() {
    let full = scenarios(false, None);
    let names: Vec<&str> = full.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "muster-kill",
            "postgres-restart",
            "worker-kill",
            "replica-loss",
            "all-together"
        ]
    );
    assert_eq!(full[4].roots, 5_000);
    assert!(
        full.iter()
            .filter(|s| s.faults.contains(&Fault::LoseReplica))
            .all(|s| s.replicas == 2)
    );
}

#[test]
fn the_short_network_run_has_every_network_fault_on_two_replicas() {
    let short = network_scenarios(true, None);
    assert_eq!(short.len(), 1);
    assert_eq!((short[0].roots, short[0].replicas), (300, 2));
    assert_eq!(
        short[0].faults,
        vec![
            Fault::CutFromLogbook,
            Fault::CutFleet,
            Fault::OneWay,
            Fault::LostCommits,
            Fault::Failover,
        ]
    );
}

#[test]
fn the_full_network_run_has_each_fault_alone_then_all_together() {
    let full = network_scenarios(false, None);
    let names: Vec<&str> = full.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "dead-link",
            "fleet-cut",
            "one-way",
            "unknown-commit",
            "failover",
            "network-all"
        ]
    );
    assert_eq!(full[3].faults, vec![Fault::LostCommits; 2]);
    assert_eq!(full[5].roots, 3_000);
}

#[test]
fn a_failover_is_the_last_fault_whatever_the_seed() {
    let faults = network_scenarios(true, None).remove(0).faults;
    for seed in 0..20 {
        let order = fault_order(&faults, &mut StdRng::seed_from_u64(seed));
        assert_eq!(order.last(), Some(&Fault::Failover), "seed {seed}");
        assert_eq!(order.len(), faults.len());
    }
}

#[test]
fn options_default_to_debug_for_short_and_release_for_full() {
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let short = parse_options(&args(&["--short", "--seed", "9"])).unwrap();
    assert!(short.short && !short.release);
    assert_eq!(short.seed, 9);
    let full = parse_options(&args(&["--roots", "50", "--debug"])).unwrap();
    assert!(!full.short && !full.release);
    assert_eq!(full.roots, Some(50));
    assert!(parse_options(&args(&["--bogus"])).is_err());
    let network = parse_options(&args(&["--network", "--short"])).unwrap();
    assert!(network.network && network.short && !network.release);
    assert!(parse_options(&args(&[])).unwrap().release);
}

#[test]
fn client_reports_are_summed_field_by_field() {
    let mut total = json!({});
    merge(
        &mut total,
        &json!({"leases": 2, "statuses": {"lease": {"200": 2}}, "unexpected": [1]}),
    );
    merge(
        &mut total,
        &json!({"leases": 3, "statuses": {"lease": {"200": 1, "503": 4}}, "unexpected": [2]}),
    );
    assert_eq!(
        total,
        json!({"leases": 5, "statuses": {"lease": {"200": 3, "503": 4}}, "unexpected": [1, 2]})
    );
}

#[test]
fn the_slowest_recoveries_are_picked_by_kind() {
    let check = json!({"recoveries": [
        {"name": "#1 a", "first_completion_ms": 120.0, "longest_stall_ms": 3120.0,
         "slowest_release_ms": null},
        {"name": "#2 b", "first_completion_ms": 900.0, "longest_stall_ms": 950.0,
         "slowest_release_ms": 2100.0},
        {"name": "#3 c", "first_completion_ms": 15.0, "longest_stall_ms": null,
         "slowest_release_ms": 2500.0}
    ]});
    let (completion, stall, release) = slowest(&check);
    assert_eq!(completion, Some((900.0, "#2 b".to_owned())));
    assert_eq!(stall, Some((3120.0, "#1 a".to_owned())));
    assert_eq!(release, Some((2500.0, "#3 c".to_owned())));
}
