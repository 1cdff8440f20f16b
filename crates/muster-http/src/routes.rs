//! The router: the whole HTTP surface, which handler answers which route, behind which layers.
//! (`bins/muster/tests/api/openapi.rs` reads the route table from this file.)

use axum::Router;
use axum::routing::{get, post, put};

use crate::handlers::{edits, feed, fleet, items, kinds, leases, ops};
use crate::state::AppState;

/// The whole HTTP surface of Muster.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/items", post(items::enqueue).get(items::list))
        .route("/v1/items/retry", post(items::retry_many))
        .route("/v1/items/cancel", post(items::cancel_many))
        .route("/v1/items/{id}", get(items::item))
        .route("/v1/items/{id}/retry", post(items::retry))
        .route("/v1/items/{id}/cancel", post(items::cancel))
        .route("/v1/leases", post(leases::lease))
        .route("/v1/leases/{id}/heartbeat", post(leases::heartbeat))
        .route("/v1/leases/{id}/complete", post(leases::complete))
        .route("/v1/leases/{id}/fail", post(leases::fail))
        .route("/v1/leases/{id}/needs_subtool", post(leases::needs_subtool))
        .route("/v1/completions", post(leases::completions))
        .route("/v1/kinds/{kind}/paused", put(kinds::set_paused))
        .route("/v1/workers/{kind}/digest", put(fleet::report_digest))
        .route("/v1/health", post(fleet::report_health).get(fleet::health))
        // Only the routes above count their bodies against the budget (route_layer wraps
        // the routes added so far): the public edit routes below cut theirs at 4 KiB.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::extract::hold,
        ))
        .route("/v1/queues", get(feed::queues))
        .route("/v1/edits/challenge", post(edits::challenge))
        .route("/v1/edits", post(edits::submit).get(edits::list))
        .route("/v1/edits/{id}/decision", post(edits::decide))
        .route("/v1/events", get(feed::events))
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .route_layer(axum::middleware::from_fn_with_state(
            state.http_metrics.clone(),
            crate::metrics::track,
        ))
        .with_state(state)
}
