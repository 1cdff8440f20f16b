//! `muster-bench`: the load generator behind `cargo xtask bench`.
//!
//! Every scenario measures the HTTP server and, in the same run, a baseline (the same use cases
//! in-process through `muster-app` + `muster-pg`, or a cheaper path of the same endpoint), and
//! prints one JSON document on stdout. Figures are only meaningful as ratios to their baseline:
//! the machine is shared and noisy.
//!
//! Tokens come from the environment (`MUSTER_BENCH_*_TOKEN`), never from the command line.

mod backlog;
mod batch;
mod feed;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_app::Muster;
use muster_app::views::{CompleteRequest, EnqueueRequest};
use muster_domain::{Kind, LeaseId, Principal, Priority};
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(
    name = "muster-bench",
    about = "Load generator for Muster (see docs/benchmarks.md)"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Args)]
struct Target {
    /// Base URL of a running `muster serve`.
    #[arg(long)]
    url: String,
    /// The same database the server uses (for the in-process baseline and the backlog).
    #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
    database_url: String,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Lease→complete cycles/s at several concurrencies, HTTP vs in-process, plus the lease and
    /// complete latencies at `--latency-workers`.
    Cycles {
        #[command(flatten)]
        target: Target,
        #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
        operator_token: String,
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
    },
    /// Long-poll pickup latency: a worker waits (`wait_ms` 5000), one item is enqueued, time
    /// until the lease returns. HTTP vs in-process.
    Pickup {
        #[command(flatten)]
        target: Target,
        #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
        operator_token: String,
        /// A worker kind with an empty queue (`worker:sextant`).
        #[arg(long, env = "MUSTER_BENCH_SEXTANT_TOKEN", hide_env_values = true)]
        worker_token: String,
        #[arg(long, default_value_t = 200)]
        repeats: usize,
    },
    /// Edit-intake spam shedding: honeypot and proof-of-work refusals/s vs accepted/s.
    Spam {
        /// Base URL of a running `muster serve`.
        #[arg(long)]
        url: String,
        #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
        conn_token: String,
        /// A target present in the server's ownership map.
        #[arg(long, default_value = "docs/intro")]
        edit_target: String,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Length of each refusal run.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Challenges solved up front for the accepted-submission run (0 skips it).
        #[arg(long, default_value_t = 256)]
        solved: usize,
    },
    /// Live feed: commit-to-subscriber latency of `transition` events with 1 and with 1,000 SSE
    /// subscribers, next to the enqueue round trip; server RSS with the subscribers idle.
    Feed {
        /// Base URL of a running `muster serve`.
        #[arg(long)]
        url: String,
        #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
        operator_token: String,
        #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
        conn_token: String,
        /// Concurrent subscribers, one phase per value.
        #[arg(long, value_delimiter = ',', default_value = "1,1000")]
        subscribers: Vec<usize>,
        /// Enqueues per phase.
        #[arg(long, default_value_t = 200)]
        enqueues: usize,
        /// Milliseconds between enqueues.
        #[arg(long, default_value_t = 20)]
        interval_ms: u64,
        /// The server's pid (same machine), to read its RSS from /proc; optional.
        #[arg(long)]
        server_pid: Option<u32>,
    },
    /// Tops the `trawl` queue up to `--to` queued items directly in SQL, bypassing the ledger
    /// (bench databases only), then `VACUUM ANALYZE` and `CHECKPOINT`. Restart the server after.
    BacklogFill {
        #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[arg(long)]
        to: u64,
    },
    /// Batching: items/s draining the `trawl` queue with lease `max` = `--batch` and one
    /// `POST /v1/completions` per batch (batch 1: the v1 single calls), until drained, `--items`
    /// are done, or `--seconds` have passed.
    Batch {
        /// Base URL of a running `muster serve`.
        #[arg(long)]
        url: String,
        #[arg(long, env = "MUSTER_BENCH_TRAWL_TOKEN", hide_env_values = true)]
        worker_token: String,
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
    },
    /// Backlog cost against a running server: `GET /v1/queues` latency and lease→complete
    /// (with one `next` item, so the backlog keeps its size) cycles/s.
    Backlog {
        /// Base URL of a running `muster serve`.
        #[arg(long)]
        url: String,
        #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
        operator_token: String,
        #[arg(long, env = "MUSTER_BENCH_TRAWL_TOKEN", hide_env_values = true)]
        worker_token: String,
        /// Sequential `GET /v1/queues` requests.
        #[arg(long, default_value_t = 100)]
        requests: usize,
        #[arg(long, default_value_t = 16)]
        workers: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let out = rt.block_on(async {
        match cli.scenario {
            Scenario::Cycles {
                target,
                operator_token,
                worker_token,
                workers,
                seconds,
                backlog,
            } => {
                cycles(
                    &target,
                    &operator_token,
                    &worker_token,
                    &workers,
                    Duration::from_secs(seconds),
                    backlog,
                )
                .await
            }
            Scenario::Pickup {
                target,
                operator_token,
                worker_token,
                repeats,
            } => pickup(&target, &operator_token, &worker_token, repeats).await,
            Scenario::Spam {
                url,
                conn_token,
                edit_target,
                clients,
                seconds,
                solved,
            } => {
                spam(
                    &url,
                    &conn_token,
                    &edit_target,
                    clients,
                    Duration::from_secs(seconds),
                    solved,
                )
                .await
            }
            Scenario::Feed {
                url,
                operator_token,
                conn_token,
                subscribers,
                enqueues,
                interval_ms,
                server_pid,
            } => {
                feed::feed(
                    &url,
                    &operator_token,
                    &conn_token,
                    &subscribers,
                    enqueues,
                    Duration::from_millis(interval_ms),
                    server_pid,
                )
                .await
            }
            Scenario::Batch {
                url,
                worker_token,
                batch,
                lease_next,
                next,
                workers,
                items,
                seconds,
            } => {
                batch::batch(
                    &url,
                    &worker_token,
                    batch,
                    batch::Completing { lease_next, next },
                    workers,
                    items,
                    Duration::from_secs(seconds),
                )
                .await
            }
            Scenario::BacklogFill { database_url, to } => backlog::fill(&database_url, to).await,
            Scenario::Backlog {
                url,
                operator_token,
                worker_token,
                requests,
                workers,
                seconds,
            } => {
                backlog::measure(
                    &url,
                    &operator_token,
                    &worker_token,
                    requests,
                    workers,
                    Duration::from_secs(seconds),
                )
                .await
            }
        }
    })?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// HTTP client

#[derive(Clone)]
struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
}

impl Http {
    fn new(base: &str) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(256)
            .build_http();
        Http {
            client,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    /// POSTs JSON; returns the status and the parsed body (`Null` when empty).
    async fn post(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        client_ip: Option<&str>,
    ) -> Result<(u16, Value)> {
        let mut req = hyper::Request::builder()
            .method(hyper::Method::POST)
            .uri(format!("{}{path}", self.base))
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(ip) = client_ip {
            req = req.header("x-client-ip", ip);
        }
        let req = req.body(Full::new(Bytes::from(serde_json::to_vec(body)?)))?;
        let resp = self
            .client
            .request(req)
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        Ok((status, value))
    }

    /// GETs a path; returns the status and the parsed body (`Null` when empty).
    async fn get(&self, path: &str, token: &str) -> Result<(u16, Value)> {
        let req = hyper::Request::builder()
            .method(hyper::Method::GET)
            .uri(format!("{}{path}", self.base))
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(Bytes::new()))?;
        let resp = self
            .client
            .request(req)
            .await
            .with_context(|| format!("GET {path}"))?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        Ok((status, value))
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// `{"n", "p50_ms", "p99_ms"}` of a sample (nearest-rank percentiles).
fn percentiles(mut sample: Vec<Duration>) -> Value {
    sample.sort_unstable();
    let at = |p: usize| -> Option<f64> {
        if sample.is_empty() {
            return None;
        }
        let rank = (sample.len() * p).div_ceil(100).max(1);
        Some(ms(sample[rank - 1]))
    };
    json!({"n": sample.len(), "p50_ms": at(50), "p99_ms": at(99)})
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| (a / b * 1000.0).round() / 1000.0)
}

// ---------------------------------------------------------------------------------------------
// Scenario 1 + 2: lease→complete cycles

const TRAWL: Principal = Principal::Worker(Kind::Trawl);

/// Where the cycles go: over HTTP to the server, or straight into the use cases.
#[derive(Clone)]
enum Mode {
    Http { http: Arc<Http>, token: Arc<str> },
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
            Mode::Http { http, token } => {
                let (status, body) = http
                    .post(
                        "/v1/leases",
                        token,
                        &json!({"worker_id": worker_id, "wait_ms": 0}),
                        None,
                    )
                    .await?;
                let lease = t0.elapsed();
                match status {
                    200 => {}
                    204 => return Ok(None),
                    _ => bail!("lease answered {status}: {body}"),
                }
                let id = body["lease_id"].as_str().context("lease_id missing")?;
                let t1 = Instant::now();
                let (status, body) = http
                    .post(
                        &format!("/v1/leases/{id}/complete"),
                        token,
                        &json!({"result": {}}),
                        None,
                    )
                    .await?;
                if status != 200 {
                    bail!("complete answered {status}: {body}");
                }
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
                muster
                    .complete(
                        TRAWL,
                        id,
                        CompleteRequest {
                            result: json!({}),
                            next: vec![],
                        },
                    )
                    .await?;
                Ok(Some((lease, t1.elapsed())))
            }
        }
    }
}

