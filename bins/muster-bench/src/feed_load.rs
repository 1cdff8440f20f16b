//! Scenario `feed-load`: what the live feed costs the workers. Worker items/s and lease p99
//! (16 workers, single lease and complete calls, over a queue filled beforehand) with 0, 50 and
//! 1,000 SSE subscribers attached and reading, each as a ratio to the phases with none in the
//! same run; and the server's CPU per event per subscriber, from `/proc/<pid>/stat`.
//!
//! The subscribers run on a runtime (and thread) of their own, so that their reading does not
//! queue behind the workers' tasks in this process; on a small machine they still share its
//! cores with the workers and the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use crate::http::{Http, percentiles, ratio};
use crate::procinfo::{cpu_seconds, ticks_per_second};
use crate::results::{FeedLoad, FeedLoadRun, WorkerPhase};
use crate::rounds::Tally;

/// What the subscribers of one phase received, summed over all of them.
#[derive(Default)]
struct Received {
    connected: AtomicU64,
    /// SSE frames (events), counted by their closing blank line.
    events: AtomicU64,
    bytes: AtomicU64,
    /// Streams that ended (or failed) before the phase stopped them.
    ended: AtomicU64,
}

/// One subscriber: reads `/v1/events` until `stop`, counting frames and bytes.
async fn subscribe(
    http: Http,
    token: String,
    received: Arc<Received>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let result: Result<()> = async {
        let mut stream = http.events(&token, None).await?;
        received.connected.fetch_add(1, Ordering::Relaxed);
        let mut newline_before = false;
        loop {
            let Some(data) = stream.next_chunk(&mut stop).await? else {
                return Ok(());
            };
            let mut frames = 0;
            for &b in data.iter() {
                if b == b'\n' {
                    if newline_before {
                        frames += 1;
                    }
                    newline_before = true;
                } else {
                    newline_before = false;
                }
            }
            received.events.fetch_add(frames, Ordering::Relaxed);
            received
                .bytes
                .fetch_add(data.len() as u64, Ordering::Relaxed);
        }
    }
    .await;
    if result.is_err() {
        received.ended.fetch_add(1, Ordering::Relaxed);
    }
}

/// `muster-bench feed-load`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: crate::Subscribed,
    /// Subscribers, one phase per value, in this order.
    #[arg(long, value_delimiter = ',', default_value = "0,50,1000,0")]
    subscribers: Vec<usize>,
    #[command(flatten)]
    drain: Workers,
    /// The server's pid (same machine): its CPU is read from /proc.
    #[arg(long)]
    server_pid: u32,
}

/// The single-call workers of a scenario's phases: how many, and how long each phase drains.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct Workers {
    #[arg(long, default_value_t = 16)]
    pub(crate) workers: usize,
    /// Length of each phase's drain.
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,
}

/// Lease (wait 0) and complete as `token` with `w.workers` workers for `w.seconds`.
pub(crate) async fn drain(http: &Http, token: &str, w: Workers) -> WorkerPhase {
    let (workers, start) = (w.workers, Instant::now());
    let deadline = start + Duration::from_secs(w.seconds);
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (http, token) = (http.clone(), token.to_owned());
            tokio::spawn(async move {
                let worker_id = format!("bench-feed-load-{w}");
                let (mut lease, mut complete, mut tally) =
                    (Vec::new(), Vec::new(), Tally::default());
                while Instant::now() < deadline {
                    let round = async {
                        let t0 = Instant::now();
                        let Some(granted) = http.lease_now(&token, &worker_id).await? else {
                            return Ok(false);
                        };
                        lease.push(t0.elapsed());
                        let id = granted["lease_id"].as_str().context("lease_id missing")?;
                        let t1 = Instant::now();
                        http.complete(&token, id, &json!({"result": {}})).await?;
                        complete.push(t1.elapsed());
                        Ok(true)
                    }
                    .await;
                    if !tally.go_on_after(round) {
                        break;
                    }
                }
                (lease, complete, tally)
            })
        })
        .collect();
    let (mut lease, mut complete, mut tally) = (Vec::new(), Vec::new(), Tally::default());
    for task in tasks {
        match task.await {
            Ok((l, c, t)) => {
                lease.extend(l);
                complete.extend(c);
                tally.add(t);
            }
            Err(e) => tally.failed(e.to_string()),
        }
    }
    let (items, seconds) = (complete.len() as u64, start.elapsed().as_secs_f64());
    WorkerPhase {
        complete: percentiles(complete),
        errors: tally.errors,
        first_error: tally.first_error,
        items,
        items_per_s: Some(round1(items as f64 / seconds)),
        lease: percentiles(lease),
        ran_dry: tally.ran_dry,
        seconds: round3(seconds),
    }
}

