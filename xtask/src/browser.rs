//! `cargo xtask browser-test [--runs N] [--difficulty D]`: the edit intake end to end in a real
//! browser.
//!
//! Starts a throwaway PostgreSQL cluster and `muster serve` with the development web directory
//! (`--dev-web-dir clients/web`, an ownership map with `docs/intro`, fresh tokens) at the
//! default proof-of-work difficulty, then runs the Node tests of `clients/web` against it:
//!
//! - `test/pow.test.mjs`: the JavaScript solver against known answers of the Rust code;
//! - `test/edit-form.test.mjs`: the form's challenge reuse, expiry and messages;
//! - `test/server.test.mjs`: a real server's challenge solved in Node and accepted; the
//!   server's leading-zero count equal to the solver's; `muster solve` (the Rust solver)
//!   re-deriving every known answer and agreeing with the JavaScript solver;
//! - `test/browser.test.mjs`: Debian's Chromium (`/usr/bin/chromium`, or `$CHROMIUM`) driven by
//!   playwright-core: the example form, a proposal with HTML arriving as plain text and
//!   `pending_approval` (API and live feed), a filled honeypot storing nothing, the honeypot out
//!   of reach, and N solve times (median and 90th percentile printed and written to
//!   `target/browser/solve-times.json`). Screenshots go to `target/browser/`.
//!
//! Nothing is skipped: a missing Chromium, Node or `npm ci` failure is an error. `--runs N`
//! (default 20) sets the number of timed solves; `--difficulty D` starts the server at another
//! difficulty, to measure it (docs/edit-intake.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_devdb::{ClusterOptions, DevTokens, StopMode, TempCluster};
use serde_json::json;

use crate::dev_principals;
use crate::procs::{
    Probe, Proc, banner, build_debug, free_port, step, stream_stdout, target_dir, wait_for_200,
    workspace_root,
};

/// Debian's Chromium, unless `$CHROMIUM` names another.
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// The ownership map's one target, passed to the tests.
const TARGET: &str = "docs/intro";

/// The test files, in the order they run (one at a time: the timings must not compete).
const TEST_FILES: [&str; 4] = [
    "test/pow.test.mjs",
    "test/edit-form.test.mjs",
    "test/server.test.mjs",
    "test/browser.test.mjs",
];

/// Options of the task.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    runs: u32,
    difficulty: Option<u8>,
}

fn parse_options(args: &[OsString]) -> Result<Options> {
    let mut options = Options {
        runs: 20,
        difficulty: None,
    };
    let mut args = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--runs" => {
                options.runs = value("--runs")?
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .context("--runs takes a whole number of at least 1")?;
            }
            "--difficulty" => {
                options.difficulty = Some(
                    value("--difficulty")?
                        .parse()
                        .ok()
                        .filter(|d| *d <= 32)
                        .context("--difficulty takes 0 to 32")?,
                );
            }
            other => bail!(
                "unknown argument `{other}` (usage: cargo xtask browser-test [--runs N] [--difficulty D])"
            ),
        }
    }
    Ok(options)
}

