//! TokenReview: is this bearer token a ServiceAccount's, and whose?

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use muster_app::auth::{AuthError, Authenticator};
use muster_app::dependency::CallCounts;
use muster_domain::Principal;
use serde::Deserialize;

use crate::client::{ApiFailure, ApiServer, api_server_url};
use crate::{DEFAULT_CA_PATH, DEFAULT_TOKEN_PATH, KubeError, ServiceAccountMap, TOKENREVIEW_PATH};

/// Largest TokenReview answer read; a larger one counts as the API server being unavailable.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Everything the authenticator needs; [`TokenReviewSettings::new`] fills in the defaults.
#[derive(Debug, Clone)]
pub struct TokenReviewSettings {
    /// `https://host[:port]`, no path.
    pub api_server: String,
    /// PEM bundle of the CAs that vouch for the API server.
    pub ca_path: PathBuf,
    /// This pod's own token, sent as `Authorization: Bearer`; re-read every `token_refresh`.
    pub token_path: PathBuf,
    pub token_refresh: Duration,
    pub map: ServiceAccountMap,
    /// Bound on one review: connect, TLS, request and answer.
    pub timeout: Duration,
    /// How long a review's answer (positive or negative) is reused.
    pub cache_ttl: Duration,
    /// Most answers kept; the oldest is evicted first.
    pub cache_capacity: usize,
}

impl TokenReviewSettings {
    pub fn new(api_server: impl Into<String>, map: ServiceAccountMap) -> Self {
        TokenReviewSettings {
            api_server: api_server.into(),
            ca_path: DEFAULT_CA_PATH.into(),
            token_path: DEFAULT_TOKEN_PATH.into(),
            token_refresh: Duration::from_secs(60),
            map,
            timeout: Duration::from_secs(2),
            cache_ttl: Duration::from_secs(30),
            cache_capacity: 10_000,
        }
    }

    /// The in-cluster defaults: the API server from `KUBERNETES_SERVICE_HOST` and
    /// `KUBERNETES_SERVICE_PORT` (else `https://kubernetes.default.svc`), the mounted CA bundle
    /// and token.
    pub fn in_cluster(map: ServiceAccountMap) -> Self {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").ok();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").ok();
        Self::new(api_server_url(host.as_deref(), port.as_deref()), map)
    }
}

/// Review answers by token digest, for `ttl`, at most `capacity` of them.
pub(crate) struct Cache {
    pub(crate) ttl: Duration,
    pub(crate) capacity: usize,
    pub(crate) entries: HashMap<[u8; 32], (Instant, Option<Principal>)>,
}

impl Cache {
    pub(crate) fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<Option<Principal>> {
        let (at, principal) = *self.entries.get(key)?;
        if now.duration_since(at) < self.ttl {
            Some(principal)
        } else {
            self.entries.remove(key);
            None
        }
    }

    pub(crate) fn insert(&mut self, key: [u8; 32], principal: Option<Principal>, now: Instant) {
        if self.capacity == 0 || self.ttl.is_zero() {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            let ttl = self.ttl;
            self.entries
                .retain(|_, (at, _)| now.duration_since(*at) < ttl);
            while self.entries.len() >= self.capacity {
                let oldest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| *k);
                match oldest {
                    Some(k) => self.entries.remove(&k),
                    None => break,
                };
            }
        }
        self.entries.insert(key, (now, principal));
    }
}

#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    status: ReviewStatus,
}

