//! `docs/openapi.yaml` stays true: the routes it documents are exactly the routes served, its
//! examples replay against a real server with the documented status and answers that fit the
//! documented schemas, and its error codes are exactly the ones the source can produce.
//!
//! Schemas are checked by a small validator of the JSON Schema subset the document uses (it
//! refuses keywords it does not know, so the document cannot silently outgrow it; `pattern` is
//! accepted but not checked: there is no regex engine among the dependencies).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::TestApp;

const OPENAPI: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
const ROUTES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../crates/muster-http/src/routes.rs"
);
const HTTP_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crates/muster-http/src");
const APP_ERRORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../crates/muster-app/src/error.rs"
);

/// The worker id the setups lease with; the documented examples use the same.
const WORKER_ID: &str = "trawl-7f9c";
const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];
const SETUPS: [&str; 6] = [
    "none",
    "queued_trawl_item",
    "leased_trawl_item",
    "failed_trawl_item",
    "solved_challenge",
    "pending_edit",
];
/// The ownership map of every replay server; the documented edit examples use its target.
const OWNERSHIP_MAP: &str =
    r#"{"version": 1, "targets": {"docs/intro": {"owner": "alice", "title": "Introduction"}}}"#;
/// A quick proof of work for the replays (the default, 20 bits, is for production).
const POW_DIFFICULTY: u8 = 8;

// ---------------------------------------------------------------------------------------------
// The document

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// `docs/openapi.yaml` as JSON (mapping keys become strings: `'200'` and `200` alike), checked
/// to be one OpenAPI 3.2.0 document.
pub(crate) fn load_openapi() -> Value {
    let mut docs = muster_testkit::yaml::documents(&read(OPENAPI))
        .unwrap_or_else(|e| panic!("{OPENAPI}: {e}"));
    assert_eq!(
        docs.len(),
        1,
        "{OPENAPI} must hold exactly one YAML document"
    );
    let doc = docs.remove(0);
    assert_eq!(
        doc["openapi"], "3.2.0",
        "{OPENAPI}: `openapi` must be 3.2.0 (the live feed is described with `itemSchema`)"
    );
    doc
}

/// One documented operation.
struct Operation<'a> {
    method: String,
    path: String,
    op: &'a Value,
}

impl Operation<'_> {
    fn name(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

fn operations(doc: &Value) -> Vec<Operation<'_>> {
    let paths = doc["paths"]
        .as_object()
        .unwrap_or_else(|| panic!("{OPENAPI}: `paths` must be a mapping"));
    let mut out = Vec::new();
    for (path, item) in paths {
        let item = item
            .as_object()
            .unwrap_or_else(|| panic!("{OPENAPI}: paths.{path} must be a mapping"));
        for (key, op) in item {
            if HTTP_METHODS.contains(&key.as_str()) {
                out.push(Operation {
                    method: key.to_uppercase(),
                    path: path.clone(),
                    op,
                });
            }
        }
    }
    out
}

/// Follows `$ref`s (local JSON pointers only) to the object they name.
fn deref<'a>(doc: &'a Value, mut v: &'a Value) -> &'a Value {
    for _ in 0..16 {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => v = pointer(doc, r),
            None => return v,
        }
    }
    panic!("{OPENAPI}: $ref chain too long (a cycle?)")
}

fn pointer<'a>(doc: &'a Value, r: &str) -> &'a Value {
    let p = r
        .strip_prefix('#')
        .unwrap_or_else(|| panic!("{OPENAPI}: only local $refs are used, found {r:?}"));
    doc.pointer(p)
        .unwrap_or_else(|| panic!("{OPENAPI}: $ref {r:?} names nothing"))
}

fn is_public(op: &Value) -> bool {
    op.get("security")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
}

// ---------------------------------------------------------------------------------------------
// A validator for the JSON Schema subset of the document

/// Keywords that only annotate.
const ANNOTATIONS: [&str; 5] = ["description", "default", "example", "title", "deprecated"];
/// Keywords understood but not checked.
const UNCHECKED: [&str; 1] = ["pattern"];

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        other => panic!("{OPENAPI}: unknown schema type {other:?}"),
    }
}

