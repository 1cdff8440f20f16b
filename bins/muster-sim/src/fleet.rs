//! The simulated fleet: N workers over the ten kinds, each a loop of lease, work, deliver, built
//! on `muster-worker`; plus a Shipkeeper that reports a new worker image per kind on a fixed
//! period, which replays parked items.
//!
//! Every worker has its own spool directory (`<spool>/<kind>-<n>`), so a killed and restarted
//! process finds each delivery it had spooled and sends it first. Deliveries are made one POST at
//! a time (`RetryPolicy::max_attempts = 1`) and retried here, so that every answer is seen and
//! counted, and so that a retry can go to the other replica.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::Method;
use muster_domain::Kind;
use muster_worker::{Ack, ClientError, Lease, NextStep, Redelivery, RetryPolicy, WorkerClient};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::Api;
use crate::plan::{Action, SimPayload, decide, next_kind};
use crate::stats::{Stats, is_failover};

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

/// One simulated worker.
struct Worker {
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
    fn new(
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
    async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
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
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
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
    async fn drain_spool(&self, count_as_redelivered: bool, shutdown: &mut watch::Receiver<bool>) {
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
                let name = file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
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

/// The operation of a spool file `<lease>.<action>.json`.
fn spool_file_op(name: &str) -> &'static str {
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

/// Runs the fleet until `shutdown` becomes true, then waits for the workers to put down what
/// they hold (a delivery in flight stays spooled).
pub async fn run(
    cfg: FleetConfig,
    stats: Stats,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    anyhow::ensure!(!cfg.urls.is_empty(), "at least one --url is needed");
    anyhow::ensure!(!cfg.kinds.is_empty(), "at least one kind is needed");
    std::fs::create_dir_all(&cfg.spool)?;
    let deployed = Deployed::default();
    let mut owned = Vec::new();
    let mut workers = Vec::new();
    for n in 0..cfg.workers.max(cfg.kinds.len()) {
        let kind = cfg.kinds[n % cfg.kinds.len()];
        let slot = n / cfg.kinds.len();
        owned.push((kind, slot));
        workers.push(Arc::new(Worker::new(&cfg, kind, slot, &stats, &deployed)?));
    }
    let mut tasks = Vec::new();
    for (kind, slot) in orphan_dirs(&cfg.spool, &owned) {
        let orphan = Worker::new(&cfg, kind, slot, &stats, &deployed)?;
        let mut rx = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            orphan.drain_spool(true, &mut rx).await;
        }));
    }
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
    tracing::info!(workers = workers.len(), urls = ?cfg.urls, spool = %cfg.spool.display(), "fleet running");
    for worker in workers {
        tasks.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    for task in tasks {
        let _ = task.await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_digests_are_valid_and_differ_by_kind_and_generation() {
        let d = image_digest(Kind::Assay, 7);
        assert_eq!(d.len(), "sha256:".len() + 64);
        assert!(d.starts_with("sha256:"));
        assert!(
            d[7..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(d, image_digest(Kind::Assay, 7));
        assert_ne!(d, image_digest(Kind::Assay, 8));
        assert_ne!(d, image_digest(Kind::Waybill, 7));
    }

    #[test]
    fn generations_advance_once_per_period() {
        assert_eq!(generation(0, 2_000), 0);
        assert_eq!(generation(1_999, 2_000), 0);
        assert_eq!(generation(2_000, 2_000), 1);
        assert_eq!(generation(7_000, 0), 7_000);
    }

    #[test]
    fn backoff_doubles_from_100_ms_to_a_2_s_cap_with_jitter() {
        for (attempt, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (5, 1_600),
            (6, 2_000),
            (30, 2_000),
        ] {
            let d = backoff(attempt).as_millis() as u64;
            assert!((full / 2..=full).contains(&d), "attempt {attempt}: {d} ms");
        }
    }

    #[test]
    fn spool_directory_names_round_trip() {
        assert_eq!(spool_dir_name(Kind::Countersign, 3), "countersign-3");
        assert_eq!(
            parse_spool_dir_name("countersign-3"),
            Some((Kind::Countersign, 3))
        );
        assert_eq!(parse_spool_dir_name("nonsense-3"), None);
        assert_eq!(parse_spool_dir_name("trawl"), None);
    }

    #[test]
    fn spool_files_name_their_operation() {
        assert_eq!(spool_file_op("0192-a.complete.json"), "complete");
        assert_eq!(spool_file_op("0192-a.fail.json"), "fail");
        assert_eq!(spool_file_op("0192-a.needs_subtool.json"), "needs_subtool");
    }

    #[test]
    fn orphan_spool_dirs_are_those_no_current_worker_owns() {
        let root = std::env::temp_dir().join(format!("muster-sim-orphans-{}", std::process::id()));
        for d in ["trawl-0", "trawl-1", "assay-0", "junk"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let owned = [(Kind::Trawl, 0), (Kind::Assay, 0)];
        assert_eq!(orphan_dirs(&root, &owned), vec![(Kind::Trawl, 1)]);
        std::fs::remove_dir_all(root).unwrap();
    }
}
