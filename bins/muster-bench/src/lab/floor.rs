//! The SQL floor and ceilings: Muster's rows (and lighter ones) written by pgbench in plain
//! SQL, from the scripts in `bins/muster-bench/sql/`, the baselines of the rows that say how
//! close Muster comes to what PostgreSQL itself allows.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use muster_devdb::find_bin;

use super::procs::{banner, psql_answer};
use super::wal;
use crate::results::FloorResult;

/// One pgbench run of the SQL floor on Muster's tables: a script of bins/muster-bench/sql/ (the
/// batch scripts read `:batch`; the single-item one takes one item per transaction), its
/// clients and batch size, and how many items it finishes in all.
pub(crate) struct FloorRun {
    pub(crate) name: &'static str,
    file: &'static str,
    script: &'static str,
    clients: u64,
    batch: u64,
    items: u64,
    /// `-M prepared` (pgbench variables become parameters); the batch scripts splice their
    /// `':ids'` array literals as text, so they run in the simple protocol.
    prepared: bool,
}

impl FloorRun {
    /// This run of `script` (bins/muster-bench/sql/`file`), named `name`.
    const fn running(self, name: &'static str, file: &'static str, script: &'static str) -> Self {
        FloorRun {
            name,
            file,
            script,
            ..self
        }
    }
}

/// How the scripts' finished items are counted.
const DONE: &str = "SELECT count(*) FROM core.items WHERE state = 'done'";

/// A floor run of batches on Muster's tables: the batching runs' 16 workers, largest batch
/// (128) and items, in the simple protocol; the runs below name their script.
const BATCHED: FloorRun = FloorRun {
    name: "",
    file: "",
    script: "",
    clients: 16,
    batch: 128,
    items: super::BATCH_ITEMS,
    prepared: false,
};

/// A run of one item per transaction on Muster's tables at 16 clients, with prepared
/// statements; the runs below name their script.
const SINGLE: FloorRun = FloorRun {
    clients: 16,
    batch: 1,
    items: 16_000,
    prepared: true,
    ..BATCHED
};

/// The SQL floor: Muster's rows in batches of 128 (the batching runs' 16 workers and largest
/// batch), and a bare queue's rows the same way; then the single-item ceiling: Muster's rows
/// one item per transaction (each lease and each completion committed on its own, as the
/// default modes of the usual PostgreSQL job queues do) at the cycle runs' 16 and 64 clients,
/// with prepared statements (in the simple protocol pgbench would parse and plan every
/// statement of every item, and measure that more than the rows).
pub(crate) const FLOOR_RUNS: [FloorRun; 4] = [
    BATCHED.running(
        "full",
        "floor-full.sql",
        include_str!("../../sql/floor-full.sql"),
    ),
    BATCHED.running(
        "bare",
        "floor-bare.sql",
        include_str!("../../sql/floor-bare.sql"),
    ),
    SINGLE.running(
        "single-16",
        "ceiling-single.sql",
        include_str!("../../sql/ceiling-single.sql"),
    ),
    FloorRun {
        clients: 64,
        items: 19_200,
        ..SINGLE
    }
    .running(
        "single-64",
        "ceiling-single.sql",
        include_str!("../../sql/ceiling-single.sql"),
    ),
];

/// Runs one SQL-floor script with pgbench (as many transactions per client as `run.items`
/// allows) and answers how many items it finished, in how long; pgbench's own output goes to
/// `floor-<name>.txt` in `out`. `skipped` when this PostgreSQL has no pgbench.
pub(crate) fn sql_floor(url: &str, run: &FloorRun, out: &Path) -> Result<FloorResult> {
    let name = run.name;
    let Some(pgbench) = find_bin("pgbench") else {
        eprintln!("muster-bench: pgbench not found; the SQL floor is not measured");
        return Ok(FloorResult {
            name: Some(name.to_owned()),
            skipped: Some("pgbench not found".to_owned()),
            ..FloorResult::default()
        });
    };
    let path = out.join(run.file);
    std::fs::write(&path, run.script).with_context(|| format!("write {}", path.display()))?;
    let done = || -> Result<u64> {
        psql_answer(url, DONE)
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
    let wal_before = wal::sample(url);
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
    std::fs::write(out.join(format!("floor-{name}.txt")), stdout.as_bytes())?;
    // Counted, not assumed: a batch that found fewer items than it asked for shows here.
    let items = done()?.saturating_sub(before);
    let wal = wal::since(wal_before, url, items);
    Ok(FloorResult {
        batch: Some(run.batch),
        clients: Some(run.clients),
        expected_items: Some(run.clients * per_client * run.batch),
        items: Some(items),
        items_per_s: Some(items as f64 / seconds),
        name: Some(name.to_owned()),
        protocol: Some(protocol.to_owned()),
        script: Some(run.file.to_owned()),
        seconds: Some(seconds),
        skipped: None,
        wal,
    })
}

/// Lease → complete cycles between the two single-call rate measurements of the bloat rows.
pub(crate) const BLOAT_CYCLES: u64 = 1_000_000;

/// `relation: total size (MiB), dead tuples` of the working tables, as PostgreSQL reports them.
pub(crate) fn table_sizes(url: &str) -> Option<String> {
    let sql = "SELECT string_agg(format('%s: %s MiB, %s dead tuples', relname, \
               round(pg_total_relation_size(relid) / 1048576.0), n_dead_tup), '; ' ORDER BY relname) \
               FROM pg_stat_user_tables WHERE schemaname = 'core' \
               AND relname IN ('items', 'leases', 'ledger')";
    psql_answer(url, sql)
}
