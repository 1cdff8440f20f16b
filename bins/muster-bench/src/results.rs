//! The JSON documents `muster-bench` prints, as types: the scenarios write them, the suite keeps
//! them under `target/bench/`, the table (`report`) and the charts (`charts`) read them back.
//!
//! Fields are mostly in alphabetical order, as `serde_json::json!` prints an object's keys.
//! Scripts outside the repository read these names: add fields, never rename them. Every
//! field has a default, so that a reader takes a partial document (the tests' are).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `{"n", "p50_ms", "p99_ms"}` of a sample (either percentile null when nothing was measured).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Percentiles {
    pub(crate) n: u64,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p99_ms: Option<f64>,
}

/// `{"runs": [...]}`: `batch.json` and `floor.json`, read as `Runs<Vec<_>>`, written from a
/// borrowed `Runs<&[_]>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Runs<T> {
    pub(crate) runs: T,
}

/// One drain of `--workers` single-call workers (lease with wait 0, then complete) over a
/// filled queue: what they finished, how fast, their latencies, what went wrong. Flattened
/// into the documents that hold it, so its fields stand beside theirs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct WorkerPhase {
    pub(crate) complete: Percentiles,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) items: u64,
    pub(crate) items_per_s: Option<f64>,
    pub(crate) lease: Percentiles,
    pub(crate) ran_dry: bool,
    pub(crate) seconds: f64,
}

// ---------------------------------------------------------------------------------------------
// cycles, pickup

/// One side (HTTP or in-process) of one concurrency level of `cycles`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct CyclesSide {
    pub(crate) complete: Percentiles,
    pub(crate) cycles: u64,
    pub(crate) cycles_per_s: Option<f64>,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) lease: Percentiles,
    pub(crate) ran_dry: bool,
    pub(crate) seconds: f64,
}

/// One concurrency level of `cycles`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct CyclesRun {
    pub(crate) http: CyclesSide,
    pub(crate) http_over_in_process: Option<f64>,
    pub(crate) in_process: CyclesSide,
    /// Which side ran first (`in_process`, `http`).
    pub(crate) order: Vec<String>,
    pub(crate) workers: u64,
}

/// `muster-bench cycles` (`cycles.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Cycles {
    pub(crate) backlog: Option<u64>,
    pub(crate) run_seconds: Option<u64>,
    pub(crate) runs: Vec<CyclesRun>,
    pub(crate) scenario: String,
}

/// `muster-bench pickup` (`pickup.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Pickup {
    pub(crate) http: Percentiles,
    pub(crate) http_missed: u64,
    pub(crate) in_process: Percentiles,
    pub(crate) in_process_missed: u64,
    pub(crate) p50_ratio: Option<f64>,
    pub(crate) p99_ratio: Option<f64>,
    pub(crate) repeats: Option<u64>,
    pub(crate) scenario: String,
    pub(crate) settle_ms: u64,
    /// The same long poll over HTTP, the item enqueued through another replica (this process,
    /// its wake-up bridge running): woken by the server's LISTEN.
    pub(crate) cross_replica: Percentiles,
    pub(crate) cross_replica_missed: u64,
    /// Enqueue→lease→complete cycles/s of one in-process replica, its wake-up bridge running
    /// (every enqueue NOTIFYs the other replicas) and not; runs alternated, means.
    pub(crate) wake_cycles: WakeCycles,
}

/// What the cross-replica wake-ups cost: cycle rate with and without them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct WakeCycles {
    pub(crate) workers: u64,
    pub(crate) seconds_per_run: u64,
    pub(crate) runs_each: u64,
    pub(crate) with_wake_per_s: Option<f64>,
    pub(crate) without_wake_per_s: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// spam, feed

/// One flood of edit submissions of `spam`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Flood {
    pub(crate) latency: Percentiles,
    pub(crate) requests: u64,
    pub(crate) requests_per_s: Option<f64>,
    pub(crate) seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) solve_seconds_total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) solver_threads: Option<usize>,
    /// Answers by HTTP status.
    pub(crate) statuses: BTreeMap<String, u64>,
}

