//! `cargo xtask chaos [--short]`: the fault suite. Real processes on a real PostgreSQL (fsync
//! on): `muster serve` replicas, `muster-sim` fleets and the enqueuer, while this task SIGKILLs
//! Muster and restarts it, stops and restarts PostgreSQL (fast and immediate), SIGKILLs fleet
//! processes mid-lease and restarts them on the same spool, and kills a replica for good.
//! This task orchestrates and records; it does not judge the outcome. `muster-sim check` does
//! (bins/muster-sim/src/check.rs): from the database itself, that every chain ended where its
//! plan says, that nothing was lost or applied twice and that every acknowledged completion is
//! in the ledger; from the clients' reports, that none saw a 5xx other than 503 or another
//! answer the contract rules out; from the faults' probes, that no request hung and every
//! replica answered again in time; and the recovery figures. `muster ledger-verify` checks
//! every ledger chain. This task adds only what it alone sees: a process that died or did not
//! stop cleanly, a run that did not finish, a fault not injected. Prints a summary table;
//! exits non-zero on any violation. See docs/chaos.md.
//!
//! `--network` runs the same checks with every process on a host of its own (network
//! namespaces, `lab.rs`) and network faults instead (`network.rs`): dropped links, a one-way
//! partition, and Logbook's primary dying with its synchronous standby promoted.
//!
//! The suite's modules: this one (the scenarios, their faults and the run of them all),
//! `run.rs` (one scenario: its replicas, fleet, enqueuer and the faults injected into them),
//! `finish.rs` (stopping a scenario and asking the judges) and `summary.rs` (the table).

mod finish;
mod lab;
mod network;
mod run;
mod summary;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use muster_devdb::{ClusterOptions, StopMode, TempCluster};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::procs::{Reaper, banner, cargo, step, target_dir, workspace_root};
use lab::Lab;
use run::{Run, Site};
use summary::render;

/// Lease TTL of the chaos servers: crashed leases come back within seconds.
const LEASE_TTL_MS: u64 = 2_000;

/// Faults happen when this share of the expected items has finished (spread over the range).
const FAULT_WINDOW: (f64, f64) = (0.05, 0.75);

/// A fault this suite injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL replica 0, restart it on the same port.
    KillMuster,
    /// Stop PostgreSQL (fast or immediate), start it again on the same port and data.
    PgRestart(StopMode),
    /// SIGKILL a fleet process mid-lease, restart it on the same spool.
    KillSim,
    /// SIGKILL the last replica for good (the fleet fails over to the others).
    LoseReplica,
    /// All at once: SIGKILL replica 0 and a fleet process, stop PostgreSQL immediately; then
    /// bring all three back.
    Storm,
    /// `--network`: every packet between replica 0 and the primary dropped, then healed.
    CutFromLogbook,
    /// `--network`: every packet between the fleet and replica 1 dropped, then healed.
    CutFleet,
    /// `--network`: replica 1 receives nothing from the primary (what it sends arrives, its
    /// commits happen, their outcomes never reach it), then healed.
    OneWay,
    /// `--network`: every packet from the primary to replica 1 that carries a COMMIT's answer
    /// is dropped (and its retransmissions): the commits happen, the replica never learns it,
    /// while keep-alives and everything else get through. Then healed.
    LostCommits,
    /// `--network`: the primary dies (its link dropped, its processes SIGKILLed) and the
    /// standby is promoted; the old primary does not come back.
    Failover,
    /// `--network`: the primary freezes (its processes SIGSTOPped: its kernel still accepts
    /// connections and acknowledges every packet, nothing is ever answered) and the standby
    /// is promoted; the old primary stays frozen.
    FrozenPrimary,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::KillMuster => "muster SIGKILL + restart",
            Fault::PgRestart(StopMode::Fast) => "PostgreSQL fast restart",
            Fault::PgRestart(StopMode::Immediate) => "PostgreSQL immediate restart",
            Fault::KillSim => "fleet process SIGKILL + restart",
            Fault::LoseReplica => "replica SIGKILL for good",
            Fault::Storm => "all at once (muster, fleet, PostgreSQL immediate)",
            Fault::CutFromLogbook => "replica 0 cut from the primary (dropped both ways), healed",
            Fault::CutFleet => "fleet cut from replica 1 (dropped both ways), healed",
            Fault::OneWay => "one-way: replica 1 hears nothing from the primary, healed",
            Fault::LostCommits => "replica 1 never hears its COMMITs' answers, healed",
            Fault::Failover => "primary dies, standby promoted",
            Fault::FrozenPrimary => "primary freezes (link up, nothing answered), standby promoted",
        }
    }

    /// The fault promotes the standby: the lab has one, so it comes last and only once.
    fn promotes(self) -> bool {
        matches!(self, Fault::Failover | Fault::FrozenPrimary)
    }
}

