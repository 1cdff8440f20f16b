//! The state of a dependency that is answered per call (not by readiness): whether it answered
//! the last time it was asked, for `/readyz`'s body and the metrics.

use std::sync::Mutex;

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
    state: Mutex<DependencyState>,
}

impl Default for Dependency {
    fn default() -> Self {
        Dependency {
            state: Mutex::new(DependencyState::Unchecked),
        }
    }
}

impl Dependency {
    /// Records the outcome of an attempt; answers the state it replaced.
    pub fn record(&self, outcome: Result<(), String>) -> DependencyState {
        let next = match outcome {
            Ok(()) => DependencyState::Reachable,
            Err(reason) => DependencyState::Unreachable(reason),
        };
        std::mem::replace(
            &mut *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            next,
        )
    }

    pub fn state(&self) -> DependencyState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
