//! An example trawl worker on the runtime: echoes each item's payload as its result and hands
//! the item on to `sextant`.
//!
//! ```sh
//! MUSTER_URL=http://127.0.0.1:8080 MUSTER_TOKEN=… cargo run -p muster-worker --example echo_worker
//! ```
//!
//! `WORKER_ID` (default `trawl-<pid>`) and `SPOOL_DIR` (default
//! `$TMPDIR/muster-echo-worker-spool`) are optional, and so are `ECHO_CONCURRENCY` (items at
//! once, default 1), `ECHO_WORK_MS` (simulated work per item, default 0) and `ECHO_GRACE_MS`
//! (how long in-flight items may finish after SIGTERM, default 25 000). It stops on SIGTERM or
//! SIGINT; it exits 1 when it cannot start (another process holds the spool directory).
//! The same file is built as the `muster-echo-worker` binary, which the tests start and kill.

use std::process::ExitCode;
use std::time::Duration;

use muster_worker::{Lease, NextStep, Outcome, Runner};
use serde_json::json;

/// The work: echo the payload, after `work` of pretend effort.
async fn echo(lease: Lease, work: Duration) -> Outcome {
    let item = lease.item;
    println!("working {}", item.id);
    tokio::time::sleep(work).await;
    let next = vec![NextStep::new("sextant", item.payload.clone())];
    Outcome::done_then(json!({"echo": item.payload}), next)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
pub(crate) async fn main() -> ExitCode {
    let Ok(token) = std::env::var("MUSTER_TOKEN") else {
        eprintln!("echo_worker: set MUSTER_TOKEN");
        return ExitCode::FAILURE;
    };
    let url = std::env::var("MUSTER_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let spool = std::env::var("SPOOL_DIR").map_or_else(
        |_| std::env::temp_dir().join("muster-echo-worker-spool"),
        std::path::PathBuf::from,
    );
    let mut builder = Runner::builder(&url, &token, "trawl")
        .spool_dir(spool)
        .concurrency(env_u64("ECHO_CONCURRENCY", 1) as usize)
        .grace(Duration::from_millis(env_u64("ECHO_GRACE_MS", 25_000)));
    if let Ok(id) = std::env::var("WORKER_ID") {
        builder = builder.worker_id(id);
    }
    let runner = match builder.build() {
        Ok(runner) => runner,
        Err(e) => {
            eprintln!("echo_worker: {e} ({})", e.code());
            return ExitCode::FAILURE;
        }
    };
    let work = Duration::from_millis(env_u64("ECHO_WORK_MS", 0));
    let metrics = runner.metrics();
    match runner
        .run_until_signalled(move |lease| echo(lease, work))
        .await
    {
        Ok(report) => {
            for item in &report.abandoned {
                println!("abandoned {item}");
            }
            println!("stopped {:?}", metrics.snapshot());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echo_worker: {e} ({})", e.code());
            ExitCode::FAILURE
        }
    }
}
