//! `muster-bench`: the load generator behind `cargo xtask bench`.
//!
//! Every scenario measures the HTTP server and, in the same run, a baseline (the same use cases
//! in-process through `muster-app` + `muster-pg`, or a cheaper path of the same endpoint), and
//! prints one JSON document on stdout. Figures are only meaningful as ratios to their baseline:
//! the machine is shared and noisy.
//!
//! Tokens come from the environment (`MUSTER_BENCH_*_TOKEN`), never from the command line.
//!
//! Besides the scenarios, the lab around them: `suite` (the whole `cargo xtask bench`: clusters,
//! servers, every scenario, the SQL floor, the table), `charts` (with the `charts` feature) and
//! `profile`. The modules form a DAG: the scenarios and the lab write the documents of
//! [`results`]; `report` (the table) and `charts` read them; neither reads the other.

mod backlog;
mod batch;
// Without the `charts` feature only its tests read the figures; nothing draws them.
#[cfg_attr(not(feature = "charts"), allow(dead_code))]
mod charts;
mod cycles;
mod edge;
mod feed;
mod feed_load;
mod feed_memory;
mod http;
mod lab;
mod pickup;
mod procinfo;
mod report;
mod results;
mod rounds;
mod runtime;
mod spam;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

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
        /// Over HTTP, complete with the lease's `worker_id` in the body (the server checks it
        /// against the lease's worker in the completion's transaction).
        #[arg(long)]
        send_worker_id: bool,
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
    /// Server RSS with idle subscribers of `/v1/events`, each on an HTTP/1.1 connection of its
    /// own or as HTTP/2 streams over a few connections. One run per fresh server.
    FeedMemory {
        /// `host:port` of a running `muster serve` (plain HTTP).
        #[arg(long)]
        addr: String,
        #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
        conn_token: String,
        #[arg(long, default_value_t = 1000)]
        subscribers: usize,
        /// 0: HTTP/1.1, a connection per subscriber; n: HTTP/2 over n connections (the
        /// server allows 200 streams on one).
        #[arg(long, default_value_t = 0)]
        http2_connections: usize,
        /// The server's pid (same machine): its RSS is read from /proc.
        #[arg(long)]
        server_pid: u32,
    },
    /// The network edge: server RSS and lease p99 with `--idle` connections that send
    /// nothing and with `--slow` ones that send a request head a line a second, against none;
    /// the memory of one idle connection; how many the server closed within 12 s.
    Edge {
        /// Base URL of a running `muster serve` (`http://host:port`).
        #[arg(long)]
        url: String,
        #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
        operator_token: String,
        #[arg(long, env = "MUSTER_BENCH_TRAWL_TOKEN", hide_env_values = true)]
        worker_token: String,
        #[arg(long, default_value_t = 10_000)]
        idle: usize,
        #[arg(long, default_value_t = 1_000)]
        slow: usize,
        /// Lease→complete cycles sampled in each phase.
        #[arg(long, default_value_t = 300)]
        cycles: usize,
        /// The server's pid (same machine), to read its RSS from /proc.
        #[arg(long)]
        server_pid: Option<u32>,
    },
    /// What the live feed costs the workers: items/s and lease p99 of `--workers` single-call
    /// workers with 0, 50 and 1,000 SSE subscribers attached and reading (ratios to the phases
    /// with none), and server CPU per event per subscriber. Needs a filled `trawl` queue
    /// (`backlog-fill` before the server starts) and the server's pid.
    FeedLoad {
        /// Base URL of a running `muster serve`.
        #[arg(long)]
        url: String,
        #[arg(long, env = "MUSTER_BENCH_TRAWL_TOKEN", hide_env_values = true)]
        worker_token: String,
        #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
        conn_token: String,
        /// Subscribers, one phase per value, in this order.
        #[arg(long, value_delimiter = ',', default_value = "0,50,1000,0")]
        subscribers: Vec<usize>,
        #[arg(long, default_value_t = 16)]
        workers: usize,
        /// Length of each phase's drain.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// The server's pid (same machine): its CPU is read from /proc.
        #[arg(long)]
        server_pid: u32,
    },
    /// Tops the `trawl` queue up to `--to` queued items directly in SQL, bypassing the ledger
    /// (bench databases only), then `VACUUM ANALYZE` and `CHECKPOINT`. Restart the server after.
    BacklogFill {
        #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
        database_url: String,
        #[arg(long)]
        to: u64,
        /// Also top the finished (`done`) `trawl` items up to this many (no leases, no ledger).
        #[arg(long)]
        done: Option<u64>,
        /// Then add this many delayed `trawl` items (`not_before` a day ahead, in line at it, as
        /// `POST /v1/items` with `not_before` places them).
        #[arg(long)]
        delayed: Option<u64>,
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
    /// The worker runtime's overhead: items/s draining `trawl` with the bare client loop and
    /// with a `muster_worker::Runner` of the same concurrency, with single calls and with
    /// `lease_next`, and their ratios.
    Runtime(runtime::Args),
    /// The whole benchmark of `cargo xtask bench` (minutes): a throwaway PostgreSQL, the
    /// release `muster serve`, every scenario above and the SQL floor; prints the table and
    /// writes it with every scenario's JSON (and the charts, with the `charts` feature) to
    /// `--out`. See docs/benchmarks.md.
    Suite {
        /// The `muster` binary to serve (default: the one next to this program).
        #[arg(long)]
        muster: Option<PathBuf>,
        #[arg(long, default_value = "target/bench")]
        out: PathBuf,
    },
    /// PNG charts of a suite's JSON in `BENCH` (default target/bench/) into `OUT` (default
    /// docs/img/); needs the `charts` feature.
    Charts {
        bench: Option<PathBuf>,
        out: Option<PathBuf>,
    },
    /// One drain of the release server on a throwaway PostgreSQL with pg_stat_statements:
    /// items/s, server CPU and statement time per item.
    Profile {
        /// The `muster` binary to serve (default: the one next to this program).
        #[arg(long)]
        muster: Option<PathBuf>,
        #[arg(long, default_value = "target/profile")]
        out: PathBuf,
        #[command(flatten)]
        options: lab::profile::Options,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // The lab's commands run processes, not load: no runtime for them.
    let scenario = match cli.scenario {
        Scenario::Suite { muster, out } => {
            let muster = muster.map_or_else(lab::sibling_muster, Ok)?;
            return lab::suite(&muster, &out);
        }
        Scenario::Charts { bench, out } => return draw_charts(bench, out),
        Scenario::Profile {
            muster,
            out,
            options,
        } => {
            let muster = muster.map_or_else(lab::sibling_muster, Ok)?;
            return lab::profile::profile(&muster, &out, &options);
        }
        scenario => scenario,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let out = rt.block_on(async {
        match scenario {
            Scenario::Cycles {
                target,
                operator_token,
                worker_token,
                workers,
                seconds,
                backlog,
                send_worker_id,
            } => cycles::cycles(
                &target,
                &operator_token,
                &worker_token,
                &workers,
                Duration::from_secs(seconds),
                (backlog, send_worker_id),
            )
            .await
            .and_then(doc),
            Scenario::Pickup {
                target,
                operator_token,
                worker_token,
                repeats,
            } => pickup::pickup(&target, &operator_token, &worker_token, repeats)
                .await
                .and_then(doc),
            Scenario::Spam {
                url,
                conn_token,
                edit_target,
                clients,
                seconds,
                solved,
            } => spam::spam(
                &url,
                &conn_token,
                &edit_target,
                clients,
                Duration::from_secs(seconds),
                solved,
            )
            .await
            .and_then(doc),
            Scenario::Feed {
                url,
                operator_token,
                conn_token,
                subscribers,
                enqueues,
                interval_ms,
                server_pid,
            } => feed::feed(
                &url,
                &operator_token,
                &conn_token,
                &subscribers,
                enqueues,
                Duration::from_millis(interval_ms),
                server_pid,
            )
            .await
            .and_then(doc),
            Scenario::FeedMemory {
                addr,
                conn_token,
                subscribers,
                http2_connections,
                server_pid,
            } => feed_memory::feed_memory(&feed_memory::Options {
                addr: &addr,
                conn_token: &conn_token,
                subscribers,
                http2_connections,
                server_pid,
            })
            .await
            .and_then(doc),
            Scenario::FeedLoad {
                url,
                worker_token,
                conn_token,
                subscribers,
                workers,
                seconds,
                server_pid,
            } => feed_load::feed_load(&feed_load::Options {
                url: &url,
                worker_token: &worker_token,
                conn_token: &conn_token,
                levels: &subscribers,
                workers,
                length: Duration::from_secs(seconds),
                server_pid,
            })
            .await
            .and_then(doc),
            Scenario::Batch {
                url,
                worker_token,
                batch,
                lease_next,
                next,
                workers,
                items,
                seconds,
            } => batch::batch(
                &url,
                &worker_token,
                batch,
                batch::Completing { lease_next, next },
                workers,
                items,
                Duration::from_secs(seconds),
            )
            .await
            .and_then(doc),
            Scenario::Edge {
                url,
                operator_token,
                worker_token,
                idle,
                slow,
                cycles,
                server_pid,
            } => edge::edge(&edge::Params {
                url: &url,
                operator_token: &operator_token,
                worker_token: &worker_token,
                idle,
                slow,
                cycles,
                server_pid,
            })
            .await
            .and_then(doc),
            Scenario::BacklogFill {
                database_url,
                to,
                done,
                delayed,
            } => backlog::fill(&database_url, to, (done, delayed))
                .await
                .and_then(doc),
            Scenario::Backlog {
                url,
                operator_token,
                worker_token,
                requests,
                workers,
                seconds,
            } => backlog::measure(
                &url,
                &operator_token,
                &worker_token,
                requests,
                workers,
                Duration::from_secs(seconds),
            )
            .await
            .and_then(doc),
            Scenario::Runtime(args) => runtime::runtime(&args).await.and_then(doc),
            other => anyhow::bail!("not a scenario: {other:?}"),
        }
    })?;
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// A scenario's document as the JSON it prints.
fn doc(document: impl serde::Serialize) -> Result<serde_json::Value> {
    Ok(serde_json::to_value(document)?)
}

/// `muster-bench charts [BENCH [OUT]]`: from `target/bench/` into `docs/img/` by default.
#[cfg(feature = "charts")]
fn draw_charts(bench: Option<PathBuf>, out: Option<PathBuf>) -> Result<()> {
    let bench = bench.unwrap_or_else(|| PathBuf::from("target/bench"));
    let out = out.unwrap_or_else(|| PathBuf::from("docs/img"));
    for path in charts::render(&bench, &out)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(not(feature = "charts"))]
fn draw_charts(_bench: Option<PathBuf>, _out: Option<PathBuf>) -> Result<()> {
    anyhow::bail!(
        "muster-bench was built without the `charts` feature (`cargo xtask charts` turns it on)"
    )
}
