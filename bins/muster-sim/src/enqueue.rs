//! Enqueues root `trawl` items as the operator, each with its plan, idempotently
//! (`idempotency_key` `sim-root-<i>`): running it again after a crash or an outage adds nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::Method;
use muster_domain::Kind;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::api::Api;
use crate::fleet::backoff;
use crate::plan::{Ending, Plan, Rates, SimPayload};
use crate::stats::Stats;

/// What a range of roots is planned to do when nothing interferes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub roots: u64,
    /// Items of all stages together.
    pub items: u64,
    pub done_roots: u64,
    pub failed_roots: u64,
    /// Roots failing at each stage.
    pub failed_at: BTreeMap<String, u64>,
    pub crashes: u64,
    pub parks: u64,
    pub flaky_failures: u64,
}

/// The plans of roots `first .. first + count`.
pub fn plans(seed: u64, rates: &Rates, first: u64, count: u64) -> Vec<(u64, Plan)> {
    (first..first + count)
        .map(|i| (i, Plan::generate(seed, i, rates)))
        .collect()
}

/// What `plans` add up to.
pub fn planned(plans: &[(u64, Plan)]) -> Planned {
    let mut p = Planned::default();
    for (_, plan) in plans {
        p.roots += 1;
        p.items += plan.items();
        match plan.ending() {
            (_, Ending::Done) => p.done_roots += 1,
            (kind, Ending::Failed) => {
                p.failed_roots += 1;
                *p.failed_at.entry(kind.to_string()).or_default() += 1;
            }
        }
        let (crashes, parks, flaky) = plan.planned_events();
        p.crashes += crashes;
        p.parks += parks;
        p.flaky_failures += flaky;
    }
    p
}

/// Enqueues every root with `concurrency` requests in flight, retrying 503s and connection
/// errors on the next replica until each is acknowledged. Fails on any other answer.
pub async fn enqueue(
    api: &Api,
    stats: &Stats,
    plans: Vec<(u64, Plan)>,
    concurrency: usize,
) -> anyhow::Result<()> {
    let plans = Arc::new(plans);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>> = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (api, stats, plans, next) = (
            api.clone(),
            stats.clone(),
            Arc::clone(&plans),
            Arc::clone(&next),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let at = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some((root, plan)) = plans.get(at).copied() else {
                    return Ok(());
                };
                enqueue_one(&api, &stats, root, plan).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

async fn enqueue_one(api: &Api, stats: &Stats, root: u64, plan: Plan) -> anyhow::Result<()> {
    let body = json!({
        "kind": Kind::Trawl,
        "priority": "normal",
        "payload": SimPayload { root, plan },
        "idempotency_key": format!("sim-root-{root}"),
    });
    let mut attempt = 0u32;
    loop {
        match api.call(Method::POST, "/v1/items", Some(&body)).await {
            Ok(answer) if matches!(answer.status, 200 | 201) => {
                stats.status("enqueue", &answer.status.to_string());
                stats.update(|s| s.enqueued += 1);
                return Ok(());
            }
            Ok(answer) if answer.status == 503 => {
                stats.status("enqueue", "503");
                api.failover();
            }
            Ok(answer) => {
                let status = answer.status.to_string();
                stats.status("enqueue", &status);
                let message = answer.body.to_string();
                stats.flag(
                    "enqueue",
                    &status,
                    answer.code(),
                    &message,
                    answer.status >= 500,
                );
                anyhow::bail!("enqueue of root {root} answered {status}: {message}");
            }
            Err(e) => {
                stats.status("enqueue", e.status());
                api.failover();
            }
        }
        attempt += 1;
        tokio::time::sleep(backoff(attempt)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_totals_add_up_the_chains() {
        let plans = vec![
            (0, Plan::default()),
            (
                1,
                Plan {
                    fail_at: Some(Kind::Assay),
                    flaky_at: Some(Kind::Assay),
                    subtool_at: Some(Kind::Sextant),
                    crash_at: Some(Kind::Bellbuoy),
                },
            ),
            (
                2,
                Plan {
                    flaky_at: Some(Kind::Trawl),
                    crash_at: Some(Kind::Trawl),
                    ..Plan::default()
                },
            ),
        ];
        let p = planned(&plans);
        assert_eq!(p.roots, 3);
        assert_eq!(p.items, 10 + 3 + 10);
        assert_eq!((p.done_roots, p.failed_roots), (2, 1));
        assert_eq!(p.failed_at, BTreeMap::from([("assay".to_owned(), 1)]));
        assert_eq!((p.crashes, p.parks, p.flaky_failures), (1, 1, 1));
    }

    #[test]
    fn a_range_gets_the_same_plans_whole_or_in_pieces() {
        let rates = Rates {
            fail: 0.2,
            flaky: 0.2,
            subtool: 0.2,
            crash: 0.2,
        };
        let whole = plans(5, &rates, 0, 40);
        let mut pieces = plans(5, &rates, 0, 15);
        pieces.extend(plans(5, &rates, 15, 25));
        assert_eq!(whole, pieces);
        assert_eq!(
            whole.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..40).collect::<Vec<_>>()
        );
    }
}
