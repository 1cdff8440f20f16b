//! The table of a `cargo xtask bench` run: every figure next to a baseline measured in the same
//! run, and their ratio, from the documents of [`crate::results`]. See docs/benchmarks.md.

mod feed_load;
mod history_cost;
mod hostile;
mod retention;
#[cfg(test)]
mod tests;
mod trace_cost;

use serde::Serialize;

use crate::results::{
    BacklogMeasured, BacklogSize, BatchRun, Bloat, Cycles, CyclesRun, Feed, FeedLoad, FeedMemory,
    FloorResult, HistorySize, Hostile, Percentiles, Pickup, Retention, RuntimeDoc, ServerMemory,
    Spam, TraceCost, WalPerItem,
};

/// The pod's memory request (deploy/), the baseline of the memory rows.
const MEMORY_REQUEST_MIB: f64 = 48.0;

/// Everything one run measured, as the table reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Suite {
    /// `(nproc, CPU model, PostgreSQL version, date)`.
    pub(crate) machine: Vec<(String, String)>,
    pub(crate) cycles: Cycles,
    pub(crate) pickup: Pickup,
    pub(crate) spam: Spam,
    pub(crate) feed: Feed,
    pub(crate) feed_load: FeedLoad,
    /// Idle subscribers' memory, one layout per fresh server (`feed-memory-*.json`).
    pub(crate) feed_memory: Vec<FeedMemory>,
    /// Hostile clients and a random-token flood beside the workers (`hostile.json`).
    pub(crate) hostile: Hostile,
    /// Every span exported against tracing off (`trace-cost.json`).
    pub(crate) trace_cost: TraceCost,
    pub(crate) backlog: Vec<BacklogSize>,
    /// The largest backlog with half as many delayed items beside it (`delayed.json`).
    pub(crate) delayed: Option<BacklogSize>,
    /// A short queue beside a million finished items (`history.json`).
    pub(crate) history: Option<BacklogSize>,
    /// The workers beside a retention pass over that history (`retention.json`).
    pub(crate) retention: Retention,
    pub(crate) batches: Vec<BatchRun>,
    pub(crate) floor: Vec<FloorResult>,
    pub(crate) bloat: Bloat,
    pub(crate) memory: ServerMemory,
    /// The worker runtime against the bare client loop (`muster-bench runtime`).
    pub(crate) runtime: RuntimeDoc,
}

/// One row: what, measured, baseline, ratio.
type Row = [String; 4];

/// A figure: whole above 100, else two decimals.
fn num(v: Option<f64>) -> String {
    match v {
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
        None => "n/a".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "n/a".into(),
    }
}

/// A row of one figure against its baseline: the figure, the baseline followed by `against`
/// (`with none (same run)`), their ratio.
fn versus(label: String, measured: Option<f64>, baseline: Option<f64>, against: &str) -> Row {
    [
        label,
        num(measured),
        format!("{} {against}", num(baseline)),
        ratio(measured, baseline),
    ]
}

fn pair(v: &Percentiles) -> String {
    format!("{} / {}", num(v.p50_ms), num(v.p99_ms))
}

fn p_ratio(h: &Percentiles, l: &Percentiles) -> String {
    format!(
        "{} / {}",
        ratio(h.p50_ms, l.p50_ms),
        ratio(h.p99_ms, l.p99_ms)
    )
}

/// A value as its JSON document shows it (`null` when missing, strings quoted).
fn text(v: impl Serialize) -> String {
    serde_json::to_string(&v).unwrap_or_default()
}

/// ` (NAME: N errors)` and ` (NAME: backlog ran dry)` notes.
fn trouble(name: &str, errors: u64, ran_dry: bool) -> String {
    let mut note = String::new();
    if errors > 0 {
        note.push_str(&format!(" ({name}: {errors} errors)"));
    }
    if ran_dry {
        note.push_str(&format!(" ({name}: backlog ran dry)"));
    }
    note
}

