//! The simulated fleet: N workers over the ten kinds, each a `muster_worker::Runner` (the worker
//! runtime) whose worker function plays the item's plan; plus a Shipkeeper that reports a new
//! worker image per kind on a fixed period, which replays parked items.
//!
//! Every worker has its own spool directory (`<spool>/<kind>-<n>`, locked by its runner), so a
//! killed and restarted process finds each delivery it had spooled and sends it first. Every
//! answer, retries included, is counted through the client's answer hook; the client fails over
//! to the next replica after no answer or a `503`.

mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::Method;
use muster_domain::Kind;
use muster_worker::ClientError;
use muster_worker::runtime::{Metrics, ShutdownHandle};
use serde_json::json;
use tokio::sync::watch;

use crate::api::Api;
use crate::stats::Stats;
use worker::SimWorker;

/// Principal → plain token, as read from the tokens file.
pub type Tokens = BTreeMap<String, String>;

/// How a fleet runs.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// One base URL per replica.
    pub urls: Vec<String>,
    pub tokens: Tokens,
    /// The spool root; each worker spools into `<spool>/<kind>-<n>`.
    pub spool: PathBuf,
    /// Prefix of worker ids (`<name>.<pid>-<kind>-<n>`).
    pub name: String,
    /// Workers in all, dealt to `kinds` in turn.
    pub workers: usize,
    pub kinds: Vec<Kind>,
    /// Mean simulated work per item (uniform in [½, 1½] of it).
    pub work_ms: u64,
    /// Long-poll wait of each lease request.
    pub wait_ms: u64,
    /// Report worker digests as Shipkeeper (needs a `shipkeeper` token).
    pub shipkeeper: bool,
    /// A new worker image per kind is "deployed" every this many ms.
    pub deploy_every_ms: u64,
}

/// `sha256:<hex>` of the simulated worker image of `kind` in generation `generation`.
pub fn image_digest(kind: Kind, generation: u64) -> String {
    let hash = blake3::hash(format!("muster-sim/{kind}/image/{generation}").as_bytes());
    format!("sha256:{}", hash.to_hex())
}

/// The image generation deployed at `unix_ms`: one per `every_ms`, the same in every process.
pub fn generation(unix_ms: u64, every_ms: u64) -> u64 {
    unix_ms / every_ms.max(1)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Jittered exponential backoff: 100 ms doubling to 2 s, in [½, 1] of that.
pub fn backoff(attempt: u32) -> Duration {
    let full = 100u64
        .saturating_mul(1 << attempt.saturating_sub(1).min(5))
        .min(2_000);
    Duration::from_millis(full / 2 + rand::random_range(0..=full / 2))
}

/// How often the Shipkeeper task looks at the clock.
fn shipkeeper_tick(every_ms: u64) -> Duration {
    Duration::from_millis((every_ms / 10).clamp(20, 200))
}

/// The name of a worker's spool directory.
pub fn spool_dir_name(kind: Kind, n: usize) -> String {
    format!("{kind}-{n}")
}

/// `<kind>-<n>` back to its parts.
pub fn parse_spool_dir_name(name: &str) -> Option<(Kind, usize)> {
    let (kind, n) = name.rsplit_once('-')?;
    Some((kind.parse().ok()?, n.parse().ok()?))
}

/// Sleeps `d` unless shutdown comes first; whether it slept the whole time.
async fn sleep_or_shutdown(d: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    if *shutdown.borrow() {
        return false;
    }
    tokio::select! {
        () = tokio::time::sleep(d) => true,
        _ = shutdown.changed() => false,
    }
}

/// The image generation per kind this process last saw deployed (its own Shipkeeper's reports).
type Deployed = Arc<std::sync::Mutex<BTreeMap<Kind, u64>>>;

/// Reports a new image digest for every kind once per `deploy_every_ms`; parked items of a kind
/// are replayed by the report.
async fn shipkeeper(
    api: Api,
    kinds: Vec<Kind>,
    every_ms: u64,
    stats: Stats,
    known: Deployed,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut deployed: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut errors = 0u32;
    loop {
        let generation = generation(unix_ms(), every_ms);
        for kind in &kinds {
            if deployed.get(kind) == Some(&generation) {
                continue;
            }
            let body = json!({"digest": image_digest(*kind, generation)});
            match api
                .call(
                    Method::PUT,
                    &format!("/v1/workers/{kind}/digest"),
                    Some(&body),
                )
                .await
            {
                Ok(answer) if answer.status == 200 => {
                    errors = 0;
                    stats.status("digest", "200");
                    let replayed = answer.body["replayed"].as_u64().unwrap_or(0);
                    stats.update(|s| {
                        s.digests_reported += 1;
                        s.replayed_by_digest += replayed;
                    });
                    deployed.insert(*kind, generation);
                    known
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(*kind, generation);
                }
                Ok(answer) => {
                    let status = answer.status.to_string();
                    stats.status("digest", &status);
                    if answer.status == 503 {
                        api.failover();
                    } else {
                        stats.flag(
                            "digest",
                            &status,
                            answer.code(),
                            &answer.body.to_string(),
                            answer.status >= 500,
                        );
                    }
                    errors += 1;
                    break;
                }
                Err(e) => {
                    stats.status("digest", e.status());
                    api.failover();
                    errors += 1;
                    break;
                }
            }
        }
        let wait = if errors > 0 {
            backoff(errors)
        } else {
            shipkeeper_tick(every_ms)
        };
        if !sleep_or_shutdown(wait, &mut shutdown).await {
            return;
        }
    }
}

/// Worker spool directories under `spool` that no current worker owns (a previous process ran
/// more workers); their files are delivered at start.
fn orphan_dirs(spool: &Path, owned: &[(Kind, usize)]) -> Vec<(Kind, usize)> {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return Vec::new();
    };
    let mut orphans: Vec<(Kind, usize)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| parse_spool_dir_name(&e.file_name().to_string_lossy()))
        .filter(|dir| !owned.contains(dir))
        .collect();
    orphans.sort();
    orphans
}

