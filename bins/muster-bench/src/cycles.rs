//! Scenario `cycles`: lease→complete cycles/s at several concurrencies, over HTTP and
//! in-process (the baseline), with the lease and complete latencies.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_app::Muster;
use muster_app::views::{CompleteRequest, EnqueueRequest};
use muster_domain::{Kind, LeaseId, Principal, Priority};
use serde_json::{Value, json};

use crate::http::{Http, percentiles, ratio};
use crate::results::{Cycles, CyclesRun, CyclesSide};
use crate::rounds::Tally;
use crate::{Target, backlog};

const TRAWL: Principal = Principal::Worker(Kind::Trawl);

/// Where the cycles go: over HTTP to the server, or straight into the use cases.
#[derive(Clone)]
enum Mode {
    Http {
        http: Arc<Http>,
        token: Arc<str>,
        /// Completions carry `worker_id` (checked against the lease's worker).
        send_worker_id: bool,
    },
    InProcess(Muster),
}

impl Mode {
    fn name(&self) -> &'static str {
        match self {
            Mode::Http { .. } => "http",
            Mode::InProcess(_) => "in_process",
        }
    }

    /// One lease (wait 0) and, when granted, its completion. `None` when the queue was empty.
    async fn cycle(&self, worker_id: &str) -> Result<Option<(Duration, Duration)>> {
        let t0 = Instant::now();
        match self {
            Mode::Http {
                http,
                token,
                send_worker_id,
            } => {
                let granted = http.lease_now(token, worker_id).await?;
                let lease = t0.elapsed();
                let Some(body) = granted else {
                    return Ok(None);
                };
                let id = body["lease_id"].as_str().context("lease_id missing")?;
                let t1 = Instant::now();
                let body = if *send_worker_id {
                    json!({"result": {}, "worker_id": worker_id})
                } else {
                    json!({"result": {}})
                };
                http.complete(token, id, &body).await?;
                Ok(Some((lease, t1.elapsed())))
            }
            Mode::InProcess(muster) => {
                let granted = muster.lease(TRAWL, worker_id, 0).await?;
                let lease = t0.elapsed();
                let Some(granted) = granted else {
                    return Ok(None);
                };
                let id = LeaseId(granted.lease_id.parse()?);
                let t1 = Instant::now();
                complete_empty(muster, TRAWL, id).await?;
                Ok(Some((lease, t1.elapsed())))
            }
        }
    }
}

/// Enqueues one item of `kind` at normal priority in process, as the operator.
pub(crate) async fn enqueue_normal(muster: &Muster, kind: Kind, payload: Value) -> Result<()> {
    muster
        .enqueue(
            Principal::Operator,
            EnqueueRequest {
                kind,
                priority: Priority::Normal,
                payload,
                idempotency_key: None,
                not_before: None,
                trace: None,
            },
        )
        .await?;
    Ok(())
}

/// Completes `id`, leased by `worker`, in process with an empty result and no next steps.
pub(crate) async fn complete_empty(muster: &Muster, worker: Principal, id: LeaseId) -> Result<()> {
    muster
        .complete(
            worker,
            id,
            CompleteRequest {
                result: json!({}),
                next: vec![],
                worker_id: None,
                trace: None,
            },
        )
        .await?;
    Ok(())
}

struct RunResult {
    cycles: u64,
    tally: Tally,
    elapsed: Duration,
    lease: Vec<Duration>,
    complete: Vec<Duration>,
}

async fn run_cycles(mode: &Mode, workers: usize, length: Duration) -> RunResult {
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let mode = mode.clone();
            tokio::spawn(async move {
                let worker_id = format!("bench-{}-{w}", mode.name());
                let (mut lease, mut complete, mut tally) =
                    (Vec::new(), Vec::new(), Tally::default());
                while Instant::now() < deadline {
                    let round = mode.cycle(&worker_id).await.map(|latencies| {
                        if let Some((l, c)) = latencies {
                            lease.push(l);
                            complete.push(c);
                        }
                        latencies.is_some()
                    });
                    if !tally.go_on_after(round) {
                        break;
                    }
                }
                (lease, complete, tally)
            })
        })
        .collect();
    let mut result = RunResult {
        cycles: 0,
        tally: Tally::default(),
        elapsed: Duration::ZERO,
        lease: Vec::new(),
        complete: Vec::new(),
    };
    for task in tasks {
        match task.await {
            Ok((l, c, tally)) => {
                result.cycles += l.len() as u64;
                result.lease.extend(l);
                result.complete.extend(c);
                result.tally.add(tally);
            }
            Err(e) => result.tally.failed(e.to_string()),
        }
    }
    result.elapsed = start.elapsed();
    result
}