struct RunResult {
    cycles: u64,
    errors: u64,
    first_error: Option<String>,
    ran_dry: bool,
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
                let mut lease = Vec::new();
                let mut complete = Vec::new();
                let mut errors = 0u64;
                let mut first_error = None;
                let mut dry = false;
                while Instant::now() < deadline {
                    match mode.cycle(&worker_id).await {
                        Ok(Some((l, c))) => {
                            lease.push(l);
                            complete.push(c);
                        }
                        Ok(None) => {
                            dry = true;
                            break;
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| format!("{e:#}"));
                        }
                    }
                }
                (lease, complete, errors, first_error, dry)
            })
        })
        .collect();
    let mut result = RunResult {
        cycles: 0,
        errors: 0,
        first_error: None,
        ran_dry: false,
        elapsed: Duration::ZERO,
        lease: Vec::new(),
        complete: Vec::new(),
    };
    for task in tasks {
        match task.await {
            Ok((l, c, e, fe, dry)) => {
                result.cycles += l.len() as u64;
                result.lease.extend(l);
                result.complete.extend(c);
                result.errors += e;
                if result.first_error.is_none() {
                    result.first_error = fe;
                }
                result.ran_dry |= dry;
            }
            Err(e) => {
                result.errors += 1;
                result.first_error.get_or_insert_with(|| e.to_string());
            }
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
                    muster
                        .enqueue(
                            Principal::Operator,
                            EnqueueRequest {
                                kind: Kind::Trawl,
                                priority: Priority::Normal,
                                payload: json!({"bench": true}),
                                idempotency_key: None,
                            },
                        )
                        .await?;
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

fn in_process(database_url: &str) -> Result<Muster> {
    let app = muster::build(&muster::Settings::new(database_url))?;
    Ok(app.state.muster.clone())
}

async fn cycles(
    target: &Target,
    _operator_token: &str,
    worker_token: &str,
    levels: &[usize],
    length: Duration,
    backlog: u64,
) -> Result<Value> {
    let muster = in_process(&target.database_url)?;
    let http = Mode::Http {
        http: Arc::new(Http::new(&target.url)),
        token: worker_token.into(),
    };
    let local = Mode::InProcess(muster.clone());
    // Whatever a previous run left is unknown to us: start from what we enqueue.
    let mut queued: u64 = 0;
    let mut runs = Vec::new();
    for (i, &workers) in levels.iter().enumerate() {
        let mut pair = serde_json::Map::new();
        pair.insert("workers".into(), json!(workers));
        // Each on a topped-up backlog; the order alternates so that drift on a noisy machine
        // does not always favour the same side.
        let order = if i % 2 == 0 {
            [&local, &http]
        } else {
            [&http, &local]
        };
        pair.insert("order".into(), json!([order[0].name(), order[1].name()]));
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
            pair.insert(
                mode.name().into(),
                json!({
                    "cycles": r.cycles,
                    "seconds": (r.elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
                    "cycles_per_s": (rate * 10.0).round() / 10.0,
                    "errors": r.errors,
                    "first_error": r.first_error,
                    "ran_dry": r.ran_dry,
                    "lease": percentiles(r.lease),
                    "complete": percentiles(r.complete),
                }),
            );
        }
        let http_rate = pair["http"]["cycles_per_s"].as_f64().unwrap_or(0.0);
        let local_rate = pair["in_process"]["cycles_per_s"].as_f64().unwrap_or(0.0);
        pair.insert(
            "http_over_in_process".into(),
            json!(ratio(http_rate, local_rate)),
        );
        runs.push(Value::Object(pair));
    }
    Ok(
        json!({"scenario": "cycles", "run_seconds": length.as_secs(), "backlog": backlog, "runs": runs}),
    )
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: pickup latency

const SEXTANT: Principal = Principal::Worker(Kind::Sextant);

async fn pickup(
    target: &Target,
    operator_token: &str,
    worker_token: &str,
    repeats: usize,
) -> Result<Value> {
    let muster = in_process(&target.database_url)?;
    let http = Http::new(&target.url);
    let settle = Duration::from_millis(50);
    let enqueue_body =
        json!({"kind": "sextant", "priority": "normal", "payload": {"bench": "pickup"}});

    // In-process baseline: the same long poll and enqueue, without HTTP.
    let mut local = Vec::new();
    let mut local_missed = 0;
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
                        },
                    )
                    .await?;
            }
            None => local_missed += 1,
        }
    }

    let mut remote = Vec::new();
    let mut remote_missed = 0;
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
        let (status, body) = http
            .post("/v1/items", operator_token, &enqueue_body, None)
            .await?;
        if status != 201 {
            bail!("enqueue answered {status}: {body}");
        }
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
        remote_p["p50_ms"].as_f64().unwrap_or(0.0),
        local_p["p50_ms"].as_f64().unwrap_or(0.0),
    );
    let r99 = ratio(
        remote_p["p99_ms"].as_f64().unwrap_or(0.0),
        local_p["p99_ms"].as_f64().unwrap_or(0.0),
    );
    Ok(json!({
        "scenario": "pickup",
        "repeats": repeats,
        "settle_ms": settle.as_millis() as u64,
        "http": remote_p, "http_missed": remote_missed,
        "in_process": local_p, "in_process_missed": local_missed,
        "p50_ratio": r50, "p99_ratio": r99,
    }))
}

