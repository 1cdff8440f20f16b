//! Project tasks, run as `cargo xtask <task>` (see `.cargo/config.toml`).
//!
//! - `test [--local-postgres] [-- ARGS]`: fmt check, clippy, then the whole test suite with
//!   PostgreSQL in containers (or a throwaway cluster of the installed binaries), the fault
//!   suite's short run, the browser test and the container test. The project's test command.
//! - `images`, `container-test`: the local images and the shipped image's test (docs/containers.md).
//! - `up [ARGS]`: run the server locally with a fresh database and dev tokens.
//! - `migrate [ARGS]`, `ledger-verify [ARGS]`: `muster <task>` against `MUSTER_DATABASE_URL`.
//! - `db`: a throwaway PostgreSQL cluster until Ctrl-C.
//! - `bench`, `charts`, `profile`: the benchmark lab of `bins/muster-bench`, built in release
//!   and run (see `lab.rs` and docs/benchmarks.md).
//! - `chaos [--network] [--short]`, `demo`: the fault suites and the live demo (see docs/chaos.md).

mod browser;
mod chaos;
mod containers;
mod demo;
mod fleet;
mod lab;
mod procs;

#[cfg(test)]
mod deploy_check;
#[cfg(test)]
mod docs_check;
#[cfg(test)]
mod monitoring_check;
#[cfg(test)]
mod tidy;

use std::ffi::OsString;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use muster_devdb::{ClusterOptions, DevTokens, StopMode, TempCluster};
use procs::{
    Reaper, banner, build_debug, cargo, exit_code, step, stream_stdout, target_dir, workspace_root,
};

const USAGE: &str = "\
usage: cargo xtask <task> [args]

tasks:
  test [--local-postgres] [-- ARGS]
                        cargo fmt --check, clippy -D warnings, then cargo test --workspace
                        with PostgreSQL in containers through testcontainers (the local
                        images; fails when no Docker engine answers), or with
                        --local-postgres a throwaway cluster of the installed binaries
                        (ARGS go to cargo test); then chaos --short, chaos --network --short
                        (as root: network namespaces), the browser test and,
                        with containers, container-test (skipped when ARGS name packages)
  images [--rebuild]    build the local images the tests use (Debian base by debootstrap,
                        PostgreSQL 15 on it); kept between runs
  container-test        Muster's image (deploy/Dockerfile on the release binary) run as the
                        Deployment runs it, next to PostgreSQL: migrate, serve, a cycle, SIGTERM
  up [ARGS]             start PostgreSQL (unless MUSTER_DATABASE_URL is set), migrate,
                        write dev tokens to target/dev/tokens.json and run `muster serve ARGS`
  migrate [ARGS]        muster migrate against MUSTER_DATABASE_URL
  ledger-verify [ARGS]  muster ledger-verify against MUSTER_DATABASE_URL
  db                    a throwaway PostgreSQL cluster until Ctrl-C
  bench                 release build, throwaway PostgreSQL (fsync on), muster serve and
                        muster-bench; prints one table (see docs/benchmarks.md)
  profile [--workers N] [--batch N] [--items N] [--top N]
                        one drain of the release server on a throwaway PostgreSQL with
                        pg_stat_statements (defaults 64, 1, 40000, 12): items/s, server CPU
                        and statement time per item, the top N statements (docs/benchmarks.md)
  charts [BENCH [OUT]]  PNG charts of the last bench run's JSON (BENCH, default
                        target/bench/) into OUT (default docs/img/)
  chaos [--network] [--short]
                        the fault suite: kills muster, PostgreSQL and fleet processes under load,
                        then checks the database; --network: each on a host of its own (network
                        namespaces, as root), with dropped links, a one-way partition, lost
                        COMMIT answers and a Logbook failover (see docs/chaos.md)
  demo [--roots N]      PostgreSQL, muster and a simulated fleet, with live per-stage progress
  browser-test [--runs N] [--difficulty D]
                        the edit form end to end in headless Chromium (/usr/bin/chromium) against
                        a throwaway PostgreSQL and muster; N timed solves (docs/edit-intake.md)
";

/// The ten work kinds; each gets a `worker:<kind>` dev token.
const WORKER_KINDS: [&str; 10] = [
    "trawl",
    "sextant",
    "assay",
    "countersign",
    "waybill",
    "moldloft",
    "shakedown",
    "chartroom",
    "tidegauge",
    "bellbuoy",
];

