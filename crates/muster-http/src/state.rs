//! What every handler can reach: the use cases, the feed, the intake and the transport's own
//! parts.

use std::sync::Arc;

use muster_app::Muster;
use muster_app::auth::Authenticator;
use muster_app::ports::Readiness;

use crate::budget::BodyBudget;
use crate::metrics::HttpMetrics;

/// What every handler can reach. Cloned for every request (each `State` extractor and
/// middleware takes a copy), so it is one shared allocation: a clone is one reference count.
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct AppParts {
    pub muster: Muster,
    pub intake: muster_app::intake::Intake,
    pub feed: muster_app::feed::Feed,
    /// Logbook, for the figures `/metrics` reads at scrape time.
    pub logbook_metrics: Arc<dyn muster_app::ports::PoolGauge>,
    pub http_metrics: HttpMetrics,
    pub auth: Arc<dyn Authenticator>,
    pub readiness: Arc<dyn Readiness>,
    /// TokenReviews sent and those that got no answer (`muster_tokenreview_reviews_total`,
    /// `muster_tokenreview_failures_total`); both stay 0 with a token file.
    pub tokenreviews: Arc<muster_app::dependency::CallCounts>,
    /// The Kubernetes API server, where one is used (`--auth tokenreview`): reported in
    /// `/readyz`'s body and `muster_api_server_reachable`, never by failing readiness.
    pub api_server: Option<Arc<muster_app::dependency::Dependency>>,
    /// Request bodies in flight on the cluster-private routes ([`crate::budget`]).
    pub body_budget: BodyBudget,
    /// Retention's housekeeping, for its figures on `/metrics`.
    pub retention: muster_app::service::Retention,
}
