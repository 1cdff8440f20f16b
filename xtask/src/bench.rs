//! `cargo xtask bench`: builds `muster` and `muster-bench` in release, starts a throwaway
//! PostgreSQL with fsync on, serves Muster on a free port, runs every `muster-bench` scenario
//! against it and prints one markdown table, each figure next to a baseline measured in the
//! same run. Raw JSON and the table are also written to `target/bench/`. See docs/benchmarks.md.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_devdb::{ClusterOptions, StopMode, TempCluster, find_bin};
use serde_json::{Value, json};

use super::server::Server;
use super::{banner, cargo, new_token, psql, step, target_dir, tokens_file_json, workspace_root};

/// The pod's memory request (deploy/), the baseline of the memory rows.
const MEMORY_REQUEST_MIB: f64 = 48.0;

pub(crate) fn bench(extra: Vec<std::ffi::OsString>) -> Result<ExitCode> {
    if !extra.is_empty() {
        bail!("`cargo xtask bench` takes no arguments (see docs/benchmarks.md)");
    }
    let root = workspace_root();
    let (muster, load) = release_binaries(&root)?;
    let out_dir = target_dir(&root).join("bench");
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("could not create {}", out_dir.display()))?;

    let table = on_cluster(
        "starting a throwaway PostgreSQL cluster (fsync on, synchronous_commit on)",
        ClusterOptions {
            fsync: true,
            max_connections: 200,
            log_to: None,
            ..ClusterOptions::default()
        },
        |cluster| with_cluster(cluster, &muster, &load, &out_dir),
    )?;
    println!("\n{table}");
    let path = out_dir.join("results.md");
    std::fs::write(&path, &table).with_context(|| format!("write {}", path.display()))?;
    // Charts of this run next to the table; `cargo xtask charts` copies an adopted run's into
    // docs/img/.
    super::charts::render(&out_dir, &out_dir).context("could not draw the charts")?;
    eprintln!("xtask: table and raw JSON in {}", out_dir.display());
    Ok(ExitCode::SUCCESS)
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
        eprintln!("xtask: warning: {error}");
    }
    result
}

/// Runs `muster-bench ARGS` with `env`, keeps the JSON it prints as `out/<name>.json` and
/// answers it.
pub(crate) fn muster_bench(
    load: &Path,
    env: &[(&str, String)],
    out: &Path,
    name: &str,
    args: &[&str],
) -> Result<Value> {
    banner(&format!("muster-bench {}", args.join(" ")));
    let output = with_nofile(load)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not run muster-bench {name}"))?;
    if !output.status.success() {
        bail!("muster-bench {name} failed ({})", output.status);
    }
    let value: Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("muster-bench {name} printed no JSON"))?;
    std::fs::write(
        out.join(format!("{name}.json")),
        serde_json::to_string_pretty(&value)?,
    )?;
    Ok(value)
}

/// A free `127.0.0.1:<port>` to listen on.
pub(crate) fn free_listen() -> Result<String> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    Ok(format!("127.0.0.1:{port}"))
}

/// Builds `muster` and `muster-bench` in release and answers their paths.
pub(crate) fn release_binaries(root: &Path) -> Result<(PathBuf, PathBuf)> {
    step(
        "cargo build --release -p muster -p muster-bench",
        cargo(root).args(["build", "--release", "-p", "muster", "-p", "muster-bench"]),
    )?;
    let release = target_dir(root).join("release");
    Ok((release.join("muster"), release.join("muster-bench")))
}