/// Principals that get a dev token besides the workers.
const STAFF_PRINCIPALS: [&str; 3] = ["operator", "conn", "shipkeeper"];

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    let Some(task) = args.next() else {
        eprint!("{USAGE}");
        return Ok(ExitCode::from(2));
    };
    let rest: Vec<OsString> = args.collect();
    match task.to_string_lossy().as_ref() {
        "test" => test(rest),
        "images" => containers::images_task(without_leading_dashes(rest)),
        "container-test" => containers::container_test(without_leading_dashes(rest)),
        "up" => up(without_leading_dashes(rest)),
        "migrate" => muster_task("migrate", without_leading_dashes(rest)),
        "ledger-verify" => muster_task("ledger-verify", without_leading_dashes(rest)),
        "db" => db(),
        "bench" => lab::bench(without_leading_dashes(rest)),
        "profile" => lab::profile(without_leading_dashes(rest)),
        "charts" => lab::charts(without_leading_dashes(rest)),
        "chaos" => chaos::chaos(without_leading_dashes(rest)),
        "demo" => demo::demo(without_leading_dashes(rest)),
        "browser-test" => browser::browser_test(without_leading_dashes(rest)),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => {
            eprintln!("xtask: unknown task `{other}`\n");
            eprint!("{USAGE}");
            Ok(ExitCode::from(2))
        }
    }
}

/// `cargo xtask test -- --foo` and `cargo xtask test --foo` mean the same.
fn without_leading_dashes(mut args: Vec<OsString>) -> Vec<OsString> {
    if args.first().is_some_and(|a| a == "--") {
        args.remove(0);
    }
    args
}

/// Where the test suite's PostgreSQL comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Postgres {
    /// Containers of the local image through testcontainers, one per test process.
    Containers,
    /// One throwaway cluster of the installed binaries (`--local-postgres`).
    Binaries,
}

fn test(args: Vec<OsString>) -> Result<ExitCode> {
    let mut postgres = Postgres::Containers;
    let mut extra = Vec::new();
    for arg in args {
        if arg == "--local-postgres" {
            postgres = Postgres::Binaries;
        } else {
            extra.push(arg);
        }
    }
    let extra = without_leading_dashes(extra);
    let root = workspace_root();
    if postgres == Postgres::Containers {
        // Fail early, before minutes of building: where containers are expected nothing falls
        // back to the installed binaries.
        containers::require_engine()?;
        containers::ensure_images(false)?;
    }
    let features: &[&str] = match postgres {
        Postgres::Containers => &["--features", "muster-testkit/docker"],
        Postgres::Binaries => &[],
    };
    step(
        "cargo fmt --all --check",
        cargo(&root).args(["fmt", "--all", "--check"]),
    )?;
    step(
        "cargo clippy --workspace --all-targets --locked -- -D warnings",
        cargo(&root)
            .args(["clippy", "--workspace", "--all-targets", "--locked"])
            .args(features)
            .args(["--", "-D", "warnings"]),
    )?;

    let shown: Vec<String> = extra
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // `cargo xtask test -- -p muster-pg` tests that package only.
    let mut cargo_args = vec!["test", "--workspace", "--locked"];
    if names_packages(&shown) {
        cargo_args.retain(|a| *a != "--workspace");
    }
    cargo_args.extend(features);
    let title = format!("cargo {} {}", cargo_args.join(" "), shown.join(" "));
    let mut command = cargo(&root);
    command
        .args(&cargo_args)
        .args(&extra)
        .env("RUST_BACKTRACE", "1");
    let mut cluster = None;
    match postgres {
        Postgres::Containers => {
            banner(&format!(
                "PostgreSQL: a container of {} per test process, through testcontainers",
                containers::POSTGRES_IMAGE
            ));
            command
                .env("MUSTER_TEST_POSTGRES", "docker")
                .env_remove("MUSTER_TEST_DATABASE_URL");
        }
        Postgres::Binaries => {
            banner("PostgreSQL: a throwaway cluster of the installed binaries (fsync off)");
            let started = TempCluster::start_with(ClusterOptions::default())
                .context("could not start PostgreSQL for the tests")?;
            let url = started.url("postgres");
            println!("MUSTER_TEST_DATABASE_URL={url}");
            command.env("MUSTER_TEST_DATABASE_URL", &url);
            cluster = Some(started);
        }
    }
    let tested = counted_step(title.trim_end(), &mut command);

    if let Some(mut cluster) = cluster {
        banner("stopping the PostgreSQL cluster");
        if let Err(error) = cluster.stop(StopMode::Fast) {
            eprintln!("xtask: warning: {error}");
        }
    }
    let totals = tested?;
    if totals.passed == 0 {
        bail!("no test ran");
    }
    // The rest of the suite runs only when nothing narrowed it to some packages: the shortened
    // fault suites (docs/chaos.md) on the debug build cargo test just made (they kill and restart
    // PostgreSQL themselves, so they run clusters of the installed binaries either way: on
    // loopback, then on hosts of their own in network namespaces), the edit
    // form end to end in headless Chromium (docs/edit-intake.md), which fails, never skips,
    // without Chromium or Node, and with containers the image's own test.
    if !names_packages(&shown) {
        if chaos::chaos(vec!["--short".into()])? != ExitCode::SUCCESS {
            bail!("`cargo xtask chaos --short` found violations");
        }
        // The network faults on hosts of their own (namespaces: root, iproute2, iptables).
        if chaos::chaos(vec!["--network".into(), "--short".into()])? != ExitCode::SUCCESS {
            bail!("`cargo xtask chaos --network --short` found violations");
        }
        if browser::browser_test(Vec::new())? != ExitCode::SUCCESS {
            bail!("`cargo xtask browser-test` failed");
        }
        if postgres == Postgres::Containers
            && containers::container_test(Vec::new())? != ExitCode::SUCCESS
        {
            bail!("`cargo xtask container-test` failed");
        }
    }
    // One closing line over every test binary (cargo prints one `test result:` per binary, the
    // last of which is often an empty doc-test run).
    println!(
        "tests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    Ok(ExitCode::SUCCESS)
}

/// Test counts summed over every `test result:` line cargo printed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// Adds the counts of one `test result: ok. 3 passed; 0 failed; 1 ignored; …` line.
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// Like `step`, streaming the command's stdout through while counting test results.
fn counted_step(title: &str, cmd: &mut Command) -> Result<Totals> {
    banner(title);
    let mut totals = Totals::default();
    let status = stream_stdout(&format!("`{title}`"), cmd, |line| totals.add_line(line))?;
    if !status.success() {
        println!(
            "tests: {} passed, {} failed, {} skipped",
            totals.passed, totals.failed, totals.ignored
        );
        bail!("`{title}` failed ({status})");
    }
    Ok(totals)
}

#[cfg(test)]
mod totals_tests {
    use super::Totals;

    #[test]
    fn test_result_lines_are_summed() {
        let mut t = Totals::default();
        t.add_line("test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s");
        t.add_line("test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s");
        t.add_line("running 3 tests");
        assert_eq!(
            t,
            Totals {
                passed: 5,
                failed: 1,
                ignored: 1
            }
        );
    }
}

/// Whether cargo arguments select packages (`-p NAME`, `--package NAME`, …)
/// before any `--` that starts the test binaries' own arguments.
fn names_packages(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--package" || a.starts_with("--package=") || a.starts_with("-p"))
}

fn required_database_url() -> Result<String> {
    match std::env::var("MUSTER_DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => bail!(
            "MUSTER_DATABASE_URL is not set (for a throwaway database run `cargo xtask db` \
             in another terminal and export the URL it prints)"
        ),
    }
}

