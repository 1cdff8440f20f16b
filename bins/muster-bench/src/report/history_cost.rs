//! The rows of `history-suite`: the largest history against the smallest, each figure of
//! `history-cost` (latencies, the feed resume, `ledger-verify --since`) as the mean of its runs,
//! and the bytes per finished item of each `core` table the fill wrote to.

use super::{Row, num, p_ratio, pair, ratio, thousands, trouble, versus};
use crate::results::{HistoryCost, HistorySize, Percentiles};

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
    let finished = size.runs.first()?.finished;
    (finished > 0).then(|| total as f64 / finished as f64)
}

/// The mean of a figure over a size's runs.
fn mean(size: &HistorySize, figure: impl Fn(&HistoryCost) -> Option<f64>) -> Option<f64> {
    let all: Vec<f64> = size.runs.iter().filter_map(figure).collect();
    (!all.is_empty()).then(|| all.iter().sum::<f64>() / all.len() as f64)
}

/// The mean p50 and p99 of a sample over a size's runs (`n` summed).
fn mean_of(size: &HistorySize, sample: impl Fn(&HistoryCost) -> &Percentiles) -> Percentiles {
    Percentiles {
        n: size.runs.iter().map(|r| sample(r).n).sum(),
        p50_ms: mean(size, |r| sample(r).p50_ms),
        p99_ms: mean(size, |r| sample(r).p99_ms),
    }
}

pub(super) fn rows(rows: &mut Vec<Row>, sizes: &[HistorySize]) {
    let (Some(base), Some(large)) = (sizes.first(), sizes.last()) else {
        return;
    };
    if sizes.len() < 2 {
        return;
    }
    let (Some(b), Some(l)) = (base.runs.first(), large.runs.first()) else {
        return;
    };
    let what = format!(
        "{} finished items, {} ledger rows (mean of {} runs)",
        thousands(l.finished as u64),
        thousands(l.ledger_rows as u64),
        large.runs.len()
    );
    let against = format!("with {} finished", thousands(b.finished as u64));
    let mut latency = |label: String, sample: &dyn Fn(&HistoryCost) -> &Percentiles| {
        let (lp, bp) = (mean_of(large, sample), mean_of(base, sample));
        rows.push([
            format!("history cost: {label}, {what}"),
            pair(&lp),
            format!("{} {against}", pair(&bp)),
            p_ratio(&lp, &bp),
        ]);
    };
    let (errors, dry) = (
        large.runs.iter().map(|r| r.drain.errors).sum(),
        large.runs.iter().any(|r| r.drain.ran_dry),
    );
    latency(
        format!(
            "lease latency p50 / p99 ms of {} single-call workers, {} s{}",
            l.workers,
            num(Some(l.drain.seconds)),
            trouble("workers", errors, dry)
        ),
        &|r| &r.drain.lease,
    );
    latency(
        "complete latency p50 / p99 ms, same workers".to_owned(),
        &|r| &r.drain.complete,
    );
    latency(
        format!(
            "`GET /v1/items?state=done&kind=trawl` page of 100 latency p50 / p99 ms ({} pages, on \
             with `next`)",
            l.items_done_page.n
        ),
        &|r| &r.items_done_page,
    );
    latency(
        format!(
            "feed resume `Last-Event-ID` {} events back, request → the newest event, p50 / p99 \
             ms ({} resumes)",
            thousands(l.resume_back as u64),
            l.feed_resume.n
        ),
        &|r| &r.feed_resume,
    );
    let seconds = |s: &HistorySize| mean(s, |r| Some(r.since_verify.seconds));
    let peak = |s: &HistorySize| mean(s, |r| r.since_verify.peak_rss_mib);
    let after = |s: &HistorySize| mean(s, |r| Some(r.entries_after_checkpoint as f64));
    rows.push([
        format!(
            "history cost: `muster ledger-verify --since` the checkpoint over the fill, s / peak \
             RSS MiB ({} entries after it; {} with the smaller history), {what}",
            thousands(after(large).unwrap_or(0.0) as u64),
            thousands(after(base).unwrap_or(0.0) as u64)
        ),
        format!("{} / {}", num(seconds(large)), num(peak(large))),
        format!("{} / {} {against}", num(seconds(base)), num(peak(base))),
        format!(
            "{} / {}",
            ratio(seconds(large), seconds(base)),
            ratio(peak(large), peak(base))
        ),
    ]);
    for table in TABLES.map(Some).into_iter().chain([None]) {
        let (lb, bb) = (per_item(large, table), per_item(base, table));
        let of = table.map_or_else(
            || TABLES.map(|t| format!("core.{t}")).join(" + "),
            |t| format!("core.{t}"),
        );
        rows.push(versus(
            format!(
                "history cost: bytes per finished item, {of} (`pg_total_relation_size` after the \
                 fill, before the queue), {}",
                thousands(l.finished as u64)
            ),
            lb,
            bb,
            &against,
        ));
    }
}
