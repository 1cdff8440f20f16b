//! Wake-ups for long-polling lease requests.
//!
//! Each kind has a generation counter. A lease request reads the generation *before* it looks
//! for work and then waits for the generation to move past it, so a wake-up that happens between
//! the look and the wait is never lost. Producers (enqueue, complete with `next`, a retry) bump
//! the generation after their transaction committed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use muster_domain::Kind;
use tokio::sync::watch;

/// In-process wake-ups per kind. Another replica's work is noticed through whatever feeds
/// [`WorkSignal::notify`] from outside (the Postgres adapter's LISTEN), and in any case by the
/// bounded re-check interval of the lease use case.
#[derive(Debug, Clone)]
pub struct WorkSignal {
    kinds: Arc<HashMap<Kind, watch::Sender<u64>>>,
    ledger: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
}

impl Default for WorkSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkSignal {
    pub fn new() -> Self {
        let kinds = Kind::ALL
            .into_iter()
            .map(|k| (k, watch::channel(0u64).0))
            .collect();
        WorkSignal {
            kinds: Arc::new(kinds),
            ledger: watch::channel(0u64).0,
            shutdown: watch::channel(false).0,
        }
    }

    /// The current generation of `kind`: read it before looking for work.
    pub fn generation(&self, kind: Kind) -> u64 {
        *self.kinds[&kind].borrow()
    }

    /// Work of `kind` may have become leasable.
    pub fn notify(&self, kind: Kind) {
        self.kinds[&kind].send_modify(|g| *g = g.wrapping_add(1));
    }

    /// This process committed ledger rows: the live feed may read at once.
    pub fn ledger_changed(&self) {
        self.ledger.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Waits until this process commits ledger rows, `timeout` passes, or shutdown.
    pub async fn wait_ledger(&self, timeout: Duration) {
        let mut rx = self.ledger.subscribe();
        rx.mark_unchanged();
        let mut stop = self.shutdown.subscribe();
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = rx.changed() => {}
            _ = stop.wait_for(|s| *s) => {}
            _ = tokio::time::sleep(timeout) => {}
        }
    }

    /// Resolves once shutdown begins.
    pub async fn shutting_down(&self) {
        let mut stop = self.shutdown.subscribe();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Ends every wait at once (shutdown): waiting lease requests answer "no work".
    pub fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Waits until the generation of `kind` differs from `seen`, `timeout` passes or shutdown.
    /// Answers whether the generation moved.
    pub async fn wait_past(&self, kind: Kind, seen: u64, timeout: Duration) -> bool {
        let mut rx = self.kinds[&kind].subscribe();
        let mut stop = self.shutdown.subscribe();
        if *stop.borrow() {
            return false;
        }
        let moved = rx.wait_for(|g| *g != seen);
        tokio::select! {
            r = moved => r.is_ok(),
            _ = stop.wait_for(|s| *s) => false,
            _ = tokio::time::sleep(timeout) => false,
        }
    }
}

#[cfg(test)]
mod tests;
