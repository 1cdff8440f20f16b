//! The trace-cost phase of the suite, and `muster-bench trace-suite`: its rows by themselves.
//! `trace-cost` starts its fresh servers itself (it passes them the address of its OTLP sink),
//! so it gets the database, the serve files and the `muster` binary rather than a server.

use std::path::Path;

use anyhow::Result;
use muster_devdb::migrated_database;
use serde_json::json;

use super::Runner;
use super::procs::{machine, on_suite_cluster, publish, write_serve_files};
use crate::report::render_trace;
use crate::results::{BacklogFill, TraceCost};

/// Queued items for `trace-cost` (16 workers, three phases of 10 s).
const TRACE_ITEMS: u64 = 100_000;

/// `trace-cost` on the migrated database at `url`, the serve files and the servers' logs in
/// `out`; the queue is topped up first with items that carry a sampled trace context each (as
/// if enqueued with tracing on), so that the servers export their item spans too.
pub(super) fn measure(runner: &Runner<'_>, muster: &Path, url: &str) -> Result<TraceCost> {
    let items = TRACE_ITEMS.to_string();
    let fill = [
        "backlog-fill",
        "--database-url",
        url,
        "--to",
        &items,
        "--traced",
    ];
    let _: BacklogFill = runner.run("trace-cost-fill", &fill)?;
    let (muster, dir) = (
        muster.display().to_string(),
        runner.out.display().to_string(),
    );
    runner.run(
        "trace-cost",
        &[
            "trace-cost",
            "--database-url",
            url,
            "--dir",
            &dir,
            "--muster",
            &muster,
        ],
    )
}

/// `muster-bench trace-suite`: a throwaway PostgreSQL (fsync on), a migrated database, then
/// [`measure`]; prints the rows and writes them with the JSON to `out`.
pub(crate) fn suite(muster: &Path, out: &Path) -> Result<()> {
    let table = on_suite_cluster(out, |cluster| {
        let tokens = write_serve_files(
            out,
            ["worker:trawl"],
            json!({"docs/intro": {"owner": "alice", "title": "Intro"}}),
        )?;
        let token = tokens.token("worker:trawl").unwrap_or_default().to_owned();
        let env = [("MUSTER_BENCH_TRAWL_TOKEN", token)];
        let url = migrated_database(cluster, muster, "muster_trace")?;
        let cost = measure(&Runner { env: &env, out }, muster, &url)?;
        Ok(render_trace(&cost, &machine(&url)))
    })?;
    publish(out, "results.md", "table", &table)
}
