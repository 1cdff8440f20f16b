//! Development tokens, and the token file `muster serve --tokens` reads: the BLAKE3 hash of
//! each token and its principal, never the token itself.

use std::path::Path;

use serde_json::{Value, json};

use crate::DevDbError;

/// A fresh token for each of a list of principals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevTokens {
    pairs: Vec<(String, String)>,
}

impl DevTokens {
    /// A fresh token (see [`new_token`]) for each of `principals`, in their order.
    pub fn new<P: Into<String>>(principals: impl IntoIterator<Item = P>) -> DevTokens {
        DevTokens {
            pairs: principals
                .into_iter()
                .map(|principal| (principal.into(), new_token()))
                .collect(),
        }
    }

    /// [`DevTokens::new`], with the server's token file written to `path`.
    pub fn write<P: Into<String>>(
        path: &Path,
        principals: impl IntoIterator<Item = P>,
    ) -> Result<DevTokens, DevDbError> {
        let tokens = DevTokens::new(principals);
        std::fs::write(path, tokens.server_file())
            .map_err(|e| DevDbError::io(format!("write {}", path.display()), e))?;
        Ok(tokens)
    }

    /// The token of `principal`.
    pub fn token(&self, principal: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(p, _)| p == principal)
            .map(|(_, token)| token.as_str())
    }

    /// `(principal, token)` pairs, in the principals' order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The token file `muster serve --tokens` reads, pretty-printed:
    /// `{"tokens": [{"blake3": "<hex of BLAKE3(token)>", "principal": "…"}, …]}`.
    pub fn server_file(&self) -> String {
        let entries: Vec<Value> = self
            .pairs
            .iter()
            .map(|(principal, token)| {
                json!({
                    "blake3": blake3::hash(token.as_bytes()).to_hex().to_string(),
                    "principal": principal,
                })
            })
            .collect();
        format!("{:#}", json!({ "tokens": entries }))
    }
}

/// A fresh development token: `mst_` and 32 random bytes in hex.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    let mut token = String::with_capacity(4 + 64);
    token.push_str("mst_");
    for byte in bytes {
        token.push_str(&format!("{byte:02x}"));
    }
    token
}
