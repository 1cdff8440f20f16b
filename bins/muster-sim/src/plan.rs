//! The failure plan: what the fleet does to each root item's chain, written into the payload so
//! that the outcome can be checked from the database alone.
//!
//! A root `trawl` item carries `{"root": i, "plan": {"fail_at": …, "flaky_at": …, "subtool_at": …,
//! "crash_at": …}}` (each a kind or `null`). Every stage copies the payload unchanged into its
//! `next` item, so each item of the chain knows the plan. A worker decides what to do from the
//! plan, its own kind and the lease's fence alone ([`decide`]), so the decision is the same in
//! any process, after any restart:
//!
//! - `crash_at`: the first lease (fence 1) is abandoned without a result; the item comes back after
//!   the lease TTL.
//! - `subtool_at`: the next lease (fence 1, or 2 after a crash at the same stage) reports
//!   `needs_subtool`; the item waits for Shipkeeper's next digest report.
//! - `fail_at`: the item fails with `retryable: false` and the chain ends there (`failed`).
//! - `flaky_at`: the next lease after those fails with `retryable: true`; the retry completes.
//!
//! Faults injected from outside (killed processes, a database restart) only take leases away, so
//! they can make a planned crash, park or flaky failure not happen, never make an unplanned one
//! happen, and never change where the chain ends.

use muster_domain::Kind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// The plan of one root item's chain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub fail_at: Option<Kind>,
    pub flaky_at: Option<Kind>,
    pub subtool_at: Option<Kind>,
    pub crash_at: Option<Kind>,
}

/// The payload of every item the simulation makes: the root's index and its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimPayload {
    pub root: u64,
    pub plan: Plan,
}

/// Probabilities (0 to 1) that a root's plan gets each event, at a stage chosen uniformly.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub fail: f64,
    pub flaky: f64,
    pub subtool: f64,
    pub crash: f64,
}

/// What a worker does with a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Abandon the lease: no heartbeat, no result.
    Crash,
    /// Report `needs_subtool`.
    Park,
    /// `fail` with `retryable: false`.
    FailFinal,
    /// `fail` with `retryable: true`.
    FailRetryable,
    /// `complete`, with the next stage (if any) as `next`.
    Complete,
}

/// How a chain ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Done,
    Failed,
}

/// The stage after `kind` in the default chain, `None` after `bellbuoy`.
pub fn next_kind(kind: Kind) -> Option<Kind> {
    Kind::ALL.get(stage_index(kind) + 1).copied()
}

/// 0 for `trawl` … 9 for `bellbuoy`.
pub fn stage_index(kind: Kind) -> usize {
    Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

impl Plan {
    /// The plan of root `index` under `seed`: each root's plan depends only on `(seed, index)`,
    /// so enqueueing a range twice, or in pieces, gives the same plans.
    pub fn generate(seed: u64, index: u64, rates: &Rates) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut pick = |rate: f64| {
            let hit = rng.random::<f64>() < rate;
            let kind = Kind::ALL[rng.random_range(0..Kind::ALL.len())];
            hit.then_some(kind)
        };
        Plan {
            fail_at: pick(rates.fail),
            flaky_at: pick(rates.flaky),
            subtool_at: pick(rates.subtool),
            crash_at: pick(rates.crash),
        }
    }

    /// The last stage of the chain and how it ends there.
    pub fn ending(&self) -> (Kind, Ending) {
        match self.fail_at {
            Some(kind) => (kind, Ending::Failed),
            None => (Kind::Bellbuoy, Ending::Done),
        }
    }

    /// How many items the chain has (one per stage up to its last).
    pub fn items(&self) -> u64 {
        stage_index(self.ending().0) as u64 + 1
    }

    /// Whether the chain reaches `kind`.
    pub fn reaches(&self, kind: Kind) -> bool {
        stage_index(kind) <= stage_index(self.ending().0)
    }

    /// The fence of the lease that parks at `subtool_at` (after a crash there, if any).
    pub fn park_fence(&self) -> i64 {
        1 + i64::from(self.crash_at.is_some() && self.crash_at == self.subtool_at)
    }

    /// The fence of the lease that fails retryably at `flaky_at` (after a crash and a park there).
    pub fn flaky_fence(&self) -> i64 {
        let here = |k: Option<Kind>| i64::from(k.is_some() && k == self.flaky_at);
        1 + here(self.crash_at) + here(self.subtool_at)
    }

    /// What happens when no fault from outside interferes: `(crashes, parks, retryable
    /// failures)` along the chain.
    pub fn planned_events(&self) -> (u64, u64, u64) {
        let reached = |k: Option<Kind>| k.is_some_and(|k| self.reaches(k));
        let crashes = u64::from(reached(self.crash_at));
        let parks = u64::from(reached(self.subtool_at));
        let flaky = u64::from(reached(self.flaky_at) && self.flaky_at != self.fail_at);
        (crashes, parks, flaky)
    }
}

