//! TokenReview: is this bearer token a ServiceAccount's, and whose?
//!
//! Admission (docs/security.md, "TokenReview admission"): a token with a positive answer (a
//! known token) is reviewed again in the background once its answer is older than
//! `cache_ttl - refresh_ahead`, on slots of its own; past `cache_ttl` a call waits for that
//! review, and while the API server gives no answer (slow past the timeout, unreachable,
//! non-2xx) the last positive answer serves for at most `stale_limit` beyond its time to live.
//! A negative answer, or a 401/403 from the API server, ends that at once. Reviews of unknown
//! tokens take a token from their peer's bucket and from the replica's, then a slot of their
//! own lane, waiting in a bounded queue for a bounded time; refused, the call is 503. A review
//! under way is shared by every lookup of its token, and its entry is removed when the last of
//! them goes away, answered or not.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http_body_util::Full;
use hyper::body::Bytes;
use muster_app::auth::{AuthError, Authenticator, ReviewFigures};
use muster_app::dependency::CallCounts;
use muster_domain::Principal;
use serde::Deserialize;

use tokio::sync::OnceCell;

use crate::admission::{Lane, Rate, Rates, Refused};
use crate::cache::TtlCache;
use crate::client::{ApiFailure, ApiServer, ReviewPool, api_server_url};
use crate::{DEFAULT_CA_PATH, DEFAULT_TOKEN_PATH, KubeError, ServiceAccountMap, TOKENREVIEW_PATH};

/// Most peers whose review rate is tracked at once; past it, peers whose bucket has refilled
/// are forgotten, and a new peer is refused while none has.
const MAX_PEERS: usize = 4096;

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
    /// Reviews of unknown tokens running at once (each on a kept-alive connection).
    pub connections: usize,
    /// Reviews of known tokens running at once, apart from those of unknown tokens.
    pub refresh_connections: usize,
    /// A known token is reviewed again once its answer is older than `cache_ttl` minus this
    /// (at most half of `cache_ttl`).
    pub refresh_ahead: Duration,
    /// How long past `cache_ttl` a positive answer still lets its token in while the API server
    /// gives no answer.
    pub stale_limit: Duration,
    /// Reviews of unknown tokens that may wait for a slot, and how long each may wait.
    pub queue: usize,
    pub queue_wait: Duration,
    /// Reviews of unknown tokens one peer (the connection's remote address) may start, and
    /// the replica as a whole.
    pub peer_rate: Rate,
    pub global_rate: Rate,
}

/// How long past its time to live a positive answer serves by default while the API server
/// gives no answer.
pub const DEFAULT_STALE_LIMIT: Duration = Duration::from_secs(300);
/// Reviews of unknown tokens a second by default: per peer, and for the replica (each with a
/// burst of twice as many).
pub const DEFAULT_PEER_RATE: u32 = 5;
pub const DEFAULT_RATE: u32 = 50;

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
            refresh_connections: 2,
            refresh_ahead: Duration::from_secs(10),
            stale_limit: DEFAULT_STALE_LIMIT,
            queue: 32,
            queue_wait: Duration::from_secs(1),
            peer_rate: Rate::of(DEFAULT_PEER_RATE),
            global_rate: Rate::of(DEFAULT_RATE),
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

/// Checks bearer tokens with the Kubernetes TokenReview API; see the module documentation.
pub struct TokenReviewAuthenticator {
    inner: Arc<Inner>,
}

/// A positive answer as kept: whose token it is, and whether a review since its time to live
/// got no answer (then calls are let in on it at once while another review is tried).
#[derive(Debug, Clone, Copy)]
struct Known {
    principal: Principal,
    refresh_failed: bool,
}

/// Which lane a review takes.
#[derive(Debug, Clone, Copy)]
enum Class {
    /// A token with a positive answer.
    Known,
    /// Any other, from this peer.
    Unknown(Option<IpAddr>),
}

