//! Wake-ups for long-polling lease requests.
//!
//! Each kind has a generation counter. A lease request reads the generation *before* it looks
//! for work and then waits for the generation to move past it, so a wake-up that happens between
//! the look and the wait is never lost. Producers (enqueue, complete with `next`, a retry, a
//! replay) bump the generation after their transaction committed.
//!
//! Other replicas hear of it too: every kind notified here is also marked for the peers, and a
//! bridge outside the application (the Postgres adapter's `WakeBridge`: one dedicated
//! connection per replica that LISTENs and NOTIFYs) takes the marks ([`WorkSignal::outbound`])
//! and passes what the peers announced to [`WorkSignal::wake_from_peer`]. Without a bridge a
//! replica notices other replicas' work by the lease use case's bounded re-check.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use muster_domain::Kind;
use tokio::sync::{Notify, watch};

/// In-process wake-ups per kind, and the kinds to announce to the other replicas.
#[derive(Debug, Clone)]
pub struct WorkSignal {
    kinds: Arc<HashMap<Kind, watch::Sender<u64>>>,
    ledger: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    /// Kinds notified here and not yet taken by [`WorkSignal::outbound`]: bit `i` is
    /// `Kind::ALL[i]`.
    outbound: Arc<AtomicU32>,
    outbound_ready: Arc<Notify>,
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
            outbound: Arc::default(),
            outbound_ready: Arc::default(),
        }
    }

    /// The current generation of `kind`: read it before looking for work.
    pub fn generation(&self, kind: Kind) -> u64 {
        *self.kinds[&kind].borrow()
    }

    /// Work of `kind` may have become leasable (committed here): wakes this replica's waiters
    /// and marks the kind for the other replicas.
    pub fn notify(&self, kind: Kind) {
        self.wake_from_peer(kind);
        self.outbound.fetch_or(kind_bit(kind), Ordering::AcqRel);
        self.outbound_ready.notify_one();
    }

    /// Another replica made work of `kind` leasable: wakes this replica's waiters only.
    pub fn wake_from_peer(&self, kind: Kind) {
        self.kinds[&kind].send_modify(|g| *g = g.wrapping_add(1));
    }

    /// The kinds notified here since the last call, once there is at least one (for the
    /// bridge that announces them to the other replicas). Notifications while the bridge is
    /// busy are gathered into its next call.
    pub async fn outbound(&self) -> Vec<Kind> {
        loop {
            let bits = self.outbound.swap(0, Ordering::AcqRel);
            if bits != 0 {
                return Kind::ALL
                    .into_iter()
                    .filter(|k| bits & kind_bit(*k) != 0)
                    .collect();
            }
            self.outbound_ready.notified().await;
        }
    }

    /// Kinds taken by [`WorkSignal::outbound`] that could not be announced (the NOTIFY
    /// failed): handed out again with the next call, so the reconnected bridge announces them.
    pub fn retry_outbound(&self, kinds: &[Kind]) {
        let bits = kinds.iter().fold(0, |b, k| b | kind_bit(*k));
        self.outbound.fetch_or(bits, Ordering::AcqRel);
        self.outbound_ready.notify_one();
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

fn kind_bit(kind: Kind) -> u32 {
    let i = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
    1 << i
}

#[cfg(test)]
mod tests;