fn with_cluster(cluster: &TempCluster, muster: &Path, load: &Path, out: &Path) -> Result<String> {
    let url = migrated_database(cluster, muster, "muster_bench")?;

    let principals = ["operator", "conn", "worker:trawl", "worker:sextant"];
    let tokens: Vec<(String, String)> = principals
        .iter()
        .map(|p| ((*p).to_owned(), new_token()))
        .collect();
    let token = |p: &str| {
        tokens
            .iter()
            .find(|(q, _)| q == p)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    let tokens_path = out.join("tokens.json");
    std::fs::write(
        &tokens_path,
        serde_json::to_string_pretty(&tokens_file_json(&tokens))?,
    )?;
    let ownership_path = out.join("ownership_map.json");
    std::fs::write(
        &ownership_path,
        json!({"version": 1, "targets": {"docs/intro": {"owner": "alice", "title": "Intro"}}})
            .to_string(),
    )?;

    // History (and nothing queued) before the server starts: seeded under a running server, its
    // live feed would count the seeded ledger rows as transitions.
    muster_bench(
        load,
        &[],
        out,
        "history-fill",
        &["backlog-fill", "--database-url", &url, "--to", "0"],
    )?;

    let listen = free_listen()?;
    let base = format!("http://{listen}");
    let serve = ServeArgs {
        muster,
        url: &url,
        listen: &listen,
        tokens: &tokens_path,
        ownership: &ownership_path,
    };
    let mut server = serve.start(&out.join("server.log"))?;
    std::thread::sleep(Duration::from_secs(1));
    let idle = memory(server.pid())?;

    let env = [
        ("MUSTER_DATABASE_URL", url.clone()),
        ("MUSTER_BENCH_OPERATOR_TOKEN", token("operator")),
        ("MUSTER_BENCH_CONN_TOKEN", token("conn")),
        ("MUSTER_BENCH_TRAWL_TOKEN", token("worker:trawl")),
        ("MUSTER_BENCH_SEXTANT_TOKEN", token("worker:sextant")),
    ];
    let run_as = |name: &str, args: &[&str]| muster_bench(load, &env, out, name, args);
    let run = |scenario: &str| run_as(scenario, &[scenario, "--url", &base]);
    let cycles = run("cycles")?;
    let pickup = run("pickup")?;
    let spam = run("spam")?;
    // Read before the feed scenario, so that these rows keep their meaning across runs.
    let end = memory(server.pid())?;
    let pid = server.pid().to_string();
    let feed = run_as("feed", &["feed", "--url", &base, "--server-pid", &pid])?;
    banner("stopping muster serve");
    server.stop();

    // Backlog: a database of its own, filled in SQL, a fresh server per size.
    let backlog_url = migrated_database(cluster, muster, "muster_backlog")?;
    let serve = ServeArgs {
        url: &backlog_url,
        ..serve
    };
    let mut backlog = Vec::new();
    for size in BACKLOG_SIZES {
        let to = size.to_string();
        let fill = run_as(
            &format!("backlog-fill-{size}"),
            &["backlog-fill", "--database-url", &backlog_url, "--to", &to],
        )?;
        let log_path = out.join(format!("server-backlog-{size}.log"));
        let started = Instant::now();
        let mut server = serve.spawn(&log_path)?;
        let first_queues = wait_queues(&listen, &token("operator"), &mut server, started)?;
        let measured = run_as(&format!("backlog-{size}"), &["backlog", "--url", &base])?;
        server.stop();
        backlog.push(json!({
            "size": size,
            "fill": fill,
            "start_to_first_queues_ms": first_queues.as_secs_f64() * 1000.0,
            "measured": measured,
        }));
    }

    // Batching: a database of its own, the trawl queue topped up to BATCH_ITEMS in SQL before
    // each batch size, a fresh server per size (its peak RSS is read at the end of the run).
    let batch_url = migrated_database(cluster, muster, "muster_batch")?;
    let serve = ServeArgs {
        url: &batch_url,
        ..serve
    };
    let mut batches = Vec::new();
    for (size, lease_next, next, seconds) in BATCH_RUNS {
        let items = BATCH_ITEMS.to_string();
        run_as(
            &format!("batch-fill-{size}"),
            &["backlog-fill", "--database-url", &batch_url, "--to", &items],
        )?;
        let name = match (lease_next, next) {
            (true, _) => format!("{size}-lease-next"),
            (false, true) => format!("{size}-next"),
            (false, false) => size.to_string(),
        };
        let log_path = out.join(format!("server-batch-{name}.log"));
        let mut server = serve.spawn(&log_path)?;
        wait_healthy(&listen, &mut server)?;
        let (size, seconds) = (size.to_string(), seconds.to_string());
        let mut args = vec![
            "batch",
            "--url",
            &base,
            "--batch",
            &size,
            "--items",
            &items,
            "--seconds",
            &seconds,
        ];
        if lease_next {
            args.push("--lease-next");
        }
        if next {
            args.push("--next");
        }
        let mut measured = run_as(&format!("batch-{name}"), &args)?;
        measured["server_peak_rss_mib"] = json!(memory(server.pid())?.hwm_mib);
        server.stop();
        batches.push(measured);
    }
    std::fs::write(
        out.join("batch.json"),
        serde_json::to_string_pretty(&json!({ "runs": batches }))?,
    )?;

    // The SQL floor: the same rows as a batch of 128 writes, in plain SQL (pgbench), on a
    // migrated database of its own; then a bare queue's rows on the same table; then the same
    // rows one item per transaction (the single-item ceiling), topped up before each run.
    let floor_url = migrated_database(cluster, muster, "muster_floor")?;
    // Each script on a queue topped up to BATCH_ITEMS, or on tables of its own made anew (then
    // as fresh as the filled queue of the others); its files in `out` start with `phase`.
    let script = |url: &str, run: &FloorRun, phase: &str| -> Result<Value> {
        if let Some(setup) = run.setup {
            banner(&format!("psql (setup of {})", run.file));
            for sql in [setup, "VACUUM ANALYZE minimal.queue", "CHECKPOINT"] {
                psql(url, sql)?;
            }
        } else {
            let items = BATCH_ITEMS.to_string();
            run_as(
                &format!("{phase}-fill-{}", run.name),
                &["backlog-fill", "--database-url", url, "--to", &items],
            )?;
        }
        sql_floor(url, run, out, phase)
    };
    let mut floor = Vec::new();
    for run in &FLOOR_RUNS {
        floor.push(script(&floor_url, run, "floor")?);
    }
    std::fs::write(
        out.join("floor.json"),
        serde_json::to_string_pretty(&json!({ "runs": floor }))?,
    )?;

    // Issue #7's 64-worker target within about a minute, because the machine's speed moves by
    // half within an hour and the floor's scripts run minutes after the cycles: the issue's
    // script on both kinds of tables, a 64-worker drain of single calls over HTTP, the scripts
    // again in reverse order. The scripts on a database of their own; the drain on a fresh
    // server whose queue (and history) was filled before it started.
    let target_url = migrated_database(cluster, muster, "muster_target")?;
    let target_items = TARGET_BACKLOG.to_string();
    run_as(
        "target-fill",
        &[
            "backlog-fill",
            "--database-url",
            &target_url,
            "--to",
            &target_items,
        ],
    )?;
    let serve_target = ServeArgs {
        url: &target_url,
        ..serve
    };
    let mut server = serve_target.spawn(&out.join("server-target.log"))?;
    wait_healthy(&listen, &mut server)?;
    let issue_url = migrated_database(cluster, muster, "muster_issue")?;
    let before = ISSUE_RUNS
        .iter()
        .map(|run| script(&issue_url, run, "target-before"))
        .collect::<Result<Vec<_>>>()?;
    // The scripts' dead rows vacuumed and their dirty pages written now, so that neither
    // autovacuum nor a checkpoint of theirs lands in the drain.
    banner("psql (settle muster_issue before the drain)");
    for sql in ["VACUUM ANALYZE", "CHECKPOINT"] {
        psql(&issue_url, sql)?;
    }
    let seconds = TARGET_SECONDS.to_string();
    let drain = run_as(
        "target-drain",
        &[
            "batch",
            "--url",
            &base,
            "--batch",
            "1",
            "--workers",
            "64",
            "--items",
            &target_items,
            "--seconds",
            &seconds,
        ],
    )?;
    let after = ISSUE_RUNS
        .iter()
        .rev()
        .map(|run| script(&issue_url, run, "target-after"))
        .collect::<Result<Vec<_>>>()?;
    server.stop();
    let target = json!({"before": before, "drain": drain, "after": after});
    std::fs::write(
        out.join("target.json"),
        serde_json::to_string_pretty(&target)?,
    )?;

    // Bloat: the single-call rate on a fresh database, then after BLOAT_CYCLES more lease →
    // complete cycles (pushed through in batches of 128, each one lease and one completion with
    // its ledger rows), on the same server, with autovacuum as configured (V7).
    let bloat_url = migrated_database(cluster, muster, "muster_bloat")?;
    let serve = ServeArgs {
        url: &bloat_url,
        ..serve
    };
    let mut server = serve.spawn(&out.join("server-bloat.log"))?;
    wait_healthy(&listen, &mut server)?;
    let single = |name: &str| -> Result<Value> {
        run_as(
            &format!("bloat-fill-{name}"),
            &[
                "backlog-fill",
                "--database-url",
                &bloat_url,
                "--to",
                "40000",
            ],
        )?;
        run_as(
            &format!("bloat-{name}"),
            &["batch", "--url", &base, "--batch", "1", "--seconds", "10"],
        )
    };
    let before = single("start")?;
    let bloat_cycles = BLOAT_CYCLES.to_string();
    run_as(
        "bloat-fill-cycles",
        &[
            "backlog-fill",
            "--database-url",
            &bloat_url,
            "--to",
            &bloat_cycles,
        ],
    )?;
    let pushed = run_as(
        "bloat-cycles",
        &[
            "batch",
            "--url",
            &base,
            "--batch",
            "128",
            "--items",
            &bloat_cycles,
            "--seconds",
            "900",
        ],
    )?;
    let after = single("after")?;
    let sizes = table_sizes(&bloat_url);
    server.stop();
    let bloat = json!({"before": before, "pushed": pushed, "after": after, "sizes": sizes});
    std::fs::write(
        out.join("bloat.json"),
        serde_json::to_string_pretty(&bloat)?,
    )?;

    let machine = machine(&url);
    Ok(render(
        &machine, &cycles, &pickup, &spam, &feed, &backlog, &batches, &floor, &target, &bloat,
        idle, end,
    ))
}

/// One pgbench run of the SQL floor: a script of xtask/sql/ (the batch scripts read `:batch`;
/// the single-item one takes one item per transaction), its clients and batch size, and how
/// many items it finishes in all.
struct FloorRun {
    name: &'static str,
    file: &'static str,
    script: &'static str,
    clients: u64,
    batch: u64,
    items: u64,
    /// `-M prepared` (pgbench variables become parameters); the batch scripts splice their
    /// `':ids'` array literals as text, so they run in the simple protocol.
    prepared: bool,
    /// SQL that makes the script's own tables and queue (one `psql -c`), instead of topping up
    /// Muster's `core.items` with `muster-bench backlog-fill`.
    setup: Option<&'static str>,
    /// Counts the items the script has finished.
    done: &'static str,
}

/// How the scripts on Muster's tables count finished items.
const CORE_DONE: &str = "SELECT count(*) FROM core.items WHERE state = 'done'";

/// The SQL floor: Muster's rows in batches of 128 (the batching runs' 16 workers and largest
/// batch), and a bare queue's rows the same way; then the single-item ceiling: Muster's rows
/// one item per transaction (each lease and each completion committed on its own, as the
/// default modes of the usual PostgreSQL job queues do) at the cycle runs' 16 and 64 clients,
/// with prepared statements (in the simple protocol pgbench would parse and plan every
/// statement of every item, and measure that more than the rows).
const FLOOR_RUNS: [FloorRun; 4] = [
    FloorRun {
        name: "full",
        file: "floor-full.sql",
        script: include_str!("../sql/floor-full.sql"),
        clients: 16,
        batch: 128,
        items: BATCH_ITEMS,
        prepared: false,
        setup: None,
        done: CORE_DONE,
    },
    FloorRun {
        name: "bare",
        file: "floor-bare.sql",
        script: include_str!("../sql/floor-bare.sql"),
        clients: 16,
        batch: 128,
        items: BATCH_ITEMS,
        prepared: false,
        setup: None,
        done: CORE_DONE,
    },
    FloorRun {
        name: "single-16",
        file: "ceiling-single.sql",
        script: include_str!("../sql/ceiling-single.sql"),
        clients: 16,
        batch: 1,
        items: 16_000,
        prepared: true,
        setup: None,
        done: CORE_DONE,
    },
    FloorRun {
        name: "single-64",
        file: "ceiling-single.sql",
        script: include_str!("../sql/ceiling-single.sql"),
        clients: 64,
        batch: 1,
        items: 19_200,
        prepared: true,
        setup: None,
        done: CORE_DONE,
    },
];

/// The issue's own single-item script at 16 clients, the baseline its 4,000 cycles/s target was
/// set against, on Muster's tables and on the lightest tables it could have run on (the issue
/// does not say); measured just before and just after the 64-worker drain of the target phase.
const ISSUE_RUNS: [FloorRun; 2] = [
    FloorRun {
        name: "issue-16",
        file: "issue-single.sql",
        script: include_str!("../sql/issue-single.sql"),
        clients: 16,
        batch: 1,
        items: 16_000,
        prepared: true,
        setup: None,
        done: CORE_DONE,
    },
    FloorRun {
        name: "issue-minimal-16",
        file: "issue-minimal.sql",
        script: include_str!("../sql/issue-minimal.sql"),
        clients: 16,
        batch: 1,
        items: 16_000,
        prepared: true,
        setup: Some(include_str!("../sql/issue-minimal-setup.sql")),
        done: "SELECT count(*) FROM minimal.queue WHERE state = 'done'",
    },
];

/// The target phase's drain: a queue this deep (at 64 workers on a fast minute the cycles
/// runs' 80,000 ran dry in under 10 s), for at most this many seconds.
const TARGET_BACKLOG: u64 = 120_000;
const TARGET_SECONDS: u64 = 10;

/// Issue #7 measured its single-item script (xtask/sql/issue-single.sql) on this machine at
/// 3,100–3,300 cycles/s with 16 clients and asked Muster for 4,000 at 64 workers: against the
/// lower figure, the stricter reading, 4,000 / 3,100 of the same run's script.
const ISSUE_TARGET: (f64, f64) = (4_000.0, 3_100.0);

/// Runs one SQL-floor script with pgbench (as many transactions per client as `run.items`
/// allows) and answers how many items it finished, in how long; pgbench's own output goes to
/// `<phase>-<name>.txt` in `out`. `skipped` when this PostgreSQL has no pgbench.
fn sql_floor(url: &str, run: &FloorRun, out: &Path, phase: &str) -> Result<Value> {
    let name = run.name;
    let Some(pgbench) = find_bin("pgbench") else {
        eprintln!("xtask: pgbench not found; the SQL floor is not measured");
        return Ok(json!({"name": name, "skipped": "pgbench not found"}));
    };
    let path = out.join(run.file);
    std::fs::write(&path, run.script).with_context(|| format!("write {}", path.display()))?;
    let done = || -> Result<u64> {
        let psql = find_bin("psql").context("psql not found")?;
        command_line(
            &psql.to_string_lossy(),
            &["-X", "-tA", "-d", url, "-c", run.done],
        )
        .and_then(|n| n.parse().ok())
        .context("could not count the finished items")
    };
    let per_client = run.items / (run.clients * run.batch);
    let (clients, transactions) = (run.clients.to_string(), per_client.to_string());
    let batch = format!("batch={}", run.batch);
    let protocol = if run.prepared { "prepared" } else { "simple" };
    let args = [
        "-n",
        "-M",
        protocol,
        "-c",
        &clients,
        "-t",
        &transactions,
        "-D",
        &batch,
        "-f",
        &path.to_string_lossy(),
        url,
    ]
    .map(str::to_owned);
    banner(&format!("pgbench {} {}", args[..10].join(" "), run.file));
    let before = done()?;
    let started = Instant::now();
    let output = Command::new(&pgbench)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not run {}", pgbench.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "pgbench {name} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    std::fs::write(out.join(format!("{phase}-{name}.txt")), stdout.as_bytes())?;
    // Counted, not assumed: a batch that found fewer items than it asked for shows here.
    let items = done()?.saturating_sub(before);
    Ok(json!({
        "name": name,
        "script": run.file,
        "clients": run.clients,
        "batch": run.batch,
        "protocol": protocol,
        "items": items,
        "expected_items": run.clients * per_client * run.batch,
        "seconds": seconds,
        "items_per_s": items as f64 / seconds,
    }))
}

/// Lease → complete cycles between the two single-call rate measurements of the bloat rows.
const BLOAT_CYCLES: u64 = 1_000_000;

/// `relation: total size (MiB), dead tuples` of the working tables, as PostgreSQL reports them.
fn table_sizes(url: &str) -> Value {
    let sql = "SELECT string_agg(format('%s: %s MiB, %s dead tuples', relname, \
               round(pg_total_relation_size(relid) / 1048576.0), n_dead_tup), '; ' ORDER BY relname) \
               FROM pg_stat_user_tables WHERE schemaname = 'core' \
               AND relname IN ('items', 'leases', 'ledger')";
    let text = find_bin("psql").and_then(|psql| {
        command_line(
            &psql.to_string_lossy(),
            &["-X", "-tA", "-d", url, "-c", sql],
        )
    });
    json!(text)
}

/// Creates database `name` in the cluster, migrates it with `muster migrate`, answers its URL.
pub(crate) fn migrated_database(
    cluster: &TempCluster,
    muster: &Path,
    name: &str,
) -> Result<String> {
    psql(&cluster.url("postgres"), &format!("create database {name}"))?;
    let url = cluster.url(name);
    step(
        &format!("muster migrate ({name})"),
        Command::new(muster).args(["migrate", "--database-url", &url]),
    )?;
    Ok(url)
}

/// Batch sizes compared (the first, the v1 single calls, is the baseline), whether completions
/// ask `lease_next`, whether each carries a `next` step, and each run's cap in seconds; every
/// run drains up to `BATCH_ITEMS` queued items with 16 workers.
const BATCH_RUNS: [(u32, bool, bool, u64); 6] = [
    (1, false, false, 15),
    (1, true, false, 15),
    (1, false, true, 15),
    (16, false, false, 60),
    (128, false, false, 60),
    (128, false, true, 60),
];
const BATCH_ITEMS: u64 = 200_000;

/// The backlog sizes compared (the first is the baseline).
const BACKLOG_SIZES: [u64; 2] = [1_000, 1_000_000];

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

#[derive(Clone, Copy)]
pub(crate) struct ServeArgs<'a> {
    pub(crate) muster: &'a Path,
    pub(crate) url: &'a str,
    pub(crate) listen: &'a str,
    pub(crate) tokens: &'a Path,
    pub(crate) ownership: &'a Path,
}