pub(crate) fn browser_test(args: Vec<OsString>) -> Result<ExitCode> {
    let options = parse_options(&args)?;
    let root = workspace_root();
    let web = root.join("clients").join("web");
    let chromium = std::env::var_os("CHROMIUM")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CHROMIUM));
    if !chromium.is_file() {
        bail!(
            "{} not found: the browser test needs Debian's Chromium (`apt-get install chromium`; \
             .ci/run installs it) or $CHROMIUM naming one; browsers are never downloaded",
            chromium.display()
        );
    }
    let node = Command::new("node")
        .arg("--version")
        .output()
        .context("node not found: the browser test needs Node.js 20 or later")?;
    println!("node {}", String::from_utf8_lossy(&node.stdout).trim());
    if !web.join("node_modules").join("playwright-core").is_dir()
        || !web.join("node_modules").join("hash-wasm").is_dir()
    {
        step(
            "npm ci (clients/web)",
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&web),
        )?;
    }
    let muster = build_debug(&root, &["muster"])?.join("muster");
    let out = target_dir(&root).join("browser");
    std::fs::create_dir_all(&out).with_context(|| format!("could not create {}", out.display()))?;

    banner("starting a throwaway PostgreSQL cluster (fsync off)");
    let mut cluster = TempCluster::start_with(ClusterOptions::default())
        .context("could not start PostgreSQL for the browser test")?;
    let result = with_cluster(&cluster, &muster, &web, &out, &chromium, &options);
    banner("stopping the PostgreSQL cluster");
    if let Err(error) = cluster.stop(StopMode::Fast) {
        eprintln!("xtask: warning: {error}");
    }
    drop(cluster);
    let counts = result?;
    println!(
        "browser tests: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.skipped
    );
    println!(
        "artefacts (screenshots, solve-times.json, muster.log): {}",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn with_cluster(
    cluster: &TempCluster,
    muster: &Path,
    web: &Path,
    out: &Path,
    chromium: &Path,
    options: &Options,
) -> Result<NodeCounts> {
    let url = cluster.create_database("muster")?;
    step(
        "muster migrate",
        Command::new(muster).args(["migrate", "--database-url", &url]),
    )?;

    let tokens_path = out.join("tokens.json");
    let tokens = DevTokens::write(&tokens_path, dev_principals())?;
    let token = |principal: &str| {
        tokens
            .token(principal)
            .with_context(|| format!("no dev token for {principal}"))
    };
    let ownership_path = out.join("ownership_map.json");
    std::fs::write(
        &ownership_path,
        json!({"version": 1, "targets": {TARGET: {"owner": "alice", "title": "Intro"}}})
            .to_string(),
    )
    .with_context(|| format!("write {}", ownership_path.display()))?;

    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let log_path = out.join("muster.log");
    let difficulty = match options.difficulty {
        Some(d) => format!("difficulty {d} (--difficulty)"),
        None => "the default difficulty".to_owned(),
    };
    banner(&format!(
        "muster serve on {listen} with --dev-web-dir {} at {difficulty}, log in {}",
        web.display(),
        log_path.display()
    ));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("create {}", log_path.display()))?;
    let mut serve = Command::new(muster);
    serve
        .arg("serve")
        .env("MUSTER_DATABASE_URL", &url)
        .env("MUSTER_LISTEN", &listen)
        .env("MUSTER_TOKENS", &tokens_path)
        .env("MUSTER_OWNERSHIP_MAP", &ownership_path)
        .env("MUSTER_DEV_WEB_DIR", web)
        .env("MUSTER_LOG_FORMAT", "json")
        // The server runs at the binary's defaults but for what this task sets.
        .env_remove("MUSTER_POW_DIFFICULTY")
        .env_remove("MUSTER_EDIT_DAILY_LIMIT")
        .env_remove("MUSTER_AUTH")
        .env_remove("MUSTER_PIPELINE")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(d) = options.difficulty {
        serve.env("MUSTER_POW_DIFFICULTY", d.to_string());
    }
    let mut server = Proc::with_grace(
        serve.spawn().context("could not start muster serve")?,
        Duration::from_secs(10),
    );
    wait_ready(&listen, &mut server, &log_path)?;

    let mut node = Command::new("node");
    node.arg("--test")
        .arg("--test-concurrency=1")
        .arg("--test-reporter=spec")
        .args(TEST_FILES)
        .current_dir(web)
        .env("MUSTER_URL", format!("http://{listen}"))
        .env("MUSTER_CONN_TOKEN", token("conn")?)
        .env("MUSTER_OPERATOR_TOKEN", token("operator")?)
        .env("MUSTER_TARGET", TARGET)
        .env("MUSTER_BIN", muster)
        .env("CHROMIUM", chromium)
        .env("BROWSER_ARTIFACTS", out)
        .env("SOLVE_RUNS", options.runs.to_string());
    let counts = run_node(&mut node)?;
    server.stop();
    Ok(counts)
}

