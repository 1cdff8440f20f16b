//! Muster's HTTP transport: hyper 1 + hyper-util for connections, axum's `Router` for routing.
//!
//! This crate translates HTTP into use-case calls and back: authentication of the bearer token,
//! JSON bodies read under a size limit with unknown fields refused, the one table that maps
//! every error to a status and an `E_…` code ([`error`]), and the server loop with header-read
//! timeout and graceful shutdown ([`server`]). It knows nothing of SQL.

pub mod budget;
pub mod dev_web;
mod edits;
pub mod error;
mod extract;
pub mod metrics;
mod routes;
pub mod server;
mod sse;

pub use budget::BodyBudget;
pub use routes::{AppParts, AppState, router};
pub use server::{ServerSettings, serve};
