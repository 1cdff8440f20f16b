//! The cluster adapter: authenticates Kubernetes ServiceAccount bearer tokens with the TokenReview
//! API and maps the authenticated username to a Muster principal by configuration.
//!
//! A token is sent to the API server once and never kept: the result cache is keyed by the BLAKE3
//! digest of the token, and no log line, error or map holds the token itself. When the API server
//! cannot answer (unreachable, slow, non-2xx, unreadable answer) the authenticator fails closed with
//! [`AuthError::Unavailable`], which is never cached.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use muster_domain::Principal;
use serde::Deserialize;

mod admission;
mod cache;
mod client;
pub mod nodes;
pub mod probe;
mod tokenreview;

pub use admission::Rate;
pub use client::api_server_url;
use client::read;
pub use tokenreview::{
    DEFAULT_AUDIENCE, DEFAULT_PEER_RATE, DEFAULT_RATE, DEFAULT_STALE_LIMIT,
    TokenReviewAuthenticator, TokenReviewSettings,
};

/// The CA bundle mounted into every pod.
pub const DEFAULT_CA_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// The pod's own ServiceAccount token (projected, rotated by the kubelet).
pub const DEFAULT_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// The API server's in-cluster name, used when the service environment variables are absent.
pub const DEFAULT_API_SERVER: &str = "https://kubernetes.default.svc";
/// Where TokenReviews are created.
pub const TOKENREVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// Errors of configuration, raised while building the authenticator (never while authenticating).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    #[error("the ServiceAccount map is not valid JSON of the expected shape: {0}")]
    MapShape(String),
    #[error("ServiceAccount map: {username:?} maps to unknown principal {principal:?}")]
    MapEntry { username: String, principal: String },
    #[error("read {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("the CA bundle {} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("API server URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("TLS setup: {0}")]
    Tls(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    serviceaccounts: HashMap<String, String>,
}

/// Which authenticated username is which principal:
/// `{"serviceaccounts": {"system:serviceaccount:cs-workers:trawl": "worker:trawl"}}`.
/// A username not in the map is authenticated by Kubernetes but not let in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceAccountMap {
    by_username: HashMap<String, Principal>,
}

impl ServiceAccountMap {
    pub fn from_json(text: &str) -> Result<Self, KubeError> {
        let file: MapFile =
            serde_json::from_str(text).map_err(|e| KubeError::MapShape(e.to_string()))?;
        let mut by_username = HashMap::with_capacity(file.serviceaccounts.len());
        for (username, principal) in file.serviceaccounts {
            let parsed = principal.parse().map_err(|_| KubeError::MapEntry {
                username: username.clone(),
                principal: principal.clone(),
            })?;
            by_username.insert(username, parsed);
        }
        Ok(ServiceAccountMap { by_username })
    }

    /// Reads and parses the map file.
    pub fn load(path: &Path) -> Result<Self, KubeError> {
        Self::from_json(&read(path)?)
    }

    pub fn get(&self, username: &str) -> Option<Principal> {
        self.by_username.get(username).copied()
    }

    pub fn len(&self) -> usize {
        self.by_username.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_username.is_empty()
    }
}

#[cfg(test)]
mod tests;