impl Class {
    fn index(self) -> usize {
        match self {
            Class::Known => 0,
            Class::Unknown(_) => 1,
        }
    }
}

const CLASSES: [&str; 2] = ["known", "unknown"];
const OUTCOMES: [&str; 3] = ["positive", "negative", "unavailable"];

/// What the admission did, for the metrics.
#[derive(Debug, Default)]
struct Figures {
    reviews: [[AtomicU64; 3]; 2],
    refused: Refused,
    served_stale: AtomicU64,
    refreshes: AtomicU64,
}

type Key = [u8; 32];
type Pending = Mutex<HashMap<Key, Arc<OnceCell<Answer>>>>;

struct Inner {
    api: ApiServer,
    pool: ReviewPool,
    map: ServiceAccountMap,
    audiences: Vec<String>,
    timeout: Duration,
    ttl: Duration,
    /// Age of a positive answer from which its token is reviewed again.
    refresh_from: Duration,
    /// Positive answers, kept for `ttl + stale_limit`, and negative ones apart.
    known: Mutex<TtlCache<Known>>,
    refused: Mutex<TtlCache<()>>,
    /// Reviews under way, by token digest: a second lookup of the same token waits for the
    /// first one's answer instead of sending its own.
    pending: Pending,
    known_lane: Lane,
    unknown_lane: Lane,
    rates: Rates,
    /// Cleared by a 401/403 from the API server (no stale answer serves then), set again by
    /// the next answered review.
    stale_allowed: AtomicBool,
    /// Reviews that got no answer (each refused a call with 503).
    counts: Arc<CallCounts>,
    figures: Figures,
}

impl std::fmt::Debug for TokenReviewAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewAuthenticator")
            .field("api_server", &self.inner.api.endpoint.authority)
            .field("serviceaccounts", &self.inner.map.len())
            .field("timeout", &self.inner.timeout)
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
        let now = Instant::now();
        let inner = Inner {
            api,
            pool: ReviewPool::default(),
            map: settings.map,
            audiences: settings.audiences,
            timeout: settings.timeout,
            ttl: settings.cache_ttl,
            refresh_from: settings
                .cache_ttl
                .saturating_sub(settings.refresh_ahead)
                .max(settings.cache_ttl / 2),
            known: Mutex::new(TtlCache::new(
                settings.cache_ttl + settings.stale_limit,
                settings.cache_capacity,
            )),
            refused: Mutex::new(TtlCache::new(
                settings.negative_ttl,
                settings.negative_capacity,
            )),
            pending: Mutex::new(HashMap::new()),
            known_lane: Lane::new(
                settings.refresh_connections,
                settings.cache_capacity,
                settings.queue_wait,
            ),
            unknown_lane: Lane::new(settings.connections, settings.queue, settings.queue_wait),
            rates: Rates::new(settings.peer_rate, settings.global_rate, MAX_PEERS, now),
            stale_allowed: AtomicBool::new(true),
            counts: Arc::default(),
            figures: Figures::default(),
        };
        Ok(TokenReviewAuthenticator {
            inner: Arc::new(inner),
        })
    }

    /// The count of reviews that got no answer from the API server (each refused its call with
    /// 503) among all the reviews sent, shared so that the metrics can export them as
    /// `muster_tokenreview_reviews_total` and `muster_tokenreview_failures_total`.
    pub fn counts(&self) -> Arc<CallCounts> {
        Arc::clone(&self.inner.counts)
    }

    /// Number of answers currently cached (positive and negative).
    pub fn cached(&self) -> usize {
        lock(&self.inner.known).len() + lock(&self.inner.refused).len()
    }

    /// Connections opened to the API server for reviews so far.
    pub fn connections_opened(&self) -> u64 {
        self.inner.pool.opened.load(Ordering::Relaxed)
    }

    /// Reviews under way now (their entries in the in-flight map).
    pub fn in_flight(&self) -> usize {
        lock(&self.inner.pending).len()
    }
}

impl Inner {
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

