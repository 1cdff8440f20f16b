//! The node watcher against a fake API server (loopback, real TLS): paged lists, a streamed
//! watch, failures and staleness.

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use common::{OWN_TOKEN, Pki, TempDir, dead_url, pki, serve_tls};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use muster_app::nodes::{NodeDirectory, NodeSnapshot};
use muster_domain::redact::NodeNames;
use muster_kube::nodes::{NODES_PATH, NodeWatchSettings, NodeWatcher};
use muster_kube::probe::{ApiServerProbe, VERSION_PATH};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A watch's body: whatever the test sends, as it sends it.
struct Stream(mpsc::UnboundedReceiver<Bytes>);

impl hyper::body::Body for Stream {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

#[derive(Default)]
struct State {
    nodes: Vec<String>,
    /// Watches answered with an empty body that ends at once (a proxy that cuts streams).
    cut_watches: bool,
    /// The senders of the watches opened so far.
    watches: Vec<mpsc::UnboundedSender<Bytes>>,
    /// Every request: path and query, Accept header, whether it carried the own token.
    seen: Vec<(String, String, bool)>,
}

struct FakeNodes {
    url: String,
    state: Arc<Mutex<State>>,
    failing: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeNodes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeNodes {
    fn send(&self, event: serde_json::Value) {
        let line = Bytes::from(format!("{event}\n"));
        for watch in &self.state.lock().unwrap().watches {
            let _ = watch.send(line.clone());
        }
    }

    fn end_watches(&self) {
        self.state.lock().unwrap().watches.clear();
    }

    fn seen(&self) -> Vec<(String, String, bool)> {
        self.state.lock().unwrap().seen.clone()
    }
}

fn full(status: StatusCode, body: serde_json::Value) -> Response<BoxBody<Bytes, Infallible>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = status;
    r
}

fn answer(
    request: &Request<Incoming>,
    state: &Mutex<State>,
    failing: bool,
) -> Response<BoxBody<Bytes, Infallible>> {
    let query = request.uri().query().unwrap_or_default().to_owned();
    let accept = request
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let own = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {OWN_TOKEN}"));
    let mut state = state.lock().unwrap();
    state
        .seen
        .push((format!("{}?{query}", request.uri().path()), accept, own));
    if !failing && request.uri().path() == VERSION_PATH {
        return full(
            StatusCode::OK,
            serde_json::json!({"major": "1", "minor": "32"}),
        );
    }
    if failing || request.uri().path() != NODES_PATH {
        return full(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({"kind": "Status"}),
        );
    }
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    };
    if param("watch").is_some() {
        if state.cut_watches {
            return full(StatusCode::OK, serde_json::json!({}));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        state.watches.push(tx);
        return Response::new(Stream(rx).boxed());
    }
    let limit: usize = param("limit").and_then(|l| l.parse().ok()).unwrap_or(500);
    let from: usize = param("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let page: Vec<serde_json::Value> = state
        .nodes
        .iter()
        .skip(from)
        .take(limit)
        .map(|name| serde_json::json!({"metadata": {"name": name, "resourceVersion": "7"}}))
        .collect();
    let next = if from + limit < state.nodes.len() {
        (from + limit).to_string()
    } else {
        String::new()
    };
    full(
        StatusCode::OK,
        serde_json::json!({
            "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "42", "continue": next},
            "items": page,
        }),
    )
}

async fn fake_nodes(pki: &Pki, nodes: &[&str]) -> FakeNodes {
    let state = Arc::new(Mutex::new(State {
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        ..State::default()
    }));
    let failing = Arc::new(AtomicBool::new(false));
    let (st, fl) = (state.clone(), failing.clone());
    let (url, _, task) = serve_tls(pki, move |req| {
        let response = answer(&req, &st, fl.load(Ordering::SeqCst));
        async move { Ok::<_, Infallible>(response) }
    })
    .await;
    FakeNodes {
        url,
        state,
        failing,
        task,
    }
}

fn settings(dir: &TempDir, url: &str, pki: &Pki) -> NodeWatchSettings {
    let mut s = NodeWatchSettings::new(url);
    s.ca_path = dir.write("ca.crt", &pki.ca_pem);
    s.token_path = dir.write("token", &format!("{OWN_TOKEN}\n"));
    s.page_size = 2;
    s.timeout = Duration::from_secs(2);
    s.retry_min = Duration::from_millis(20);
    s.retry_max = Duration::from_millis(50);
    s
}

fn start(settings: NodeWatchSettings) -> (Arc<NodeDirectory>, tokio::task::JoinHandle<()>) {
    let directory = Arc::new(NodeDirectory::awaiting_source());
    let watcher = NodeWatcher::new(settings).unwrap();
    let task = tokio::spawn(watcher.run(directory.clone()));
    (directory, task)
}

/// The folder of a watcher's token and CA (kept while the test runs), its fake API server, its
/// directory and its task.
type Watching = (
    TempDir,
    FakeNodes,
    Arc<NodeDirectory>,
    tokio::task::JoinHandle<()>,
);

/// A fake API server listing `names` and a watcher with the default settings started against
/// it.
async fn watching(names: &[&str]) -> Watching {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let server = fake_nodes(&pki, names).await;
    let (directory, task) = start(settings(&dir, &server.url, &pki));
    (dir, server, directory, task)
}

/// [`watching`] a server that lists `tidewater`, once the directory knows it.
async fn tidewater_known() -> Watching {
    let watched = watching(&["tidewater"]).await;
    eventually(&watched.2, &known(&["tidewater"])).await;
    watched
}

fn known(names: &[&str]) -> NodeSnapshot {
    NodeSnapshot::Known(Arc::new(NodeNames::new(names)))
}

/// Waits up to 5 s for the directory to show `expected`; answers what it showed last.
async fn eventually(directory: &NodeDirectory, expected: &NodeSnapshot) -> NodeSnapshot {
    for _ in 0..250 {
        if directory.snapshot() == *expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    directory.snapshot()
}

#[tokio::test]
async fn every_page_of_the_first_list_makes_its_names_known() {
    let (_dir, _server, directory, task) =
        watching(&["kind-worker", "rack3-blade12", "tidewater"]).await;
    let expected = known(&["kind-worker", "rack3-blade12", "tidewater"]);
    assert_eq!(eventually(&directory, &expected).await, expected);
    task.abort();
}

#[tokio::test]
async fn the_list_and_the_watch_ask_for_metadata_only_with_the_own_token() {
    let (_dir, server, _directory, task) = tidewater_known().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = server.seen();
    task.abort();
    assert_eq!(
        seen.iter()
            .map(|(path, _, _)| path.as_str())
            .collect::<Vec<_>>(),
        [
            "/api/v1/nodes?limit=2",
            "/api/v1/nodes?watch=1&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion=42",
        ]
    );
    assert!(
        seen.iter()
            .all(|(_, accept, own)| accept.contains(";as=PartialObjectMetadata") && *own)
    );
}

#[tokio::test]
async fn a_node_the_watch_adds_is_known_at_once_and_a_deleted_one_is_forgotten() {
    let (_dir, server, directory, task) = tidewater_known().await;
    while server.state.lock().unwrap().watches.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.send(
        serde_json::json!({"type": "ADDED", "object": {"metadata": {"name": "rack3-blade13"}}}),
    );
    let both = known(&["tidewater", "rack3-blade13"]);
    assert_eq!(eventually(&directory, &both).await, both);
    server.send(
        serde_json::json!({"type": "DELETED", "object": {"metadata": {"name": "tidewater"}}}),
    );
    let one = known(&["rack3-blade13"]);
    assert_eq!(eventually(&directory, &one).await, one);
    task.abort();
}

#[tokio::test]
async fn an_api_server_that_cannot_be_reached_is_asked_again_and_the_names_stay_unknown() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    // Accepts and closes at once: every attempt of the watcher is a connection here.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = attempts.clone();
    let closer = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(tcp);
        }
    });
    let (directory, task) = start(settings(&dir, &url, &pki));
    tokio::time::sleep(Duration::from_millis(400)).await;
    task.abort();
    closer.abort();
    let attempts = attempts.load(Ordering::SeqCst);
    assert!(attempts >= 3, "{attempts} attempts");
    assert_eq!(directory.snapshot(), NodeSnapshot::Unknown);
}

