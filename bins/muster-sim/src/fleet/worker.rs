//! One simulated worker: its loop of lease, work and deliver, its heartbeats, and the draining
//! of its spool.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use muster_domain::Kind;
use muster_worker::{Ack, ClientError, Lease, NextStep, Redelivery, RetryPolicy, WorkerClient};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{
    Deployed, FleetConfig, backoff, generation, image_digest, sleep_or_shutdown, spool_dir_name,
    unix_ms,
};
use crate::plan::{Action, SimPayload, decide, next_kind};
use crate::stats::{Stats, is_failover};

/// One simulated worker.
pub(super) struct Worker {
    kind: Kind,
    id: String,
    /// One client per replica, all spooling into the same directory.
    clients: Vec<WorkerClient>,
    current: AtomicUsize,
    stats: Stats,
    work_ms: u64,
    wait_ms: u64,
    deploy_every_ms: u64,
    deployed: Deployed,
}

impl Worker {
    pub(super) fn new(
        cfg: &FleetConfig,
        kind: Kind,
        n: usize,
        stats: &Stats,
        deployed: &Deployed,
    ) -> anyhow::Result<Worker> {
        let principal = format!("worker:{kind}");
        let token = cfg
            .tokens
            .get(&principal)
            .ok_or_else(|| anyhow::anyhow!("the tokens file has no token for {principal}"))?;
        let id = format!("{}.{}-{kind}-{n}", cfg.name, std::process::id());
        let dir = cfg.spool.join(spool_dir_name(kind, n));
        let one_attempt = RetryPolicy {
            max_attempts: Some(1),
            ..RetryPolicy::default()
        };
        let clients = cfg
            .urls
            .iter()
            .map(|url| {
                WorkerClient::new(url, token, kind.as_str(), &id, &dir)
                    .map(|c| c.with_retry(one_attempt.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Worker {
            kind,
            id,
            clients,
            // Spread the workers over the replicas.
            current: AtomicUsize::new(n),
            stats: stats.clone(),
            work_ms: cfg.work_ms,
            wait_ms: cfg.wait_ms,
            deploy_every_ms: cfg.deploy_every_ms,
            deployed: Arc::clone(deployed),
        })
    }

    /// The digest this worker runs: the image its process last saw deployed for its kind, or
    /// (before any report) the one the clock says is deployed. A worker running an image other
    /// than the deployed one has its park replayed at once (a rollout race), so the closer this
    /// is to the truth, the more parks wait for a digest report.
    fn digest(&self) -> String {
        let known = self
            .deployed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&self.kind)
            .copied();
        let generation = known.unwrap_or_else(|| generation(unix_ms(), self.deploy_every_ms));
        image_digest(self.kind, generation)
    }

    fn client(&self) -> &WorkerClient {
        &self.clients[self.current.load(Ordering::Relaxed) % self.clients.len()]
    }

    /// Counts an error answer and fails over when it says the replica is gone or unavailable.
    fn on_error(&self, op: &str, e: &ClientError) {
        self.stats.error(op, e);
        let last = match e {
            ClientError::Undelivered { last, .. } => last.as_ref(),
            other => other,
        };
        match last {
            ClientError::LeaseLost { .. } => self.stats.update(|s| s.lease_lost += 1),
            ClientError::Conflict { .. } => self.stats.update(|s| s.conflicts += 1),
            _ => {}
        }
        if is_failover(e) && self.clients.len() > 1 {
            self.current.fetch_add(1, Ordering::Relaxed);
            self.stats.update(|s| s.failovers += 1);
        }
    }

    fn on_ack(&self, op: &str, ack: &Ack) {
        self.stats.status(op, "200");
        self.stats.update(|s| match op {
            "complete" => {
                s.completes += 1;
                s.completes_replayed += u64::from(ack.replayed);
            }
            "fail" => s.fails += 1,
            _ => s.parks += 1,
        });
    }

    /// The loop: deliver what the spool still holds, then lease, work and deliver until shutdown.
    pub(super) async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        self.drain_spool(true, &mut shutdown).await;
        let mut errors = 0u32;
        loop {
            if *shutdown.borrow() {
                return;
            }
            let leased = tokio::select! {
                r = self.client().lease(self.wait_ms) => r,
                _ = shutdown.changed() => return,
            };
            match leased {
                Ok(Some(lease)) => {
                    errors = 0;
                    self.stats.status("lease", "200");
                    self.stats.update(|s| s.leases += 1);
                    Arc::clone(&self).handle(lease, &mut shutdown).await;
                }
                Ok(None) => {
                    errors = 0;
                    self.stats.status("lease", "204");
                }
                Err(e) => {
                    self.on_error("lease", &e);
                    errors += 1;
                    sleep_or_shutdown(backoff(errors), &mut shutdown).await;
                }
            }
        }
    }

    async fn handle(self: Arc<Self>, lease: Lease, shutdown: &mut watch::Receiver<bool>) {
        let payload: SimPayload = match serde_json::from_value(lease.item.payload.clone()) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(item = %lease.item.id, "not a simulation payload: {e}");
                let outcome = self
                    .client()
                    .fail(&lease, "E_SIM_PAYLOAD", "not a muster-sim payload", false)
                    .await;
                self.settle("fail", &lease.lease_id, outcome, shutdown)
                    .await;
                return;
            }
        };
        let action = decide(&payload.plan, self.kind, lease.fence);
        if action == Action::Crash {
            // A crash: no heartbeat, no result. The item comes back after the lease TTL.
            self.stats.update(|s| s.crashes += 1);
            return;
        }
        let keepalive = Keepalive::start(Arc::clone(&self), lease.clone());
        let work = Duration::from_millis(self.work_ms / 2 + rand::random_range(0..=self.work_ms));
        let mut lost = keepalive.lost.clone();
        tokio::select! {
            () = tokio::time::sleep(work) => {}
            _ = lost.wait_for(|l| *l) => {
                self.stats.update(|s| s.abandoned_lost += 1);
                return;
            }
        }
        let client = self.client().clone();
        let (op, outcome) = match action {
            Action::Park => {
                let digest = self.digest();
                let signature = format!("sim-layout-{}", payload.root);
                let detail = json!({"root": payload.root, "stage": self.kind});
                (
                    "needs_subtool",
                    client
                        .needs_subtool(&lease, &digest, &signature, detail)
                        .await,
                )
            }
            Action::FailFinal => (
                "fail",
                client
                    .fail(&lease, "E_SIM_PLANNED", "planned failure", false)
                    .await,
            ),
            Action::FailRetryable => (
                "fail",
                client
                    .fail(&lease, "E_SIM_FLAKY", "planned flaky failure", true)
                    .await,
            ),
            Action::Complete | Action::Crash => {
                let result = json!({"root": payload.root, "stage": self.kind, "worker": self.id});
                let next = next_kind(self.kind)
                    .map(|k| vec![NextStep::new(k.as_str(), lease.item.payload.clone())])
                    .unwrap_or_default();
                ("complete", client.complete(&lease, result, next).await)
            }
        };
        self.settle(op, &lease.lease_id, outcome, shutdown).await;
        drop(keepalive);
    }

    /// Retries a spooled delivery until it gets a final answer (or shutdown: it stays spooled).
    async fn settle(
        &self,
        op: &str,
        lease_id: &str,
        mut outcome: Result<Ack, ClientError>,
        shutdown: &mut watch::Receiver<bool>,
    ) {
        let mut attempt = 0u32;
        loop {
            match outcome {
                Ok(ack) => return self.on_ack(op, &ack),
                Err(e) => {
                    self.on_error(op, &e);
                    if !matches!(e, ClientError::Undelivered { .. }) || e.is_final() {
                        return;
                    }
                }
            }
            attempt += 1;
            if !sleep_or_shutdown(backoff(attempt), shutdown).await {
                return;
            }
            outcome = match self.redeliver(Some(lease_id)).await {
                Some(outcome) => outcome,
                None => {
                    tracing::warn!(lease_id, worker = %self.id, "the spooled delivery is gone");
                    return;
                }
            };
        }
    }

    /// Sends every file of this worker's spool once; the outcome for `lease_id`'s file, the
    /// others counted here.
    async fn redeliver(&self, lease_id: Option<&str>) -> Option<Result<Ack, ClientError>> {
        let files = match self.client().redeliver_spool().await {
            Ok(files) => files,
            Err(e) => return Some(Err(e)),
        };
        let mut mine = None;
        for Redelivery { file, outcome } in files {
            let name = spool_file_name(&file);
            if lease_id.is_some_and(|id| name.starts_with(&format!("{id}."))) {
                mine = Some(outcome);
                continue;
            }
            let op = spool_file_op(&name);
            match &outcome {
                Ok(ack) => self.on_ack(op, ack),
                Err(e) => self.on_error(op, e),
            }
        }
        mine
    }

    /// Delivers what a previous process left in the spool, retrying until every file got a
    /// final answer (or shutdown).
    pub(super) async fn drain_spool(
        &self,
        count_as_redelivered: bool,
        shutdown: &mut watch::Receiver<bool>,
    ) {
        let mut attempt = 0u32;
        loop {
            let files = match self.client().redeliver_spool().await {
                Ok(files) => files,
                Err(e) => {
                    tracing::warn!(worker = %self.id, "cannot read the spool: {e}");
                    return;
                }
            };
            if files.is_empty() {
                return;
            }
            let mut pending = false;
            for Redelivery { file, outcome } in files {
                let name = spool_file_name(&file);
                let op = spool_file_op(&name);
                match outcome {
                    Ok(ack) => {
                        self.on_ack(op, &ack);
                        if count_as_redelivered {
                            self.stats.update(|s| s.redelivered_from_spool += 1);
                        }
                    }
                    Err(e) => {
                        self.on_error(op, &e);
                        if e.is_final() && count_as_redelivered {
                            self.stats.update(|s| s.redelivered_from_spool += 1);
                        }
                        pending |= matches!(e, ClientError::Undelivered { .. });
                    }
                }
            }
            if !pending {
                return;
            }
            attempt += 1;
            if !sleep_or_shutdown(backoff(attempt), shutdown).await {
                return;
            }
        }
    }
}

/// The name of a spool file, without its folder.
fn spool_file_name(file: &std::path::Path) -> String {
    file.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The operation of a spool file `<lease>.<action>.json`.
pub(super) fn spool_file_op(name: &str) -> &'static str {
    if name.ends_with(".complete.json") {
        "complete"
    } else if name.ends_with(".fail.json") {
        "fail"
    } else {
        "needs_subtool"
    }
}

/// Heartbeats a lease from a task, counting every answer, until dropped or lost.
struct Keepalive {
    lost: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Keepalive {
    fn start(worker: Arc<Worker>, lease: Lease) -> Keepalive {
        let (tx, rx) = watch::channel(false);
        let every = Duration::from_millis(lease.heartbeat_ms.max(50));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match worker.client().heartbeat(&lease).await {
                    Ok(_) => {
                        worker.stats.status("heartbeat", "200");
                        worker.stats.update(|s| s.heartbeats += 1);
                    }
                    Err(e) => {
                        worker.on_error("heartbeat", &e);
                        if e.is_final() {
                            let _ = tx.send(true);
                            return;
                        }
                    }
                }
            }
        });
        Keepalive { lost: rx, task }
    }
}

impl Drop for Keepalive {
    fn drop(&mut self) {
        self.task.abort();
    }
}