/// The markdown table of a run, then the machine it ran on.
pub(crate) fn render(suite: &Suite) -> String {
    let mut rows: Vec<Row> = Vec::new();
    let runs = &suite.cycles.runs;
    cycles_rows(&mut rows, runs);
    ceiling_rows(&mut rows, runs, &suite.floor);
    latency_rows(&mut rows, runs, &suite.pickup);
    memory_rows(&mut rows, suite.memory);
    spam_rows(&mut rows, &suite.spam);
    feed_rows(&mut rows, &suite.feed);
    feed_load::rows(&mut rows, &suite.feed_load);
    feed_load::memory_rows(&mut rows, &suite.feed_memory);
    hostile::rows(&mut rows, &suite.hostile);
    trace_cost::rows(&mut rows, &suite.trace_cost);
    backlog_rows(&mut rows, &suite.backlog);
    if let (Some(base), Some(delayed)) = (suite.backlog.last(), &suite.delayed) {
        delayed_rows(&mut rows, base, delayed);
    }
    if let (Some(base), Some(history)) = (suite.backlog.first(), &suite.history) {
        history_rows(&mut rows, base, history);
    }
    retention::rows(&mut rows, &suite.retention);
    batch_rows(&mut rows, &suite.batches);
    floor_rows(&mut rows, &suite.batches, &suite.floor);
    wal_rows(&mut rows, &suite.batches, &suite.floor);
    bloat_rows(&mut rows, &suite.bloat);
    runtime_rows(&mut rows, &suite.runtime);
    table(rows, &suite.machine)
}

/// The markdown table of `history-suite`'s sizes, then the machine it ran on.
pub(crate) fn render_history(sizes: &[HistorySize], machine: &[(String, String)]) -> String {
    let mut rows: Vec<Row> = Vec::new();
    history_cost::rows(&mut rows, sizes);
    table(rows, machine)
}

/// The markdown table of `trace-suite`, then the machine it ran on.
pub(crate) fn render_trace(cost: &TraceCost, machine: &[(String, String)]) -> String {
    let mut rows: Vec<Row> = Vec::new();
    trace_cost::rows(&mut rows, cost);
    table(rows, machine)
}

fn table(rows: Vec<Row>, machine: &[(String, String)]) -> String {
    let mut t = String::new();
    t.push_str("| figure | measured (HTTP server) | baseline, same run | ratio |\n");
    t.push_str("|---|---:|---:|---:|\n");
    for [a, b, c, d] in rows {
        t.push_str(&format!("| {a} | {b} | {c} | {d} |\n"));
    }
    t.push_str("\n| machine | |\n|---|---|\n");
    for (k, v) in machine {
        t.push_str(&format!("| {k} | {v} |\n"));
    }
    t
}

fn cycles_rows(rows: &mut Vec<Row>, runs: &[CyclesRun]) {
    for run in runs {
        let (h, l) = (&run.http, &run.in_process);
        let note =
            trouble("HTTP", h.errors, h.ran_dry) + &trouble("in-process", l.errors, l.ran_dry);
        rows.push([
            format!(
                "lease→complete cycles/s, {} workers ({} ran first){note}",
                run.workers,
                run.order
                    .first()
                    .map_or("?", String::as_str)
                    .replace('_', "-")
            ),
            num(h.cycles_per_s),
            format!("{} in-process", num(l.cycles_per_s)),
            ratio(h.cycles_per_s, l.cycles_per_s),
        ]);
    }
}

fn latency_rows(rows: &mut Vec<Row>, runs: &[CyclesRun], pickup: &Pickup) {
    if let Some(run) = runs.iter().find(|r| r.workers == 16) {
        for (op, h, l) in [
            ("lease", &run.http.lease, &run.in_process.lease),
            ("complete", &run.http.complete, &run.in_process.complete),
        ] {
            rows.push([
                format!("{op} latency p50 / p99 ms, 16 workers"),
                pair(h),
                format!("{} in-process", pair(l)),
                p_ratio(h, l),
            ]);
        }
    }
    let (h, l) = (&pickup.http, &pickup.in_process);
    rows.push([
        format!(
            "pickup latency p50 / p99 ms (long poll 5 s, {} repeats; missed {} / {})",
            text(pickup.repeats),
            pickup.http_missed,
            pickup.in_process_missed
        ),
        pair(h),
        format!("{} in-process", pair(l)),
        p_ratio(h, l),
    ]);
    if pickup.cross_replica.n > 0 {
        let x = &pickup.cross_replica;
        rows.push([
            format!(
                "pickup latency p50 / p99 ms, enqueued through another replica (missed {})",
                pickup.cross_replica_missed
            ),
            pair(x),
            format!("{} same replica", pair(h)),
            p_ratio(x, h),
        ]);
    }
    let w = &pickup.wake_cycles;
    if let (Some(with), Some(without)) = (w.with_wake_per_s, w.without_wake_per_s) {
        rows.push([
            format!(
                "enqueue→lease→complete cycles/s in-process, {} workers, with cross-replica wake-ups",
                w.workers
            ),
            format!("{with:.0}"),
            format!("{without:.0} without"),
            ratio(Some(with), Some(without)),
        ]);
    }
}

