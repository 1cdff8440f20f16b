//! Counters of what the use cases did, per worker kind. Plain atomics: the transport exports
//! them (Prometheus), this crate knows no exporter.

use std::sync::atomic::{AtomicU64, Ordering};

use muster_domain::Kind;

/// One counter per kind.
#[derive(Debug, Default)]
pub struct PerKind([AtomicU64; 10]);

impl PerKind {
    fn index(kind: Kind) -> usize {
        Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
    }

    pub fn add(&self, kind: Kind, n: u64) {
        self.0[Self::index(kind)].fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, kind: Kind) -> u64 {
        self.0[Self::index(kind)].load(Ordering::Relaxed)
    }
}

/// What the use cases counted since the process started.
#[derive(Debug, Default)]
pub struct Stats {
    pub enqueued: PerKind,
    pub leased: PerKind,
    pub completed: PerKind,
    /// Failures reported by workers (re-queued or final).
    pub failed: PerKind,
    /// Items that reached `failed` (attempts exhausted or final failure).
    pub failed_final: PerKind,
    pub parked: PerKind,
    pub replayed: PerKind,
    /// Completions delivered under a superseded lease (recorded, not applied).
    pub late_results: PerKind,
    /// Leases that passed their kind's maximum run time while their worker kept them alive.
    pub timed_out: PerKind,
    /// Group commit: transactions that wrote grouped single lease requests, and the requests
    /// they carried (requests / batches is the mean group size).
    pub lease_groups: PerKind,
    pub lease_group_requests: PerKind,
    /// The same for grouped single completions.
    pub completion_groups: PerKind,
    pub completion_group_requests: PerKind,
    /// Transactions of several completions (a group, or a `POST /v1/completions` batch) that
    /// failed for a reason other than an unreachable Logbook and were redone one completion
    /// per transaction.
    pub completion_splits: PerKind,
}
