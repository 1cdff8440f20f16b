//! Scenario `edge`: what connections that send no request cost the server, and whether they
//! slow the workers down. Three phases, each with a sample of lease→complete cycles: none
//! extra (the baseline); `--idle` connections that never send a byte; `--slow` connections
//! that send a request head one header line a second (never finishing it). Reported: server
//! RSS and lease p50/p99 in each phase, the ratios to the baseline, the memory of one idle
//! connection (which sizes `--max-connections`), and how many of the connections the server
//! had closed 12 s after they opened (the request-head timeout is 10 s; over the cap they are
//! closed at once).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::http::{Http, percentiles, ratio};
use crate::procinfo::rss_mib;
use crate::results::Percentiles;

#[derive(Debug, Serialize)]
pub(crate) struct Edge {
    scenario: String,
    phases: Vec<EdgePhase>,
    /// Server RSS growth per idle connection, in KiB.
    kib_per_idle_connection: Option<f64>,
    idle_rss_over_baseline: Option<f64>,
    idle_lease_p99_over_baseline: Option<f64>,
    slow_lease_p99_over_baseline: Option<f64>,
}

#[derive(Debug, Serialize)]
struct EdgePhase {
    name: String,
    /// Connections asked for; those the server held when its RSS was read (all opened, and at
    /// least 1 s after the first); and those it still held after the lease sample.
    connections: usize,
    open_when_measured: usize,
    open_after_lease_sample: usize,
    /// How long opening them took, in seconds.
    opened_in_s: f64,
    rss_mib_before: Option<f64>,
    rss_mib_with_connections: Option<f64>,
    lease: Percentiles,
    /// Of the phase's connections, those the server had closed 12 s after they opened.
    closed_by_12s: usize,
}

/// `muster-bench edge`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: crate::Operated,
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    #[arg(long, default_value_t = 1_000)]
    slow: usize,
    /// Lease→complete cycles sampled in each phase.
    #[arg(long, default_value_t = 300)]
    cycles: usize,
    /// The server's pid (same machine), to read its RSS from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
}

pub(crate) fn addr(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// Whether the server has closed `s`: a read that does not wait answers end of file or an
/// error (an open connection has nothing to read and would block).
fn closed(s: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match s.try_read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

pub(crate) fn count_open(conns: &[TcpStream]) -> usize {
    conns.iter().filter(|c| !closed(c)).count()
}

/// The lease latencies of `cycles` lease→complete cycles, one worker.
async fn lease_sample(http: &Http, p: &Args) -> Result<Percentiles> {
    for i in 0..p.cycles {
        http.enqueue(
            &p.server.operator_token,
            &json!({"kind": "trawl", "priority": "normal", "payload": {"n": i}}),
        )
        .await?;
    }
    let mut sample = Vec::with_capacity(p.cycles);
    for _ in 0..p.cycles {
        let started = Instant::now();
        let Some(lease) = http
            .lease_now(&p.server.trawl.worker_token, "edge-bench")
            .await?
        else {
            break;
        };
        sample.push(started.elapsed());
        let id = lease["lease_id"].as_str().context("a lease id")?;
        http.complete(&p.server.trawl.worker_token, id, &json!({"result": {}}))
            .await?;
    }
    Ok(percentiles(sample))
}

async fn phase(http: &Http, p: &Args, name: &str, n: usize, slow: bool) -> Result<EdgePhase> {
    let rss_before = rss_mib(p.server_pid);
    let opened = Instant::now();
    // Opened 256 at a time, so that thousands are open well within the 10 s head timeout.
    let target = addr(&p.server.trawl.url);
    let mut conns = Vec::with_capacity(n);
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..n {
        if opening.len() >= 256
            && let Some(c) = opening.join_next().await
        {
            conns.push(c??);
        }
        let target = target.clone();
        opening.spawn(async move { TcpStream::connect(target).await });
    }
    while let Some(c) = opening.join_next().await {
        conns.push(c??);
    }
    let opened_in = opened.elapsed();
    let trickle = if slow {
        // One header line a second, never the blank line that ends the head.
        let mut writers = Vec::with_capacity(n);
        for c in conns.drain(..) {
            writers.push(tokio::spawn(async move {
                let mut c = c;
                if c.write_all(b"GET /healthz HTTP/1.1\r\nHost: m\r\n")
                    .await
                    .is_err()
                {
                    return c;
                }
                for i in 0..15 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if c.write_all(format!("X-Slow-{i}: a\r\n").as_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                c
            }));
        }
        Some(writers)
    } else {
        None
    };
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(opened.elapsed())).await;
    let open_when_measured = if slow { n } else { count_open(&conns) };
    let rss_with = rss_mib(p.server_pid);
    let lease = lease_sample(http, p).await?;
    let open_after_lease_sample = if slow { n } else { count_open(&conns) };
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(opened.elapsed())).await;
    if let Some(writers) = trickle {
        // The writers stop at a write error (closed) or after 15 s.
        for w in writers {
            conns.push(w.await?);
        }
    }
    let closed_by_12s = n - count_open(&conns);
    Ok(EdgePhase {
        name: name.to_owned(),
        connections: n,
        opened_in_s: (opened_in.as_secs_f64() * 100.0).round() / 100.0,
        open_when_measured,
        open_after_lease_sample,
        rss_mib_before: rss_before,
        rss_mib_with_connections: rss_with,
        lease,
        closed_by_12s,
    })
}

pub(crate) async fn edge(p: &Args) -> Result<Edge> {
    let http = Http::new(&p.server.trawl.url);
    let base = phase(&http, p, "none", 0, false).await?;
    let idle = phase(&http, p, "idle", p.idle, false).await?;
    let slow = phase(&http, p, "slow_header", p.slow, true).await?;
    let p99 = |ph: &EdgePhase| ph.lease.p99_ms.unwrap_or(0.0);
    let kib_per_idle = match (idle.rss_mib_before, idle.rss_mib_with_connections) {
        (Some(b), Some(w)) if idle.open_when_measured > 0 => {
            Some(((w - b) * 1024.0 / idle.open_when_measured as f64 * 10.0).round() / 10.0)
        }
        _ => None,
    };
    Ok(Edge {
        scenario: "edge".to_owned(),
        kib_per_idle_connection: kib_per_idle,
        idle_rss_over_baseline: match (idle.rss_mib_with_connections, base.rss_mib_with_connections)
        {
            (Some(a), Some(b)) => ratio(a, b),
            _ => None,
        },
        idle_lease_p99_over_baseline: ratio(p99(&idle), p99(&base)),
        slow_lease_p99_over_baseline: ratio(p99(&slow), p99(&base)),
        phases: vec![base, idle, slow],
    })
}