/// What a worker of `kind` does with a lease of fence `fence` on an item planned by `plan`.
pub fn decide(plan: &Plan, kind: Kind, fence: i64) -> Action {
    let mut first = 1;
    if plan.crash_at == Some(kind) {
        if fence == first {
            return Action::Crash;
        }
        first += 1;
    }
    if plan.subtool_at == Some(kind) {
        if fence == first {
            return Action::Park;
        }
        first += 1;
    }
    if plan.fail_at == Some(kind) {
        return Action::FailFinal;
    }
    if plan.flaky_at == Some(kind) && fence == first {
        return Action::FailRetryable;
    }
    Action::Complete
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(
        fail: Option<Kind>,
        flaky: Option<Kind>,
        sub: Option<Kind>,
        crash: Option<Kind>,
    ) -> Plan {
        Plan {
            fail_at: fail,
            flaky_at: flaky,
            subtool_at: sub,
            crash_at: crash,
        }
    }

    #[test]
    fn a_plan_without_events_completes_every_lease_of_every_stage() {
        let p = Plan::default();
        for kind in Kind::ALL {
            for fence in 1..4 {
                assert_eq!(decide(&p, kind, fence), Action::Complete);
            }
        }
        assert_eq!(p.ending(), (Kind::Bellbuoy, Ending::Done));
        assert_eq!(p.items(), 10);
    }

    #[test]
    fn events_at_one_stage_happen_in_order_crash_park_then_flaky_failure() {
        let a = Some(Kind::Assay);
        let p = plan(None, a, a, a);
        assert_eq!(decide(&p, Kind::Assay, 1), Action::Crash);
        assert_eq!(decide(&p, Kind::Assay, 2), Action::Park);
        assert_eq!(decide(&p, Kind::Assay, 3), Action::FailRetryable);
        assert_eq!(decide(&p, Kind::Assay, 4), Action::Complete);
        assert_eq!(decide(&p, Kind::Sextant, 1), Action::Complete);
        assert_eq!((p.park_fence(), p.flaky_fence()), (2, 3));
        assert_eq!(p.planned_events(), (1, 1, 1));
    }

    #[test]
    fn a_flaky_stage_fails_only_on_its_first_lease() {
        let p = plan(None, Some(Kind::Waybill), None, None);
        assert_eq!(decide(&p, Kind::Waybill, 1), Action::FailRetryable);
        assert_eq!(decide(&p, Kind::Waybill, 2), Action::Complete);
        assert_eq!(p.flaky_fence(), 1);
        assert_eq!(p.planned_events(), (0, 0, 1));
    }

    #[test]
    fn a_fail_stage_fails_for_good_after_its_crash_and_park_and_ends_the_chain() {
        let s = Some(Kind::Shakedown);
        let p = plan(s, s, s, s);
        assert_eq!(decide(&p, Kind::Shakedown, 1), Action::Crash);
        assert_eq!(decide(&p, Kind::Shakedown, 2), Action::Park);
        assert_eq!(decide(&p, Kind::Shakedown, 3), Action::FailFinal);
        assert_eq!(decide(&p, Kind::Shakedown, 7), Action::FailFinal);
        assert_eq!(p.ending(), (Kind::Shakedown, Ending::Failed));
        assert_eq!(p.items(), 7);
        assert_eq!(p.planned_events(), (1, 1, 0));
    }

    #[test]
    fn events_after_the_failing_stage_are_never_reached() {
        let p = plan(
            Some(Kind::Sextant),
            Some(Kind::Bellbuoy),
            Some(Kind::Assay),
            Some(Kind::Trawl),
        );
        assert_eq!(p.items(), 2);
        assert!(p.reaches(Kind::Sextant) && !p.reaches(Kind::Assay));
        assert_eq!(p.planned_events(), (1, 0, 0));
    }

    #[test]
    fn plans_depend_only_on_seed_and_index() {
        let rates = Rates {
            fail: 0.3,
            flaky: 0.3,
            subtool: 0.3,
            crash: 0.3,
        };
        for i in 0..200 {
            assert_eq!(Plan::generate(42, i, &rates), Plan::generate(42, i, &rates));
        }
        let a: Vec<Plan> = (0..200).map(|i| Plan::generate(1, i, &rates)).collect();
        let b: Vec<Plan> = (0..200).map(|i| Plan::generate(2, i, &rates)).collect();
        assert_ne!(a, b);
    }

    #[test]
    fn rate_zero_plans_nothing_and_rate_one_plans_every_event() {
        let none = Rates::default();
        let all = Rates {
            fail: 1.0,
            flaky: 1.0,
            subtool: 1.0,
            crash: 1.0,
        };
        for i in 0..100 {
            assert_eq!(Plan::generate(9, i, &none), Plan::default());
            let p = Plan::generate(9, i, &all);
            assert!(p.fail_at.is_some() && p.flaky_at.is_some());
            assert!(p.subtool_at.is_some() && p.crash_at.is_some());
        }
    }

    #[test]
    fn the_payload_names_every_event_even_when_absent() {
        let payload = SimPayload {
            root: 3,
            plan: plan(Some(Kind::Assay), None, None, None),
        };
        assert_eq!(
            serde_json::to_value(payload).unwrap(),
            serde_json::json!({"root": 3, "plan": {"fail_at": "assay", "flaky_at": null, "subtool_at": null, "crash_at": null}})
        );
        let back: SimPayload =
            serde_json::from_value(serde_json::to_value(payload).unwrap()).unwrap();
        assert_eq!(back, payload);
    }

    #[test]
    fn the_chain_follows_the_default_routes() {
        assert_eq!(next_kind(Kind::Trawl), Some(Kind::Sextant));
        assert_eq!(next_kind(Kind::Tidegauge), Some(Kind::Bellbuoy));
        assert_eq!(next_kind(Kind::Bellbuoy), None);
        let routes = muster_domain::Routes::default();
        for kind in Kind::ALL {
            if let Some(next) = next_kind(kind) {
                assert!(routes.allows(kind, next), "{kind} -> {next}");
            }
        }
    }
}
