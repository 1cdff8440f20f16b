//! The rows of `retention`: the workers' lease p99 and items/s while a retention pass removes
//! finished items, against the same workers alone in the same run; and the pass's removal rate
//! against the rate at which those workers finish items.

use super::{Row, num, ratio, thousands, trouble};
use crate::results::{Retention, RetentionPhase};

/// The mean of a figure over the phases without a pass.
fn mean(phases: &[RetentionPhase], figure: impl Fn(&RetentionPhase) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = phases.iter().filter_map(figure).collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

pub(super) fn rows(rows: &mut Vec<Row>, r: &Retention) {
    if r.scenario.is_empty() || r.quiet.is_empty() {
        return;
    }
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
    let p99 = mean(&r.quiet, |p| p.lease.p99_ms);
    let rate = mean(&r.quiet, |p| p.items_per_s);
    rows.push([
        format!(
            "retention: lease p99 ms of {} single-call workers {removing}{}",
            r.workers,
            trouble("workers", during.errors, during.ran_dry)
        ),
        num(during.lease.p99_ms),
        format!("{} without (same run)", num(p99)),
        ratio(during.lease.p99_ms, p99),
    ]);
    rows.push([
        format!(
            "retention: items/s of {} single-call workers {removing}",
            r.workers
        ),
        num(during.items_per_s),
        format!("{} without (same run)", num(rate)),
        ratio(during.items_per_s, rate),
    ]);
    rows.push([
        format!(
            "retention: finished items removed per second by the pass ({} items and {} leases \
             in {} s, beside the workers), against the rate the workers finish \
             them",
            thousands(pass.items_removed),
            thousands(pass.leases_removed),
            num(Some(pass.seconds))
        ),
        num(pass.items_per_s),
        format!("{} finished/s (same run)", num(rate)),
        ratio(pass.items_per_s, rate),
    ]);
}
