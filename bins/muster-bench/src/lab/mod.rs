//! `muster-bench suite` (run by `cargo xtask bench`): a throwaway PostgreSQL with fsync on,
//! `muster serve` (release) on a free port, every scenario of `muster-bench` against it (each
//! in a process of its own), the SQL floor in pgbench; then one markdown table, each figure
//! next to a baseline measured in the same run. The raw JSON of every scenario and the table
//! are written to the output directory (`target/bench/`). See docs/benchmarks.md.
//!
//! The suite starts its clusters and servers itself (through muster-devdb) rather than leaving
//! that to xtask: the phases interleave fills, server restarts and measurements, and the
//! figures they read in between (RSS, the first `/v1/queues` answer, table sizes) are
//! measurements too. xtask only builds the release binaries and runs this.

mod floor;
pub(crate) mod history;
pub(crate) mod procs;
pub(crate) mod profile;
pub(crate) mod trace;
mod wal;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_devdb::{TempCluster, migrated_database, runtime_url};
use serde::de::DeserializeOwned;
use serde_json::json;

use self::floor::{BLOAT_CYCLES, FLOOR_RUNS, sql_floor, table_sizes};
use self::procs::{
    ServeArgs, banner, free_listen, machine, muster_bench, on_suite_cluster, publish, wait_queues,
    write_json, write_serve_files,
};
use crate::procinfo::memory;
use crate::report::{Suite, render};
use crate::results::{
    BacklogFill, BacklogMeasured, BacklogSize, BatchRun, Bloat, Cycles, Feed, FeedLoad, FeedMemory,
    Hostile, Pickup, Retention, Runs, RuntimeDoc, ServerMemory, Spam,
};

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

/// The layouts of `feed-memory`: the output's name and `--http2-connections` (0: HTTP/1.1, a
/// connection per subscriber; 63: 1,000 HTTP/2 streams, at most 16 per connection, the server's
/// limit).
const FEED_MEMORY_LAYOUTS: [(&str, &str); 2] =
    [("feed-memory-http1", "0"), ("feed-memory-http2", "63")];

/// Queued items for `feed-load` (16 workers, four phases of 20 s at up to ~3,500 items/s).
const FEED_LOAD_ITEMS: u64 = 300_000;

/// Queued items for `hostile` (16 workers, three phases of 10 s).
const HOSTILE_ITEMS: u64 = 100_000;

/// The backlog sizes compared (the first is the baseline).
const BACKLOG_SIZES: [u64; 2] = [1_000, 1_000_000];

/// The history phase: a short queue beside a long history of finished items (the baseline is
/// the first backlog size, with its 20,000 seeded finished items).
const HISTORY_QUEUED: u64 = 1_000;
const HISTORY_DONE: u64 = 1_000_000;

/// Queued items for `retention` on the history database (16 workers, three phases of 10 s),
/// beside its million finished items, which the pass removes.
const RETENTION_QUEUED: u64 = 150_000;

/// Runs the whole suite with the `muster` binary at `muster`, writing into `out`.
pub(crate) fn suite(muster: &Path, out: &Path) -> Result<()> {
    let suite = on_suite_cluster(out, |cluster| phases(cluster, muster, out))?;
    publish(out, "results.md", "table", &render(&suite))?;
    // Charts of this run next to the table; `cargo xtask charts` copies an adopted run's into
    // docs/img/.
    #[cfg(feature = "charts")]
    crate::charts::render(out, out).context("could not draw the charts")?;
    #[cfg(not(feature = "charts"))]
    eprintln!("muster-bench: built without the `charts` feature; no charts drawn");
    Ok(())
}

/// The `muster` binary next to this one (both in `target/release/` after `cargo build`).
pub(crate) fn sibling_muster() -> Result<PathBuf> {
    let me = std::env::current_exe().context("where is muster-bench?")?;
    Ok(me.with_file_name("muster"))
}

