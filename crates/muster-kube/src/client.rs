//! The connection to the API server: where it is, whom to trust, the pod's own token.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::client::conn::http1::{Connection, SendRequest};
use hyper::http::request::Builder;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use crate::{DEFAULT_API_SERVER, KubeError};

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
pub(crate) struct Endpoint {
    /// Host for the socket: a name or an IP address without brackets.
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `host[:port]` for the Host header.
    pub(crate) authority: String,
    pub(crate) server_name: ServerName<'static>,
}

pub(crate) fn parse_endpoint(url: &str) -> Result<Endpoint, KubeError> {
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

pub(crate) fn read(path: &Path) -> Result<String, KubeError> {
    std::fs::read_to_string(path).map_err(|e| KubeError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

pub(crate) fn tls_connector(ca_path: &Path) -> Result<TlsConnector, KubeError> {
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
pub(crate) struct OwnToken {
    path: PathBuf,
    refresh: Duration,
    value: String,
    read_at: Instant,
}

impl OwnToken {
    pub(crate) fn load(path: PathBuf, refresh: Duration) -> Result<Self, KubeError> {
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
    pub(crate) fn current(&mut self, now: Instant) -> String {
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

/// The TLS stream to the API server, as hyper reads and writes it.
pub(crate) type ApiIo = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

/// Why no connection to the API server came about; for logs only.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectFailure {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("HTTP: {0}")]
    Http(hyper::Error),
}

/// Why a call to the API server got no usable answer; for logs only (never holds a token).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiFailure {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Connect(#[from] ConnectFailure),
    #[error("HTTP: {0}")]
    Http(hyper::Error),
    #[error("the API server answered {0}")]
    Status(hyper::StatusCode),
    #[error("reading the answer: {0}")]
    Body(String),
    #[error("the answer is not {0}: {1}")]
    Shape(&'static str, serde_json::Error),
    #[error("building the request: {0}")]
    Request(String),
    #[error("the watch ended with an error event: {0}")]
    Event(String),
    #[error("the watch ended after {0:?}, long before its time")]
    Ended(Duration),
}

/// The API server as a client meets it: where it is, which CAs vouch for it, and the pod's own
/// token to show it.
pub(crate) struct ApiServer {
    pub(crate) endpoint: Endpoint,
    tls: TlsConnector,
    own_token: Mutex<OwnToken>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("authority", &self.endpoint.authority)
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// Reads the CA bundle and the pod's own token; fails when either is missing or unusable.
    pub(crate) fn new(
        url: &str,
        ca_path: &Path,
        token_path: PathBuf,
        token_refresh: Duration,
    ) -> Result<Self, KubeError> {
        Ok(ApiServer {
            endpoint: parse_endpoint(url)?,
            tls: tls_connector(ca_path)?,
            own_token: Mutex::new(OwnToken::load(token_path, token_refresh)?),
        })
    }

    /// The pod's own token as it is now (re-read when due).
    pub(crate) fn own_token(&self) -> String {
        self.own_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .current(Instant::now())
    }

    /// A request to `path` with the Host, Authorization (the own token) and Accept headers.
    pub(crate) fn request(&self, method: hyper::Method, path: &str, accept: &str) -> Builder {
        hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.endpoint.authority)
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.own_token()),
            )
            .header(hyper::header::ACCEPT, accept)
    }

    /// A fresh HTTP/1 connection over TLS; the caller drives the connection future.
    pub(crate) async fn connect<B>(
        &self,
    ) -> Result<(SendRequest<B>, Connection<ApiIo, B>), ConnectFailure>
    where
        B: hyper::body::Body + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
            .await
            .map_err(ConnectFailure::Connect)?;
        let _ = tcp.set_nodelay(true);
        let tls = self
            .tls
            .connect(self.endpoint.server_name.clone(), tcp)
            .await
            .map_err(ConnectFailure::Tls)?;
        hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(ConnectFailure::Http)
    }
}

/// A connection's driver task, aborted when this is dropped: nothing outlives its request.
pub(crate) struct Driver(tokio::task::JoinHandle<()>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ApiServer {
    /// Sends `request` on a fresh connection driven by a task of its own; the answer's body can
    /// be read (streamed) while the returned [`Driver`] lives.
    pub(crate) async fn send(
        &self,
        request: hyper::Request<http_body_util::Empty<hyper::body::Bytes>>,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, Driver), ConnectFailure> {
        let (mut sender, conn) = self.connect().await?;
        let driver = Driver(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let response = sender
            .send_request(request)
            .await
            .map_err(ConnectFailure::Http)?;
        Ok((response, driver))
    }
}

/// A keep-alive HTTP/1 connection to the API server and the task that drives it.
type Kept = (
    SendRequest<http_body_util::Full<hyper::body::Bytes>>,
    Driver,
);

/// Keep-alive connections for the TokenReviews, each kept for the next review while it lasts,
/// so that a review costs a request, not a TCP and TLS handshake. One connection serves every
/// review in turn while they come one at a time; only concurrent reviews open more, and the
/// caller bounds how many run at once (the admission's lanes), so at most that many are open.
#[derive(Default)]
pub(crate) struct ReviewPool {
    idle: Mutex<Vec<Kept>>,
    /// Connections opened so far (for the tests and the logs).
    pub(crate) opened: std::sync::atomic::AtomicU64,
}

impl ReviewPool {
    /// Sends `request` on a kept connection (or a new one) and reads the answer whole, up to
    /// `limit` bytes; the connection is kept again when the exchange went through. A kept
    /// connection the API server has closed meanwhile is replaced once, for a new one.
    pub(crate) async fn exchange(
        &self,
        api: &ApiServer,
        request: impl Fn()
            -> Result<hyper::Request<http_body_util::Full<hyper::body::Bytes>>, ApiFailure>,
        limit: usize,
    ) -> Result<(hyper::StatusCode, hyper::body::Bytes), ApiFailure> {
        use http_body_util::BodyExt;
        let mut kept = self.take();
        loop {
            let reused = kept.is_some();
            let (mut sender, driver) = match kept.take() {
                Some(k) => k,
                None => {
                    let (sender, conn) = api.connect().await?;
                    self.opened
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    (
                        sender,
                        Driver(tokio::spawn(async move {
                            let _ = conn.await;
                        })),
                    )
                }
            };
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(request()?).await,
                Err(e) => Err(e),
            };
            let response = match sent {
                Ok(r) => r,
                // Closed by the API server while it was kept: once more, on a new one.
                Err(_) if reused => continue,
                Err(e) => return Err(ApiFailure::Http(e)),
            };
            let status = response.status();
            let bytes = http_body_util::Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|e| ApiFailure::Body(e.to_string()))?
                .to_bytes();
            self.keep((sender, driver));
            return Ok((status, bytes));
        }
    }

    fn take(&self) -> Option<Kept> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(k) = idle.pop() {
            if !k.0.is_closed() {
                return Some(k);
            }
        }
        None
    }

    fn keep(&self, k: Kept) {
        if !k.0.is_closed() {
            self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(k);
        }
    }
}
