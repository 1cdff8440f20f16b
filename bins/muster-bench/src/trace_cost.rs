//! Scenario `trace-cost`: what tracing costs the workers. Each phase starts a fresh `muster
//! serve` on the same database, with tracing off or exporting every span (OTLP/HTTP to a sink in
//! this process, `OTEL_TRACES_SAMPLER=always_on`), and drains its `trawl` queue with the
//! single-call workers of the other scenarios; then it waits for the server to export its last
//! spans and reads its CPU (`/proc/<pid>/stat`) and `/metrics`. The rows set the phases with
//! tracing on against the mean of those with it off (off, on, off by default).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;

use crate::feed_load::{Workers, drain, round1, round3};
use crate::http::Http;
use crate::lab::procs::{ServeArgs, free_listen};
use crate::procinfo::{cpu_seconds, ticks_per_second};
use crate::results::{TraceCost, TraceCostRun};

/// `muster-bench trace-cost`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The migrated database the servers use (they connect as its runtime role), its `trawl`
    /// queue filled (`backlog-fill`).
    #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[arg(long, env = "MUSTER_BENCH_TRAWL_TOKEN", hide_env_values = true)]
    worker_token: String,
    /// Where `tokens.json` and `ownership_map.json` are; the servers' logs go there too.
    #[arg(long)]
    dir: PathBuf,
    /// The `muster` binary (default: the one next to this program).
    #[arg(long)]
    muster: Option<PathBuf>,
    /// Tracing of each phase's fresh server, in this order (`on`: every span exported).
    #[arg(long, value_delimiter = ',', default_value = "off,on,off")]
    phases: Vec<Tracing>,
    #[command(flatten)]
    drain: Workers,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Tracing {
    Off,
    On,
}

/// What the sink received: `POST /v1/traces` requests and their body bytes.
#[derive(Default)]
struct Received {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// A minimal OTLP/HTTP collector on `127.0.0.1:0`: reads each `POST /v1/traces` body, counts
/// it and answers 200 with an empty body (no decoding); anything else gets 404.
async fn sink() -> Result<(SocketAddr, Arc<Received>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let received = Arc::new(Received::default());
    let counts = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counts = counts.clone();
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let counts = counts.clone();
                async move {
                    let traces = req.method() == hyper::Method::POST && req.uri() == "/v1/traces";
                    let body = req.into_body().collect().await?.to_bytes();
                    let mut answer = hyper::Response::new(Full::new(Bytes::new()));
                    if traces {
                        counts.requests.fetch_add(1, Ordering::Relaxed);
                        counts.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                    } else {
                        *answer.status_mut() = hyper::StatusCode::NOT_FOUND;
                    }
                    Ok::<_, hyper::Error>(answer)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    Ok((addr, received))
}

/// The value of the unlabelled sample `name` in an exposition text.
fn sample(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        let value = rest.split_whitespace().next()?;
        value.parse::<f64>().ok().map(|v| v as u64)
    })
}