/// `muster-bench spam` (`spam.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Spam {
    /// Null when no challenge was solved up front (`--solved 0`).
    pub(crate) accepted: Option<Flood>,
    pub(crate) clients: u64,
    pub(crate) difficulty: u8,
    pub(crate) honeypot: Flood,
    pub(crate) honeypot_over_accepted: Option<f64>,
    pub(crate) pow_over_accepted: Option<f64>,
    pub(crate) pow_refused: Flood,
    pub(crate) scenario: String,
}

/// One subscriber count of `feed`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct FeedRun {
    pub(crate) connect_seconds: f64,
    pub(crate) connected: u64,
    pub(crate) enqueue_round_trip: Percentiles,
    pub(crate) enqueues: u64,
    /// Signed: an event may arrive before the 201 does.
    pub(crate) event_after_201: Percentiles,
    pub(crate) event_after_send: Percentiles,
    pub(crate) events_before_201: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) interval_ms: u64,
    pub(crate) missed_events: u64,
    pub(crate) missed_subscribers: u64,
    pub(crate) server_rss_mib_before_connect: Option<f64>,
    pub(crate) server_rss_mib_idle_connected: Option<f64>,
    pub(crate) streams_ended_early: u64,
    pub(crate) subscribers: u64,
}

/// `muster-bench feed` (`feed.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Feed {
    pub(crate) bench_open_files_soft_limit: Option<String>,
    pub(crate) runs: Vec<FeedRun>,
    pub(crate) scenario: String,
    pub(crate) server_pid: Option<u32>,
}

/// `muster-bench feed-memory` (`feed-memory-{http1,http2}.json`): one layout of idle
/// subscribers on a fresh server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct FeedMemory {
    /// `HTTP/1.1` (a connection per subscriber) or `HTTP/2` (streams sharing `connections`).
    pub(crate) protocol: String,
    pub(crate) subscribers: usize,
    pub(crate) connections: usize,
    pub(crate) connect_s: f64,
    pub(crate) server_rss_mib_before: Option<f64>,
    pub(crate) server_rss_mib_with_subscribers: Option<f64>,
    pub(crate) kib_per_subscriber: Option<f64>,
}

/// One subscriber count of `feed-load`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct FeedLoadRun {
    /// CPU of the bench process (workers and subscribers) during the drain.
    pub(crate) bench_cpu_seconds: Option<f64>,
    pub(crate) bytes_delivered: u64,
    pub(crate) connected: u64,
    /// The workers' drain.
    #[serde(flatten)]
    pub(crate) drain: WorkerPhase,
    /// SSE frames received by all subscribers together during the drain.
    pub(crate) events_delivered: u64,
    /// Against the mean of the same run's phases without subscribers.
    pub(crate) items_per_s_over_none: Option<f64>,
    pub(crate) lease_p99_over_none: Option<f64>,
    pub(crate) server_cpu_seconds: Option<f64>,
    /// Server CPU beyond the same items' cost without subscribers, per event delivered to one
    /// subscriber.
    pub(crate) server_cpu_us_per_event_per_subscriber: Option<f64>,
    pub(crate) server_cpu_us_per_item: Option<f64>,
    pub(crate) streams_ended_early: u64,
    pub(crate) subscribers: u64,
}

/// `muster-bench feed-load` (`feed-load.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct FeedLoad {
    pub(crate) clock_ticks_per_s: f64,
    pub(crate) phase_seconds: u64,
    pub(crate) runs: Vec<FeedLoadRun>,
    pub(crate) scenario: String,
    pub(crate) server_pid: u32,
    pub(crate) workers: u64,
}

