//! End-to-end suite: the real server on a real socket against a real PostgreSQL.

mod bad_input;
mod batch;
mod budget;
mod edits;
mod feed;
mod feed_sigterm;
mod group_commit;
mod harness;
mod health;
mod leases;
mod ledger;
mod metrics;
mod monitoring;
mod openapi;
mod outage;
mod redaction;
mod replay;
mod shutdown;
mod sigterm;
