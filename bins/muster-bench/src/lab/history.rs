//! `muster-bench history-suite`: the history-cost rows by themselves, since filling a million
//! finished items with their leases and three million ledger rows, and letting the server
//! checkpoint them, takes minutes that the suite's ten cannot spare. A throwaway PostgreSQL
//! (fsync on), and per size a database of its own: `backlog-fill --history N` beside a queue
//! of [`QUEUED`], a fresh `muster serve`, `history-cost` against it.

use std::path::Path;

use anyhow::{Context, Result};
use muster_devdb::{ClusterOptions, migrated_database, runtime_url};
use serde_json::json;

use super::Runner;
use super::procs::{ServeArgs, free_listen, machine, on_cluster, write_serve_files};
use crate::report::render_history;
use crate::results::{BacklogFill, HistoryCost, HistorySize};

/// The finished items compared (the first is the baseline).
const SIZES: [u64; 2] = [10_000, 1_000_000];

/// Queued items beside the history (16 workers for 10 s finish up to about 30,000).
const QUEUED: &str = "50000";

pub(crate) fn suite(muster: &Path, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("could not create {}", out.display()))?;
    let options = ClusterOptions {
        fsync: true,
        max_connections: 200,
        log_to: None,
        ..ClusterOptions::default()
    };
    let table = on_cluster(
        "starting a throwaway PostgreSQL cluster (fsync on)",
        options,
        |cluster| {
            let tokens = write_serve_files(
                out,
                ["operator", "conn", "worker:trawl"],
                json!({"docs/intro": {"owner": "alice", "title": "Intro"}}),
            )?;
            let token = |p: &str| tokens.token(p).unwrap_or_default().to_owned();
            let env = [
                ("MUSTER_BENCH_OPERATOR_TOKEN", token("operator")),
                ("MUSTER_BENCH_CONN_TOKEN", token("conn")),
                ("MUSTER_BENCH_TRAWL_TOKEN", token("worker:trawl")),
            ];
            let runner = Runner { env: &env, out };
            let listen = free_listen()?;
            let base = format!("http://{listen}");
            let muster_path = muster.display().to_string();
            let mut sizes = Vec::new();
            let mut url = String::new();
            for size in SIZES {
                url = migrated_database(cluster, muster, &format!("muster_history_{size}"))?;
                let history = size.to_string();
                let fill: BacklogFill = runner.run(
                    &format!("history-fill-{size}"),
                    &[
                        "backlog-fill",
                        "--database-url",
                        &url,
                        "--to",
                        QUEUED,
                        "--history",
                        &history,
                    ],
                )?;
                let log = out.join(format!("server-history-{size}.log"));
                let mut server = ServeArgs::new(muster, &url, &listen, out).start(&log)?;
                let measured: HistoryCost = runner.run(
                    &format!("history-cost-{size}"),
                    &[
                        "history-cost",
                        "--url",
                        &base,
                        "--database-url",
                        &runtime_url(&url),
                        "--muster",
                        &muster_path,
                    ],
                )?;
                server.stop();
                sizes.push(HistorySize {
                    fill,
                    measured,
                    size,
                });
            }
            Ok(render_history(&sizes, &machine(&url)))
        },
    )?;
    println!("\n{table}");
    let path = out.join("results.md");
    std::fs::write(&path, &table).with_context(|| format!("write {}", path.display()))?;
    eprintln!("muster-bench: table and raw JSON in {}", out.display());
    Ok(())
}