/// One phase of `trace-cost`: a fresh server with tracing off, or exporting every span.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TraceCostRun {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` at the bench's sink, `OTEL_TRACES_SAMPLER=always_on`.
    pub(crate) tracing: bool,
    #[serde(flatten)]
    pub(crate) drain: WorkerPhase,
    /// Server CPU over the drain and the export of its last spans.
    pub(crate) server_cpu_seconds: Option<f64>,
    pub(crate) server_cpu_us_per_item: Option<f64>,
    /// `POST /v1/traces` requests and their body bytes the sink received.
    pub(crate) otlp_requests: u64,
    pub(crate) otlp_bytes: u64,
    /// The server's `muster_trace_spans_*_total` after the flush (tracing on only).
    pub(crate) spans_exported: Option<u64>,
    pub(crate) spans_dropped: Option<u64>,
    pub(crate) spans_failed: Option<u64>,
}

/// `muster-bench trace-cost` (`trace-cost.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TraceCost {
    pub(crate) clock_ticks_per_s: f64,
    pub(crate) phase_seconds: u64,
    pub(crate) runs: Vec<TraceCostRun>,
    pub(crate) scenario: String,
    pub(crate) workers: u64,
}

// ---------------------------------------------------------------------------------------------
// backlog, batch

/// `muster-bench backlog-fill`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct BacklogFill {
    /// `pg_total_relation_size` of each `core` table after the history (`--history`), before
    /// the queue is filled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) core_bytes: Option<BTreeMap<String, i64>>,
    /// Delayed `trawl` items added after the top-up (`--delayed`).
    pub(crate) delayed_added: Option<i64>,
    /// Finished `trawl` items after the fill, when it was asked to top them up (`--done`).
    pub(crate) done_after: Option<i64>,
    pub(crate) insert_seconds: Option<f64>,
    pub(crate) inserted: i64,
    pub(crate) queued_after: i64,
    pub(crate) queued_before: i64,
    pub(crate) scenario: String,
    pub(crate) vacuum_checkpoint_seconds: f64,
}

/// `muster-bench backlog`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct BacklogMeasured {
    pub(crate) complete: Percentiles,
    pub(crate) cycles: u64,
    pub(crate) cycles_per_s: Option<f64>,
    /// `GET /v1/queues`'s `depths`, as the server answered them.
    pub(crate) depths: serde_json::Value,
    pub(crate) enqueue: Percentiles,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    /// `GET /v1/items?state=done&kind=trawl` pages of 100, paged on with `next`.
    pub(crate) items_done_page: Percentiles,
    /// `GET /v1/items?state=queued&kind=trawl&priority=normal` pages of 100, likewise.
    pub(crate) items_queued_page: Percentiles,
    pub(crate) lease: Percentiles,
    pub(crate) queues: Percentiles,
    pub(crate) ran_dry: bool,
    pub(crate) scenario: String,
    pub(crate) seconds: f64,
    pub(crate) trawl_queued: i64,
    pub(crate) workers: u64,
}

/// One backlog size of the suite (`backlog.json`): its fill, the server's start and the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct BacklogSize {
    pub(crate) fill: BacklogFill,
    pub(crate) measured: BacklogMeasured,
    pub(crate) size: u64,
    pub(crate) start_to_first_queues_ms: Option<f64>,
}

/// `muster-bench batch`, one run of the suite's batching and bloat phases.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct BatchRun {
    /// Items per lease / batch complete.
    pub(crate) batch: Option<u64>,
    pub(crate) complete: Percentiles,
    pub(crate) drained: bool,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) items: u64,
    pub(crate) items_per_s: Option<f64>,
    pub(crate) lease: Percentiles,
    pub(crate) lease_next: bool,
    pub(crate) next: bool,
    pub(crate) scenario: String,
    pub(crate) seconds: f64,
    /// Added by the suite: the server's VmHWM at the end of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server_peak_rss_mib: Option<f64>,
    /// Added by the suite: the WAL of the run per item it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wal: Option<WalPerItem>,
    pub(crate) workers: u64,
}

/// The WAL PostgreSQL wrote while a run ran (`pg_stat_wal`, the whole cluster's, before and
/// after), in all and per item the run finished.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct WalPerItem {
    pub(crate) items: u64,
    /// `wal_bytes`.
    pub(crate) bytes: u64,
    /// `wal_sync`: WAL fsyncs (fdatasync with the default `wal_sync_method`).
    pub(crate) fsyncs: u64,
    /// `wal_records`.
    pub(crate) records: u64,
    pub(crate) bytes_per_item: f64,
    pub(crate) fsyncs_per_item: f64,
    pub(crate) records_per_item: f64,
}

