//! Scenario `hostile`: what clients inside the cluster that mean harm cost the server and the
//! workers. Three phases of `--workers` single-call workers draining a filled `trawl` queue for
//! `--seconds` each: quiet (the baseline); a flood of `POST /v1/leases` with random bearer
//! tokens; the hostile clients of the test suite (bins/muster/tests/api/hostile.rs) — HTTP/2
//! connections whose streams open with a zero window, each resuming the feed 9,999 events back
//! many times; HTTP/2 uploads of 1 MiB to `POST /v1/completions` without a length; request
//! heads dribbled a byte at a time; one peer opening idle connections past its limit.
//! Reported: the workers' items/s and lease p99 in each phase, the server's peak RSS
//! (`VmHWM`) after the hostile phase against its RSS idle after start, and what the hostile
//! clients were answered.
//!
//! Each kind of hostile client connects from a loopback address of its own (127.0.0.2–6), so
//! that the server's per-peer limit counts them apart from the workers (127.0.0.1).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use http_body_util::Empty;
use hyper::body::{Bytes, Frame};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::edge::{addr, count_open};
use crate::feed_load::{Workers, drain};
use crate::http::{Http, ratio};
use crate::procinfo::memory;
use crate::results::{Hostile, HostilePhase};

/// How far back each zero-window stream resumes (the feed's resume window is 10,000).
const RESUME_BACK: i64 = 9_999;

/// One upload: 64 DATA frames of 16 KiB (1 MiB) of spaces, with no length announced.
const UPLOAD_FRAMES: usize = 64;
static CHUNK: [u8; 16 * 1024] = [b' '; 16 * 1024];

/// `muster-bench hostile`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    server: crate::Subscribed,
    /// The server's database: the feed's newest sequence number is read from it.
    #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The server's pid (same machine): its memory is read from /proc.
    #[arg(long)]
    server_pid: u32,
    #[command(flatten)]
    drain: Workers,
    /// HTTP/2 connections with a zero initial window, each opening `--feed-streams` resumes.
    #[arg(long, default_value_t = 10)]
    feed_connections: usize,
    #[arg(long, default_value_t = 20)]
    feed_streams: usize,
    /// HTTP/2 connections each uploading 1 MiB without a length.
    #[arg(long, default_value_t = 60)]
    uploads: usize,
    /// Connections dribbling a request head a byte every 500 ms.
    #[arg(long, default_value_t = 200)]
    slow_heads: usize,
    /// Idle connections from one peer (the server's default limit is 64 a peer).
    #[arg(long, default_value_t = 80)]
    hog: usize,
    /// Random-token `POST /v1/leases` a second during the flood.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..))]
    flood_rate: u32,
    #[arg(long, default_value_t = 8)]
    flood_connections: usize,
}

/// What the hostile clients were answered, by kind and answer (`feed 200`, `upload refused`).
#[derive(Clone, Default)]
struct Answers(Arc<Mutex<BTreeMap<String, u64>>>);

impl Answers {
    fn count(&self, kind: &str, answer: impl std::fmt::Display) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(format!("{kind} {answer}")).or_default() += 1;
    }

    fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A connection to `server` from the loopback address `127.0.0.<host>`.
async fn connect_from(host: u8, server: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)),
        0,
    ))?;
    socket.connect(server).await
}

/// 1 MiB of spaces in 16 KiB frames, its length unknown to the receiver.
struct Spaces {
    frames_left: usize,
}

impl hyper::body::Body for Spaces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.frames_left == 0 {
            return Poll::Ready(None);
        }
        self.frames_left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&CHUNK)))))
    }
}

