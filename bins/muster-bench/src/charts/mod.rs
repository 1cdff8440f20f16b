//! PNG charts of a `cargo xtask bench` run, for docs/benchmarks.md (`cargo xtask charts`,
//! `muster-bench charts`).
//!
//! Reads the raw JSON of a run (the types of [`crate::results`]) and draws, with plotters into
//! an RGB buffer that the `png` crate encodes:
//!
//! - `throughput.png`: lease→complete cycles/s over HTTP and in-process (the baseline) at each
//!   concurrency level of `cycles.json` (`runs[].workers`, `runs[].{http,in_process}.cycles_per_s`),
//!   on a log₂ axis, each HTTP point labelled with its ratio to the baseline;
//! - `latency.png`: lease and complete latency p50/p99 in ms from the 16-worker run of
//!   `cycles.json` (the run the table quotes; the largest run if there is none at 16), and pickup
//!   latency p50/p99 from `pickup.json`, HTTP next to in-process;
//! - `batching.png`, only when the run measured batching: items/s per batch size of
//!   `batch.json` (`runs[].batch`, `runs[].items_per_s`), with the SQL floor of `floor.json`
//!   (`runs[].name` `full` and `bare`, `runs[].items_per_s`) drawn as dashed reference lines
//!   when the run measured it.
//!
//! The throughput chart draws the single-item SQL ceiling of `floor.json` (its runs of batch
//! size 1) as reference lines too.
//!
//! This module and [`layout`] are plain data and arithmetic, tested in every build. The drawing
//! (`draw.rs`: plotters, png, ab_glyph) is behind the `charts` cargo feature, so that the
//! workspace's test build does not compile it; `cargo xtask charts` and `cargo xtask bench`
//! turn it on.

#[cfg(feature = "charts")]
mod draw;
mod layout;
#[cfg(test)]
mod tests;

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::de::DeserializeOwned;

#[cfg(feature = "charts")]
pub(crate) use draw::render;
use layout::RateChart;

use crate::results::{self, BatchRun, Cycles, CyclesRun, FloorResult, Pickup, Runs};

/// Every chart's size in pixels.
const WIDTH: u32 = 960;
const HEIGHT: u32 = 540;

/// The cycles run whose latencies the table (and the latency chart) shows.
const LATENCY_WORKERS: u64 = 16;

/// What the charts of one run show, read from its JSON.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Figures {
    /// Concurrency levels of the throughput chart, with its note.
    pub(crate) levels: Vec<RatePoint>,
    pub(crate) levels_note: String,
    /// The single-item SQL ceilings: the throughput chart's lines.
    pub(crate) ceiling: Vec<RefLine>,
    pub(crate) groups: Vec<LatencyGroup>,
    pub(crate) latency_note: String,
    pub(crate) batch: Vec<RatePoint>,
    /// The SQL floor: the batching chart's lines.
    pub(crate) floor: Vec<RefLine>,
}

