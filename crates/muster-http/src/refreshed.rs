//! `Refreshed<T>`: a value read from Logbook for the probes and `/metrics` (readiness, the
//! oldest items' ages), loaded at most once per interval however often it is asked for.
//!
//! Invariant: the first caller after the interval loads it while the callers that come
//! meanwhile wait for that one load and share its value; no caller gets a value loaded longer
//! ago than the interval.
//!
//! Why it exists: a flood of scrapes or probes would otherwise cost one pool connection per call,
//! taken from the work; this way it costs one per interval.

use std::future::Future;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// A value and when it was loaded.
#[derive(Debug)]
pub(crate) struct Refreshed<T> {
    every: Duration,
    /// Held across a load: the callers that come meanwhile wait for its value.
    slot: Mutex<Option<(Instant, T)>>,
}

impl<T: Clone> Refreshed<T> {
    pub(crate) fn new(every: Duration) -> Self {
        Refreshed {
            every,
            slot: Mutex::new(None),
        }
    }

    /// The value, loaded by `load` when it is older than the interval (or was never loaded).
    pub(crate) async fn get<F: Future<Output = T>>(&self, load: impl FnOnce() -> F) -> T {
        let mut slot = self.slot.lock().await;
        if let Some((at, value)) = slot.as_ref()
            && at.elapsed() < self.every
        {
            return value.clone();
        }
        let value = load().await;
        *slot = Some((Instant::now(), value.clone()));
        value
    }
}

#[cfg(test)]
mod tests;
