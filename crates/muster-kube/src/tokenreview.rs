//! TokenReview: is this bearer token a ServiceAccount's, and whose?

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http_body_util::Full;
use hyper::body::Bytes;
use muster_app::auth::{AuthError, Authenticator};
use muster_app::dependency::CallCounts;
use muster_domain::Principal;
use serde::Deserialize;

use tokio::sync::OnceCell;

use crate::cache::TtlCache;
use crate::client::{ApiFailure, ApiServer, ReviewPool, api_server_url};
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
    /// The audiences asked for (`--token-audience`); a token is let in only when the API
    /// server says it is meant for one of them (a token minted for the API server, as a
    /// pod's default token is, is refused).
    pub audiences: Vec<String>,
    /// How long a positive answer (a token of a mapped ServiceAccount) is reused.
    pub cache_ttl: Duration,
    /// Most positive answers kept; the oldest is evicted first.
    pub cache_capacity: usize,
    /// How long a negative answer is reused, and how many are kept (apart from the positive
    /// ones, which a flood of unknown tokens therefore never evicts).
    pub negative_ttl: Duration,
    pub negative_capacity: usize,
    /// Connections to the API server open at once for reviews, kept alive between them.
    pub connections: usize,
}

/// The audience asked for by default, and the one the manifests project into callers' tokens.
pub const DEFAULT_AUDIENCE: &str = "muster";

impl TokenReviewSettings {
    pub fn new(api_server: impl Into<String>, map: ServiceAccountMap) -> Self {
        TokenReviewSettings {
            api_server: api_server.into(),
            ca_path: DEFAULT_CA_PATH.into(),
            token_path: DEFAULT_TOKEN_PATH.into(),
            token_refresh: Duration::from_secs(60),
            map,
            timeout: Duration::from_secs(2),
            audiences: vec![DEFAULT_AUDIENCE.to_owned()],
            cache_ttl: Duration::from_secs(30),
            cache_capacity: 10_000,
            negative_ttl: Duration::from_secs(30),
            negative_capacity: 1_000,
            connections: 4,
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
    /// The audiences, of those asked for, the token is meant for.
    #[serde(default)]
    audiences: Vec<String>,
}

#[derive(Deserialize)]
struct ReviewUser {
    #[serde(default)]
    username: String,
}

/// Checks bearer tokens with the Kubernetes TokenReview API; see the crate documentation.
pub struct TokenReviewAuthenticator {
    api: ApiServer,
    pool: ReviewPool,
    map: ServiceAccountMap,
    audiences: Vec<String>,
    timeout: Duration,
    /// Positive answers, and negative ones apart.
    known: Mutex<TtlCache<Principal>>,
    refused: Mutex<TtlCache<()>>,
    /// Reviews under way, by token digest: a second lookup of the same token waits for the
    /// first one's answer instead of sending its own.
    pending: Mutex<HashMap<[u8; 32], Arc<OnceCell<Answer>>>>,
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
            pool: ReviewPool::new(settings.connections),
            map: settings.map,
            audiences: settings.audiences,
            timeout: settings.timeout,
            counts: Arc::default(),
            known: Mutex::new(TtlCache::new(settings.cache_ttl, settings.cache_capacity)),
            refused: Mutex::new(TtlCache::new(
                settings.negative_ttl,
                settings.negative_capacity,
            )),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// The count of reviews that got no answer from the API server (each refused its call with
    /// 503) among all the reviews sent, shared so that the metrics can export them as
    /// `muster_tokenreview_reviews_total` and `muster_tokenreview_failures_total`.
    pub fn counts(&self) -> Arc<CallCounts> {
        Arc::clone(&self.counts)
    }

    /// Number of answers currently cached (positive and negative).
    pub fn cached(&self) -> usize {
        lock(&self.known).len() + lock(&self.refused).len()
    }

    /// Connections opened to the API server for reviews so far.
    pub fn connections_opened(&self) -> u64 {
        self.pool.opened.load(std::sync::atomic::Ordering::Relaxed)
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
            "spec": {"token": token, "audiences": self.audiences},
        });
        let body =
            Bytes::from(serde_json::to_vec(&body).map_err(|e| ApiFailure::Request(e.to_string()))?);
        let request = || {
            self.api
                .request(hyper::Method::POST, TOKENREVIEW_PATH, "application/json")
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(body.clone()))
                // The message would quote the header value: the own token. Keep only the kind.
                .map_err(|_| ApiFailure::Request("invalid request header".into()))
        };
        let (status, bytes) = self
            .pool
            .exchange(&self.api, request, MAX_RESPONSE_BYTES)
            .await?;
        if !status.is_success() {
            return Err(ApiFailure::Status(status));
        }
        let review: Review =
            serde_json::from_slice(&bytes).map_err(|e| ApiFailure::Shape("a TokenReview", e))?;
        Ok(review.status)
    }

    /// A cached answer for `key`, if one is fresh.
    fn cached_answer(&self, key: &[u8; 32]) -> Option<Option<Principal>> {
        let now = Instant::now();
        if let Some((_, p)) = lock(&self.known).get(key, now) {
            return Some(Some(p));
        }
        lock(&self.refused).get(key, now).map(|_| None)
    }

    /// Reviews `token` and caches the answer (an unavailable API server is never cached).
    async fn lookup(&self, token: &str, key: [u8; 32]) -> Answer {
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
        let principal = self.judge(status, token);
        let now = Instant::now();
        match principal {
            Some(p) => lock(&self.known).insert(key, p, now),
            None => lock(&self.refused).insert(key, (), now),
        }
        Ok(principal)
    }

    /// The principal of an answered review: authenticated, meant for one of our audiences and
    /// of a mapped ServiceAccount; else nobody.
    fn judge(&self, status: ReviewStatus, token: &str) -> Option<Principal> {
        if !status.authenticated {
            // Kubernetes does not quote the token in its error, but make sure of it.
            let error = status
                .error
                .filter(|e| !e.contains(token))
                .unwrap_or_default();
            tracing::debug!(error = %error, "TokenReview: token not authenticated");
            return None;
        }
        if !status.audiences.iter().any(|a| self.audiences.contains(a)) {
            tracing::info!(
                audiences = ?status.audiences,
                wanted = ?self.audiences,
                "authenticated token is not meant for Muster's audience: refused"
            );
            return None;
        }
        let username = status.user.map(|u| u.username).unwrap_or_default();
        let principal = self.map.get(&username);
        if principal.is_none() {
            tracing::info!(
                username = %username,
                "authenticated ServiceAccount is not in the ServiceAccount map: refused"
            );
        }
        principal
    }
}

/// What a lookup answers.
type Answer = Result<Option<Principal>, AuthError>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Authenticator for TokenReviewAuthenticator {
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, AuthError> {
        if token.is_empty() {
            return Ok(None);
        }
        let key = *blake3::hash(token.as_bytes()).as_bytes();
        if let Some(hit) = self.cached_answer(&key) {
            return Ok(hit);
        }
        // One review per token at a time: later lookups wait for its answer.
        let cell = Arc::clone(lock(&self.pending).entry(key).or_default());
        let answer = cell.get_or_init(|| self.lookup(token, key)).await.clone();
        let mut pending = lock(&self.pending);
        if pending.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            pending.remove(&key);
        }
        answer
    }
}