/// The server's span counters once its export queue is empty and nothing more was exported
/// for half a second (up to 30 s): `(exported, dropped, failed)`.
async fn flushed(http: &Http) -> Result<(u64, u64, u64)> {
    let until = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        let text = http.metrics().await?;
        let counters = (
            sample(&text, "muster_trace_spans_exported_total").unwrap_or(0),
            sample(&text, "muster_trace_spans_dropped_total").unwrap_or(0),
            sample(&text, "muster_trace_spans_failed_total").unwrap_or(0),
        );
        let queued = sample(&text, "muster_trace_queue_spans").unwrap_or(0);
        if (queued == 0 && last == Some(counters)) || Instant::now() > until {
            return Ok(counters);
        }
        last = Some(counters);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One phase: a fresh server with `tracing`, drained, flushed, stopped.
fn phase(
    o: &Args,
    rt: &tokio::runtime::Runtime,
    (collector, received): (SocketAddr, &Received),
    (n, tracing): (usize, Tracing),
    ticks: f64,
) -> Result<TraceCostRun> {
    let muster = o
        .muster
        .clone()
        .map_or_else(crate::lab::sibling_muster, Ok)?;
    let on = matches!(tracing, Tracing::On);
    let env = if on {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}")),
            ("OTEL_TRACES_SAMPLER", "always_on".to_owned()),
        ]
    } else {
        Vec::new()
    };
    let listen = free_listen()?;
    let serve = ServeArgs {
        env: &env,
        ..ServeArgs::new(&muster, &o.database_url, &listen, &o.dir)
    };
    let which = if on { "on" } else { "off" };
    // Not `start`: its banner would go to stdout, which carries this scenario's JSON.
    let log = o.dir.join(format!("server-trace-cost-{n}-{which}.log"));
    let mut server = serve.spawn(&log)?;
    muster_devdb::wait_healthy(&listen, &mut server, &log)?;
    std::thread::sleep(Duration::from_secs(1));
    let pid = server.pid();
    let http = Http::new(&format!("http://{listen}"));
    let (requests0, bytes0) = (
        received.requests.load(Ordering::Relaxed),
        received.bytes.load(Ordering::Relaxed),
    );
    let cpu0 = cpu_seconds(pid, ticks)?;
    let drain = rt.block_on(drain(&http, &o.worker_token, o.drain));
    let spans = if on {
        Some(rt.block_on(flushed(&http))?)
    } else {
        None
    };
    let cpu = cpu_seconds(pid, ticks)? - cpu0;
    server.stop();
    let items = drain.items;
    let run = TraceCostRun {
        tracing: on,
        drain,
        server_cpu_seconds: Some(round3(cpu)),
        server_cpu_us_per_item: (items > 0).then(|| round1(cpu * 1e6 / items as f64)),
        otlp_requests: received.requests.load(Ordering::Relaxed) - requests0,
        otlp_bytes: received.bytes.load(Ordering::Relaxed) - bytes0,
        spans_exported: spans.map(|s| s.0),
        spans_dropped: spans.map(|s| s.1),
        spans_failed: spans.map(|s| s.2),
    };
    eprintln!(
        "muster-bench: trace-cost tracing {which}: {} items/s, lease p99 {:?} ms, server CPU {cpu:.2} s, {} OTLP bytes, spans exported/dropped/failed {spans:?}",
        run.drain.items_per_s.unwrap_or(0.0),
        run.drain.lease.p99_ms,
        run.otlp_bytes,
    );
    Ok(run)
}

/// `muster-bench trace-cost`: its own runtime (the servers start and stop between drains, on
/// this thread; the sink serves on the runtime's).
pub(crate) fn trace_cost(o: &Args) -> Result<TraceCost> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (collector, received) = rt
        .block_on(sink())
        .context("could not start the OTLP sink")?;
    let ticks = ticks_per_second();
    let mut runs = Vec::new();
    for (n, &tracing) in o.phases.iter().enumerate() {
        runs.push(phase(o, &rt, (collector, &received), (n, tracing), ticks)?);
    }
    rt.shutdown_background();
    Ok(TraceCost {
        clock_ticks_per_s: ticks,
        phase_seconds: o.drain.seconds,
        runs,
        scenario: "trace-cost".to_owned(),
        workers: o.drain.workers as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::sample;

    #[test]
    fn a_sample_is_read_by_its_full_name_and_not_by_a_prefix_or_its_help() {
        let text = "# HELP muster_trace_spans_exported Spans the trace collector accepted\n\
                    # TYPE muster_trace_spans_exported counter\n\
                    muster_trace_spans_exported_total_x 9\n\
                    muster_trace_spans_exported_total 1234\n";
        assert_eq!(
            sample(text, "muster_trace_spans_exported_total"),
            Some(1234)
        );
        assert_eq!(sample(text, "muster_trace_spans_dropped_total"), None);
    }
}
