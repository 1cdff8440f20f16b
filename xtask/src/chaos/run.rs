//! One scenario of the fault suite: its database, replicas, fleet processes and enqueuer, and
//! the faults injected into them while the items flow.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_devdb::{StopMode, TempCluster};
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};

use super::lab::{Host, Lab, MUSTER_PORT};
use super::network::NetFigures;
use super::{Ctx, Fault, LEASE_TTL_MS, Scenario, fault_order, now_ms, thresholds};
use crate::fleet::{FleetFiles, fleet_files};
use crate::procs::{
    Proc, append, free_port, migrate, migrated_database, psql, psql_query, runtime_url,
    wait_healthy,
};

/// Where a scenario's Logbook and processes run.
pub(super) enum Site<'a> {
    /// One throwaway cluster on loopback, shared by the run's scenarios; every process on
    /// this host.
    Local(&'a mut TempCluster),
    /// `--network`: a lab of the scenario's own, every process on a host of its own.
    Net(Box<Lab>),
}

/// A muster replica: its address (`host:port`) and the current process, if any.
pub(super) struct Replica {
    pub(super) addr: String,
    pub(super) log: PathBuf,
    pub(super) proc: Option<Proc>,
    /// Killed for good.
    pub(super) lost: bool,
}

/// A fleet process slot: its spool and the current process.
pub(super) struct Sim {
    pub(super) index: usize,
    pub(super) spool: PathBuf,
    pub(super) proc: Option<Proc>,
    pub(super) incarnation: usize,
    pub(super) reports: Vec<PathBuf>,
}

/// What one fault did, for `muster-sim check --faults`.
#[derive(Debug, Clone)]
pub(super) struct FaultRecord {
    pub(super) fault: Fault,
    pub(super) name: String,
    pub(super) start_ms: f64,
    pub(super) end_ms: f64,
    pub(super) worker_prefix: Option<String>,
    /// What the task's own probes saw (`--network` faults).
    pub(super) figures: Option<NetFigures>,
}

impl FaultRecord {
    /// The fault as `muster-sim check --faults` reads it.
    pub(super) fn to_json(&self) -> Value {
        json!({"name": self.name, "start_ms": self.start_ms, "end_ms": self.end_ms,
               "worker_prefix": self.worker_prefix,
               "hides_commit_outcomes": self.fault == Fault::LostCommits,
               "probes": self.figures.as_ref().map(NetFigures::to_json)})
    }
}

/// The outcome of a scenario.
#[derive(Debug, Default)]
pub(super) struct ScenarioResult {
    pub(super) name: String,
    pub(super) roots: u64,
    pub(super) seconds: f64,
    pub(super) muster_kills: u64,
    pub(super) muster_restarts: u64,
    pub(super) replicas_lost: u64,
    pub(super) pg_fast: u64,
    pub(super) pg_immediate: u64,
    pub(super) sim_kills: u64,
    pub(super) faults_planned: usize,
    pub(super) faults: Vec<FaultRecord>,
    /// `muster-sim check`'s report.
    pub(super) check: Value,
    pub(super) ledger: String,
    pub(super) violations: Vec<String>,
}

/// A scenario in progress.
pub(super) struct Run<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) site: Site<'a>,
    pub(super) scenario: &'a Scenario,
    pub(super) dir: PathBuf,
    pub(super) db: String,
    /// The superuser's URL of the database that takes writes (this task's reads and checks).
    pub(super) url: String,
    /// The URL `muster serve` is given.
    pub(super) serve_url: String,
    pub(super) tokens: PathBuf,
    pub(super) sim_tokens: PathBuf,
    pub(super) pipeline: PathBuf,
    pub(super) replicas: Vec<Replica>,
    pub(super) sims: Vec<Sim>,
    pub(super) result: ScenarioResult,
}

