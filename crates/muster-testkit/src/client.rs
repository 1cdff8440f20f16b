//! `TestApp`'s HTTP client over a real socket: the raw request, for tests that check status
//! codes and bodies exactly, and one helper per use case (enqueue, lease, complete, fail,
//! needs_subtool, heartbeat) that answers the parsed answer.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, Request, StatusCode};
use serde_json::{Value, json};

use crate::server::{TestApp, token};

/// An answer: its status, headers and body (JSON; a body that is not JSON as a JSON string;
/// no body as `null`).
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Resp {
    /// The error code of an error answer (`""` for any other).
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// Asserts that this is the error answer `status` with the error code `code`.
    #[track_caller]
    pub fn assert_error(&self, status: StatusCode, code: &str) {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "{:?}",
            self.body
        );
    }
}

/// The path of `action` (`complete`, `fail`, `heartbeat`, `needs_subtool`) on a lease answer.
pub fn lease_path(lease: &Value, action: &str) -> String {
    let lid = lease["lease_id"]
        .as_str()
        .expect("a lease answer has a lease_id");
    format!("/v1/leases/{lid}/{action}")
}

/// The worker principal that holds a lease answer: `worker:<the item's kind>`.
fn holder(lease: &Value) -> String {
    let kind = lease["item"]["kind"]
        .as_str()
        .expect("a lease answer names its item's kind");
    format!("worker:{kind}")
}

