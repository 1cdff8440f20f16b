//! Bearer-token authentication, and the authorisation rules the transport asks before a call
//! that has no actor check of its own.
//!
//! The development and test token table maps the BLAKE3 digest of a token to a principal; the
//! plain token is never stored, logged or echoed. Production authenticates Kubernetes
//! ServiceAccount tokens through another implementation of [`Authenticator`].

use std::collections::HashMap;
use std::net::IpAddr;

use async_trait::async_trait;
use muster_domain::Principal;
use serde::Deserialize;

use crate::AppError;

/// Who may watch the pipeline — the live feed and the queue depths: Conn and operators.
pub fn may_watch(p: Principal) -> Result<(), AppError> {
    match p {
        Principal::Conn | Principal::Operator => Ok(()),
        other => Err(AppError::Forbidden(format!(
            "{other} may not watch the live feed"
        ))),
    }
}

/// Who may find and read items and the fleet's health: Conn and operators.
pub fn may_read_items(p: Principal) -> Result<(), AppError> {
    match p {
        Principal::Conn | Principal::Operator => Ok(()),
        other => Err(AppError::Forbidden(format!("{other} may not read items"))),
    }
}

/// Who may read the fleet's health: Conn and operators.
pub fn may_read_health(p: Principal) -> Result<(), AppError> {
    match p {
        Principal::Conn | Principal::Operator => Ok(()),
        other => Err(AppError::Forbidden(format!("{other} may not read health"))),
    }
}

/// Who may send failed items back to the queue: operators only.
pub fn may_control_items(p: Principal) -> Result<(), AppError> {
    match p {
        Principal::Operator => Ok(()),
        other => Err(AppError::Forbidden(format!(
            "{other} may not retry or cancel items"
        ))),
    }
}

/// Who may pause and resume a kind: operators only.
pub fn may_pause_kinds(p: Principal) -> Result<(), AppError> {
    match p {
        Principal::Operator => Ok(()),
        other => Err(AppError::Forbidden(format!(
            "{other} may not pause or resume a kind"
        ))),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The authority that checks tokens could not answer; fail closed.
    #[error("the token authority is unavailable")]
    Unavailable,
}

/// Resolves a bearer token to its principal; `None` for an unknown token.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait Authenticator: Send + Sync {
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, AuthError>;

    /// [`authenticate`](Self::authenticate) for a call from `peer` (the connection's remote
    /// address; `None` when unknown), so that an authenticator can ration its work per peer.
    async fn authenticate_from(
        &self,
        token: &str,
        _peer: Option<IpAddr>,
    ) -> Result<Option<Principal>, AuthError> {
        self.authenticate(token).await
    }

    /// The figures of an authenticator that asks a remote authority, for the metrics.
    fn figures(&self) -> Option<ReviewFigures> {
        None
    }
}

