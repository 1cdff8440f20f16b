//! Scenario `pickup`: long-poll pickup latency, HTTP vs in-process.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_domain::{Kind, LeaseId, Principal};
use serde_json::json;

use crate::Target;
use crate::cycles::{complete_empty, enqueue_normal, in_process};
use crate::http::{Http, percentiles, ratio};
use crate::results::{Pickup, WakeCycles};

const SEXTANT: Principal = Principal::Worker(Kind::Sextant);

/// `muster-bench pickup`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    target: Target,
    #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: String,
    /// A worker kind with an empty queue (`worker:sextant`).
    #[arg(long, env = "MUSTER_BENCH_SEXTANT_TOKEN", hide_env_values = true)]
    worker_token: String,
    #[arg(long, default_value_t = 200)]
    repeats: usize,
}

pub(crate) async fn pickup(args: &Args) -> Result<Pickup> {
    let (target, repeats) = (&args.target, args.repeats);
    let (operator_token, worker_token) = (args.operator_token.as_str(), args.worker_token.as_str());
    let muster = in_process(&target.database_url)?;
    let http = Http::new(&target.url);
    let settle = Duration::from_millis(50);
    let enqueue_body =
        json!({"kind": "sextant", "priority": "normal", "payload": {"bench": "pickup"}});

    // In-process baseline: the same long poll and enqueue, without HTTP.
    let (local, local_missed) = time_pickups(
        repeats,
        settle,
        || {
            let m = muster.clone();
            tokio::spawn(async move {
                let granted = m.lease(SEXTANT, "bench-pickup", 5_000).await;
                let at = Instant::now();
                (
                    granted.map(|g| g.map(|g| g.lease_id)).map_err(Into::into),
                    at,
                )
            })
        },
        async || enqueue_sextant(&muster, "pickup").await,
        async |id: String| complete_sextant(&muster, &id).await,
    )
    .await?;

    let (remote, remote_missed) = time_pickups(
        repeats,
        settle,
        || long_poll(&http, worker_token),
        async || http.enqueue(operator_token, &enqueue_body).await.map(drop),
        async |id: String| {
            http.post(
                &format!("/v1/leases/{id}/complete"),
                worker_token,
                &json!({"result": {}}),
                None,
            )
            .await
            .map(drop)
        },
    )
    .await?;
    let local_p = percentiles(local);
    let remote_p = percentiles(remote);
    let r50 = ratio(
        remote_p.p50_ms.unwrap_or(0.0),
        local_p.p50_ms.unwrap_or(0.0),
    );
    let r99 = ratio(
        remote_p.p99_ms.unwrap_or(0.0),
        local_p.p99_ms.unwrap_or(0.0),
    );
    let (cross, cross_missed) = cross_replica(target, &http, worker_token, repeats).await?;
    let wake_cycles = wake_cycles(&target.database_url).await?;
    Ok(Pickup {
        cross_replica: percentiles(cross),
        cross_replica_missed: cross_missed,
        wake_cycles,
        http: remote_p,
        http_missed: remote_missed,
        in_process: local_p,
        in_process_missed: local_missed,
        p50_ratio: r50,
        p99_ratio: r99,
        repeats: Some(repeats as u64),
        scenario: "pickup".to_owned(),
        settle_ms: settle.as_millis() as u64,
    })
}

