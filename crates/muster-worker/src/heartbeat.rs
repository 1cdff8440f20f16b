//! `Heartbeat`: keeps a lease alive from a spawned task.

use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{Lease, WorkerClient};

/// What the heartbeat task knows about its lease.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseState {
    /// Held; `expires_at` as of the last acknowledged heartbeat (or the lease itself).
    Held { expires_at: OffsetDateTime },
    /// Lost: the server answered a final error (`E_LEASE_LOST`, or a 4xx such as
    /// `E_NOT_FOUND`). The work should be abandoned; nothing it delivers will be accepted.
    Lost,
}

/// A running heartbeat for one lease. Heartbeats every `heartbeat_ms`; transient failures
/// (connection errors, 5xx) are logged and retried at the next tick; a final answer marks the
/// lease [`LeaseState::Lost`] and stops. Dropping the `Heartbeat` stops it.
#[derive(Debug)]
pub struct Heartbeat {
    state: watch::Receiver<LeaseState>,
    task: JoinHandle<()>,
}

impl Lease {
    /// Starts heartbeating this lease (needs a Tokio runtime).
    pub fn keepalive(&self, client: &WorkerClient) -> Heartbeat {
        let (tx, rx) = watch::channel(LeaseState::Held {
            expires_at: self.expires_at,
        });
        let client = client.clone();
        let lease = self.clone();
        let every = Duration::from_millis(self.heartbeat_ms.max(10));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match client.heartbeat(&lease).await {
                    Ok(expires_at) => {
                        let _ = tx.send(LeaseState::Held { expires_at });
                    }
                    Err(e) if e.is_final() => {
                        tracing::warn!(lease_id = %lease.lease_id, code = e.code(), "lease lost: {e}");
                        let _ = tx.send(LeaseState::Lost);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(lease_id = %lease.lease_id, code = e.code(), "heartbeat failed, retrying: {e}");
                    }
                }
            }
        });
        Heartbeat { state: rx, task }
    }
}

impl Heartbeat {
    /// Whether the lease is known to be lost.
    pub fn lost(&self) -> bool {
        *self.state.borrow() == LeaseState::Lost
    }

    /// The current state.
    pub fn state(&self) -> LeaseState {
        self.state.borrow().clone()
    }

    /// A watch of the state, e.g. to `select!` the work against loss.
    pub fn watch(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// Resolves when the lease is lost (never, while it is held).
    pub async fn wait_lost(&self) {
        let mut rx = self.state.clone();
        if rx.wait_for(|s| *s == LeaseState::Lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}
