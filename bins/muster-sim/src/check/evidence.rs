//! The rules on what a run left outside the database: what its clients saw (their reports,
//! summed) and what the fault suite's probes saw during each fault; and the figures drawn from
//! those and from the recoveries. Pure: values in, violations and figures out.

use serde::{Deserialize, Serialize};

use super::{Recovery, SAMPLES, Violation};
use crate::stats::{Summary, Unexpected};

/// A fault injected into the run: it started at `start_ms` and was repaired at `end_ms` (Unix
/// milliseconds); `worker_prefix` names the worker ids of a killed simulation process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    pub name: String,
    pub start_ms: f64,
    pub end_ms: f64,
    #[serde(default)]
    pub worker_prefix: Option<String>,
    /// The fault hides the outcome of commits from the replica that sent them (lost COMMIT
    /// answers): the run must show a completion answered `replayed: true`, or the case it
    /// exists for did not happen.
    #[serde(default)]
    pub hides_commit_outcomes: bool,
    /// What the probes of the hurt replicas saw (`--network` faults).
    #[serde(default)]
    pub probes: Option<Probes>,
}

/// What the probes of the replicas a fault hurt saw during it and after its repair, and the
/// limits they are held to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Probes {
    /// The replicas probed (`m0`, `m1`, `m0+m1`).
    pub probed: String,
    /// From the fault to the first 503 of the probed replica.
    pub unavailable_after_ms: Option<f64>,
    /// The longest any probe waited for its answer during the fault.
    pub longest_answer_ms: f64,
    /// Probes during the fault answered 200, answered 503.
    pub answered_200: u32,
    pub answered_503: u32,
    /// From the repair (heal, promotion) until every probed replica answered 200; none when
    /// the probes gave up waiting for that, `ready_within_ms` after the repair.
    pub ready_after_ms: Option<f64>,
    /// A probe still unanswered after this long found a request that hung.
    pub timeout_ms: f64,
    /// How long after the repair the probes wait for every probed replica to answer 200.
    pub ready_within_ms: f64,
}

/// The longest of some duration over a run's faults, and the fault it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slowest {
    pub ms: f64,
    pub fault: String,
}

/// The figures of a run beyond the database's counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// From a repair to the first completion after it, the slowest.
    pub slowest_recovery: Option<Slowest>,
    /// The longest stretch without any completion around a fault.
    pub longest_stall: Option<Slowest>,
    /// From a fleet-process kill to the re-lease of the last item it held, the slowest.
    pub slowest_release: Option<Slowest>,
    /// Client answers `503`, and calls that got no answer (connection errors, timeouts).
    pub answered_503: u64,
    pub no_answer: u64,
}

/// What the clients saw that breaks the contract.
pub(super) fn client_violations(clients: &Summary, faults: &[Fault]) -> Vec<Violation> {
    let is_bad_5xx = |u: &&Unexpected| u.status.starts_with('5') && u.status != "503";
    let samples = |keep: &dyn Fn(&&Unexpected) -> bool| -> Vec<String> {
        clients
            .unexpected
            .iter()
            .filter(keep)
            .take(SAMPLES)
            .map(|u| format!("{} answered {} {}: {}", u.op, u.status, u.code, u.message))
            .collect()
    };
    let mut violations = Vec::new();
    if clients.bad_5xx > 0 {
        violations.push(Violation {
            rule: "no client saw a 5xx other than 503".into(),
            count: clients.bad_5xx,
            samples: samples(&is_bad_5xx),
        });
    }
    if clients.unexpected_total > clients.bad_5xx {
        violations.push(Violation {
            rule: "no client saw an answer outside the contract's expectations (a 4xx other \
                   than 409 E_LEASE_LOST, a body that does not parse)"
                .into(),
            count: clients.unexpected_total - clients.bad_5xx,
            samples: samples(&|u| !is_bad_5xx(u)),
        });
    }
    let hiding: Vec<String> = faults
        .iter()
        .filter(|f| f.hides_commit_outcomes)
        .map(|f| f.name.clone())
        .collect();
    if !hiding.is_empty() && clients.completes_replayed == 0 {
        violations.push(Violation {
            rule: "a fault that hides commits' outcomes yields a completion answered \
                   replayed:true (else the unknown-outcome case was not exercised)"
                .into(),
            count: hiding.len() as u64,
            samples: hiding.into_iter().take(SAMPLES).collect(),
        });
    }
    violations
}