/// What an authenticator that asks a remote authority (TokenReview) has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewFigures {
    /// Reviews sent, by class (`known`: a token with a positive answer, re-reviewed;
    /// `unknown`) and outcome (`positive`, `negative`, `unavailable`).
    pub reviews: Vec<(&'static str, &'static str, u64)>,
    /// Reviews of unknown tokens refused unsent, by reason (`peer_rate`, `global_rate`,
    /// `queue`).
    pub rejected: Vec<(&'static str, u64)>,
    /// Calls let in on a positive answer past its time to live (the authority slow or down).
    pub served_stale: u64,
    /// Reviews of known tokens started ahead of their answer's expiry.
    pub refreshes: u64,
    /// Reviews under way now.
    pub in_flight: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenFileError {
    #[error("the token file is not valid JSON of the expected shape: {0}")]
    Shape(String),
    #[error("entry {index}: {reason}")]
    Entry { index: usize, reason: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: Vec<TokenLine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenLine {
    blake3: String,
    principal: String,
}

/// The token file of protocol.md: `{"tokens": [{"blake3": "<hex>", "principal": "…"}]}`.
#[derive(Debug, Clone, Default)]
pub struct TokenTable {
    by_digest: HashMap<[u8; 32], Principal>,
}

impl TokenTable {
    pub fn from_json(text: &str) -> Result<Self, TokenFileError> {
        let file: TokenFile =
            serde_json::from_str(text).map_err(|e| TokenFileError::Shape(e.to_string()))?;
        let mut by_digest = HashMap::new();
        for (index, line) in file.tokens.into_iter().enumerate() {
            let digest =
                blake3::Hash::from_hex(line.blake3.trim()).map_err(|_| TokenFileError::Entry {
                    index,
                    reason: "blake3 must be 64 hex digits".into(),
                })?;
            let principal = line.principal.parse().map_err(|_| TokenFileError::Entry {
                index,
                reason: format!("unknown principal {:?}", line.principal),
            })?;
            // One token, one principal: a digest listed twice (even for the same principal)
            // is a mistake in the file, refused rather than resolved by the last line.
            if by_digest.insert(*digest.as_bytes(), principal).is_some() {
                return Err(TokenFileError::Entry {
                    index,
                    reason: "this blake3 digest is listed before: each token once".into(),
                });
            }
        }
        Ok(TokenTable { by_digest })
    }

    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

#[async_trait]
impl Authenticator for TokenTable {
    async fn authenticate(&self, token: &str) -> Result<Option<Principal>, AuthError> {
        // Only the digest is looked up, so lookup timing says nothing about the token itself.
        let digest = blake3::hash(token.as_bytes());
        Ok(self.by_digest.get(digest.as_bytes()).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_domain::Kind;

    fn table() -> TokenTable {
        let hex = blake3::hash(b"s3cret").to_hex();
        TokenTable::from_json(&format!(
            r#"{{"tokens": [{{"blake3": "{hex}", "principal": "worker:trawl"}}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_token_file_listing_one_digest_twice_is_refused() {
        let hex = blake3::hash(b"s3cret").to_hex();
        let e = TokenTable::from_json(&format!(
            r#"{{"tokens": [{{"blake3": "{hex}", "principal": "worker:trawl"}},
                            {{"blake3": "{hex}", "principal": "operator"}}]}}"#
        ))
        .unwrap_err();
        assert!(matches!(e, TokenFileError::Entry { index: 1, .. }), "{e}");
    }

    #[test]
    fn conn_and_operators_may_watch_the_pipeline_and_nobody_else() {
        assert_eq!(may_watch(Principal::Conn), Ok(()));
        assert_eq!(may_watch(Principal::Operator), Ok(()));
        assert_eq!(
            may_watch(Principal::Worker(Kind::Trawl)),
            Err(AppError::Forbidden(
                "worker:trawl may not watch the live feed".into()
            ))
        );
        assert!(matches!(
            may_watch(Principal::Shipkeeper),
            Err(AppError::Forbidden(_))
        ));
    }

    #[tokio::test]
    async fn a_token_resolves_to_the_principal_of_its_digest() {
        assert_eq!(
            table().authenticate("s3cret").await,
            Ok(Some(Principal::Worker(Kind::Trawl)))
        );
    }

    #[tokio::test]
    async fn an_unknown_token_resolves_to_nobody() {
        assert_eq!(table().authenticate("guess").await, Ok(None));
    }

    #[test]
    fn a_file_naming_an_unknown_principal_is_refused() {
        let hex = blake3::hash(b"x").to_hex();
        let r = TokenTable::from_json(&format!(
            r#"{{"tokens": [{{"blake3": "{hex}", "principal": "root"}}]}}"#
        ));
        assert!(matches!(r, Err(TokenFileError::Entry { index: 0, .. })));
    }

    #[test]
    fn a_plain_token_in_place_of_a_digest_is_refused() {
        let r =
            TokenTable::from_json(r#"{"tokens": [{"blake3": "s3cret", "principal": "operator"}]}"#);
        assert!(matches!(r, Err(TokenFileError::Entry { index: 0, .. })));
    }
}