/// Reads the JSON a run left in `bench_dir` and works out every chart's figures.
pub(crate) fn figures(bench_dir: &Path) -> Result<Figures> {
    let cycles: Option<Cycles> = read_json(&bench_dir.join("cycles.json"))?;
    let pickup: Option<Pickup> = read_json(&bench_dir.join("pickup.json"))?;
    if cycles.is_none() && pickup.is_none() {
        bail!(
            "neither cycles.json nor pickup.json in {} (run `cargo xtask bench` first)",
            bench_dir.display()
        );
    }
    let batch: Option<Runs<Vec<BatchRun>>> = read_json(&bench_dir.join("batch.json"))?;
    let batch = batch.map(|doc| batch_points(&doc.runs)).unwrap_or_default();
    let floor_doc: Option<Runs<Vec<FloorResult>>> = read_json(&bench_dir.join("floor.json"))?;
    let floor_runs = floor_doc.map(|doc| doc.runs).unwrap_or_default();
    let floor = floor_lines(&floor_runs);
    let ceiling = ceiling_lines(&floor_runs);
    let (levels, levels_note) = match &cycles {
        Some(cycles) => (
            levels(cycles),
            format!(
                "each point: {} s of N workers, each lease (wait_ms 0) then complete, on a backlog \
                 topped up to {} items · labels: cycles/s (HTTP ÷ in-process)",
                num_or(cycles.run_seconds, "?"),
                num_or(cycles.backlog, "?"),
            ),
        ),
        None => (Vec::new(), String::new()),
    };
    let pickup_note = match &pickup {
        Some(p) => format!(
            " · pickup: enqueue → a waiting long poll returns the item ({} repeats)",
            num_or(p.repeats, "?")
        ),
        None => String::new(),
    };
    Ok(Figures {
        levels,
        levels_note,
        ceiling,
        groups: latency_groups(cycles.as_ref(), pickup.as_ref()),
        latency_note: format!(
            "lease, complete: every request of that cycles run{pickup_note} · nearest-rank \
             percentiles"
        ),
        batch,
        floor,
    })
}

impl Figures {
    /// The throughput chart, when the run measured cycles.
    fn throughput(&self) -> Option<RateChart<'_>> {
        (!self.levels.is_empty()).then(|| RateChart {
            title: "Lease → complete cycles per second vs concurrency",
            x_desc: "concurrent workers (log scale)",
            y_desc: "cycles/s",
            note: &self.levels_note,
            points: &self.levels,
            log_y: false,
            lines: &self.ceiling,
        })
    }

    /// The batching chart, when the run measured batching.
    fn batching(&self) -> Option<RateChart<'_>> {
        (!self.batch.is_empty()).then(|| RateChart {
            title: "Items per second vs batch size",
            x_desc: "items per lease / batch complete (log scale)",
            y_desc: "items/s (log scale)",
            note: "labels: items/s over HTTP · dashed: the SQL floor, written by pgbench",
            points: &self.batch,
            log_y: true,
            lines: &self.floor,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The figures, out of the JSON

/// One x position of a rate chart (workers or batch size) with the rate of each side.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RatePoint {
    x: u64,
    http: Option<f64>,
    in_process: Option<f64>,
}

impl RatePoint {
    /// HTTP over in-process, to three decimals (as `muster-bench` computes it).
    fn ratio(&self) -> Option<f64> {
        match (self.http, self.in_process) {
            (Some(h), Some(l)) if l > 0.0 => Some((h / l * 1000.0).round() / 1000.0),
            _ => None,
        }
    }
}

/// The concurrency levels of `cycles.json`, by number of workers.
fn levels(cycles: &Cycles) -> Vec<RatePoint> {
    let mut levels: Vec<RatePoint> = cycles
        .runs
        .iter()
        .filter(|run| run.workers > 0)
        .map(|run| RatePoint {
            x: run.workers,
            http: run.http.cycles_per_s,
            in_process: run.in_process.cycles_per_s,
        })
        .filter(|p| p.http.is_some() || p.in_process.is_some())
        .collect();
    levels.sort_by_key(|p| p.x);
    levels
}

/// `p50_ms` and `p99_ms` of a sample (either may be missing when nothing was measured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Percentiles {
    p50: Option<f64>,
    p99: Option<f64>,
}

impl Percentiles {
    fn of(sample: &results::Percentiles) -> Self {
        Self {
            p50: sample.p50_ms,
            p99: sample.p99_ms,
        }
    }

    fn is_empty(&self) -> bool {
        self.p50.is_none() && self.p99.is_none()
    }
}

/// One group of bars in the latency chart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LatencyGroup {
    name: String,
    http: Percentiles,
    in_process: Percentiles,
}