#[tokio::test]
async fn a_watch_that_ends_at_once_backs_off_instead_of_listing_in_a_tight_loop() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let server = fake_nodes(&pki, &["tidewater"]).await;
    server.state.lock().unwrap().cut_watches = true;
    let mut s = settings(&dir, &server.url, &pki);
    s.retry_min = Duration::from_millis(100);
    s.retry_max = Duration::from_millis(200);
    let (directory, task) = start(s);
    tokio::time::sleep(Duration::from_millis(700)).await;
    task.abort();
    let lists = server
        .seen()
        .iter()
        .filter(|(path, _, _)| !path.contains("watch=1"))
        .count();
    assert!((2..=6).contains(&lists), "{lists} lists in 700 ms");
    assert_eq!(directory.snapshot(), known(&["tidewater"]));
}

#[tokio::test]
async fn the_names_become_unknown_when_the_api_server_fails_for_longer_than_stale_after() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let server = fake_nodes(&pki, &["tidewater"]).await;
    let mut s = settings(&dir, &server.url, &pki);
    s.stale_after = Duration::from_millis(200);
    let (directory, task) = start(s);
    eventually(&directory, &known(&["tidewater"])).await;
    server.failing.store(true, Ordering::SeqCst);
    server.end_watches();
    assert_eq!(
        eventually(&directory, &NodeSnapshot::Unknown).await,
        NodeSnapshot::Unknown
    );
    server.failing.store(false, Ordering::SeqCst);
    let back = known(&["tidewater"]);
    assert_eq!(eventually(&directory, &back).await, back);
    task.abort();
}

#[tokio::test]
async fn a_short_failure_keeps_the_names_in_force() {
    let (_dir, server, directory, task) = tidewater_known().await;
    server.failing.store(true, Ordering::SeqCst);
    server.end_watches();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(directory.snapshot(), known(&["tidewater"]));
    task.abort();
}

fn probe(settings: &NodeWatchSettings) -> ApiServerProbe {
    ApiServerProbe::new(settings, Duration::from_secs(30)).unwrap()
}

#[tokio::test]
async fn the_probe_finds_an_api_server_that_answers() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let server = fake_nodes(&pki, &[]).await;
    assert_eq!(
        probe(&settings(&dir, &server.url, &pki)).ask().await,
        Ok(())
    );
    assert_eq!(server.seen()[0].0, "/version?");
}

#[tokio::test]
async fn the_probe_reports_an_api_server_answering_an_error_with_its_status() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let server = fake_nodes(&pki, &[]).await;
    server.failing.store(true, Ordering::SeqCst);
    assert_eq!(
        probe(&settings(&dir, &server.url, &pki)).ask().await,
        Err("the API server answered 500 Internal Server Error".to_owned())
    );
}

#[tokio::test]
async fn the_probe_reports_an_api_server_nobody_listens_for_as_a_connect_failure() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let answer = probe(&settings(&dir, &dead_url(), &pki)).ask().await;
    assert!(
        answer.as_ref().is_err_and(|e| e.starts_with("connect: ")),
        "{answer:?}"
    );
}
