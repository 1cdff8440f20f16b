//! Counters a worker author can export (to Prometheus, logs, a health endpoint).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The runner's counters; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Counters>,
    spool: PathBuf,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) leased: AtomicU64,
    pub(crate) leased_with_completion: AtomicU64,
    pub(crate) done: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) parked: AtomicU64,
    pub(crate) panicked: AtomicU64,
    pub(crate) lost_leases: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) redelivered: AtomicU64,
    pub(crate) undelivered: AtomicU64,
    pub(crate) in_flight: AtomicU64,
}

/// The counters at one moment. All but `in_flight` and `spool_depth` only grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// Leases taken.
    pub leased: u64,
    /// Of `leased`, those that came in a completion's answer (`lease_next`) rather than from
    /// a lease call.
    pub leased_with_completion: u64,
    /// Items completed (acknowledged `complete`, replays included).
    pub done: u64,
    /// Retryable failures acknowledged with a re-queue (panics included); one answered
    /// `failed` (the item's last attempt) counts in `failed` instead.
    pub retried: u64,
    /// Items failed for good: final failures, and retryable ones on the item's last attempt.
    pub failed: u64,
    /// `needs_subtool` parks acknowledged.
    pub parked: u64,
    /// Panics of the worker function or of the image digest source (each delivered as a
    /// retryable failure, so also counted in `retried` or `failed`).
    pub panicked: u64,
    /// Leases lost: the work was cancelled, or the delivery was answered `E_LEASE_LOST`.
    pub lost_leases: u64,
    /// Work cancelled because its lease was lost (also in `lost_leases`).
    pub cancelled: u64,
    /// Spool files acknowledged on redelivery (at start, or by the periodic redelivery while
    /// running); one refused is logged, not counted here.
    pub redelivered: u64,
    /// Items the worker function answered [`Outcome::Abandon`](super::Outcome::Abandon).
    pub abandoned: u64,
    /// Outcomes not delivered (refused for good other than lease loss, or left in the spool
    /// by an answer outside the contract).
    pub undelivered: u64,
    /// Items being worked on or delivered now.
    pub in_flight: u64,
    /// Files in the spool directory now: outcomes written and not yet acknowledged.
    pub spool_depth: u64,
}

impl Metrics {
    pub(crate) fn new(spool: PathBuf) -> Metrics {
        Metrics {
            inner: Arc::default(),
            spool,
        }
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.inner
    }

    /// The counters now (`spool_depth` lists the spool directory).
    pub fn snapshot(&self) -> MetricsSnapshot {
        let c = &self.inner;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            leased: get(&c.leased),
            leased_with_completion: get(&c.leased_with_completion),
            done: get(&c.done),
            retried: get(&c.retried),
            failed: get(&c.failed),
            parked: get(&c.parked),
            panicked: get(&c.panicked),
            lost_leases: get(&c.lost_leases),
            abandoned: get(&c.abandoned),
            cancelled: get(&c.cancelled),
            redelivered: get(&c.redelivered),
            undelivered: get(&c.undelivered),
            in_flight: get(&c.in_flight),
            spool_depth: crate::spool::list(&self.spool)
                .map(|files| files.len() as u64)
                .unwrap_or(0),
        }
    }
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
