//! The cluster's node names for health redaction, listed and watched through the API server.
//!
//! Only names are asked for: the list and the watch request the metadata-only representation
//! (`PartialObjectMetadataList`), and Muster's ServiceAccount needs `get`, `list` and `watch` on
//! `nodes` (a read-only ClusterRole, deploy/k8s). The list is paged; the watch runs from the
//! list's `resourceVersion` and is renewed by a fresh list when it ends. The names stay in force
//! while the list or the watch answers; when neither has for `stale_after`, the names become
//! unknown and health messages are withheld until the API server answers again.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use muster_app::nodes::NodeDirectory;
use muster_domain::redact::NodeNames;
use serde::Deserialize;

use crate::client::{ApiFailure, ApiServer, api_server_url};
use crate::{DEFAULT_CA_PATH, DEFAULT_TOKEN_PATH, KubeError};

/// Where nodes are listed and watched.
pub const NODES_PATH: &str = "/api/v1/nodes";
const LIST_ACCEPT: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const WATCH_ACCEPT: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
/// Longest list page or watch line read.
const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Everything the watcher needs; [`NodeWatchSettings::new`] fills in the defaults.
#[derive(Debug, Clone)]
pub struct NodeWatchSettings {
    /// `https://host[:port]`, no path.
    pub api_server: String,
    pub ca_path: PathBuf,
    pub token_path: PathBuf,
    pub token_refresh: Duration,
    /// Bound on one list page: connect, TLS, request and answer.
    pub timeout: Duration,
    /// Nodes per list page.
    pub page_size: u32,
    /// How long one watch runs before it is renewed by a fresh list.
    pub watch_seconds: u32,
    /// How long names stay in force after the list or the watch last answered.
    pub stale_after: Duration,
    /// First and longest wait before retrying after a failure (doubling in between).
    pub retry_min: Duration,
    pub retry_max: Duration,
}

impl NodeWatchSettings {
    pub fn new(api_server: impl Into<String>) -> Self {
        NodeWatchSettings {
            api_server: api_server.into(),
            ca_path: DEFAULT_CA_PATH.into(),
            token_path: DEFAULT_TOKEN_PATH.into(),
            token_refresh: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            page_size: 500,
            watch_seconds: 300,
            stale_after: Duration::from_secs(300),
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
        }
    }

    /// The API server these settings name, with its trust and the pod's own token.
    pub(crate) fn api_server(&self) -> Result<ApiServer, KubeError> {
        ApiServer::new(
            &self.api_server,
            &self.ca_path,
            self.token_path.clone(),
            self.token_refresh,
        )
    }

    /// The in-cluster defaults, as [`crate::TokenReviewSettings::in_cluster`].
    pub fn in_cluster() -> Self {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").ok();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").ok();
        Self::new(api_server_url(host.as_deref(), port.as_deref()))
    }
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "resourceVersion")]
    resource_version: String,
    #[serde(default, rename = "continue")]
    next: String,
}

#[derive(Deserialize)]
struct Object {
    metadata: Metadata,
}

#[derive(Deserialize)]
struct List {
    metadata: Metadata,
    #[serde(default)]
    items: Vec<Object>,
}

#[derive(Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

/// Lists and watches the cluster's nodes into a [`NodeDirectory`]; see the module docs.
#[derive(Debug)]
pub struct NodeWatcher {
    api: ApiServer,
    settings: NodeWatchSettings,
}

impl NodeWatcher {
    /// Reads the CA bundle and the pod's own token; fails when either is missing or unusable.
    pub fn new(settings: NodeWatchSettings) -> Result<Self, KubeError> {
        Ok(NodeWatcher {
            api: settings.api_server()?,
            settings,
        })
    }

    /// Keeps `directory` up to date until the task is dropped. A watch that ran less than half
    /// its time counts as a failure (a proxy that ends streams at once must not turn this into
    /// a tight loop of lists); the retry wait is reset only by a watch that ran its time.
    pub async fn run(self, directory: Arc<NodeDirectory>) {
        let mut last_answer: Option<Instant> = None;
        let mut retry = self.settings.retry_min;
        let mut failing = false;
        let full_watch = Duration::from_secs(u64::from(self.settings.watch_seconds));
        loop {
            let outcome = match self.list().await {
                Ok((mut names, version)) => {
                    directory.set_names(NodeNames::new(&names));
                    last_answer = Some(Instant::now());
                    if failing {
                        tracing::info!(nodes = names.len(), "node names listed again");
                        failing = false;
                    }
                    let started = Instant::now();
                    let watched = self
                        .watch(&version, &mut names, &directory, &mut last_answer)
                        .await;
                    match watched {
                        Ok(()) if started.elapsed() < full_watch / 2 => {
                            Err(ApiFailure::Ended(started.elapsed()))
                        }
                        other => other,
                    }
                }
                Err(failure) => Err(failure),
            };
            let Err(failure) = outcome else {
                retry = self.settings.retry_min;
                continue; // the watch ran its time: list afresh
            };
            if !failing {
                tracing::warn!(
                    api_server = %self.api.endpoint.authority,
                    error = %failure,
                    "listing or watching the cluster's nodes failed: retrying"
                );
                failing = true;
            }
            if last_answer.is_none_or(|at| at.elapsed() >= self.settings.stale_after) {
                directory.set_unknown();
            }
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(self.settings.retry_max);
        }
    }