/// A replica of its own in this process on `database_url`, with its wake-up bridge running
/// when `wake`; the bridge's task is returned to be aborted.
async fn replica(
    database_url: &str,
    wake: bool,
) -> Result<(muster_app::Muster, Option<tokio::task::JoinHandle<()>>)> {
    let mut settings = muster::Settings::new(database_url);
    settings.peer_wake = wake;
    let app = muster::build(&settings)?;
    let bridge = app.wake.map(|w| tokio::spawn(w.run()));
    if bridge.is_some() {
        // Let the bridge connect and LISTEN before anything is measured.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok((app.state.muster.clone(), bridge))
}

/// The long poll over HTTP on the server, the item enqueued through another replica.
async fn cross_replica(
    target: &Target,
    http: &Http,
    worker_token: &str,
    repeats: usize,
) -> Result<(Vec<Duration>, u64)> {
    let (other, bridge) = replica(&target.database_url, true).await?;
    let took = time_pickups(
        repeats,
        Duration::from_millis(50),
        || long_poll(http, worker_token),
        async || enqueue_sextant(&other, "pickup-cross").await,
        async |id: String| complete_sextant(&other, &id).await,
    )
    .await;
    if let Some(b) = bridge {
        b.abort();
    }
    took
}

/// The lease id a long poll was granted, `None` when it ended without one, and when it ended.
type Granted = (Result<Option<String>>, Instant);

/// `repeats` times: a long poll started by `poll`, after `settle` an item enqueued by `enqueue`,
/// and the time from the enqueue to the grant taken; the lease granted is completed by
/// `complete`. The times, and how many polls ended without a lease.
async fn time_pickups(
    repeats: usize,
    settle: Duration,
    poll: impl Fn() -> tokio::task::JoinHandle<Granted>,
    enqueue: impl AsyncFn() -> Result<()>,
    complete: impl AsyncFn(String) -> Result<()>,
) -> Result<(Vec<Duration>, u64)> {
    let mut took = Vec::new();
    let mut missed = 0u64;
    for _ in 0..repeats {
        let waiter = poll();
        tokio::time::sleep(settle).await;
        let t0 = Instant::now();
        enqueue().await?;
        let (granted, t1) = waiter.await?;
        match granted? {
            Some(id) => {
                took.push(t1.saturating_duration_since(t0));
                complete(id).await?;
            }
            None => missed += 1,
        }
    }
    Ok((took, missed))
}

/// A sextant long poll of 5 s over HTTP, on a task of its own: the lease id when it answered
/// 200.
fn long_poll(http: &Http, worker_token: &str) -> tokio::task::JoinHandle<Granted> {
    let http = http.clone();
    let token = worker_token.to_owned();
    tokio::spawn(async move {
        let answer = http
            .post(
                "/v1/leases",
                &token,
                &json!({"worker_id": "bench-pickup", "wait_ms": 5000}),
                None,
            )
            .await;
        let at = Instant::now();
        let granted = answer.and_then(|(status, body)| {
            if status != 200 {
                return Ok(None);
            }
            let id = body["lease_id"].as_str().context("lease_id missing")?;
            Ok(Some(id.to_owned()))
        });
        (granted, at)
    })
}

/// Enqueues a normal sextant item in process, its payload `{"bench": bench}`.
async fn enqueue_sextant(m: &muster_app::Muster, bench: &str) -> Result<()> {
    enqueue_normal(m, Kind::Sextant, json!({ "bench": bench })).await
}

/// Completes a sextant lease in process with an empty result.
async fn complete_sextant(m: &muster_app::Muster, lease_id: &str) -> Result<()> {
    complete_empty(m, SEXTANT, LeaseId(lease_id.parse()?)).await
}

/// Enqueue→lease→complete cycles/s of an in-process replica with and without its wake-up
/// bridge, alternated.
async fn wake_cycles(database_url: &str) -> Result<WakeCycles> {
    const WORKERS: usize = 16;
    const SECONDS: u64 = 5;
    const RUNS: usize = 2;
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..RUNS {
        for wake in [true, false] {
            let (m, bridge) = replica(database_url, wake).await?;
            let rate = cycle_rate(&m, WORKERS, Duration::from_secs(SECONDS)).await?;
            if let Some(b) = bridge {
                b.abort();
            }
            if wake {
                with.push(rate)
            } else {
                without.push(rate)
            }
        }
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    Ok(WakeCycles {
        workers: WORKERS as u64,
        seconds_per_run: SECONDS,
        runs_each: RUNS as u64,
        with_wake_per_s: mean(&with),
        without_wake_per_s: mean(&without),
    })
}

/// `workers` tasks each enqueue a sextant item, lease one (no wait) and complete it, for
/// `length`: completed cycles per second.
async fn cycle_rate(m: &muster_app::Muster, workers: usize, length: Duration) -> Result<f64> {
    let started = Instant::now();
    let deadline = started + length;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let m = m.clone();
            tokio::spawn(async move {
                let worker = format!("bench-wake-{w}");
                let mut done = 0u64;
                while Instant::now() < deadline {
                    enqueue_sextant(&m, "wake-cycles").await?;
                    if let Some(g) = m.lease(SEXTANT, &worker, 0).await? {
                        complete_sextant(&m, &g.lease_id).await?;
                        done += 1;
                    }
                }
                anyhow::Ok(done)
            })
        })
        .collect();
    let mut total = 0u64;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
