//! Muster's use cases: enqueue, lease (with long poll), heartbeat, complete, fail,
//! needs_subtool, inspect and retry.
//!
//! Every use case is written against the port traits in [`ports`]; transaction boundaries are
//! expressed here as port calls (`begin` … `commit`), while the rules themselves live in
//! `muster-domain`. This crate knows neither SQL nor HTTP.

pub mod auth;
mod combine;
pub mod dependency;
pub mod error;
pub mod feed;
pub mod intake;
pub mod nodes;
pub mod ports;
pub mod service;
pub mod signal;
pub mod stats;
pub mod views;

pub use error::AppError;
pub use service::{Config, Muster, Stores};
