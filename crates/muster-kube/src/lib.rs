//! The cluster adapter: authenticates Kubernetes ServiceAccount bearer tokens with the TokenReview
//! API and maps the authenticated username to a Muster principal by configuration.
//!
//! A token is sent to the API server once and never kept: the result cache is keyed by the BLAKE3
//! digest of the token, and no log line, error or map holds the token itself. When the API server
//! cannot answer (unreachable, slow, non-2xx, unreadable answer) the authenticator fails closed with
//! [`AuthError::Unavailable`], which is never cached.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use muster_app::auth::{AuthError, Authenticator};
use muster_domain::Principal;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// The CA bundle mounted into every pod.
pub const DEFAULT_CA_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// The pod's own ServiceAccount token (projected, rotated by the kubelet).
pub const DEFAULT_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// The API server's in-cluster name, used when the service environment variables are absent.
pub const DEFAULT_API_SERVER: &str = "https://kubernetes.default.svc";
/// Where TokenReviews are created.
pub const TOKENREVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// Largest TokenReview answer read; a larger one counts as the API server being unavailable.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Errors of configuration, raised while building the authenticator (never while authenticating).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    #[error("the ServiceAccount map is not valid JSON of the expected shape: {0}")]
    MapShape(String),
    #[error("ServiceAccount map: {username:?} maps to unknown principal {principal:?}")]
    MapEntry { username: String, principal: String },
    #[error("read {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("the CA bundle {} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("API server URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("TLS setup: {0}")]
    Tls(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    serviceaccounts: HashMap<String, String>,
}

/// Which authenticated username is which principal:
/// `{"serviceaccounts": {"system:serviceaccount:cs-workers:trawl": "worker:trawl"}}`.
/// A username not in the map is authenticated by Kubernetes but not let in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceAccountMap {
    by_username: HashMap<String, Principal>,
}

impl ServiceAccountMap {
    pub fn from_json(text: &str) -> Result<Self, KubeError> {
        let file: MapFile =
            serde_json::from_str(text).map_err(|e| KubeError::MapShape(e.to_string()))?;
        let mut by_username = HashMap::with_capacity(file.serviceaccounts.len());
        for (username, principal) in file.serviceaccounts {
            let parsed = principal.parse().map_err(|_| KubeError::MapEntry {
                username: username.clone(),
                principal: principal.clone(),
            })?;
            by_username.insert(username, parsed);
        }
        Ok(ServiceAccountMap { by_username })
    }

    /// Reads and parses the map file.
    pub fn load(path: &Path) -> Result<Self, KubeError> {
        Self::from_json(&read(path)?)
    }

    pub fn get(&self, username: &str) -> Option<Principal> {
        self.by_username.get(username).copied()
    }

    pub fn len(&self) -> usize {
        self.by_username.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_username.is_empty()
    }
}

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

/// The API server's URL from the service environment variables' values.
pub fn api_server_url(host: Option<&str>, port: Option<&str>) -> String {
    match host.map(str::trim).filter(|h| !h.is_empty()) {
        Some(host) => {
            let host = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.to_owned()
            };
            let port = port
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .unwrap_or("443");
            format!("https://{host}:{port}")
        }
        None => DEFAULT_API_SERVER.to_owned(),
    }
}

/// Where to connect and whom to expect at the other end.
#[derive(Debug, Clone)]
struct Endpoint {
    /// Host for the socket: a name or an IP address without brackets.
    host: String,
    port: u16,
    /// `host[:port]` for the Host header.
    authority: String,
    server_name: ServerName<'static>,
}

