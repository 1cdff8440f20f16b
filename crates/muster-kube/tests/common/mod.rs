//! The fake Kubernetes API server (loopback, real TLS) and fixtures shared by the tests.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use muster_app::auth::{AuthError, Authenticator};
use muster_domain::{Kind, Principal};
use muster_kube::{
    Rate, ServiceAccountMap, TOKENREVIEW_PATH, TokenReviewAuthenticator, TokenReviewSettings,
};
pub use muster_testkit::TempDir;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

pub const OWN_TOKEN: &str = "own-serviceaccount-token-of-muster";
pub const TRAWL_TOKEN: &str = "eyJ-valid-token-of-trawl-0123456789";
pub const CONN_TOKEN: &str = "eyJ-valid-token-of-conn-0123456789";
pub const UNMAPPED_TOKEN: &str = "eyJ-valid-token-of-default-0123456789";
pub const EXPIRED_TOKEN: &str = "eyJ-expired-token-0123456789";
pub const BOGUS_TOKEN: &str = "eyJ-bogus-token-0123456789";
/// The trawl ServiceAccount's default token: valid, but meant for the API server alone.
pub const API_AUDIENCE_TOKEN: &str = "eyJ-default-token-of-trawl-0123456789";
/// The API server's own audience.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

pub const MAP: &str = r#"{"serviceaccounts": {
    "system:serviceaccount:cs-workers:trawl": "worker:trawl",
    "system:serviceaccount:clearedstack:conn": "conn"
}}"#;

/// How the fake API server behaves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Review,
    /// Authenticates as `Review` does but says nothing of audiences (as an API server that
    /// ignores them would).
    IgnoresAudiences,
    /// Answers as `Review` does, after 100 ms.
    Slow,
    /// Answers as `Review` does, after 500 ms.
    Sluggish,
    /// Answers every token as not authenticated (as after its ServiceAccount was deleted).
    Revoked,
    /// Answers the fixtures' tokens as `Review` does and never answers any other.
    HangsUnknown,
    Status500,
    /// Refuses Muster's own token as Kubernetes does when its RBAC binding is gone.
    Status403,
    Hang,
}

/// A self-signed CA and a certificate it signed for localhost and 127.0.0.1.
pub struct Pki {
    pub ca_pem: String,
    pub server: Arc<ServerConfig>,
}

pub fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    Pki {
        ca_pem: ca.pem(),
        server: Arc::new(server),
    }
}

/// The fake API server: answers TokenReviews by token, counts the requests it gets.
pub struct FakeApiServer {
    pub url: String,
    /// How it behaves now; a test may change it.
    pub mode: Arc<std::sync::Mutex<Mode>>,
    pub requests: Arc<AtomicUsize>,
    /// TCP connections accepted.
    pub connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeApiServer {
    /// Behaves as `mode` from the next request on.
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn review(
    authenticated: bool,
    username: Option<&str>,
    error: Option<&str>,
) -> serde_json::Value {
    let mut status = serde_json::json!({"authenticated": authenticated});
    if let Some(u) = username {
        status["user"] =
            serde_json::json!({"username": u, "uid": "1234", "groups": ["system:serviceaccounts"]});
    }
    if let Some(e) = error {
        status["error"] = serde_json::json!(e);
    }
    serde_json::json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {},
        "status": status,
    })
}

pub async fn answer(
    request: Request<Incoming>,
    mode: Mode,
    requests: Arc<AtomicUsize>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    requests.fetch_add(1, Ordering::SeqCst);
    let reply = |status: StatusCode, body: serde_json::Value| {
        let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
        *r.status_mut() = status;
        Ok(r)
    };
    match mode {
        Mode::Hang => std::future::pending().await,
        Mode::Status500 => {
            return reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                serde_json::json!({"kind": "Status", "status": "Failure", "code": 500}),
            );
        }
        Mode::Status403 => {
            return reply(
                StatusCode::FORBIDDEN,
                serde_json::json!({"kind": "Status", "status": "Failure", "code": 403}),
            );
        }
        Mode::Review | Mode::IgnoresAudiences | Mode::Revoked | Mode::HangsUnknown => {}
        Mode::Slow => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        Mode::Sluggish => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
    }
    let authorized = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {OWN_TOKEN}"));
    if request.method() != hyper::Method::POST || request.uri().path() != TOKENREVIEW_PATH {
        return reply(StatusCode::NOT_FOUND, serde_json::json!({"kind": "Status"}));
    }
    if !authorized {
        return reply(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"kind": "Status"}),
        );
    }
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(body["kind"], "TokenReview");
    let token = body["spec"]["token"].as_str().unwrap_or_default();
    let fixture = [
        TRAWL_TOKEN,
        CONN_TOKEN,
        UNMAPPED_TOKEN,
        EXPIRED_TOKEN,
        BOGUS_TOKEN,
    ];
    if mode == Mode::HangsUnknown && !fixture.contains(&token) {
        std::future::pending::<()>().await;
    }
    if mode == Mode::Revoked {
        return reply(StatusCode::CREATED, review(false, None, None));
    }
    let (user, meant_for) = match token {
        TRAWL_TOKEN => ("system:serviceaccount:cs-workers:trawl", "muster"),
        CONN_TOKEN => ("system:serviceaccount:clearedstack:conn", "muster"),
        UNMAPPED_TOKEN => ("system:serviceaccount:default:default", "muster"),
        API_AUDIENCE_TOKEN => ("system:serviceaccount:cs-workers:trawl", API_AUDIENCE),
        EXPIRED_TOKEN => {
            return reply(
                StatusCode::CREATED,
                review(false, None, Some("token expired")),
            );
        }
        _ => return reply(StatusCode::CREATED, review(false, None, None)),
    };
    // As Kubernetes does: the token must be meant for one of the audiences asked for (the
    // API server's own when none are), and the answer names those it is meant for.
    let asked: Vec<String> = match body["spec"]["audiences"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => vec![API_AUDIENCE.to_owned()],
    };
    if mode == Mode::IgnoresAudiences {
        return reply(StatusCode::CREATED, review(true, Some(user), None));
    }
    if !asked.iter().any(|a| a == meant_for) {
        return reply(
            StatusCode::CREATED,
            review(
                false,
                None,
                Some("token audiences is invalid for the target audiences"),
            ),
        );
    }
    let mut answer = review(true, Some(user), None);
    answer["status"]["audiences"] = serde_json::json!([meant_for]);
    reply(StatusCode::CREATED, answer)
}

