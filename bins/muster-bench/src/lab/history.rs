//! `muster-bench history-suite`: the history-cost rows by themselves, since filling a million
//! finished items with their leases and three million ledger rows, and letting the server
//! checkpoint them, takes minutes that the suite's ten cannot spare. A throwaway PostgreSQL
//! (fsync on), and per size a database of its own: `backlog-fill --history N` beside a queue
//! of [`QUEUED`] and a fresh `muster serve`, both servers running; once both have checkpointed
//! their fill, `history-cost` twice against each, in the [`ORDER`] that evens out the machine.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use muster_devdb::{migrated_database, runtime_url};
use serde_json::json;

use super::Runner;
use super::procs::{
    ServeArgs, free_listen, machine, on_suite_cluster, psql_answer, publish, write_serve_files,
};
use crate::report::render_history;
use crate::results::{BacklogFill, HistoryCost, HistorySize};

/// The finished items compared (the first is the baseline).
const SIZES: [u64; 2] = [10_000, 1_000_000];

/// Which size runs `history-cost` when, by index into [`SIZES`]: each twice, in an order that
/// gives neither the quieter or busier moments of a shared machine.
const ORDER: [usize; 4] = [0, 1, 1, 0];

/// Waits (up to 10 minutes) until the server on `url` has checkpointed every ledger entry: the
/// fold over a million items' entries takes a core for seconds, which no run may run beside.
fn checkpointed(url: &str) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(600);
    let sql = "SELECT (SELECT coalesce(max(seq), 0) FROM core.ledger_checkpoints) \
               >= (SELECT coalesce(max(seq), 0) FROM core.ledger)";
    while psql_answer(url, sql).as_deref() != Some("t") {
        if Instant::now() > until {
            anyhow::bail!("no checkpoint over the fill within 10 minutes");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(())
}

/// Queued items beside the history (two runs of 16 workers for 10 s finish up to about 60,000).
const QUEUED: &str = "100000";

pub(crate) fn suite(muster: &Path, out: &Path) -> Result<()> {
    let table = on_suite_cluster(out, |cluster| {
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
        let muster_path = muster.display().to_string();
        let mut sizes = Vec::new();
        let mut servers = Vec::new();
        for size in SIZES {
            let url = migrated_database(cluster, muster, &format!("muster_history_{size}"))?;
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
            sizes.push(HistorySize {
                fill,
                runs: Vec::new(),
                size,
            });
            servers.push((url, free_listen()?));
        }
        let mut procs = Vec::new();
        for ((url, listen), size) in servers.iter().zip(SIZES) {
            let log = out.join(format!("server-history-{size}.log"));
            procs.push(ServeArgs::new(muster, url, listen, out).start(&log)?);
        }
        for (url, _) in &servers {
            checkpointed(url)?;
        }
        for (pass, &i) in ORDER.iter().enumerate() {
            let (url, listen) = &servers[i];
            let base = format!("http://{listen}");
            let measured: HistoryCost = runner.run(
                &format!("history-cost-{}-{}", SIZES[i], pass / 2 + 1),
                &[
                    "history-cost",
                    "--url",
                    &base,
                    "--database-url",
                    &runtime_url(url),
                    "--muster",
                    &muster_path,
                ],
            )?;
            sizes[i].runs.push(measured);
        }
        for mut server in procs {
            server.stop();
        }
        Ok(render_history(&sizes, &machine(&servers[0].0)))
    })?;
    publish(out, "results.md", "table", &table)
}
