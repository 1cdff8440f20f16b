//! Operations: liveness, readiness, the Prometheus scrape and the answers to unknown routes.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use muster_app::dependency::DependencyState;
use muster_app::ports::NotReady;
use muster_domain::Kind;
use serde_json::{Value, json};

use super::Json;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::{self, Snapshot};
use crate::state::AppState;

pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method not allowed on this path",
    )
}

pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness, checked at most once a second however often it is asked
/// ([`crate::refreshed`]); a change is logged with its reason, which the answer carries only for
/// a configuration fault (a grant the runtime role lacks), never an internal state.
async fn ready(s: &AppState) -> Result<(), NotReady> {
    s.http_metrics
        .db
        .ready
        .get(|| async {
            let now = s.readiness.check().await;
            let was = s
                .http_metrics
                .db
                .was_ready
                .swap(now.is_ok(), std::sync::atomic::Ordering::Relaxed);
            match (&now, was) {
                (Err(reason), true) => tracing::warn!(%reason, "not ready"),
                (Ok(()), false) => tracing::info!("ready"),
                _ => {}
            }
            now
        })
        .await
}

/// Whether this replica can serve: started (it answers), not draining, schema current. A
/// Logbook outage does not fail it (the `/v1` calls answer 503 `E_UNAVAILABLE` instead).
pub(crate) async fn readyz(State(s): State<AppState>) -> Response {
    if s.muster.signal().is_shut_down() {
        return ApiError::unavailable_because("draining").into_response();
    }
    match ready(&s).await {
        Ok(()) => {
            let mut body = json!({"status": "ready"});
            if let Some(api) = &s.api_server {
                body["api_server"] = json!(match api.state() {
                    DependencyState::Unchecked => "unchecked",
                    DependencyState::Reachable => "reachable",
                    DependencyState::Unreachable(_) => "unreachable",
                });
            }
            Json(body).into_response()
        }
        Err(NotReady::Configuration(fault)) => ApiError::unavailable_because(fault).into_response(),
        Err(NotReady::Internal(_)) => ApiError::unavailable_because("not ready").into_response(),
    }
}

/// The oldest queued items' and leases' ages now, from a read at most 5 s old.
async fn oldest(s: &AppState) -> crate::metrics::OldestAges {
    let (at, ages) = s
        .http_metrics
        .db
        .oldest
        .get(|| async {
            let ages = match s.muster.oldest_ages().await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: oldest queued item and lease unavailable");
                    crate::metrics::OldestAges::default()
                }
            };
            (std::time::Instant::now(), ages)
        })
        .await;
    let since = at.elapsed().as_secs_f64();
    crate::metrics::OldestAges {
        queued: ages
            .queued
            .into_iter()
            .map(|(k, p, age)| (k, p, age + since))
            .collect(),
        leases: ages
            .leases
            .into_iter()
            .map(|(k, age)| (k, age + since))
            .collect(),
        max_run: ages.max_run,
    }
}

/// `GET /metrics`: the figures of the use cases, the feed, the intake, the pool and the body
/// budget, read now, with the transport's own counters.
pub(crate) async fn metrics(State(s): State<AppState>) -> Response {
    let stats = s.muster.stats();
    let per_kind = |c: &muster_app::stats::PerKind| {
        Kind::ALL
            .iter()
            .map(|k| (*k, c.get(*k)))
            .collect::<Vec<_>>()
    };
    let oldest = oldest(&s).await;
    let snapshot = Snapshot {
        counters: vec![
            (
                "muster_items_enqueued",
                "Items enqueued (including next steps)",
                per_kind(&stats.enqueued),
            ),
            (
                "muster_leases_granted",
                "Leases handed out",
                per_kind(&stats.leased),
            ),
            (
                "muster_completions",
                "Items completed",
                per_kind(&stats.completed),
            ),
            (
                "muster_failures_reported",
                "Failures reported by workers",
                per_kind(&stats.failed),
            ),
            (
                "muster_items_failed",
                "Items that ended in failed",
                per_kind(&stats.failed_final),
            ),
            (
                "muster_items_parked",
                "needs_subtool reports",
                per_kind(&stats.parked),
            ),
            (
                "muster_items_replayed",
                "Parked items replayed",
                per_kind(&stats.replayed),
            ),
            (
                "muster_late_results",
                "Completions under a superseded lease (recorded, not applied)",
                per_kind(&stats.late_results),
            ),
            (
                "muster_leases_timed_out",
                "Leases that passed their maximum run time while their worker kept heartbeating",
                per_kind(&stats.timed_out),
            ),
            (
                "muster_lease_groups",
                "Group commit: transactions that wrote grouped single lease requests",
                per_kind(&stats.lease_groups),
            ),
            (
                "muster_lease_group_requests",
                "Group commit: single lease requests written in those transactions",
                per_kind(&stats.lease_group_requests),
            ),
            (
                "muster_completion_groups",
                "Group commit: transactions that wrote grouped single completions",
                per_kind(&stats.completion_groups),
            ),
            (
                "muster_completion_group_requests",
                "Group commit: single completions written in those transactions",
                per_kind(&stats.completion_group_requests),
            ),
            (
                "muster_completion_splits",
                "Transactions of several completions that failed (Logbook reachable) and were redone one completion per transaction",
                per_kind(&stats.completion_splits),
            ),
        ],
        depths: s.feed.queues().await.map(|q| q.depths).unwrap_or_default(),
        subscribers: s.feed.subscribers() as u64,
        pool: s.logbook_metrics.pool_status(),
        feed_gap_wait: s.feed.gap_wait().as_secs_f64(),
        intake: {
            let i = s.intake.stats();
            let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
            vec![
                ("accepted", n(&i.accepted)),
                ("honeypot", n(&i.honeypot)),
                ("pow", n(&i.pow)),
                ("target", n(&i.target)),
                ("rate_limited", n(&i.rate_limited)),
                ("spent_challenge", n(&i.spent)),
            ]
        },
        oldest,
        body_budget_used: s.body_budget.used_bytes(),
        ready: ready(&s).await.is_ok(),
        api_server_reachable: s
            .api_server
            .as_ref()
            .map(|api| api.state() == DependencyState::Reachable),
        tokenreviews: s.tokenreviews.get(),
        review_figures: s.auth.figures(),
        retention: s.retention.figures(),
    };
    metrics::exposition(&s.http_metrics, &s.body_budget.refused, snapshot)
}