// ---------------------------------------------------------------------------------------------
// Scenario 5: edit-intake spam shedding

/// A documentation-range address per index, so each accepted submission has its own daily cap.
fn client_ip(i: usize) -> String {
    format!("198.51.{}.{}", (i / 250) % 250, i % 250 + 1)
}

async fn challenge(http: &Http, token: &str) -> Result<(String, u8)> {
    let (status, body) = http
        .post("/v1/edits/challenge", token, &json!({}), None)
        .await?;
    if status != 200 {
        bail!("challenge answered {status}: {body}");
    }
    let c = body["challenge"]
        .as_str()
        .context("challenge missing")?
        .to_owned();
    let d = body["difficulty"].as_u64().context("difficulty missing")?;
    Ok((c, u8::try_from(d)?))
}

/// `clients` tasks send `make(i)` bodies until `length` is over; counts answers by status.
async fn flood(
    http: &Http,
    token: &str,
    clients: usize,
    length: Duration,
    bodies: Arc<Vec<Value>>,
    cycle_bodies: bool,
) -> Result<Value> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, token, bodies, next) =
                (http.clone(), token.to_owned(), bodies.clone(), next.clone());
            tokio::spawn(async move {
                let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if cycle_bodies {
                        if Instant::now() >= deadline {
                            break;
                        }
                    } else if i >= bodies.len() {
                        break;
                    }
                    let body = &bodies[i % bodies.len()];
                    let ip = client_ip(i);
                    let t = Instant::now();
                    let (status, _) = http.post("/v1/edits", &token, body, Some(&ip)).await?;
                    latencies.push(t.elapsed());
                    *statuses.entry(status).or_default() += 1;
                }
                anyhow::Ok((statuses, latencies))
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<String, u64>::new();
    let mut latencies = Vec::new();
    for task in tasks {
        let (s, l) = task.await??;
        for (k, v) in s {
            *statuses.entry(k.to_string()).or_default() += v;
        }
        latencies.extend(l);
    }
    let elapsed = start.elapsed();
    let n = latencies.len();
    Ok(json!({
        "requests": n,
        "seconds": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        "requests_per_s": ((n as f64 / elapsed.as_secs_f64()) * 10.0).round() / 10.0,
        "statuses": statuses,
        "latency": percentiles(latencies),
    }))
}