/// What the probes saw that breaks the contract: a request that hung past the probe's
/// timeout, a replica not answering 200 within the limit after the repair.
pub(super) fn probe_violations(faults: &[Fault]) -> Vec<Violation> {
    let secs = |ms: f64| ms / 1000.0;
    let broken = |rule: &str, found: Vec<String>| {
        (!found.is_empty()).then(|| Violation {
            rule: rule.to_owned(),
            count: found.len() as u64,
            samples: found.into_iter().take(SAMPLES).collect(),
        })
    };
    let probed = || {
        faults
            .iter()
            .filter_map(|f| f.probes.as_ref().map(|p| (f.name.as_str(), p)))
    };
    let hung = probed()
        .filter(|(_, p)| p.longest_answer_ms >= p.timeout_ms)
        .map(|(name, p)| {
            format!(
                "{name}: a request to {} got no answer within {:.0} s",
                p.probed,
                secs(p.timeout_ms)
            )
        })
        .collect();
    let not_ready = probed()
        .filter(|(_, p)| p.ready_after_ms.is_none())
        .map(|(name, p)| {
            format!(
                "{name}: {} did not answer 200 within {:.0} s of the repair",
                p.probed,
                secs(p.ready_within_ms)
            )
        })
        .collect();
    [
        broken(
            "during a fault, a probed replica answers every request within the probe's timeout",
            hung,
        ),
        broken(
            "after a repair, every probed replica answers 200 again within the limit",
            not_ready,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The slowest recoveries of a run and the answers its clients did not get.
pub(super) fn figures(recoveries: &[Recovery], clients: Option<&Summary>) -> Figures {
    let slowest = |of: fn(&Recovery) -> Option<f64>| {
        recoveries
            .iter()
            .filter_map(|r| {
                of(r).map(|ms| Slowest {
                    ms,
                    fault: r.name.clone(),
                })
            })
            // The first of equals wins.
            .fold(None, |best: Option<Slowest>, s| match best {
                Some(b) if b.ms >= s.ms => Some(b),
                _ => Some(s),
            })
    };
    Figures {
        slowest_recovery: slowest(|r| r.first_completion_ms),
        longest_stall: slowest(|r| r.longest_stall_ms),
        slowest_release: slowest(|r| r.slowest_release_ms),
        answered_503: clients.map_or(0, |c| c.answers(&["503"])),
        no_answer: clients.map_or(0, |c| c.answers(&["transport", "timeout"])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(name: &str) -> Fault {
        Fault {
            name: name.into(),
            start_ms: 0.0,
            end_ms: 0.0,
            worker_prefix: None,
            hides_commit_outcomes: false,
            probes: None,
        }
    }

    fn answer(op: &str, status: &str) -> Unexpected {
        Unexpected {
            op: op.into(),
            status: status.into(),
            code: "E_X".into(),
            message: "m".into(),
        }
    }

    fn rules(v: &[Violation]) -> Vec<(&str, u64)> {
        v.iter().map(|v| (v.rule.as_str(), v.count)).collect()
    }

    #[test]
    fn the_fault_suites_fault_records_parse() {
        // As `cargo xtask chaos` writes faults.json: a probed network fault, a loopback one.
        let faults: Vec<Fault> = serde_json::from_str(
            r##"[{"name": "#1 lost", "start_ms": 1.0, "end_ms": 2.0, "worker_prefix": null,
                 "hides_commit_outcomes": true,
                 "probes": {"probed": "m1", "unavailable_after_ms": null,
                            "longest_answer_ms": 20.5, "answered_200": 3, "answered_503": 0,
                            "ready_after_ms": 10.0, "timeout_ms": 50000.0,
                            "ready_within_ms": 90000.0}},
                {"name": "#2 kill", "start_ms": 3.0, "end_ms": 4.0, "worker_prefix": "s0.7-",
                 "hides_commit_outcomes": false, "probes": null}]"##,
        )
        .unwrap();
        let probes = faults[0].probes.as_ref().unwrap();
        assert!(faults[0].hides_commit_outcomes);
        assert_eq!((probes.answered_200, probes.timeout_ms), (3, 50_000.0));
        assert_eq!(faults[1].worker_prefix.as_deref(), Some("s0.7-"));
        assert_eq!(faults[1].probes, None);
    }

    #[test]
    fn a_clean_run_breaks_no_client_or_probe_rule() {
        let probes = Probes {
            probed: "m0".into(),
            longest_answer_ms: 8_200.0,
            ready_after_ms: Some(20.0),
            timeout_ms: 50_000.0,
            ready_within_ms: 90_000.0,
            ..Probes::default()
        };
        let faults = [Fault {
            hides_commit_outcomes: true,
            probes: Some(probes),
            ..fault("#1 lost commits")
        }];
        let clients = Summary {
            completes_replayed: 1,
            ..Summary::default()
        };
        assert_eq!(client_violations(&clients, &faults), vec![]);
        assert_eq!(probe_violations(&faults), vec![]);
    }

    #[test]
    fn a_bad_5xx_and_another_unexpected_answer_are_two_violations() {
        let clients = Summary {
            bad_5xx: 1,
            unexpected_total: 3,
            unexpected: vec![
                answer("complete", "500"),
                answer("fail", "422"),
                answer("lease", "401"),
            ],
            ..Summary::default()
        };
        let found = client_violations(&clients, &[]);
        assert_eq!(
            rules(&found),
            vec![
                ("no client saw a 5xx other than 503", 1),
                (
                    "no client saw an answer outside the contract's expectations (a 4xx other \
                     than 409 E_LEASE_LOST, a body that does not parse)",
                    2
                ),
            ]
        );
        assert_eq!(found[0].samples, ["complete answered 500 E_X: m"]);
        assert_eq!(found[1].samples.len(), 2);
    }

    #[test]
    fn lost_commit_answers_without_a_replayed_completion_are_a_violation() {
        let faults = [
            fault("#1 cut"),
            Fault {
                hides_commit_outcomes: true,
                ..fault("#2 lost commits")
            },
        ];
        let found = client_violations(&Summary::default(), &faults);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].samples, ["#2 lost commits"]);
        assert_eq!(client_violations(&Summary::default(), &faults[..1]), vec![]);
    }

    #[test]
    fn a_hung_probe_and_a_replica_not_ready_after_the_repair_are_violations() {
        let limits = Probes {
            probed: "m1".into(),
            timeout_ms: 50_000.0,
            ready_within_ms: 90_000.0,
            ..Probes::default()
        };
        let faults = [
            Fault {
                probes: Some(Probes {
                    longest_answer_ms: 50_000.0,
                    ready_after_ms: Some(30.0),
                    ..limits.clone()
                }),
                ..fault("#1 one-way")
            },
            Fault {
                probes: Some(Probes {
                    longest_answer_ms: 10.0,
                    ready_after_ms: None,
                    ..limits
                }),
                ..fault("#2 failover")
            },
            fault("#3 fleet cut"),
        ];
        let found = probe_violations(&faults);
        assert_eq!(
            rules(&found),
            vec![
                (
                    "during a fault, a probed replica answers every request within the probe's timeout",
                    1
                ),
                (
                    "after a repair, every probed replica answers 200 again within the limit",
                    1
                ),
            ]
        );
        assert_eq!(
            found[0].samples,
            ["#1 one-way: a request to m1 got no answer within 50 s"]
        );
        assert_eq!(
            found[1].samples,
            ["#2 failover: m1 did not answer 200 within 90 s of the repair"]
        );
    }

    #[test]
    fn the_slowest_recoveries_are_picked_by_kind() {
        let recovery = |name: &str, first, stall, release| Recovery {
            name: name.into(),
            first_completion_ms: first,
            longest_stall_ms: stall,
            abandoned_leases: None,
            slowest_release_ms: release,
        };
        let recoveries = [
            recovery("#1 a", Some(120.0), Some(3120.0), None),
            recovery("#2 b", Some(900.0), Some(950.0), Some(2100.0)),
            recovery("#3 c", Some(15.0), None, Some(2500.0)),
            recovery("#4 d", Some(900.0), None, None),
        ];
        let clients = Summary {
            statuses: [(
                "complete".into(),
                [
                    ("503".into(), 4),
                    ("transport".into(), 2),
                    ("timeout".into(), 1),
                ]
                .into(),
            )]
            .into(),
            ..Summary::default()
        };
        let f = figures(&recoveries, Some(&clients));
        let slowest = |ms, fault: &str| {
            Some(Slowest {
                ms,
                fault: fault.into(),
            })
        };
        assert_eq!(f.slowest_recovery, slowest(900.0, "#2 b"));
        assert_eq!(f.longest_stall, slowest(3120.0, "#1 a"));
        assert_eq!(f.slowest_release, slowest(2500.0, "#3 c"));
        assert_eq!((f.answered_503, f.no_answer), (4, 3));
        assert_eq!(figures(&[], None), Figures::default());
    }
}