impl ServeArgs<'_> {
    /// Spawns the server with its log in `log_path` and waits until `/healthz` answers 200.
    pub(crate) fn start(&self, log_path: &Path) -> Result<Server> {
        banner(&format!(
            "muster serve (release) on {}, log in {}",
            self.listen,
            log_path.display()
        ));
        let mut server = self.spawn(log_path)?;
        wait_healthy(self.listen, &mut server)?;
        Ok(server)
    }

    pub(crate) fn spawn(&self, log_path: &Path) -> Result<Server> {
        let log = std::fs::File::create(log_path)?;
        Ok(Server {
            child: with_nofile(self.muster)
                .arg("serve")
                .args(["--database-url", self.url, "--listen", self.listen])
                .arg("--tokens")
                .arg(self.tokens)
                .arg("--ownership-map")
                .arg(self.ownership)
                // Solving is not timed: a low difficulty only keeps the spam scenario's 256
                // pre-solved challenges quick to make, whatever the default is.
                .args(["--pow-difficulty", &BENCH_POW_DIFFICULTY.to_string()])
                // The glibc setting deploy/k8s/deployment.yaml gives the pod, so that the
                // memory figures are the deployed server's.
                .env("MALLOC_MMAP_THRESHOLD_", "131072")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("could not start muster serve")?,
        })
    }
}

