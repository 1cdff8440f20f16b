//! The Logbook adapter: Muster's ports on PostgreSQL.
//!
//! This crate owns every SQL statement of Muster and the migrations (`/migrations`, embedded at
//! build time), the runtime role's grants (`grants.rs`) and TLS to Logbook (`tls.rs`). It knows
//! nothing of HTTP.
//!
//! Availability: every pool checkout, connect and statement is bounded in time, and failures to
//! reach the database surface as [`StoreError::Unavailable`] so callers answer fast; the pool
//! replaces broken connections by itself, so service resumes when the database returns.

mod archive;
mod checkpoint;
mod error;
mod feed;
mod grants;
mod hint;
mod logbook;
mod migrate;
mod pool;
#[cfg(test)]
mod sql_tidy;
mod tls;
mod verify;
mod wake;

pub use archive::{
    ArchivedBoundary, CheckpointName, PRUNE_BATCH, Pruned, archived_boundary, export_archive,
    prune_archive,
};
pub use checkpoint::{
    CheckpointSettings, Checkpointer, RecordedCheckpoint, checkpoint_text, latest_checkpoint,
    parse_checkpoint, take_checkpoint,
};
pub use error::PgError;
pub use grants::{
    DEFAULT_RUNTIME_ROLE, Grant, ObjectKind, RUNTIME_GRANTS, RoleCheck, check_connected_role,
    privilege_differences, validate_role,
};
pub use logbook::PgLogbook;
pub use migrate::{MIGRATIONS, Migration, SchemaStatus, migrate, schema_status};
pub use muster_app::ports::StoreError;
pub use muster_ledger::Checkpoint;
pub use pool::{PoolSettings, ROUND_TRIP_TIMEOUT, connect_pool};
pub use tls::{DbTarget, MakeRustls, SslMode, parse_url};
pub use verify::{
    LedgerHead, LedgerReport, ledger_head, verify_against, verify_ledger, verify_since,
};
pub use wake::{APPLICATION_NAME as WAKE_APPLICATION_NAME, CHANNEL as WAKE_CHANNEL, WakeBridge};
