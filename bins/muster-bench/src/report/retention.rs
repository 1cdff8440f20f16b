//! The rows of `retention`: the workers' lease p99 and items/s while a retention pass removes
//! finished items, against the same workers alone just before it in the same run (the phase
//! after it, beside the removed rows' vacuum, is named in the label); and the pass's removal
//! rate against the rate at which those workers finish items.

use super::{Row, num, thousands, trouble, versus};
use crate::results::Retention;

pub(super) fn rows(rows: &mut Vec<Row>, r: &Retention) {
    let Some(before) = r.quiet.first() else {
        return;
    };
    let after = r.quiet.get(1);
    let (during, pass) = (&r.during, &r.pass);
    let removing = format!(
        "while a retention pass removes {} finished items (of {}){}",
        thousands(pass.items_removed),
        thousands(u64::try_from(pass.finished_before).unwrap_or(0)),
        if pass.outlasted_phase {
            ""
        } else {
            "; the pass ended within the phase"
        }
    );
    let (p99, rate) = (before.lease.p99_ms, before.items_per_s);
    rows.push(versus(
        format!(
            "retention: lease p99 ms of {} single-call workers {removing}{} (alone after it: {})",
            r.workers,
            trouble("workers", during.errors, during.ran_dry),
            num(after.and_then(|a| a.lease.p99_ms))
        ),
        during.lease.p99_ms,
        p99,
        "alone before it (same run)",
    ));
    rows.push(versus(
        format!(
            "retention: items/s of {} single-call workers {removing} (alone after it: {})",
            r.workers,
            num(after.and_then(|a| a.items_per_s))
        ),
        during.items_per_s,
        rate,
        "alone before it (same run)",
    ));
    rows.push(versus(
        format!(
            "retention: finished items removed per second by the pass ({} items and {} leases \
             in {} s, beside the workers), against the rate the workers finish them",
            thousands(pass.items_removed),
            thousands(pass.leases_removed),
            num(Some(pass.seconds))
        ),
        pass.items_per_s,
        rate,
        "finished/s (same run)",
    ));
}
