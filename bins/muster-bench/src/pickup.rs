//! Scenario `pickup`: long-poll pickup latency, HTTP vs in-process.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_app::views::{CompleteRequest, EnqueueRequest};
use muster_domain::{Kind, LeaseId, Principal, Priority};
use serde_json::json;

use crate::Target;
use crate::cycles::in_process;
use crate::http::{Http, percentiles, ratio};
use crate::results::{Pickup, WakeCycles};

const SEXTANT: Principal = Principal::Worker(Kind::Sextant);

pub(crate) async fn pickup(
    target: &Target,
    operator_token: &str,
    worker_token: &str,
    repeats: usize,
) -> Result<Pickup> {
    let muster = in_process(&target.database_url)?;
    let http = Http::new(&target.url);
    let settle = Duration::from_millis(50);
    let enqueue_body =
        json!({"kind": "sextant", "priority": "normal", "payload": {"bench": "pickup"}});

    // In-process baseline: the same long poll and enqueue, without HTTP.
    let mut local = Vec::new();
    let mut local_missed = 0u64;
    for _ in 0..repeats {
        let m = muster.clone();
        let waiter = tokio::spawn(async move {
            let granted = m.lease(SEXTANT, "bench-pickup", 5_000).await;
            (granted, Instant::now())
        });
        tokio::time::sleep(settle).await;
        let t0 = Instant::now();
        muster
            .enqueue(
                Principal::Operator,
                EnqueueRequest {
                    kind: Kind::Sextant,
                    priority: Priority::Normal,
                    payload: json!({"bench": "pickup"}),
                    idempotency_key: None,
                },
            )
            .await?;
        let (granted, t1) = waiter.await?;
        match granted? {
            Some(g) => {
                local.push(t1.saturating_duration_since(t0));
                muster
                    .complete(
                        SEXTANT,
                        LeaseId(g.lease_id.parse()?),
                        CompleteRequest {
                            result: json!({}),
                            next: vec![],
                            worker_id: None,
                        },
                    )
                    .await?;
            }
            None => local_missed += 1,
        }
    }

    let mut remote = Vec::new();
    let mut remote_missed = 0u64;
    for _ in 0..repeats {
        let h = http.clone();
        let token = worker_token.to_owned();
        let waiter = tokio::spawn(async move {
            let r = h
                .post(
                    "/v1/leases",
                    &token,
                    &json!({"worker_id": "bench-pickup", "wait_ms": 5000}),
                    None,
                )
                .await;
            (r, Instant::now())
        });
        tokio::time::sleep(settle).await;
        let t0 = Instant::now();
        http.enqueue(operator_token, &enqueue_body).await?;
        let (r, t1) = waiter.await?;
        let (status, body) = r?;
        if status == 200 {
            remote.push(t1.saturating_duration_since(t0));
            let id = body["lease_id"].as_str().context("lease_id missing")?;
            http.post(
                &format!("/v1/leases/{id}/complete"),
                worker_token,
                &json!({"result": {}}),
                None,
            )
            .await?;
        } else {
            remote_missed += 1;
        }
    }
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
    let settle = Duration::from_millis(50);
    let mut took = Vec::new();
    let mut missed = 0u64;
    for _ in 0..repeats {
        let h = http.clone();
        let token = worker_token.to_owned();
        let waiter = tokio::spawn(async move {
            let r = h
                .post(
                    "/v1/leases",
                    &token,
                    &json!({"worker_id": "bench-pickup", "wait_ms": 5000}),
                    None,
                )
                .await;
            (r, Instant::now())
        });
        tokio::time::sleep(settle).await;
        let t0 = Instant::now();
        other
            .enqueue(
                Principal::Operator,
                EnqueueRequest {
                    kind: Kind::Sextant,
                    priority: Priority::Normal,
                    payload: json!({"bench": "pickup-cross"}),
                    idempotency_key: None,
                },
            )
            .await?;
        let (r, t1) = waiter.await?;
        let (status, body) = r?;
        if status == 200 {
            took.push(t1.saturating_duration_since(t0));
            let id = body["lease_id"].as_str().context("lease_id missing")?;
            other
                .complete(
                    SEXTANT,
                    LeaseId(id.parse()?),
                    CompleteRequest {
                        result: json!({}),
                        next: vec![],
                        worker_id: None,
                    },
                )
                .await?;
        } else {
            missed += 1;
        }
    }
    if let Some(b) = bridge {
        b.abort();
    }
    Ok((took, missed))
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
                    m.enqueue(
                        Principal::Operator,
                        EnqueueRequest {
                            kind: Kind::Sextant,
                            priority: Priority::Normal,
                            payload: json!({"bench": "wake-cycles"}),
                            idempotency_key: None,
                        },
                    )
                    .await?;
                    if let Some(g) = m.lease(SEXTANT, &worker, 0).await? {
                        m.complete(
                            SEXTANT,
                            LeaseId(g.lease_id.parse()?),
                            CompleteRequest {
                                result: json!({}),
                                next: vec![],
                                worker_id: None,
                            },
                        )
                        .await?;
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