    fn count(&self, class: Class, outcome: usize) {
        self.figures.reviews[class.index()][outcome].fetch_add(1, Ordering::Relaxed);
    }

    /// Admits a review of `class`, sends it (the timeout counts the exchange alone, not the
    /// wait for a slot) and caches the answer (an unavailable API server is never cached).
    async fn lookup(&self, token: &str, key: Key, class: Class) -> Answer {
        let lane = match class {
            Class::Known => &self.known_lane,
            Class::Unknown(peer) => {
                if let Err(refusal) = self.rates.admit(peer, Instant::now()) {
                    self.figures.refused.count(refusal);
                    return Err(AuthError::Unavailable);
                }
                &self.unknown_lane
            }
        };
        let _slot = match lane.enter().await {
            Ok(slot) => slot,
            Err(refusal) => {
                if let Class::Unknown(_) = class {
                    self.figures.refused.count(refusal);
                } else {
                    self.count(class, 2);
                    lock(&self.known).update(&key, |k| k.refresh_failed = true);
                }
                return Err(AuthError::Unavailable);
            }
        };
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
                self.count(class, 2);
                let denied = matches!(
                    failure,
                    ApiFailure::Status(s)
                        if s == hyper::StatusCode::UNAUTHORIZED || s == hyper::StatusCode::FORBIDDEN
                );
                if denied {
                    // The API server refuses Muster itself: no answer of before serves now.
                    self.stale_allowed.store(false, Ordering::Relaxed);
                    lock(&self.known).remove(&key);
                } else {
                    lock(&self.known).update(&key, |k| k.refresh_failed = true);
                }
                return Err(AuthError::Unavailable);
            }
        };
        self.stale_allowed.store(true, Ordering::Relaxed);
        let principal = self.judge(status, token);
        let now = Instant::now();
        match principal {
            Some(principal) => {
                self.count(class, 0);
                let known = Known {
                    principal,
                    refresh_failed: false,
                };
                lock(&self.known).insert(key, known, now);
            }
            None => {
                self.count(class, 1);
                lock(&self.known).remove(&key);
                lock(&self.refused).insert(key, (), now);
            }
        }
        Ok(principal)
    }

    /// The answer of the review of `token` under way, or of a new one.
    async fn joined(&self, token: &str, key: Key, class: Class) -> Answer {
        let flight = InFlight::join(&self.pending, key);
        flight
            .cell()
            .get_or_init(|| self.lookup(token, key, class))
            .await
            .clone()
    }

    /// Starts a review of the known `token` in the background, unless one is under way.
    fn refresh(self: &Arc<Self>, token: &str, key: Key) {
        if lock(&self.pending).contains_key(&key) {
            return;
        }
        let (inner, token) = (Arc::clone(self), token.to_owned());
        tokio::spawn(async move {
            // Started meanwhile by another call: that one serves.
            let Some(flight) = InFlight::start(&inner.pending, key) else {
                return;
            };
            inner.figures.refreshes.fetch_add(1, Ordering::Relaxed);
            let _ = flight
                .cell()
                .get_or_init(|| inner.lookup(&token, key, Class::Known))
                .await;
        });
    }

    /// The answer for a token whose positive answer is `known`, stored `age` ago.
    async fn known(self: &Arc<Self>, token: &str, key: Key, known: Known, age: Duration) -> Answer {
        let principal = known.principal;
        if age < self.refresh_from {
            return Ok(Some(principal));
        }
        if age < self.ttl {
            self.refresh(token, key);
            return Ok(Some(principal));
        }
        if !self.stale_allowed.load(Ordering::Relaxed) {
            return self.joined(token, key, Class::Known).await;
        }
        if known.refresh_failed {
            // The API server gave no answer since: let the call in now, ask again meanwhile.
            self.refresh(token, key);
            return Ok(Some(self.served_stale(principal)));
        }
        match self.joined(token, key, Class::Known).await {
            Err(AuthError::Unavailable) if self.may_serve_stale(&key) => {
                Ok(Some(self.served_stale(principal)))
            }
            answer => answer,
        }
    }

    /// Whether the positive answer of `key` may still let its token in: kept (within the
    /// stale limit, not refused since) and no 401/403 from the API server since.
    fn may_serve_stale(&self, key: &Key) -> bool {
        self.stale_allowed.load(Ordering::Relaxed)
            && lock(&self.known).get(key, Instant::now()).is_some()
    }

    fn served_stale(&self, principal: Principal) -> Principal {
        self.figures.served_stale.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(principal = %principal, "TokenReview: let in on a stale positive answer");
        principal
    }

    async fn authenticate(self: &Arc<Self>, token: &str, peer: Option<IpAddr>) -> Answer {
        if token.is_empty() {
            return Ok(None);
        }
        let key = *blake3::hash(token.as_bytes()).as_bytes();
        let now = Instant::now();
        let known = lock(&self.known).get(&key, now);
        if let Some((at, known)) = known {
            let age = now.saturating_duration_since(at);
            return self.known(token, key, known, age).await;
        }
        if lock(&self.refused).get(&key, now).is_some() {
            return Ok(None);
        }
        self.joined(token, key, Class::Unknown(peer)).await
    }

    fn figures(&self) -> ReviewFigures {
        let f = &self.figures;
        let mut reviews = Vec::with_capacity(6);
        for (c, class) in CLASSES.iter().enumerate() {
            for (o, outcome) in OUTCOMES.iter().enumerate() {
                reviews.push((*class, *outcome, f.reviews[c][o].load(Ordering::Relaxed)));
            }
        }
        ReviewFigures {
            reviews,
            rejected: f.refused.get(),
            served_stale: f.served_stale.load(Ordering::Relaxed),
            refreshes: f.refreshes.load(Ordering::Relaxed),
            in_flight: lock(&self.pending).len() as u64,
        }
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

/// One lookup's share of a review under way: the review's entry in the in-flight map lives
/// while a share does, and goes with the last one, however it ends (answered, or its caller
/// gone). Shares are made and dropped under the map's lock, so the count is exact.
struct InFlight<'a> {
    pending: &'a Pending,
    key: Key,
    cell: Option<Arc<OnceCell<Answer>>>,
}