async fn spam(
    url: &str,
    token: &str,
    target: &str,
    clients: usize,
    length: Duration,
    solved: usize,
) -> Result<Value> {
    let http = Http::new(url);
    let (real, difficulty) = challenge(&http, token).await?;

    // Honeypot: a filled-in `website` field; answered 202, nothing stored.
    let honeypot = flood(
        &http,
        token,
        clients,
        length,
        Arc::new(vec![json!({
            "target": target, "body": "buy now", "website": "http://spam.example",
            "pow": {"challenge": real, "nonce": "0"},
        })]),
        true,
    )
    .await?;

    // Proof of work: a real challenge with a nonce that does not solve it.
    let garbage = (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            let d = muster_antispam::pow::work_digest(&real, n);
            muster_antispam::pow::leading_zero_bits(&d) < u32::from(difficulty)
        })
        .unwrap_or_else(|| "0".into());
    let pow = flood(
        &http,
        token,
        clients,
        length,
        Arc::new(vec![json!({
            "target": target, "body": "buy now", "website": "",
            "pow": {"challenge": real, "nonce": garbage},
        })]),
        true,
    )
    .await?;

    // Accepted: challenges solved up front (not timed), each from its own client IP.
    let accepted = if solved == 0 {
        Value::Null
    } else {
        let mut tokens = Vec::with_capacity(solved);
        for _ in 0..solved {
            tokens.push(challenge(&http, token).await?.0);
        }
        let t = Instant::now();
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let chunks: Vec<Vec<String>> = tokens
            .chunks(solved.div_ceil(threads))
            .map(<[String]>::to_vec)
            .collect();
        let solving: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                tokio::task::spawn_blocking(move || {
                    chunk
                        .into_iter()
                        .map(|c| {
                            let n = muster_antispam::pow::solve(&c, difficulty, u64::MAX);
                            (c, n)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut bodies = Vec::new();
        for s in solving {
            for (c, n) in s.await? {
                let n = n.context("no nonce found")?;
                bodies.push(json!({
                    "target": target, "body": "<p>Fix the typo in the second paragraph.</p>",
                    "website": "", "pow": {"challenge": c, "nonce": n},
                }));
            }
        }
        let solve_s = t.elapsed().as_secs_f64();
        let mut r = flood(&http, token, clients, length, Arc::new(bodies), false).await?;
        r["solve_seconds_total"] = json!((solve_s * 100.0).round() / 100.0);
        r["solver_threads"] = json!(threads);
        r
    };
    let acc_rate = accepted["requests_per_s"].as_f64().unwrap_or(0.0);
    Ok(json!({
        "scenario": "spam",
        "clients": clients,
        "difficulty": difficulty,
        "honeypot": honeypot,
        "pow_refused": pow,
        "accepted": accepted,
        "honeypot_over_accepted": ratio(honeypot["requests_per_s"].as_f64().unwrap_or(0.0), acc_rate),
        "pow_over_accepted": ratio(pow["requests_per_s"].as_f64().unwrap_or(0.0), acc_rate),
    }))
}