/// One HTTP/2 connection from 127.0.0.2 whose streams open with a zero window: `streams`
/// resumes after `last`, their answers kept unread until `stop`.
async fn zero_window_resumes(
    server: SocketAddr,
    token: String,
    last: i64,
    streams: usize,
    answers: Answers,
    mut stop: watch::Receiver<bool>,
) {
    let opened = async {
        let tcp = connect_from(2, server).await?;
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(0)
            .handshake(TokioIo::new(tcp))
            .await?;
        tokio::spawn(conn);
        anyhow::Ok(sender)
    }
    .await;
    let Ok(mut sender) = opened else {
        answers.count("feed", "connection refused");
        return;
    };
    let mut held = Vec::with_capacity(streams);
    for _ in 0..streams {
        let req = hyper::Request::get(format!("http://{server}/v1/events"))
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .header("last-event-id", last.to_string())
            .body(Empty::<Bytes>::new());
        let answer = match req {
            Ok(req) if sender.ready().await.is_ok() => sender.send_request(req).await,
            _ => break,
        };
        match answer {
            Ok(res) => {
                answers.count("feed", res.status().as_u16());
                held.push(res);
            }
            Err(_) => answers.count("feed", "error"),
        }
    }
    let _ = stop.changed().await;
}

/// One HTTP/2 connection from 127.0.0.3 uploading 1 MiB to `POST /v1/completions` without a
/// length, until answered or `stop`.
async fn upload(
    server: SocketAddr,
    token: String,
    answers: Answers,
    mut stop: watch::Receiver<bool>,
) {
    let sent = async {
        let tcp = connect_from(3, server).await?;
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        let req = hyper::Request::post(format!("http://{server}/v1/completions"))
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Spaces {
                frames_left: UPLOAD_FRAMES,
            })?;
        sender.ready().await?;
        anyhow::Ok(sender.send_request(req).await?.status().as_u16())
    };
    tokio::select! {
        answer = sent => match answer {
            Ok(status) => answers.count("upload", status),
            Err(_) => answers.count("upload", "refused or reset"),
        },
        _ = stop.changed() => answers.count("upload", "unanswered"),
    }
}

/// One connection from 127.0.0.4 sending a request head a byte every 500 ms, never ending it,
/// until the server closes it or `stop`.
async fn slow_head(server: SocketAddr, answers: Answers, mut stop: watch::Receiver<bool>) {
    let Ok(mut tcp) = connect_from(4, server).await else {
        answers.count("slow head", "refused");
        return;
    };
    let head = b"POST /v1/leases HTTP/1.1\r\nHost: muster\r\nX-Slow: ";
    for b in head.iter().chain(std::iter::repeat(&b'a')) {
        if tcp.write_all(&[*b]).await.is_err() {
            answers.count("slow head", "closed by the server");
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => break,
        }
    }
    answers.count("slow head", "open at the end");
}

/// The hostile clients, running until [`Clients::stop`].
struct Clients {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    /// One peer's idle connections (127.0.0.5).
    hog: Vec<TcpStream>,
    answers: Answers,
}

async fn start_clients(o: &Args, server: SocketAddr, newest: i64) -> Clients {
    let (stop, stopped) = watch::channel(false);
    let answers = Answers::default();
    let mut tasks = JoinSet::new();
    for _ in 0..o.feed_connections {
        tasks.spawn(zero_window_resumes(
            server,
            o.server.conn_token.clone(),
            (newest - RESUME_BACK).max(0),
            o.feed_streams,
            answers.clone(),
            stopped.clone(),
        ));
    }
    for _ in 0..o.uploads {
        let token = o.server.trawl.worker_token.clone();
        tasks.spawn(upload(server, token, answers.clone(), stopped.clone()));
    }
    for _ in 0..o.slow_heads {
        tasks.spawn(slow_head(server, answers.clone(), stopped.clone()));
    }
    let mut hog = Vec::with_capacity(o.hog);
    for _ in 0..o.hog {
        match connect_from(5, server).await {
            Ok(c) => hog.push(c),
            Err(_) => answers.count("hog", "connect failed"),
        }
    }
    Clients {
        stop,
        tasks,
        hog,
        answers,
    }
}

impl Clients {
    /// Stops every client; what they were answered.
    async fn stop(mut self) -> BTreeMap<String, u64> {
        let open = count_open(&self.hog);
        for _ in 0..open {
            self.answers.count("hog", "open at the end");
        }
        for _ in open..self.hog.len() {
            self.answers.count("hog", "closed by the server");
        }
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        self.answers.take()
    }
}

