//! End-to-end suite: the real server on a real socket against a real PostgreSQL.

mod bad_input;
mod batch;
mod budget;
mod connections;
mod edits;
mod feed;
mod group_commit;
mod harness;
mod health;
mod health_reads;
mod leases;
mod ledger;
mod listing;
mod metrics;
mod monitoring;
mod next_cap;
mod nul_strings;
mod openapi;
mod outage;
mod probes;
mod redaction;
mod replay;
mod roles;
mod rollout;
mod shutdown;
mod sigterm;
