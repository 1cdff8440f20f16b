//! The HTTP client of the scenarios, and the statistics of their samples.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::results::Percentiles;

#[derive(Clone)]
pub(crate) struct Http {
    pub(crate) client: Client<HttpConnector, Full<Bytes>>,
    pub(crate) base: String,
}

impl Http {
    pub(crate) fn new(base: &str) -> Self {
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(256)
            .build_http();
        Http {
            client,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    /// POSTs JSON; returns the status and the parsed body (`Null` when empty).
    pub(crate) async fn post(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        client_ip: Option<&str>,
    ) -> Result<(u16, Value)> {
        let req = self.json_post(path, token, body, client_ip)?;
        self.send(req).await.with_context(|| format!("POST {path}"))
    }

    /// POSTs JSON as [`Http::post`] does, but a 503 is sent again after its `Retry-After` (1 s
    /// without one), `attempts` times in all at most; the last answer is returned.
    pub(crate) async fn post_retrying_503(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        attempts: u32,
    ) -> Result<(u16, Value)> {
        for _ in 1..attempts {
            let req = self.json_post(path, token, body, None)?;
            let resp = self
                .client
                .request(req)
                .await
                .with_context(|| format!("POST {path}"))?;
            if resp.status() != hyper::StatusCode::SERVICE_UNAVAILABLE {
                return answer(resp).await;
            }
            tokio::time::sleep(retry_after(resp.headers())).await;
        }
        self.post(path, token, body, None).await
    }

    fn json_post(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        client_ip: Option<&str>,
    ) -> Result<hyper::Request<Full<Bytes>>> {
        let mut req = self
            .request(hyper::Method::POST, path, token)
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(ip) = client_ip {
            req = req.header("x-client-ip", ip);
        }
        Ok(req.body(Full::new(Bytes::from(serde_json::to_vec(body)?)))?)
    }

    /// GETs a path; returns the status and the parsed body (`Null` when empty).
    pub(crate) async fn get(&self, path: &str, token: &str) -> Result<(u16, Value)> {
        let req = self
            .request(hyper::Method::GET, path, token)
            .body(Full::new(Bytes::new()))?;
        self.send(req).await.with_context(|| format!("GET {path}"))
    }

    /// `GET /metrics` (no token): the exposition text; an error unless it answers 200.
    pub(crate) async fn metrics(&self) -> Result<String> {
        let req = hyper::Request::builder()
            .uri(format!("{}/metrics", self.base))
            .body(Full::new(Bytes::new()))?;
        let resp = self.client.request(req).await.context("GET /metrics")?;
        if resp.status() != hyper::StatusCode::OK {
            bail!("GET /metrics answered {}", resp.status());
        }
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A request for `path` of the server, as `token`.
    fn request(
        &self,
        method: hyper::Method,
        path: &str,
        token: &str,
    ) -> hyper::http::request::Builder {
        hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
    }

    /// Sends a request; returns the status and the parsed body (`Null` when empty or not JSON).
    async fn send(&self, req: hyper::Request<Full<Bytes>>) -> Result<(u16, Value)> {
        answer(self.client.request(req).await?).await
    }

    /// `POST /v1/leases` for one lease without waiting: the grant, `None` when the queue was
    /// empty (204); any other answer is an error.
    pub(crate) async fn lease_now(&self, token: &str, worker_id: &str) -> Result<Option<Value>> {
        let body = json!({"worker_id": worker_id, "wait_ms": 0});
        let (status, body) = self.post("/v1/leases", token, &body, None).await?;
        match status {
            200 => Ok(Some(body)),
            204 => Ok(None),
            _ => bail!("lease answered {status}: {body}"),
        }
    }

    /// POSTs JSON and answers the parsed body, unless the status is not `expected`: then the
    /// error says `<what> answered <status>: <body>`.
    pub(crate) async fn post_expecting(
        &self,
        what: &str,
        expected: u16,
        path: &str,
        token: &str,
        body: &Value,
    ) -> Result<Value> {
        let (status, body) = self.post(path, token, body, None).await?;
        if status != expected {
            bail!("{what} answered {status}: {body}");
        }
        Ok(body)
    }

    /// `POST /v1/leases/{id}/complete` with `body`; the answer, unless it is not a 200.
    pub(crate) async fn complete(&self, token: &str, id: &str, body: &Value) -> Result<Value> {
        let path = format!("/v1/leases/{id}/complete");
        self.post_expecting("complete", 200, &path, token, body)
            .await
    }

    /// `POST /v1/items` (as the operator); the answer, unless it is not a 201.
    pub(crate) async fn enqueue(&self, token: &str, item: &Value) -> Result<Value> {
        self.post_expecting("enqueue", 201, "/v1/items", token, item)
            .await
    }
}

/// The status of an answer and its body parsed (`Null` when empty or not JSON).
async fn answer(resp: hyper::Response<hyper::body::Incoming>) -> Result<(u16, Value)> {
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    Ok((status, value))
}

/// The wait a `Retry-After` of whole seconds asks for; 1 s when there is none or it is a date.
fn retry_after(headers: &hyper::HeaderMap) -> Duration {
    let secs = headers
        .get(hyper::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1);
    Duration::from_secs(secs)
}

/// An open `GET /v1/events` stream ([`Http::events`]).
pub(crate) struct EventStream {
    body: hyper::body::Incoming,
}

impl Http {
    /// Opens `GET /v1/events` as `token`, resuming after `last_event_id` if given: an error
    /// unless it answers 200.
    pub(crate) async fn events(
        &self,
        token: &str,
        last_event_id: Option<i64>,
    ) -> Result<EventStream> {
        let mut req = self
            .request(hyper::Method::GET, "/v1/events", token)
            .header(hyper::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id.to_string());
        }
        let req = req.body(Full::new(Bytes::new()))?;
        let resp = self.client.request(req).await.context("GET /v1/events")?;
        if resp.status() != hyper::StatusCode::OK {
            bail!("GET /v1/events answered {}", resp.status());
        }
        Ok(EventStream {
            body: resp.into_body(),
        })
    }
}

impl EventStream {
    /// The next chunk of the stream's data, `None` once `stop` changes; an error when the
    /// stream ends or fails.
    pub(crate) async fn next_chunk(
        &mut self,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Option<Bytes>> {
        loop {
            let frame = tokio::select! {
                f = self.body.frame() => f,
                _ = stop.changed() => return Ok(None),
            };
            let Some(frame) = frame else {
                bail!("the stream ended");
            };
            if let Ok(data) = frame?.into_data() {
                return Ok(Some(data));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics

pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// `{"n", "p50_ms", "p99_ms"}` of a sample (nearest-rank percentiles).
pub(crate) fn percentiles(mut sample: Vec<Duration>) -> Percentiles {
    sample.sort_unstable();
    let at = |p: usize| -> Option<f64> {
        if sample.is_empty() {
            return None;
        }
        let rank = (sample.len() * p).div_ceil(100).max(1);
        Some(ms(sample[rank - 1]))
    };
    Percentiles {
        n: sample.len() as u64,
        p50_ms: at(50),
        p99_ms: at(99),
    }
}

pub(crate) fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| (a / b * 1000.0).round() / 1000.0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::retry_after;

    fn headers(retry: Option<&str>) -> hyper::HeaderMap {
        let mut h = hyper::HeaderMap::new();
        if let Some(v) = retry {
            h.insert(hyper::header::RETRY_AFTER, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_retry_after_of_seconds_is_waited_and_one_second_without_one_or_with_a_date() {
        assert_eq!(
            [
                retry_after(&headers(Some("3"))),
                retry_after(&headers(None)),
                retry_after(&headers(Some("Wed, 21 Oct 2026 07:28:00 GMT"))),
            ],
            [
                Duration::from_secs(3),
                Duration::from_secs(1),
                Duration::from_secs(1)
            ]
        );
    }
}