/// `--flood-connections` tasks sending `POST /v1/leases` with a fresh random token each time,
/// `--flood-rate` a second together, from 127.0.0.6, until `stop`.
fn start_flood(o: &Args, answers: &Answers, stopped: &watch::Receiver<bool>) -> JoinSet<u64> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6))));
    let http = Http {
        client: Client::builder(TokioExecutor::new()).build(connector),
        base: o.server.trawl.url.trim_end_matches('/').to_owned(),
    };
    let every = Duration::from_secs_f64(o.flood_connections as f64 / f64::from(o.flood_rate));
    let mut tasks = JoinSet::new();
    for _ in 0..o.flood_connections {
        let (http, answers, mut stop) = (http.clone(), answers.clone(), stopped.clone());
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let body = json!({"worker_id": "flood", "wait_ms": 0});
            let mut sent = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.changed() => return sent,
                }
                let token = uuid::Uuid::now_v7().simple().to_string();
                match http.post("/v1/leases", &token, &body, None).await {
                    Ok((status, _)) => answers.count("flood", status),
                    Err(_) => answers.count("flood", "error"),
                }
                sent += 1;
            }
        });
    }
    tasks
}

/// The workers' drain, and the server's memory after it.
async fn measure(o: &Args, http: &Http, name: &str) -> HostilePhase {
    let phase = HostilePhase {
        drain: drain(http, &o.server.trawl.worker_token, o.drain).await,
        server: memory(o.server_pid).ok(),
        ..HostilePhase::default()
    };
    eprintln!(
        "muster-bench: hostile, {name}: {:?} items/s, lease p99 {:?} ms, server {:?}",
        phase.drain.items_per_s, phase.drain.lease.p99_ms, phase.server
    );
    phase
}

/// The feed's newest sequence number.
async fn newest_seq(database_url: &str) -> Result<i64> {
    let db = crate::backlog::connect(database_url).await?;
    let row = db
        .query_one("SELECT coalesce(max(seq), 0) FROM core.ledger", &[])
        .await
        .context("newest ledger seq")?;
    Ok(row.get(0))
}

pub(crate) async fn hostile(o: &Args) -> Result<Hostile> {
    let idle = memory(o.server_pid)?;
    let server: SocketAddr = addr(&o.server.trawl.url)
        .parse()
        .context("--url is http://<ip>:<port>")?;
    let http = Http::new(&o.server.trawl.url);

    let quiet = measure(o, &http, "quiet").await;

    let answers = Answers::default();
    let (stop_flood, flood_stopped) = watch::channel(false);
    let mut flood_tasks = start_flood(o, &answers, &flood_stopped);
    let flood_started = Instant::now();
    let mut flood = measure(o, &http, "token flood").await;
    let _ = stop_flood.send(true);
    let mut sent = 0;
    while let Some(n) = flood_tasks.join_next().await {
        sent += n.unwrap_or(0);
    }
    let flood_requests_per_s = sent as f64 / flood_started.elapsed().as_secs_f64();
    flood.answers = answers.take();

    // Read now: the phases before have written to the ledger.
    let newest = newest_seq(&o.database_url).await?;
    let clients = start_clients(o, server, newest).await;
    // The uploads' windows and the resumes' first pages are taken by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut hostile = measure(o, &http, "hostile clients").await;
    hostile.answers = clients.stop().await;

    let p99 = |p: &HostilePhase| p.drain.lease.p99_ms;
    Ok(Hostile {
        feed_connections: o.feed_connections as u64,
        feed_streams: o.feed_streams as u64,
        flood_connections: o.flood_connections as u64,
        flood_lease_p99_over_quiet: p99(&flood).zip(p99(&quiet)).and_then(|(a, b)| ratio(a, b)),
        flood_rate: u64::from(o.flood_rate),
        flood_requests_per_s: Some((flood_requests_per_s * 10.0).round() / 10.0),
        hog: o.hog as u64,
        hostile_lease_p99_over_quiet: p99(&hostile)
            .zip(p99(&quiet))
            .and_then(|(a, b)| ratio(a, b)),
        hostile_peak_rss_over_idle: hostile.server.and_then(|m| ratio(m.hwm_mib, idle.rss_mib)),
        idle: Some(idle),
        resume_back: RESUME_BACK as u64,
        scenario: "hostile".to_owned(),
        slow_heads: o.slow_heads as u64,
        uploads: o.uploads as u64,
        workers: o.drain.workers as u64,
        quiet,
        flood,
        clients: hostile,
    })
}
