//! `cargo xtask chaos [--short]`: the fault suite. Real processes on a real PostgreSQL (fsync
//! on): `muster serve` replicas, `muster-sim` fleets and the enqueuer, while this task SIGKILLs
//! Muster and restarts it, stops and restarts PostgreSQL (fast and immediate), SIGKILLs fleet
//! processes mid-lease and restarts them on the same spool, and kills a replica for good.
//! Then it checks, from the database itself, that every chain ended where its plan says and
//! that nothing was lost or applied twice (`muster-sim check`), that every ledger chain verifies
//! (`muster ledger-verify`), and that no client saw a 5xx other than 503. Prints a summary
//! table; exits non-zero on any violation. See docs/chaos.md.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use muster_devdb::{ClusterOptions, StopMode, TempCluster, find_bin};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::{
    banner, cargo, dev_principals, new_token, psql, step, target_dir, tokens_file_json,
    workspace_root,
};

/// Lease TTL of the chaos servers: crashed leases come back within seconds.
const LEASE_TTL_MS: u64 = 2_000;

/// Retry policy of every kind: quick backoff, and enough attempts that only the plans end
/// chains in `failed` (with the default 5, repeated injected faults could use up an item's
/// attempts, which would be correct behaviour but not the plan's outcome).
pub(crate) const PIPELINE: &str = r#"{"retry": {
  "trawl": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "sextant": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "assay": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "countersign": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "waybill": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "moldloft": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "shakedown": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "chartroom": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "tidegauge": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25},
  "bellbuoy": {"base_ms": 100, "factor": 2, "cap_ms": 1000, "max_attempts": 25}
}}"#;

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
        }
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
    seed: u64,
    roots: Option<u64>,
    release: bool,
    only: Option<String>,
}