/// Time from `started` to the first `200` of `GET /v1/queues` (the live feed counts the depths
/// once at start; the endpoint waits for that count).
fn wait_queues(
    listen: &str,
    token: &str,
    server: &mut Server,
    started: Instant,
) -> Result<Duration> {
    use std::io::Write;
    let until = started + Duration::from_secs(120);
    while Instant::now() < until {
        if let Ok(Some(status)) = server.child.try_wait() {
            bail!("muster serve exited early ({status}); see target/bench/server-backlog-*.log");
        }
        if let Ok(mut s) = TcpStream::connect(listen) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = s.write_all(
                format!(
                    "GET /v1/queues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            );
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return Ok(started.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("GET /v1/queues did not answer 200 within 120 s")
}

fn wait_healthy(listen: &str, server: &mut Server) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if let Ok(Some(status)) = server.child.try_wait() {
            bail!("muster serve exited early ({status}); see its server.log");
        }
        if let Ok(mut s) = TcpStream::connect(listen) {
            use std::io::Write;
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!("muster serve did not become healthy within 30 s")
}

/// `(VmHWM, VmRSS)` of a process in MiB.
#[derive(Debug, Clone, Copy)]
struct Memory {
    hwm_mib: f64,
    rss_mib: f64,
}

fn memory(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let field = |name: &str| -> Result<f64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("{name} missing from /proc/{pid}/status"))?;
        let kib: f64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed line")?
            .parse()?;
        Ok(kib / 1024.0)
    };
    Ok(Memory {
        hwm_mib: field("VmHWM:")?,
        rss_mib: field("VmRSS:")?,
    })
}

fn command_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `(nproc, CPU model, PostgreSQL version, date)`.
fn machine(url: &str) -> [(String, String); 4] {
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
    let pg = find_bin("psql")
        .and_then(|psql| {
            command_line(
                &psql.to_string_lossy(),
                &["-X", "-tA", "-d", url, "-c", "show server_version"],
            )
        })
        .unwrap_or_else(|| "?".into());
    let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "?".into());
    [
        ("nproc".into(), nproc),
        ("CPU".into(), cpu),
        ("PostgreSQL".into(), pg),
        ("date".into(), date),
    ]
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
        None => "n/a".into(),
    }
}

fn ratio(a: &Value, b: &Value) -> String {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "n/a".into(),
    }
}

fn pair(v: &Value) -> String {
    format!("{} / {}", num(&v["p50_ms"]), num(&v["p99_ms"]))
}

