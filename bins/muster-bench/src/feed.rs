//! Scenario `feed`: commit-to-subscriber latency of `transition` events on `GET /v1/events`,
//! with 1 and with many concurrent SSE subscribers, next to the enqueue round trip measured in
//! the same phase; plus the server's RSS with the subscribers connected and idle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_domain::feed::SseReader;
use serde_json::{Value, json};

use crate::http::{Http, ms, percentiles};
use crate::procinfo::rss_mib;
use crate::results::{Feed, FeedRun, Percentiles};

/// What one subscriber saw: the first arrival of each item's `→ queued` transition.
#[derive(Default)]
struct Seen {
    arrivals: HashMap<String, Instant>,
    /// The stream ended (or failed) before we stopped it.
    ended: bool,
    error: Option<String>,
}

/// One SSE subscriber on its own connection. Counts `connected` once the response head (200)
/// is in: the server subscribes before it answers.
async fn subscribe(
    http: Http,
    token: String,
    connected: Arc<AtomicUsize>,
    seen: Arc<Mutex<Seen>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let result: Result<()> = async {
        let mut stream = http.events(&token, None).await?;
        connected.fetch_add(1, Ordering::SeqCst);
        let mut reader = SseReader::default();
        loop {
            let Some(data) = stream.next_chunk(&mut stop).await? else {
                return Ok(());
            };
            let at = Instant::now();
            for block in reader.push(&data) {
                if block.event.as_deref() != Some("transition") {
                    continue;
                }
                let payload = block.data.as_deref().unwrap_or_default();
                let t: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
                if t["to"] == "queued"
                    && let Some(id) = t["id"].as_str()
                {
                    let mut s = seen
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    s.arrivals.entry(id.to_owned()).or_insert(at);
                }
            }
        }
    }
    .await;
    if let Err(e) = result {
        let mut s = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.ended = true;
        s.error.get_or_insert_with(|| format!("{e:#}"));
    }
}

/// Percentiles of signed millisecond values (an event may arrive before the 201 does).
fn signed_percentiles(mut sample: Vec<f64>) -> Percentiles {
    sample.sort_by(f64::total_cmp);
    let at = |p: usize| -> Option<f64> {
        if sample.is_empty() {
            return None;
        }
        let rank = (sample.len() * p).div_ceil(100).max(1);
        Some((sample[rank - 1] * 1000.0).round() / 1000.0)
    };
    Percentiles {
        n: sample.len() as u64,
        p50_ms: at(50),
        p99_ms: at(99),
    }
}

struct Phase<'a> {
    http: &'a Http,
    operator_token: &'a str,
    conn_token: &'a str,
    enqueues: usize,
    interval: Duration,
    server_pid: Option<u32>,
}

