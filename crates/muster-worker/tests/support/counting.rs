//! An HTTP proxy in front of a server that records every worker call passing through it, in
//! order, as `"<call> <status>"`: `lease`, `complete`, `complete+lease_next` (a completion whose
//! body asks `"lease_next": true`), `fail`, `heartbeat`, … — the round trips a worker made —
//! with the `traceparent` header each carried.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;

pub struct CountingProxy {
    pub addr: SocketAddr,
    calls: Arc<Mutex<Vec<Call>>>,
}

/// One call that passed: `"<call> <status>"` and its `traceparent` header.
#[derive(Debug, Clone)]
struct Call {
    answered: String,
    traceparent: Option<String>,
}

impl CountingProxy {
    /// A proxy to `upstream` on a port of its own.
    pub async fn start(upstream: SocketAddr) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
        let log = calls.clone();
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, client) = (log.clone(), client.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (log, client) = (log.clone(), client.clone());
                        async move { forward(upstream, &client, &log, req).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        CountingProxy { addr, calls }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every call so far, in the order the answers came.
    pub fn calls(&self) -> Vec<String> {
        let calls = self.calls.lock().unwrap();
        calls.iter().map(|c| c.answered.clone()).collect()
    }

    /// The `traceparent` header of each call so far answered `answered` (`"complete 200"`), in
    /// order.
    pub fn traceparents(&self, answered: &str) -> Vec<Option<String>> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c.answered == answered)
            .map(|c| c.traceparent.clone())
            .collect()
    }

    /// The calls so far that the server answered 200.
    pub fn answered_200(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| c.strip_suffix(" 200").map(str::to_owned))
            .collect()
    }
}

async fn forward(
    upstream: SocketAddr,
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    log: &Mutex<Vec<Call>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let (mut parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let call = call_of(parts.uri.path(), &body);
    let traceparent = parts
        .headers
        .get("traceparent")
        .map(|v| v.to_str().unwrap().to_owned());
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("http://{upstream}{path}").parse().unwrap();
    let answer = client
        .request(Request::from_parts(parts, Full::new(body)))
        .await
        .expect("the upstream server answers");
    let (parts, body) = answer.into_parts();
    let body = body.collect().await?.to_bytes();
    log.lock().unwrap().push(Call {
        answered: format!("{call} {}", parts.status.as_u16()),
        traceparent,
    });
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// The name of the worker call `path` with `body`.
fn call_of(path: &str, body: &[u8]) -> String {
    let asks_next = serde_json::from_slice::<Value>(body)
        .is_ok_and(|b| b.get("lease_next") == Some(&Value::Bool(true)));
    let name = match path.rsplit('/').next().unwrap_or_default() {
        "leases" => "lease",
        "complete" if asks_next => "complete+lease_next",
        other => other,
    };
    name.to_owned()
}