/// `cargo run -q -p muster -- <task> ARGS`, with `MUSTER_DATABASE_URL` required.
fn muster_task(task: &str, extra: Vec<OsString>) -> Result<ExitCode> {
    required_database_url()?;
    let root = workspace_root();
    let status = cargo(&root)
        .args(["run", "-q", "-p", "muster", "--", task])
        .args(&extra)
        .status()
        .with_context(|| format!("could not run `cargo run -p muster -- {task}`"))?;
    Ok(exit_code(status))
}

/// Every principal that gets a dev token, in a stable order.
fn dev_principals() -> Vec<String> {
    STAFF_PRINCIPALS
        .iter()
        .map(|p| (*p).to_owned())
        .chain(WORKER_KINDS.iter().map(|kind| format!("worker:{kind}")))
        .collect()
}

fn listen_url() -> String {
    match std::env::var("MUSTER_LISTEN") {
        Ok(listen) if listen.contains("://") => listen,
        Ok(listen) if !listen.trim().is_empty() => format!("http://{listen}"),
        _ => "http://127.0.0.1:8080".to_owned(),
    }
}

fn up(serve_args: Vec<OsString>) -> Result<ExitCode> {
    let root = workspace_root();
    let (database_url, cluster) = match std::env::var("MUSTER_DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => {
            banner("using MUSTER_DATABASE_URL");
            (url, None)
        }
        _ => {
            banner("starting a PostgreSQL cluster (fsync on)");
            let cluster = TempCluster::start_with(ClusterOptions {
                fsync: true,
                ..ClusterOptions::default()
            })
            .context("could not start PostgreSQL")?;
            (cluster.create_database("muster")?, Some(cluster))
        }
    };

    let muster = build_debug(&root, &["muster"])?.join("muster");
    step(
        "muster migrate",
        Command::new(&muster).args(["migrate", "--database-url", &database_url]),
    )?;
    // In the throwaway cluster `serve` runs as the runtime role `migrate` granted, with
    // production privileges; a given MUSTER_DATABASE_URL is used as it is.
    let database_url = match &cluster {
        Some(cluster) => cluster.login_as(&database_url, muster_devdb::RUNTIME_ROLE)?,
        None => database_url,
    };

    let tokens = DevTokens::new(dev_principals());
    let dev_dir = target_dir(&root).join("dev");
    std::fs::create_dir_all(&dev_dir)
        .with_context(|| format!("could not create {}", dev_dir.display()))?;
    let tokens_path = dev_dir.join("tokens.json");
    std::fs::write(&tokens_path, tokens.server_file() + "\n")
        .with_context(|| format!("could not write {}", tokens_path.display()))?;

    let listen = listen_url();
    let token_of = |principal: &str| tokens.token(principal).unwrap_or_default();
    banner("development setup");
    println!("database:  {database_url}");
    println!("listening: {listen}");
    println!(
        "tokens:    {} (BLAKE3 hashes; the plain tokens are shown only here)",
        tokens_path.display()
    );
    for (principal, token) in tokens.pairs() {
        println!("  {principal:<22} {token}");
    }
    println!("\ntry it:");
    println!("  OPERATOR_TOKEN={}", token_of("operator"));
    println!("  TRAWL_TOKEN={}", token_of("worker:trawl"));
    println!(
        "  curl -sS -X POST {listen}/v1/items -H \"Authorization: Bearer $OPERATOR_TOKEN\" \
         -H 'content-type: application/json' \
         -d '{{\"kind\":\"trawl\",\"priority\":\"normal\",\"payload\":{{\"url\":\"https://example.org\"}}}}'"
    );
    println!(
        "  curl -sS -X POST {listen}/v1/leases -H \"Authorization: Bearer $TRAWL_TOKEN\" \
         -H 'content-type: application/json' -d '{{\"worker_id\":\"trawl-1\",\"wait_ms\":0}}'"
    );
    if cluster.is_some() {
        println!("\nCtrl-C stops the server; the throwaway database goes with it.");
    }

    banner("muster serve");
    // The server goes when we go, however we go: the reaper kills it when this process
    // disappears (Ctrl-C, or a signal to xtask alone), as the cluster's watchdog stops
    // PostgreSQL and removes its directory.
    let reaper = Reaper::start(&dev_dir)?;
    let mut server = reaper.spawn(
        Command::new(&muster)
            .arg("serve")
            .arg("--database-url")
            .arg(&database_url)
            .arg("--tokens")
            .arg(&tokens_path)
            .args(&serve_args),
        "muster serve",
    )?;
    let served = loop {
        if let Some(status) = server.exited() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    if let Some(mut cluster) = cluster {
        let _ = cluster.stop(StopMode::Fast);
    }
    Ok(exit_code(served))
}