/// Enqueues `n` trawl items in-process (64 at a time): the backlog, not a measured figure.
async fn enqueue_backlog(muster: &Muster, n: u64) -> Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let muster = muster.clone();
            let next = next.clone();
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    enqueue_normal(&muster, Kind::Trawl, json!({"bench": true})).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// `VACUUM ANALYZE` (of the tables that hold a row, see [`backlog::settle`]) then `CHECKPOINT`
/// before every run, so that neither side inherits the other's dead tuples, autovacuum work or
/// dirty buffers (the backlog top-up writes thousands of rows). It seeds no history: under a
/// running server that would reach its live feed as transitions. On a fresh database, run
/// `backlog-fill` (`--to 0` queues nothing) before starting the server.
async fn settle_database(database_url: &str) -> Result<()> {
    let (client, connection) = tokio_postgres::connect(database_url, tokio_postgres::NoTls)
        .await
        .context("connect to PostgreSQL")?;
    let conn = tokio::spawn(connection);
    backlog::settle(&client).await?;
    drop(client);
    let _ = conn.await;
    Ok(())
}

pub(crate) fn in_process(database_url: &str) -> Result<Muster> {
    let app = muster::build(&muster::Settings::new(database_url))?;
    Ok(app.state.muster.clone())
}

/// `muster-bench cycles`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    target: Target,
    #[arg(long, env = "MUSTER_BENCH_TRAWL_TOKEN", hide_env_values = true)]
    worker_token: String,
    /// Concurrent workers, one run per value (and mode).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    workers: Vec<usize>,
    /// Length of each run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Queued items topped up before every run (a run stops early if the queue runs dry).
    #[arg(long, default_value_t = 80_000)]
    backlog: u64,
    /// Over HTTP, complete with the lease's `worker_id` in the body (the server checks it
    /// against the lease's worker in the completion's transaction).
    #[arg(long)]
    send_worker_id: bool,
}

pub(crate) async fn cycles(args: &Args) -> Result<Cycles> {
    let (target, worker_token, levels) = (&args.target, args.worker_token.as_str(), &args.workers);
    let length = Duration::from_secs(args.seconds);
    let (backlog, send_worker_id) = (args.backlog, args.send_worker_id);
    let muster = in_process(&target.database_url)?;
    let http = Mode::Http {
        http: Arc::new(Http::new(&target.url)),
        token: worker_token.into(),
        send_worker_id,
    };
    let local = Mode::InProcess(muster.clone());
    // Whatever a previous run left is unknown to us: start from what we enqueue.
    let mut queued: u64 = 0;
    let mut runs = Vec::new();
    for (i, &workers) in levels.iter().enumerate() {
        let mut pair = CyclesRun {
            workers: workers as u64,
            ..CyclesRun::default()
        };
        // Each on a topped-up backlog; the order alternates so that drift on a noisy machine
        // does not always favour the same side.
        let order = if i % 2 == 0 {
            [&local, &http]
        } else {
            [&http, &local]
        };
        pair.order = vec![order[0].name().to_owned(), order[1].name().to_owned()];
        for mode in order {
            let top_up = backlog.saturating_sub(queued);
            let t = Instant::now();
            enqueue_backlog(&muster, top_up).await?;
            queued += top_up;
            settle_database(&target.database_url).await?;
            eprintln!(
                "muster-bench: enqueued {top_up} items in {:.1}s; {} × {workers} workers for {}s",
                t.elapsed().as_secs_f64(),
                mode.name(),
                length.as_secs()
            );
            let r = run_cycles(mode, workers, length).await;
            queued = queued.saturating_sub(r.cycles);
            let rate = r.cycles as f64 / r.elapsed.as_secs_f64();
            let side = CyclesSide {
                complete: percentiles(r.complete),
                cycles: r.cycles,
                cycles_per_s: Some((rate * 10.0).round() / 10.0),
                errors: r.tally.errors,
                first_error: r.tally.first_error,
                lease: percentiles(r.lease),
                ran_dry: r.tally.ran_dry,
                seconds: (r.elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
            };
            match mode {
                Mode::Http { .. } => pair.http = side,
                Mode::InProcess(_) => pair.in_process = side,
            }
        }
        let http_rate = pair.http.cycles_per_s.unwrap_or(0.0);
        let local_rate = pair.in_process.cycles_per_s.unwrap_or(0.0);
        pair.http_over_in_process = ratio(http_rate, local_rate);
        runs.push(pair);
    }
    Ok(Cycles {
        backlog: Some(backlog),
        run_seconds: Some(length.as_secs()),
        runs,
        scenario: "cycles".to_owned(),
    })
}
