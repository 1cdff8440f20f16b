//! The state of a dependency that is answered per call (not by readiness): whether it answered
//! the last time it was asked, for `/readyz`'s body and the metrics.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::shared::Shared;

/// Calls made to a dependency and how many of them got no answer, for the metrics.
#[derive(Debug, Default)]
pub struct CallCounts {
    calls: AtomicU64,
    failures: AtomicU64,
}

impl CallCounts {
    /// Counts one call, and one failure when it got no answer.
    pub fn count(&self, answered: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !answered {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (calls, failures) so far.
    pub fn get(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }
}

/// What is known of the dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DependencyState {
    /// Not asked yet.
    Unchecked,
    Reachable,
    /// The last attempt failed, and why.
    Unreachable(String),
}

/// Written by whatever probes the dependency, read by the transport.
#[derive(Debug)]
pub struct Dependency {
    state: Shared<DependencyState>,
}

impl Default for Dependency {
    fn default() -> Self {
        Dependency {
            state: Shared::new(DependencyState::Unchecked),
        }
    }
}

impl Dependency {
    /// Records the outcome of an attempt; answers the state it replaced.
    pub fn record(&self, outcome: Result<(), String>) -> DependencyState {
        self.state.replace(match outcome {
            Ok(()) => DependencyState::Reachable,
            Err(reason) => DependencyState::Unreachable(reason),
        })
    }

    pub fn state(&self) -> DependencyState {
        self.state.get()
    }
}

/// A check of how a dependency is set up (Logbook: the privileges of the role `serve` connects
/// as), made once the dependency answers: unknown until then, then right or wrong and why.
/// Readiness fails while it is wrong.
#[derive(Debug, Default)]
pub struct Configuration {
    state: Shared<Option<Result<(), String>>>,
}

impl Configuration {
    /// Records a check's verdict; answers whether it differs from the one before.
    pub fn record(&self, verdict: Result<(), String>) -> bool {
        self.state.replace(Some(verdict.clone())) != Some(verdict)
    }

    /// `None` until checked, then the verdict.
    pub fn verdict(&self) -> Option<Result<(), String>> {
        self.state.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_is_unknown_until_checked_and_a_repeated_verdict_is_no_change() {
        let c = Configuration::default();
        assert_eq!(c.verdict(), None);
        assert!(c.record(Err("lacks UPDATE on core.items".into())));
        assert!(!c.record(Err("lacks UPDATE on core.items".into())));
        assert!(c.record(Ok(())));
        assert_eq!(c.verdict(), Some(Ok(())));
    }

    #[test]
    fn every_call_is_counted_and_only_the_unanswered_as_failures() {
        let counts = CallCounts::default();
        counts.count(true);
        counts.count(false);
        counts.count(true);
        assert_eq!(counts.get(), (3, 1));
    }

    #[test]
    fn a_dependency_is_unchecked_until_it_is_asked() {
        assert_eq!(Dependency::default().state(), DependencyState::Unchecked);
    }

    #[test]
    fn the_last_outcome_is_the_state_and_the_one_before_is_answered() {
        let d = Dependency::default();
        d.record(Err("connect: refused".into()));
        assert_eq!(
            d.record(Ok(())),
            DependencyState::Unreachable("connect: refused".into())
        );
        assert_eq!(d.state(), DependencyState::Reachable);
    }
}