/// One scenario: its own database, replicas, fleet and roots.
#[derive(Debug, Clone)]
struct Scenario {
    name: &'static str,
    roots: u64,
    replicas: usize,
    sims: usize,
    workers_per_sim: usize,
    /// How long a simulated worker works on an item (`muster-sim run --work-ms`).
    work_ms: u64,
    faults: Vec<Fault>,
}

/// The scenarios of a run: one each (then all together) for the full run, one combined
/// scenario with one fault of each kind for `--short`.
fn scenarios(short: bool, roots: Option<u64>) -> Vec<Scenario> {
    use Fault::*;
    let fast = PgRestart(StopMode::Fast);
    let immediate = PgRestart(StopMode::Immediate);
    if short {
        return vec![Scenario {
            name: "short",
            roots: roots.unwrap_or(300),
            replicas: 2,
            sims: 2,
            workers_per_sim: 20,
            work_ms: 10,
            faults: vec![KillMuster, fast, immediate, KillSim, LoseReplica, Storm],
        }];
    }
    let each = roots.unwrap_or(1_000);
    let scenario = |name, replicas, sims, faults| Scenario {
        name,
        roots: each,
        replicas,
        sims,
        workers_per_sim: 20,
        work_ms: 10,
        faults,
    };
    vec![
        scenario("muster-kill", 1, 2, vec![KillMuster; 4]),
        scenario(
            "postgres-restart",
            1,
            2,
            vec![fast, immediate, fast, immediate],
        ),
        scenario("worker-kill", 1, 3, vec![KillSim; 4]),
        scenario("replica-loss", 2, 2, vec![LoseReplica]),
        Scenario {
            name: "all-together",
            roots: roots.unwrap_or(5_000),
            replicas: 2,
            sims: 3,
            workers_per_sim: 20,
            work_ms: 10,
            faults: vec![
                KillMuster,
                KillMuster,
                KillMuster,
                fast,
                immediate,
                KillSim,
                KillSim,
                KillSim,
                LoseReplica,
                Storm,
                Storm,
            ],
        },
    ]
}

/// `muster-sim run --work-ms` of the `--network` scenarios.
const NETWORK_WORK_MS: u64 = 600;

