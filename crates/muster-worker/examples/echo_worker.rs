//! An example trawl worker: leases trawl items, echoes their payload as the result and hands
//! each on to `sextant`.
//!
//! ```sh
//! MUSTER_URL=http://127.0.0.1:8080 MUSTER_TOKEN=… cargo run -p muster-worker --example echo_worker
//! ```
//!
//! `WORKER_ID` (default `trawl-echo-<pid>`) and `SPOOL_DIR` (default
//! `$TMPDIR/muster-echo-worker-spool`) are optional.

use muster_worker::{ClientError, NextStep, WorkerClient};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let url = std::env::var("MUSTER_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let token = std::env::var("MUSTER_TOKEN")
        .map_err(|_| ClientError::InvalidArgument("set MUSTER_TOKEN".into()))?;
    let worker_id =
        std::env::var("WORKER_ID").unwrap_or_else(|_| format!("trawl-echo-{}", std::process::id()));
    let spool = std::env::var("SPOOL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("muster-echo-worker-spool"));
    let client = WorkerClient::new(&url, &token, "trawl", &worker_id, spool)?;

    // First deliver what a previous run spooled but could not deliver.
    for r in client.redeliver_spool().await? {
        println!("redelivered {}: {:?}", r.file.display(), r.outcome);
    }

    loop {
        let lease = match client.lease(30_000).await {
            Ok(Some(lease)) => lease,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("lease failed ({}): {e}", e.code());
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        let heartbeat = lease.keepalive(&client);
        // The "work": abandoned if the lease is lost meanwhile.
        let work = async { json!({"echo": lease.item.payload, "worker": worker_id}) };
        let result = tokio::select! {
            result = work => result,
            () = heartbeat.wait_lost() => {
                eprintln!("lease {} lost; abandoning item {}", lease.lease_id, lease.item.id);
                continue;
            }
        };
        drop(heartbeat);
        let next = vec![NextStep::new("sextant", lease.item.payload.clone())];
        match client.complete(&lease, result, next).await {
            Ok(ack) => println!(
                "item {} {} (ledger seq {:?})",
                lease.item.id, ack.state, ack.ledger_seq
            ),
            Err(e) => eprintln!("item {} not completed ({}): {e}", lease.item.id, e.code()),
        }
    }
}
