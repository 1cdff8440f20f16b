//! The processes of a suite: throwaway PostgreSQL clusters, migrated databases, `psql` and
//! child processes (muster-devdb's, which xtask shares), the release `muster serve`, and
//! `muster-bench` itself once per scenario (a fresh process each).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_devdb::{
    ClusterOptions, DevTokens, Probe, Proc, StopMode, TempCluster, free_port, runtime_url,
    wait_for_200, wait_healthy,
};
pub(crate) use muster_devdb::{banner, psql, psql_query};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The answer of one psql query (`-tA`), `None` when psql is missing or fails.
pub(crate) fn psql_answer(url: &str, sql: &str) -> Option<String> {
    psql_query(url, sql).ok()
}

/// Prints `text` (a run's table or report), writes it to `out/file` beside the raw JSON and
/// says where both are (`what` names it).
pub(crate) fn publish(out: &Path, file: &str, what: &str, text: &str) -> Result<()> {
    println!("\n{text}");
    let path = out.join(file);
    std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
    eprintln!("muster-bench: {what} and raw JSON in {}", out.display());
    Ok(())
}

/// Writes `doc` as pretty JSON to `path`.
pub(crate) fn write_json(path: &Path, doc: &impl Serialize) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(doc)?)
        .with_context(|| format!("write {}", path.display()))
}

/// Creates `out`, then runs `work` on the suites' throwaway cluster: fsync and synchronous
/// commit on, room for 200 connections, its log not kept.
pub(crate) fn on_suite_cluster<T>(
    out: &std::path::Path,
    work: impl FnOnce(&TempCluster) -> Result<T>,
) -> Result<T> {
    std::fs::create_dir_all(out).with_context(|| format!("could not create {}", out.display()))?;
    on_cluster(
        "starting a throwaway PostgreSQL cluster (fsync on, synchronous_commit on)",
        ClusterOptions {
            fsync: true,
            max_connections: 200,
            log_to: None,
            ..ClusterOptions::default()
        },
        work,
    )
}

/// Starts a throwaway cluster with `options` (after a banner saying `what`), runs `work` on it,
/// stops the cluster (also when `work` failed) and answers what `work` answered.
pub(crate) fn on_cluster<T>(
    what: &str,
    options: ClusterOptions,
    work: impl FnOnce(&TempCluster) -> Result<T>,
) -> Result<T> {
    banner(what);
    let mut cluster = TempCluster::start_with(options).context("could not start PostgreSQL")?;
    let result = work(&cluster);
    banner("stopping the PostgreSQL cluster");
    if let Err(error) = cluster.stop(StopMode::Fast) {
        eprintln!("muster-bench: warning: {error}");
    }
    result
}

/// Runs `muster-bench ARGS` (this very program) with `env`, keeps the JSON it prints as
/// `out/<name>.json` and answers it.
pub(crate) fn muster_bench<T: DeserializeOwned>(
    env: &[(&str, String)],
    out: &Path,
    name: &str,
    args: &[&str],
) -> Result<T> {
    let load = std::env::current_exe().context("where is muster-bench?")?;
    banner(&format!("muster-bench {}", args.join(" ")));
    let output = with_nofile(&load)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not run muster-bench {name}"))?;
    if !output.status.success() {
        bail!("muster-bench {name} failed ({})", output.status);
    }
    // Kept as printed (every field, known here or not), then read as its type.
    let value: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("muster-bench {name} printed no JSON"))?;
    write_json(&out.join(format!("{name}.json")), &value)?;
    serde_json::from_value(value)
        .with_context(|| format!("muster-bench {name} printed JSON of another shape"))
}

/// A free `127.0.0.1:<port>` to listen on.
pub(crate) fn free_listen() -> Result<String> {
    Ok(format!("127.0.0.1:{}", free_port()?))
}

/// The proof-of-work difficulty of the bench server (see `ServeArgs::spawn`).
const BENCH_POW_DIFFICULTY: u8 = 16;

/// The open-file soft limit the server and the load generator need: 1,000 SSE subscribers are
/// 1,000 sockets on each side.
const NOFILE: u32 = 4096;

/// `program` run through `sh`, which raises the open-file soft limit to `NOFILE` when it is
/// lower (failing if the hard limit does not allow it) and then `exec`s it: same pid.
fn with_nofile(program: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "n=$(ulimit -n); if [ \"$n\" != unlimited ] && [ \"$n\" -lt {NOFILE} ]; then \
             ulimit -n {NOFILE} || exit 111; fi; exec \"$0\" \"$@\""
        ))
        .arg(program);
    cmd
}

