//! `muster-sim`: the simulated fleet (`run`), its enqueuer (`enqueue`), the database checker
//! (`check`) and the live-feed watcher (`watch`). See the library's documentation.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use muster_domain::Kind;
use muster_sim::api::Api;
use muster_sim::check::{Evidence, Fault};
use muster_sim::fleet::FleetConfig;
use muster_sim::plan::Rates;
use muster_sim::stats::{Stats, Summary};
use muster_sim::{check, enqueue, fleet, read_tokens, token};
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(name = "muster-sim", about = "A simulated worker fleet for Muster")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Args)]
struct Target {
    /// Base URL of a Muster replica; repeat for several (calls fail over between them on
    /// connection errors and 503).
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// JSON file mapping principal to plain token.
    #[arg(long)]
    tokens: PathBuf,
    /// Keep the JSON summary in this file too, rewritten every second and at the end.
    #[arg(long)]
    report: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Runs the fleet until SIGTERM/SIGINT (or `--duration-s`), then prints a JSON summary line.
    Run {
        #[command(flatten)]
        target: Target,
        /// Spool root: each worker spools into `<spool>/<kind>-<n>`; a restarted process
        /// delivers what it finds there first.
        #[arg(long)]
        spool: PathBuf,
        /// Prefix of the worker ids.
        #[arg(long, default_value = "sim")]
        name: String,
        /// Workers in all, dealt to the kinds in turn (at least one per kind).
        #[arg(long, default_value_t = 20)]
        workers: usize,
        /// Kinds to run (default: all ten).
        #[arg(long, value_delimiter = ',')]
        kinds: Vec<Kind>,
        /// Mean simulated work per item, ms (uniform in ½ … 1½ of it).
        #[arg(long, default_value_t = 20)]
        work_ms: u64,
        /// Long-poll wait of each lease request, ms.
        #[arg(long, default_value_t = 5_000)]
        wait_ms: u64,
        /// Also act as Shipkeeper: report a new worker image per kind every `--deploy-every-ms`,
        /// which replays parked items.
        #[arg(long)]
        shipkeeper: bool,
        #[arg(long, default_value_t = 2_000)]
        deploy_every_ms: u64,
        /// Stop after this many seconds.
        #[arg(long)]
        duration_s: Option<u64>,
        /// Append every acknowledged completion (`ITEM_ID LEDGER_SEQ`) to this file, for
        /// `muster-sim check --acks`.
        #[arg(long)]
        acks: Option<PathBuf>,
    },
    /// Enqueues root `trawl` items with their failure plans (as the operator); prints a JSON
    /// summary line with what the plans add up to.
    Enqueue {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        roots: u64,
        /// Index of the first root.
        #[arg(long, default_value_t = 0)]
        first: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Share of roots that fail for good at some stage.
        #[arg(long, default_value_t = 0.05)]
        fail_rate: f64,
        /// Share of roots with a stage that fails once, retryably.
        #[arg(long, default_value_t = 0.10)]
        flaky_rate: f64,
        /// Share of roots with a stage that reports needs_subtool once.
        #[arg(long, default_value_t = 0.05)]
        subtool_rate: f64,
        /// Share of roots with a stage whose first lease is abandoned (a worker crash).
        #[arg(long, default_value_t = 0.05)]
        crash_rate: f64,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Print what the plans add up to, enqueue nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Shows the live feed in `muster watch`'s view (`operator` or `conn` token). Ends on `q`,
    /// SIGINT/SIGTERM, or once `--until-items` items exist and all are finished.
    Watch {
        /// Base URL of a Muster replica; repeat for several.
        #[arg(long = "url", required = true)]
        urls: Vec<String>,
        /// JSON file mapping principal to plain token.
        #[arg(long)]
        tokens: PathBuf,
        #[arg(long)]
        until_items: Option<u64>,
    },
    /// Checks a finished run in the database; prints a JSON report, exits 1 on any violation.
    Check {
        #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// Roots enqueued (indexes 0 .. roots).
        #[arg(long)]
        roots: u64,
        /// JSON array of faults (`{"name", "start_ms", "end_ms", "worker_prefix",
        /// "hides_commit_outcomes", "probes"}`) to measure the recovery from and judge.
        #[arg(long)]
        faults: Option<PathBuf>,
        /// Files of acknowledged completions (`muster-sim run --acks`); each must be in the
        /// ledger at the sequence number its answer named. Repeat for several.
        #[arg(long)]
        acks: Vec<PathBuf>,
        /// Report files of the run's clients (`muster-sim run|enqueue --report`), summed and
        /// judged: no 5xx but 503, no answer outside the contract's expectations. A missing
        /// one (a process killed before its first report) counts as empty. Repeat for several.
        #[arg(long)]
        reports: Vec<PathBuf>,
    },
}

fn init_logging() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,muster_worker=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// A watch that turns true on SIGTERM or SIGINT.
fn shutdown_on_signal() -> anyhow::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = watch::channel(false);
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// Rewrites the report file every second until the process ends.
fn keep_report(stats: &Stats) {
    let stats = stats.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stats.write_report();
        }
    });
}

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    match run(Cli::parse().command).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("muster-sim: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Run {
            target,
            spool,
            name,
            workers,
            kinds,
            work_ms,
            wait_ms,
            shipkeeper,
            deploy_every_ms,
            duration_s,
            acks,
        } => {
            let tokens = read_tokens(&target.tokens)?;
            let mut stats = Stats::with_report(target.report.clone());
            if let Some(path) = &acks {
                stats = stats
                    .with_acks(path)
                    .with_context(|| format!("open {}", path.display()))?;
            }
            keep_report(&stats);
            let mut shutdown = shutdown_on_signal()?;
            let (stop_tx, stop_rx) = watch::channel(false);
            tokio::spawn(async move {
                let until = async {
                    match duration_s {
                        Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = until => {}
                    _ = shutdown.wait_for(|s| *s) => {}
                }
                let _ = stop_tx.send(true);
            });
            let cfg = FleetConfig {
                urls: target.urls,
                tokens,
                spool,
                name,
                workers,
                kinds: if kinds.is_empty() {
                    Kind::ALL.to_vec()
                } else {
                    kinds
                },
                work_ms,
                wait_ms,
                shipkeeper,
                deploy_every_ms,
            };
            let mut stopped = stop_rx.clone();
            let fleet = tokio::spawn(fleet::run(cfg, stats.clone(), stop_rx));
            // Workers put down what they hold; a delivery still retrying stays in the spool.
            let _ = stopped.wait_for(|s| *s).await;
            let finished = tokio::time::timeout(Duration::from_secs(10), fleet).await;
            if let Ok(Ok(Err(e))) = finished {
                return Err(e);
            }
            stats.write_report();
            println!("{}", stats.summary_line());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Enqueue {
            target,
            roots,
            first,
            seed,
            fail_rate,
            flaky_rate,
            subtool_rate,
            crash_rate,
            concurrency,
            dry_run,
        } => {
            let rates = Rates {
                fail: fail_rate,
                flaky: flaky_rate,
                subtool: subtool_rate,
                crash: crash_rate,
            };
            for (name, r) in [
                ("fail", fail_rate),
                ("flaky", flaky_rate),
                ("subtool", subtool_rate),
                ("crash", crash_rate),
            ] {
                anyhow::ensure!((0.0..=1.0).contains(&r), "--{name}-rate must be in 0 ..= 1");
            }
            let plans = enqueue::plans(seed, &rates, first, roots);
            let planned = enqueue::planned(&plans);
            let stats = Stats::with_report(target.report.clone());
            if !dry_run {
                let tokens = read_tokens(&target.tokens)?;
                let api = Api::new(&target.urls, token(&tokens, "operator")?)?;
                keep_report(&stats);
                enqueue::enqueue(&api, &stats, plans, concurrency).await?;
                stats.write_report();
            }
            let mut line = serde_json::to_value(stats.snapshot())?;
            line["planned"] = serde_json::to_value(&planned)?;
            println!("{line}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Watch {
            urls,
            tokens,
            until_items,
        } => {
            let tokens = read_tokens(&tokens)?;
            let token = token(&tokens, "conn").or_else(|_| token(&tokens, "operator"))?;
            let model = muster_sim::watch::watch(&urls, token, until_items).await?;
            let (finished, all) = model.totals();
            println!(
                "{finished}/{all} items finished; {} transitions seen, ledger seq {}",
                model.transitions, model.seq
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check {
            database_url,
            roots,
            faults,
            acks,
            reports,
        } => {
            let faults: Vec<Fault> = match faults {
                Some(path) => serde_json::from_slice(
                    &std::fs::read(&path).with_context(|| format!("read {}", path.display()))?,
                )
                .with_context(|| format!("{} is not a JSON array of faults", path.display()))?,
                None => Vec::new(),
            };
            let db = check::connect(&database_url)
                .await
                .context("connect to the database")?;
            let mut acked = Vec::new();
            for path in &acks {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("read {}", path.display()))?;
                acked.extend(check::parse_acks(&text));
            }
            let evidence = Evidence {
                faults,
                acked,
                clients: (!reports.is_empty()).then(|| Summary::sum_reports(&reports)),
            };
            let report = check::check(&db, roots, &evidence).await?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