/// The scenarios of a `--network` run: one for each fault (the lost COMMIT answers on their
/// own: commits whose outcome the replica never learned), then all together; `--short` runs
/// the last only, smaller, and the frozen primary alone (a lab has one standby to promote).
fn network_scenarios(short: bool, roots: Option<u64>) -> Vec<Scenario> {
    use Fault::*;
    let scenario = |name, roots, faults| Scenario {
        name,
        roots,
        replicas: 2,
        sims: 2,
        workers_per_sim: 20,
        // Slow enough that items still flow when the last fault comes: the faults hold for
        // seconds each (the dead-link limit is 8 s), and a fault on an idle system finds nothing.
        work_ms: NETWORK_WORK_MS,
        faults,
    };
    let all = vec![CutFromLogbook, CutFleet, OneWay, LostCommits, Failover];
    if short {
        return vec![
            scenario("network-short", roots.unwrap_or(300), all),
            scenario(
                "frozen-short",
                roots.unwrap_or(300) / 2,
                vec![FrozenPrimary],
            ),
        ];
    }
    let each = roots.unwrap_or(1_000);
    vec![
        scenario("dead-link", each, vec![CutFromLogbook; 2]),
        scenario("fleet-cut", each, vec![CutFleet; 2]),
        scenario("one-way", each, vec![OneWay; 2]),
        scenario("unknown-commit", each, vec![LostCommits; 2]),
        scenario("failover", each, vec![Failover]),
        scenario("frozen-primary", each, vec![FrozenPrimary]),
        scenario("network-all", roots.unwrap_or(3_000), all),
    ]
}

/// The order a scenario's faults come in: shuffled, but a promotion last (the old primary
/// does not come back), and lost COMMIT answers on replica 1 while workers use it: right after
/// the cut of replica 0 from Logbook (whose workers failed over to replica 1), or first (the
/// fleet's workers start spread over the replicas). After a fault on replica 1 its workers have
/// moved to replica 0 and stay there, and a fault that hides commits' outcomes would find none.
fn fault_order(faults: &[Fault], rng: &mut StdRng) -> Vec<Fault> {
    let mut order = faults.to_vec();
    order.shuffle(rng);
    order.sort_by_key(|f| f.promotes());
    if let Some(lost) = order.iter().position(|f| *f == Fault::LostCommits) {
        order.remove(lost);
        let at = order
            .iter()
            .position(|f| *f == Fault::CutFromLogbook)
            .map_or(0, |cut| cut + 1);
        order.insert(at, Fault::LostCommits);
    }
    order
}

/// The finished-share thresholds at which `n` faults fire: one in each of `n` equal slots of
/// [`FAULT_WINDOW`], at a random place inside it, so they are increasing and spread out.
fn thresholds(rng: &mut StdRng, n: usize) -> Vec<f64> {
    let (lo, hi) = FAULT_WINDOW;
    let slot = (hi - lo) / n.max(1) as f64;
    (0..n)
        .map(|i| lo + slot * (i as f64 + rng.random_range(0.1..0.9)))
        .collect()
}

#[derive(Debug)]
struct Options {
    short: bool,
    network: bool,
    seed: u64,
    roots: Option<u64>,
    release: bool,
    only: Option<String>,
}

fn parse_options(args: &[String]) -> Result<Options> {
    let mut options = Options {
        short: false,
        network: false,
        seed: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1),
        roots: None,
        release: false,
        only: None,
    };
    let mut release = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--short" => options.short = true,
            "--network" => options.network = true,
            "--release" => release = Some(true),
            "--debug" => release = Some(false),
            "--seed" => options.seed = value("--seed")?.parse().context("--seed")?,
            "--roots" => options.roots = Some(value("--roots")?.parse().context("--roots")?),
            "--scenario" => options.only = Some(value("--scenario")?),
            other => bail!(
                "unknown argument `{other}` (cargo xtask chaos [--network] [--short] [--seed N] \
                 [--roots N] [--scenario NAME] [--release|--debug])"
            ),
        }
    }
    // The short run is part of the test command: it reuses the debug build `cargo test` made.
    options.release = release.unwrap_or(!options.short);
    Ok(options)
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

