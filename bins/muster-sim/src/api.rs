//! A small JSON client for the calls the worker library does not make (enqueue as operator,
//! digest reports as Shipkeeper), with failover across replicas.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use muster_worker::exchange;
use serde_json::Value;

/// Why a call got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("transport: {0}")]
    Transport(String),
    #[error("timed out")]
    Timeout,
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl CallError {
    /// The status key for [`crate::stats::Stats`].
    pub fn status(&self) -> &'static str {
        match self {
            CallError::Transport(_) => "transport",
            CallError::Timeout => "timeout",
            CallError::Invalid(_) => "local",
        }
    }
}

/// An answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// The `E_…` code of an error body, or `""`.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

/// One principal's client of one or more replicas. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Api {
    bases: Arc<Vec<String>>,
    current: Arc<AtomicUsize>,
    auth: HeaderValue,
    http: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Api {
    /// A client of `bases` (`http://host:port`, one per replica) with bearer `token`.
    pub fn new(bases: &[String], token: &str) -> Result<Api, CallError> {
        if bases.is_empty() {
            return Err(CallError::Invalid("no --url given".into()));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| CallError::Invalid("token is not a header value".into()))?;
        auth.set_sensitive(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .build_http();
        Ok(Api {
            bases: Arc::new(
                bases
                    .iter()
                    .map(|b| b.trim_end_matches('/').to_owned())
                    .collect(),
            ),
            current: Arc::default(),
            auth,
            http,
            timeout: Duration::from_secs(10),
        })
    }

    /// The replica calls go to now.
    pub fn base(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// Moves on to the next replica; whether there is another one.
    pub fn failover(&self) -> bool {
        self.current.fetch_add(1, Ordering::Relaxed);
        self.bases.len() > 1
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Request<Full<Bytes>>, CallError> {
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base()))
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .header(AUTHORIZATION, self.auth.clone())
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| CallError::Invalid(e.to_string()))
    }

    /// One call to the current replica.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, CallError> {
        let req = self.request(method, path, body)?;
        let round_trip = async {
            let (head, bytes) = exchange(&self.http, req)
                .await
                .map_err(CallError::Transport)?;
            Ok(Answer {
                status: head.status.as_u16(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            })
        };
        tokio::time::timeout(self.timeout, round_trip)
            .await
            .map_err(|_| CallError::Timeout)?
    }
}
