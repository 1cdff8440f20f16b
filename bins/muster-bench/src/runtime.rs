//! Scenario `runtime`: the worker runtime's overhead, on both paths of a completion. The same
//! `trawl` items are drained by the bare client loop (`--concurrency` tasks, one item at a time
//! each) and by a `muster_worker::Runner` of the same concurrency whose worker function answers
//! `done` at once (it leases with `max` up to its free slots): once with single calls (the loop
//! leases then completes; the runner with `lease_next` off) and once with `lease_next` (the
//! loop completes with `WorkerClient::complete_and_lease` and goes on with the lease it answers,
//! leasing only when it holds none; the runner as it runs by default). All four spool every
//! outcome with fsync before sending it. Before each drain `--items` items are enqueued through
//! `POST /v1/items`; a drain ends when they are done or after `--seconds`. The figures are
//! items/s of each, the runtime over the bare loop on each path, and the runtime's `lease_next`
//! path over its single calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_worker::{Lease, Outcome, Runner, WorkerClient};
use serde_json::json;

use crate::http::Http;
use crate::results::{RuntimeDoc, RuntimePath, RuntimeRun};

/// `muster-bench runtime`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: crate::Operated,
    /// Concurrencies, one set of four drains per value.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    concurrency: Vec<usize>,
    /// Items enqueued before each drain.
    #[arg(long, default_value_t = 2_000)]
    items: u64,
    /// A drain's time cap.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
}

pub(crate) async fn runtime(args: &Args) -> Result<RuntimeDoc> {
    let http = Http::new(&args.server.trawl.url);
    let mut runs = Vec::new();
    for &concurrency in &args.concurrency {
        let single = path(&http, args, concurrency, false).await?;
        let lease_next = path(&http, args, concurrency, true).await?;
        runs.push(RuntimeRun {
            concurrency,
            items: args.items,
            lease_next_over_single: ratio(
                lease_next.runtime_items_per_s,
                single.runtime_items_per_s,
            ),
            single,
            lease_next,
        });
    }
    Ok(RuntimeDoc {
        scenario: "runtime".into(),
        runs,
    })
}

/// One path at `concurrency`: the bare loop's drain, then the runtime's, each of a queue of
/// `--items` enqueued just before it.
async fn path(
    http: &Http,
    args: &Args,
    concurrency: usize,
    lease_next: bool,
) -> Result<RuntimePath> {
    let drain = Drain {
        url: &args.server.trawl.url,
        token: &args.server.trawl.worker_token,
        concurrency,
        items: args.items,
        limit: Duration::from_secs(args.seconds),
        lease_next,
    };
    enqueue(http, &args.server.operator_token, args.items).await?;
    let bare = bare(&drain).await?;
    enqueue(http, &args.server.operator_token, args.items).await?;
    let runtime = with_runtime(&drain).await?;
    Ok(RuntimePath::of(bare, runtime, args.items))
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

impl RuntimePath {
    /// The figures of one path from its two drains, `(items done, seconds)` each.
    fn of((bare_done, bare_s): (u64, f64), (rt_done, rt_s): (u64, f64), items: u64) -> Self {
        let bare_rate = bare_done as f64 / bare_s;
        let rt_rate = rt_done as f64 / rt_s;
        RuntimePath {
            bare_items_per_s: bare_rate,
            runtime_items_per_s: rt_rate,
            ratio: ratio(rt_rate, bare_rate),
            bare_drained: bare_done >= items,
            runtime_drained: rt_done >= items,
        }
    }
}

/// Tries of one enqueue that the server answers 503 (over its memory budget or its pool's
/// wait), each after the answer's `Retry-After`.
const ENQUEUE_ATTEMPTS: u32 = 5;

/// `items` trawl items, 16 enqueues at a time; a 503 is tried again after its `Retry-After`.
async fn enqueue(http: &Http, token: &str, items: u64) -> Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (http, token, next) = (http.clone(), token.to_owned(), Arc::clone(&next));
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < items {
                let body = json!({"kind": "trawl", "priority": "normal", "payload": {}});
                let (status, answer) = http
                    .post_retrying_503("/v1/items", &token, &body, ENQUEUE_ATTEMPTS)
                    .await?;
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
/// or after `limit`; completing with `lease_next` or not.
struct Drain<'a> {
    url: &'a str,
    token: &'a str,
    concurrency: usize,
    items: u64,
    limit: Duration,
    lease_next: bool,
}

/// The bare loop: `concurrency` tasks, each completing the lease it holds (leasing one, with
/// no wait, when it holds none) and, with `lease_next`, holding the lease the completion
/// answered. Items done, seconds.
async fn bare(drain: &Drain<'_>) -> Result<(u64, f64)> {
    let &Drain {
        url,
        token,
        concurrency,
        items,
        limit,
        lease_next,
    } = drain;
    let dir = spool("bare");
    let client = WorkerClient::new(url, token, "trawl", "bench-bare", &dir)?;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, done) = (client.clone(), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let mut held: Option<Lease> = None;
            while done.load(Ordering::Relaxed) < items && start.elapsed() < limit {
                let lease = match held.take() {
                    Some(lease) => lease,
                    None => match client.lease(0).await? {
                        Some(lease) => lease,
                        None => break,
                    },
                };
                held = if lease_next {
                    client
                        .complete_and_lease(&lease, json!({}), Vec::new())
                        .await?
                        .next_lease
                } else {
                    client.complete(&lease, json!({}), Vec::new()).await?;
                    None
                };
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

/// The runtime: a runner of `concurrency` whose function answers `done` at once (its
/// completions asking `lease_next` or not); stopped when
/// `items` are done or after `limit`. Items done, seconds.
async fn with_runtime(drain: &Drain<'_>) -> Result<(u64, f64)> {
    let dir = spool("runtime");
    let runner = Runner::builder(drain.url, drain.token, "trawl")
        .worker_id("bench-runtime")
        .spool_dir(&dir)
        .concurrency(drain.concurrency)
        .lease_next(drain.lease_next)
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
