//! A string PostgreSQL cannot store (one holding U+0000) is 400 `E_BAD_REQUEST` in every field
//! of every route, never a 500 ("Edge limits" in protocol.md). The walk takes every request
//! example of `docs/openapi.yaml` (every route that takes a body documents one, checked by
//! `openapi.rs`) and puts a NUL into each string and each key of it in turn, so a field or a
//! route added to the document later is walked too.

use hyper::{Method, StatusCode};
use serde_json::Value;

use crate::harness::TestApp;
use crate::openapi::load_openapi;

const NUL: &str = "a\u{0}b";

/// Every documented request with a JSON body: method, path (ids filled), principal, example.
fn documented_bodies() -> Vec<(Method, String, Option<String>, Value)> {
    let doc = load_openapi();
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().into_iter().flatten() {
            let example = &op["requestBody"]["content"]["application/json"]["example"];
            if example.is_null() {
                continue;
            }
            let filled = path
                .replace("{id}", "0192f1f4-8a4e-7cc0-b3c1-4f4f7d0a1b2c")
                .replace("{kind}", "trawl");
            let principal = op["x-muster-example"]["principal"]
                .as_str()
                .map(str::to_owned);
            let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            out.push((method, filled, principal, example.clone()));
        }
    }
    out
}

/// `body` with one string or key replaced by a string holding U+0000: one variant per string
/// and per key, anywhere in it.
fn with_a_nul_in_each_string(body: &Value) -> Vec<Value> {
    match body {
        Value::String(_) => vec![Value::String(NUL.to_owned())],
        Value::Array(items) => (0..items.len())
            .flat_map(|i| {
                with_a_nul_in_each_string(&items[i])
                    .into_iter()
                    .map(move |v| (i, v))
            })
            .map(|(i, v)| {
                let mut a = items.clone();
                a[i] = v;
                Value::Array(a)
            })
            .collect(),
        Value::Object(fields) => {
            let mut out = Vec::new();
            for (k, v) in fields {
                let mut renamed = fields.clone();
                let value = renamed.remove(k).expect("present");
                renamed.insert(format!("{k}\u{0}"), value);
                out.push(Value::Object(renamed));
                for variant in with_a_nul_in_each_string(v) {
                    let mut changed = fields.clone();
                    changed.insert(k.clone(), variant);
                    out.push(Value::Object(changed));
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

#[test]
fn the_walk_covers_the_documented_body_routes() {
    let routes: Vec<String> = documented_bodies()
        .iter()
        .map(|(m, p, _, _)| format!("{m} {p}"))
        .collect();
    for expected in [
        "POST /v1/items",
        "POST /v1/leases",
        "POST /v1/health",
        "PUT /v1/workers/trawl/digest",
        "POST /v1/edits",
    ] {
        assert!(
            routes.iter().any(|r| r == expected),
            "{expected} not walked: {routes:?}"
        );
    }
}

#[tokio::test]
async fn a_nul_in_any_string_of_any_documented_body_is_400_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let before = app.count("core.ledger").await;
    let mut walked = 0;
    for (method, path, principal, example) in documented_bodies() {
        for body in with_a_nul_in_each_string(&example) {
            let res = app
                .raw(
                    method.clone(),
                    &path,
                    principal.as_deref(),
                    body.to_string().into_bytes(),
                )
                .await;
            assert_eq!(
                (res.status, res.code()),
                (StatusCode::BAD_REQUEST, "E_BAD_REQUEST"),
                "{method} {path} with {body}: {:?}",
                res.body
            );
            walked += 1;
        }
    }
    assert!(walked >= 20, "only {walked} strings walked");
    let after = app.count("core.ledger").await;
    assert_eq!(after, before);
}

#[tokio::test]
async fn a_nul_in_a_path_or_a_query_is_400() {
    let app = TestApp::spawn().await;
    for path in ["/v1/items/a%00b", "/v1/edits?state=pending&after=%00"] {
        let res = app.get(path, "operator").await;
        assert_eq!(
            (res.status, res.code()),
            (StatusCode::BAD_REQUEST, "E_BAD_REQUEST"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_malformed_percent_encoding_in_a_path_gets_the_contract_json_error() {
    let app = TestApp::spawn().await;
    let res = app.get("/v1/items/%FF", "operator").await;
    assert_eq!(
        (res.status, res.code()),
        (StatusCode::BAD_REQUEST, "E_BAD_REQUEST")
    );
    assert_eq!(res.headers["content-type"], "application/json");
}
