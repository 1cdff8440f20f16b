//! The rows of `hostile`: the server's peak memory beside the hostile-client suite's clients
//! against its memory idle, and the workers' lease p99 beside those clients and beside a
//! random-token flood against the workers alone, all of one run.

use std::collections::BTreeMap;

use super::{Row, num, trouble, versus};
use crate::results::{Hostile, HostilePhase};

/// `feed 200: 16, feed 503: 184` (the answers in their map's order).
fn answered(answers: &BTreeMap<String, u64>) -> String {
    let all: Vec<String> = answers.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    all.join(", ")
}

fn lease_row(rows: &mut Vec<Row>, what: String, phase: &HostilePhase, quiet: &HostilePhase) {
    rows.push(versus(
        what + &trouble("workers", phase.drain.errors, phase.drain.ran_dry),
        phase.drain.lease.p99_ms,
        quiet.drain.lease.p99_ms,
        "without (same run)",
    ));
}

pub(super) fn rows(rows: &mut Vec<Row>, h: &Hostile) {
    if h.scenario.is_empty() {
        return;
    }
    let clients = format!(
        "{} HTTP/2 connections with a zero window opening {} feed resumes {} events back each, \
         {} HTTP/2 uploads of 1 MiB without a length, {} slow heads, {} idle connections from \
         one peer",
        h.feed_connections, h.feed_streams, h.resume_back, h.uploads, h.slow_heads, h.hog
    );
    let hwm = h.clients.server.map(|m| m.hwm_mib);
    let idle = h.idle.map(|m| m.rss_mib);
    rows.push(versus(
        format!(
            "hostile clients: server peak RSS (VmHWM), MiB, fresh server, after {clients} \
             (answered {})",
            answered(&h.clients.answers)
        ),
        hwm,
        idle,
        "idle after start",
    ));
    lease_row(
        rows,
        format!(
            "hostile clients: lease p99 ms of {} single-call workers beside them",
            h.workers
        ),
        &h.clients,
        &h.quiet,
    );
    lease_row(
        rows,
        format!(
            "token flood: lease p99 ms of {} single-call workers beside `POST /v1/leases` with \
             random bearer tokens, {} a second asked over {} connections, {} sent \
             (token-file auth: the edge's rejection path; answered {})",
            h.workers,
            h.flood_rate,
            h.flood_connections,
            num(h.flood_requests_per_s),
            answered(&h.flood.answers)
        ),
        &h.flood,
        &h.quiet,
    );
}
