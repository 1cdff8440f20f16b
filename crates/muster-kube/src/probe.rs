//! Does the API server answer? Asked at start and every `interval` after, so that a first
//! install whose NetworkPolicy still blocks the API server says so at once, in one log line, in
//! `/readyz`'s body and in a metric — without taking the replica out of the Service (a call that
//! needs the API server answers 503 by itself).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use muster_app::dependency::{Dependency, DependencyState};

use crate::KubeError;
use crate::client::ApiServer;
use crate::nodes::NodeWatchSettings;

/// What the probe asks: the API server's version, which every authenticated caller may read.
pub const VERSION_PATH: &str = "/version";

/// Probes the API server the node watch and TokenReview use.
#[derive(Debug)]
pub struct ApiServerProbe {
    api: ApiServer,
    timeout: Duration,
    interval: Duration,
}

impl ApiServerProbe {
    /// The API server, CA bundle and token of `settings`; asks every `interval`.
    pub fn new(settings: &NodeWatchSettings, interval: Duration) -> Result<Self, KubeError> {
        Ok(ApiServerProbe {
            api: settings.api_server()?,
            timeout: Duration::from_secs(2),
            interval,
        })
    }

    /// One question: `Ok` when the API server answered 2xx within the timeout.
    pub async fn ask(&self) -> Result<(), String> {
        let request = self
            .api
            .request(hyper::Method::GET, VERSION_PATH, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|_| "building the request failed".to_owned())?;
        let answer = tokio::time::timeout(self.timeout, async {
            let (response, _driver) = self.api.send(request).await.map_err(|e| e.to_string())?;
            match response.status() {
                s if s.is_success() => Ok(()),
                s => Err(format!("the API server answered {s}")),
            }
        })
        .await;
        answer.unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))
    }

    /// Asks now and every `interval`, recording each outcome in `status`; logs one error when
    /// the API server stops answering (naming the NetworkPolicy rule to check) and one line
    /// when it answers again.
    pub async fn run(self, status: Arc<Dependency>) {
        loop {
            let outcome = self.ask().await;
            let failed = outcome.clone().err();
            let before = status.record(outcome);
            match (before, failed) {
                (DependencyState::Unreachable(_), None) => {
                    tracing::info!(api_server = %self.api.endpoint.authority, "the Kubernetes API server answers again");
                }
                (DependencyState::Unchecked | DependencyState::Reachable, Some(reason)) => {
                    tracing::error!(
                        api_server = %self.api.endpoint.authority,
                        error = %reason,
                        "the Kubernetes API server does not answer: every /v1 call is refused \
                         with 503 (TokenReview) and health messages are withheld (node names \
                         unknown). Check the NetworkPolicy's egress rule to the API server \
                         (deploy/k8s/networkpolicy.yaml: replace the placeholder 192.0.2.10 with \
                         the API server's addresses and port)"
                    );
                }
                _ => {}
            }
            tokio::time::sleep(self.interval).await;
        }
    }
}
