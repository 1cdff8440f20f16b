//! The rows of `trace-cost`: what exporting every span costs the workers and the server,
//! against the same run's phases with tracing off.

use super::{Row, num, versus};
use crate::results::{TraceCost, TraceCostRun};

/// The mean of a figure over the phases with tracing `on` (or off) that have it.
fn mean(cost: &TraceCost, on: bool, figure: impl Fn(&TraceCostRun) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = cost
        .runs
        .iter()
        .filter(|r| r.tracing == on)
        .filter_map(figure)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The total of a count over the phases with tracing on.
fn total(cost: &TraceCost, count: impl Fn(&TraceCostRun) -> Option<u64>) -> Option<u64> {
    let on = cost.runs.iter().filter(|r| r.tracing);
    on.map(count).sum()
}

pub(super) fn rows(rows: &mut Vec<Row>, cost: &TraceCost) {
    let offs = cost.runs.iter().filter(|r| !r.tracing).count();
    if offs == 0 || offs == cost.runs.len() {
        return;
    }
    let order: Vec<&str> = cost
        .runs
        .iter()
        .map(|r| if r.tracing { "on" } else { "off" })
        .collect();
    let mut note = format!("phases {}", order.join(", "));
    let errors: u64 = cost.runs.iter().map(|r| r.drain.errors).sum();
    if errors > 0 {
        note.push_str(&format!("; {errors} errors"));
    }
    if cost.runs.iter().any(|r| r.drain.ran_dry) {
        note.push_str("; backlog ran dry");
    }
    let against = format!("tracing off (mean of {offs}, same run)");
    for (what, figure) in [
        (
            format!(
                "items/s of {} single-call workers, {} s a fresh server ({note})",
                cost.workers, cost.phase_seconds
            ),
            (|r: &TraceCostRun| r.drain.items_per_s) as fn(&TraceCostRun) -> Option<f64>,
        ),
        ("lease p99 ms".to_owned(), |r| r.drain.lease.p99_ms),
        (
            "server CPU µs per item (drain and last export)".to_owned(),
            |r| r.server_cpu_us_per_item,
        ),
    ] {
        rows.push(versus(
            format!("trace cost: {what}, every span exported over OTLP/HTTP"),
            mean(cost, true, figure),
            mean(cost, false, figure),
            &against,
        ));
    }
    let items: u64 = cost
        .runs
        .iter()
        .filter(|r| r.tracing)
        .map(|r| r.drain.items)
        .sum();
    let per_item = |n: Option<u64>| n.filter(|_| items > 0).map(|n| n as f64 / items as f64);
    let exported = total(cost, |r| r.spans_exported);
    let (dropped, failed) = (
        total(cost, |r| r.spans_dropped),
        total(cost, |r| r.spans_failed),
    );
    let requests: u64 = cost.runs.iter().map(|r| r.otlp_requests).sum();
    let bytes: u64 = cost.runs.iter().map(|r| r.otlp_bytes).sum();
    let count = |n: Option<u64>| n.map_or_else(|| "n/a".to_owned(), |n| n.to_string());
    rows.push([
        format!(
            "trace cost: spans exported per item ({} exported, {} dropped, {} failed)",
            count(exported),
            count(dropped),
            count(failed)
        ),
        num(per_item(exported)),
        "– (none with tracing off)".to_owned(),
        "–".to_owned(),
    ]);
    rows.push([
        format!("trace cost: OTLP bytes per item at the collector ({requests} export requests)"),
        num(per_item(Some(bytes))),
        "– (none with tracing off)".to_owned(),
        "–".to_owned(),
    ]);
}