fn memory_rows(rows: &mut Vec<Row>, memory: ServerMemory) {
    for (what, mib) in [
        ("server peak RSS (VmHWM) at end, MiB", memory.end.hwm_mib),
        ("server RSS at end, MiB", memory.end.rss_mib),
        ("server RSS idle after start, MiB", memory.idle.rss_mib),
    ] {
        rows.push([
            what.into(),
            format!("{mib:.1}"),
            format!("{MEMORY_REQUEST_MIB:.0} pod request"),
            ratio(Some(mib), Some(MEMORY_REQUEST_MIB)),
        ]);
    }
}

fn spam_rows(rows: &mut Vec<Row>, spam: &Spam) {
    let acc_rate = spam.accepted.as_ref().and_then(|a| a.requests_per_s);
    for (what, r) in [
        ("honeypot", &spam.honeypot),
        ("proof-of-work", &spam.pow_refused),
    ] {
        rows.push([
            format!(
                "edit intake refused at {what} layer, req/s ({} clients; statuses {})",
                spam.clients,
                text(&r.statuses)
            ),
            num(r.requests_per_s),
            format!("{} accepted/s", num(acc_rate)),
            ratio(r.requests_per_s, acc_rate),
        ]);
    }
    match &spam.accepted {
        None => rows.push([
            "edit intake accepted, req/s".into(),
            "not run".into(),
            "n/a".into(),
            "n/a".into(),
        ]),
        Some(acc) => rows.push([
            format!(
                "edit intake accepted, req/s ({} pre-solved at difficulty {}; statuses {})",
                acc.requests,
                spam.difficulty,
                text(&acc.statuses)
            ),
            num(acc_rate),
            format!("{} honeypot/s", num(spam.honeypot.requests_per_s)),
            ratio(acc_rate, spam.honeypot.requests_per_s),
        ]),
    }
}

fn feed_rows(rows: &mut Vec<Row>, feed: &Feed) {
    for run in &feed.runs {
        let (ev, rt) = (&run.event_after_201, &run.enqueue_round_trip);
        rows.push([
            format!(
                "feed: enqueue 201 → `transition` at subscriber, p50 / p99 ms, {} SSE subscribers \
                 ({}/{} connected; {} enqueues every {} ms; subscribers that missed any event: {}; \
                 streams ended early: {}; events seen before the 201: {})",
                run.subscribers,
                run.connected,
                run.subscribers,
                run.enqueues,
                run.interval_ms,
                run.missed_subscribers,
                run.streams_ended_early,
                run.events_before_201,
            ),
            pair(ev),
            format!("{} enqueue round trip", pair(rt)),
            p_ratio(ev, rt),
        ]);
    }
    if let Some(big) = feed.runs.iter().max_by_key(|r| r.subscribers)
        && big.subscribers > 1
    {
        let (with, without) = (
            big.server_rss_mib_idle_connected,
            big.server_rss_mib_before_connect,
        );
        rows.push([
            format!(
                "server RSS, MiB, {} idle SSE subscribers connected (2 s after the last connected)",
                big.subscribers
            ),
            num(with),
            format!("{} with none, just before", num(without)),
            ratio(with, without),
        ]);
    }
}

fn batch_rows(rows: &mut Vec<Row>, batches: &[BatchRun]) {
    let Some(base) = batches.first() else {
        return;
    };
    for run in batches {
        let mut note = String::new();
        if run.errors > 0 {
            note.push_str(&format!(
                " ({} errors: {})",
                run.errors,
                text(&run.first_error)
            ));
        }
        rows.push([
            format!(
                "batching: items/s at batch size {}{}, {} workers ({} items in {} s{}; \
                 server peak RSS {} MiB){note}",
                text(run.batch),
                match (run.lease_next, run.next) {
                    (true, _) => " with `lease_next`",
                    (false, true) => " with a `next` step per item",
                    (false, false) => "",
                },
                run.workers,
                run.items,
                num(Some(run.seconds)),
                if run.drained { ", drained" } else { "" },
                num(run.server_peak_rss_mib),
            ),
            num(run.items_per_s),
            format!("{} at batch size 1", num(base.items_per_s)),
            ratio(run.items_per_s, base.items_per_s),
        ]);
    }
}

