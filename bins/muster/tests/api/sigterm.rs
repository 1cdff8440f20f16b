//! SIGTERM to a real `muster` process under load: no request fails, no lease is lost.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::harness::{TempDir, TestApp, lease_path, serve_process, token};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

enum Outcome {
    Answered(StatusCode, Value),
    /// The server was not there to connect to: the request was never sent.
    NotConnected,
    /// The request was sent and no answer came: a failed request.
    Failed(String),
}

async fn post(client: &HttpClient, base: &str, path: &str, who: &str, body: Value) -> Outcome {
    let req = Request::post(format!("{base}{path}"))
        .header("authorization", format!("Bearer {}", token(who)))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    match client.request(req).await {
        Ok(res) => {
            let status = res.status();
            let bytes = res
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Outcome::Answered(
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }
        Err(e) if e.is_connect() => Outcome::NotConnected,
        Err(e) => Outcome::Failed(format!("{e:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_fails_no_request_and_loses_no_lease() {
    let db = muster_testkit::fresh_db().await;
    let dir = TempDir::new("muster-sigterm");
    let (mut serve, addr) = serve_process(&db.app_url, &dir);
    let base = format!("http://{addr}");
    let mut child = crate::harness::KillOnDrop(Some(serve.spawn().expect("start muster")));
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut up = false;
    for _ in 0..200 {
        if let Outcome::Answered(StatusCode::CREATED, _) = post(
            &client,
            &base,
            "/v1/items",
            "operator",
            json!({"kind": "trawl", "payload": {}}),
        )
        .await
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "server did not come up");
    for _ in 0..200 {
        let r = post(
            &client,
            &base,
            "/v1/items",
            "operator",
            json!({"kind": "trawl", "payload": {}}),
        )
        .await;
        assert!(matches!(r, Outcome::Answered(StatusCode::CREATED, _)));
    }

    // Eight workers: lease, work a little, complete; until the server is gone.
    let stop = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (client, base, stop, completed) = (
                client.clone(),
                base.clone(),
                stop.clone(),
                completed.clone(),
            );
            tokio::spawn(async move {
                let mut failures = Vec::new();
                let mut unfinished = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let lease = match post(
                        &client,
                        &base,
                        "/v1/leases",
                        "worker:trawl",
                        json!({"worker_id": format!("w{w}"), "wait_ms": 200}),
                    )
                    .await
                    {
                        Outcome::Answered(StatusCode::OK, l) => l,
                        Outcome::Answered(StatusCode::NO_CONTENT, _) => continue,
                        Outcome::Answered(s, b) => {
                            failures.push(format!("lease answered {s}: {b}"));
                            continue;
                        }
                        Outcome::NotConnected => break,
                        Outcome::Failed(e) => {
                            failures.push(format!("lease: {e}"));
                            break;
                        }
                    };
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    match post(
                        &client,
                        &base,
                        &lease_path(&lease, "complete"),
                        "worker:trawl",
                        json!({"result": {"w": w}}),
                    )
                    .await
                    {
                        Outcome::Answered(StatusCode::OK, _) => {
                            completed.fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Answered(s, b) => {
                            failures.push(format!("complete answered {s}: {b}"))
                        }
                        Outcome::NotConnected => {
                            unfinished.push((lease, w));
                            break;
                        }
                        Outcome::Failed(e) => {
                            failures.push(format!("complete: {e}"));
                            unfinished.push((lease, w));
                            break;
                        }
                    }
                }
                (failures, unfinished)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let done_before = completed.load(Ordering::Relaxed);
    assert!(done_before > 0, "no work was done before the signal");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let exit = tokio::task::spawn_blocking(move || child.take().wait())
        .await
        .unwrap()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(exit.success(), "muster exited with {exit}");

    let mut failures = Vec::new();
    let mut unfinished = Vec::new();
    for w in workers {
        let (f, u) = w.await.unwrap();
        failures.extend(f);
        unfinished.extend(u);
    }
    assert_eq!(
        failures,
        Vec::<String>::new(),
        "requests failed during the drain"
    );

    // Leases handed out before the signal are still valid on the next server.
    let next = TestApp::spawn_on(db, |_| {}).await;
    for (lease, w) in &unfinished {
        let r = next.complete(lease, json!({"result": {"w": w}})).await;
        assert_eq!(
            r.status,
            StatusCode::OK,
            "lease {} was lost",
            lease["lease_id"]
        );
    }
    let done = next.count("core.items WHERE state = 'done'").await;
    assert_eq!(
        done as u64,
        completed.load(Ordering::Relaxed) + unfinished.len() as u64
    );
    assert_eq!(next.count("core.items WHERE state = 'leased'").await, 0);
    next.verify_ledger().await;
}
