//! Scenario `batch`: items per second through the batching extension (docs/batching.md).
//!
//! N workers drain a `trawl` backlog over HTTP. At batch size 1 each worker uses the v1 calls
//! (`POST /v1/leases`, `POST /v1/leases/{id}/complete`): the baseline. At batch size B > 1 it
//! leases with `"max": B` and completes the whole batch with one `POST /v1/completions`. A run
//! ends when the backlog is drained or after `--seconds`, whichever is first; the figure is
//! completed items over elapsed time. Every completion is checked (`status` 200 per entry).
//! With `--lease-next` (batch 1 only) each completion asks `"lease_next": true` and the worker
//! goes on with the lease it answers: one round trip and one transaction per item.
//! With `--next` every completion carries one `next` step (a `sextant` item, the default route
//! from `trawl`), so each item's result and the next pipeline item commit together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::http::{Http, percentiles};
use crate::results::BatchRun;
use crate::rounds::Tally;

/// How each completion is sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completing {
    /// Ask `"lease_next": true` (batch 1 only).
    pub lease_next: bool,
    /// Carry one `next` step.
    pub next: bool,
}

impl Completing {
    /// The completion's body: an empty result, and the `next` step when asked.
    fn body(self) -> Value {
        let mut body = json!({"result": {}});
        if self.next {
            body["next"] = json!([{"kind": "sextant", "payload": {}}]);
        }
        if self.lease_next {
            body["lease_next"] = json!(true);
        }
        body
    }
}

/// One completion with `"lease_next": true` of the lease `held` (leasing one first when none
/// is held); answers the items completed (0 when the queue was empty) and the latencies.
async fn round_leasing_next(
    http: &Http,
    token: &str,
    worker_id: &str,
    completing: Completing,
    held: &mut Option<String>,
) -> Result<(u64, Duration, Duration)> {
    let mut lease_time = Duration::ZERO;
    if held.is_none() {
        let t = Instant::now();
        let granted = http.lease_now(token, worker_id).await?;
        lease_time = t.elapsed();
        match granted {
            Some(body) => *held = body["lease_id"].as_str().map(str::to_owned),
            None => return Ok((0, lease_time, Duration::ZERO)),
        }
    }
    let id = held.take().context("lease_id missing")?;
    let t = Instant::now();
    let body = http.complete(token, &id, &completing.body()).await?;
    *held = body["next_lease"]["lease_id"].as_str().map(str::to_owned);
    Ok((1, lease_time, t.elapsed()))
}

/// One lease request and the completion of what it granted; answers the items completed
/// (0 when the queue was empty) and the two request latencies.
async fn round(
    http: &Http,
    token: &str,
    worker_id: &str,
    batch: u32,
    completing: Completing,
) -> Result<(u64, Duration, Duration)> {
    let body = if batch == 1 {
        json!({"worker_id": worker_id, "wait_ms": 0})
    } else {
        json!({"worker_id": worker_id, "wait_ms": 0, "max": batch})
    };
    let t = Instant::now();
    let (status, leased) = http.post("/v1/leases", token, &body, None).await?;
    let lease_time = t.elapsed();
    match status {
        200 => {}
        204 => return Ok((0, lease_time, Duration::ZERO)),
        _ => bail!("lease answered {status}: {leased}"),
    }
    let t = Instant::now();
    if batch == 1 {
        let id = leased["lease_id"].as_str().context("lease_id missing")?;
        http.complete(token, id, &completing.body()).await?;
        return Ok((1, lease_time, t.elapsed()));
    }
    let leases = leased["leases"].as_array().context("leases missing")?;
    let completions: Vec<Value> = leases
        .iter()
        .map(|l| {
            let mut entry = completing.body();
            entry["lease_id"] = l["lease_id"].clone();
            entry
        })
        .collect();
    let completions = json!({ "completions": completions });
    let body = http
        .post_expecting("completions", 200, "/v1/completions", token, &completions)
        .await?;
    let results = body["results"].as_array().context("results missing")?;
    if results.len() != leases.len() || results.iter().any(|r| r["status"] != 200) {
        bail!("a completion of the batch was refused: {body}");
    }
    Ok((leases.len() as u64, lease_time, t.elapsed()))
}

/// `muster-bench batch`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: crate::Trawl,
    #[arg(long)]
    batch: u32,
    /// Complete with `"lease_next": true` (batch 1 only).
    #[arg(long)]
    lease_next: bool,
    /// Complete with one `next` step (a `sextant` item, the default route from `trawl`):
    /// the result and the pipeline's next item in one transaction.
    #[arg(long)]
    next: bool,
    #[arg(long, default_value_t = 16)]
    workers: usize,
    #[arg(long, default_value_t = 200_000)]
    items: u64,
    #[arg(long, default_value_t = 60)]
    seconds: u64,
}

pub(crate) async fn batch(args: &Args) -> Result<BatchRun> {
    let (url, worker_token, batch) = (&args.server.url, &args.server.worker_token, args.batch);
    let completing = Completing {
        lease_next: args.lease_next,
        next: args.next,
    };
    let (workers, items, length) = (args.workers, args.items, Duration::from_secs(args.seconds));
    if completing.lease_next && batch != 1 {
        bail!("--lease-next goes with --batch 1");
    }
    let http = Arc::new(Http::new(url));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (http, token, done) = (http.clone(), worker_token.to_owned(), done.clone());
            tokio::spawn(async move {
                use std::sync::atomic::Ordering;
                let worker_id = format!("bench-batch-{w}");
                let (mut lease_lat, mut complete_lat) = (Vec::new(), Vec::new());
                let (mut held, mut tally) = (None, Tally::default());
                while Instant::now() < deadline && done.load(Ordering::Relaxed) < items {
                    let answer = if completing.lease_next {
                        round_leasing_next(&http, &token, &worker_id, completing, &mut held).await
                    } else {
                        round(&http, &token, &worker_id, batch, completing).await
                    };
                    let round = answer.map(|(n, lease, complete)| {
                        if n > 0 {
                            done.fetch_add(n, Ordering::Relaxed);
                            lease_lat.push(lease);
                            complete_lat.push(complete);
                        }
                        n > 0
                    });
                    if !tally.go_on_after(round) {
                        break;
                    }
                }
                (tally, lease_lat, complete_lat)
            })
        })
        .collect();
    let mut tally = Tally::default();
    let (mut lease_lat, mut complete_lat) = (Vec::new(), Vec::new());
    for t in tasks {
        let (worker, l, c) = t.await?;
        tally.add(worker);
        lease_lat.extend(l);
        complete_lat.extend(c);
    }
    let Tally {
        errors,
        first_error,
        ran_dry: dry,
    } = tally;
    let seconds = start.elapsed().as_secs_f64();
    let completed = done.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "muster-bench: batch {batch} × {workers} workers: {completed} items in {seconds:.1}s{}",
        if dry { " (drained)" } else { "" }
    );
    Ok(BatchRun {
        batch: Some(u64::from(batch)),
        complete: percentiles(complete_lat),
        drained: dry,
        errors,
        first_error,
        items: completed,
        items_per_s: Some(((completed as f64 / seconds) * 10.0).round() / 10.0),
        lease: percentiles(lease_lat),
        lease_next: completing.lease_next,
        next: completing.next,
        scenario: "batch".to_owned(),
        seconds: (seconds * 1000.0).round() / 1000.0,
        server_peak_rss_mib: None,
        wal: None,
        workers: workers as u64,
    })
}