/// Muster's largest batch against the same rows written in plain SQL, and what a bare queue
/// writes against those rows.
fn floor_rows(rows: &mut Vec<Row>, batches: &[BatchRun], floor: &[FloorResult]) {
    let named = |name: &str| floor.iter().find(|r| r.name.as_deref() == Some(name));
    if let Some(why) = floor.iter().find_map(|r| r.skipped.as_deref()) {
        rows.push([
            "SQL floor (pgbench)".into(),
            format!("not measured: {why}"),
            String::new(),
            String::new(),
        ]);
        return;
    }
    let run = |v: &FloorResult| {
        let short = if v.items == v.expected_items {
            String::new()
        } else {
            format!(" of {} asked", text(v.expected_items))
        };
        format!(
            "{} clients, batches of {}, {} items{short} in {} s",
            text(v.clients),
            text(v.batch),
            text(v.items),
            num(v.seconds)
        )
    };
    const ROWS: &str = "lease, lease row, ledger row, completion, finished lease, ledger row \
                        per item";
    let largest = batches
        .iter()
        .filter(|r| !r.next)
        .max_by_key(|r| r.batch.unwrap_or(0));
    if let (Some(http), Some(full)) = (largest, named("full")) {
        rows.push([
            format!(
                "SQL floor: items/s at batch size {} over HTTP, against the same rows written \
                 in plain SQL by pgbench ({ROWS}; no HTTP, no Muster; {})",
                text(http.batch),
                run(full)
            ),
            num(http.items_per_s),
            format!("{} in plain SQL", num(full.items_per_s)),
            ratio(http.items_per_s, full.items_per_s),
        ]);
    }
    if let (Some(bare), Some(full)) = (named("bare"), named("full")) {
        rows.push([
            format!(
                "SQL floor: items/s of a bare queue in plain SQL (the two item updates only: no \
                 lease rows, no ledger; {})",
                run(bare)
            ),
            num(bare.items_per_s),
            format!("{} with lease and ledger rows", num(full.items_per_s)),
            ratio(bare.items_per_s, full.items_per_s),
        ]);
    }
}

/// WAL bytes and fsyncs per finished item, `bytes / fsyncs`.
fn wal_pair(w: &WalPerItem) -> String {
    format!("{:.0} B / {:.3}", w.bytes_per_item, w.fsyncs_per_item)
}

fn wal_ratio(a: &WalPerItem, b: &WalPerItem) -> String {
    format!(
        "{} / {}",
        ratio(Some(a.bytes_per_item), Some(b.bytes_per_item)),
        ratio(Some(a.fsyncs_per_item), Some(b.fsyncs_per_item))
    )
}

/// The physical cost of a finished item: the WAL bytes and fsyncs of Muster's runs against
/// the same rows in plain SQL (single calls against the single-item ceiling at the same
/// concurrency, the largest batch against the floor of batches), and a bare queue's against
/// the floor's rows.
fn wal_rows(rows: &mut Vec<Row>, batches: &[BatchRun], floor: &[FloorResult]) {
    let named = |name: &str| floor.iter().find(|r| r.name.as_deref() == Some(name));
    let single = floor.iter().find(|r| {
        r.script.as_deref() == Some("ceiling-single.sql")
            && batches
                .first()
                .is_some_and(|b| r.clients == Some(b.workers))
    });
    let largest = batches
        .iter()
        .filter(|r| !r.next)
        .filter_map(|r| r.batch)
        .max();
    for run in batches.iter().filter(|r| !r.next) {
        let sql = match run.batch {
            Some(1) => single,
            b if b == largest => named("full"),
            _ => None,
        };
        let (Some(http), Some(sql)) = (run.wal.as_ref(), sql) else {
            continue;
        };
        let Some(plain) = sql.wal.as_ref() else {
            continue;
        };
        rows.push([
            format!(
                "WAL per finished item, bytes / fsyncs: batch size {}{}, {} workers over HTTP \
                 ({} items), against the same rows in plain SQL ({}, {} clients, batches of {})",
                text(run.batch),
                if run.lease_next {
                    " with `lease_next`"
                } else {
                    ""
                },
                run.workers,
                http.items,
                sql.script.as_deref().unwrap_or("?"),
                text(sql.clients),
                text(sql.batch),
            ),
            wal_pair(http),
            format!("{} in plain SQL", wal_pair(plain)),
            wal_ratio(http, plain),
        ]);
    }
    if let (Some(bare), Some(full)) = (
        named("bare").and_then(|r| r.wal.as_ref()),
        named("full").and_then(|r| r.wal.as_ref()),
    ) {
        rows.push([
            "WAL per finished item, bytes / fsyncs, of a bare queue in plain SQL (the two item \
             updates only)"
                .into(),
            wal_pair(bare),
            format!("{} with lease and ledger rows", wal_pair(full)),
            wal_ratio(bare, full),
        ]);
    }
}