impl TestApp {
    /// Sends a request with the token of `principal` (if any) and a raw body.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        principal: Option<&str>,
        body: Vec<u8>,
    ) -> Resp {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json");
        if let Some(p) = principal {
            req = req.header("authorization", format!("Bearer {}", token(p)));
        }
        self.send(req, body).await
    }

    /// Sends a prepared request with a raw body.
    pub async fn send(&self, req: hyper::http::request::Builder, body: Vec<u8>) -> Resp {
        let res = self
            .client
            .request(
                req.body(Full::new(Bytes::from(body)))
                    .expect("a valid request"),
            )
            .await
            .expect("request");
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res
            .into_body()
            .collect()
            .await
            .expect("the whole body")
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    pub async fn post(&self, path: &str, principal: &str, body: Value) -> Resp {
        self.raw(Method::POST, path, Some(principal), json_bytes(&body))
            .await
    }

    pub async fn put(&self, path: &str, principal: &str, body: Value) -> Resp {
        self.raw(Method::PUT, path, Some(principal), json_bytes(&body))
            .await
    }

    /// `PUT /v1/workers/{kind}/digest` as `principal`: `digest` reported as the image of
    /// `kind`'s workers now deployed.
    pub async fn put_digest(&self, kind: &str, principal: &str, digest: &str) -> Resp {
        self.put(
            &format!("/v1/workers/{kind}/digest"),
            principal,
            json!({ "digest": digest }),
        )
        .await
    }

    pub async fn get(&self, path: &str, principal: &str) -> Resp {
        self.raw(Method::GET, path, Some(principal), Vec::new())
            .await
    }

    /// Enqueues an item as the operator and answers its id.
    pub async fn enqueue(&self, kind: &str, priority: &str, payload: Value) -> String {
        let r = self
            .post(
                "/v1/items",
                "operator",
                json!({"kind": kind, "priority": priority, "payload": payload}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["item_id"].as_str().expect("an item_id").to_owned()
    }

    /// Enqueues `n` items of `kind` and `priority` with empty payloads, one after the other:
    /// their ids.
    pub async fn enqueue_many(&self, kind: &str, priority: &str, n: usize) -> Vec<String> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(self.enqueue(kind, priority, json!({})).await);
        }
        ids
    }

    /// Enqueues `n` normal items of `kind`, `{"n": 0}` … `{"n": n - 1}`, one after the other:
    /// their ids.
    pub async fn enqueue_numbered(&self, kind: &str, n: usize) -> Vec<String> {
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            ids.push(self.enqueue(kind, "normal", json!({ "n": i })).await);
        }
        ids
    }

    /// `GET /v1/items/{id}` as the operator; the item's view.
    pub async fn item(&self, id: &str) -> Value {
        let r = self.get(&format!("/v1/items/{id}"), "operator").await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r.body
    }

    /// Enqueues one `normal` item of `kind` with an empty payload and leases it as worker `w`;
    /// the lease answer.
    pub async fn enqueue_and_lease(&self, kind: &str) -> Value {
        self.enqueue(kind, "normal", json!({})).await;
        self.lease(kind, "w")
            .await
            .expect("the item just enqueued is leasable")
    }

    /// `POST /v1/items/{id}/retry` as `principal`.
    pub async fn retry(&self, id: &str, principal: &str) -> Resp {
        self.post(&format!("/v1/items/{id}/retry"), principal, json!({}))
            .await
    }

    /// `POST /v1/items/retry` as the operator: a bulk retry of what `body` selects.
    pub async fn bulk_retry(&self, body: Value) -> Resp {
        self.post("/v1/items/retry", "operator", body).await
    }

    /// `POST /v1/items/{id}/cancel` as the operator, with `reason`.
    pub async fn cancel(&self, id: &str, reason: &str) -> Resp {
        self.post(
            &format!("/v1/items/{id}/cancel"),
            "operator",
            json!({ "reason": reason }),
        )
        .await
    }

    /// `POST /v1/edits/{id}/decision` as `worker:countersign`: `decision` (`approve` or
    /// `reject`) by the owner `alice`.
    pub async fn decide_edit(&self, id: &str, decision: &str) -> Resp {
        self.post(
            &format!("/v1/edits/{id}/decision"),
            "worker:countersign",
            json!({"decision": decision, "owner": "alice"}),
        )
        .await
    }

    /// `POST /v1/leases` as a worker of `kind`, waiting up to `wait_ms` for work: the answer
    /// as it came (200 with a lease, or 204).
    pub async fn lease_waiting(&self, kind: &str, worker_id: &str, wait_ms: u64) -> Resp {
        self.post(
            "/v1/leases",
            &format!("worker:{kind}"),
            json!({"worker_id": worker_id, "wait_ms": wait_ms}),
        )
        .await
    }

    /// Leases one item of `kind` without waiting; `None` on 204.
    pub async fn lease(&self, kind: &str, worker_id: &str) -> Option<Value> {
        let r = self.lease_waiting(kind, worker_id, 0).await;
        match r.status {
            StatusCode::OK => Some(r.body),
            StatusCode::NO_CONTENT => None,
            other => panic!("lease answered {other}: {:?}", r.body),
        }
    }

    /// Leases one item of `kind`, polling until one is leasable (e.g. after a backoff).
    pub async fn lease_eventually(&self, kind: &str, worker_id: &str) -> Value {
        for _ in 0..2000 {
            if let Some(l) = self.lease(kind, worker_id).await {
                return l;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("no {kind} item became leasable");
    }

    /// Posts `body` to `action` of a lease as the worker that holds it.
    pub async fn on_lease(&self, lease: &Value, action: &str, body: Value) -> Resp {
        self.post(&lease_path(lease, action), &holder(lease), body)
            .await
    }

    /// `POST /v1/leases/{id}/complete` with `body` (`{"result": …, "next": […]}`).
    pub async fn complete(&self, lease: &Value, body: Value) -> Resp {
        self.on_lease(lease, "complete", body).await
    }

    /// `POST /v1/leases/{id}/fail` with `body` (`{"error": {…}, "retryable": …}`).
    pub async fn fail(&self, lease: &Value, body: Value) -> Resp {
        self.on_lease(lease, "fail", body).await
    }

    /// Fails a lease with the worker error `code` and `message`.
    pub async fn fail_with(
        &self,
        lease: &Value,
        code: &str,
        message: &str,
        retryable: bool,
    ) -> Resp {
        let error = json!({"code": code, "message": message});
        self.fail(lease, json!({"error": error, "retryable": retryable}))
            .await
    }

    /// Fails a lease with the error `E_TEST`, "failed on purpose".
    pub async fn fail_on_purpose(&self, lease: &Value, retryable: bool) -> Resp {
        self.fail_with(lease, "E_TEST", "failed on purpose", retryable)
            .await
    }

    /// `POST /v1/leases/{id}/needs_subtool` with `body` (`{"worker_digest": …, "layout": …}`).
    pub async fn needs_subtool(&self, lease: &Value, body: Value) -> Resp {
        self.on_lease(lease, "needs_subtool", body).await
    }

    /// `POST /v1/leases/{id}/heartbeat` from `worker_id`.
    pub async fn heartbeat(&self, lease: &Value, worker_id: &str) -> Resp {
        self.on_lease(lease, "heartbeat", json!({"worker_id": worker_id}))
            .await
    }

    /// `POST /v1/health` as shipkeeper with the report `body` (`{"pods": […], "events": […]}`).
    pub async fn report_health(&self, body: Value) -> Resp {
        self.post("/v1/health", "shipkeeper", body).await
    }

    /// The `/metrics` exposition text (no token needed).
    pub async fn metrics(&self) -> String {
        let r = self.raw(Method::GET, "/metrics", None, vec![]).await;
        assert_eq!(r.status.as_u16(), 200);
        r.body.as_str().expect("metrics are text").to_owned()
    }

    /// The first scrape, polled for up to 10 s, with a line for which `holds` is true. The
    /// queue depths follow the ledger a moment after the answer (the feed's pump counts them).
    pub async fn metrics_with_line(&self, holds: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let scrape = self.metrics().await;
            if scrape.lines().any(&holds) {
                return scrape;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no such line within 10 s: {scrape}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// A JSON body as the bytes sent.
fn json_bytes(body: &Value) -> Vec<u8> {
    body.to_string().into_bytes()
}