fn parse_options(args: &[String]) -> Result<Options> {
    let mut options = Options {
        short: false,
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
            "--release" => release = Some(true),
            "--debug" => release = Some(false),
            "--seed" => options.seed = value("--seed")?.parse().context("--seed")?,
            "--roots" => options.roots = Some(value("--roots")?.parse().context("--roots")?),
            "--scenario" => options.only = Some(value("--scenario")?),
            other => bail!(
                "unknown argument `{other}` (cargo xtask chaos [--short] [--seed N] [--roots N] \
                 [--scenario NAME] [--release|--debug])"
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
    let kind = if options.short { "short" } else { "full" };
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
    let mut selected = scenarios(options.short, options.roots);
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

    banner("starting a throwaway PostgreSQL cluster (fsync on)");
    let mut cluster = TempCluster::start_with(ClusterOptions {
        fsync: true,
        max_connections: 200,
        log_to: Some(run_dir.join("postgres.log")),
        ..ClusterOptions::default()
    })
    .context("could not start PostgreSQL")?;
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
    for scenario in &selected {
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
        let result = Run::new(&ctx, &mut cluster, scenario)
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
    let _ = cluster.stop(StopMode::Fast);
    drop(cluster);

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

/// Kills the processes this task started if it dies without cleaning up (SIGKILL, Ctrl-C):
/// a detached `sh` that waits for this process to disappear, then SIGKILLs every pid listed
/// in `<dir>/pids` whose command line still names muster.
pub(crate) struct Reaper {
    pids: PathBuf,
    watchdog: Child,
}

const REAPER_SCRIPT: &str = r#"trap '' INT HUP TERM
while kill -0 "$1" 2>/dev/null; do sleep 1; done
for p in $(cat "$2" 2>/dev/null); do
  if grep -q muster "/proc/$p/cmdline" 2>/dev/null; then kill -KILL "$p" 2>/dev/null; fi
done
"#;

impl Reaper {
    pub(crate) fn start(dir: &Path) -> Result<Reaper> {
        use std::os::unix::process::CommandExt;
        let pids = dir.join("pids");
        File::create(&pids)?;
        let watchdog = Command::new("/bin/sh")
            .arg("-c")
            .arg(REAPER_SCRIPT)
            .arg("muster-chaos-reaper")
            .arg(std::process::id().to_string())
            .arg(&pids)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("spawn the process reaper")?;
        Ok(Reaper { pids, watchdog })
    }

    pub(crate) fn track(&self, pid: u32) {
        if let Ok(mut f) = OpenOptions::new().append(true).open(&self.pids) {
            let _ = writeln!(f, "{pid}");
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// A child process that is SIGKILLed if still running when dropped.
pub(crate) struct Proc {
    pub(crate) child: Child,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then SIGKILL after `grace`; the exit status when it exited by itself.
    pub(crate) fn terminate(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        if let Some(status) = self.exited() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.sigkill();
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.sigkill();
        }
    }
}

pub(crate) fn append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))
}

/// A muster replica: its port and the current process, if any.
struct Replica {
    port: u16,
    log: PathBuf,
    proc: Option<Proc>,
    /// Killed for good.
    lost: bool,
}

/// A fleet process slot: its spool and the current process.
struct Sim {
    index: usize,
    spool: PathBuf,
    proc: Option<Proc>,
    incarnation: usize,
    reports: Vec<PathBuf>,
}

/// What one fault did, for `muster-sim check --faults`.
#[derive(Debug, Clone)]
struct FaultRecord {
    name: String,
    start_ms: f64,
    end_ms: f64,
    worker_prefix: Option<String>,
}

/// The outcome of a scenario.
#[derive(Debug, Default)]
struct ScenarioResult {
    name: String,
    roots: u64,
    seconds: f64,
    muster_kills: u64,
    muster_restarts: u64,
    replicas_lost: u64,
    pg_fast: u64,
    pg_immediate: u64,
    sim_kills: u64,
    faults_planned: usize,
    faults: Vec<FaultRecord>,
    check: Value,
    clients: Value,
    ledger: String,
    violations: Vec<String>,
}

/// A scenario in progress.
struct Run<'a> {
    ctx: &'a Ctx,
    cluster: &'a mut TempCluster,
    scenario: &'a Scenario,
    dir: PathBuf,
    url: String,
    tokens: PathBuf,
    sim_tokens: PathBuf,
    pipeline: PathBuf,
    replicas: Vec<Replica>,
    sims: Vec<Sim>,
    result: ScenarioResult,
}

impl<'a> Run<'a> {
    fn new(ctx: &'a Ctx, cluster: &'a mut TempCluster, scenario: &'a Scenario) -> Result<Run<'a>> {
        let dir = ctx.dir.join(scenario.name);
        fs::create_dir_all(&dir)?;
        let db = format!("chaos_{}", scenario.name.replace('-', "_"));
        psql(&cluster.url("postgres"), &format!("create database {db}"))?;
        let url = cluster.url(&db);
        step(
            "muster migrate",
            Command::new(&ctx.muster)
                .args(["migrate", "--database-url", &url, "--log-format", "pretty"])
                .env("RUST_LOG", "warn"),
        )?;
        let FleetFiles {
            tokens: tokens_path,
            sim_tokens,
            pipeline,
        } = fleet_files(&dir)?;
        let replicas = (0..scenario.replicas)
            .map(|i| {
                Ok(Replica {
                    port: free_port()?,
                    log: dir.join(format!("muster-{i}.log")),
                    proc: None,
                    lost: false,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let sims = (0..scenario.sims)
            .map(|i| Sim {
                index: i,
                spool: dir.join(format!("spool-{i}")),
                proc: None,
                incarnation: 0,
                reports: Vec::new(),
            })
            .collect();
        Ok(Run {
            ctx,
            cluster,
            scenario,
            dir,
            url,
            tokens: tokens_path,
            sim_tokens,
            pipeline,
            replicas,
            sims,
            result: ScenarioResult {
                name: scenario.name.to_owned(),
                roots: scenario.roots,
                faults_planned: scenario.faults.len(),
                ..ScenarioResult::default()
            },
        })
    }

    fn urls(&self) -> Vec<String> {
        self.replicas
            .iter()
            .map(|r| format!("http://127.0.0.1:{}", r.port))
            .collect()
    }

    fn start_replica(&mut self, i: usize) -> Result<()> {
        let r = &self.replicas[i];
        let log = append(&r.log)?;
        let child = Command::new(&self.ctx.muster)
            .arg("serve")
            .args(["--database-url", &self.url])
            .args(["--listen", &format!("127.0.0.1:{}", r.port)])
            .arg("--tokens")
            .arg(&self.tokens)
            .arg("--pipeline")
            .arg(&self.pipeline)
            .args(["--lease-ttl-ms", &LEASE_TTL_MS.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("start muster serve")?;
        self.ctx.reaper.track(child.id());
        let mut proc = Proc { child };
        wait_healthy(r.port, &mut proc, &r.log)?;
        self.replicas[i].proc = Some(proc);
        Ok(())
    }

    fn start_sim(&mut self, i: usize) -> Result<()> {
        let urls = self.urls();
        let sim = &mut self.sims[i];
        sim.incarnation += 1;
        let report = self.dir.join(format!("sim-{i}-{}.json", sim.incarnation));
        let log = append(&self.dir.join(format!("sim-{i}.log")))?;
        let mut cmd = Command::new(&self.ctx.sim);
        cmd.arg("run");
        // A restarted process is configured like the first one: a lost replica stays in its
        // list, and the process must fail over by itself.
        for u in &urls {
            cmd.args(["--url", u]);
        }
        let child = cmd
            .arg("--tokens")
            .arg(&self.sim_tokens)
            .arg("--spool")
            .arg(&sim.spool)
            .args(["--name", &format!("s{i}")])
            .args(["--workers", &self.scenario.workers_per_sim.to_string()])
            .args(["--work-ms", "10", "--wait-ms", "2000"])
            .args(["--shipkeeper", "--deploy-every-ms", "1500"])
            .arg("--report")
            .arg(&report)
            .stdin(Stdio::null())
            .stdout(File::create(report.with_extension("out"))?)
            .stderr(log)
            .spawn()
            .context("start muster-sim run")?;
        self.ctx.reaper.track(child.id());
        sim.reports.push(report);
        sim.proc = Some(Proc { child });
        Ok(())
    }

    /// `(finished, total)` items, or `None` while the database does not answer.
    fn progress(&self) -> Option<(u64, u64)> {
        let out = psql_value(
            &self.url,
            "SELECT count(*) FILTER (WHERE state IN ('done', 'failed')) || ' ' || count(*) FROM core.items",
        )
        .ok()?;
        let mut parts = out.split_whitespace().map(|s| s.parse::<u64>().ok());
        Some((parts.next()??, parts.next()??))
    }

    fn run(&mut self, rng: &mut StdRng) -> Result<ScenarioResult> {
        let started = Instant::now();
        for i in 0..self.replicas.len() {
            self.start_replica(i)?;
        }
        let seed = rng.random::<u32>().to_string();
        let roots = self.scenario.roots.to_string();
        let plan_args = ["--roots", &roots, "--seed", &seed];
        let dry = Command::new(&self.ctx.sim)
            .arg("enqueue")
            .args(
                self.urls()
                    .iter()
                    .flat_map(|u| ["--url".to_owned(), u.clone()]),
            )
            .arg("--tokens")
            .arg(&self.sim_tokens)
            .args(plan_args)
            .arg("--dry-run")
            .output()
            .context("muster-sim enqueue --dry-run")?;
        if !dry.status.success() {
            bail!(
                "muster-sim enqueue --dry-run failed: {}",
                String::from_utf8_lossy(&dry.stderr)
            );
        }
        let planned: Value = serde_json::from_slice(&dry.stdout).context("dry-run summary")?;
        let expected = planned["planned"]["items"]
            .as_u64()
            .context("planned items")?;
        println!(
            "planned: {} items; {} chains end failed, {} crashes, {} parks, {} flaky failures",
            expected,
            planned["planned"]["failed_roots"],
            planned["planned"]["crashes"],
            planned["planned"]["parks"],
            planned["planned"]["flaky_failures"]
        );
        for i in 0..self.sims.len() {
            self.start_sim(i)?;
        }
        let enqueue_report = self.dir.join("enqueue.json");
        let child = Command::new(&self.ctx.sim)
            .arg("enqueue")
            .args(
                self.urls()
                    .iter()
                    .flat_map(|u| ["--url".to_owned(), u.clone()]),
            )
            .arg("--tokens")
            .arg(&self.sim_tokens)
            .args(plan_args)
            .arg("--report")
            .arg(&enqueue_report)
            .stdin(Stdio::null())
            .stdout(File::create(self.dir.join("enqueue.out"))?)
            .stderr(append(&self.dir.join("enqueue.log"))?)
            .spawn()
            .context("start muster-sim enqueue")?;
        self.ctx.reaper.track(child.id());
        let mut enqueuer = Proc { child };
        let mut enqueued = false;

        let mut faults = self.scenario.faults.clone();
        faults.shuffle(rng);
        let marks = thresholds(rng, faults.len());
        let mut pending: Vec<(f64, Fault)> = marks.into_iter().zip(faults).collect();
        pending.reverse();
        let deadline = started + Duration::from_secs(60 + self.scenario.roots / 4);
        let mut last_print = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(200));
            self.watch_processes()?;
            if !enqueued && let Some(status) = enqueuer.exited() {
                if !status.success() {
                    self.result.violations.push(format!(
                        "muster-sim enqueue exited with {status} (see enqueue.log)"
                    ));
                }
                enqueued = true;
            }
            let Some((finished, total)) = self.progress() else {
                continue;
            };
            if last_print.elapsed() > Duration::from_secs(5) {
                println!(
                    "  {:>5.1} s: {finished}/{expected} items finished ({total} created)",
                    started.elapsed().as_secs_f64()
                );
                last_print = Instant::now();
            }
            if let Some(&(mark, fault)) = pending.last()
                && finished as f64 >= mark * expected as f64
            {
                pending.pop();
                println!(
                    "  {:>5.1} s: {finished}/{expected} finished: {}",
                    started.elapsed().as_secs_f64(),
                    fault.name()
                );
                self.inject(fault, rng)?;
                continue;
            }
            if enqueued && total >= expected && finished == total {
                break;
            }
            if Instant::now() > deadline {
                self.result.violations.push(format!(
                    "not finished after {} s: {finished} of {total} items finished, {expected} expected",
                    started.elapsed().as_secs()
                ));
                break;
            }
        }
        for (_, fault) in pending.iter().rev() {
            self.result.violations.push(format!(
                "fault not injected (the run finished first): {}",
                fault.name()
            ));
        }
        self.result.seconds = started.elapsed().as_secs_f64();
        self.finish(enqueuer, &enqueue_report)?;
        Ok(std::mem::take(&mut self.result))
    }

    /// Processes that died without being killed are violations; they are restarted.
    fn watch_processes(&mut self) -> Result<()> {
        for i in 0..self.replicas.len() {
            if let Some(proc) = self.replicas[i].proc.as_mut()
                && let Some(status) = proc.exited()
            {
                self.result.violations.push(format!(
                    "muster replica {i} exited by itself ({status}); see muster-{i}.log"
                ));
                self.replicas[i].proc = None;
                self.start_replica(i)?;
            }
        }
        for i in 0..self.sims.len() {
            if let Some(proc) = self.sims[i].proc.as_mut()
                && let Some(status) = proc.exited()
            {
                self.result.violations.push(format!(
                    "fleet process {i} exited by itself ({status}); see sim-{i}.log"
                ));
                self.sims[i].proc = None;
                self.start_sim(i)?;
            }
        }
        Ok(())
    }

    fn pause(rng: &mut StdRng, range: std::ops::Range<u64>) {
        std::thread::sleep(Duration::from_millis(rng.random_range(range)));
    }

    fn kill_replica(&mut self, i: usize) {
        if let Some(mut proc) = self.replicas[i].proc.take() {
            proc.sigkill();
            self.result.muster_kills += 1;
        }
    }

    /// SIGKILLs a random fleet process; the worker-id prefix of that incarnation.
    fn kill_sim(&mut self, rng: &mut StdRng) -> Option<(usize, String)> {
        let i = rng.random_range(0..self.sims.len());
        let mut proc = self.sims[i].proc.take()?;
        let prefix = format!("s{i}.{}-", proc.pid());
        proc.sigkill();
        self.result.sim_kills += 1;
        Some((i, prefix))
    }

    fn stop_pg(&mut self, mode: StopMode) -> Result<()> {
        self.cluster.stop(mode).context("stop PostgreSQL")?;
        match mode {
            StopMode::Fast => self.result.pg_fast += 1,
            StopMode::Immediate => self.result.pg_immediate += 1,
        }
        Ok(())
    }

    fn inject(&mut self, fault: Fault, rng: &mut StdRng) -> Result<()> {
        let start_ms = now_ms();
        let mut worker_prefix = None;
        match fault {
            Fault::KillMuster => {
                self.kill_replica(0);
                Self::pause(rng, 200..1_500);
                self.start_replica(0)?;
                self.result.muster_restarts += 1;
            }
            Fault::PgRestart(mode) => {
                self.stop_pg(mode)?;
                Self::pause(rng, 500..2_500);
                self.cluster
                    .start_again()
                    .context("start PostgreSQL again")?;
            }
            Fault::KillSim => {
                if let Some((i, prefix)) = self.kill_sim(rng) {
                    worker_prefix = Some(prefix);
                    Self::pause(rng, 300..1_500);
                    self.start_sim(i)?;
                }
            }
            Fault::LoseReplica => {
                let last = self.replicas.len() - 1;
                if last == 0 || self.replicas[last].lost {
                    bail!("{} needs two replicas", fault.name());
                }
                self.kill_replica(last);
                self.replicas[last].lost = true;
                self.result.replicas_lost += 1;
            }
            Fault::Storm => {
                self.kill_replica(0);
                let killed = self.kill_sim(rng);
                self.stop_pg(StopMode::Immediate)?;
                Self::pause(rng, 1_000..2_500);
                self.cluster
                    .start_again()
                    .context("start PostgreSQL again")?;
                self.start_replica(0)?;
                self.result.muster_restarts += 1;
                if let Some((i, prefix)) = killed {
                    worker_prefix = Some(prefix);
                    self.start_sim(i)?;
                }
            }
        }
        let n = self.result.faults.len() + 1;
        self.result.faults.push(FaultRecord {
            name: format!("#{n} {}", fault.name()),
            start_ms,
            end_ms: now_ms(),
            worker_prefix,
        });
        Ok(())
    }

    /// Stops everything and checks the outcome.
    fn finish(&mut self, mut enqueuer: Proc, enqueue_report: &Path) -> Result<()> {
        if enqueuer.terminate(Duration::from_secs(5)).is_none() {
            self.result
                .violations
                .push("muster-sim enqueue did not finish".into());
        }
        // Give deliveries still retrying a moment to reach an answer.
        let until = Instant::now() + Duration::from_secs(5);
        while spool_files(&self.dir) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
        let left = spool_files(&self.dir);
        for sim in &mut self.sims {
            if let Some(mut proc) = sim.proc.take() {
                match proc.terminate(Duration::from_secs(15)) {
                    Some(status) if status.success() => {}
                    Some(status) => self.result.violations.push(format!(
                        "fleet process {} exited with {status} on SIGTERM",
                        sim.index
                    )),
                    None => self.result.violations.push(format!(
                        "fleet process {} did not stop within 15 s of SIGTERM",
                        sim.index
                    )),
                }
            }
        }
        for (i, replica) in self.replicas.iter_mut().enumerate() {
            if let Some(mut proc) = replica.proc.take() {
                match proc.terminate(Duration::from_secs(30)) {
                    Some(status) if status.success() => {}
                    Some(status) => self.result.violations.push(format!(
                        "muster replica {i} exited with {status} on SIGTERM"
                    )),
                    None => self.result.violations.push(format!(
                        "muster replica {i} did not stop within 30 s of SIGTERM"
                    )),
                }
            }
        }

        // Every answer every client saw.
        let mut reports = vec![enqueue_report.to_owned()];
        reports.extend(self.sims.iter().flat_map(|s| s.reports.iter().cloned()));
        let clients = merge_reports(&reports);
        let bad = clients["bad_5xx"].as_u64().unwrap_or(0);
        if bad > 0 {
            self.result.violations.push(format!(
                "clients saw {bad} 5xx answer(s) other than 503: {}",
                clients["unexpected"]
            ));
        }
        let unexpected = clients["unexpected_total"].as_u64().unwrap_or(0);
        if unexpected > bad {
            self.result.violations.push(format!(
                "clients saw {} answer(s) outside the contract's expectations (4xx other than \
                 409 E_LEASE_LOST, bad bodies): {}",
                unexpected - bad,
                clients["unexpected"]
            ));
        }
        if left > 0 {
            println!(
                "  note: {left} spool file(s) left undelivered at the end (see the spool dirs)"
            );
        }
        self.result.clients = clients;

        // The ledger's hash chains.
        let verify = Command::new(&self.ctx.muster)
            .args([
                "ledger-verify",
                "--database-url",
                &self.url,
                "--log-format",
                "pretty",
            ])
            .output()
            .context("muster ledger-verify")?;
        self.result.ledger = String::from_utf8_lossy(&verify.stdout).trim().to_owned();
        if !verify.status.success() {
            self.result.violations.push(format!(
                "muster ledger-verify failed: {}",
                String::from_utf8_lossy(&verify.stderr).trim()
            ));
        }

        // The outcome, from the database itself.
        let faults: Vec<Value> = self
            .result
            .faults
            .iter()
            .map(|f| {
                json!({"name": f.name, "start_ms": f.start_ms, "end_ms": f.end_ms,
                       "worker_prefix": f.worker_prefix})
            })
            .collect();
        let faults_path = self.dir.join("faults.json");
        fs::write(&faults_path, serde_json::to_string_pretty(&faults)?)?;
        let check = Command::new(&self.ctx.sim)
            .args([
                "check",
                "--database-url",
                &self.url,
                "--roots",
                &self.scenario.roots.to_string(),
            ])
            .arg("--faults")
            .arg(&faults_path)
            .output()
            .context("muster-sim check")?;
        fs::write(self.dir.join("check.json"), &check.stdout)?;
        let report: Value = serde_json::from_slice(&check.stdout).unwrap_or_else(
            |_| json!({"ok": false, "error": String::from_utf8_lossy(&check.stderr).trim()}),
        );
        if report["ok"] != true {
            match report["violations"].as_array() {
                Some(list) if !list.is_empty() => {
                    for v in list {
                        self.result.violations.push(format!(
                            "{} ({} rows), e.g. {}",
                            v["rule"].as_str().unwrap_or("?"),
                            v["count"],
                            v["samples"]
                        ));
                    }
                }
                _ => self
                    .result
                    .violations
                    .push(format!("muster-sim check failed: {}", report["error"])),
            }
        }
        self.result.check = report;
        Ok(())
    }
}

/// Spool files (pending deliveries) under a scenario's spool directories.
fn spool_files(dir: &Path) -> usize {
    fn count(p: &Path) -> usize {
        let Ok(entries) = fs::read_dir(p) else {
            return 0;
        };
        entries
            .filter_map(Result::ok)
            .map(|e| {
                let path = e.path();
                if path.is_dir() {
                    count(&path)
                } else {
                    usize::from(path.extension().is_some_and(|x| x == "json"))
                }
            })
            .sum()
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("spool-"))
        .map(|e| count(&e.path()))
        .sum()
}

/// Sums the JSON summaries of every client process (numbers added, status maps merged,
/// `unexpected` lists concatenated). A missing report (a process killed before its first
/// second) counts as empty.
fn merge_reports(paths: &[PathBuf]) -> Value {
    let mut total = json!({});
    for path in paths {
        let Ok(bytes) = fs::read(path) else { continue };
        let Ok(report) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        merge(&mut total, &report);
    }
    total
}

fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => a.extend(b.iter().cloned()),
        (a @ Value::Number(_), Value::Number(b)) => {
            let sum = a.as_u64().unwrap_or(0) + b.as_u64().unwrap_or(0);
            *a = json!(sum);
        }
        _ => {}
    }
}

pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}

pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits for `GET /healthz` to answer 200 (30 s at most).
pub(crate) fn wait_healthy(port: u16, proc: &mut Proc, log: &Path) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if let Some(status) = proc.exited() {
            bail!(
                "muster serve exited early ({status}); see {}",
                log.display()
            );
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "muster serve did not become healthy within 30 s; see {}",
        log.display()
    )
}

/// One value from psql (`-tA`).
fn psql_value(url: &str, sql: &str) -> Result<String> {
    let psql = find_bin("psql").context("psql not found")?;
    let output = Command::new(psql)
        .args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            sql,
        ])
        .stdin(Stdio::null())
        .output()?;
    if !output.status.success() {
        bail!("psql: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn n(v: &Value) -> String {
    match v {
        Value::Number(x) => x.to_string(),
        Value::Null => "0".into(),
        other => other.to_string(),
    }
}

fn show(s: Slowest) -> String {
    match s {
        Some((x, name)) => format!("{} ({name})", ms(Some(x))),
        None => "n/a".into(),
    }
}

fn ms(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0} ms", x))
        .unwrap_or_else(|| "n/a".into())
}

/// A duration in ms and the fault it belongs to.
type Slowest = Option<(f64, String)>;

/// Recoveries of a scenario: the longest time from a repair to the first completion after it,
/// the longest stretch without any completion around a fault (the stall the pipeline saw), and
/// the longest time from a fleet-process kill to the re-lease of the last item it held.
fn slowest(check: &Value) -> (Slowest, Slowest, Slowest) {
    let mut completion: Slowest = None;
    let mut outage: Slowest = None;
    let mut release: Slowest = None;
    for r in check["recoveries"].as_array().into_iter().flatten() {
        let name = r["name"].as_str().unwrap_or("?").to_owned();
        if let Some(x) = r["first_completion_ms"].as_f64()
            && completion.as_ref().is_none_or(|(y, _)| x > *y)
        {
            completion = Some((x, name.clone()));
        }
        if let Some(x) = r["longest_stall_ms"].as_f64()
            && outage.as_ref().is_none_or(|(y, _)| x > *y)
        {
            outage = Some((x, name.clone()));
        }
        if let Some(x) = r["slowest_release_ms"].as_f64()
            && release.as_ref().is_none_or(|(y, _)| x > *y)
        {
            release = Some((x, name));
        }
    }
    (completion, outage, release)
}

/// The summary table: one column per scenario.
fn render(results: &[ScenarioResult]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&ScenarioResult) -> String| {
        rows.push((label.to_owned(), results.iter().map(f).collect()));
    };
    row("roots enqueued", &|r| r.roots.to_string());
    row("items (done / failed)", &|r| {
        let s = &r.check["stats"];
        format!(
            "{} ({} / {})",
            n(&s["items"]),
            n(&s["done"]),
            n(&s["failed"])
        )
    });
    row("chains done at bellbuoy / failed as planned", &|r| {
        let s = &r.check["stats"];
        format!("{} / {}", n(&s["roots_done"]), n(&s["failed"]))
    });
    row("faults injected / planned", &|r| {
        format!("{} / {}", r.faults.len(), r.faults_planned)
    });
    row("muster SIGKILLs (restarted)", &|r| {
        format!("{} ({})", r.muster_kills, r.muster_restarts)
    });
    row("replicas lost for good", &|r| r.replicas_lost.to_string());
    row("PostgreSQL restarts fast / immediate", &|r| {
        format!("{} / {}", r.pg_fast, r.pg_immediate)
    });
    row("fleet processes SIGKILLed (restarted)", &|r| {
        format!("{0} ({0})", r.sim_kills)
    });
    row("planned crashes / parks / flaky failures", &|r| {
        let p = &r.check["planned"];
        format!(
            "{} / {} / {}",
            n(&p["crashes"]),
            n(&p["parks"]),
            n(&p["flaky_failures"])
        )
    });
    row("retries (retryable failures in the ledger)", &|r| {
        n(&r.check["stats"]["retryable_failures"])
    });
    row("parks / replays (ledger)", &|r| {
        let s = &r.check["stats"];
        format!("{} / {}", n(&s["parks"]), n(&s["replays"]))
    });
    row("digest reports (items they replayed)", &|r| {
        format!(
            "{} ({})",
            n(&r.clients["digests_reported"]),
            n(&r.clients["replayed_by_digest"])
        )
    });
    row(
        "leases (never finished: crashed, killed, superseded)",
        &|r| {
            let s = &r.check["stats"];
            format!("{} ({})", n(&s["leases"]), n(&s["leases_unfinished"]))
        },
    );
    row("late results recorded", &|r| {
        n(&r.check["stats"]["late_results"])
    });
    row(
        "deliveries redelivered from a spool after a restart",
        &|r| n(&r.clients["redelivered_from_spool"]),
    );
    row("completions answered replayed:true", &|r| {
        n(&r.clients["completes_replayed"])
    });
    row("409 E_LEASE_LOST seen by workers", &|r| {
        n(&r.clients["lease_lost"])
    });
    row("503 answers / connection errors / failovers seen", &|r| {
        let (mut s503, mut transport) = (0u64, 0u64);
        if let Some(ops) = r.clients["statuses"].as_object() {
            for by_status in ops.values() {
                s503 += by_status["503"].as_u64().unwrap_or(0);
                transport += by_status["transport"].as_u64().unwrap_or(0)
                    + by_status["timeout"].as_u64().unwrap_or(0);
            }
        }
        format!("{s503} / {transport} / {}", n(&r.clients["failovers"]))
    });
    row("5xx other than 503 seen by clients", &|r| {
        n(&r.clients["bad_5xx"])
    });
    row("slowest recovery (repair done → next completion)", &|r| {
        show(slowest(&r.check).0)
    });
    row("longest stall (no completion anywhere)", &|r| {
        show(slowest(&r.check).1)
    });
    row("slowest re-lease after a fleet kill (TTL 2 s)", &|r| {
        show(slowest(&r.check).2)
    });
    row("ledger-verify", &|r| r.ledger.clone());
    row("duration", &|r| format!("{:.1} s", r.seconds));
    row("violations", &|r| r.violations.len().to_string());

    let mut t = String::from("| | ");
    t.push_str(
        &results
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
    );
    t.push_str(" |\n|---|");
    t.push_str(&"---:|".repeat(results.len()));
    t.push('\n');
    for (label, cells) in rows {
        t.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    }
    t
}

/// The files a fleet run needs in `dir`: the server's token file (BLAKE3 hashes), the fleet's
/// plain tokens (owner-only), and the pipeline file.
pub(crate) struct FleetFiles {
    pub(crate) tokens: PathBuf,
    pub(crate) sim_tokens: PathBuf,
    pub(crate) pipeline: PathBuf,
}

/// Writes [`FleetFiles`] with a fresh token for every dev principal.
pub(crate) fn fleet_files(dir: &Path) -> Result<FleetFiles> {
    let tokens: Vec<(String, String)> = dev_principals()
        .into_iter()
        .map(|p| (p, new_token()))
        .collect();
    let tokens_path = dir.join("tokens.json");
    fs::write(
        &tokens_path,
        serde_json::to_string_pretty(&tokens_file_json(&tokens))?,
    )?;
    let plain: serde_json::Map<String, Value> = tokens
        .iter()
        .map(|(p, t)| (p.clone(), Value::String(t.clone())))
        .collect();
    let sim_tokens = dir.join("sim-tokens.json");
    write_private(&sim_tokens, Value::Object(plain).to_string().as_bytes())?;
    let pipeline = dir.join("pipeline.json");
    fs::write(&pipeline, PIPELINE)?;
    Ok(FleetFiles {
        tokens: tokens_path,
        sim_tokens,
        pipeline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_thresholds_rise_inside_the_window_and_repeat_per_seed() {
        let mut a = StdRng::seed_from_u64(3);
        let marks = thresholds(&mut a, 6);
        assert_eq!(marks.len(), 6);
        assert!(marks.windows(2).all(|w| w[0] < w[1]), "{marks:?}");
        assert!(
            marks
                .iter()
                .all(|m| (FAULT_WINDOW.0..FAULT_WINDOW.1).contains(m))
        );
        let mut b = StdRng::seed_from_u64(3);
        assert_eq!(thresholds(&mut b, 6), marks);
    }

    #[test]
    fn the_short_run_injects_one_fault_of_each_kind_on_two_replicas() {
        let short = scenarios(true, None);
        assert_eq!(short.len(), 1);
        assert_eq!((short[0].roots, short[0].replicas), (300, 2));
        assert_eq!(
            short[0].faults,
            vec![
                Fault::KillMuster,
                Fault::PgRestart(StopMode::Fast),
                Fault::PgRestart(StopMode::Immediate),
                Fault::KillSim,
                Fault::LoseReplica,
                Fault::Storm,
            ]
        );
    }

    #[test]
    fn the_full_run_has_each_fault_alone_then_all_together_on_5000_roots() {
        let full = scenarios(false, None);
        let names: Vec<&str> = full.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "muster-kill",
                "postgres-restart",
                "worker-kill",
                "replica-loss",
                "all-together"
            ]
        );
        assert_eq!(full[4].roots, 5_000);
        assert!(
            full.iter()
                .filter(|s| s.faults.contains(&Fault::LoseReplica))
                .all(|s| s.replicas == 2)
        );
    }

    #[test]
    fn options_default_to_debug_for_short_and_release_for_full() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let short = parse_options(&args(&["--short", "--seed", "9"])).unwrap();
        assert!(short.short && !short.release);
        assert_eq!(short.seed, 9);
        let full = parse_options(&args(&["--roots", "50", "--debug"])).unwrap();
        assert!(!full.short && !full.release);
        assert_eq!(full.roots, Some(50));
        assert!(parse_options(&args(&["--bogus"])).is_err());
        assert!(parse_options(&args(&[])).unwrap().release);
    }

    #[test]
    fn client_reports_are_summed_field_by_field() {
        let mut total = json!({});
        merge(
            &mut total,
            &json!({"leases": 2, "statuses": {"lease": {"200": 2}}, "unexpected": [1]}),
        );
        merge(
            &mut total,
            &json!({"leases": 3, "statuses": {"lease": {"200": 1, "503": 4}}, "unexpected": [2]}),
        );
        assert_eq!(
            total,
            json!({"leases": 5, "statuses": {"lease": {"200": 3, "503": 4}}, "unexpected": [1, 2]})
        );
    }

    #[test]
    fn the_slowest_recoveries_are_picked_by_kind() {
        let check = json!({"recoveries": [
            {"name": "#1 a", "first_completion_ms": 120.0, "longest_stall_ms": 3120.0,
             "slowest_release_ms": null},
            {"name": "#2 b", "first_completion_ms": 900.0, "longest_stall_ms": 950.0,
             "slowest_release_ms": 2100.0},
            {"name": "#3 c", "first_completion_ms": 15.0, "longest_stall_ms": null,
             "slowest_release_ms": 2500.0}
        ]});
        let (completion, stall, release) = slowest(&check);
        assert_eq!(completion, Some((900.0, "#2 b".to_owned())));
        assert_eq!(stall, Some((3120.0, "#1 a".to_owned())));
        assert_eq!(release, Some((2500.0, "#3 c".to_owned())));
    }
}