/// Copies the runners' own counters (spool files redelivered at start, planned crashes, work
/// dropped on a lost lease) into the process's stats.
fn copy_runner_counts(stats: &Stats, runners: &[Metrics], orphaned: &AtomicU64) {
    let (mut redelivered, mut crashes, mut lost) = (orphaned.load(Ordering::Relaxed), 0, 0);
    for m in runners.iter().map(Metrics::snapshot) {
        redelivered += m.redelivered;
        crashes += m.abandoned;
        lost += m.cancelled;
    }
    stats.update(|s| {
        s.redelivered_from_spool = redelivered;
        s.crashes = crashes;
        s.abandoned_lost = lost;
    });
}

/// Runs the fleet until `shutdown` becomes true, then gives the workers their grace to put down
/// what they hold (a delivery in flight stays spooled).
pub async fn run(
    cfg: FleetConfig,
    stats: Stats,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    anyhow::ensure!(!cfg.urls.is_empty(), "at least one --url is needed");
    anyhow::ensure!(!cfg.kinds.is_empty(), "at least one kind is needed");
    std::fs::create_dir_all(&cfg.spool)?;
    let deployed = Deployed::default();
    let mut owned = Vec::new();
    let mut runners = Vec::new();
    for n in 0..cfg.workers.max(cfg.kinds.len()) {
        let kind = cfg.kinds[n % cfg.kinds.len()];
        let slot = n / cfg.kinds.len();
        owned.push((kind, slot));
        let runner = worker::runner(&cfg, kind, slot, &stats, &deployed)?;
        runners.push((kind, runner));
    }
    // Spool directories of workers this process does not run: each locked by a runner whose
    // client only redelivers them.
    let mut orphans = Vec::new();
    for (kind, slot) in orphan_dirs(&cfg.spool, &owned) {
        orphans.push((kind, worker::runner(&cfg, kind, slot, &stats, &deployed)?));
    }
    let metrics: Vec<Metrics> = runners.iter().map(|(_, r)| r.metrics()).collect();
    let handles: Vec<ShutdownHandle> = runners.iter().map(|(_, r)| r.shutdown_handle()).collect();
    let orphaned = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    if cfg.shipkeeper {
        let token = cfg
            .tokens
            .get("shipkeeper")
            .ok_or_else(|| anyhow::anyhow!("--shipkeeper needs a `shipkeeper` token"))?;
        let api = Api::new(&cfg.urls, token)?;
        tasks.push(tokio::spawn(shipkeeper(
            api,
            cfg.kinds.clone(),
            cfg.deploy_every_ms,
            stats.clone(),
            Arc::clone(&deployed),
            shutdown.clone(),
        )));
    }
    tracing::info!(workers = runners.len(), orphans = orphans.len(), urls = ?cfg.urls, spool = %cfg.spool.display(), "fleet running");
    for (_, runner) in orphans {
        let (mut stop, counted) = (shutdown.clone(), Arc::clone(&orphaned));
        tasks.push(tokio::spawn(async move {
            let files = tokio::select! {
                files = runner.client().redeliver_spool() => files,
                _ = stop.wait_for(|s| *s) => return,
            };
            for r in files.into_iter().flatten() {
                if r.outcome
                    .as_ref()
                    .map_or_else(ClientError::is_final, |_| true)
                {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let mut runs = Vec::new();
    for (kind, runner) in runners {
        let sim = SimWorker {
            kind,
            id: runner.client().worker_id().to_owned(),
            work_ms: cfg.work_ms,
        };
        runs.push(tokio::spawn(runner.run(sim)));
    }
    // The runners' counters, every 200 ms until the stop.
    loop {
        copy_runner_counts(&stats, &metrics, &orphaned);
        if !sleep_or_shutdown(Duration::from_millis(200), &mut shutdown).await {
            break;
        }
    }
    for handle in &handles {
        handle.shutdown();
    }
    for run in runs {
        if let Ok(Err(e)) = run.await {
            tracing::warn!(code = e.code(), "a worker stopped with an error: {e}");
        }
    }
    for task in tasks {
        let _ = task.await;
    }
    copy_runner_counts(&stats, &metrics, &orphaned);
    Ok(())
}

#[cfg(test)]
mod tests;
