//! Retry policy: exponential backoff with jitter, and the attempt limit.

use time::Duration;

/// How a kind's failed items are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub base: Duration,
    pub factor: f64,
    pub cap: Duration,
    /// Leases an item may be charged before a failure becomes final.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    /// The contract's defaults: 2 s, x2, capped at 10 min, 5 attempts.
    fn default() -> Self {
        RetryPolicy {
            base: Duration::seconds(2),
            factor: 2.0,
            cap: Duration::minutes(10),
            max_attempts: 5,
        }
    }
}

impl RetryPolicy {
    /// The delay before the retry that follows failed attempt `attempt` (1-based).
    ///
    /// "Equal jitter": half the exponential delay is fixed, the other half is scaled by
    /// `jitter` (a uniform random number in `[0, 1)`, passed in). So the delay lies in
    /// `[d/2, d)` where `d = min(cap, base * factor^(attempt-1))`: retries of items that failed
    /// together spread out, yet never retry sooner than half the nominal delay.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let nominal = self.base.as_seconds_f64() * self.factor.powi(exponent);
        let capped = if nominal.is_finite() {
            nominal.min(self.cap.as_seconds_f64())
        } else {
            self.cap.as_seconds_f64()
        };
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let seconds = capped / 2.0 + capped / 2.0 * jitter;
        // Whole microseconds: the precision Logbook keeps.
        Duration::microseconds((seconds * 1e6) as i64)
    }

    /// Whether another attempt is allowed after `attempt` attempts were charged.
    pub fn allows_another(&self, attempt: u32) -> bool {
        attempt < self.max_attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The default policy's delay for each `(attempt, jitter)`, in order.
    fn default_delays<const N: usize>(cases: [(u32, f64); N]) -> [Duration; N] {
        let p = RetryPolicy::default();
        cases.map(|(attempt, jitter)| p.delay(attempt, jitter))
    }

    #[test]
    fn the_first_retry_waits_between_one_and_two_seconds_by_default() {
        assert_eq!(
            default_delays([(1, 0.0), (1, 0.5)]),
            [Duration::seconds(1), Duration::milliseconds(1500)]
        );
    }

    #[test]
    fn the_delay_doubles_per_attempt() {
        assert_eq!(
            default_delays([(2, 0.0), (3, 0.0), (4, 0.0)]),
            [
                Duration::seconds(2),
                Duration::seconds(4),
                Duration::seconds(8)
            ]
        );
    }

    #[test]
    fn the_delay_is_capped() {
        assert_eq!(
            default_delays([(30, 0.0), (u32::MAX, 0.0)]),
            [Duration::minutes(5); 2]
        );
    }

    #[test]
    fn five_attempts_are_allowed_by_default() {
        let p = RetryPolicy::default();
        assert!(p.allows_another(4));
        assert!(!p.allows_another(5));
    }

    proptest! {
        #[test]
        fn every_delay_lies_between_half_the_nominal_and_the_cap(attempt in 1u32..100, jitter in any::<f64>()) {
            let p = RetryPolicy::default();
            let d = p.delay(attempt, jitter);
            prop_assert!(d >= p.delay(attempt, 0.0));
            prop_assert!(d <= p.cap);
            prop_assert!(d >= Duration::seconds(1));
        }
    }
}
