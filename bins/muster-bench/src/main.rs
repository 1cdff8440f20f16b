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
mod history;
mod hostile;
mod http;
mod lab;
mod pickup;
mod procinfo;
mod report;
mod results;
mod retention;
mod rounds;
mod runtime;
mod spam;
mod trace_cost;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use anyhow::{Context, Result};
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
pub(crate) struct Target {
    /// Base URL of a running `muster serve`.
    #[arg(long)]
    pub(crate) url: String,
    /// The same database the server uses (for the in-process baseline and the backlog).
    #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
}

/// A running server and a `worker:trawl` token: what the draining scenarios need.
#[derive(Debug, Args)]
pub(crate) struct Trawl {
    /// Base URL of a running `muster serve` (`http://host:port`).
    #[arg(long)]
    pub(crate) url: String,
    #[arg(long, env = "MUSTER_BENCH_TRAWL_TOKEN", hide_env_values = true)]
    pub(crate) worker_token: String,
}

/// [`Trawl`] and an operator's token: for the scenarios that also enqueue or read as the
/// operator.
#[derive(Debug, Args)]
pub(crate) struct Operated {
    #[command(flatten)]
    pub(crate) trawl: Trawl,
    #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
    pub(crate) operator_token: String,
}

/// [`Trawl`] and a `conn` token: for the scenarios that also read the feed.
#[derive(Debug, Args)]
pub(crate) struct Subscribed {
    #[command(flatten)]
    pub(crate) trawl: Trawl,
    #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
    pub(crate) conn_token: String,
}

/// A command of the `muster` binary that a scenario runs beside the server (`retention-pass`,
/// `ledger-verify`), against the server's database.
#[derive(Debug, Args)]
pub(crate) struct MusterCommand {
    /// The server's database, as the role `muster serve` uses.
    #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
    /// The `muster` binary (default: the one next to this program).
    #[arg(long)]
    pub(crate) muster: Option<PathBuf>,
}

impl MusterCommand {
    /// Starts `muster ARGS`, its stdout piped, its stderr to `stderr`.
    pub(crate) fn spawn(&self, args: &[&str], stderr: Stdio) -> Result<Child> {
        let muster = self.muster.clone().map_or_else(lab::sibling_muster, Ok)?;
        Command::new(&muster)
            .args(args)
            .env("MUSTER_DATABASE_URL", &self.database_url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("could not start {} {}", muster.display(), args.join(" ")))
    }
}

