//! One simulated worker: a `muster_worker::Runner` of one kind with concurrency 1, whose worker
//! function plays the item's plan (complete, fail, park or crash), and whose every answer is
//! counted in the process's [`Stats`].

use std::sync::Arc;
use std::time::Duration;

use muster_domain::Kind;
use muster_worker::{
    AnswerHook, ClientError, Lease, NextStep, Outcome, RetryPolicy, Runner, is_gone,
};
use serde_json::json;

use super::{Deployed, FleetConfig, generation, image_digest, spool_dir_name, unix_ms};
use crate::plan::{Action, SimPayload, decide, next_kind};
use crate::stats::Stats;

/// The retries of the fleet's leases and deliveries: 100 ms doubling to 2 s, with jitter.
fn fleet_retry() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(100),
        factor: 2,
        cap: Duration::from_secs(2),
        max_attempts: None,
    }
}

/// How long in-flight items may finish after the fleet is told to stop (the process gives the
/// whole fleet 10 s).
const GRACE: Duration = Duration::from_secs(5);

/// The runner of worker `n` of `kind`, spooling into `<spool>/<kind>-<n>`; it starts on replica
/// `n` (modulo their number) and fails over in turn.
pub(super) fn runner(
    cfg: &FleetConfig,
    kind: Kind,
    n: usize,
    stats: &Stats,
    deployed: &Deployed,
) -> anyhow::Result<Runner> {
    let principal = format!("worker:{kind}");
    let token = cfg
        .tokens
        .get(&principal)
        .ok_or_else(|| anyhow::anyhow!("the tokens file has no token for {principal}"))?;
    let id = format!("{}.{}-{kind}-{n}", cfg.name, std::process::id());
    let mut urls = cfg.urls.clone();
    let first = n % urls.len();
    urls.rotate_left(first);
    let deployed = Arc::clone(deployed);
    let every_ms = cfg.deploy_every_ms;
    let runner = Runner::builder(&urls[0], token, kind.as_str())
        .worker_id(id)
        .spool_dir(cfg.spool.join(spool_dir_name(kind, n)))
        .concurrency(1)
        .wait_ms(cfg.wait_ms)
        .retry(fleet_retry())
        .grace(GRACE)
        .failover(urls)
        .answer_hook(answer_hook(stats.clone(), cfg.urls.len() > 1))
        .image_digest_from(move || digest(kind, &deployed, every_ms))
        .build()?;
    Ok(runner)
}

/// The digest a worker of `kind` runs: the image its process last saw deployed for its kind,
/// or (before any report) the one the clock says is deployed. A worker running an image other
/// than the deployed one has its park replayed at once (a rollout race), so the closer this
/// is to the truth, the more parks wait for a digest report.
fn digest(kind: Kind, deployed: &Deployed, every_ms: u64) -> String {
    let known = deployed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&kind)
        .copied();
    let generation = known.unwrap_or_else(|| generation(unix_ms(), every_ms));
    image_digest(kind, generation)
}

/// Counts every answer: its status by operation, acknowledgements, lease losses, conflicts,
/// failovers; flags the answers no client should get.
pub(super) fn answer_hook(stats: Stats, replicas: bool) -> AnswerHook {
    Arc::new(move |op, answer| match answer {
        Ok((status, body)) => {
            stats.status(op, &status.to_string());
            if status != 200 {
                return;
            }
            let ack = (op == "complete")
                .then(|| serde_json::from_slice::<serde_json::Value>(body).ok())
                .flatten();
            let replayed = ack.as_ref().is_some_and(|b| b["replayed"] == json!(true));
            if let Some(b) = &ack
                && let (Some(item), Some(seq)) = (b["item_id"].as_str(), b["ledger_seq"].as_i64())
            {
                stats.ack(item, seq);
            }
            stats.update(|s| match op {
                "lease" => s.leases += 1,
                "heartbeat" => s.heartbeats += 1,
                "complete" => {
                    s.completes += 1;
                    s.completes_replayed += u64::from(replayed);
                }
                "fail" => s.fails += 1,
                "needs_subtool" => s.parks += 1,
                _ => {}
            });
        }
        Err(e) => {
            stats.error(op, e);
            match e {
                ClientError::LeaseLost { .. } => stats.update(|s| s.lease_lost += 1),
                ClientError::Conflict { .. } => stats.update(|s| s.conflicts += 1),
                _ => {}
            }
            if replicas && is_gone(e) {
                stats.update(|s| s.failovers += 1);
            }
        }
    })
}

/// The worker function: plays the plan the item's payload carries.
pub(super) struct SimWorker {
    pub(super) kind: Kind,
    pub(super) id: String,
    pub(super) work_ms: u64,
}

impl muster_worker::Worker for SimWorker {
    async fn perform(&self, lease: Lease) -> Outcome {
        let payload: SimPayload = match serde_json::from_value(lease.item.payload.clone()) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(item = %lease.item.id, "not a simulation payload: {e}");
                return Outcome::fail("E_SIM_PAYLOAD", "not a muster-sim payload");
            }
        };
        let action = decide(&payload.plan, self.kind, lease.fence);
        if action == Action::Crash {
            // A crash: no result, no more heartbeats. The item comes back after the lease TTL.
            return Outcome::Abandon;
        }
        let work = Duration::from_millis(self.work_ms / 2 + rand::random_range(0..=self.work_ms));
        tokio::time::sleep(work).await;
        match action {
            Action::Park => Outcome::needs_subtool(
                format!("sim-layout-{}", payload.root),
                json!({"root": payload.root, "stage": self.kind}),
            ),
            Action::FailFinal => Outcome::fail("E_SIM_PLANNED", "planned failure"),
            Action::FailRetryable => Outcome::retry("E_SIM_FLAKY", "planned flaky failure"),
            Action::Complete | Action::Crash => {
                let result = json!({"root": payload.root, "stage": self.kind, "worker": self.id});
                let next = next_kind(self.kind)
                    .map(|k| vec![NextStep::new(k.as_str(), lease.item.payload.clone())])
                    .unwrap_or_default();
                Outcome::done_then(result, next)
            }
        }
    }
}