#[derive(Deserialize, Default)]
struct ReviewStatus {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: Option<ReviewUser>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ReviewUser {
    #[serde(default)]
    username: String,
}

/// Checks bearer tokens with the Kubernetes TokenReview API; see the crate documentation.
pub struct TokenReviewAuthenticator {
    api: ApiServer,
    map: ServiceAccountMap,
    timeout: Duration,
    cache: Mutex<Cache>,
    /// Reviews that got no answer (each refused a call with 503).
    counts: Arc<CallCounts>,
}

impl std::fmt::Debug for TokenReviewAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewAuthenticator")
            .field("api_server", &self.api.endpoint.authority)
            .field("serviceaccounts", &self.map.len())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TokenReviewAuthenticator {
    /// Reads the CA bundle and the pod's own token; fails when either is missing or unusable.
    pub fn new(settings: TokenReviewSettings) -> Result<Self, KubeError> {
        let api = ApiServer::new(
            &settings.api_server,
            &settings.ca_path,
            settings.token_path,
            settings.token_refresh,
        )?;
        Ok(TokenReviewAuthenticator {
            api,
            map: settings.map,
            timeout: settings.timeout,
            counts: Arc::default(),
            cache: Mutex::new(Cache {
                ttl: settings.cache_ttl,
                capacity: settings.cache_capacity,
                entries: HashMap::new(),
            }),
        })
    }

    /// The count of reviews that got no answer from the API server (each refused its call with
    /// 503) among all the reviews sent, shared so that the metrics can export them as
    /// `muster_tokenreview_reviews_total` and `muster_tokenreview_failures_total`.
    pub fn counts(&self) -> Arc<CallCounts> {
        Arc::clone(&self.counts)
    }

    /// Number of answers currently cached.
    pub fn cached(&self) -> usize {
        self.cache.lock().map(|c| c.entries.len()).unwrap_or(0)
    }

    async fn review(&self, token: &str) -> Result<ReviewStatus, ApiFailure> {
        match tokio::time::timeout(self.timeout, self.exchange(token)).await {
            Ok(r) => r,
            Err(_) => Err(ApiFailure::Timeout(self.timeout)),
        }
    }

    async fn exchange(&self, token: &str) -> Result<ReviewStatus, ApiFailure> {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let body = serde_json::to_vec(&body).map_err(|e| ApiFailure::Request(e.to_string()))?;
        let request = self
            .api
            .request(hyper::Method::POST, TOKENREVIEW_PATH, "application/json")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            // The message would quote the header value: the own token. Keep only the kind.
            .map_err(|_| ApiFailure::Request("invalid request header".into()))?;

        let (mut sender, conn) = self.api.connect().await?;
        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(ApiFailure::Http)?;
            let status = response.status();
            if !status.is_success() {
                return Err(ApiFailure::Status(status));
            }
            let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| ApiFailure::Body(e.to_string()))?
                .to_bytes();
            let review: Review = serde_json::from_slice(&bytes)
                .map_err(|e| ApiFailure::Shape("a TokenReview", e))?;
            Ok(review.status)
        };
        // Drive the connection alongside the exchange, in this task: nothing outlives the timeout.
        tokio::pin!(exchange, conn);
        let mut conn_done = false;
        loop {
            tokio::select! {
                biased;
                result = &mut exchange => return result,
                result = &mut conn, if !conn_done => {
                    conn_done = true;
                    result.map_err(ApiFailure::Http)?;
                }
            }
        }
    }
}

#[async_trait]
impl Authenticator for TokenReviewAuthenticator {
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, AuthError> {
        if token.is_empty() {
            return Ok(None);
        }
        let key = *blake3::hash(token.as_bytes()).as_bytes();
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key, Instant::now())
        {
            return Ok(hit);
        }
        let review = self.review(token).await;
        self.counts.count(review.is_ok());
        let status = match review {
            Ok(status) => status,
            Err(failure) => {
                tracing::warn!(
                    api_server = %self.api.endpoint.authority,
                    error = %failure,
                    "TokenReview failed: refusing with 503 (fail closed)"
                );
                return Err(AuthError::Unavailable);
            }
        };
        let principal = if status.authenticated {
            let username = status.user.map(|u| u.username).unwrap_or_default();
            match self.map.get(&username) {
                Some(principal) => Some(principal),
                None => {
                    tracing::info!(
                        username = %username,
                        "authenticated ServiceAccount is not in the ServiceAccount map: refused"
                    );
                    None
                }
            }
        } else {
            // Kubernetes does not quote the token in its error, but make sure of it.
            let error = status
                .error
                .filter(|e| !e.contains(token))
                .unwrap_or_default();
            tracing::debug!(error = %error, "TokenReview: token not authenticated");
            None
        };
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, principal, Instant::now());
        Ok(principal)
    }
}
