use super::{
    FAULT_WINDOW, Fault, fault_order, network_scenarios, parse_options, scenarios, thresholds,
};
use muster_devdb::StopMode;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;

use super::network::NetFigures;
use super::run::{FaultRecord, ScenarioResult};
use super::summary::render;

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
fn the_short_network_run_has_every_network_fault_on_two_replicas_then_a_frozen_primary() {
    let short = network_scenarios(true, None);
    assert_eq!(short.len(), 2);
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
    assert_eq!(
        (short[1].name, short[1].roots, short[1].replicas),
        ("frozen-short", 150, 2)
    );
    assert_eq!(short[1].faults, vec![Fault::FrozenPrimary]);
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
            "frozen-primary",
            "network-all"
        ]
    );
    assert_eq!(full[3].faults, vec![Fault::LostCommits; 2]);
    assert_eq!(full[5].faults, vec![Fault::FrozenPrimary]);
    assert_eq!(full[6].roots, 3_000);
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
fn lost_commit_answers_come_right_after_the_cut_that_moves_the_workers_to_replica_1() {
    let faults = network_scenarios(true, None).remove(0).faults;
    for seed in 0..20 {
        let order = fault_order(&faults, &mut StdRng::seed_from_u64(seed));
        let cut = order.iter().position(|f| *f == Fault::CutFromLogbook);
        let lost = order.iter().position(|f| *f == Fault::LostCommits);
        assert_eq!(lost, cut.map(|c| c + 1), "seed {seed}: {order:?}");
    }
}

#[test]
fn lost_commit_answers_without_a_cut_from_logbook_come_first() {
    let order = fault_order(
        &[Fault::LostCommits, Fault::OneWay, Fault::CutFleet],
        &mut StdRng::seed_from_u64(3),
    );
    assert_eq!(order[0], Fault::LostCommits);
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
fn the_table_shows_what_the_judge_reported() {
    let result = ScenarioResult {
        name: "short".into(),
        roots: 300,
        check: json!({
            "stats": {"items": 10, "done": 9, "failed": 1},
            "clients": {"bad_5xx": 0, "failovers": 4},
            "figures": {
                "slowest_recovery": {"ms": 64.4, "fault": "#2 PostgreSQL fast restart"},
                "longest_stall": null, "answered_503": 12, "no_answer": 3
            }
        }),
        ..ScenarioResult::default()
    };
    let table = render(&[result]);
    for row in [
        "| | short |",
        "| items (done / failed) | 10 (9 / 1) |",
        "| 503 answers / connection errors / failovers seen | 12 / 3 / 4 |",
        "| 5xx other than 503 seen by clients | 0 |",
        "| slowest recovery (repair done → next completion) | 64 ms (#2 PostgreSQL fast restart) |",
        "| longest stall (no completion anywhere) | n/a |",
    ] {
        assert!(table.contains(row), "{row} missing from\n{table}");
    }
}

#[test]
fn a_fault_record_gives_the_judge_its_probes_limits_and_whether_it_hides_commit_outcomes() {
    let record = |fault, figures| FaultRecord {
        fault,
        name: "#1".into(),
        start_ms: 1.0,
        end_ms: 2.0,
        worker_prefix: None,
        figures,
    };
    let probed = NetFigures {
        probed: "m1".into(),
        ready_after_ms: Some(40.0),
        ..NetFigures::default()
    };
    let lost = record(Fault::LostCommits, Some(probed)).to_json();
    assert_eq!(lost["hides_commit_outcomes"], true);
    assert_eq!(lost["probes"]["probed"], "m1");
    assert_eq!(lost["probes"]["ready_after_ms"], 40.0);
    assert_eq!(lost["probes"]["timeout_ms"], 50_000.0);
    assert_eq!(lost["probes"]["ready_within_ms"], 90_000.0);
    let kill = record(Fault::KillMuster, None).to_json();
    assert_eq!(kill["hides_commit_outcomes"], false);
    assert_eq!(kill["probes"], serde_json::Value::Null);
}
