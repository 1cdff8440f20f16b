//! `cargo xtask demo`: PostgreSQL, one `muster serve` and a simulated fleet of the ten worker
//! kinds, with the live feed drawn in the terminal in the operator's view (`muster watch`'s,
//! run by `muster-sim watch` so that it ends by itself): depths per kind and state,
//! transitions per second, health per kind, the stream's age. Ends once every item is
//! finished (or on `q` / Ctrl-C). See docs/chaos.md.

use std::ffi::OsString;
use std::fs::{self, File};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use muster_devdb::{ClusterOptions, StopMode, TempCluster};
use serde_json::Value;

use crate::fleet::{FleetFiles, fleet_files};
use crate::procs::{
    Reaper, append, banner, build_debug, free_port, migrated_database, target_dir, wait_healthy,
    workspace_root,
};

/// Lease TTL of the demo server: a simulated crash comes back within three seconds.
const LEASE_TTL_MS: &str = "3000";

pub(crate) fn demo(args: Vec<OsString>) -> Result<ExitCode> {
    let mut roots = 200u64;
    let mut args = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--roots" => {
                roots = args
                    .next()
                    .context("--roots needs a value")?
                    .parse()
                    .context("--roots")?;
            }
            other => bail!("unknown argument `{other}` (cargo xtask demo [--roots N])"),
        }
    }
    let root = workspace_root();
    let bin = build_debug(&root, &["muster", "muster-sim"])?;
    let (muster, sim) = (bin.join("muster"), bin.join("muster-sim"));
    let dir = target_dir(&root).join("demo");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;

    banner("starting a throwaway PostgreSQL cluster");
    let mut cluster =
        TempCluster::start_with(ClusterOptions::default()).context("could not start PostgreSQL")?;
    let reaper = Reaper::start(&dir)?;
    let url = migrated_database(&cluster, &muster, "muster_demo")?;

    let FleetFiles {
        tokens: tokens_path,
        sim_tokens,
        pipeline,
    } = fleet_files(&dir)?;

    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let log = dir.join("muster.log");
    let mut serve = Command::new(&muster);
    serve
        .arg("serve")
        .args([
            "--database-url",
            &url,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--tokens")
        .arg(&tokens_path)
        .arg("--pipeline")
        .arg(&pipeline)
        .args(["--lease-ttl-ms", LEASE_TTL_MS])
        .stdin(Stdio::null())
        .stdout(append(&log)?)
        .stderr(append(&log)?);
    let mut server = reaper.spawn(&mut serve, "muster serve")?;
    wait_healthy(&format!("127.0.0.1:{port}"), &mut server, &log)?;

    let roots_arg = roots.to_string();
    let plan = [
        "--roots",
        roots_arg.as_str(),
        "--fail-rate",
        "0.05",
        "--flaky-rate",
        "0.15",
        "--subtool-rate",
        "0.10",
        "--crash-rate",
        "0.05",
    ];
    // `muster-sim TASK` against the server, with the fleet's tokens.
    let sim_cmd = |task: &str| {
        let mut cmd = Command::new(&sim);
        cmd.args([task, "--url", &base, "--tokens"])
            .arg(&sim_tokens);
        cmd
    };
    let dry = sim_cmd("enqueue")
        .args(plan)
        .arg("--dry-run")
        .output()
        .context("muster-sim enqueue --dry-run")?;
    let planned: Value = serde_json::from_slice(&dry.stdout).context("dry-run summary")?;
    let items = planned["planned"]["items"]
        .as_u64()
        .context("planned items")?;

    let mut fleet = sim_cmd("run");
    fleet
        .arg("--spool")
        .arg(dir.join("spool"))
        .args(["--name", "demo", "--workers", "20", "--work-ms", "60"])
        .args(["--shipkeeper", "--deploy-every-ms", "4000"])
        .stdin(Stdio::null())
        .stdout(File::create(dir.join("fleet.out"))?)
        .stderr(append(&dir.join("fleet.log"))?);
    let mut fleet = reaper.spawn(&mut fleet, "muster-sim run")?;
    let mut enqueue = sim_cmd("enqueue");
    enqueue
        .args(plan)
        .stdin(Stdio::null())
        .stdout(File::create(dir.join("enqueue.out"))?)
        .stderr(append(&dir.join("enqueue.log"))?);
    let mut enqueue = reaper.spawn(&mut enqueue, "muster-sim enqueue")?;

    banner(&format!(
        "Muster on {base}: {roots} root items through trawl → … → bellbuoy ({items} items; \
         {} chains planned to fail, {} flaky failures, {} parks, {} worker crashes). q stops. \
         From another terminal: `muster items list --state failed --url {base}` (or `watch`, \
         `queues`, `health`) with MUSTER_API_TOKEN the operator's token in {}.",
        planned["planned"]["failed_roots"],
        planned["planned"]["flaky_failures"],
        planned["planned"]["parks"],
        planned["planned"]["crashes"],
        sim_tokens.display(),
    ));
    let watched = sim_cmd("watch")
        .args(["--until-items", &items.to_string()])
        .status()
        .context("muster-sim watch")?;

    enqueue.terminate(Duration::from_secs(5));
    fleet.terminate(Duration::from_secs(15));
    server.terminate(Duration::from_secs(30));
    let _ = cluster.stop(StopMode::Fast);
    drop(cluster);
    drop(reaper);
    let summary = fs::read_to_string(dir.join("fleet.out")).unwrap_or_default();
    println!("\nfleet summary: {}", summary.trim());
    println!("logs and spool: {}", dir.display());
    Ok(if watched.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