#[allow(clippy::too_many_arguments)]
fn render(
    machine: &[(String, String)],
    cycles: &Value,
    pickup: &Value,
    spam: &Value,
    feed: &Value,
    backlog: &[Value],
    batches: &[Value],
    floor: &[Value],
    target: &Value,
    bloat: &Value,
    idle: Memory,
    end: Memory,
) -> String {
    let mut rows: Vec<[String; 4]> = Vec::new();
    let empty = Vec::new();
    let runs = cycles["runs"].as_array().unwrap_or(&empty);
    for run in runs {
        let (h, l) = (&run["http"], &run["in_process"]);
        let mut note = String::new();
        for (name, side) in [("HTTP", h), ("in-process", l)] {
            if side["errors"].as_u64().unwrap_or(0) > 0 {
                note.push_str(&format!(" ({name}: {} errors)", side["errors"]));
            }
            if side["ran_dry"].as_bool().unwrap_or(false) {
                note.push_str(&format!(" ({name}: backlog ran dry)"));
            }
        }
        rows.push([
            format!(
                "lease→complete cycles/s, {} workers ({} ran first){note}",
                run["workers"],
                run["order"][0].as_str().unwrap_or("?").replace('_', "-")
            ),
            num(&h["cycles_per_s"]),
            format!("{} in-process", num(&l["cycles_per_s"])),
            ratio(&h["cycles_per_s"], &l["cycles_per_s"]),
        ]);
    }
    ceiling_rows(&mut rows, runs, floor);
    target_rows(&mut rows, target);
    if let Some(run) = runs.iter().find(|r| r["workers"] == 16) {
        for op in ["lease", "complete"] {
            let (h, l) = (&run["http"][op], &run["in_process"][op]);
            rows.push([
                format!("{op} latency p50 / p99 ms, 16 workers"),
                pair(h),
                format!("{} in-process", pair(l)),
                format!(
                    "{} / {}",
                    ratio(&h["p50_ms"], &l["p50_ms"]),
                    ratio(&h["p99_ms"], &l["p99_ms"])
                ),
            ]);
        }
    }
    let (h, l) = (&pickup["http"], &pickup["in_process"]);
    rows.push([
        format!(
            "pickup latency p50 / p99 ms (long poll 5 s, {} repeats; missed {} / {})",
            pickup["repeats"], pickup["http_missed"], pickup["in_process_missed"]
        ),
        pair(h),
        format!("{} in-process", pair(l)),
        format!(
            "{} / {}",
            ratio(&h["p50_ms"], &l["p50_ms"]),
            ratio(&h["p99_ms"], &l["p99_ms"])
        ),
    ]);
    let request = json!(MEMORY_REQUEST_MIB);
    for (what, mib) in [
        ("server peak RSS (VmHWM) at end, MiB", end.hwm_mib),
        ("server RSS at end, MiB", end.rss_mib),
        ("server RSS idle after start, MiB", idle.rss_mib),
    ] {
        rows.push([
            what.into(),
            format!("{mib:.1}"),
            format!("{MEMORY_REQUEST_MIB:.0} pod request"),
            ratio(&json!(mib), &request),
        ]);
    }
    let acc = &spam["accepted"];
    let acc_rate = &acc["requests_per_s"];
    let clients = &spam["clients"];
    for (what, key) in [("honeypot", "honeypot"), ("proof-of-work", "pow_refused")] {
        let r = &spam[key];
        rows.push([
            format!(
                "edit intake refused at {what} layer, req/s ({clients} clients; statuses {})",
                r["statuses"]
            ),
            num(&r["requests_per_s"]),
            format!("{} accepted/s", num(acc_rate)),
            ratio(&r["requests_per_s"], acc_rate),
        ]);
    }
    if acc.is_null() {
        rows.push([
            "edit intake accepted, req/s".into(),
            "not run".into(),
            "n/a".into(),
            "n/a".into(),
        ]);
    } else {
        rows.push([
            format!(
                "edit intake accepted, req/s ({} pre-solved at difficulty {}; statuses {})",
                acc["requests"], spam["difficulty"], acc["statuses"]
            ),
            num(acc_rate),
            format!("{} honeypot/s", num(&spam["honeypot"]["requests_per_s"])),
            ratio(acc_rate, &spam["honeypot"]["requests_per_s"]),
        ]);
    }
    feed_rows(&mut rows, feed);
    backlog_rows(&mut rows, backlog);
    batch_rows(&mut rows, batches);
    floor_rows(&mut rows, batches, floor);
    let (before, after) = (&bloat["before"], &bloat["after"]);
    rows.push([
        format!(
            "bloat: single-call items/s, 16 workers, after {} more lease→complete cycles ({} s in \
             batches of 128); tables then: {}",
            bloat["pushed"]["items"],
            num(&bloat["pushed"]["seconds"]),
            bloat["sizes"].as_str().unwrap_or("n/a"),
        ),
        num(&after["items_per_s"]),
        format!("{} on the fresh database", num(&before["items_per_s"])),
        ratio(&after["items_per_s"], &before["items_per_s"]),
    ]);

    let mut t = String::new();
    t.push_str("| figure | measured (HTTP server) | baseline, same run | ratio |\n");
    t.push_str("|---|---:|---:|---:|\n");
    for [a, b, c, d] in rows {
        t.push_str(&format!("| {a} | {b} | {c} | {d} |\n"));
    }
    t.push_str("\n| machine | |\n|---|---|\n");
    for (k, v) in machine {
        t.push_str(&format!("| {k} | {v} |\n"));
    }
    t
}

fn p_ratio(h: &Value, l: &Value) -> String {
    format!(
        "{} / {}",
        ratio(&h["p50_ms"], &l["p50_ms"]),
        ratio(&h["p99_ms"], &l["p99_ms"])
    )
}

fn feed_rows(rows: &mut Vec<[String; 4]>, feed: &Value) {
    let empty = Vec::new();
    let runs = feed["runs"].as_array().unwrap_or(&empty);
    for run in runs {
        let (ev, rt) = (&run["event_after_201"], &run["enqueue_round_trip"]);
        rows.push([
            format!(
                "feed: enqueue 201 → `transition` at subscriber, p50 / p99 ms, {} SSE subscribers \
                 ({}/{} connected; {} enqueues every {} ms; subscribers that missed any event: {}; \
                 streams ended early: {}; events seen before the 201: {})",
                run["subscribers"],
                run["connected"],
                run["subscribers"],
                run["enqueues"],
                run["interval_ms"],
                run["missed_subscribers"],
                run["streams_ended_early"],
                run["events_before_201"],
            ),
            pair(ev),
            format!("{} enqueue round trip", pair(rt)),
            p_ratio(ev, rt),
        ]);
    }
    if let Some(big) = runs
        .iter()
        .max_by_key(|r| r["subscribers"].as_u64().unwrap_or(0))
        && big["subscribers"].as_u64().unwrap_or(0) > 1
    {
        let (with, without) = (
            &big["server_rss_mib_idle_connected"],
            &big["server_rss_mib_before_connect"],
        );
        rows.push([
            format!(
                "server RSS, MiB, {} idle SSE subscribers connected (2 s after the last connected)",
                big["subscribers"]
            ),
            num(with),
            format!("{} with none, just before", num(without)),
            ratio(with, without),
        ]);
    }
}

