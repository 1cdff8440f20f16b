//! Scenario `pickup`: long-poll pickup latency, HTTP vs in-process.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use muster_app::views::{CompleteRequest, EnqueueRequest};
use muster_domain::{Kind, LeaseId, Principal, Priority};
use serde_json::json;

use crate::Target;
use crate::cycles::in_process;
use crate::http::{Http, percentiles, ratio};
use crate::results::Pickup;

const SEXTANT: Principal = Principal::Worker(Kind::Sextant);

pub(crate) async fn pickup(
    target: &Target,
    operator_token: &str,
    worker_token: &str,
    repeats: usize,
) -> Result<Pickup> {
    let muster = in_process(&target.database_url)?;
    let http = Http::new(&target.url);
    let settle = Duration::from_millis(50);
    let enqueue_body =
        json!({"kind": "sextant", "priority": "normal", "payload": {"bench": "pickup"}});

    // In-process baseline: the same long poll and enqueue, without HTTP.
    let mut local = Vec::new();
    let mut local_missed = 0u64;
    for _ in 0..repeats {
        let m = muster.clone();
        let waiter = tokio::spawn(async move {
            let granted = m.lease(SEXTANT, "bench-pickup", 5_000).await;
            (granted, Instant::now())
        });
        tokio::time::sleep(settle).await;
        let t0 = Instant::now();
        muster
            .enqueue(
                Principal::Operator,
                EnqueueRequest {
                    kind: Kind::Sextant,
                    priority: Priority::Normal,
                    payload: json!({"bench": "pickup"}),
                    idempotency_key: None,
                },
            )
            .await?;
        let (granted, t1) = waiter.await?;
        match granted? {
            Some(g) => {
                local.push(t1.saturating_duration_since(t0));
                muster
                    .complete(
                        SEXTANT,
                        LeaseId(g.lease_id.parse()?),
                        CompleteRequest {
                            result: json!({}),
                            next: vec![],
                        },
                    )
                    .await?;
            }
            None => local_missed += 1,
        }
    }

    let mut remote = Vec::new();
    let mut remote_missed = 0u64;
    for _ in 0..repeats {
        let h = http.clone();
        let token = worker_token.to_owned();
        let waiter = tokio::spawn(async move {
            let r = h
                .post(
                    "/v1/leases",
                    &token,
                    &json!({"worker_id": "bench-pickup", "wait_ms": 5000}),
                    None,
                )
                .await;
            (r, Instant::now())
        });
        tokio::time::sleep(settle).await;
        let t0 = Instant::now();
        http.enqueue(operator_token, &enqueue_body).await?;
        let (r, t1) = waiter.await?;
        let (status, body) = r?;
        if status == 200 {
            remote.push(t1.saturating_duration_since(t0));
            let id = body["lease_id"].as_str().context("lease_id missing")?;
            http.post(
                &format!("/v1/leases/{id}/complete"),
                worker_token,
                &json!({"result": {}}),
                None,
            )
            .await?;
        } else {
            remote_missed += 1;
        }
    }
    let local_p = percentiles(local);
    let remote_p = percentiles(remote);
    let r50 = ratio(
        remote_p.p50_ms.unwrap_or(0.0),
        local_p.p50_ms.unwrap_or(0.0),
    );
    let r99 = ratio(
        remote_p.p99_ms.unwrap_or(0.0),
        local_p.p99_ms.unwrap_or(0.0),
    );
    Ok(Pickup {
        http: remote_p,
        http_missed: remote_missed,
        in_process: local_p,
        in_process_missed: local_missed,
        p50_ratio: r50,
        p99_ratio: r99,
        repeats: Some(repeats as u64),
        scenario: "pickup".to_owned(),
        settle_ms: settle.as_millis() as u64,
    })
}
