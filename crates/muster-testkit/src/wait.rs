//! Waiting for what becomes true a moment later (a commit seen by another task, a process that
//! starts, a spool that empties), without a fixed sleep.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `probe` every 20 ms until it is true, panicking with `what` once `within` has passed.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !probe().await {
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