fn batch_rows(rows: &mut Vec<[String; 4]>, batches: &[Value]) {
    let Some(base) = batches.first() else {
        return;
    };
    for run in batches {
        let mut note = String::new();
        if run["errors"].as_u64().unwrap_or(0) > 0 {
            note.push_str(&format!(
                " ({} errors: {})",
                run["errors"], run["first_error"]
            ));
        }
        rows.push([
            format!(
                "batching: items/s at batch size {}{}, {} workers ({} items in {} s{}; \
                 server peak RSS {} MiB){note}",
                run["batch"],
                match (
                    run["lease_next"].as_bool().unwrap_or(false),
                    run["next"].as_bool().unwrap_or(false),
                ) {
                    (true, _) => " with `lease_next`",
                    (false, true) => " with a `next` step per item",
                    (false, false) => "",
                },
                run["workers"],
                run["items"],
                num(&run["seconds"]),
                if run["drained"].as_bool().unwrap_or(false) {
                    ", drained"
                } else {
                    ""
                },
                num(&run["server_peak_rss_mib"]),
            ),
            num(&run["items_per_s"]),
            format!("{} at batch size 1", num(&base["items_per_s"])),
            ratio(&run["items_per_s"], &base["items_per_s"]),
        ]);
    }
}

/// Muster's largest batch against the same rows written in plain SQL, and what a bare queue
/// writes against those rows.
fn floor_rows(rows: &mut Vec<[String; 4]>, batches: &[Value], floor: &[Value]) {
    let named = |name: &str| floor.iter().find(|r| r["name"] == name);
    if let Some(why) = floor.iter().find_map(|r| r["skipped"].as_str()) {
        rows.push([
            "SQL floor (pgbench)".into(),
            format!("not measured: {why}"),
            String::new(),
            String::new(),
        ]);
        return;
    }
    let run = |v: &Value| {
        let short = if v["items"] == v["expected_items"] {
            String::new()
        } else {
            format!(" of {} asked", v["expected_items"])
        };
        format!(
            "{} clients, batches of {}, {} items{short} in {} s",
            v["clients"],
            v["batch"],
            v["items"],
            num(&v["seconds"])
        )
    };
    const ROWS: &str = "lease, lease row, ledger row, completion, finished lease, ledger row \
                        per item";
    let largest = batches
        .iter()
        .filter(|r| !r["next"].as_bool().unwrap_or(false))
        .max_by_key(|r| r["batch"].as_u64().unwrap_or(0));
    if let (Some(http), Some(full)) = (largest, named("full")) {
        rows.push([
            format!(
                "SQL floor: items/s at batch size {} over HTTP, against the same rows written \
                 in plain SQL by pgbench ({ROWS}; no HTTP, no Muster; {})",
                http["batch"],
                run(full)
            ),
            num(&http["items_per_s"]),
            format!("{} in plain SQL", num(&full["items_per_s"])),
            ratio(&http["items_per_s"], &full["items_per_s"]),
        ]);
    }
    if let (Some(bare), Some(full)) = (named("bare"), named("full")) {
        rows.push([
            format!(
                "SQL floor: items/s of a bare queue in plain SQL (the two item updates only: no \
                 lease rows, no ledger; {})",
                run(bare)
            ),
            num(&bare["items_per_s"]),
            format!("{} with lease and ledger rows", num(&full["items_per_s"])),
            ratio(&bare["items_per_s"], &full["items_per_s"]),
        ]);
    }
}

/// Muster's single calls over HTTP against the single-item SQL ceiling at the same concurrency:
/// the same rows, one item per transaction, in plain SQL.
fn ceiling_rows(rows: &mut Vec<[String; 4]>, cycles: &[Value], floor: &[Value]) {
    for ceiling in floor
        .iter()
        .filter(|r| r["script"] == "ceiling-single.sql" && r["items_per_s"].is_number())
    {
        let Some(run) = cycles.iter().find(|r| r["workers"] == ceiling["clients"]) else {
            continue;
        };
        rows.push([
            format!(
                "SQL ceiling: lease→complete cycles/s over HTTP, {} workers, against the same rows \
                 one item per transaction in plain SQL (each lease and each completion committed \
                 on its own; pgbench, {} clients, prepared statements, {} cycles in {} s)",
                run["workers"],
                ceiling["clients"],
                ceiling["items"],
                num(&ceiling["seconds"])
            ),
            num(&run["http"]["cycles_per_s"]),
            format!("{} in plain SQL", num(&ceiling["items_per_s"])),
            ratio(&run["http"]["cycles_per_s"], &ceiling["items_per_s"]),
        ]);
    }
}

/// The issue's single-item script on one kind of table in the target phase: how fast it ran
/// just before and just after the 64-worker drain.
pub(crate) struct IssueScript {
    pub(crate) file: &'static str,
    /// The tables it ran on, as the table's rows name them.
    pub(crate) tables: &'static str,
    /// The same, short enough for a chart's legend.
    pub(crate) short: &'static str,
    /// pgbench's clients (as the run before the drain reports them).
    pub(crate) clients: u64,
    pub(crate) before: f64,
    pub(crate) after: f64,
}

impl IssueScript {
    /// The reading the target rows and the chart's lines use: the mean of the two runs.
    pub(crate) fn mean(&self) -> f64 {
        (self.before + self.after) / 2.0
    }
}

/// The issue's scripts measured on both sides of the drain in `target.json`, in a fixed
/// order; a script measured on one side only (or skipped) is left out.
pub(crate) fn issue_scripts(target: &Value) -> Vec<IssueScript> {
    let run = |side: &str, file: &str| -> Option<&Value> {
        target[side]
            .as_array()?
            .iter()
            .find(|r| r["script"] == file)
    };
    let rate = |side: &str, file: &str| run(side, file)?["items_per_s"].as_f64();
    [
        (
            "issue-single.sql",
            "Muster's tables",
            "issue #7's script on Muster's tables",
        ),
        (
            "issue-minimal.sql",
            "minimal tables: a queue with one lease-order index, a five-column ledger",
            "issue #7's script on minimal tables",
        ),
    ]
    .into_iter()
    .filter_map(|(file, tables, short)| {
        Some(IssueScript {
            file,
            tables,
            short,
            clients: run("before", file)?["clients"].as_u64().unwrap_or(0),
            before: rate("before", file)?,
            after: rate("after", file)?,
        })
    })
    .collect()
}

