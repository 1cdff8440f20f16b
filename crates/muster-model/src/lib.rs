//! A model of Muster's lease protocol — lease, heartbeat, expiry, complete, fail,
//! needs_subtool, fencing and idempotent redelivery — checked with [stateright].
//!
//! The server's side is not a paraphrase: every step rebuilds a real `muster_domain::Item`
//! and `LeaseRecord` from the model's rows and calls the domain's own functions
//! (`Item::lease`, `Item::heartbeat`, `Item::check_finish`, `Item::complete`, `Item::fail`,
//! `Item::park`, `Item::record_late_result`, `Item::enqueue`, `request_digest`,
//! `Routes::first_refused`), in the order `crates/muster-app/src/service/` calls them. What
//! lives in SQL (`lock_next_leasable`, `lock_leases`, `finish_leases`) is mirrored in
//! [`server`], each function naming the statement it mirrors.
//!
//! Around the server: a few workers that lease, heartbeat, finish through a durable spool,
//! redeliver and crash; a network that holds every request back for as long as it likes and
//! loses answers (so that spooled results are delivered again, and duplicates reach Muster);
//! a logical clock that lets leases expire. `docs/lease-model.md` describes what is modelled,
//! what is abstracted away, the properties and the state counts; the check itself is
//! `tests/lease_protocol.rs` (`cargo test -p muster-model`).
//!
//! [stateright]: https://docs.rs/stateright

pub mod bridge;
pub mod model;
pub mod server;
pub mod state;

pub use model::{Action, Config, Flaw, LeaseModel};
pub use state::{Anomaly, State};