fn parse_endpoint(url: &str) -> Result<Endpoint, KubeError> {
    let bad = |reason: &str| KubeError::Url {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| bad("must start with https://"))?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return Err(bad("must be https://host[:port] with no path"));
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let (host, after) = inner
            .split_once(']')
            .ok_or_else(|| bad("unclosed [ in an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| bad("the port is not a number"))?,
        None => 443,
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let server_name = match host.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => {
            ServerName::try_from(host.to_owned()).map_err(|_| bad("not a valid host name"))?
        }
    };
    Ok(Endpoint {
        host: host.to_owned(),
        port,
        authority: authority.to_owned(),
        server_name,
    })
}

fn read(path: &Path) -> Result<String, KubeError> {
    std::fs::read_to_string(path).map_err(|e| KubeError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn tls_connector(ca_path: &Path) -> Result<TlsConnector, KubeError> {
    let pem = std::fs::read(ca_path).map_err(|e| KubeError::Read {
        path: ca_path.to_owned(),
        reason: e.to_string(),
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| KubeError::Read {
            path: ca_path.to_owned(),
            reason: format!("not a PEM certificate bundle: {e}"),
        })?;
        roots
            .add(cert)
            .map_err(|e| KubeError::Tls(format!("CA certificate refused: {e}")))?;
    }
    if roots.is_empty() {
        return Err(KubeError::NoCertificate(ca_path.to_owned()));
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| KubeError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The pod's own token, re-read when older than the refresh interval (the kubelet rotates it).
struct OwnToken {
    path: PathBuf,
    refresh: Duration,
    value: String,
    read_at: Instant,
}

impl OwnToken {
    fn load(path: PathBuf, refresh: Duration) -> Result<Self, KubeError> {
        let value = read(&path)?.trim().to_owned();
        if value.is_empty() {
            return Err(KubeError::Read {
                path,
                reason: "the file is empty".into(),
            });
        }
        Ok(OwnToken {
            path,
            refresh,
            value,
            read_at: Instant::now(),
        })
    }

    /// The current token; a failed re-read keeps the last good one.
    fn current(&mut self, now: Instant) -> String {
        if now.duration_since(self.read_at) >= self.refresh {
            self.read_at = now;
            match std::fs::read_to_string(&self.path) {
                Ok(text) if !text.trim().is_empty() => self.value = text.trim().to_owned(),
                Ok(_) => tracing::warn!(
                    path = %self.path.display(),
                    "own ServiceAccount token file is empty: keeping the last one"
                ),
                Err(e) => tracing::warn!(
                    path = %self.path.display(),
                    error = %e,
                    "own ServiceAccount token not re-read: keeping the last one"
                ),
            }
        }
        self.value.clone()
    }
}

/// Review answers by token digest, for `ttl`, at most `capacity` of them.
struct Cache {
    ttl: Duration,
    capacity: usize,
    entries: HashMap<[u8; 32], (Instant, Option<Principal>)>,
}

impl Cache {
    fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<Option<Principal>> {
        let (at, principal) = *self.entries.get(key)?;
        if now.duration_since(at) < self.ttl {
            Some(principal)
        } else {
            self.entries.remove(key);
            None
        }
    }

    fn insert(&mut self, key: [u8; 32], principal: Option<Principal>, now: Instant) {
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

/// Why a review got no answer; for logs only (never holds the token).
#[derive(Debug, thiserror::Error)]
enum ReviewFailure {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("HTTP: {0}")]
    Http(hyper::Error),
    #[error("the API server answered {0}")]
    Status(hyper::StatusCode),
    #[error("reading the answer: {0}")]
    Body(String),
    #[error("the answer is not a TokenReview: {0}")]
    Shape(serde_json::Error),
    #[error("building the request: {0}")]
    Request(String),
}

/// Checks bearer tokens with the Kubernetes TokenReview API; see the crate documentation.
pub struct TokenReviewAuthenticator {
    endpoint: Endpoint,
    tls: TlsConnector,
    map: ServiceAccountMap,
    timeout: Duration,
    own_token: Mutex<OwnToken>,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for TokenReviewAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewAuthenticator")
            .field("api_server", &self.endpoint.authority)
            .field("serviceaccounts", &self.map.len())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TokenReviewAuthenticator {
    /// Reads the CA bundle and the pod's own token; fails when either is missing or unusable.
    pub fn new(settings: TokenReviewSettings) -> Result<Self, KubeError> {
        let endpoint = parse_endpoint(&settings.api_server)?;
        let tls = tls_connector(&settings.ca_path)?;
        let own_token = OwnToken::load(settings.token_path, settings.token_refresh)?;
        Ok(TokenReviewAuthenticator {
            endpoint,
            tls,
            map: settings.map,
            timeout: settings.timeout,
            own_token: Mutex::new(own_token),
            cache: Mutex::new(Cache {
                ttl: settings.cache_ttl,
                capacity: settings.cache_capacity,
                entries: HashMap::new(),
            }),
        })
    }

    /// Number of answers currently cached.
    pub fn cached(&self) -> usize {
        self.cache.lock().map(|c| c.entries.len()).unwrap_or(0)
    }

    async fn review(&self, token: &str) -> Result<ReviewStatus, ReviewFailure> {
        let own = self
            .own_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .current(Instant::now());
        match tokio::time::timeout(self.timeout, self.exchange(token, &own)).await {
            Ok(r) => r,
            Err(_) => Err(ReviewFailure::Timeout(self.timeout)),
        }
    }

    async fn exchange(&self, token: &str, own: &str) -> Result<ReviewStatus, ReviewFailure> {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let body = serde_json::to_vec(&body).map_err(|e| ReviewFailure::Request(e.to_string()))?;
        let request = hyper::Request::post(TOKENREVIEW_PATH)
            .header(hyper::header::HOST, &self.endpoint.authority)
            .header(hyper::header::AUTHORIZATION, format!("Bearer {own}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(body)))
            // The message would quote the header value: the own token. Keep only the kind.
            .map_err(|_| ReviewFailure::Request("invalid request header".into()))?;

        let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(ReviewFailure::Connect)?;
        let _ = tcp.set_nodelay(true);
        let tls = self
            .tls
            .connect(self.endpoint.server_name.clone(), tcp)
            .await
            .map_err(ReviewFailure::Tls)?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(ReviewFailure::Http)?;
        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(ReviewFailure::Http)?;
            let status = response.status();
            if !status.is_success() {
                return Err(ReviewFailure::Status(status));
            }
            let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| ReviewFailure::Body(e.to_string()))?
                .to_bytes();
            let review: Review = serde_json::from_slice(&bytes).map_err(ReviewFailure::Shape)?;
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
                    result.map_err(ReviewFailure::Http)?;
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
        let status = match self.review(token).await {
            Ok(status) => status,
            Err(failure) => {
                tracing::warn!(
                    api_server = %self.endpoint.authority,
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

#[cfg(test)]
mod tests {
    use super::*;
    use muster_domain::Kind;

    #[test]
    fn the_map_names_principals_by_username() {
        let map = ServiceAccountMap::from_json(
            r#"{"serviceaccounts": {"system:serviceaccount:cs-workers:trawl": "worker:trawl",
                                    "system:serviceaccount:clearedstack:conn": "conn"}}"#,
        )
        .unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(
            map.get("system:serviceaccount:cs-workers:trawl"),
            Some(Principal::Worker(Kind::Trawl))
        );
        assert_eq!(
            map.get("system:serviceaccount:clearedstack:conn"),
            Some(Principal::Conn)
        );
        assert_eq!(map.get("system:serviceaccount:default:default"), None);
    }

    #[test]
    fn a_map_naming_an_unknown_principal_is_refused() {
        let r = ServiceAccountMap::from_json(
            r#"{"serviceaccounts": {"system:serviceaccount:a:b": "root"}}"#,
        );
        assert_eq!(
            r,
            Err(KubeError::MapEntry {
                username: "system:serviceaccount:a:b".into(),
                principal: "root".into()
            })
        );
    }

    #[test]
    fn a_map_of_another_shape_is_refused() {
        let r = ServiceAccountMap::from_json(r#"{"accounts": {}}"#);
        assert!(matches!(r, Err(KubeError::MapShape(_))));
    }

    #[test]
    fn the_api_server_comes_from_the_service_environment() {
        assert_eq!(
            api_server_url(Some("10.96.0.1"), Some("443")),
            "https://10.96.0.1:443"
        );
        assert_eq!(
            api_server_url(Some("fd00::1"), Some("6443")),
            "https://[fd00::1]:6443"
        );
        assert_eq!(api_server_url(None, None), "https://kubernetes.default.svc");
    }

    #[test]
    fn endpoints_are_parsed_from_https_urls_only() {
        let e = parse_endpoint("https://kubernetes.default.svc").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("kubernetes.default.svc", 443));
        let e = parse_endpoint("https://[fd00::1]:6443/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("fd00::1", 6443));
        assert_eq!(e.authority, "[fd00::1]:6443");
        let e = parse_endpoint("https://127.0.0.1:8443").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 8443));
        assert!(parse_endpoint("http://kubernetes.default.svc").is_err());
        assert!(parse_endpoint("https://kubernetes.default.svc/api").is_err());
        assert!(parse_endpoint("https://host:port").is_err());
    }

    #[test]
    fn the_cache_evicts_the_oldest_answer_when_full() {
        let mut cache = Cache {
            ttl: Duration::from_secs(30),
            capacity: 2,
            entries: HashMap::new(),
        };
        let t0 = Instant::now();
        cache.insert([1; 32], Some(Principal::Conn), t0);
        cache.insert([2; 32], None, t0 + Duration::from_millis(1));
        cache.insert(
            [3; 32],
            Some(Principal::Operator),
            t0 + Duration::from_millis(2),
        );
        let now = t0 + Duration::from_millis(3);
        assert_eq!(cache.entries.len(), 2);
        assert_eq!(cache.get(&[1; 32], now), None);
        assert_eq!(cache.get(&[2; 32], now), Some(None));
        assert_eq!(cache.get(&[3; 32], now), Some(Some(Principal::Operator)));
    }

    #[test]
    fn cached_answers_expire_after_the_ttl() {
        let mut cache = Cache {
            ttl: Duration::from_secs(30),
            capacity: 10,
            entries: HashMap::new(),
        };
        let t0 = Instant::now();
        cache.insert([1; 32], Some(Principal::Conn), t0);
        assert_eq!(
            cache.get(&[1; 32], t0 + Duration::from_secs(29)),
            Some(Some(Principal::Conn))
        );
        assert_eq!(cache.get(&[1; 32], t0 + Duration::from_secs(30)), None);
        assert!(cache.entries.is_empty());
    }
}