/// `muster ledger-verify --since CHECKPOINT` of `history-cost`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SinceVerify {
    pub(crate) checkpoint: i64,
    /// What it printed.
    pub(crate) output: String,
    /// Its `VmHWM`, read every 5 ms until it exited.
    pub(crate) peak_rss_mib: Option<f64>,
    pub(crate) seconds: f64,
}

/// `muster-bench history-cost`: the paths that should not pay for a long history.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct HistoryCost {
    /// From the scenario's start until the server's checkpoint task had folded the fill.
    pub(crate) checkpoint_wait_seconds: f64,
    /// `--workers` single-call workers on the filled queue.
    pub(crate) drain: WorkerPhase,
    /// Ledger entries after the fill's checkpoint when `--since` ran (the workers').
    pub(crate) entries_after_checkpoint: i64,
    /// `GET /v1/events` resumed `resume_back` events back: request → the newest event.
    pub(crate) feed_resume: Percentiles,
    /// Finished items before the workers' drain.
    pub(crate) finished: i64,
    /// `GET /v1/items?state=done&kind=trawl` pages of 100, paged on with `next`.
    pub(crate) items_done_page: Percentiles,
    pub(crate) ledger_rows: i64,
    pub(crate) resume_back: i64,
    pub(crate) scenario: String,
    pub(crate) since_verify: SinceVerify,
    pub(crate) workers: u64,
}

/// One history size of `history-suite` (`history-fill-N.json`, `history-cost-N-RUN.json`):
/// its fill and its runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct HistorySize {
    pub(crate) fill: BacklogFill,
    pub(crate) runs: Vec<HistoryCost>,
    pub(crate) size: u64,
}

// ---------------------------------------------------------------------------------------------
// runtime

/// One path of a completion (single calls, or `lease_next`): both drains and their ratio.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RuntimePath {
    pub(crate) bare_items_per_s: f64,
    pub(crate) runtime_items_per_s: f64,
    /// `runtime_items_per_s / bare_items_per_s`: 1.0 is no overhead.
    pub(crate) ratio: f64,
    pub(crate) bare_drained: bool,
    pub(crate) runtime_drained: bool,
}

/// One concurrency: the runtime against the bare loop on both paths.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RuntimeRun {
    pub(crate) concurrency: usize,
    pub(crate) items: u64,
    /// Lease, then complete: the runtime with `lease_next` off.
    pub(crate) single: RuntimePath,
    /// Completions asking `lease_next`: the runtime as it runs by default.
    pub(crate) lease_next: RuntimePath,
    /// The runtime's items/s with `lease_next` over its items/s with single calls.
    pub(crate) lease_next_over_single: f64,
}

/// `muster-bench runtime` (`runtime.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RuntimeDoc {
    pub(crate) scenario: String,
    pub(crate) runs: Vec<RuntimeRun>,
}

// ---------------------------------------------------------------------------------------------
// The suite's own documents: floor, bloat, memory

/// One pgbench run of the SQL floor, or `{"name", "skipped"}` without pgbench.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct FloorResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) batch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) clients: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expected_items: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) items: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) items_per_s: Option<f64>,
    /// `full`, `bare`, `single-16`, `single-64`.
    pub(crate) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) protocol: Option<String>,
    /// The script's file in `bins/muster-bench/sql/`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) skipped: Option<String>,
    /// The WAL of the run per item it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wal: Option<WalPerItem>,
}

/// The bloat phase (`bloat.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Bloat {
    pub(crate) after: BatchRun,
    pub(crate) before: BatchRun,
    pub(crate) pushed: BatchRun,
    /// `relation: size, dead tuples; …` of the working tables, when psql could tell.
    pub(crate) sizes: Option<String>,
}