/// Checks `inst` against `schema`, pushing one message per violation (with the JSON path).
fn validate(doc: &Value, schema: &Value, inst: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => return errors.push(format!("{at}: nothing is allowed here")),
            other => panic!("{OPENAPI}: a schema must be a mapping, found {other}"),
        }
    };
    for (key, value) in s {
        match key.as_str() {
            "$ref" => {
                let target = pointer(doc, value.as_str().expect("$ref is a string"));
                validate(doc, target, inst, at, errors);
            }
            "type" => {
                let types: Vec<&str> = match value {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    other => panic!("{OPENAPI}: bad `type` {other}"),
                };
                if !types.iter().any(|t| type_matches(t, inst)) {
                    errors.push(format!("{at}: {inst} is not of type {value}"));
                }
            }
            "enum" => {
                let allowed = value.as_array().expect("enum is a list");
                if !allowed.contains(inst) {
                    errors.push(format!("{at}: {inst} is not one of {value}"));
                }
            }
            "const" => {
                if inst != value {
                    errors.push(format!("{at}: {inst} is not {value}"));
                }
            }
            "format" => check_format(value.as_str().unwrap_or(""), inst, at, errors),
            // A string that carries JSON: checked here (JSON Schema only annotates with these).
            "contentMediaType" => {
                assert_eq!(
                    value, "application/json",
                    "{OPENAPI}: only contentMediaType application/json is understood"
                );
                if let Some(text) = inst.as_str()
                    && serde_json::from_str::<Value>(text).is_err()
                {
                    errors.push(format!("{at}: {text:?} is not JSON"));
                }
            }
            "contentSchema" => {
                if let Some(parsed) = inst.as_str().and_then(|t| serde_json::from_str(t).ok()) {
                    validate(doc, value, &parsed, &format!("{at}(json)"), errors);
                }
            }
            "minimum" | "maximum" => {
                if let (Some(n), Some(limit)) = (inst.as_f64(), value.as_f64())
                    && !within_bound(key, n, limit)
                {
                    errors.push(format!("{at}: {n} is outside {key} {limit}"));
                }
            }
            "minLength" | "maxLength" => {
                if let (Some(text), Some(limit)) = (inst.as_str(), value.as_u64()) {
                    let n = text.chars().count() as u64;
                    if !within_bound(key, n, limit) {
                        errors.push(format!("{at}: {text:?} breaks {key} {limit}"));
                    }
                }
            }
            "required" => {
                if let Some(obj) = inst.as_object() {
                    for name in value.as_array().expect("required is a list") {
                        let name = name.as_str().expect("required names are strings");
                        if !obj.contains_key(name) {
                            errors.push(format!("{at}: required field `{name}` is missing"));
                        }
                    }
                }
            }
            "properties" => {
                if let Some(obj) = inst.as_object() {
                    let props = value.as_object().expect("properties is a mapping");
                    for (name, sub) in props {
                        if let Some(v) = obj.get(name) {
                            validate(doc, sub, v, &format!("{at}.{name}"), errors);
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(obj) = inst.as_object() {
                    let known: BTreeSet<&str> = s
                        .get("properties")
                        .and_then(Value::as_object)
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    for (name, v) in obj.iter().filter(|(k, _)| !known.contains(k.as_str())) {
                        match value {
                            Value::Bool(false) => {
                                errors.push(format!("{at}: field `{name}` is not documented"))
                            }
                            other => validate(doc, other, v, &format!("{at}.{name}"), errors),
                        }
                    }
                }
            }
            "minItems" | "maxItems" => {
                if let Some(items) = inst.as_array() {
                    let bound = value.as_u64().expect("minItems/maxItems is a number") as usize;
                    if !within_bound(key, items.len(), bound) {
                        errors.push(format!(
                            "{at}: {} items is outside {key} {bound}",
                            items.len()
                        ));
                    }
                }
            }
            "items" => {
                if let Some(items) = inst.as_array() {
                    for (i, v) in items.iter().enumerate() {
                        validate(doc, value, v, &format!("{at}[{i}]"), errors);
                    }
                }
            }
            "anyOf" | "oneOf" => {
                let branches = value.as_array().expect("anyOf/oneOf is a list");
                let passing = branches
                    .iter()
                    .filter(|b| {
                        let mut e = Vec::new();
                        validate(doc, b, inst, at, &mut e);
                        e.is_empty()
                    })
                    .count();
                let ok = if key == "anyOf" {
                    passing > 0
                } else {
                    passing == 1
                };
                if !ok {
                    errors.push(format!(
                        "{at}: {inst} matches {passing} of the {key} branches {value}"
                    ));
                }
            }
            "allOf" => {
                for b in value.as_array().expect("allOf is a list") {
                    validate(doc, b, inst, at, errors);
                }
            }
            k if ANNOTATIONS.contains(&k) || UNCHECKED.contains(&k) => {}
            other => panic!(
                "{OPENAPI}: schema keyword `{other}` is not understood by the validator in \
                 bins/muster/tests/api/openapi.rs; teach it the keyword or do without"
            ),
        }
    }
}

/// The keys of the mapping `v`; panics with `not_a_mapping` if it is none.
fn key_set<'a>(v: &'a Value, not_a_mapping: &str) -> BTreeSet<&'a str> {
    v.as_object()
        .unwrap_or_else(|| panic!("{not_a_mapping}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// Whether `n` keeps the `min*` or `max*` bound `limit` that `key` names.
fn within_bound<T: PartialOrd>(key: &str, n: T, limit: T) -> bool {
    if key.starts_with("min") {
        n >= limit
    } else {
        n <= limit
    }
}

fn check_format(format: &str, inst: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(text) = inst.as_str() else { return };
    let ok = match format {
        "uuid" => uuid::Uuid::parse_str(text).is_ok(),
        "date-time" => {
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                .is_ok()
        }
        other => panic!("{OPENAPI}: format {other:?} is not understood by the validator"),
    };
    if !ok {
        errors.push(format!("{at}: {text:?} is not a {format}"));
    }
}

fn schema_errors(doc: &Value, schema: &Value, inst: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate(doc, schema, inst, "$", &mut errors);
    errors
}

// ---------------------------------------------------------------------------------------------
// The served routes, read from the router's source

/// The source with comments blanked out (string literals kept intact).
fn without_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            out.push_str(&src[start..i]);
        } else if src[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if src[i..].starts_with("/*") {
            let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.push(' ');
            i = end;
        } else {
            let ch = src[i..].chars().next().expect("inside the string");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The non-test part of a source file: everything before its first `#[cfg(test)]`.
fn non_test(src: &str) -> &str {
    src.find("#[cfg(test)]").map_or(src, |i| &src[..i])
}

struct Cursor<'a> {
    s: &'a str,
    i: usize,
}

impl Cursor<'_> {
    fn ws(&mut self) {
        while self.s[self.i..].starts_with(|c: char| c.is_whitespace()) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: char) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(c) {
            self.i += c.len_utf8();
            true
        } else {
            false
        }
    }
    fn string_literal(&mut self) -> Option<String> {
        self.ws();
        let rest = self.s[self.i..].strip_prefix('"')?;
        let end = rest.find('"')?;
        self.i += end + 2;
        Some(rest[..end].to_owned())
    }
    /// A path expression such as `get` or `axum::routing::put`.
    fn path_expr(&mut self) -> String {
        self.ws();
        let len = self.s[self.i..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(self.s.len() - self.i);
        let p = self.s[self.i..self.i + len].to_owned();
        self.i += len;
        p
    }
    /// Skips a balanced `( … )` group, the opening parenthesis already eaten.
    fn skip_group(&mut self) {
        let mut depth = 1;
        while depth > 0 {
            let c = self.s[self.i..]
                .chars()
                .next()
                .expect("unbalanced parentheses in the router source");
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                '"' => {
                    self.string_literal();
                    continue;
                }
                _ => {}
            }
            self.i += c.len_utf8();
        }
    }
    fn context(&self, at: usize) -> String {
        let line = self.s[..at].matches('\n').count() + 1;
        format!("{ROUTES} (comment-free text, line {line})")
    }
}

/// Every (METHOD, path) the router registers: `.route("PATH", get(h))`,
/// `.route("PATH", axum::routing::put(h))`, `.route("PATH", get(a).post(b))`, over any line
/// breaks rustfmt puts in.
fn served_routes() -> BTreeSet<(String, String)> {
    let src = without_comments(non_test(&read(ROUTES)));
    for unsupported in [".nest(", ".nest_service(", ".merge(", ".route_service("] {
        assert!(
            !src.contains(unsupported),
            "{ROUTES} uses `{unsupported}`: teach served_routes() in \
             bins/muster/tests/api/openapi.rs to read it"
        );
    }
    let mut served = BTreeSet::new();
    for (at, _) in src.match_indices(".route(") {
        let mut c = Cursor {
            s: &src,
            i: at + ".route(".len(),
        };
        let path = c.string_literal().unwrap_or_else(|| {
            panic!(
                "{}: `.route(` not followed by a string literal",
                c.context(at)
            )
        });
        assert!(
            c.eat(','),
            "{}: no `,` after the path of .route({path:?}, …)",
            c.context(at)
        );
        loop {
            let callee = c.path_expr();
            let method = callee.rsplit("::").next().unwrap_or_default().to_owned();
            assert!(
                HTTP_METHODS.contains(&method.as_str()),
                "{}: .route({path:?}, …) uses `{callee}`, not one of axum's method routers {HTTP_METHODS:?}",
                c.context(at)
            );
            assert!(
                c.eat('('),
                "{}: `{callee}` is not called in .route({path:?}, …)",
                c.context(at)
            );
            c.skip_group();
            assert!(
                served.insert((method.to_uppercase(), path.clone())),
                "{}: {} {path} is routed twice",
                c.context(at),
                method.to_uppercase()
            );
            if !c.eat('.') {
                break;
            }
        }
    }
    assert!(!served.is_empty(), "no `.route(` found in {ROUTES}");
    served
}

// ---------------------------------------------------------------------------------------------
// 1. Routes

#[test]
fn every_served_route_is_documented_and_every_documented_route_is_served() {
    let doc = load_openapi();
    let ops = operations(&doc);
    let documented: BTreeSet<(String, String)> = ops
        .iter()
        .map(|o| (o.method.clone(), o.path.clone()))
        .collect();
    let served = served_routes();
    let undocumented: Vec<String> = served
        .difference(&documented)
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    let unserved: Vec<String> = documented
        .difference(&served)
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "docs/openapi.yaml and the router disagree.\n  served by {ROUTES} but not documented: \
         {undocumented:?}\n  documented but not served: {unserved:?}"
    );

    // Every `{param}` of a documented path is declared as a path parameter, and no other.
    for o in &ops {
        let in_path: BTreeSet<String> = o
            .path
            .split('{')
            .skip(1)
            .filter_map(|s| s.split_once('}').map(|(name, _)| name.to_owned()))
            .collect();
        let path_level = doc["paths"][&o.path]["parameters"].as_array();
        let declared: BTreeSet<String> =
            o.op.get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .chain(path_level)
                .flatten()
                .map(|p| deref(&doc, p))
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect();
        assert_eq!(
            in_path,
            declared,
            "{}: the path's parameters and the declared `in: path` parameters differ",
            o.name()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Examples replay

/// What a setup made on a fresh server.
#[derive(Debug, Default)]
struct Made {
    item: Option<String>,
    lease: Option<String>,
    edit: Option<String>,
}

/// The ownership map file of the replay servers, removed when the test ends.
struct MapFile(std::path::PathBuf);

impl MapFile {
    fn new() -> MapFile {
        let path =
            std::env::temp_dir().join(format!("muster-openapi-map-{}.json", uuid::Uuid::now_v7()));
        std::fs::write(&path, OWNERSHIP_MAP).expect("write the ownership map");
        MapFile(path)
    }
}

impl Drop for MapFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fresh server that can take edit proposals: the ownership map and a quick proof of work.
async fn replay_server(map: &MapFile) -> TestApp {
    let path = map.0.clone();
    TestApp::spawn_with(move |s| {
        s.ownership_map = Some(path);
        s.pow_difficulty = POW_DIFFICULTY;
    })
    .await
}

/// A challenge fetched as Conn and solved: the `pow` field of a proposal.
async fn solved_pow(app: &TestApp) -> Value {
    let c = app.post("/v1/edits/challenge", "conn", json!({})).await;
    assert_eq!(c.status, StatusCode::OK, "challenge: {:?}", c.body);
    let challenge = c.body["challenge"].as_str().expect("challenge").to_owned();
    let difficulty = c.body["difficulty"].as_u64().expect("difficulty") as u8;
    let nonce = muster_antispam::solve(&challenge, difficulty, 100_000_000)
        .expect("a nonce within 10^8 tries");
    json!({"challenge": challenge, "nonce": nonce})
}

async fn prepare(app: &TestApp, setup: &str) -> Made {
    match setup {
        "none" | "solved_challenge" => return Made::default(),
        "pending_edit" => {
            let body = json!({
                "target": "docs/intro",
                "body": "<p>A proposal made by the setup.</p>",
                "website": "",
                "pow": solved_pow(app).await,
            });
            let req = hyper::Request::builder()
                .method(Method::POST)
                .uri(format!("http://{}/v1/edits", app.addr))
                .header(
                    "authorization",
                    format!("Bearer {}", crate::harness::token("conn")),
                )
                .header("content-type", "application/json")
                .header("x-client-ip", "198.51.100.23");
            let r = app.send(req, body.to_string().into_bytes()).await;
            assert_eq!(
                r.status,
                StatusCode::ACCEPTED,
                "setup {setup}: {:?}",
                r.body
            );
            return Made {
                edit: Some(r.body["edit_id"].as_str().expect("edit_id").to_owned()),
                ..Made::default()
            };
        }
        _ => {}
    }
    let item = app
        .enqueue(
            "trawl",
            "normal",
            json!({"url": "https://example.org/notice/42"}),
        )
        .await;
    if setup == "queued_trawl_item" {
        return Made {
            item: Some(item),
            ..Made::default()
        };
    }
    let lease = app
        .lease("trawl", WORKER_ID)
        .await
        .unwrap_or_else(|| panic!("setup {setup}: the queued trawl item was not leasable"));
    assert_eq!(lease["item"]["id"], item.as_str(), "setup {setup}");
    let lease_id = lease["lease_id"].as_str().expect("lease_id").to_owned();
    if setup == "failed_trawl_item" {
        let r = app.fail_on_purpose(&lease, false).await;
        assert_eq!(
            (r.status, &r.body["state"]),
            (StatusCode::OK, &json!("failed")),
            "setup {setup}: {:?}",
            r.body
        );
    }
    Made {
        item: Some(item),
        lease: Some(lease_id),
        edit: None,
    }
}

/// The path with `{id}` and `{kind}` filled from the setup.
fn concrete_path(o: &Operation<'_>, setup: &str, made: &Made) -> String {
    let mut path = o.path.clone();
    if path.contains("{id}") {
        let (what, id) = if path.starts_with("/v1/leases/") {
            ("lease", &made.lease)
        } else if path.starts_with("/v1/items/") {
            ("item", &made.item)
        } else if path.starts_with("/v1/edits/") {
            ("edit", &made.edit)
        } else {
            panic!(
                "{}: the test does not know what `{{id}}` names here",
                o.name()
            )
        };
        let id = id.as_deref().unwrap_or_else(|| {
            panic!(
                "{}: x-muster-example setup {setup:?} makes no {what} for `{{id}}`",
                o.name()
            )
        });
        path = path.replace("{id}", id);
    }
    path = path.replace("{kind}", "trawl");
    assert!(
        !path.contains('{'),
        "{}: a path parameter the test cannot fill: {path}",
        o.name()
    );
    path
}

/// The documented response for `status`, or a precise panic.
fn response_for<'a>(doc: &'a Value, o: &Operation<'a>, status: u16) -> &'a Value {
    let r = o.op["responses"]
        .get(status.to_string())
        .unwrap_or_else(|| {
            panic!(
                "{}: status {status} is not among the documented responses {:?}",
                o.name(),
                o.op["responses"]
                    .as_object()
                    .map(|m| m.keys().collect::<Vec<_>>())
            )
        });
    deref(doc, r)
}

/// The example's principal, checked against the ones the contract knows.
fn principal_of(doc: &Value, o: &Operation<'_>, ex: &Value) -> String {
    let p = ex["principal"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: x-muster-example.principal must be a string", o.name()));
    let kinds = doc["components"]["schemas"]["Kind"]["enum"]
        .as_array()
        .expect("components.schemas.Kind.enum");
    let ok = matches!(p, "operator" | "conn" | "shipkeeper")
        || p.strip_prefix("worker:")
            .is_some_and(|k| kinds.contains(&json!(k)));
    assert!(
        ok,
        "{}: x-muster-example.principal {p:?} is not operator, conn, shipkeeper or worker:<kind>",
        o.name()
    );
    p.to_owned()
}

#[tokio::test]
async fn documented_examples_replay_against_a_real_server() {
    let doc = load_openapi();
    let described = key_set(
        &doc["x-muster-example-setups"],
        &format!("{OPENAPI}: x-muster-example-setups is missing"),
    );
    assert_eq!(
        described,
        BTreeSet::from(SETUPS),
        "{OPENAPI}: x-muster-example-setups must describe exactly the setups this test prepares"
    );
    let map = MapFile::new();
    let mut replayed = Vec::new();
    for o in operations(&doc) {
        let name = o.name();
        if o.path == "/v1/events" {
            let ok = deref(&doc, &o.op["responses"]["200"])["content"]
                .get("text/event-stream")
                .is_some();
            assert!(ok, "{name}: the 200 answer must document text/event-stream");
            let description = o.op["description"].as_str().unwrap_or("");
            for word in [
                "transition",
                "queues",
                "health",
                "edit",
                "heartbeat",
                "reset",
                "Last-Event-ID",
            ] {
                assert!(
                    description.contains(word),
                    "{name}: the description does not mention `{word}`"
                );
            }
            let header = o.op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| deref(&doc, p))
                .any(|p| p["in"] == "header" && p["name"] == "Last-Event-ID");
            assert!(
                header,
                "{name}: the Last-Event-ID header is not a parameter"
            );
            continue;
        }

        let ex = o.op.get("x-muster-example");
        let (principal, status, setup) = match ex {
            Some(ex) => {
                let keys = key_set(ex, &format!("{name}: x-muster-example must be a mapping"));
                assert_eq!(
                    keys,
                    BTreeSet::from(["principal", "setup", "status"]),
                    "{name}: x-muster-example must have exactly principal, status and setup"
                );
                let status = ex["status"]
                    .as_u64()
                    .and_then(|s| u16::try_from(s).ok())
                    .unwrap_or_else(|| {
                        panic!("{name}: x-muster-example.status must be a status code")
                    });
                let setup = ex["setup"].as_str().unwrap_or("");
                assert!(
                    SETUPS.contains(&setup),
                    "{name}: x-muster-example.setup {setup:?} is not one of {SETUPS:?}"
                );
                (Some(principal_of(&doc, &o, ex)), status, setup.to_owned())
            }
            None => {
                // Only the probes, which need no token, go without: they are replayed anonymously.
                assert!(
                    is_public(o.op),
                    "{name} has no x-muster-example: every operation that needs a token must say \
                     how to replay it"
                );
                (None, 200, "none".to_owned())
            }
        };

        let body =
            o.op.get("requestBody")
                .map(|rb| {
                    let media = &deref(&doc, rb)["content"]["application/json"];
                    let example = media.get("example").unwrap_or_else(|| {
                        panic!("{name}: requestBody.content.application/json.example is missing")
                    });
                    let errors = schema_errors(&doc, &media["schema"], example);
                    assert!(
                        errors.is_empty(),
                        "{name}: the request example does not fit its schema:\n  {}",
                        errors.join("\n  ")
                    );
                    example.clone()
                })
                .unwrap_or(Value::Null);
        let documented = response_for(&doc, &o, status);

        let app = replay_server(&map).await;
        let made = prepare(&app, &setup).await;
        let mut path = concrete_path(&o, &setup, &made);
        let mut body = body;
        if let (Some(entries), Some(lease)) = (
            body.get_mut("completions").and_then(Value::as_array_mut),
            &made.lease,
        ) {
            // The batch example names the setup's lease in its body, not in its path.
            for entry in entries {
                entry["lease_id"] = json!(lease);
            }
        }
        if setup == "solved_challenge" {
            // A fresh, solved challenge in place of the documented one (which is not signed
            // by this server's key and has long expired).
            let pow = body.get_mut("pow").unwrap_or_else(|| {
                panic!("{name}: setup solved_challenge needs a `pow` field in the request example")
            });
            *pow = solved_pow(&app).await;
        }
        // Required query and header parameters are sent with their documented examples.
        let mut query = Vec::new();
        let mut headers = Vec::new();
        for p in o.op["parameters"].as_array().into_iter().flatten() {
            let p = deref(&doc, p);
            if p["required"] != true || p["in"] == "path" {
                continue;
            }
            let pname = p["name"].as_str().expect("a parameter name");
            let value = match &p["example"] {
                Value::String(v) => v.clone(),
                Value::Null => panic!("{name}: required parameter {pname} has no example"),
                other => other.to_string(),
            };
            match p["in"].as_str() {
                Some("query") => query.push(format!("{pname}={value}")),
                Some("header") => headers.push((pname.to_owned(), value)),
                other => panic!("{name}: parameter {pname} in {other:?} is not replayable"),
            }
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let mut req = hyper::Request::builder()
            .method(Method::from_bytes(o.method.as_bytes()).expect("an HTTP method"))
            .uri(format!("http://{}{path}", app.addr))
            .header("content-type", "application/json");
        if let Some(p) = &principal {
            req = req.header(
                "authorization",
                format!("Bearer {}", crate::harness::token(p)),
            );
        }
        for (h, v) in &headers {
            req = req.header(h.as_str(), v.as_str());
        }
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let r = app.send(req, bytes).await;
        let who = principal.as_deref().unwrap_or("no token");
        assert_eq!(
            r.status.as_u16(),
            status,
            "{name}: replaying the documented example ({o_method} {path} as {who}, setup \
             {setup}, body {body}) answered {} {}, the document says {status}",
            r.status,
            r.body,
            o_method = o.method,
        );

        // The answer fits what the document says about it.
        let content_type = r
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        match documented.get("content").and_then(Value::as_object) {
            None => assert!(
                r.body.is_null(),
                "{name}: {status} documents no body, the server sent {}",
                r.body
            ),
            Some(content) => {
                let media = content.get(content_type).unwrap_or_else(|| {
                    panic!(
                        "{name}: the answer's Content-Type {content_type:?} is not documented \
                         for {status} (documented: {:?})",
                        content.keys().collect::<Vec<_>>()
                    )
                });
                if content_type == "application/json" {
                    let errors = schema_errors(&doc, &media["schema"], &r.body);
                    assert!(
                        errors.is_empty(),
                        "{name}: the {status} answer {} does not fit its documented schema:\n  {}",
                        r.body,
                        errors.join("\n  ")
                    );
                }
            }
        }
        replayed.push(name);
    }
    assert!(
        replayed.len() >= 10,
        "only {} operations were replayed: {replayed:?}",
        replayed.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Error codes

/// Every `"E_…"` string literal of the non-test part of a source file.
fn error_codes_in(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let src = without_comments(non_test(&text));
    src.match_indices("\"E_")
        .filter_map(|(at, _)| {
            let rest = &src[at + 1..];
            let len = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            rest[len..].starts_with('"').then(|| rest[..len].to_owned())
        })
        .collect()
}

#[test]
fn every_documented_error_code_is_one_the_server_can_answer() {
    let doc = load_openapi();
    let documented: BTreeSet<String> =
        deref(&doc, &doc["components"]["schemas"]["ErrorCode"])["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{OPENAPI}: components.schemas.ErrorCode.enum is missing"))
            .iter()
            .map(|c| c.as_str().expect("codes are strings").to_owned())
            .collect();
    // `Error.error.code` must be that enum.
    let code = &doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"];
    assert_eq!(
        code["$ref"], "#/components/schemas/ErrorCode",
        "{OPENAPI}: Error.error.code must be $ref ErrorCode"
    );

    // error.rs of both crates, and every other transport file (routes.rs and server.rs build
    // errors with literal codes too).
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(HTTP_SRC)
        .unwrap_or_else(|e| panic!("cannot read {HTTP_SRC}: {e}"))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.push(Path::new(APP_ERRORS).to_path_buf());
    files.sort();
    let mut produced: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        for c in error_codes_in(f) {
            let name = f.file_name().unwrap_or_default().to_string_lossy();
            produced.entry(c).or_default().push(name.into_owned());
        }
    }
    assert!(
        produced.contains_key("E_BAD_REQUEST"),
        "no codes found in {files:?}"
    );
    let produced_set: BTreeSet<String> = produced.keys().cloned().collect();
    let undocumented: Vec<String> = produced
        .iter()
        .filter(|(c, _)| !documented.contains(*c))
        .map(|(c, files)| format!("{c} (in {})", files.join(", ")))
        .collect();
    let never_produced: Vec<&String> = documented.difference(&produced_set).collect();
    assert!(
        undocumented.is_empty() && never_produced.is_empty(),
        "the ErrorCode enum of docs/openapi.yaml and the source disagree.\n  produced but not \
         documented: {undocumented:?}\n  documented but produced nowhere: {never_produced:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Security and examples

#[tokio::test]
async fn every_v1_operation_demands_the_bearer_token_and_the_probes_do_not() {
    let doc = load_openapi();
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(
        (&scheme["type"], &scheme["scheme"]),
        (&json!("http"), &json!("bearer")),
        "{OPENAPI}: components.securitySchemes.bearer must be an http bearer scheme"
    );
    let app = TestApp::spawn().await;
    for o in operations(&doc) {
        let name = o.name();
        if !o.path.starts_with("/v1/") {
            assert!(
                is_public(o.op),
                "{name} needs no token: it must say `security: []`"
            );
            assert!(
                o.op["responses"].get("401").is_none(),
                "{name} needs no token, yet documents 401"
            );
            continue;
        }
        assert_eq!(
            o.op.get("security"),
            Some(&json!([{"bearer": []}])),
            "{name} must declare `security: [{{bearer: []}}]`"
        );
        let documented = response_for(&doc, &o, 401);
        assert!(
            documented["description"]
                .as_str()
                .unwrap_or("")
                .contains("E_UNAUTHENTICATED"),
            "{name}: the 401 answer must name E_UNAUTHENTICATED"
        );
        let path = o
            .path
            .replace("{id}", &uuid::Uuid::now_v7().to_string())
            .replace("{kind}", "trawl");
        let method = Method::from_bytes(o.method.as_bytes()).expect("an HTTP method");
        let r = app.raw(method, &path, None, b"{}".to_vec()).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNAUTHORIZED, "E_UNAUTHENTICATED"),
            "{name} without a token: {:?}",
            r.body
        );
    }
}

#[test]
fn every_documented_example_fits_its_schema() {
    let doc = load_openapi();
    let mut checked = 0;
    for o in operations(&doc) {
        let name = o.name();
        let mut examples: Vec<(String, &Value, &Value)> = Vec::new();
        if let Some(rb) = o.op.get("requestBody") {
            let rb = deref(&doc, rb);
            let media = &rb["content"]["application/json"];
            let schema = deref(&doc, &media["schema"]);
            assert_eq!(
                schema.get("additionalProperties"),
                Some(&json!(false)),
                "{name}: the request body schema must say `additionalProperties: false` \
                 (every body refuses unknown fields)"
            );
            if let Some(e) = media.get("example") {
                examples.push(("request".into(), &media["schema"], e));
            }
        }
        let responses = o.op["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{name}: responses must be a mapping"));
        for (status, r) in responses {
            let r = deref(&doc, r);
            if let Some(media) = r["content"].get("application/json") {
                if let Some(e) = media.get("example") {
                    examples.push((format!("response {status}"), &media["schema"], e));
                }
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        media["schema"]["$ref"], "#/components/schemas/Error",
                        "{name}: the {status} answer must be the Error body"
                    );
                }
            }
        }
        for (what, schema, example) in examples {
            let errors = schema_errors(&doc, schema, example);
            assert!(
                errors.is_empty(),
                "{name}: the {what} example does not fit its schema:\n  {}",
                errors.join("\n  ")
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} examples found");
}

// ---------------------------------------------------------------------------------------------
// 4. The live feed against its item schema

/// The event names the feed's `itemSchema` has a branch for (and `retry`, the opening item).
fn feed_branches(doc: &Value) -> BTreeSet<String> {
    let feed = pointer(doc, "#/components/schemas/FeedItem");
    feed["oneOf"]
        .as_array()
        .expect("FeedItem.oneOf")
        .iter()
        .map(|b| {
            let b = deref(doc, b);
            b["properties"]["event"]["const"]
                .as_str()
                .unwrap_or("retry")
                .to_owned()
        })
        .collect()
}

/// Every item of the live feed that the streams of this test process received — this test's
/// own, which make every kind of event, and those of every end-to-end test that has received
/// events by the time it checks — fits the `itemSchema` of `GET /v1/events`.
#[tokio::test]
async fn every_feed_item_the_end_to_end_tests_receive_fits_the_feed_schema() {
    let doc = load_openapi();
    let item_schema = &doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        ["itemSchema"];
    assert!(
        item_schema.is_object(),
        "{OPENAPI}: GET /v1/events documents no itemSchema"
    );
    let map = MapFile::new();
    let app = replay_server(&map).await;
    let r = app
        .report_health(
            json!({"pods": [{"kind": "trawl", "ready": true, "restarts": 0, "phase": "Running"}],
                             "events": [{"kind": "trawl", "reason": "Pulled", "message": "m"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    let mut feed = app.events("conn", None).await;
    let made = prepare(&app, "pending_edit").await;
    let edit = made.edit.expect("an edit");
    let decided = app.decide_edit(&edit, "approve").await;
    assert_eq!(decided.status, StatusCode::OK, "{:?}", decided.body);
    prepare(&app, "failed_trawl_item").await;
    let paused = app
        .put(
            "/v1/kinds/trawl/paused",
            "operator",
            json!({"paused": true, "reason": "a kind event"}),
        )
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.body);
    let mut names = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    while !names.contains("heartbeat") && tokio::time::Instant::now() < deadline {
        if let Some(e) = feed.next_within(std::time::Duration::from_secs(6)).await {
            names.insert(e.event);
        }
    }
    let mut resumed = app.events("operator", Some("999999999")).await;
    let reset = resumed
        .next_named("reset", std::time::Duration::from_secs(5))
        .await
        .expect("a reset for an id never sent");
    names.insert(reset.event);
    names.insert("retry".to_owned());
    // Draining ends every stream with `shutdown`.
    let ((), shutdown) = tokio::join!(
        app.stop(),
        feed.next_named("shutdown", std::time::Duration::from_secs(10))
    );
    names.insert(
        shutdown
            .expect("a shutdown event when the server drains")
            .event,
    );
    assert_eq!(
        names,
        feed_branches(&doc),
        "this test receives every kind of feed item the schema describes"
    );

    let items = muster_testkit::received_feed_items();
    let mut failures = Vec::new();
    for item in &items {
        let errors = schema_errors(&doc, item_schema, item);
        if !errors.is_empty() {
            failures.push(format!("{item}:\n    {}", errors.join("\n    ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} feed items received do not fit the itemSchema of GET /v1/events:\n  {}",
        failures.len(),
        items.len(),
        failures.join("\n  ")
    );
}