async fn phase(p: &Phase<'_>, subscribers: usize) -> Result<FeedRun> {
    let rss_before = rss_mib(p.server_pid);
    let connected = Arc::new(AtomicUsize::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut seen = Vec::with_capacity(subscribers);
    let mut tasks = Vec::with_capacity(subscribers);
    let t_connect = Instant::now();
    for i in 0..subscribers {
        let s = Arc::new(Mutex::new(Seen::default()));
        seen.push(s.clone());
        tasks.push(tokio::spawn(subscribe(
            p.http.clone(),
            p.conn_token.to_owned(),
            connected.clone(),
            s,
            stop_rx.clone(),
        )));
        // Connect in waves of 50, so that the accept queue is never the bottleneck.
        if i % 50 == 49 {
            let until = Instant::now() + Duration::from_secs(10);
            while connected.load(Ordering::SeqCst) + 10 < i && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    let until = Instant::now() + Duration::from_secs(30);
    while connected.load(Ordering::SeqCst) < subscribers && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let connect_s = t_connect.elapsed().as_secs_f64();
    let n_connected = connected.load(Ordering::SeqCst);
    if n_connected < subscribers {
        let failed = seen
            .iter()
            .find_map(|s| s.lock().ok().and_then(|s| s.error.clone()));
        eprintln!(
            "muster-bench: only {n_connected}/{subscribers} subscribers connected (first error: {failed:?})"
        );
    }
    // Idle: connected, nothing happening but heartbeats.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = rss_mib(p.server_pid);
    eprintln!(
        "muster-bench: {n_connected} subscribers connected in {connect_s:.1}s; server RSS {rss_before:?} → {rss_idle:?} MiB; {} enqueues every {} ms",
        p.enqueues,
        p.interval.as_millis()
    );

    // The enqueues, at a modest rate; "commit" = the 201 is back.
    let body = json!({"kind": "trawl", "priority": "normal", "payload": {"bench": "feed"}});
    let mut tick = tokio::time::interval(p.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent: Vec<(String, Instant, Instant)> = Vec::with_capacity(p.enqueues);
    let mut round_trip = Vec::with_capacity(p.enqueues);
    for _ in 0..p.enqueues {
        tick.tick().await;
        let t0 = Instant::now();
        let answer = p.http.enqueue(p.operator_token, &body).await?;
        let t1 = Instant::now();
        let id = answer["item_id"]
            .as_str()
            .context("item_id missing")?
            .to_owned();
        round_trip.push(t1 - t0);
        sent.push((id, t0, t1));
    }
    // Wait until every subscriber has every item (or 15 s).
    let until = Instant::now() + Duration::from_secs(15);
    let complete = |s: &Arc<Mutex<Seen>>| {
        let s = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        sent.iter().all(|(id, _, _)| s.arrivals.contains_key(id))
    };
    while Instant::now() < until && !seen.iter().all(complete) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }

    let mut after_201 = Vec::new();
    let mut after_send = Vec::new();
    let mut missed_subscribers = 0;
    let mut missed_events = 0;
    let mut ended = 0;
    let mut first_error = None;
    for s in &seen {
        let s = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut missed = 0;
        for (id, t0, t1) in &sent {
            match s.arrivals.get(id) {
                Some(at) => {
                    let signed = if *at >= *t1 {
                        ms(*at - *t1)
                    } else {
                        -ms(*t1 - *at)
                    };
                    after_201.push(signed);
                    after_send.push(ms(at.saturating_duration_since(*t0)));
                }
                None => missed += 1,
            }
        }
        missed_events += missed;
        if missed > 0 {
            missed_subscribers += 1;
        }
        if s.ended {
            ended += 1;
            if first_error.is_none() {
                first_error.clone_from(&s.error);
            }
        }
    }
    let early = after_201.iter().filter(|x| **x < 0.0).count();
    Ok(FeedRun {
        connect_seconds: (connect_s * 100.0).round() / 100.0,
        connected: n_connected as u64,
        enqueue_round_trip: percentiles(round_trip),
        enqueues: p.enqueues as u64,
        event_after_201: signed_percentiles(after_201),
        event_after_send: signed_percentiles(after_send),
        events_before_201: early as u64,
        first_error,
        interval_ms: p.interval.as_millis() as u64,
        missed_events: missed_events as u64,
        missed_subscribers: missed_subscribers as u64,
        server_rss_mib_before_connect: rss_before,
        server_rss_mib_idle_connected: rss_idle,
        streams_ended_early: ended as u64,
        subscribers: subscribers as u64,
    })
}

/// `muster-bench feed`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Base URL of a running `muster serve`.
    #[arg(long)]
    url: String,
    #[arg(long, env = "MUSTER_BENCH_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: String,
    #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
    conn_token: String,
    /// Concurrent subscribers, one phase per value.
    #[arg(long, value_delimiter = ',', default_value = "1,1000")]
    subscribers: Vec<usize>,
    /// Enqueues per phase.
    #[arg(long, default_value_t = 200)]
    enqueues: usize,
    /// Milliseconds between enqueues.
    #[arg(long, default_value_t = 20)]
    interval_ms: u64,
    /// The server's pid (same machine), to read its RSS from /proc; optional.
    #[arg(long)]
    server_pid: Option<u32>,
}

pub(crate) async fn feed(args: &Args) -> Result<Feed> {
    let (url, levels) = (&args.url, &args.subscribers);
    let (operator_token, conn_token) = (args.operator_token.as_str(), args.conn_token.as_str());
    let (enqueues, server_pid) = (args.enqueues, args.server_pid);
    let interval = Duration::from_millis(args.interval_ms);
    let http = Http::new(url);
    let p = Phase {
        http: &http,
        operator_token,
        conn_token,
        enqueues,
        interval,
        server_pid,
    };
    let mut runs = Vec::new();
    for &n in levels {
        runs.push(phase(&p, n).await?);
        // Let the server drop the closed streams before the next phase measures its RSS.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let nofile = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .map(|l| l.split_whitespace().nth(3).unwrap_or("?").to_owned())
        });
    Ok(Feed {
        bench_open_files_soft_limit: nofile,
        runs,
        scenario: "feed".to_owned(),
        server_pid,
    })
}
