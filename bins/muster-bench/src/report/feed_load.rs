//! The rows of `feed-load`: what SSE subscribers cost the workers, against the same run's
//! phases without any; and of `feed-memory`: what idle subscribers cost in memory.

use super::{Row, num, ratio, versus};
use crate::results::{FeedLoad, FeedMemory};

/// The aim for the server CPU one more subscriber costs per event, in µs.
const CPU_PER_EVENT_AIM_US: f64 = 0.3;

/// The aim for the server's RSS with 1,000 subscribers, in MiB.
const MEMORY_AIM_MIB: f64 = 24.0;

pub(super) fn rows(rows: &mut Vec<Row>, load: &FeedLoad) {
    let none: Vec<_> = load.runs.iter().filter(|r| r.subscribers == 0).collect();
    if none.is_empty() {
        return;
    }
    let mean = |f: &dyn Fn(&&crate::results::FeedLoadRun) -> Option<f64>| -> Option<f64> {
        let v: Vec<f64> = none.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let rate0 = mean(&|r| r.drain.items_per_s);
    let p99_0 = mean(&|r| r.drain.lease.p99_ms);
    for run in load.runs.iter().filter(|r| r.subscribers > 0) {
        let mut note = format!(
            "{}/{} connected; streams ended early: {}",
            run.connected, run.subscribers, run.streams_ended_early
        );
        if run.drain.errors > 0 {
            note.push_str(&format!("; {} errors", run.drain.errors));
        }
        if run.drain.ran_dry {
            note.push_str("; backlog ran dry");
        }
        rows.push(versus(
            format!(
                "feed cost: items/s of {} single-call workers with {} SSE subscribers reading ({note})",
                load.workers, run.subscribers
            ),
            run.drain.items_per_s,
            rate0,
            "with none (same run)",
        ));
        rows.push(versus(
            format!(
                "feed cost: lease p99 ms with {} SSE subscribers reading",
                run.subscribers
            ),
            run.drain.lease.p99_ms,
            p99_0,
            "with none (same run)",
        ));
        rows.push([
            format!(
                "feed cost: server CPU µs per event per subscriber, {} subscribers ({} events delivered)",
                run.subscribers, run.events_delivered
            ),
            run.server_cpu_us_per_event_per_subscriber
                .map_or_else(|| "n/a".into(), |x| format!("{x:.3}")),
            format!("{CPU_PER_EVENT_AIM_US} aim"),
            ratio(
                run.server_cpu_us_per_event_per_subscriber,
                Some(CPU_PER_EVENT_AIM_US),
            ),
        ]);
    }
}

/// One row per layout: the server's RSS with the subscribers against the aim, with the
/// RSS just before they connected and the cost per subscriber in the label.
pub(super) fn memory_rows(rows: &mut Vec<Row>, layouts: &[FeedMemory]) {
    for m in layouts {
        let layout = if m.connections == m.subscribers {
            format!("{}, a connection each", m.protocol)
        } else {
            format!("{} streams over {} connections", m.protocol, m.connections)
        };
        let per = m
            .kib_per_subscriber
            .map_or_else(|| "n/a".into(), |k| format!("{k:.1}"));
        rows.push([
            format!(
                "feed memory: server RSS, MiB, {} idle SSE subscribers as {layout}, fresh server ({} MiB before they connected; {per} KiB each)",
                m.subscribers,
                num(m.server_rss_mib_before),
            ),
            num(m.server_rss_mib_with_subscribers),
            format!("{MEMORY_AIM_MIB} aim"),
            ratio(m.server_rss_mib_with_subscribers, Some(MEMORY_AIM_MIB)),
        ]);
    }
}
