//! Muster's HTTP transport: hyper 1 + hyper-util for connections, axum's `Router` for routing.
//!
//! This crate translates HTTP into use-case calls and back: authentication of the bearer token,
//! JSON bodies read under a size limit with unknown fields refused ([`extract`]), one handler
//! module per area of the contract (`handlers`), the one table that maps every error to a
//! status and an `E_…` code ([`error`]), and the server loop with header-read timeout and
//! graceful shutdown ([`server`]). It knows nothing of SQL, and decides no rule of who may do
//! what: it asks the use cases.
//!
//! Module graph (who uses whom inside the crate; no circle): `routes` (the router) →
//! `handlers`, `extract`, `metrics`, `state`; `handlers` → `extract`, `reauth`, `sse`, `conn_guard`, `server`, `metrics`,
//! `state`, `error`, `trace`; `extract` → `state`, `budget`, `screen`, `spans`, `error`; `state` → `budget`, `metrics`; `conn_guard` → `budget`, `extract`, `watched_body`;
//! `budget` → `error`; `metrics` → `refreshed`, `budget`, `error`, `spans`, `trace`; `spans` → `trace`; `trace` → nothing; `refreshed` → nothing; `server` → `budget`, `conn_guard`, `stall`, `dev_web`, `screen`, `error`; `stall` → nothing; `screen` → `error`; `dev_web` →
//! `error`; `sse` and `error` → nothing.

pub mod budget;
mod conn_guard;
pub mod dev_web;
pub mod error;
mod extract;
mod handlers;
pub mod metrics;
mod reauth;
mod refreshed;
mod routes;
mod screen;
pub mod server;
mod spans;
mod sse;
mod stall;
mod state;
pub mod trace;
mod watched_body;

pub use budget::{BodyBudget, MemoryBudget, MemoryPlan};
pub use routes::router;
pub use server::{ServerSettings, serve};
pub use state::{AppParts, AppState};

#[cfg(test)]
mod tests;