/// The target phase's 64-worker drain of single calls over HTTP against the issue's own
/// single-item script at 16 clients, on Muster's tables and on the lightest ones, measured just
/// before and just after it (the mean of the two is the baseline), each next to the ratio the
/// issue's absolute target stands for on the machine it was set on (this machine's speed moves
/// by half within an hour; docs/benchmarks.md).
/// Without the scripts (no pgbench) the drain's row says so.
fn target_rows(rows: &mut Vec<[String; 4]>, target: &Value) {
    let drain = &target["drain"];
    if drain["items_per_s"].as_f64().is_none() {
        return;
    }
    let (goal, measured) = ISSUE_TARGET;
    let what = format!(
        "issue #7's target within a minute: lease→complete cycles/s over HTTP, {} workers, single \
         calls, draining a fresh server's queue of {} items (database `muster_target`; {} items \
         in {} s{}){}",
        drain["workers"],
        TARGET_BACKLOG,
        drain["items"],
        num(&drain["seconds"]),
        if drain["drained"] == true {
            ", drained"
        } else {
            ""
        },
        if drain["errors"].as_u64().unwrap_or(0) > 0 {
            format!(" ({} errors: {})", drain["errors"], drain["first_error"])
        } else {
            String::new()
        },
    );
    let scripts = issue_scripts(target);
    if scripts.is_empty() {
        let why = ["before", "after"]
            .iter()
            .filter_map(|side| target[*side].as_array())
            .flatten()
            .find_map(|r| r["skipped"].as_str())
            .unwrap_or("the issue's script ran on one side of the drain only");
        rows.push([
            what,
            num(&drain["items_per_s"]),
            format!("not measured: {why}"),
            "n/a".into(),
        ]);
        return;
    }
    for script in scripts {
        let mean = script.mean();
        let http = drain["items_per_s"].as_f64().unwrap_or(0.0);
        let met = if mean > 0.0 && http / mean >= goal / measured {
            "met"
        } else {
            "not met"
        };
        rows.push([
            format!(
                "{what}, against the issue's single-item script on {}, run just before and just \
                 after it (xtask/sql/{}; pgbench, {} clients, prepared statements: {:.0} \
                 before, {:.0} after); the issue asked {goal:.0} where its script ran \
                 {measured:.0}, at least {:.4}× — {met}",
                script.tables,
                script.file,
                script.clients,
                script.before,
                script.after,
                goal / measured,
            ),
            num(&drain["items_per_s"]),
            format!("{} in plain SQL (mean)", num(&json!(mean))),
            ratio(&drain["items_per_s"], &json!(mean)),
        ]);
    }
}