pub(crate) fn chaos(args: Vec<OsString>) -> Result<ExitCode> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let options = parse_options(&args)?;
    let root = workspace_root();
    let profile = if options.release { "release" } else { "debug" };
    let mut build = cargo(&root);
    build.args(["build", "-p", "muster", "-p", "muster-sim"]);
    if options.release {
        build.arg("--release");
    }
    step(
        &format!("cargo build -p muster -p muster-sim ({profile})"),
        &mut build,
    )?;
    let bin = target_dir(&root).join(profile);
    let kind = match (options.network, options.short) {
        (false, true) => "short",
        (false, false) => "full",
        (true, true) => "network-short",
        (true, false) => "network-full",
    };
    let chaos_dir = target_dir(&root).join("chaos");
    // Keep only the newest run of each kind: every short run (part of the test command) leaves
    // a few MB of logs and reports.
    if let Ok(entries) = fs::read_dir(&chaos_dir) {
        for entry in entries.filter_map(Result::ok) {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("{kind}-"))
            {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
    let run_dir = chaos_dir.join(format!("{kind}-{}", std::process::id()));
    fs::create_dir_all(&run_dir).with_context(|| format!("create {}", run_dir.display()))?;
    let mut selected = if options.network {
        network_scenarios(options.short, options.roots)
    } else {
        scenarios(options.short, options.roots)
    };
    if let Some(only) = &options.only {
        selected.retain(|s| s.name == only);
        if selected.is_empty() {
            bail!("no scenario named `{only}`");
        }
    }
    println!(
        "chaos: seed {} ({} build); logs, reports and spools in {}",
        options.seed,
        profile,
        run_dir.display()
    );

    // The loopback suite shares one cluster; a network scenario builds a lab of its own.
    let mut cluster = if options.network {
        None
    } else {
        banner("starting a throwaway PostgreSQL cluster (fsync on)");
        Some(
            TempCluster::start_with(ClusterOptions {
                fsync: true,
                max_connections: 200,
                log_to: Some(run_dir.join("postgres.log")),
                ..ClusterOptions::default()
            })
            .context("could not start PostgreSQL")?,
        )
    };
    let reaper = Reaper::start(&run_dir)?;
    let ctx = Ctx {
        muster: bin.join("muster"),
        sim: bin.join("muster-sim"),
        dir: run_dir.clone(),
        reaper,
    };
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut results = Vec::new();
    for (n, scenario) in selected.iter().enumerate() {
        banner(&format!(
            "scenario {}: {} roots, {} replica(s), {} fleet processes, faults: {}",
            scenario.name,
            scenario.roots,
            scenario.replicas,
            scenario.sims,
            scenario
                .faults
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let site = match cluster.as_mut() {
            Some(cluster) => Site::Local(cluster),
            None => {
                banner("the lab: hosts pg1 (primary), pg2 (synchronous standby), m0, m1, fleet");
                let logs = run_dir.join(scenario.name);
                fs::create_dir_all(&logs)?;
                Site::Net(Box::new(
                    Lab::start(n, &logs).context("could not build the network lab")?,
                ))
            }
        };
        let result = Run::new(&ctx, site, scenario)
            .and_then(|mut run| run.run(&mut rng))
            .with_context(|| format!("scenario {}", scenario.name))?;
        println!(
            "scenario {} finished in {:.1} s with {} violation(s)",
            scenario.name,
            result.seconds,
            result.violations.len()
        );
        results.push(result);
    }
    if let Some(mut cluster) = cluster {
        let _ = cluster.stop(StopMode::Fast);
    }

    let table = render(&results);
    println!("\n{table}");
    let violations: usize = results.iter().map(|r| r.violations.len()).sum();
    for r in &results {
        for v in &r.violations {
            println!("VIOLATION [{}] {v}", r.name);
        }
    }
    fs::write(run_dir.join("summary.md"), &table)?;
    println!(
        "chaos: {} scenario(s), {:.1} s in all, seed {}; {}",
        results.len(),
        started.elapsed().as_secs_f64(),
        options.seed,
        if violations == 0 {
            "no violation".to_owned()
        } else {
            format!("{violations} violation(s)")
        }
    );
    Ok(if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What every scenario shares.
struct Ctx {
    muster: PathBuf,
    sim: PathBuf,
    dir: PathBuf,
    reaper: Reaper,
}
