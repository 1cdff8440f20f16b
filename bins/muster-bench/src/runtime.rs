//! Scenario `runtime`: the worker runtime's overhead. The same `trawl` items are drained by
//! the bare client loop (`WorkerClient::lease` then `complete`, one item at a time per task,
//! `--concurrency` tasks) and by a `muster_worker::Runner` of the same concurrency whose worker
//! function answers `done` at once (it leases with `max` up to its free slots). Both spool every
//! outcome with fsync before sending it. Before each run `--items` items are enqueued through
//! `POST /v1/items`; a run ends when they are done or after `--seconds`. The figure is items/s
//! of each, and runtime over bare.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_worker::{Lease, Outcome, Runner, WorkerClient};
use serde_json::json;

use crate::http::Http;
use crate::results::{RuntimeDoc, RuntimeRun};

pub(crate) async fn runtime(
    url: &str,
    operator_token: &str,
    worker_token: &str,
    concurrencies: &[usize],
    items: u64,
    limit: Duration,
) -> Result<RuntimeDoc> {
    let http = Http::new(url);
    let mut runs = Vec::new();
    for &concurrency in concurrencies {
        let drain = Drain {
            url,
            token: worker_token,
            concurrency,
            items,
            limit,
        };
        enqueue(&http, operator_token, items).await?;
        let (bare_done, bare_s) = bare(&drain).await?;
        enqueue(&http, operator_token, items).await?;
        let (rt_done, rt_s) = with_runtime(&drain).await?;
        let bare_rate = bare_done as f64 / bare_s;
        let rt_rate = rt_done as f64 / rt_s;
        runs.push(RuntimeRun {
            concurrency,
            items,
            bare_items_per_s: bare_rate,
            runtime_items_per_s: rt_rate,
            ratio: if bare_rate > 0.0 {
                rt_rate / bare_rate
            } else {
                0.0
            },
            bare_drained: bare_done >= items,
            runtime_drained: rt_done >= items,
        });
    }
    Ok(RuntimeDoc {
        scenario: "runtime".into(),
        runs,
    })
}

/// `items` trawl items, 16 enqueues at a time.
async fn enqueue(http: &Http, token: &str, items: u64) -> Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (http, token, next) = (http.clone(), token.to_owned(), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < items {
                let body = json!({"kind": "trawl", "priority": "normal", "payload": {}});
                let (status, answer) = http.post("/v1/items", &token, &body, None).await?;
                if status != 201 && status != 200 {
                    bail!("enqueue answered {status}: {answer}");
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

fn spool(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "muster-bench-runtime-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7()
    ))
}

/// What one run drains: as `token` from `url`, `concurrency` at a time, until `items` are done
/// or after `limit`.
struct Drain<'a> {
    url: &'a str,
    token: &'a str,
    concurrency: usize,
    items: u64,
    limit: Duration,
}

/// The bare loop: `concurrency` tasks of lease (no wait) then complete. Items done, seconds.
async fn bare(drain: &Drain<'_>) -> Result<(u64, f64)> {
    let &Drain {
        url,
        token,
        concurrency,
        items,
        limit,
    } = drain;
    let dir = spool("bare");
    let client = WorkerClient::new(url, token, "trawl", "bench-bare", &dir)?;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, done) = (client.clone(), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            while done.load(Ordering::Relaxed) < items && start.elapsed() < limit {
                let Some(lease) = client.lease(0).await? else {
                    break;
                };
                client.complete(&lease, json!({}), Vec::new()).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, muster_worker::ClientError>(())
        }));
    }
    for task in tasks {
        task.await?.context("bare loop")?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((done.load(Ordering::Relaxed), seconds))
}

/// The runtime: a runner of `concurrency` whose function answers `done` at once; stopped when
/// `items` are done or after `limit`. Items done, seconds.
async fn with_runtime(drain: &Drain<'_>) -> Result<(u64, f64)> {
    let dir = spool("runtime");
    let runner = Runner::builder(drain.url, drain.token, "trawl")
        .worker_id("bench-runtime")
        .spool_dir(&dir)
        .concurrency(drain.concurrency)
        .wait_ms(1_000)
        .build()?;
    let (metrics, stop) = (runner.metrics(), runner.shutdown_handle());
    let start = Instant::now();
    let run = tokio::spawn(runner.run(|_lease: Lease| async { Outcome::done(json!({})) }));
    while metrics.snapshot().done < drain.items && start.elapsed() < drain.limit {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    stop.shutdown();
    run.await?.context("runner")?;
    let done = metrics.snapshot().done;
    let _ = std::fs::remove_dir_all(&dir);
    Ok((done, seconds))
}
