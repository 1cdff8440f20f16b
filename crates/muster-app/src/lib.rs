//! Muster's use cases: enqueue, lease (with long poll), heartbeat, complete, fail,
//! needs_subtool, inspect and retry.
//!
//! Every use case is written against the port traits in [`ports`]; transaction boundaries are
//! expressed here as port calls (`begin` … `commit`), while the rules themselves live in
//! `muster-domain`. This crate knows neither SQL nor HTTP.

/// `Debug` for a use-case handle: its name and the one field worth printing (`name = path`
/// from `self`); the rest (ports, channels, locks) is left out as `..`.
macro_rules! debug_showing {
    ($ty:ident, $name:ident = $($path:ident).+) => {
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field(stringify!($name), &self.$($path).+)
                    .finish_non_exhaustive()
            }
        }
    };
}

pub mod auth;
mod combine;
pub mod dependency;
pub mod error;
pub mod feed;
pub mod intake;
pub mod nodes;
pub mod ports;
pub mod service;
pub mod shared;
pub mod signal;
pub mod stats;
pub mod telemetry;
pub mod views;

pub use error::AppError;
pub use service::{Config, Muster, Stores};