fn backlog_rows(rows: &mut Vec<[String; 4]>, backlog: &[Value]) {
    let [base, big] = backlog else {
        return;
    };
    let size = |v: &Value| {
        let digits = v["size"].as_u64().unwrap_or(0).to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    let (bs, gs) = (size(base), size(big));
    let (bm, gm) = (&base["measured"], &big["measured"]);
    rows.push([
        format!(
            "backlog: server start → first `GET /v1/queues` 200, ms, {gs} queued (bulk insert took {} s)",
            num(&big["fill"]["insert_seconds"])
        ),
        num(&big["start_to_first_queues_ms"]),
        format!("{} with {bs} queued", num(&base["start_to_first_queues_ms"])),
        ratio(&big["start_to_first_queues_ms"], &base["start_to_first_queues_ms"]),
    ]);
    rows.push([
        format!(
            "backlog: `GET /v1/queues` latency p50 / p99 ms ({} requests), {gs} queued",
            gm["queues"]["n"]
        ),
        pair(&gm["queues"]),
        format!("{} with {bs} queued", pair(&bm["queues"])),
        p_ratio(&gm["queues"], &bm["queues"]),
    ]);
    let mut note = String::new();
    for (name, m) in [(&gs, gm), (&bs, bm)] {
        if m["errors"].as_u64().unwrap_or(0) > 0 {
            note.push_str(&format!(" ({name}: {} errors)", m["errors"]));
        }
        if m["ran_dry"].as_bool().unwrap_or(false) {
            note.push_str(&format!(" ({name}: backlog ran dry)"));
        }
    }
    rows.push([
        format!(
            "backlog: lease→complete→enqueue (refill) cycles/s, {} workers, {} s, {gs} queued ({} per `/v1/queues` before){note}",
            gm["workers"], gm["seconds"], gm["trawl_queued"]
        ),
        num(&gm["cycles_per_s"]),
        format!(
            "{} with {bs} queued ({} per `/v1/queues`)",
            num(&bm["cycles_per_s"]),
            bm["trawl_queued"]
        ),
        ratio(&gm["cycles_per_s"], &bm["cycles_per_s"]),
    ]);
    for op in ["lease", "complete", "enqueue"] {
        rows.push([
            format!("backlog: {op} latency p50 / p99 ms in those cycles, {gs} queued"),
            pair(&gm[op]),
            format!("{} with {bs} queued", pair(&bm[op])),
            p_ratio(&gm[op], &bm[op]),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figure columns of table rows (measured, baseline, ratio), without the label.
    fn figures(rows: &[[String; 4]]) -> Vec<Vec<String>> {
        rows.iter().map(|r| r[1..].to_vec()).collect()
    }

    fn floor_run(name: &str, items: u64, items_per_s: f64) -> Value {
        json!({"name": name, "clients": 16, "batch": 128, "items": items,
               "expected_items": 198_656, "seconds": 20.0, "items_per_s": items_per_s})
    }

    /// A full run at 10,000 items/s that finished `full_items`, and a complete bare run at 20,000.
    fn floor_pair(full_items: u64) -> [Value; 2] {
        [
            floor_run("full", full_items, 10_000.0),
            floor_run("bare", 198_656, 20_000.0),
        ]
    }

    fn floor_table(batches: &[Value], floor: &[Value]) -> Vec<[String; 4]> {
        let mut rows = Vec::new();
        floor_rows(&mut rows, batches, floor);
        rows
    }

    #[test]
    fn the_floor_row_compares_the_largest_batch_without_a_next_step_with_the_plain_sql_rate() {
        let batches = [
            json!({"batch": 1, "items_per_s": 1000.0}),
            json!({"batch": 128, "items_per_s": 9000.0}),
            json!({"batch": 128, "next": true, "items_per_s": 7000.0}),
        ];
        let floor = floor_pair(198_656);
        let rows = floor_table(&batches, &floor);
        assert_eq!(
            rows[0][1..],
            [
                "9000".to_owned(),
                "10000 in plain SQL".into(),
                "0.90×".into()
            ]
        );
    }

    #[test]
    fn the_bare_queue_row_is_compared_with_the_full_rows() {
        let floor = floor_pair(198_656);
        let rows = floor_table(&[], &floor);
        assert_eq!(
            rows[0][1..],
            [
                "20000".to_owned(),
                "10000 with lease and ledger rows".into(),
                "2.00×".into()
            ]
        );
    }

    #[test]
    fn a_floor_run_that_finished_fewer_items_than_asked_says_so() {
        let floor = floor_pair(198_000);
        let rows = floor_table(&[json!({"batch": 128, "items_per_s": 9000.0})], &floor);
        assert!(
            rows[0][0].contains("198000 items of 198656 asked in 20.00 s"),
            "{}",
            rows[0][0]
        );
    }

    #[test]
    fn the_ceiling_row_compares_the_http_cycles_with_the_single_item_sql_rate_at_the_same_concurrency()
     {
        let cycles = [
            json!({"workers": 16, "http": {"cycles_per_s": 2400.0}}),
            json!({"workers": 64, "http": {"cycles_per_s": 5000.0}}),
        ];
        let ceiling = json!({"name": "single-64", "script": "ceiling-single.sql", "clients": 64,
                             "batch": 1, "items": 19_200, "seconds": 16.0, "items_per_s": 1200.0});
        let mut rows = Vec::new();
        ceiling_rows(
            &mut rows,
            &cycles,
            &[floor_run("full", 198_656, 9000.0), ceiling],
        );
        assert_eq!(
            figures(&rows),
            [[
                "5000".to_owned(),
                "1200 in plain SQL".into(),
                "4.17×".into()
            ]]
        );
    }

    fn issue_run(file: &str, items_per_s: f64) -> Value {
        json!({"name": "issue", "script": file, "clients": 16, "batch": 1, "items": 16_000,
               "seconds": 8.0, "items_per_s": items_per_s})
    }

    fn drain(items_per_s: f64) -> Value {
        json!({"workers": 64, "items": 40_000, "seconds": 10.0, "drained": false,
               "errors": 0, "items_per_s": items_per_s})
    }

    /// The target rows of a phase whose scripts ran at `before` and `after` around a drain.
    fn issue_table(http_64: f64, before: f64, after: f64) -> Vec<[String; 4]> {
        let target = json!({
            "before": [issue_run("issue-single.sql", before)],
            "drain": drain(http_64),
            "after": [issue_run("issue-single.sql", after)],
        });
        let mut rows = Vec::new();
        target_rows(&mut rows, &target);
        rows
    }

    #[test]
    fn the_issue_target_row_compares_the_drain_with_the_mean_of_the_scripts_around_it() {
        let rows = issue_table(3900.0, 1800.0, 2200.0);
        assert_eq!(
            figures(&rows),
            [[
                "3900".to_owned(),
                "2000 in plain SQL (mean)".into(),
                "1.95×".into()
            ]]
        );
    }

    #[test]
    fn the_issue_target_row_names_both_script_rates() {
        let rows = issue_table(3900.0, 1800.0, 2200.0);
        assert!(
            rows[0][0].contains("1800 before, 2200 after"),
            "{}",
            rows[0][0]
        );
    }

    #[test]
    fn the_issue_target_is_met_at_4000_over_3100_of_the_scripts_around_the_drain() {
        let rows = issue_table(3100.0 * 1.3, 3000.0, 3200.0);
        assert!(
            rows[0][0].ends_with("at least 1.2903× — met"),
            "{}",
            rows[0][0]
        );
    }

    #[test]
    fn the_issue_target_is_not_met_below_4000_over_3100_of_the_scripts_around_the_drain() {
        let rows = issue_table(3100.0 * 1.28, 3000.0, 3200.0);
        assert!(
            rows[0][0].ends_with("at least 1.2903× — not met"),
            "{}",
            rows[0][0]
        );
    }

    #[test]
    fn the_issue_script_on_minimal_tables_gets_a_target_row_of_its_own() {
        let target = json!({
            "before": [issue_run("issue-single.sql", 2000.0),
                       issue_run("issue-minimal.sql", 3200.0)],
            "drain": drain(4000.0),
            "after": [issue_run("issue-minimal.sql", 3200.0),
                      issue_run("issue-single.sql", 2000.0)],
        });
        let mut rows = Vec::new();
        target_rows(&mut rows, &target);
        let got: Vec<_> = rows
            .iter()
            .map(|r| (r[0].contains("on minimal tables"), r[3].clone()))
            .collect();
        assert_eq!(got, [(false, "2.00×".to_owned()), (true, "1.25×".into())]);
    }

    #[test]
    fn a_script_measured_on_one_side_of_the_drain_only_leaves_the_target_not_measured() {
        let target = json!({
            "before": [issue_run("issue-single.sql", 2000.0)],
            "drain": drain(4000.0),
            "after": [],
        });
        let mut rows = Vec::new();
        target_rows(&mut rows, &target);
        assert_eq!(
            figures(&rows),
            [[
                "4000".to_owned(),
                "not measured: the issue's script ran on one side of the drain only".into(),
                "n/a".into()
            ]]
        );
    }

    #[test]
    fn without_pgbench_the_target_row_shows_the_drain_and_says_the_script_was_not_measured() {
        let skipped = json!({"name": "issue-16", "skipped": "pgbench not found"});
        let target = json!({"before": [skipped], "drain": drain(4000.0), "after": [skipped]});
        let mut rows = Vec::new();
        target_rows(&mut rows, &target);
        assert_eq!(
            figures(&rows),
            [[
                "4000".to_owned(),
                "not measured: pgbench not found".into(),
                "n/a".into()
            ]]
        );
    }

    #[test]
    fn the_target_row_names_the_drains_errors() {
        let mut failing = drain(3900.0);
        failing["errors"] = json!(3);
        failing["first_error"] = json!("503 at_capacity");
        let target = json!({
            "before": [issue_run("issue-single.sql", 2000.0)],
            "drain": failing,
            "after": [issue_run("issue-single.sql", 2000.0)],
        });
        let mut rows = Vec::new();
        target_rows(&mut rows, &target);
        assert!(
            rows[0][0].contains("(3 errors: \"503 at_capacity\")"),
            "{}",
            rows[0][0]
        );
    }

    #[test]
    fn the_target_row_names_the_drains_workers_and_the_scripts_clients() {
        let rows = issue_table(3900.0, 1800.0, 2200.0);
        let got = (
            rows[0][0].contains("over HTTP, 64 workers, single calls"),
            rows[0][0].contains("pgbench, 16 clients"),
        );
        assert_eq!(got, (true, true));
    }

    #[test]
    fn the_ceiling_rows_leave_the_issue_script_out() {
        let cycles = [json!({"workers": 16, "http": {"cycles_per_s": 2400.0}})];
        let issue = json!({"name": "issue-16", "script": "issue-single.sql", "clients": 16,
                           "batch": 1, "items": 16_000, "seconds": 8.0, "items_per_s": 2000.0});
        let mut rows = Vec::new();
        ceiling_rows(&mut rows, &cycles, &[issue]);
        assert_eq!(rows.len(), 0);
    }

    #[test]
    fn without_pgbench_the_floor_is_reported_as_not_measured() {
        let skipped = json!({"name": "full", "skipped": "pgbench not found"});
        let rows = floor_table(&[], &[skipped.clone(), skipped]);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][1], "not measured: pgbench not found");
    }
}