/// Muster's single calls over HTTP against the single-item SQL ceiling at the same concurrency:
/// the same rows, one item per transaction, in plain SQL.
fn ceiling_rows(rows: &mut Vec<Row>, cycles: &[CyclesRun], floor: &[FloorResult]) {
    for ceiling in floor
        .iter()
        .filter(|r| r.script.as_deref() == Some("ceiling-single.sql") && r.items_per_s.is_some())
    {
        let Some(run) = cycles.iter().find(|r| Some(r.workers) == ceiling.clients) else {
            continue;
        };
        rows.push([
            format!(
                "SQL ceiling: lease→complete cycles/s over HTTP, {} workers, against the same rows \
                 one item per transaction in plain SQL (each lease and each completion committed \
                 on its own; pgbench, {} clients, prepared statements, {} cycles in {} s)",
                run.workers,
                text(ceiling.clients),
                text(ceiling.items),
                num(ceiling.seconds)
            ),
            num(run.http.cycles_per_s),
            format!("{} in plain SQL", num(ceiling.items_per_s)),
            ratio(run.http.cycles_per_s, ceiling.items_per_s),
        ]);
    }
}

/// `1000000` as `1,000,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn backlog_rows(rows: &mut Vec<Row>, backlog: &[BacklogSize]) {
    let [base, big] = backlog else {
        return;
    };
    let (bs, gs) = (thousands(base.size), thousands(big.size));
    let (bm, gm) = (&base.measured, &big.measured);
    rows.push([
        format!(
            "backlog: server start → first `GET /v1/queues` 200, ms, {gs} queued (bulk insert took {} s)",
            num(big.fill.insert_seconds)
        ),
        num(big.start_to_first_queues_ms),
        format!("{} with {bs} queued", num(base.start_to_first_queues_ms)),
        ratio(big.start_to_first_queues_ms, base.start_to_first_queues_ms),
    ]);
    rows.push([
        format!(
            "backlog: `GET /v1/queues` latency p50 / p99 ms ({} requests), {gs} queued",
            gm.queues.n
        ),
        pair(&gm.queues),
        format!("{} with {bs} queued", pair(&bm.queues)),
        p_ratio(&gm.queues, &bm.queues),
    ]);
    for (filter, g, b) in [
        (
            "state=done&kind=trawl",
            &gm.items_done_page,
            &bm.items_done_page,
        ),
        (
            "state=queued&kind=trawl&priority=normal",
            &gm.items_queued_page,
            &bm.items_queued_page,
        ),
    ] {
        rows.push([
            format!(
                "backlog: `GET /v1/items?{filter}` page of 100 latency p50 / p99 ms ({} pages, on with `next`), {gs} queued",
                g.n
            ),
            pair(g),
            format!("{} with {bs} queued", pair(b)),
            p_ratio(g, b),
        ]);
    }
    let note = trouble(&gs, gm.errors, gm.ran_dry) + &trouble(&bs, bm.errors, bm.ran_dry);
    rows.push([
        format!(
            "backlog: lease→complete→enqueue (refill) cycles/s, {} workers, {} s, {gs} queued ({} per `/v1/queues` before){note}",
            gm.workers,
            text(gm.seconds),
            gm.trawl_queued
        ),
        num(gm.cycles_per_s),
        format!(
            "{} with {bs} queued ({} per `/v1/queues`)",
            num(bm.cycles_per_s),
            bm.trawl_queued
        ),
        ratio(gm.cycles_per_s, bm.cycles_per_s),
    ]);
    for (op, g, b) in [
        ("lease", &gm.lease, &bm.lease),
        ("complete", &gm.complete, &bm.complete),
        ("enqueue", &gm.enqueue, &bm.enqueue),
    ] {
        rows.push([
            format!("backlog: {op} latency p50 / p99 ms in those cycles, {gs} queued"),
            pair(g),
            format!("{} with {bs} queued", pair(b)),
            p_ratio(g, b),
        ]);
    }
}