fn db() -> Result<ExitCode> {
    banner("starting a throwaway PostgreSQL cluster");
    let cluster = TempCluster::start().context("could not start PostgreSQL")?;
    let muster_db = match cluster.create_database("muster") {
        Ok(url) => Some(url),
        Err(error) => {
            eprintln!("xtask: warning: database `muster` not created: {error:#}");
            None
        }
    };
    println!("superuser URL: {}", cluster.url("postgres"));
    if let Some(url) = &muster_db {
        println!("export MUSTER_DATABASE_URL={url}");
    }
    println!("data dir:      {}", cluster.data_dir().display());
    println!("server log:    {}", cluster.log_path().display());
    println!("\nRunning until Ctrl-C; the cluster is removed when this process ends.");
    while cluster.is_running() {
        std::thread::sleep(Duration::from_secs(2));
    }
    eprintln!(
        "xtask: PostgreSQL stopped on its own; see {}",
        cluster.log_path().display()
    );
    Ok(ExitCode::FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_arguments_narrow_the_test_run() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(names_packages(&args(&["-p", "muster-pg"])));
        assert!(names_packages(&args(&["--package=muster-pg"])));
        assert!(!names_packages(&args(&["some_filter"])));
        assert!(!names_packages(&args(&["--", "-p"])));
    }

    #[test]
    fn dev_tokens_cover_staff_and_every_worker_kind() {
        let principals = dev_principals();
        assert_eq!(principals.len(), 13);
        assert!(principals.contains(&"operator".to_owned()));
        assert!(principals.contains(&"worker:bellbuoy".to_owned()));
    }
}
