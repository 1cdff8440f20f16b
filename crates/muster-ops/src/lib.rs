//! The operator CLI (`muster items …`, `muster kinds …`, `muster queues`, `muster health`,
//! `muster watch`): a client of Muster's HTTP API that goes through the gatekeeper with a
//! bearer token like any other caller, the tables it prints for people (`--json` for scripts),
//! and the live view of the feed.
//!
//! Invariants:
//! - Knows HTTP and the wire contract, nothing of SQL or of the server's insides; the server
//!   binary only dispatches to [`run`].
//! - The token goes into one `Authorization` header marked sensitive and nowhere else: not in
//!   an error, an output line or a `Debug` print.
//! - Exit codes ([`Exit`]) are part of the interface: scripts rely on them.

pub mod client;
pub mod command;
pub mod error;
pub mod sse;
pub mod table;
pub mod watch;

pub use client::Client;
pub use command::{ItemsCommand, KindsCommand, OpsCommand, Target, run};
pub use error::{Exit, OpsError};