async fn phase(
    o: &Args,
    http: &Http,
    subscribers_rt: &tokio::runtime::Handle,
    subscribers: usize,
    ticks: f64,
) -> Result<FeedLoadRun> {
    let received = Arc::new(Received::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::with_capacity(subscribers);
    for i in 0..subscribers {
        tasks.push(subscribers_rt.spawn(subscribe(
            http.clone(),
            o.server.conn_token.to_owned(),
            received.clone(),
            stop_rx.clone(),
        )));
        // In waves of 50, so that the accept queue is never the bottleneck.
        if i % 50 == 49 {
            let until = Instant::now() + Duration::from_secs(10);
            while (received.connected.load(Ordering::Relaxed) as usize) + 10 < i
                && Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    let until = Instant::now() + Duration::from_secs(30);
    while (received.connected.load(Ordering::Relaxed) as usize) < subscribers
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Connected and past their snapshots.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = o.server_pid.to_string();
    let (events0, bytes0) = (
        received.events.load(Ordering::Relaxed),
        received.bytes.load(Ordering::Relaxed),
    );
    let cpu0 = cpu_seconds(&pid, ticks)?;
    let bench0 = cpu_seconds("self", ticks)?;
    let drain = drain(http, &o.server.trawl.worker_token, o.drain).await;
    let cpu = cpu_seconds(&pid, ticks)? - cpu0;
    let bench_cpu = cpu_seconds("self", ticks)? - bench0;
    let events = received.events.load(Ordering::Relaxed) - events0;
    let bytes = received.bytes.load(Ordering::Relaxed) - bytes0;
    let ended = received.ended.load(Ordering::Relaxed);
    let connected = received.connected.load(Ordering::Relaxed);
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let items = drain.items;
    let run = FeedLoadRun {
        bench_cpu_seconds: Some(round3(bench_cpu)),
        bytes_delivered: bytes,
        connected,
        drain,
        events_delivered: events,
        server_cpu_seconds: Some(round3(cpu)),
        server_cpu_us_per_item: (items > 0).then(|| round1(cpu * 1e6 / items as f64)),
        streams_ended_early: ended,
        subscribers: subscribers as u64,
        ..FeedLoadRun::default()
    };
    eprintln!(
        "muster-bench: feed-load {subscribers} subscribers ({connected} connected): {} items/s, lease p99 {:?} ms, server CPU {cpu:.2} s, {events} events delivered",
        run.drain.items_per_s.unwrap_or(0.0),
        run.drain.lease.p99_ms,
    );
    Ok(run)
}

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The same figure averaged over the phases without subscribers.
fn baseline(runs: &[FeedLoadRun], figure: impl Fn(&FeedLoadRun) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = runs
        .iter()
        .filter(|r| r.subscribers == 0)
        .filter_map(figure)
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

pub(crate) async fn feed_load(o: &Args) -> Result<FeedLoad> {
    let http = Http::new(&o.server.trawl.url);
    let ticks = ticks_per_second();
    let subscriber_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("feed-subscribers")
        .enable_all()
        .build()?;
    let mut runs = Vec::new();
    for &n in &o.subscribers {
        runs.push(phase(o, &http, subscriber_rt.handle(), n, ticks).await?);
        // Let the server drop the closed streams before the next phase.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    subscriber_rt.shutdown_background();
    let rate0 = baseline(&runs, |r| r.drain.items_per_s);
    let p99_0 = baseline(&runs, |r| r.drain.lease.p99_ms);
    let cpu_item0 = baseline(&runs, |r| r.server_cpu_us_per_item);
    for run in &mut runs {
        run.items_per_s_over_none = rate0.and_then(|b| ratio(run.drain.items_per_s?, b));
        run.lease_p99_over_none = p99_0.and_then(|b| ratio(run.drain.lease.p99_ms?, b));
        // The server CPU beyond what the same items cost without subscribers, per event each
        // subscriber received.
        if run.subscribers > 0
            && run.events_delivered > 0
            && let (Some(cpu), Some(per_item)) = (run.server_cpu_seconds, cpu_item0)
        {
            let extra_us = cpu * 1e6 - per_item * run.drain.items as f64;
            run.server_cpu_us_per_event_per_subscriber =
                Some(round3(extra_us / run.events_delivered as f64));
        }
    }
    Ok(FeedLoad {
        clock_ticks_per_s: ticks,
        phase_seconds: o.drain.seconds,
        runs,
        scenario: "feed-load".to_owned(),
        server_pid: o.server_pid,
        workers: o.drain.workers as u64,
    })
}
