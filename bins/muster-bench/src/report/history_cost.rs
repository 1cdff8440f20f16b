//! The rows of `history-suite`: the largest history against the smallest, each figure of
//! `history-cost` (latencies p99, the feed resume, `ledger-verify --since`) and the bytes per
//! finished item of each `core` table the fill wrote to.

use super::{Row, num, p_ratio, pair, ratio, thousands, trouble};
use crate::results::{HistorySize, Percentiles};

/// The tables a finished item leaves rows in.
const TABLES: [&str; 3] = ["items", "leases", "ledger"];

/// Bytes of `table` (all of [`TABLES`] with `None`) per finished item of the fill.
fn per_item(size: &HistorySize, table: Option<&str>) -> Option<f64> {
    let bytes = size.fill.core_bytes.as_ref()?;
    let total: i64 = TABLES
        .iter()
        .filter(|t| table.is_none_or(|only| only == **t))
        .filter_map(|t| bytes.get(*t))
        .sum();
    (size.measured.finished > 0).then(|| total as f64 / size.measured.finished as f64)
}

pub(super) fn rows(rows: &mut Vec<Row>, sizes: &[HistorySize]) {
    let (Some(base), Some(large)) = (sizes.first(), sizes.last()) else {
        return;
    };
    if sizes.len() < 2 {
        return;
    }
    let (b, l) = (&base.measured, &large.measured);
    let what = format!(
        "{} finished items, {} ledger rows",
        thousands(l.finished as u64),
        thousands(l.ledger_rows as u64)
    );
    let against = format!("with {} finished", thousands(b.finished as u64));
    let mut latency = |label: String, lp: &Percentiles, bp: &Percentiles| {
        rows.push([
            format!("history cost: {label}, {what}"),
            pair(lp),
            format!("{} {against}", pair(bp)),
            p_ratio(lp, bp),
        ]);
    };
    let workers = format!(
        "{} single-call workers, {} s{}",
        l.workers,
        num(Some(l.drain.seconds)),
        trouble("workers", l.drain.errors, l.drain.ran_dry)
    );
    latency(
        format!("lease latency p50 / p99 ms of {workers}"),
        &l.drain.lease,
        &b.drain.lease,
    );
    latency(
        "complete latency p50 / p99 ms, same workers".to_owned(),
        &l.drain.complete,
        &b.drain.complete,
    );
    latency(
        format!(
            "`GET /v1/items?state=done&kind=trawl` page of 100 latency p50 / p99 ms ({} pages, on \
             with `next`)",
            l.items_done_page.n
        ),
        &l.items_done_page,
        &b.items_done_page,
    );
    latency(
        format!(
            "feed resume `Last-Event-ID` {} events back, request → the newest event, p50 / p99 \
             ms ({} resumes)",
            thousands(l.resume_back as u64),
            l.feed_resume.n
        ),
        &l.feed_resume,
        &b.feed_resume,
    );
    let (lv, bv) = (&l.since_verify, &b.since_verify);
    rows.push([
        format!(
            "history cost: `muster ledger-verify --since` the checkpoint over the fill, s / peak \
             RSS MiB ({} entries after it; {} with the smaller history), {what}",
            thousands(l.entries_after_checkpoint as u64),
            thousands(b.entries_after_checkpoint as u64)
        ),
        format!("{} / {}", num(Some(lv.seconds)), num(lv.peak_rss_mib)),
        format!(
            "{} / {} {against}",
            num(Some(bv.seconds)),
            num(bv.peak_rss_mib)
        ),
        format!(
            "{} / {}",
            ratio(Some(lv.seconds), Some(bv.seconds)),
            ratio(lv.peak_rss_mib, bv.peak_rss_mib)
        ),
    ]);
    for table in TABLES.map(Some).into_iter().chain([None]) {
        let (lb, bb) = (per_item(large, table), per_item(base, table));
        let of = table.map_or_else(
            || TABLES.map(|t| format!("core.{t}")).join(" + "),
            |t| format!("core.{t}"),
        );
        rows.push([
            format!(
                "history cost: bytes per finished item, {of} (`pg_total_relation_size` after the \
                 fill, before the queue), {}",
                thousands(l.finished as u64)
            ),
            num(lb),
            format!("{} {against}", num(bb)),
            ratio(lb, bb),
        ]);
    }
}
