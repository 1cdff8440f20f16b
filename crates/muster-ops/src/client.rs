//! A small JSON client of one Muster replica, with a bearer token like any caller.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_worker::{error_chain, exchange};
use serde_json::Value;

use crate::OpsError;

/// How long one JSON call may take, connection included.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// A client of one replica (`http://host:port`). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    base: String,
    auth: HeaderValue,
    http: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of `base` with bearer `token`. Only `http://` URLs: in the cluster Muster is
    /// reached over its Service or a port-forward.
    pub fn new(base: &str, token: &str) -> Result<Client, OpsError> {
        let base = base.trim_end_matches('/');
        let Some(rest) = base.strip_prefix("http://") else {
            return Err(OpsError::Usage(format!(
                "--url must be an http:// URL, not {base:?}"
            )));
        };
        if rest.is_empty() || rest.contains(['/', '?', '#']) {
            return Err(OpsError::Usage(format!(
                "--url must be http://host:port with no path, not {base:?}"
            )));
        }
        if token.is_empty() {
            return Err(OpsError::Usage(
                "no token: set MUSTER_API_TOKEN (or --api-token)".into(),
            ));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| OpsError::Usage("the token is not a valid header value".into()))?;
        auth.set_sensitive(true);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        Ok(Client {
            base: base.to_owned(),
            auth,
            http: hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .build(connector),
        })
    }

    /// The replica's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        accept: &'static str,
        body: Option<&Value>,
        last_event_id: Option<&str>,
    ) -> Result<Request<Full<Bytes>>, OpsError> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(ACCEPT, accept)
            .header(AUTHORIZATION, self.auth.clone());
        if body.is_some() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let bytes = body.map(Value::to_string).unwrap_or_default();
        req.body(Full::new(Bytes::from(bytes)))
            .map_err(|e| OpsError::Usage(format!("cannot build the request for {path}: {e}")))
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> OpsError {
        OpsError::Unreachable {
            base: self.base.clone(),
            reason: reason.to_string(),
        }
    }

    /// `GET path`: the JSON body of a 2xx answer, or the answer's error.
    pub async fn get(&self, path: &str) -> Result<Value, OpsError> {
        self.call(Method::GET, path, None).await
    }

    /// `POST path`, with a JSON body or none.
    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, OpsError> {
        self.call(Method::POST, path, body).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, OpsError> {
        self.call(Method::PUT, path, Some(body)).await
    }

    /// `GET /metrics`: the Prometheus text, for the figures the feed does not carry.
    pub async fn metrics(&self) -> Result<String, OpsError> {
        let req = self.request(Method::GET, "/metrics", "text/plain", None, None)?;
        match self.exchange(req).await? {
            (200, bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            (status, _) => Err(self.unreachable(format!("/metrics answered {status}"))),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, OpsError> {
        let req = self.request(method, path, "application/json", body, None)?;
        let (status, bytes) = self.exchange(req).await?;
        answer(status, &bytes)
    }

    /// Sends `req` and reads the whole answer within [`CALL_TIMEOUT`]: its status and body.
    async fn exchange(&self, req: Request<Full<Bytes>>) -> Result<(u16, Bytes), OpsError> {
        let round_trip = async {
            let (head, bytes) = exchange(&self.http, req)
                .await
                .map_err(|e| self.unreachable(e))?;
            Ok((head.status.as_u16(), bytes))
        };
        tokio::time::timeout(CALL_TIMEOUT, round_trip)
            .await
            .map_err(|_| {
                self.unreachable(format!("no answer within {} s", CALL_TIMEOUT.as_secs()))
            })?
    }

    /// Opens the live feed (`GET /v1/events`), resuming after `last_event_id`: the response
    /// whose body is the stream, or the answer's error.
    pub async fn open_events(
        &self,
        last_event_id: Option<&str>,
    ) -> Result<Response<Incoming>, OpsError> {
        let req = self.request(
            Method::GET,
            "/v1/events",
            "text/event-stream",
            None,
            last_event_id,
        )?;
        let res = tokio::time::timeout(CALL_TIMEOUT, self.http.request(req))
            .await
            .map_err(|_| self.unreachable("no answer within 15 s"))?
            .map_err(|e| self.unreachable(error_chain(&e)))?;
        if res.status().is_success() {
            return Ok(res);
        }
        let status = res.status().as_u16();
        let bytes = tokio::time::timeout(CALL_TIMEOUT, res.into_body().collect())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Err(answer(status, &bytes)
            .err()
            .unwrap_or_else(|| OpsError::Protocol(format!("the feed answered {status}"))))
    }
}

/// A 2xx answer's JSON body, or the contract's error body as an [`OpsError::Api`].
fn answer(status: u16, bytes: &[u8]) -> Result<Value, OpsError> {
    let body: Option<Value> = serde_json::from_slice(bytes).ok();
    if (200..300).contains(&status) {
        return body
            .ok_or_else(|| OpsError::Protocol(format!("a {status} answer that is not JSON")));
    }
    let error = body.as_ref().map(|b| &b["error"]);
    Err(OpsError::Api {
        status,
        code: error
            .and_then(|e| e["code"].as_str())
            .unwrap_or("(no error code)")
            .to_owned(),
        message: error
            .and_then(|e| e["message"].as_str())
            .unwrap_or("(no message)")
            .to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_becomes_its_status_code_and_message() {
        let e = answer(
            403,
            br#"{"error": {"code": "E_FORBIDDEN", "message": "no"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "the server answered 403 E_FORBIDDEN: no");
    }

    #[test]
    fn only_plain_http_base_urls_are_taken() {
        assert!(Client::new("https://muster:8080", "t").is_err());
        assert!(Client::new("http://muster:8080/v1", "t").is_err());
        assert_eq!(
            Client::new("http://muster:8080/", "t").unwrap().base(),
            "http://muster:8080"
        );
    }

    #[test]
    fn a_client_prints_no_token() {
        let c = Client::new("http://muster:8080", "secret-token-value").unwrap();
        assert!(!format!("{c:?}").contains("secret-token-value"));
    }
}
