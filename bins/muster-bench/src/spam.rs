//! Scenario `spam`: edit-intake spam shedding, honeypot and proof-of-work refusals/s against
//! accepted submissions/s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::http::{Http, percentiles, ratio};
use crate::results::{Flood, Spam};

/// A documentation-range address per index, so each accepted submission has its own daily cap.
fn client_ip(i: usize) -> String {
    format!("198.51.{}.{}", (i / 250) % 250, i % 250 + 1)
}

async fn challenge(http: &Http, token: &str) -> Result<(String, u8)> {
    let body = http
        .post_expecting("challenge", 200, "/v1/edits/challenge", token, &json!({}))
        .await?;
    let c = body["challenge"]
        .as_str()
        .context("challenge missing")?
        .to_owned();
    let d = body["difficulty"].as_u64().context("difficulty missing")?;
    Ok((c, u8::try_from(d)?))
}

/// `clients` tasks send `make(i)` bodies until `length` is over; counts answers by status.
async fn flood(
    http: &Http,
    token: &str,
    clients: usize,
    length: Duration,
    bodies: Arc<Vec<Value>>,
    cycle_bodies: bool,
) -> Result<Flood> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, token, bodies, next) =
                (http.clone(), token.to_owned(), bodies.clone(), next.clone());
            tokio::spawn(async move {
                let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if cycle_bodies {
                        if Instant::now() >= deadline {
                            break;
                        }
                    } else if i >= bodies.len() {
                        break;
                    }
                    let body = &bodies[i % bodies.len()];
                    let ip = client_ip(i);
                    let t = Instant::now();
                    let (status, _) = http.post("/v1/edits", &token, body, Some(&ip)).await?;
                    latencies.push(t.elapsed());
                    *statuses.entry(status).or_default() += 1;
                }
                anyhow::Ok((statuses, latencies))
            })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<String, u64>::new();
    let mut latencies = Vec::new();
    for task in tasks {
        let (s, l) = task.await??;
        for (k, v) in s {
            *statuses.entry(k.to_string()).or_default() += v;
        }
        latencies.extend(l);
    }
    let elapsed = start.elapsed();
    let n = latencies.len();
    Ok(Flood {
        latency: percentiles(latencies),
        requests: n as u64,
        requests_per_s: Some(((n as f64 / elapsed.as_secs_f64()) * 10.0).round() / 10.0),
        seconds: (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        solve_seconds_total: None,
        solver_threads: None,
        statuses,
    })
}

/// `muster-bench spam`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Base URL of a running `muster serve`.
    #[arg(long)]
    url: String,
    #[arg(long, env = "MUSTER_BENCH_CONN_TOKEN", hide_env_values = true)]
    conn_token: String,
    /// A target present in the server's ownership map.
    #[arg(long, default_value = "docs/intro")]
    edit_target: String,
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Length of each refusal run.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Challenges solved up front for the accepted-submission run (0 skips it).
    #[arg(long, default_value_t = 256)]
    solved: usize,
}

pub(crate) async fn spam(args: &Args) -> Result<Spam> {
    let (url, token, target) = (&args.url, args.conn_token.as_str(), &args.edit_target);
    let (clients, length, solved) = (args.clients, Duration::from_secs(args.seconds), args.solved);
    let http = Http::new(url);
    let (real, difficulty) = challenge(&http, token).await?;

    // Every client sends the one body again and again.
    let repeat = |body: Value| flood(&http, token, clients, length, Arc::new(vec![body]), true);

    // Honeypot: a filled-in `website` field with a nonce that does not solve the challenge.
    // The honeypot is judged after the proof of work (docs/edit-intake.md), so this is
    // refused 400 `E_POW` at the proof-of-work layer, like the next flood.
    let honeypot = repeat(json!({
        "target": target, "body": "buy now", "website": "http://spam.example",
        "pow": {"challenge": real, "nonce": "0"},
    }))
    .await?;

    // Proof of work: a real challenge with a nonce that does not solve it.
    let garbage = (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            let d = muster_antispam::pow::work_digest(&real, n);
            muster_antispam::pow::leading_zero_bits(&d) < u32::from(difficulty)
        })
        .unwrap_or_else(|| "0".into());
    let pow = repeat(json!({
        "target": target, "body": "buy now", "website": "",
        "pow": {"challenge": real, "nonce": garbage},
    }))
    .await?;

    // Accepted: challenges solved up front (not timed), each from its own client IP.
    let accepted = if solved == 0 {
        None
    } else {
        let mut tokens = Vec::with_capacity(solved);
        for _ in 0..solved {
            tokens.push(challenge(&http, token).await?.0);
        }
        let t = Instant::now();
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let chunks: Vec<Vec<String>> = tokens
            .chunks(solved.div_ceil(threads))
            .map(<[String]>::to_vec)
            .collect();
        let solving: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                tokio::task::spawn_blocking(move || {
                    chunk
                        .into_iter()
                        .map(|c| {
                            let n = muster_antispam::pow::solve(&c, difficulty, u64::MAX);
                            (c, n)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut bodies = Vec::new();
        for s in solving {
            for (c, n) in s.await? {
                let n = n.context("no nonce found")?;
                bodies.push(json!({
                    "target": target, "body": "<p>Fix the typo in the second paragraph.</p>",
                    "website": "", "pow": {"challenge": c, "nonce": n},
                }));
            }
        }
        let solve_s = t.elapsed().as_secs_f64();
        let mut r = flood(&http, token, clients, length, Arc::new(bodies), false).await?;
        r.solve_seconds_total = Some((solve_s * 100.0).round() / 100.0);
        r.solver_threads = Some(threads);
        Some(r)
    };
    let rate = |flood: &Flood| flood.requests_per_s.unwrap_or(0.0);
    let acc_rate = accepted.as_ref().map_or(0.0, rate);
    Ok(Spam {
        honeypot_over_accepted: ratio(rate(&honeypot), acc_rate),
        pow_over_accepted: ratio(rate(&pow), acc_rate),
        accepted,
        clients: clients as u64,
        difficulty,
        honeypot,
        pow_refused: pow,
        scenario: "spam".to_owned(),
    })
}