    fn get(&self, path: &str, accept: &str) -> Result<hyper::Request<Empty<Bytes>>, ApiFailure> {
        self.api
            .request(hyper::Method::GET, path, accept)
            .body(Empty::new())
            // The message would quote the header value: the own token. Keep only the kind.
            .map_err(|_| ApiFailure::Request("invalid request".into()))
    }

    /// Every node's name, page by page, and the list's resourceVersion.
    async fn list(&self) -> Result<(BTreeSet<String>, String), ApiFailure> {
        let mut names = BTreeSet::new();
        let mut next = String::new();
        loop {
            let mut path = format!("{NODES_PATH}?limit={}", self.settings.page_size);
            if !next.is_empty() {
                path.push_str("&continue=");
                path.push_str(&encode(&next));
            }
            let request = self.get(&path, LIST_ACCEPT)?;
            let page = tokio::time::timeout(self.settings.timeout, self.read_list(request))
                .await
                .map_err(|_| ApiFailure::Timeout(self.settings.timeout))??;
            names.extend(
                page.items
                    .into_iter()
                    .map(|item| item.metadata.name)
                    .filter(|name| !name.is_empty()),
            );
            if page.metadata.next.is_empty() {
                return Ok((names, page.metadata.resource_version));
            }
            next = page.metadata.next;
        }
    }

    async fn read_list(&self, request: hyper::Request<Empty<Bytes>>) -> Result<List, ApiFailure> {
        let (response, _driver) = self.api.send(request).await?;
        if !response.status().is_success() {
            return Err(ApiFailure::Status(response.status()));
        }
        let bytes = http_body_util::Limited::new(response.into_body(), MAX_MESSAGE_BYTES)
            .collect()
            .await
            .map_err(|e| ApiFailure::Body(e.to_string()))?
            .to_bytes();
        serde_json::from_slice(&bytes).map_err(|e| ApiFailure::Shape("a node list", e))
    }

    /// Applies the watch's events to `names` (and the directory) until the watch ends: `Ok` when
    /// it ran its time, `Err` when it failed or the API server ended it with an error event (for
    /// example 410 Gone: the version is too old), so that the caller lists afresh.
    async fn watch(
        &self,
        version: &str,
        names: &mut BTreeSet<String>,
        directory: &NodeDirectory,
        last_answer: &mut Option<Instant>,
    ) -> Result<(), ApiFailure> {
        let path = format!(
            "{NODES_PATH}?watch=1&allowWatchBookmarks=true&timeoutSeconds={}&resourceVersion={}",
            self.settings.watch_seconds,
            encode(version)
        );
        let request = self.get(&path, WATCH_ACCEPT)?;
        let (response, _driver) =
            tokio::time::timeout(self.settings.timeout, self.api.send(request))
                .await
                .map_err(|_| ApiFailure::Timeout(self.settings.timeout))??;
        if !response.status().is_success() {
            return Err(ApiFailure::Status(response.status()));
        }
        let mut lines = Lines::new(response.into_body());
        let limit =
            Duration::from_secs(u64::from(self.settings.watch_seconds)) + self.settings.timeout;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let line = match tokio::time::timeout_at(deadline, lines.next()).await {
                Err(_) => return Ok(()), // the server kept it open past its time: renew
                Ok(line) => line?,
            };
            let Some(line) = line else {
                return Ok(());
            };
            *last_answer = Some(Instant::now());
            let event: WatchEvent =
                serde_json::from_slice(&line).map_err(|e| ApiFailure::Shape("a node list", e))?;
            let name = event.object["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            let changed = match event.kind.as_str() {
                "ADDED" | "MODIFIED" if !name.is_empty() => names.insert(name.to_owned()),
                "DELETED" => names.remove(name),
                "ERROR" => {
                    let message = event.object["message"].as_str().unwrap_or_default();
                    return Err(ApiFailure::Event(message.to_owned()));
                }
                _ => false, // BOOKMARK
            };
            if changed {
                directory.set_names(NodeNames::new(names.iter()));
            }
        }
    }
}

/// Newline-delimited messages of a streamed body, each at most [`MAX_MESSAGE_BYTES`].
struct Lines {
    body: Incoming,
    buffer: Vec<u8>,
    /// How much of `buffer` is known to hold no newline.
    scanned: usize,
    done: bool,
}

impl Lines {
    fn new(body: Incoming) -> Self {
        Lines {
            body,
            buffer: Vec::new(),
            scanned: 0,
            done: false,
        }
    }

    async fn next(&mut self) -> Result<Option<Vec<u8>>, ApiFailure> {
        loop {
            if let Some(at) = self.buffer[self.scanned..]
                .iter()
                .position(|&c| c == b'\n')
                .map(|n| self.scanned + n)
            {
                self.scanned = 0;
                let line: Vec<u8> = self.buffer.drain(..=at).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.done {
                let rest = std::mem::take(&mut self.buffer);
                return Ok((!rest.iter().all(u8::is_ascii_whitespace)).then_some(rest));
            }
            self.scanned = self.buffer.len();
            if self.buffer.len() > MAX_MESSAGE_BYTES {
                return Err(ApiFailure::Body("a watch event over 4 MiB".into()));
            }
            match self.body.frame().await {
                None => self.done = true,
                Some(Err(e)) => return Err(ApiFailure::Body(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

/// Percent-encodes a query value (the continue token and resourceVersion are opaque).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(c).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn opaque_query_values_are_percent_encoded() {
        assert_eq!(encode("eyJ2Ijo=/x y"), "eyJ2Ijo%3D%2Fx%20y");
        assert_eq!(encode("12345"), "12345");
    }
}