/// `(VmHWM, VmRSS)` of a process in MiB.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct Memory {
    pub(crate) hwm_mib: f64,
    pub(crate) rss_mib: f64,
}

/// The server's memory at two moments of the suite (`memory.json`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct ServerMemory {
    /// After start, idle.
    pub(crate) idle: Memory,
    /// After the cycles, pickup and spam scenarios, before the feed's subscribers.
    pub(crate) end: Memory,
}

// ---------------------------------------------------------------------------------------------
// hostile

/// One phase of `hostile`: the workers' drain beside it, the server's memory after it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct HostilePhase {
    /// What the phase's hostile clients were answered, by kind and answer (`feed 503`).
    pub(crate) answers: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub(crate) drain: WorkerPhase,
    pub(crate) server: Option<Memory>,
}

/// `muster-bench hostile` (`hostile.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Hostile {
    /// Beside the hostile clients of the test suite.
    pub(crate) clients: HostilePhase,
    pub(crate) feed_connections: u64,
    pub(crate) feed_streams: u64,
    /// Beside the random-token flood.
    pub(crate) flood: HostilePhase,
    pub(crate) flood_connections: u64,
    pub(crate) flood_lease_p99_over_quiet: Option<f64>,
    /// Asked for, and sent.
    pub(crate) flood_rate: u64,
    pub(crate) flood_requests_per_s: Option<f64>,
    pub(crate) hog: u64,
    pub(crate) hostile_lease_p99_over_quiet: Option<f64>,
    /// The server's `VmHWM` after the hostile phase over its RSS idle after start.
    pub(crate) hostile_peak_rss_over_idle: Option<f64>,
    /// The server's memory idle after start, before the first phase.
    pub(crate) idle: Option<Memory>,
    /// The baseline: the workers alone.
    pub(crate) quiet: HostilePhase,
    pub(crate) resume_back: u64,
    pub(crate) scenario: String,
    pub(crate) slow_heads: u64,
    pub(crate) uploads: u64,
    pub(crate) workers: u64,
}

// ---------------------------------------------------------------------------------------------
// retention

/// The retention pass of `retention` (`muster retention-pass`, a process of its own).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RetentionPassRun {
    /// Finished items (`done`, `failed`, `cancelled`) in Logbook before and after the pass.
    pub(crate) finished_after: i64,
    pub(crate) finished_before: i64,
    /// Finished items removed per second of the pass.
    pub(crate) items_per_s: Option<f64>,
    pub(crate) items_removed: u64,
    pub(crate) leases_removed: u64,
    /// What the pass printed.
    pub(crate) output: String,
    /// Whether the pass was still running when the workers' phase beside it ended.
    pub(crate) outlasted_phase: bool,
    pub(crate) seconds: f64,
}

/// `muster-bench retention` (`retention.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Retention {
    /// The workers while the pass runs.
    pub(crate) during: WorkerPhase,
    /// Against the phase before the pass.
    pub(crate) items_per_s_over_quiet: Option<f64>,
    pub(crate) lease_p99_over_quiet: Option<f64>,
    pub(crate) pass: RetentionPassRun,
    pub(crate) phase_seconds: u64,
    /// The workers alone, before the pass (the baseline) and after it.
    pub(crate) quiet: Vec<WorkerPhase>,
    pub(crate) scenario: String,
    pub(crate) workers: u64,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{HostilePhase, WorkerPhase};

    #[test]
    fn a_phase_with_a_drain_is_written_with_the_drains_fields_beside_its_own() {
        let phase = HostilePhase {
            drain: WorkerPhase {
                items: 7,
                ..WorkerPhase::default()
            },
            ..HostilePhase::default()
        };
        let written = serde_json::to_value(&phase).expect("serialisable");
        assert_eq!(
            written,
            json!({
                "answers": {}, "complete": {"n": 0, "p50_ms": null, "p99_ms": null}, "errors": 0,
                "first_error": null, "items": 7, "items_per_s": null,
                "lease": {"n": 0, "p50_ms": null, "p99_ms": null}, "ran_dry": false,
                "seconds": 0.0, "server": null,
            })
        );
    }
}