/// Runs scenarios of `muster-bench` with the suite's tokens, keeping their JSON in `out`.
struct Runner<'a> {
    env: &'a [(&'a str, String)],
    out: &'a Path,
}

impl Runner<'_> {
    fn run<T: DeserializeOwned>(&self, name: &str, args: &[&str]) -> Result<T> {
        muster_bench(self.env, self.out, name, args)
    }

    /// `muster-bench backlog-fill`: the trawl queue of the database at `url` topped up to `to`.
    fn fill(&self, name: &str, url: &str, to: u64) -> Result<BacklogFill> {
        let to = to.to_string();
        self.run(name, &["backlog-fill", "--database-url", url, "--to", &to])
    }
}

fn phases(cluster: &TempCluster, muster: &Path, out: &Path) -> Result<Suite> {
    let url = migrated_database(cluster, muster, "muster_bench")?;

    let tokens = write_serve_files(
        out,
        ["operator", "conn", "worker:trawl", "worker:sextant"],
        json!({"docs/intro": {"owner": "alice", "title": "Intro"}}),
    )?;
    let token = |p: &str| tokens.token(p).unwrap_or_default().to_owned();

    // History (and nothing queued) before the server starts: seeded under a running server, its
    // live feed would count the seeded ledger rows as transitions.
    Runner { env: &[], out }.fill("history-fill", &url, 0)?;

    let listen = free_listen()?;
    let base = format!("http://{listen}");
    let serve = ServeArgs::new(muster, &url, &listen, out);
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
    let runner = Runner { env: &env, out };
    let cycles: Cycles = runner.run("cycles", &["cycles", "--url", &base])?;
    let pickup: Pickup = runner.run("pickup", &["pickup", "--url", &base])?;
    let spam: Spam = runner.run("spam", &["spam", "--url", &base])?;
    // Read before the feed scenario: the server's memory without subscribers.
    let end = memory(server.pid())?;
    let pid = server.pid().to_string();
    let feed: Feed = runner.run("feed", &["feed", "--url", &base, "--server-pid", &pid])?;
    let runtime: RuntimeDoc = runner.run("runtime", &["runtime", "--url", &base])?;
    banner("stopping muster serve");
    server.stop();

    // The live feed's cost to the workers: a database of its own, its queue filled before the
    // server starts (so the fill reaches no subscriber), then 0, 50 and 1,000 subscribers.
    let feed_load_url = migrated_database(cluster, muster, "muster_feed_load")?;
    runner.fill("feed-load-fill", &feed_load_url, FEED_LOAD_ITEMS)?;
    let mut server = ServeArgs {
        url: &feed_load_url,
        ..serve
    }
    .start(&out.join("server-feed-load.log"))?;
    let pid = server.pid().to_string();
    let feed_load: FeedLoad = runner.run(
        "feed-load",
        &[
            "feed-load",
            "--url",
            &base,
            "--server-pid",
            &pid,
            "--seconds",
            "20",
        ],
    )?;
    server.stop();

    // Memory of 1,000 idle subscribers, once on HTTP/1.1 connections of their own and once as
    // HTTP/2 streams over 63 connections: each on a fresh server, since memory the allocator
    // kept from one layout would hide the next one's cost.
    let mut feed_memory = Vec::new();
    for (name, http2_connections) in FEED_MEMORY_LAYOUTS {
        let mut server = ServeArgs {
            url: &feed_load_url,
            ..serve
        }
        .start(&out.join(format!("server-{name}.log")))?;
        std::thread::sleep(Duration::from_secs(1));
        let pid = server.pid().to_string();
        let measured: FeedMemory = runner.run(
            name,
            &[
                "feed-memory",
                "--addr",
                &listen,
                "--server-pid",
                &pid,
                "--http2-connections",
                http2_connections,
            ],
        )?;
        server.stop();
        feed_memory.push(measured);
    }

    // Hostile clients and a random-token flood beside the workers: a fresh server (its idle
    // RSS is the baseline of its peak) on the feed-load database, whose ledger the feed
    // resumes reach back into, its queue topped up before the server starts.
    runner.fill("hostile-fill", &feed_load_url, HOSTILE_ITEMS)?;
    let mut server = ServeArgs {
        url: &feed_load_url,
        // The defaults this row is about: the hostile clients connect from addresses of
        // their own, apart from the workers.
        limits: &[],
        ..serve
    }
    .start(&out.join("server-hostile.log"))?;
    std::thread::sleep(Duration::from_secs(1));
    let pid = server.pid().to_string();
    let hostile: Hostile = runner.run(
        "hostile",
        &[
            "hostile",
            "--url",
            &base,
            "--server-pid",
            &pid,
            "--database-url",
            &feed_load_url,
        ],
    )?;
    server.stop();

    // Tracing's cost: a database of its own (every queued item carries a trace context),
    // fresh servers with tracing off and on.
    let trace_url = migrated_database(cluster, muster, "muster_trace")?;
    let trace_cost = trace::measure(&runner, muster, &trace_url)?;

    // Backlog: a database of its own, filled in SQL, a fresh server per size.
    let backlog_url = migrated_database(cluster, muster, "muster_backlog")?;
    let serve = ServeArgs {
        url: &backlog_url,
        ..serve
    };
    // A fresh server on a filled backlog (`name` names its log and its JSON): how long until
    // its first `/v1/queues` answer, then `backlog` against it.
    let backlog_of = |serve: &ServeArgs<'_>, name: &str, fill: BacklogFill, size: u64| {
        let started = Instant::now();
        let mut server = serve.spawn(&out.join(format!("server-{name}.log")))?;
        let first_queues = wait_queues(&listen, &token("operator"), &mut server, started)?;
        let measured: BacklogMeasured = runner.run(name, &["backlog", "--url", &base])?;
        server.stop();
        anyhow::Ok(BacklogSize {
            fill,
            measured,
            size,
            start_to_first_queues_ms: Some(first_queues.as_secs_f64() * 1000.0),
        })
    };
    let mut backlog = Vec::new();
    for size in BACKLOG_SIZES {
        let fill = runner.fill(&format!("backlog-fill-{size}"), &backlog_url, size)?;
        backlog.push(backlog_of(&serve, &format!("backlog-{size}"), fill, size)?);
    }

    // Delayed work: the largest backlog again, with half as many delayed items beside it.
    let largest = BACKLOG_SIZES[BACKLOG_SIZES.len() - 1];
    let (queued, delayed_n) = (largest.to_string(), (largest / 2).to_string());
    let fill: BacklogFill = runner.run(
        "delayed-fill",
        &[
            "backlog-fill",
            "--database-url",
            &backlog_url,
            "--to",
            &queued,
            "--delayed",
            &delayed_n,
        ],
    )?;
    let delayed = Some(backlog_of(&serve, "delayed", fill, largest)?);

    // History: a database of its own with a short queue and a million finished items.
    let history_url = migrated_database(cluster, muster, "muster_history")?;
    let serve_history = ServeArgs {
        url: &history_url,
        ..serve
    };
    let (queued, done) = (HISTORY_QUEUED.to_string(), HISTORY_DONE.to_string());
    let fill: BacklogFill = runner.run(
        "history-done-fill",
        &[
            "backlog-fill",
            "--database-url",
            &history_url,
            "--to",
            &queued,
            "--done",
            &done,
        ],
    )?;
    let history = Some(backlog_of(&serve_history, "history", fill, HISTORY_QUEUED)?);

    // Retention: the workers beside a pass that removes the history's finished items, its
    // queue topped up before a fresh server starts. The pass runs as the server's role.
    runner.fill("retention-fill", &history_url, RETENTION_QUEUED)?;
    let mut server = serve_history.start(&out.join("server-retention.log"))?;
    let pass_url = runtime_url(&history_url);
    let muster_path = muster.display().to_string();
    let retention: Retention = runner.run(
        "retention",
        &[
            "retention",
            "--url",
            &base,
            "--database-url",
            &pass_url,
            "--muster",
            &muster_path,
        ],
    )?;
    server.stop();

    // Batching: a database of its own, the trawl queue topped up to BATCH_ITEMS in SQL before
    // each batch size, a fresh server per size (its peak RSS is read at the end of the run, the
    // cluster's WAL counters before and after it).
    let batch_url = migrated_database(cluster, muster, "muster_batch")?;
    let serve = ServeArgs {
        url: &batch_url,
        ..serve
    };
    let mut batches = Vec::new();
    for (size, lease_next, next, seconds) in BATCH_RUNS {
        runner.fill(&format!("batch-fill-{size}"), &batch_url, BATCH_ITEMS)?;
        let items = BATCH_ITEMS.to_string();
        let name = match (lease_next, next) {
            (true, _) => format!("{size}-lease-next"),
            (false, true) => format!("{size}-next"),
            (false, false) => size.to_string(),
        };
        let log_path = out.join(format!("server-batch-{name}.log"));
        let mut server = serve.start(&log_path)?;
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
        let wal_before = wal::sample(&batch_url);
        let mut measured: BatchRun = runner.run(&format!("batch-{name}"), &args)?;
        measured.server_peak_rss_mib = Some(memory(server.pid())?.hwm_mib);
        measured.wal = wal::since(wal_before, &batch_url, measured.items);
        server.stop();
        batches.push(measured);
    }
    write_json(&out.join("batch.json"), &Runs { runs: &batches })?;

    // The SQL floor: the same rows as a batch of 128 writes, in plain SQL (pgbench), on a
    // migrated database of its own; then a bare queue's rows on the same table; then the same
    // rows one item per transaction (the single-item ceiling), topped up before each run.
    let floor_url = migrated_database(cluster, muster, "muster_floor")?;
    let mut floor = Vec::new();
    for run in &FLOOR_RUNS {
        runner.fill(&format!("floor-fill-{}", run.name), &floor_url, BATCH_ITEMS)?;
        floor.push(sql_floor(&floor_url, run, out)?);
    }
    write_json(&out.join("floor.json"), &Runs { runs: &floor })?;

    // Bloat: the single-call rate on a fresh database, then after BLOAT_CYCLES more lease →
    // complete cycles (pushed through in batches of 128, each one lease and one completion with
    // its ledger rows), on the same server, with autovacuum as the migrations configure it.
    let bloat_url = migrated_database(cluster, muster, "muster_bloat")?;
    let serve = ServeArgs {
        url: &bloat_url,
        ..serve
    };
    let mut server = serve.start(&out.join("server-bloat.log"))?;
    let single = |name: &str| -> Result<BatchRun> {
        runner.fill(&format!("bloat-fill-{name}"), &bloat_url, 40_000)?;
        runner.run(
            &format!("bloat-{name}"),
            &["batch", "--url", &base, "--batch", "1", "--seconds", "10"],
        )
    };
    let before = single("start")?;
    runner.fill("bloat-fill-cycles", &bloat_url, BLOAT_CYCLES)?;
    let bloat_cycles = BLOAT_CYCLES.to_string();
    let pushed: BatchRun = runner.run(
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
    let bloat = Bloat {
        after,
        before,
        pushed,
        sizes,
    };
    write_json(&out.join("bloat.json"), &bloat)?;
    let memory = ServerMemory { idle, end };
    write_json(&out.join("memory.json"), &memory)?;

    Ok(Suite {
        machine: machine(&url),
        cycles,
        pickup,
        spam,
        feed,
        feed_load,
        feed_memory,
        hostile,
        trace_cost,
        backlog,
        delayed,
        history,
        retention,
        batches,
        floor,
        bloat,
        memory,
        runtime,
    })
}