impl<'a> InFlight<'a> {
    /// A share of the review of `key` under way, or of a new one.
    fn join(pending: &'a Pending, key: Key) -> Self {
        let cell = Arc::clone(lock(pending).entry(key).or_default());
        InFlight {
            pending,
            key,
            cell: Some(cell),
        }
    }

    /// A share of a new review of `key`; none when one is under way.
    fn start(pending: &'a Pending, key: Key) -> Option<Self> {
        let mut map = lock(pending);
        if map.contains_key(&key) {
            return None;
        }
        let cell = Arc::new(OnceCell::new());
        map.insert(key, Arc::clone(&cell));
        Some(InFlight {
            pending,
            key,
            cell: Some(cell),
        })
    }

    fn cell(&self) -> &OnceCell<Answer> {
        self.cell
            .as_deref()
            .expect("a share holds its cell until dropped")
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut map = lock(self.pending);
        let Some(cell) = self.cell.take() else {
            return;
        };
        // The map's reference and this one: no other share is left.
        let ours = map.get(&self.key).is_some_and(|c| Arc::ptr_eq(c, &cell));
        if ours && Arc::strong_count(&cell) == 2 {
            map.remove(&self.key);
        }
        drop(cell);
        drop(map);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Authenticator for TokenReviewAuthenticator {
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, AuthError> {
        self.inner.authenticate(token, None).await
    }

    async fn authenticate_from(
        &self,
        token: &str,
        peer: Option<IpAddr>,
    ) -> Result<Option<Principal>, AuthError> {
        self.inner.authenticate(token, peer).await
    }

    fn figures(&self) -> Option<ReviewFigures> {
        Some(self.inner.figures())
    }
}