pub async fn fake_api_server(pki: &Pki, mode: Mode) -> FakeApiServer {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let mode = Arc::new(std::sync::Mutex::new(mode));
    let now = mode.clone();
    let (url, connections, task) = serve_tls(pki, move |req| {
        let mode = *now.lock().unwrap();
        answer(req, mode, counter.clone())
    })
    .await;
    FakeApiServer {
        url,
        mode,
        requests,
        connections,
        task,
    }
}

/// Serves HTTPS on a free loopback port with `pki`'s server certificate, answering every
/// request with `handle`: the server's URL, the count of TCP connections it accepted, and the
/// task that accepts them.
pub async fn serve_tls<F, Fut, B>(
    pki: &Pki,
    handle: F,
) -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = TlsAcceptor::from(pki.server.clone());
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            accepted.fetch_add(1, Ordering::SeqCst);
            let (acceptor, handle) = (acceptor.clone(), handle.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), hyper::service::service_fn(handle))
                    .await;
            });
        }
    });
    (format!("https://127.0.0.1:{port}"), connections, task)
}

/// The URL of a loopback port that was just free: nothing listens there.
pub fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("https://127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Settings pointing at `url`, trusting `ca_pem`, with the test's own token and map.
pub fn settings(dir: &TempDir, url: &str, ca_pem: &str) -> TokenReviewSettings {
    let mut s = TokenReviewSettings::new(url, ServiceAccountMap::from_json(MAP).unwrap());
    s.ca_path = dir.write("ca.crt", ca_pem);
    s.token_path = dir.write("token", &format!("{OWN_TOKEN}\n"));
    s
}

pub async fn authenticator_for(
    server: &FakeApiServer,
    pki: &Pki,
    dir: &TempDir,
) -> TokenReviewAuthenticator {
    TokenReviewAuthenticator::new(settings(dir, &server.url, &pki.ca_pem)).unwrap()
}

/// What the trawl worker's and the conn's tokens resolve to.
pub const AS_TRAWL: Result<Option<Principal>, AuthError> = Ok(Some(Principal::Worker(Kind::Trawl)));
pub const AS_CONN: Result<Option<Principal>, AuthError> = Ok(Some(Principal::Conn));
pub const UNAVAILABLE: Result<Option<Principal>, AuthError> = Err(AuthError::Unavailable);

/// A rate no test reaches.
pub const UNLIMITED: Rate = Rate {
    per_second: 1e9,
    burst: u32::MAX,
};

/// An authenticator with the test's settings in front of a fake API server in one mode, and the
/// directory of its files (kept as long as the authenticator).
pub struct Reviewed {
    pub server: FakeApiServer,
    pub auth: TokenReviewAuthenticator,
    pub _dir: TempDir,
}

impl Reviewed {
    pub async fn against(mode: Mode) -> Reviewed {
        Reviewed::with(mode, |_| {}).await
    }

    /// [`against`](Self::against), with the settings adjusted first.
    pub async fn with(mode: Mode, adjust: impl FnOnce(&mut TokenReviewSettings)) -> Reviewed {
        let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
        let server = fake_api_server(&pki, mode).await;
        let mut settings = settings(&dir, &server.url, &pki.ca_pem);
        adjust(&mut settings);
        let auth = TokenReviewAuthenticator::new(settings).unwrap();
        Reviewed {
            server,
            auth,
            _dir: dir,
        }
    }
}

/// What `auth` answers for each of `tokens`, asked in turn.
pub async fn answers<const N: usize>(
    auth: &TokenReviewAuthenticator,
    tokens: [&str; N],
) -> Vec<Result<Option<Principal>, AuthError>> {
    let mut answers = Vec::with_capacity(N);
    for token in tokens {
        answers.push(auth.authenticate(token).await);
    }
    answers
}
