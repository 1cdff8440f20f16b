//! Scenario `history-cost`: what a long history costs the paths that should not pay for it,
//! against a running server on a database whose history `backlog-fill --history N` wrote in
//! SQL (N finished items, each with its lease and three ledger rows) beside a filled `trawl`
//! queue. The lab's `history-suite` runs it at 10,000 and at 1,000,000 finished items.
//!
//! In order: the server's checkpoint task is waited for until it has taken its first
//! checkpoint, over the whole fill (it folds the entries' stored hashes; the filled chains
//! themselves are not valid, so nothing before that checkpoint can be verified); `--workers` single-call workers
//! drain the queue for `--seconds` (lease and complete latencies); `GET /v1/items` pages of the
//! finished items, paged on with `next`; feed resumes `--resume-back` events back (time to the
//! newest event); `muster ledger-verify --since` the fill's checkpoint (its time and peak RSS),
//! which verifies the workers' entries, all written through the API.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::backlog::{connect, item_pages};
use crate::feed_load::{Workers, drain, round3};
use crate::http::{Http, percentiles};
use crate::procinfo::memory;
use crate::results::{HistoryCost, SinceVerify};
use crate::retention::finished;

/// `muster-bench history-cost`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: crate::Operated,
    #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
    conn_token: String,
    /// `ledger-verify`; checkpoints and counts are read from its database.
    #[command(flatten)]
    verify: crate::MusterCommand,
    #[command(flatten)]
    drain: Workers,
    /// Sequential `GET /v1/items` pages.
    #[arg(long, default_value_t = 100)]
    pages: usize,
    /// Sequential feed resumes.
    #[arg(long, default_value_t = 20)]
    resumes: usize,
    /// How far back each resume starts (past the feed's in-memory ring, within its window).
    #[arg(long, default_value_t = 5_000)]
    resume_back: i64,
}

async fn one_i64(client: &tokio_postgres::Client, sql: &str) -> Result<i64> {
    let row = client.query_one(sql, &[]).await.context(sql.to_owned())?;
    Ok(row.get(0))
}

/// Waits (up to 10 minutes) for the server's first checkpoint, the one it takes over the fill
/// (every entry there is when it starts): its sequence.
async fn fill_checkpoint(client: &tokio_postgres::Client) -> Result<i64> {
    let until = Instant::now() + Duration::from_secs(600);
    loop {
        let first = one_i64(
            client,
            "SELECT coalesce(min(seq), 0) FROM core.ledger_checkpoints",
        )
        .await?;
        if first > 0 {
            return Ok(first);
        }
        if Instant::now() > until {
            bail!("no checkpoint within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `resumes` sequential `GET /v1/events` with `Last-Event-ID` `back` events before the newest:
/// the time until the newest event's frame has arrived.
async fn feed_resumes(
    http: &Http,
    token: &str,
    newest: i64,
    back: i64,
    resumes: usize,
) -> Result<Vec<Duration>> {
    let newest_id = format!("id: {newest}\n");
    let mut out = Vec::with_capacity(resumes);
    let (_stop_tx, mut stop) = tokio::sync::watch::channel(false);
    for _ in 0..resumes {
        let t = Instant::now();
        let mut stream = http.events(token, Some(newest - back)).await?;
        let mut seen = Vec::new();
        loop {
            let chunk = tokio::time::timeout(Duration::from_secs(30), stream.next_chunk(&mut stop))
                .await
                .context("a feed resume stalled for 30 s")??
                .context("the feed stream stopped")?;
            // Keep a tail, so that an id line split across chunks is still found.
            let tail = seen.len().saturating_sub(newest_id.len());
            seen.drain(..tail);
            seen.extend_from_slice(&chunk);
            if seen
                .windows(newest_id.len())
                .any(|w| w == newest_id.as_bytes())
            {
                break;
            }
        }
        out.push(t.elapsed());
    }
    Ok(out)
}

/// `muster ledger-verify --since CHECKPOINT`: its time, its peak RSS (`VmHWM`, read every 5 ms
/// until it exits) and what it printed.
async fn verify_since(o: &Args, checkpoint: i64) -> Result<SinceVerify> {
    let started = Instant::now();
    let since = checkpoint.to_string();
    let mut child = o
        .verify
        .spawn(&["ledger-verify", "--since", &since], Stdio::piped())?;
    let mut peak_mib: f64 = 0.0;
    while child.try_wait()?.is_none() {
        if let Ok(m) = memory(child.id()) {
            peak_mib = peak_mib.max(m.hwm_mib);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let output = child.wait_with_output()?;
    Ok(SinceVerify {
        checkpoint,
        output: crate::printed("ledger-verify --since", &output)?,
        peak_rss_mib: Some((peak_mib * 10.0).round() / 10.0),
        seconds: round3(seconds),
    })
}

pub(crate) async fn history_cost(o: &Args) -> Result<HistoryCost> {
    let http = Http::new(&o.server.trawl.url);
    let db = connect(&o.verify.database_url).await?;
    let finished = finished(&db).await?;
    let t = Instant::now();
    let checkpoint = fill_checkpoint(&db).await?;
    let checkpoint_wait = t.elapsed().as_secs_f64();
    eprintln!(
        "muster-bench: history-cost, {finished} finished items: checkpoint {checkpoint} after {checkpoint_wait:.1}s"
    );

    let drain = drain(&http, &o.server.trawl.worker_token, o.drain).await;
    let pages = item_pages(
        &http,
        &o.server.operator_token,
        "state=done&kind=trawl",
        o.pages,
    )
    .await?;
    let newest = one_i64(&db, "SELECT coalesce(max(seq), 0) FROM core.ledger").await?;
    let resumes = feed_resumes(&http, &o.conn_token, newest, o.resume_back, o.resumes).await?;
    let since = verify_since(o, checkpoint).await?;
    let doc = HistoryCost {
        checkpoint_wait_seconds: round3(checkpoint_wait),
        drain,
        entries_after_checkpoint: newest - checkpoint,
        feed_resume: percentiles(resumes),
        finished,
        items_done_page: percentiles(pages),
        ledger_rows: one_i64(&db, "SELECT count(*) FROM core.ledger").await?,
        resume_back: o.resume_back,
        scenario: "history-cost".to_owned(),
        since_verify: since,
        workers: o.drain.workers as u64,
    };
    eprintln!(
        "muster-bench: history-cost, {finished} finished items: lease p99 {:?} ms, complete p99 {:?} ms, page p99 {:?} ms, resume p99 {:?} ms, verify --since {:.2}s",
        doc.drain.lease.p99_ms,
        doc.drain.complete.p99_ms,
        doc.items_done_page.p99_ms,
        doc.feed_resume.p99_ms,
        doc.since_verify.seconds
    );
    Ok(doc)
}