/// Waits for `GET /readyz` to answer 200 (migrations current, Logbook reachable).
fn wait_ready(listen: &str, server: &mut Proc, log: &Path) -> Result<()> {
    let readyz = Probe {
        path: "/readyz",
        bearer: None,
        within: Duration::from_secs(60),
        every: Duration::from_millis(200),
        read_timeout: Duration::from_secs(5),
    };
    wait_for_200(listen, &readyz, server, Instant::now())
        .with_context(|| format!("muster serve on {listen}; see {}", log.display()))?;
    Ok(())
}

/// The summary counts of node's test runner.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct NodeCounts {
    tests: u64,
    passed: u64,
    failed: u64,
    skipped: u64,
    todo: u64,
    cancelled: u64,
}

impl NodeCounts {
    /// Reads one summary line of the spec reporter (`ℹ pass 12`) or TAP (`# pass 12`).
    fn add_line(&mut self, line: &str) {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("ℹ ").or_else(|| line.strip_prefix("# ")) else {
            return;
        };
        let mut words = rest.split_whitespace();
        let (Some(what), Some(n), None) = (words.next(), words.next(), words.next()) else {
            return;
        };
        let Ok(n) = n.parse::<u64>() else { return };
        match what {
            "tests" => self.tests = n,
            "pass" => self.passed = n,
            "fail" => self.failed = n,
            "skipped" => self.skipped = n,
            "todo" => self.todo = n,
            "cancelled" => self.cancelled = n,
            _ => {}
        }
    }

    /// Passing means: tests ran, none failed, and none was skipped, left to do or cancelled.
    fn verdict(&self) -> Result<()> {
        if self.passed == 0 {
            bail!("no browser test ran");
        }
        if self.failed + self.cancelled > 0 {
            bail!(
                "{} browser tests failed, {} cancelled",
                self.failed,
                self.cancelled
            );
        }
        if self.skipped + self.todo > 0 {
            bail!(
                "{} browser tests were skipped and {} left to do: the browser test never skips",
                self.skipped,
                self.todo
            );
        }
        if self.passed != self.tests {
            bail!("{} browser tests, {} passed", self.tests, self.passed);
        }
        Ok(())
    }
}

/// Runs node's test runner, streaming its output and reading its closing counts.
fn run_node(cmd: &mut Command) -> Result<NodeCounts> {
    let title = format!("node --test {} (clients/web)", TEST_FILES.join(" "));
    banner(&title);
    let mut counts = NodeCounts::default();
    let status = stream_stdout("node", cmd, |line| counts.add_line(line))?;
    if !status.success() {
        bail!(
            "`{title}` failed ({status}): {} passed, {} failed",
            counts.passed,
            counts.failed
        );
    }
    counts.verdict()?;
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_default_to_twenty_runs_at_the_default_difficulty() {
        assert_eq!(
            parse_options(&[]).expect("parses"),
            Options {
                runs: 20,
                difficulty: None
            }
        );
        assert_eq!(
            parse_options(&args(&["--runs", "40", "--difficulty", "21"])).expect("parses"),
            Options {
                runs: 40,
                difficulty: Some(21)
            }
        );
        for bad in [
            &["--runs"][..],
            &["--runs", "0"],
            &["--difficulty", "33"],
            &["--skip"],
        ] {
            assert!(parse_options(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn node_summaries_are_read_from_spec_and_tap_output() {
        let mut spec = NodeCounts::default();
        for line in [
            "ℹ tests 16",
            "ℹ suites 0",
            "ℹ pass 16",
            "ℹ fail 0",
            "ℹ cancelled 0",
            "ℹ skipped 0",
            "ℹ todo 0",
            "ℹ duration_ms 31000.5",
            "✔ pass 3 things (1ms)",
        ] {
            spec.add_line(line);
        }
        assert_eq!((spec.tests, spec.passed), (16, 16));
        assert!(spec.verdict().is_ok());

        let mut tap = NodeCounts::default();
        for line in [
            "# tests 4",
            "# pass 3",
            "# fail 0",
            "# skipped 1",
            "# todo 0",
        ] {
            tap.add_line(line);
        }
        assert!(tap.verdict().is_err(), "a skipped test fails the run");
        assert!(NodeCounts::default().verdict().is_err(), "no test ran");
    }
}