impl<'a> Run<'a> {
    pub(super) fn new(ctx: &'a Ctx, site: Site<'a>, scenario: &'a Scenario) -> Result<Run<'a>> {
        let dir = ctx.dir.join(scenario.name);
        fs::create_dir_all(&dir)?;
        let db = format!("chaos_{}", scenario.name.replace('-', "_"));
        let (url, serve_url) = match &site {
            Site::Local(cluster) => {
                let url = migrated_database(cluster, &ctx.muster, &db)?;
                let serve_url = runtime_url(&url);
                (url, serve_url)
            }
            Site::Net(lab) => {
                let primary = lab.superuser_url(lab.primary, "postgres");
                psql(&primary, &format!("create database {db}"))?;
                let url = lab.superuser_url(lab.primary, &db);
                migrate(&ctx.muster, &url)?;
                psql(
                    &primary,
                    &format!("alter role {} login", muster_devdb::RUNTIME_ROLE),
                )?;
                (url, lab.muster_url(muster_devdb::RUNTIME_ROLE, &db))
            }
        };
        let FleetFiles {
            tokens: tokens_path,
            sim_tokens,
            pipeline,
        } = fleet_files(&dir)?;
        let replicas = (0..scenario.replicas)
            .map(|i| {
                Ok(Replica {
                    addr: match &site {
                        Site::Local(_) => format!("127.0.0.1:{}", free_port()?),
                        Site::Net(_) => format!("{}:{MUSTER_PORT}", Host::replica(i).ip()),
                    },
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
            site,
            scenario,
            dir,
            db,
            url,
            serve_url,
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
            .map(|r| format!("http://{}", r.addr))
            .collect()
    }

    /// `program` run on `host`: this one, or the lab's host of that name.
    pub(super) fn command(&self, host: Host, program: &std::path::Path) -> Command {
        match &self.site {
            Site::Local(_) => Command::new(program),
            Site::Net(lab) => lab.command(host, program),
        }
    }

    fn start_replica(&mut self, i: usize) -> Result<()> {
        let r = &self.replicas[i];
        let log = append(&r.log)?;
        let mut serve = self.command(Host::replica(i), &self.ctx.muster);
        serve
            .arg("serve")
            .args(["--database-url", &self.serve_url])
            .args(["--listen", &r.addr])
            .arg("--tokens")
            .arg(&self.tokens)
            .arg("--pipeline")
            .arg(&self.pipeline)
            .args(["--lease-ttl-ms", &LEASE_TTL_MS.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let mut proc = self.ctx.reaper.spawn(&mut serve, "muster serve")?;
        wait_healthy(&r.addr, &mut proc, &r.log)?;
        self.replicas[i].proc = Some(proc);
        Ok(())
    }

    fn start_sim(&mut self, i: usize) -> Result<()> {
        let urls = self.urls();
        let mut cmd = self.command(Host::Fleet, &self.ctx.sim);
        let sim = &mut self.sims[i];
        sim.incarnation += 1;
        let report = self.dir.join(format!("sim-{i}-{}.json", sim.incarnation));
        let log = append(&self.dir.join(format!("sim-{i}.log")))?;
        cmd.arg("run");
        // A restarted process is configured like the first one: a lost replica stays in its
        // list, and the process must fail over by itself.
        for u in &urls {
            cmd.args(["--url", u]);
        }
        cmd.arg("--tokens")
            .arg(&self.sim_tokens)
            .arg("--spool")
            .arg(&sim.spool)
            .args(["--name", &format!("s{i}")])
            .args(["--workers", &self.scenario.workers_per_sim.to_string()])
            .args(["--work-ms", &self.scenario.work_ms.to_string()])
            .args(["--wait-ms", "2000"])
            .args(["--shipkeeper", "--deploy-every-ms", "1500"])
            .arg("--report")
            .arg(&report)
            .arg("--acks")
            .arg(self.dir.join(format!("acks-{i}.txt")))
            .stdin(Stdio::null())
            .stdout(File::create(report.with_extension("out"))?)
            .stderr(log);
        sim.proc = Some(self.ctx.reaper.spawn(&mut cmd, "muster-sim run")?);
        sim.reports.push(report);
        Ok(())
    }

    /// `muster-sim enqueue` against every replica with the scenario's plan.
    fn enqueue(&self, plan_args: &[&str]) -> Command {
        let mut cmd = self.command(Host::Fleet, &self.ctx.sim);
        cmd.arg("enqueue");
        for u in self.urls() {
            cmd.args(["--url", &u]);
        }
        cmd.arg("--tokens").arg(&self.sim_tokens).args(plan_args);
        cmd
    }

    /// `(finished, total)` items, or `None` while the database does not answer.
    fn progress(&self) -> Option<(u64, u64)> {
        let out = psql_query(
            &self.url,
            "SELECT count(*) FILTER (WHERE state IN ('done', 'failed')) || ' ' || count(*) FROM core.items",
        )
        .ok()?;
        let mut parts = out.split_whitespace().map(|s| s.parse::<u64>().ok());
        Some((parts.next()??, parts.next()??))
    }

    pub(super) fn run(&mut self, rng: &mut StdRng) -> Result<ScenarioResult> {
        let started = Instant::now();
        for i in 0..self.replicas.len() {
            self.start_replica(i)?;
        }
        let seed = rng.random::<u32>().to_string();
        let roots = self.scenario.roots.to_string();
        let plan_args = ["--roots", &roots, "--seed", &seed];
        let dry = self
            .enqueue(&plan_args)
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
        let mut enqueue = self.enqueue(&plan_args);
        enqueue
            .arg("--report")
            .arg(&enqueue_report)
            .stdin(Stdio::null())
            .stdout(File::create(self.dir.join("enqueue.out"))?)
            .stderr(append(&self.dir.join("enqueue.log"))?);
        let mut enqueuer = self.ctx.reaper.spawn(&mut enqueue, "muster-sim enqueue")?;
        let mut enqueued = false;

        let faults = fault_order(&self.scenario.faults, rng);
        let marks = thresholds(rng, faults.len());
        let mut pending: Vec<(f64, Fault)> = marks.into_iter().zip(faults).collect();
        pending.reverse();
        let held: u64 = self
            .scenario
            .faults
            .iter()
            .map(|f| f.held().as_secs())
            .sum();
        let deadline = started + Duration::from_secs(60 + self.scenario.roots / 4 + held);
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
            if let Some(status) = exited(&mut self.replicas[i].proc) {
                self.result.violations.push(format!(
                    "muster replica {i} exited by itself ({status}); see muster-{i}.log"
                ));
                self.start_replica(i)?;
            }
        }
        for i in 0..self.sims.len() {
            if let Some(status) = exited(&mut self.sims[i].proc) {
                self.result.violations.push(format!(
                    "fleet process {i} exited by itself ({status}); see sim-{i}.log"
                ));
                self.start_sim(i)?;
            }
        }
        Ok(())
    }

    pub(super) fn pause(rng: &mut StdRng, range: std::ops::Range<u64>) {
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

    fn cluster(&mut self) -> Result<&mut TempCluster> {
        match &mut self.site {
            Site::Local(cluster) => Ok(cluster),
            Site::Net(_) => bail!("PostgreSQL restarts are faults of the loopback suite"),
        }
    }

    fn stop_pg(&mut self, mode: StopMode) -> Result<()> {
        self.cluster()?.stop(mode).context("stop PostgreSQL")?;
        match mode {
            StopMode::Fast => self.result.pg_fast += 1,
            StopMode::Immediate => self.result.pg_immediate += 1,
        }
        Ok(())
    }

    fn inject(&mut self, fault: Fault, rng: &mut StdRng) -> Result<()> {
        let start_ms = now_ms();
        let mut worker_prefix = None;
        let mut figures = None;
        match fault {
            Fault::CutFromLogbook
            | Fault::CutFleet
            | Fault::OneWay
            | Fault::LostCommits
            | Fault::Failover
            | Fault::FrozenPrimary => {
                figures = self.inject_network(fault, rng)?;
            }
            Fault::KillMuster => {
                self.kill_replica(0);
                Self::pause(rng, 200..1_500);
                self.start_replica(0)?;
                self.result.muster_restarts += 1;
            }
            Fault::PgRestart(mode) => {
                self.stop_pg(mode)?;
                Self::pause(rng, 500..2_500);
                self.cluster()?
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
                self.cluster()?
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
            fault,
            name: format!("#{n} {}", fault.name()),
            start_ms,
            end_ms: now_ms(),
            worker_prefix,
            figures,
        });
        Ok(())
    }
}

/// The exit status of the process in `slot` if it exited, emptying the slot.
fn exited(slot: &mut Option<Proc>) -> Option<ExitStatus> {
    let status = slot.as_mut()?.exited()?;
    *slot = None;
    Some(status)
}
