//! Scenario `feed-memory`: the server's RSS with idle SSE subscribers of `GET /v1/events`,
//! either each on an HTTP/1.1 connection of its own or as HTTP/2 streams sharing a few
//! connections (prior knowledge, as a browser's `EventSource`s to one origin share one). One
//! layout per run, on a server that has had no subscriber yet: memory the allocator kept from an
//! earlier round would hide the next one's cost.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::procinfo::rss_mib;
use crate::results::FeedMemory;

/// `muster-bench feed-memory`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `host:port` of a running `muster serve` (plain HTTP).
    #[arg(long)]
    addr: String,
    #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
    conn_token: String,
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// 0: HTTP/1.1, a connection per subscriber; n: HTTP/2 over n connections (the
    /// server allows 200 streams on one).
    #[arg(long, default_value_t = 0)]
    http2_connections: usize,
    /// The server's pid (same machine): its RSS is read from /proc.
    #[arg(long)]
    server_pid: u32,
}

fn request(o: &Args) -> Result<hyper::Request<Empty<Bytes>>> {
    Ok(hyper::Request::builder()
        .uri(format!("http://{}/v1/events", o.addr))
        .header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", o.conn_token),
        )
        .header(hyper::header::ACCEPT, "text/event-stream")
        .body(Empty::new())?)
}

fn admitted(res: hyper::Response<Incoming>) -> Result<hyper::Response<Incoming>> {
    if res.status() != hyper::StatusCode::OK {
        bail!("GET /v1/events answered {}", res.status());
    }
    Ok(res)
}

async fn connect(addr: &str) -> Result<TokioIo<TcpStream>> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    Ok(TokioIo::new(tcp))
}

/// Opens the subscribers; what is returned keeps them open (the answers, unread: idle).
async fn open(o: &Args) -> Result<Vec<hyper::Response<Incoming>>> {
    let mut open = Vec::with_capacity(o.subscribers);
    if o.http2_connections == 0 {
        for _ in 0..o.subscribers {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(connect(&o.addr).await?)
                .await
                .context("HTTP/1.1 handshake")?;
            tokio::spawn(conn);
            open.push(admitted(sender.send_request(request(o)?).await?)?);
        }
        return Ok(open);
    }
    for c in 0..o.http2_connections {
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), connect(&o.addr).await?)
                .await
                .context("HTTP/2 handshake")?;
        tokio::spawn(conn);
        let here = o.subscribers / o.http2_connections
            + usize::from(c < o.subscribers % o.http2_connections);
        let mut pending = Vec::with_capacity(here);
        for _ in 0..here {
            let mut sender = sender.clone();
            let req = request(o)?;
            pending.push(tokio::spawn(async move { sender.send_request(req).await }));
        }
        for p in pending {
            open.push(admitted(p.await??)?);
        }
    }
    Ok(open)
}

pub(crate) async fn feed_memory(o: &Args) -> Result<FeedMemory> {
    let before = rss_mib(Some(o.server_pid));
    let started = Instant::now();
    let open = open(o).await?;
    let connect_s = started.elapsed().as_secs_f64();
    // Idle: heartbeats only.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with = rss_mib(Some(o.server_pid));
    eprintln!(
        "muster-bench: {} subscribers connected in {connect_s:.1}s; server RSS {before:?} → {with:?} MiB",
        open.len()
    );
    let per = match (before, with) {
        (Some(b), Some(w)) => {
            Some(((w - b) * 1024.0 / o.subscribers.max(1) as f64 * 10.0).round() / 10.0)
        }
        _ => None,
    };
    drop(open);
    Ok(FeedMemory {
        protocol: if o.http2_connections == 0 {
            "HTTP/1.1"
        } else {
            "HTTP/2"
        }
        .to_owned(),
        subscribers: o.subscribers,
        connections: if o.http2_connections == 0 {
            o.subscribers
        } else {
            o.http2_connections
        },
        connect_s: (connect_s * 100.0).round() / 100.0,
        server_rss_mib_before: before,
        server_rss_mib_with_subscribers: with,
        kib_per_subscriber: per,
    })
}