/// What a `muster` command printed on stdout, trimmed; an error if it failed.
pub(crate) fn printed(what: &str, output: &Output) -> Result<String> {
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() {
        anyhow::bail!(
            "muster {what} failed ({}): {printed} {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(printed)
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Lease→complete cycles/s at several concurrencies, HTTP vs in-process, plus the lease and
    /// complete latencies at `--latency-workers`.
    Cycles(cycles::Args),
    /// Long-poll pickup latency: a worker waits (`wait_ms` 5000), one item is enqueued, time
    /// until the lease returns. HTTP vs in-process.
    Pickup(pickup::Args),
    /// Edit-intake spam shedding: honeypot and proof-of-work refusals/s vs accepted/s.
    Spam(spam::Args),
    /// Live feed: commit-to-subscriber latency of `transition` events with 1 and with 1,000 SSE
    /// subscribers, next to the enqueue round trip; server RSS with the subscribers idle.
    Feed(feed::Args),
    /// Server RSS with idle subscribers of `/v1/events`, each on an HTTP/1.1 connection of its
    /// own or as HTTP/2 streams over a few connections. One run per fresh server.
    FeedMemory(feed_memory::Args),
    /// The network edge: server RSS and lease p99 with `--idle` connections that send
    /// nothing and with `--slow` ones that send a request head a line a second, against none;
    /// the memory of one idle connection; how many the server closed within 12 s.
    Edge(edge::Args),
    /// Hostile clients inside the cluster: the lease p99 of `--workers` single-call workers
    /// beside a flood of random bearer tokens and beside the hostile-client suite's clients
    /// (zero-window HTTP/2 feed resumes, HTTP/2 uploads without a length, slow heads, one peer
    /// taking connections), each against the workers alone; the server's peak RSS after them
    /// against its RSS idle. Needs a fresh server, a filled `trawl` queue and the server's pid.
    Hostile(hostile::Args),
    /// What the live feed costs the workers: items/s and lease p99 of `--workers` single-call
    /// workers with 0, 50 and 1,000 SSE subscribers attached and reading (ratios to the phases
    /// with none), and server CPU per event per subscriber. Needs a filled `trawl` queue
    /// (`backlog-fill` before the server starts) and the server's pid.
    FeedLoad(feed_load::Args),
    /// What tracing costs: items/s, lease p99 and server CPU per item of `--workers`
    /// single-call workers against a fresh `muster serve` per phase, with tracing off and with
    /// every span exported over OTLP/HTTP to a sink in this process (ratios to the phases with
    /// it off); spans and OTLP bytes per item. Starts the servers itself: needs a migrated
    /// database with a filled `trawl` queue and the serve files in `--dir`.
    TraceCost(trace_cost::Args),
    /// Tops the `trawl` queue up to `--to` queued items directly in SQL, bypassing the ledger
    /// (bench databases only), then `VACUUM ANALYZE` and `CHECKPOINT`. Restart the server after.
    BacklogFill(backlog::FillArgs),
    /// Batching: items/s draining the `trawl` queue with lease `max` = `--batch` and one
    /// `POST /v1/completions` per batch (batch 1: the v1 single calls), until drained, `--items`
    /// are done, or `--seconds` have passed.
    Batch(batch::Args),
    /// Retention's cost to the workers: lease p99 and items/s of `--workers` single-call
    /// workers beside a `muster retention-pass --retain-days 0` started with the phase (every
    /// finished item goes), against the same workers alone before and after; the pass's
    /// removal rate. Needs a filled `trawl` queue and finished items with UUIDv7 ids
    /// (`backlog-fill --done`).
    Retention(retention::Args),
    /// What a long history costs: lease and complete p99 of `--workers` single-call workers,
    /// `GET /v1/items` pages of the finished items, feed resumes and `muster ledger-verify
    /// --since` the checkpoint the server takes over the fill. Needs a fresh database filled by
    /// `backlog-fill --history N` and a server started after it.
    HistoryCost(history::Args),
    /// Backlog cost against a running server: `GET /v1/queues` latency and lease→complete
    /// (with one `next` item, so the backlog keeps its size) cycles/s.
    Backlog(backlog::MeasureArgs),
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
    /// The history-cost rows by themselves (minutes, not in `suite`): a throwaway PostgreSQL,
    /// `history-cost` on 10,000 and on 1,000,000 finished items with three ledger rows each;
    /// prints their table and writes it with the JSON to `--out`.
    HistorySuite {
        /// The `muster` binary to serve (default: the one next to this program).
        #[arg(long)]
        muster: Option<PathBuf>,
        #[arg(long, default_value = "target/bench-history")]
        out: PathBuf,
    },
    /// The trace-cost rows by themselves: a throwaway PostgreSQL, a filled queue, `trace-cost`;
    /// prints their table and writes it with the JSON to `--out`.
    TraceSuite {
        /// The `muster` binary to serve (default: the one next to this program).
        #[arg(long)]
        muster: Option<PathBuf>,
        #[arg(long, default_value = "target/bench-trace")]
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
        Scenario::HistorySuite { muster, out } => {
            let muster = muster.map_or_else(lab::sibling_muster, Ok)?;
            return lab::history::suite(&muster, &out);
        }
        Scenario::TraceSuite { muster, out } => {
            let muster = muster.map_or_else(lab::sibling_muster, Ok)?;
            return lab::trace::suite(&muster, &out);
        }
        // Starts and stops servers between its drains, on a runtime of its own.
        Scenario::TraceCost(args) => {
            let out = trace_cost::trace_cost(&args).and_then(doc)?;
            println!("{}", serde_json::to_string_pretty(&out)?);
            return Ok(());
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
            Scenario::Cycles(args) => cycles::cycles(&args).await.and_then(doc),
            Scenario::Pickup(args) => pickup::pickup(&args).await.and_then(doc),
            Scenario::Spam(args) => spam::spam(&args).await.and_then(doc),
            Scenario::Feed(args) => feed::feed(&args).await.and_then(doc),
            Scenario::FeedMemory(args) => feed_memory::feed_memory(&args).await.and_then(doc),
            Scenario::FeedLoad(args) => feed_load::feed_load(&args).await.and_then(doc),
            Scenario::Batch(args) => batch::batch(&args).await.and_then(doc),
            Scenario::Edge(args) => edge::edge(&args).await.and_then(doc),
            Scenario::Hostile(args) => hostile::hostile(&args).await.and_then(doc),
            Scenario::BacklogFill(args) => backlog::fill(&args).await.and_then(doc),
            Scenario::Backlog(args) => backlog::measure(&args).await.and_then(doc),
            Scenario::Runtime(args) => runtime::runtime(&args).await.and_then(doc),
            Scenario::Retention(args) => retention::retention(&args).await.and_then(doc),
            Scenario::HistoryCost(args) => history::history_cost(&args).await.and_then(doc),
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