/// Lease and complete latency from the 16-worker cycles run (else the largest), then pickup.
fn latency_groups(cycles: Option<&Cycles>, pickup: Option<&Pickup>) -> Vec<LatencyGroup> {
    let mut groups = Vec::new();
    if let Some(run) = cycles.and_then(latency_run) {
        let workers = run.workers;
        groups.push(LatencyGroup {
            name: format!("lease ({workers} workers)"),
            http: Percentiles::of(&run.http.lease),
            in_process: Percentiles::of(&run.in_process.lease),
        });
        groups.push(LatencyGroup {
            name: format!("complete ({workers} workers)"),
            http: Percentiles::of(&run.http.complete),
            in_process: Percentiles::of(&run.in_process.complete),
        });
    }
    if let Some(pickup) = pickup {
        groups.push(LatencyGroup {
            name: "pickup (long poll)".to_owned(),
            http: Percentiles::of(&pickup.http),
            in_process: Percentiles::of(&pickup.in_process),
        });
    }
    groups.retain(|g| !(g.http.is_empty() && g.in_process.is_empty()));
    groups
}

fn latency_run(cycles: &Cycles) -> Option<&CyclesRun> {
    let runs = &cycles.runs;
    runs.iter()
        .find(|r| r.workers == LATENCY_WORKERS)
        .or_else(|| runs.iter().max_by_key(|r| r.workers))
}

/// Batch sizes and items/s over HTTP (the batching runs have no in-process side).
fn batch_points(runs: &[BatchRun]) -> Vec<RatePoint> {
    let mut points: Vec<RatePoint> = runs
        .iter()
        // A `lease_next` run is batch size 1 by another path, and a run with `next` steps does
        // more per item; the table has them, the chart not.
        .filter(|run| !run.lease_next && !run.next)
        .filter_map(|run| {
            Some(RatePoint {
                x: run.batch.filter(|size| *size > 0)?,
                http: Some(run.items_per_s?),
                in_process: None,
            })
        })
        .collect();
    points.sort_by_key(|p| p.x);
    points
}

/// A horizontal reference line of a rate chart: its label and its rate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RefLine {
    label: String,
    rate: f64,
}

/// The SQL floor's batch rates (`floor.json`) as reference lines: Muster's rows, then a bare
/// queue's (the one-item-per-transaction run belongs to the cycles, not to this chart).
fn floor_lines(runs: &[FloorResult]) -> Vec<RefLine> {
    let label = |script: &str, batch: &str| match script {
        "full" => Some(format!(
            "same rows in plain SQL (pgbench, batches of {batch})"
        )),
        "bare" => Some(format!(
            "bare queue in plain SQL (no lease, no ledger rows; batches of {batch})"
        )),
        _ => None,
    };
    runs.iter()
        .filter_map(|run| {
            let rate = run.items_per_s.filter(|r| *r > 0.0)?;
            let label = label(run.name.as_deref()?, &shown(run.batch))?;
            Some(RefLine { label, rate })
        })
        .collect()
}

/// The single-item SQL ceiling (`floor.json` runs with `batch` 1) as reference lines of the
/// cycles chart: Muster's rows one item per transaction, per pgbench client count.
fn ceiling_lines(runs: &[FloorResult]) -> Vec<RefLine> {
    runs.iter()
        .filter(|run| run.batch == Some(1))
        .filter_map(|run| {
            let rate = run.items_per_s.filter(|r| *r > 0.0)?;
            let label = format!(
                "same rows, one item per transaction (pgbench, {} clients)",
                shown(run.clients)
            );
            Some(RefLine { label, rate })
        })
        .collect()
}

/// A document of the run, `None` when the run did not write it.
fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not the JSON expected", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("could not read {}", path.display())),
    }
}

fn num_or(v: Option<u64>, missing: &str) -> String {
    v.map_or_else(|| missing.to_owned(), |n| n.to_string())
}

/// A count as JSON shows it (`null` when missing).
fn shown(v: Option<u64>) -> String {
    v.map_or_else(|| "null".to_owned(), |n| n.to_string())
}
