//! `muster-sim`: a simulated worker fleet for Muster, and the tools around it.
//!
//! - [`fleet`]: N workers over the ten kinds, built on `muster-worker` (long-poll leases,
//!   heartbeats, fsync'd spool, redelivery), failing over between replicas; plus a Shipkeeper
//!   that reports new worker images and so replays parked items.
//! - [`plan`]: the failure plan each root item carries in its payload, and the deterministic
//!   decision every worker takes from it.
//! - [`enqueue`]: root items with their plans, idempotently.
//! - [`check`]: the judge of a finished run, the fault suite's: the invariants checked in the
//!   database itself, what the clients and the fault probes saw, and the run's figures.
//! - [`watch`]: the live feed in `muster watch`'s view (crates/muster-ops), until every item is
//!   finished.
//! - [`stats`]: what a process saw, every HTTP status included, as one JSON line.
//!
//! Tokens come from a JSON file mapping principal to plain token
//! (`{"worker:trawl": "mst_…", "operator": "mst_…", "shipkeeper": "mst_…"}`); they are never
//! logged.

pub mod api;
pub mod check;
pub mod enqueue;
pub mod fleet;
pub mod plan;
pub mod stats;
pub mod watch;

use std::path::Path;

use anyhow::Context;

pub use fleet::Tokens;

/// Reads a tokens file: a JSON object from principal to plain token.
pub fn read_tokens(path: &Path) -> anyhow::Result<Tokens> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read the tokens file {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "the tokens file {} is not a JSON object of principal to token",
            path.display()
        )
    })
}

/// The token of `principal`, or an error naming the principal (never a token).
pub fn token<'a>(tokens: &'a Tokens, principal: &str) -> anyhow::Result<&'a str> {
    tokens
        .get(principal)
        .map(String::as_str)
        .with_context(|| format!("the tokens file has no token for {principal}"))
}
