//! Scenario `retention`: what a retention pass costs the workers. `--workers` single-call
//! workers drain a filled `trawl` queue for `--seconds` alone, then beside a retention pass that
//! removes every finished item (`muster retention-pass --retain-days 0`, started as the phase
//! starts), then alone again; the lease p99 and items/s beside the pass against the phase
//! before it, and the pass's removal rate (finished items removed per second of the pass). The
//! phase after the pass is kept apart: it runs beside the pass's aftermath (a million dead rows
//! in `core.items`, autovacuum's to reclaim), which no phase without a pass has.
//!
//! The pass runs as the command an operator runs, in a process of its own: the same
//! `Retention::pass` that `muster serve` runs every minute, with the same batches, statements
//! and locks in Logbook, started when the phase starts rather than at the server's next minute.
//! The finished items must carry UUIDv7 ids, as a running system's do (the pass scans its
//! groups in id order up to the cutoff's id): `backlog-fill --done` writes them so.

use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::backlog::connect;
use crate::feed_load::{Workers, drain, round1, round3};
use crate::http::{Http, ratio};
use crate::results::{Retention, RetentionPassRun, WorkerPhase};

/// `muster-bench retention`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: crate::Trawl,
    /// The pass.
    #[command(flatten)]
    pass: crate::MusterCommand,
    #[command(flatten)]
    drain: Workers,
}

/// Finished items in Logbook.
pub(crate) async fn finished(client: &tokio_postgres::Client) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT count(*) FROM core.items WHERE state IN ('done', 'failed', 'cancelled')",
            &[],
        )
        .await
        .context("count finished items")?;
    Ok(row.get(0))
}

async fn phase(o: &Args, http: &Http) -> WorkerPhase {
    drain(http, &o.server.worker_token, o.drain).await
}

/// `(items, leases)` of `muster retention-pass`'s line: "retention pass: N finished items and
/// M leases removed, …".
fn removed(output: &str) -> Option<(u64, u64)> {
    let rest = output.trim().strip_prefix("retention pass: ")?;
    let (items, rest) = rest.split_once(" finished items and ")?;
    let (leases, _) = rest.split_once(" leases removed")?;
    Some((items.parse().ok()?, leases.parse().ok()?))
}

/// The workers' phase beside a pass started with it, and the pass (awaited to its end).
async fn beside_a_pass(o: &Args, http: &Http) -> Result<(WorkerPhase, RetentionPassRun)> {
    let client = connect(&o.pass.database_url).await?;
    let finished_before = finished(&client).await?;
    let started = Instant::now();
    let child = o
        .pass
        .spawn(&["retention-pass", "--retain-days", "0"], Stdio::inherit())?;
    // Timed on a thread of its own, so that its end is seen when it comes.
    let pass = std::thread::spawn(move || {
        let output = child.wait_with_output();
        (output, started.elapsed())
    });
    let during = phase(o, http).await;
    let outlasted_phase = !pass.is_finished();
    let (output, took) = tokio::task::spawn_blocking(move || pass.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the retention pass's waiter panicked"))?;
    let printed = crate::printed("retention-pass", &output.context("muster retention-pass")?)?;
    let (items, leases) =
        removed(&printed).with_context(|| format!("muster retention-pass printed {printed:?}"))?;
    let seconds = took.as_secs_f64();
    let run = RetentionPassRun {
        finished_after: finished(&client).await?,
        finished_before,
        items_per_s: Some(round1(items as f64 / seconds)),
        items_removed: items,
        leases_removed: leases,
        output: printed,
        outlasted_phase,
        seconds: round3(seconds),
    };
    eprintln!(
        "muster-bench: retention pass removed {items} finished items and {leases} leases in {seconds:.1}s ({} items/s; {finished_before} finished before, {} after){}",
        run.items_per_s.unwrap_or(0.0),
        run.finished_after,
        if outlasted_phase {
            ""
        } else {
            "; it ended before the workers' phase did"
        }
    );
    Ok((during, run))
}

fn report(what: &str, p: &WorkerPhase) {
    eprintln!(
        "muster-bench: retention, workers {what}: {} items/s, lease p99 {:?} ms",
        p.items_per_s.unwrap_or(0.0),
        p.lease.p99_ms
    );
}

pub(crate) async fn retention(o: &Args) -> Result<Retention> {
    let http = Http::new(&o.server.url);
    let before = phase(o, &http).await;
    report("alone", &before);
    let (during, pass) = beside_a_pass(o, &http).await?;
    report("beside the pass", &during);
    let after = phase(o, &http).await;
    report("alone after the pass", &after);
    Ok(Retention {
        items_per_s_over_quiet: before
            .items_per_s
            .and_then(|b| ratio(during.items_per_s?, b)),
        lease_p99_over_quiet: before
            .lease
            .p99_ms
            .and_then(|b| ratio(during.lease.p99_ms?, b)),
        during,
        pass,
        phase_seconds: o.drain.seconds,
        quiet: vec![before, after],
        scenario: "retention".to_owned(),
        workers: o.drain.workers as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::removed;

    #[test]
    fn the_pass_line_gives_the_items_and_leases_removed() {
        let line = "retention pass: 1020000 finished items and 20000 leases removed, 0 edit texts removed\n";
        assert_eq!(removed(line), Some((1_020_000, 20_000)));
    }

    #[test]
    fn a_line_of_another_shape_gives_nothing() {
        assert_eq!(removed("error: could not connect"), None);
    }
}
