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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::{Http, percentiles, ratio};
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
    /// Connections asked for, and those the server still held 1 s after they opened.
    connections: usize,
    open_after_1s: usize,
    rss_mib_before: Option<f64>,
    rss_mib_with_connections: Option<f64>,
    lease: Percentiles,
    /// Of the phase's connections, those the server had closed 12 s after they opened.
    closed_by_12s: usize,
}

pub(crate) struct Params<'a> {
    pub(crate) url: &'a str,
    pub(crate) operator_token: &'a str,
    pub(crate) worker_token: &'a str,
    pub(crate) idle: usize,
    pub(crate) slow: usize,
    pub(crate) cycles: usize,
    pub(crate) server_pid: Option<u32>,
}

fn rss_mib(pid: Option<u32>) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

fn addr(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// Whether the server has closed `s` (a read answers end of file or an error at once).
async fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

async fn count_open(conns: &mut [TcpStream]) -> usize {
    let mut open = 0;
    for c in conns.iter_mut() {
        if !closed(c).await {
            open += 1;
        }
    }
    open
}

/// The lease latencies of `cycles` lease→complete cycles, one worker.
async fn lease_sample(http: &Http, p: &Params<'_>) -> Result<Percentiles> {
    for i in 0..p.cycles {
        http.enqueue(
            p.operator_token,
            &json!({"kind": "trawl", "priority": "normal", "payload": {"n": i}}),
        )
        .await?;
    }
    let mut sample = Vec::with_capacity(p.cycles);
    for _ in 0..p.cycles {
        let started = Instant::now();
        let Some(lease) = http.lease_now(p.worker_token, "edge-bench").await? else {
            break;
        };
        sample.push(started.elapsed());
        let id = lease["lease_id"].as_str().context("a lease id")?;
        http.complete(p.worker_token, id, &json!({"result": {}}))
            .await?;
    }
    Ok(percentiles(sample))
}

async fn phase(http: &Http, p: &Params<'_>, name: &str, n: usize, slow: bool) -> Result<EdgePhase> {
    let rss_before = rss_mib(p.server_pid);
    let opened = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(TcpStream::connect(addr(p.url)).await?);
    }
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
    let open_after_1s = if slow {
        n
    } else {
        count_open(&mut conns).await
    };
    let rss_with = rss_mib(p.server_pid);
    let lease = lease_sample(http, p).await?;
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(opened.elapsed())).await;
    if let Some(writers) = trickle {
        // The writers stop at a write error (closed) or after 15 s.
        for w in writers {
            conns.push(w.await?);
        }
    }
    let closed_by_12s = n - count_open(&mut conns).await;
    Ok(EdgePhase {
        name: name.to_owned(),
        connections: n,
        open_after_1s,
        rss_mib_before: rss_before,
        rss_mib_with_connections: rss_with,
        lease,
        closed_by_12s,
    })
}

pub(crate) async fn edge(p: &Params<'_>) -> Result<Edge> {
    let http = Http::new(p.url);
    let base = phase(&http, p, "none", 0, false).await?;
    let idle = phase(&http, p, "idle", p.idle, false).await?;
    let slow = phase(&http, p, "slow_header", p.slow, true).await?;
    let p99 = |ph: &EdgePhase| ph.lease.p99_ms.unwrap_or(0.0);
    let kib_per_idle = match (idle.rss_mib_before, idle.rss_mib_with_connections) {
        (Some(b), Some(w)) if idle.open_after_1s > 0 => {
            Some(((w - b) * 1024.0 / idle.open_after_1s as f64 * 10.0).round() / 10.0)
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
