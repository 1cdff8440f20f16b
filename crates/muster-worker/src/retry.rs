//! How long a delivery waits before it is sent again.

use std::time::Duration;

use crate::ClientError;

/// Backoff of deliveries: `base * factor^(n-1)`, capped, with jitter (half fixed, half random).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub base: Duration,
    pub factor: u32,
    pub cap: Duration,
    /// `None`: retry until acknowledged (the default). `Some(n)`: give up after `n` attempts
    /// with [`ClientError::Undelivered`], leaving the delivery in the spool.
    pub max_attempts: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(200),
            factor: 2,
            cap: Duration::from_secs(30),
            max_attempts: None,
        }
    }
}

impl RetryPolicy {
    /// The delay after failed attempt `attempt` (1-based) that failed with `error`: the
    /// jittered backoff, but never shorter than the server's `Retry-After` (itself capped at
    /// `cap`).
    pub fn delay_after(&self, attempt: u32, error: &ClientError) -> Duration {
        let backoff = self.delay(attempt);
        match error.retry_after() {
            Some(asked) => backoff.max(asked.min(self.cap)),
            None => backoff,
        }
    }

    /// The delay after failed attempt `attempt` (1-based), jittered.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .factor
            .max(1)
            .checked_pow(attempt.saturating_sub(1).min(32))
            .unwrap_or(u32::MAX);
        let full = self.base.saturating_mul(exp).min(self.cap);
        let half = full / 2;
        let jitter_ms = rand::random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }
}