/// The largest backlog with delayed items beside it against the same backlog alone: the lease
/// path must not pay for work that is not due yet.
fn delayed_rows(rows: &mut Vec<Row>, base: &BacklogSize, delayed: &BacklogSize) {
    let what = format!(
        "{} queued beside {} delayed a day",
        thousands(delayed.size),
        delayed
            .fill
            .delayed_added
            .map_or_else(|| "n/a".to_owned(), |d| thousands(d as u64))
    );
    let against = format!("with {} queued alone", thousands(base.size));
    refill_rows(
        rows,
        "delayed",
        &what,
        &against,
        (&delayed.measured, &base.measured),
    );
}

/// A scenario's refill cycles/s and lease latency against its baseline's (`label: …` rows).
fn refill_rows(
    rows: &mut Vec<Row>,
    label: &str,
    what: &str,
    against: &str,
    (m, b): (&BacklogMeasured, &BacklogMeasured),
) {
    let note = trouble(what, m.errors, m.ran_dry);
    rows.push([
        format!(
            "{label}: lease→complete→enqueue (refill) cycles/s, {} workers, {} s, {what}{note}",
            m.workers,
            text(m.seconds)
        ),
        num(m.cycles_per_s),
        format!("{} {against}", num(b.cycles_per_s)),
        ratio(m.cycles_per_s, b.cycles_per_s),
    ]);
    rows.push([
        format!("{label}: lease latency p50 / p99 ms in those cycles, {what}"),
        pair(&m.lease),
        format!("{} {against}", pair(&b.lease)),
        p_ratio(&m.lease, &b.lease),
    ]);
}

/// A short queue beside a long history against the smallest backlog (with its seeded history).
fn history_rows(rows: &mut Vec<Row>, base: &BacklogSize, history: &BacklogSize) {
    let done = history.fill.done_after.map(|d| thousands(d as u64));
    let what = format!(
        "{} done, {} queued",
        done.as_deref().unwrap_or("n/a"),
        thousands(history.size)
    );
    let against = format!("with {} queued", thousands(base.size));
    let (bm, hm) = (&base.measured, &history.measured);
    for (filter, h, b) in [
        (
            "state=done&kind=trawl",
            &hm.items_done_page,
            &bm.items_done_page,
        ),
        (
            "state=queued&kind=trawl&priority=normal",
            &hm.items_queued_page,
            &bm.items_queued_page,
        ),
    ] {
        rows.push([
            format!(
                "history: `GET /v1/items?{filter}` page of 100 latency p50 / p99 ms ({} pages, on with `next`), {what}",
                h.n
            ),
            pair(h),
            format!("{} {against}", pair(b)),
            p_ratio(h, b),
        ]);
    }
    refill_rows(rows, "history", &what, &against, (hm, bm));
}

fn bloat_rows(rows: &mut Vec<Row>, bloat: &Bloat) {
    let (before, after) = (&bloat.before, &bloat.after);
    rows.push([
        format!(
            "bloat: single-call items/s, 16 workers, after {} more lease→complete cycles ({} s in \
             batches of 128); tables then: {}",
            bloat.pushed.items,
            num(Some(bloat.pushed.seconds)),
            bloat.sizes.as_deref().unwrap_or("n/a"),
        ),
        num(after.items_per_s),
        format!("{} on the fresh database", num(before.items_per_s)),
        ratio(after.items_per_s, before.items_per_s),
    ]);
}

/// The worker runtime's items/s next to the bare client loop's, per concurrency.
/// Per concurrency: the runtime against the bare client loop on each path of a completion,
/// then the runtime's `lease_next` path against its single calls.
fn runtime_rows(rows: &mut Vec<Row>, runtime: &RuntimeDoc) {
    for run in &runtime.runs {
        let c = run.concurrency;
        for (path, how) in [
            (&run.single, "single calls (lease, then complete)"),
            (&run.lease_next, "completions with `lease_next`"),
        ] {
            let note = if path.bare_drained && path.runtime_drained {
                ""
            } else {
                " (a run hit its time cap)"
            };
            rows.push([
                format!("worker runtime items/s, concurrency {c}, {how}{note}"),
                num(Some(path.runtime_items_per_s)),
                format!(
                    "{} bare client loop, same calls",
                    num(Some(path.bare_items_per_s))
                ),
                ratio(Some(path.runtime_items_per_s), Some(path.bare_items_per_s)),
            ]);
        }
        rows.push([
            format!("worker runtime items/s, concurrency {c}, with `lease_next` (the default)"),
            num(Some(run.lease_next.runtime_items_per_s)),
            format!(
                "{} with single calls",
                num(Some(run.single.runtime_items_per_s))
            ),
            ratio(
                Some(run.lease_next.runtime_items_per_s),
                Some(run.single.runtime_items_per_s),
            ),
        ]);
    }
}