/// Writes what `muster serve` reads besides its database into `dir` ([`ServeArgs::dir`]):
/// `tokens.json`, a token for each of `principals`, and `ownership_map.json` with `targets`.
pub(crate) fn write_serve_files<'p>(
    dir: &Path,
    principals: impl IntoIterator<Item = &'p str>,
    targets: serde_json::Value,
) -> Result<DevTokens> {
    let tokens = DevTokens::write(&dir.join("tokens.json"), principals)?;
    let map = serde_json::json!({"version": 1, "targets": targets});
    std::fs::write(dir.join("ownership_map.json"), map.to_string())?;
    Ok(tokens)
}

#[derive(Clone, Copy)]
pub(crate) struct ServeArgs<'a> {
    pub(crate) muster: &'a Path,
    pub(crate) url: &'a str,
    pub(crate) listen: &'a str,
    /// Where [`write_serve_files`] wrote the tokens and the ownership map.
    pub(crate) dir: &'a Path,
    /// Admission flags: [`ROOMY`] unless a phase measures the defaults.
    pub(crate) limits: &'a [&'a str],
    /// Environment variables the server gets besides this process's (`OTEL_*` for tracing).
    pub(crate) env: &'a [(&'a str, String)],
}

/// The admission limits of the bench's servers: every load generator connects from one
/// address, and the feed rows hold 1,000 subscribers (on 1,000 HTTP/1.1 connections, or as
/// HTTP/2 streams at most 16 a connection), which the default budget of 48 MiB does not admit
/// (its subscriber share holds 153). Admission only: what the server allocates is the same.
pub(crate) const ROOMY: &[&str] = &[
    "--memory-budget",
    "256Mi",
    "--max-connections-per-peer",
    "4096",
];

impl<'a> ServeArgs<'a> {
    pub(crate) fn new(muster: &'a Path, url: &'a str, listen: &'a str, dir: &'a Path) -> Self {
        ServeArgs {
            muster,
            url,
            listen,
            dir,
            limits: ROOMY,
            env: &[],
        }
    }

    /// Spawns the server with its log in `log_path` and waits until `/healthz` answers 200.
    pub(crate) fn start(&self, log_path: &Path) -> Result<Proc> {
        banner(&format!(
            "muster serve (release) on {}, log in {}",
            self.listen,
            log_path.display()
        ));
        let mut server = self.spawn(log_path)?;
        wait_healthy(self.listen, &mut server, log_path)?;
        Ok(server)
    }

    pub(crate) fn spawn(&self, log_path: &Path) -> Result<Proc> {
        let log = std::fs::File::create(log_path)?;
        // As the runtime role, with production privileges (`migrated_database` gave it a login).
        let url = runtime_url(self.url);
        let child = with_nofile(self.muster)
            .arg("serve")
            .args(["--database-url", &url, "--listen", self.listen])
            .arg("--tokens")
            .arg(self.dir.join("tokens.json"))
            .arg("--ownership-map")
            .arg(self.dir.join("ownership_map.json"))
            // Solving is not timed: a low difficulty only keeps the spam scenario's 256
            // pre-solved challenges quick to make, whatever the default is.
            .args(["--pow-difficulty", &BENCH_POW_DIFFICULTY.to_string()])
            .args(self.limits)
            // The glibc setting deploy/k8s/deployment.yaml gives the pod, so that the
            // memory figures are the deployed server's.
            .env("MALLOC_MMAP_THRESHOLD_", "131072")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("could not start muster serve")?;
        // Stopped on every way out: SIGTERM, then SIGKILL after 10 s.
        Ok(Proc::with_grace(child, Duration::from_secs(10)))
    }
}

/// Time from `started` to the first `200` of `GET /v1/queues` (the live feed counts the depths
/// once at start; the endpoint waits for that count).
pub(crate) fn wait_queues(
    listen: &str,
    token: &str,
    server: &mut Proc,
    started: Instant,
) -> Result<Duration> {
    let queues = Probe {
        path: "/v1/queues",
        bearer: Some(token),
        within: Duration::from_secs(120),
        every: Duration::from_millis(10),
        read_timeout: Duration::from_secs(10),
    };
    wait_for_200(listen, &queues, server, started)
        .context("muster serve (see target/bench/server-backlog-*.log)")
}

pub(crate) fn command_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `(nproc, CPU model, PostgreSQL version, date)`.
pub(crate) fn machine(url: &str) -> Vec<(String, String)> {
    let nproc = command_line("nproc", &[]).unwrap_or_else(|| "?".into());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let pg = psql_answer(url, "show server_version").unwrap_or_else(|| "?".into());
    let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "?".into());
    vec![
        ("nproc".into(), nproc),
        ("CPU".into(), cpu),
        ("PostgreSQL".into(), pg),
        ("date".into(), date),
    ]
}
