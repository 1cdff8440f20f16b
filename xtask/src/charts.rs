//! `cargo xtask charts`: PNG charts of a `cargo xtask bench` run, for docs/benchmarks.md.
//!
//! Reads the raw JSON that `muster-bench` wrote (see `bins/muster-bench/src/main.rs`) and draws,
//! with plotters into an RGB buffer that the `png` crate encodes:
//!
//! - `throughput.png`: lease→complete cycles/s over HTTP and in-process (the baseline) at each
//!   concurrency level of `cycles.json` (`runs[].workers`, `runs[].{http,in_process}.cycles_per_s`),
//!   on a log₂ axis, each HTTP point labelled with its ratio to the baseline;
//! - `latency.png`: lease and complete latency p50/p99 in ms from the 16-worker run of
//!   `cycles.json` (the run the table quotes; the largest run if there is none at 16), and pickup
//!   latency p50/p99 from `pickup.json`, HTTP next to in-process;
//! - `batching.png`, only when the run measured batching: items/s per batch size, with the SQL
//!   floor of `floor.json` (`runs[].name` `full` and `bare`, `runs[].items_per_s`) drawn as
//!   dashed reference lines when the run measured it.
//!
//! Batching has no producer yet; a run without it simply draws no `batching.png`. What is read,
//! from `batch.json` or else from a `batch` (or `batching`) entry of `cycles.json`: either an
//! array of runs or an object with a `runs` array, each run
//! `{"batch_size": 16, "http": {"items_per_s": 12345.6, …}, "in_process": {"items_per_s": …}}`
//! (`batch` or `max` may name the size; a flat `items_per_s` counts as the HTTP figure; the
//! in-process side is optional).
//!
//! Text uses a subset of DejaVu Sans committed under `xtask/assets/` (see the README there),
//! registered with plotters' `ab_glyph` font support (which sizes legends and label areas), so no
//! system font library is involved. The glyphs themselves are drawn by [`Canvas`], a thin wrapper
//! of plotters' bitmap backend: plotters 0.3.7 places each glyph without its left side bearing,
//! which spaces letters unevenly ("H TTP").

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use anyhow::{Context, Result, anyhow, bail, ensure};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
// `BackendStyle` stays unimported: its `stroke_width` would clash with `Color::stroke_width`.
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};
use serde_json::Value;

/// Every chart's size in pixels.
const WIDTH: u32 = 960;
const HEIGHT: u32 = 540;

/// The cycles run whose latencies the table (and the latency chart) shows.
const LATENCY_WORKERS: u64 = 16;

/// DejaVu Sans, Latin-1 and a few symbols (→ × – … ≤ ≥); licence in `xtask/assets/`.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";

const HTTP_COLOR: RGBColor = RGBColor(31, 119, 180);
const LOCAL_COLOR: RGBColor = RGBColor(230, 115, 0);
/// Colours of a rate chart's reference lines, in order.
const REF_COLORS: [RGBColor; 4] = [
    RGBColor(90, 90, 90),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
const INK: RGBColor = RGBColor(40, 40, 40);

/// `cargo xtask charts [BENCH [OUT]]`: from `target/bench/` into `docs/img/` by default.
pub(crate) fn charts(args: Vec<OsString>) -> Result<ExitCode> {
    if args.len() > 2 || args.iter().any(|a| a.to_string_lossy().starts_with('-')) {
        bail!("usage: cargo xtask charts [BENCH [OUT]]");
    }
    let root = super::workspace_root();
    let mut args = args.into_iter().map(PathBuf::from);
    let bench_dir = args
        .next()
        .unwrap_or_else(|| super::target_dir(&root).join("bench"));
    let out_dir = args.next().unwrap_or_else(|| root.join("docs").join("img"));
    for path in render(&bench_dir, &out_dir)? {
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Draws every chart the JSON in `bench_dir` has data for into `out_dir` (created if need be)
/// and returns the files written: `throughput.png`, `latency.png`, `batching.png`.
pub(crate) fn render(bench_dir: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    let cycles = read_json(&bench_dir.join("cycles.json"))?;
    let pickup = read_json(&bench_dir.join("pickup.json"))?;
    if cycles.is_none() && pickup.is_none() {
        bail!(
            "neither cycles.json nor pickup.json in {} (run `cargo xtask bench` first)",
            bench_dir.display()
        );
    }
    let batch = match read_json(&bench_dir.join("batch.json"))? {
        Some(doc) => batch_points(&doc),
        None => cycles
            .as_ref()
            .map(embedded_batch_points)
            .unwrap_or_default(),
    };
    let floor_doc = read_json(&bench_dir.join("floor.json"))?;
    let floor = floor_doc.as_ref().map(floor_lines).unwrap_or_default();
    let mut ceiling = floor_doc.as_ref().map(ceiling_lines).unwrap_or_default();
    if let Some(target) = read_json(&bench_dir.join("target.json"))? {
        ceiling.extend(issue_lines(&target));
    }
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("could not create {}", out_dir.display()))?;

    let mut written = Vec::new();
    let mut write = |name: &str, draw: &dyn Fn(&mut [u8]) -> Result<()>| -> Result<()> {
        let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
        draw(&mut rgb).with_context(|| format!("could not draw {name}"))?;
        let path = out_dir.join(name);
        write_png(&path, &rgb)?;
        written.push(path);
        Ok(())
    };

    if let Some(cycles) = &cycles {
        let levels = levels(cycles);
        if !levels.is_empty() {
            let note = format!(
                "each point: {} s of N workers, each lease (wait_ms 0) then complete, on a backlog \
                 topped up to {} items · labels: cycles/s (HTTP ÷ in-process)",
                num_or(&cycles["run_seconds"], "?"),
                num_or(&cycles["backlog"], "?"),
            );
            write("throughput.png", &|rgb| {
                draw_rates(
                    rgb,
                    &RateChart {
                        title: "Lease → complete cycles per second vs concurrency",
                        x_desc: "concurrent workers (log scale)",
                        y_desc: "cycles/s",
                        note: &note,
                        points: &levels,
                        log_y: false,
                        lines: &ceiling,
                    },
                )
            })?;
        }
    }

    let groups = latency_groups(cycles.as_ref(), pickup.as_ref());
    if !groups.is_empty() {
        let pickup_note = match &pickup {
            Some(p) => format!(
                " · pickup: enqueue → a waiting long poll returns the item ({} repeats)",
                num_or(&p["repeats"], "?")
            ),
            None => String::new(),
        };
        let note = format!(
            "lease, complete: every request of that cycles run{pickup_note} · nearest-rank \
             percentiles"
        );
        write("latency.png", &|rgb| draw_latency(rgb, &groups, &note))?;
    }

    if !batch.is_empty() {
        write("batching.png", &|rgb| {
            draw_rates(
                rgb,
                &RateChart {
                    title: "Items per second vs batch size",
                    x_desc: "items per lease / batch complete (log scale)",
                    y_desc: "items/s (log scale)",
                    note: "labels: items/s (HTTP ÷ in-process)",
                    points: &batch,
                    log_y: true,
                    lines: &floor,
                },
            )
        })?;
    }
    Ok(written)
}

// ---------------------------------------------------------------------------------------------
// The figures, out of the JSON

/// One x position of a rate chart (workers or batch size) with the rate of each side.
#[derive(Debug, Clone, PartialEq)]
struct RatePoint {
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
fn levels(cycles: &Value) -> Vec<RatePoint> {
    let mut levels: Vec<RatePoint> = runs(cycles)
        .iter()
        .filter_map(|run| {
            Some(RatePoint {
                x: run["workers"].as_u64().filter(|w| *w > 0)?,
                http: run["http"]["cycles_per_s"].as_f64(),
                in_process: run["in_process"]["cycles_per_s"].as_f64(),
            })
        })
        .filter(|p| p.http.is_some() || p.in_process.is_some())
        .collect();
    levels.sort_by_key(|p| p.x);
    levels
}

/// `{"p50_ms", "p99_ms"}` (either may be null when nothing was measured).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Percentiles {
    p50: Option<f64>,
    p99: Option<f64>,
}

impl Percentiles {
    fn of(v: &Value) -> Self {
        Self {
            p50: v["p50_ms"].as_f64(),
            p99: v["p99_ms"].as_f64(),
        }
    }

    fn is_empty(&self) -> bool {
        self.p50.is_none() && self.p99.is_none()
    }
}

/// One group of bars in the latency chart.
#[derive(Debug, Clone, PartialEq)]
struct LatencyGroup {
    name: String,
    http: Percentiles,
    in_process: Percentiles,
}

/// Lease and complete latency from the 16-worker cycles run (else the largest), then pickup.
fn latency_groups(cycles: Option<&Value>, pickup: Option<&Value>) -> Vec<LatencyGroup> {
    let mut groups = Vec::new();
    if let Some(run) = cycles.and_then(latency_run) {
        let workers = run["workers"].as_u64().unwrap_or_default();
        for op in ["lease", "complete"] {
            groups.push(LatencyGroup {
                name: format!("{op} ({workers} workers)"),
                http: Percentiles::of(&run["http"][op]),
                in_process: Percentiles::of(&run["in_process"][op]),
            });
        }
    }
    if let Some(pickup) = pickup {
        groups.push(LatencyGroup {
            name: "pickup (long poll)".to_owned(),
            http: Percentiles::of(&pickup["http"]),
            in_process: Percentiles::of(&pickup["in_process"]),
        });
    }
    groups.retain(|g| !(g.http.is_empty() && g.in_process.is_empty()));
    groups
}

fn latency_run(cycles: &Value) -> Option<&Value> {
    let runs = runs(cycles);
    runs.iter()
        .find(|r| r["workers"].as_u64() == Some(LATENCY_WORKERS))
        .or_else(|| runs.iter().max_by_key(|r| r["workers"].as_u64()))
}

/// Batch sizes and items/s, from a batching document (see the module documentation).
fn batch_points(doc: &Value) -> Vec<RatePoint> {
    let rate = |side: &Value| side["items_per_s"].as_f64();
    let mut points: Vec<RatePoint> = runs(doc)
        .iter()
        // A `lease_next` run is batch size 1 by another path, and a run with `next` steps does
        // more per item; the table has them, the chart not.
        .filter(|run| run["lease_next"] != true && run["next"] != true)
        .filter_map(|run| {
            let x = ["batch_size", "batch", "max"]
                .iter()
                .find_map(|key| run[*key].as_u64())
                .filter(|size| *size > 0)?;
            let http = rate(&run["http"]).or_else(|| rate(run));
            let in_process = rate(&run["in_process"]);
            (http.is_some() || in_process.is_some()).then_some(RatePoint {
                x,
                http,
                in_process,
            })
        })
        .collect();
    points.sort_by_key(|p| p.x);
    points
}

/// A horizontal reference line of a rate chart: its label and its rate.
#[derive(Debug, Clone, PartialEq)]
struct RefLine {
    label: String,
    rate: f64,
}

/// The SQL floor's batch rates (`floor.json`) as reference lines: Muster's rows, then a bare
/// queue's (the one-item-per-transaction run belongs to the cycles, not to this chart).
fn floor_lines(doc: &Value) -> Vec<RefLine> {
    let label = |script: &str, batch: &Value| match script {
        "full" => Some(format!(
            "same rows in plain SQL (pgbench, batches of {batch})"
        )),
        "bare" => Some(format!(
            "bare queue in plain SQL (no lease, no ledger rows; batches of {batch})"
        )),
        _ => None,
    };
    runs(doc)
        .iter()
        .filter_map(|run| {
            let rate = run["items_per_s"].as_f64().filter(|r| *r > 0.0)?;
            // `name` since the single-item floor run; the first runs called it `script`.
            let name = run["name"].as_str().or_else(|| run["script"].as_str())?;
            let label = label(name, &run["batch"])?;
            Some(RefLine { label, rate })
        })
        .collect()
}

/// The single-item SQL ceiling (`floor.json` runs with `batch` 1) as reference lines of the
/// cycles chart: Muster's rows one item per transaction, per pgbench client count, and the
/// issue's own lighter script.
fn ceiling_lines(doc: &Value) -> Vec<RefLine> {
    runs(doc)
        .iter()
        .filter(|run| run["batch"] == 1)
        .filter_map(|run| {
            let rate = run["items_per_s"].as_f64().filter(|r| *r > 0.0)?;
            let what = match run["script"].as_str() {
                Some("issue-single.sql") => "issue #7's script: one ledger row, no lease row",
                Some("issue-minimal.sql") => "issue #7's script on minimal tables",
                _ => "same rows, one item per transaction",
            };
            let label = format!("{what} (pgbench, {} clients)", run["clients"]);
            Some(RefLine { label, rate })
        })
        .collect()
}

/// The issue's own script of the target phase (`target.json`, measured just before and just
/// after its drain; runs before it kept the script in `floor.json`) as reference lines of the
/// cycles chart, each at the mean of its two rates.
fn issue_lines(target: &Value) -> Vec<RefLine> {
    let drain = &target["drain"];
    super::bench::issue_scripts(target)
        .into_iter()
        .filter(|script| script.mean() > 0.0)
        .map(|script| RefLine {
            label: format!(
                "{} (pgbench, {} clients, around a {}-worker drain: {} items/s)",
                script.short,
                script.clients,
                num_or(&drain["workers"], "?"),
                drain["items_per_s"]
                    .as_f64()
                    .map_or_else(|| "?".to_owned(), |rate| format!("{rate:.0}")),
            ),
            rate: script.mean(),
        })
        .collect()
}

/// Batching figures carried inside `cycles.json` (`batch` or `batching`), if any.
fn embedded_batch_points(cycles: &Value) -> Vec<RatePoint> {
    ["batch", "batching"]
        .iter()
        .map(|key| batch_points(&cycles[*key]))
        .find(|points| !points.is_empty())
        .unwrap_or_default()
}

/// The runs of a document: the document itself if it is an array, else its `runs` array.
fn runs(doc: &Value) -> &[Value] {
    match doc {
        Value::Array(runs) => runs,
        _ => doc["runs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default(),
    }
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not JSON", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("could not read {}", path.display())),
    }
}

fn num_or(v: &Value, missing: &str) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        _ => missing.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Drawing

fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    ensure!(
        ok,
        "the bundled font xtask/assets/DejaVuSans-subset.ttf does not load"
    );
    Ok(())
}

fn font(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&INK)
}

/// A round number at least `headroom` times `max`, for the top of a value axis.
fn axis_top(max: f64, headroom: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let target = max * headroom;
    let magnitude = 10f64.powf(target.log10().floor());
    let step = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .find(|s| s * magnitude >= target)
        .unwrap_or(10.0);
    step * magnitude
}

/// An f64 axis, linear or logarithmic, whose ticks are exactly `keys` (plotters' own
/// `with_key_points` cannot be used with `configure_mesh` in 0.3.7: it has no value formatter).
#[derive(Clone)]
struct KeyedAxis {
    range: std::ops::Range<f64>,
    keys: Vec<f64>,
    log: bool,
}

impl KeyedAxis {
    fn linear(range: std::ops::Range<f64>, keys: Vec<f64>) -> Self {
        Self {
            range,
            keys,
            log: false,
        }
    }

    fn log(range: std::ops::Range<f64>, keys: Vec<f64>) -> Self {
        Self {
            range,
            keys,
            log: true,
        }
    }

    /// Where `value` lies between the ends of the range, 0 to 1.
    fn share(&self, value: f64) -> f64 {
        let f = |v: f64| {
            if self.log {
                v.max(f64::MIN_POSITIVE).ln()
            } else {
                v
            }
        };
        let (start, end) = (f(self.range.start), f(self.range.end));
        if end > start {
            (f(value) - start) / (end - start)
        } else {
            0.5
        }
    }
}

impl Ranged for KeyedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        limit.0 + (f64::from(limit.1 - limit.0) * self.share(*value)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.keys.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.range.clone()
    }
}

/// Ticks from 0 to `top` (from [`axis_top`]) at a round step, 5 to 10 intervals.
fn linear_ticks(top: f64) -> Vec<f64> {
    let magnitude = 10f64.powf(top.log10().floor());
    let whole = |n: f64| (n - n.round()).abs() < 1e-9;
    let step = [0.1, 0.2, 0.25, 0.5, 1.0]
        .into_iter()
        .map(|s| s * magnitude)
        .find(|step| top / step <= 10.0 + 1e-9 && whole(top / step))
        .unwrap_or(magnitude);
    let intervals = (top / step).round() as u32;
    (0..=intervals).map(|i| f64::from(i) * step).collect()
}

/// A log axis around `min..=max` (both > 0): its range and its 1-2-5 ticks.
fn log_axis(min: f64, max: f64) -> KeyedAxis {
    let (lo, hi) = (min / 1.6, max * 1.6);
    let mut keys = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        keys.extend(
            [1.0, 2.0, 5.0]
                .into_iter()
                .map(|m| m * decade)
                .filter(|k| (lo..=hi).contains(k)),
        );
        decade *= 10.0;
    }
    KeyedAxis::log(lo..hi, keys)
}

/// The white page, the chart area above a one-line note at the bottom.
fn page<'a>(rgb: &'a mut [u8], note: &str) -> Result<DrawingArea<Canvas<'a>, Shift>> {
    let root = Canvas::new(rgb)?.into_drawing_area();
    root.fill(&WHITE)?;
    let (chart, foot) = root.split_vertically(HEIGHT - 30);
    foot.draw_text(note, &font(13).color(&INK.mix(0.75)), (16, 6))?;
    Ok(chart)
}

/// Plotters' RGB bitmap backend, with text drawn from [`FONT`] at the right places.
struct Canvas<'a> {
    bitmap: BitMapBackend<'a>,
    font: FontRef<'static>,
}

type CanvasError<'a> = DrawingErrorKind<<BitMapBackend<'a> as DrawingBackend>::ErrorType>;

impl<'a> Canvas<'a> {
    fn new(rgb: &'a mut [u8]) -> Result<Self> {
        Ok(Self {
            bitmap: BitMapBackend::with_buffer(rgb, (WIDTH, HEIGHT)),
            font: FontRef::try_from_slice(FONT).map_err(|e| anyhow!("bundled font: {e}"))?,
        })
    }
}

/// Lays out one line of `text` at `size` px (the font's ascent-to-descent height), calling
/// `plot(x, y, coverage)` for each pixel of each glyph when given; the box is `(width, height)`,
/// the baseline `ascent` below its top.
fn lay_out(
    font: &FontRef<'_>,
    size: f64,
    text: &str,
    mut plot: Option<&mut dyn FnMut(i32, i32, f32)>,
) -> (i32, i32) {
    let font = font.as_scaled(PxScale::from(size as f32));
    let ascent = font.ascent();
    let mut caret = 0f32;
    let mut previous = None;
    for c in text.chars() {
        let id = font.glyph_id(c);
        if let Some(previous) = previous {
            caret += font.kern(previous, id);
        }
        if let Some(plot) = plot.as_mut() {
            let glyph = id.with_scale_and_position(font.scale(), ab_glyph::point(caret, ascent));
            if let Some(outline) = font.outline_glyph(glyph) {
                let at = outline.px_bounds().min;
                outline.draw(|x, y, coverage| {
                    plot(at.x as i32 + x as i32, at.y as i32 + y as i32, coverage)
                });
            }
        }
        caret += font.h_advance(id);
        previous = Some(id);
    }
    (caret.ceil() as i32, (ascent - font.descent()).ceil() as i32)
}

impl<'a> DrawingBackend for Canvas<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.bitmap.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), CanvasError<'a>> {
        self.bitmap.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), CanvasError<'a>> {
        self.bitmap.present()
    }

    fn draw_pixel(&mut self, at: BackendCoord, color: BackendColor) -> Result<(), CanvasError<'a>> {
        self.bitmap.draw_pixel(at, color)
    }

    fn draw_line<S: plotters_backend::BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), CanvasError<'a>> {
        self.bitmap.draw_line(from, to, style)
    }

    fn draw_rect<S: plotters_backend::BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), CanvasError<'a>> {
        self.bitmap.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn blit_bitmap(
        &mut self,
        at: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), CanvasError<'a>> {
        self.bitmap.blit_bitmap(at, size, src)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        at: BackendCoord,
    ) -> Result<(), CanvasError<'a>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let (width, height) = lay_out(&self.font, style.size(), text, None);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Center => -width / 2,
            HPos::Right => -width,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let transform = style.transform();
        let (w, h) = self.bitmap.get_size();
        let bitmap = &mut self.bitmap;
        let mut result = Ok(());
        let mut plot = |x: i32, y: i32, coverage: f32| {
            let (x, y) = transform.transform(x + dx, y + dy);
            let (x, y) = (at.0 + x, at.1 + y);
            let inside = (0..w as i32).contains(&x) && (0..h as i32).contains(&y);
            if inside && coverage > 0.0 && result.is_ok() {
                let alpha = color.alpha * f64::from(coverage.min(1.0));
                result = bitmap.draw_pixel((x, y), BackendColor { alpha, ..color });
            }
        };
        lay_out(&self.font, style.size(), text, Some(&mut plot));
        result
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), CanvasError<'a>> {
        let (width, height) = lay_out(&self.font, style.size(), text, None);
        Ok((width.max(0) as u32, height.max(0) as u32))
    }
}

struct RateChart<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    note: &'a str,
    points: &'a [RatePoint],
    /// A log value axis (batching spans decades); else linear from 0.
    log_y: bool,
    /// Dashed horizontal reference lines, each labelled.
    lines: &'a [RefLine],
}

/// The legend's height in px: about 24 per entry (the two sides and every reference line) plus
/// its margins.
fn legend_height(spec: &RateChart<'_>) -> i32 {
    40 + 24 * (2 + i32::try_from(spec.lines.len()).unwrap_or(i32::MAX / 64))
}

/// The legend's width in px, estimated from its longest label (about 6.6 px per character at
/// the legend's 15 px, a reference line's label followed by ": <rate>") plus the swatch and
/// margins.
fn legend_width(spec: &RateChart<'_>) -> i32 {
    let longest = spec
        .lines
        .iter()
        .map(|l| l.label.chars().count() + 8)
        .chain([20])
        .max()
        .unwrap_or(20);
    54 + i32::try_from(longest * 66 / 10).unwrap_or(i32::MAX / 2)
}

/// Whether the legend, drawn in the top left corner, would cover a reference line, a point or
/// the line between two points: it takes [`legend_height`] from the plotting area's top and
/// [`legend_width`] from its left. `pixel` maps a value to the backend's pixel coordinates;
/// `area` is the plotting area's (x, y) pixel ranges.
fn legend_covers_data(
    spec: &RateChart<'_>,
    pixel: impl Fn(f64, f64) -> (i32, i32),
    area: (std::ops::Range<i32>, std::ops::Range<i32>),
) -> bool {
    let (xs, ys) = area;
    let band_bottom = ys.start + legend_height(spec);
    let band_right = xs.start + legend_width(spec).min(xs.end - xs.start);
    let in_band = |(px, py): (i32, i32)| px < band_right && py < band_bottom;
    let x = spec.points.first().map_or(1.0, |p| p.x as f64);
    let line_in_band = spec.lines.iter().any(|l| pixel(x, l.rate).1 < band_bottom);
    let sides: [fn(&RatePoint) -> Option<f64>; 2] = [|p| p.http, |p| p.in_process];
    let side_in_band = sides.iter().any(|side| {
        let drawn: Vec<(i32, i32)> = spec
            .points
            .iter()
            .filter_map(|p| Some(pixel(p.x as f64, side(p)?)))
            .collect();
        // The points, and the straight segments between them sampled every 1/16 of their run.
        drawn.iter().copied().any(in_band)
            || drawn.windows(2).any(|w| {
                let ((x0, y0), (x1, y1)) = (w[0], w[1]);
                (1..16).any(|i| in_band((x0 + (x1 - x0) * i / 16, y0 + (y1 - y0) * i / 16)))
            })
    });
    line_in_band || side_in_band
}

/// Rates of both sides against a log₂ x axis (workers, batch size), each point labelled.
fn draw_rates(rgb: &mut [u8], spec: &RateChart<'_>) -> Result<()> {
    let area = page(rgb, spec.note)?;
    let keys: Vec<f64> = spec.points.iter().map(|p| p.x as f64).collect();
    let (first, last) = match (keys.first(), keys.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => bail!("no points to draw"),
    };
    // Room on the right for the labels of the last points.
    let span = (last / first).log2().max(1.0);
    let x_axis = KeyedAxis::log(
        first / 2f64.powf(span * 0.07)..last * 2f64.powf(span * 0.16),
        keys,
    );
    let values: Vec<f64> = spec
        .points
        .iter()
        .flat_map(|p| [p.http, p.in_process])
        .flatten()
        .chain(spec.lines.iter().map(|l| l.rate))
        .filter(|v| *v > 0.0 || !spec.log_y)
        .collect();
    let max = values.iter().copied().fold(0.0, f64::max);
    let y_axis = if spec.log_y {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        ensure!(min.is_finite(), "no positive rate to draw on a log axis");
        log_axis(min, max)
    } else {
        let top = axis_top(max, 1.18);
        KeyedAxis::linear(0.0..top, linear_ticks(top))
    };
    let build = |x_axis, y_axis| {
        ChartBuilder::on(&area)
            .caption(spec.title, font(24))
            .margin(18)
            .margin_right(32)
            .x_label_area_size(52)
            .y_label_area_size(78)
            .build_cartesian_2d(x_axis, y_axis)
    };
    let mut chart = build(x_axis.clone(), y_axis)?;
    // On a linear axis the legend gets room of its own above the data when it would cover
    // some (a raised axis loses less than a legend over the lower lines, whose labels are
    // long): the axis is drawn again, as high as puts the highest value under the legend.
    let plot = chart.plotting_area().get_pixel_range();
    let height = f64::from(plot.1.end - plot.1.start);
    // The legend and the value label above the highest point (about 24 px).
    let band = f64::from(legend_height(spec) + 28);
    if !spec.log_y
        && band < height * 0.6
        && legend_covers_data(spec, |x, v| chart.backend_coord(&(x, v)), plot)
    {
        let top = axis_top(max, height / (height - band));
        area.fill(&WHITE)?;
        chart = build(x_axis, KeyedAxis::linear(0.0..top, linear_ticks(top)))?;
    }
    chart
        .configure_mesh()
        .x_desc(spec.x_desc)
        .y_desc(spec.y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(font(15))
        .axis_desc_style(font(16))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()?;

    let sides = [
        ("HTTP (muster serve)", HTTP_COLOR, true),
        ("in-process baseline", LOCAL_COLOR, false),
    ];
    for (label, color, is_http) in sides {
        let series: Vec<(f64, f64)> = spec
            .points
            .iter()
            .filter_map(|p| Some((p.x as f64, if is_http { p.http } else { p.in_process }?)))
            .filter(|(_, v)| *v > 0.0 || !spec.log_y)
            .collect();
        if series.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(3)))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(3))
            });
        chart.draw_series(series.iter().map(|&at| Circle::new(at, 5, color.filled())))?;
    }

    let (left, right) = (chart.x_range().start * 1.0001, chart.x_range().end / 1.0001);
    for (line, color) in spec.lines.iter().zip(REF_COLORS.iter().cycle()) {
        let color = *color;
        let dashes = DashedLineSeries::new(
            [(left, line.rate), (right, line.rate)],
            8,
            6,
            color.stroke_width(2),
        );
        chart
            .draw_series(dashes)?
            .label(format!("{}: {:.0}", line.label, line.rate))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(2))
            });
    }

    // Value labels: the higher side's above its point; the lower side's below and to the right
    // (where a rising line is not), or to the right when that would run into the x axis.
    let bottom = chart.plotting_area().get_pixel_range().1.end;
    for p in spec.points {
        let x = p.x as f64;
        let higher_is_http = p.http.unwrap_or(0.0) >= p.in_process.unwrap_or(0.0);
        let labels = [
            (p.http, HTTP_COLOR, higher_is_http, true),
            (p.in_process, LOCAL_COLOR, !higher_is_http, false),
        ];
        for (value, color, higher, is_http) in labels {
            let Some(value) = value.filter(|v| *v > 0.0 || !spec.log_y) else {
                continue;
            };
            let text = match p.ratio() {
                Some(r) if is_http => format!("{value:.0} ({r:.2}×)"),
                _ => format!("{value:.0}"),
            };
            let near_axis = bottom - chart.backend_coord(&(x, value)).1 < 28;
            let (offset, anchor) = if higher {
                ((0, -10), Pos::new(HPos::Center, VPos::Bottom))
            } else if near_axis {
                ((10, 0), Pos::new(HPos::Left, VPos::Center))
            } else {
                ((6, 8), Pos::new(HPos::Left, VPos::Top))
            };
            let style = font(14).color(&color).pos(anchor);
            chart
                .plotting_area()
                .draw(&(EmptyElement::at((x, value)) + Text::new(text, offset, style)))?;
        }
    }

    let plot = chart.plotting_area().get_pixel_range();
    let covers = legend_covers_data(spec, |x, v| chart.backend_coord(&(x, v)), plot);
    chart
        .configure_series_labels()
        // Top left, above a rising chart's lines, unless it would cover one of them.
        .position(if covers {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperLeft
        })
        .margin(14)
        .label_font(font(15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    area.present()?;
    Ok(())
}

/// Grouped bars: per group, HTTP then in-process; the light bar reaches p99, the solid one p50.
fn draw_latency(rgb: &mut [u8], groups: &[LatencyGroup], note: &str) -> Result<()> {
    let area = page(rgb, note)?;
    let n = groups.len();
    let top = axis_top(
        groups
            .iter()
            .flat_map(|g| [g.http.p50, g.http.p99, g.in_process.p50, g.in_process.p99])
            .flatten()
            .fold(0.0, f64::max),
        // The legend takes the top quarter of the first group's column.
        1.4,
    );
    let names: Vec<String> = groups.iter().map(|g| g.name.clone()).collect();
    let keys: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();

    let mut chart = ChartBuilder::on(&area)
        .caption("Latency p50 and p99: HTTP vs in-process", font(24))
        .margin(18)
        .margin_right(32)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            KeyedAxis::linear(0.0..n as f64, keys),
            KeyedAxis::linear(0.0..top, linear_ticks(top)),
        )?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("latency, ms")
        .x_label_formatter(&|x| {
            let i = (x - 0.5).round();
            if i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y}"))
        .label_style(font(15))
        .axis_desc_style(font(16))
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(TRANSPARENT)
        .draw()?;

    const BAR: f64 = 0.34;
    let sides = [
        ("HTTP", HTTP_COLOR, 0.5 - BAR - 0.01, true),
        ("in-process", LOCAL_COLOR, 0.51, false),
    ];
    for (side, color, offset, is_http) in sides {
        let pick = move |g: &LatencyGroup| if is_http { g.http } else { g.in_process };
        let bars = |p99: bool| {
            groups.iter().enumerate().filter_map(move |(i, g)| {
                let value = if p99 { pick(g).p99 } else { pick(g).p50 }?;
                let x0 = i as f64 + offset;
                let style = if p99 {
                    color.mix(0.35).filled()
                } else {
                    color.filled()
                };
                Some(Rectangle::new([(x0, 0.0), (x0 + BAR, value)], style))
            })
        };
        let light = color.mix(0.35);
        chart
            .draw_series(bars(true))?
            .label(format!("{side} p99"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], light.filled()));
        chart
            .draw_series(bars(false))?
            .label(format!("{side} p50"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.filled()));

        for (i, g) in groups.iter().enumerate() {
            let p = pick(g);
            let x = i as f64 + offset + BAR / 2.0;
            let label = |value: f64, dy: i32, v: VPos, ink: &'static RGBColor| {
                EmptyElement::at((x, value))
                    + Text::new(
                        format!("{value:.2}"),
                        (0, dy),
                        font(14).color(ink).pos(Pos::new(HPos::Center, v)),
                    )
            };
            if let Some(p99) = p.p99 {
                chart
                    .plotting_area()
                    .draw(&label(p99, -5, VPos::Bottom, &INK))?;
            }
            if let Some(p50) = p.p50 {
                // Inside the solid bar's top, unless it is too close to p99 or too short.
                let room_above = p.p99.map_or(top, |p99| p99 - p50) > top * 0.07;
                let tall = p50 > top * 0.07;
                let element = if room_above || !tall {
                    label(p50, -4, VPos::Bottom, &INK)
                } else {
                    label(p50, 5, VPos::Top, &WHITE)
                };
                chart.plotting_area().draw(&element)?;
            }
        }
    }

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .margin(14)
        .label_font(font(15))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    area.present()?;
    Ok(())
}

fn write_png(path: &Path, rgb: &[u8]) -> Result<()> {
    let file = std::fs::File::create(path)
        .with_context(|| format!("could not create {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::High);
    let mut writer = encoder
        .write_header()
        .with_context(|| format!("could not write {}", path.display()))?;
    writer
        .write_image_data(rgb)
        .and_then(|()| writer.finish())
        .with_context(|| format!("could not write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Shaped exactly like `target/bench/cycles.json` (two of its four runs).
    fn cycles_sample() -> Value {
        json!({
          "backlog": 20000,
          "run_seconds": 10,
          "runs": [
            {
              "http": {
                "complete": {"n": 10474, "p50_ms": 7.39, "p99_ms": 13.651},
                "cycles": 10474, "cycles_per_s": 1046.4, "errors": 0, "first_error": null,
                "lease": {"n": 10474, "p50_ms": 7.431, "p99_ms": 13.756},
                "ran_dry": false, "seconds": 10.009
              },
              "http_over_in_process": 0.816,
              "in_process": {
                "complete": {"n": 12827, "p50_ms": 5.996, "p99_ms": 12.701},
                "cycles": 12827, "cycles_per_s": 1281.8, "errors": 0, "first_error": null,
                "lease": {"n": 12827, "p50_ms": 5.991, "p99_ms": 11.808},
                "ran_dry": false, "seconds": 10.007
              },
              "order": ["in_process", "http"],
              "workers": 16
            },
            {
              "http": {
                "complete": {"n": 3206, "p50_ms": 1.507, "p99_ms": 2.485},
                "cycles": 3206, "cycles_per_s": 320.5, "errors": 0, "first_error": null,
                "lease": {"n": 3206, "p50_ms": 1.521, "p99_ms": 2.589},
                "ran_dry": false, "seconds": 10.004
              },
              "http_over_in_process": 0.737,
              "in_process": {
                "complete": {"n": 4352, "p50_ms": 1.228, "p99_ms": 2.522},
                "cycles": 4352, "cycles_per_s": 435.1, "errors": 0, "first_error": null,
                "lease": {"n": 4352, "p50_ms": 0.939, "p99_ms": 1.718},
                "ran_dry": false, "seconds": 10.002
              },
              "order": ["in_process", "http"],
              "workers": 1
            }
          ],
          "scenario": "cycles"
        })
    }

    /// Shaped exactly like `target/bench/pickup.json`.
    fn pickup_sample() -> Value {
        json!({
          "http": {"n": 200, "p50_ms": 3.441, "p99_ms": 6.048},
          "http_missed": 0,
          "in_process": {"n": 200, "p50_ms": 2.528, "p99_ms": 10.961},
          "in_process_missed": 0,
          "p50_ratio": 1.361,
          "p99_ratio": 0.552,
          "repeats": 200,
          "scenario": "pickup",
          "settle_ms": 50
        })
    }

    fn pcts(p50: f64, p99: f64) -> Percentiles {
        Percentiles {
            p50: Some(p50),
            p99: Some(p99),
        }
    }

    #[test]
    fn throughput_levels_come_sorted_by_workers() {
        let levels = levels(&cycles_sample());
        assert_eq!(
            levels,
            vec![
                RatePoint {
                    x: 1,
                    http: Some(320.5),
                    in_process: Some(435.1)
                },
                RatePoint {
                    x: 16,
                    http: Some(1046.4),
                    in_process: Some(1281.8)
                },
            ]
        );
        // The same ratios muster-bench wrote as `http_over_in_process`.
        assert_eq!(levels[0].ratio(), Some(0.737));
        assert_eq!(levels[1].ratio(), Some(0.816));
    }

    #[test]
    fn latency_comes_from_the_16_worker_run_and_pickup() {
        let groups = latency_groups(Some(&cycles_sample()), Some(&pickup_sample()));
        assert_eq!(
            groups,
            vec![
                LatencyGroup {
                    name: "lease (16 workers)".to_owned(),
                    http: pcts(7.431, 13.756),
                    in_process: pcts(5.991, 11.808),
                },
                LatencyGroup {
                    name: "complete (16 workers)".to_owned(),
                    http: pcts(7.39, 13.651),
                    in_process: pcts(5.996, 12.701),
                },
                LatencyGroup {
                    name: "pickup (long poll)".to_owned(),
                    http: pcts(3.441, 6.048),
                    in_process: pcts(2.528, 10.961),
                },
            ]
        );
    }

    #[test]
    fn latency_without_a_16_worker_run_uses_the_largest_and_null_percentiles_stay_empty() {
        let mut cycles = cycles_sample();
        cycles["runs"][0]["workers"] = json!(8);
        cycles["runs"][0]["http"]["lease"] = json!({"n": 0, "p50_ms": null, "p99_ms": null});
        let groups = latency_groups(Some(&cycles), None);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].name, "lease (8 workers)");
        assert!(groups[0].http.is_empty());
        assert_eq!(groups[0].in_process, pcts(5.991, 11.808));
        assert_eq!(latency_groups(None, None), vec![]);
    }

    #[test]
    fn batching_is_optional_and_read_from_either_place() {
        // Today's cycles.json has no batching figures.
        assert_eq!(embedded_batch_points(&cycles_sample()), vec![]);
        assert_eq!(batch_points(&pickup_sample()), vec![]);

        let doc = json!({
            "scenario": "batch",
            "runs": [
                {"batch_size": 128, "http": {"items_per_s": 31000.5}, "in_process": {"items_per_s": 40000.0}},
                {"batch_size": 1, "http": {"items_per_s": 1000.0}},
                {"batch_size": 16, "items_per_s": 9000.0},
                {"batch_size": 4},
            ]
        });
        let expected = vec![
            RatePoint {
                x: 1,
                http: Some(1000.0),
                in_process: None,
            },
            RatePoint {
                x: 16,
                http: Some(9000.0),
                in_process: None,
            },
            RatePoint {
                x: 128,
                http: Some(31000.5),
                in_process: Some(40000.0),
            },
        ];
        assert_eq!(batch_points(&doc), expected);
        assert_eq!(expected[2].ratio(), Some(0.775));

        let mut cycles = cycles_sample();
        cycles["batch"] = json!([{"max": 16, "http": {"items_per_s": 9000.0}}]);
        assert_eq!(
            embedded_batch_points(&cycles),
            vec![RatePoint {
                x: 16,
                http: Some(9000.0),
                in_process: None
            }]
        );
        // A bare number under `batch` (a setting, not figures) draws nothing.
        cycles["batch"] = json!(16);
        assert_eq!(embedded_batch_points(&cycles), vec![]);
    }

    fn floor_sample() -> Value {
        json!({"runs": [
            {"name": "full", "batch": 128, "items_per_s": 10046.8},
            {"name": "bare", "batch": 128, "items_per_s": 17798.3},
            {"name": "single-64", "batch": 1, "clients": 64, "items_per_s": 892.0},
        ]})
    }

    #[test]
    fn the_single_item_ceiling_becomes_a_reference_line_per_client_count() {
        assert_eq!(
            ceiling_lines(&floor_sample()),
            vec![RefLine {
                label: "same rows, one item per transaction (pgbench, 64 clients)".into(),
                rate: 892.0
            }]
        );
    }

    #[test]
    fn the_target_phase_scripts_become_reference_lines_at_the_mean_of_their_two_rates() {
        let run =
            |file: &str, rate: f64| json!({"script": file, "clients": 16, "items_per_s": rate});
        let target = json!({
            "before": [run("issue-single.sql", 1800.0), run("issue-minimal.sql", 2400.0)],
            "drain": {"workers": 64, "items_per_s": 4000.4},
            "after": [run("issue-minimal.sql", 2600.0), run("issue-single.sql", 2200.0)],
        });
        assert_eq!(
            issue_lines(&target),
            vec![
                RefLine {
                    label: "issue #7's script on Muster's tables (pgbench, 16 clients, \
                            around a 64-worker drain: 4000 items/s)"
                        .into(),
                    rate: 2000.0
                },
                RefLine {
                    label: "issue #7's script on minimal tables (pgbench, 16 clients, around \
                            a 64-worker drain: 4000 items/s)"
                        .into(),
                    rate: 2500.0
                }
            ]
        );
    }

    #[test]
    fn the_issue_scripts_become_reference_lines_of_their_own() {
        let doc = json!({"runs": [
            {"name": "issue-16", "script": "issue-single.sql", "batch": 1, "clients": 16,
             "items_per_s": 1796.9},
            {"name": "issue-minimal-16", "script": "issue-minimal.sql", "batch": 1,
             "clients": 16, "items_per_s": 2500.0},
        ]});
        assert_eq!(
            ceiling_lines(&doc),
            vec![
                RefLine {
                    label: "issue #7's script: one ledger row, no lease row (pgbench, 16 clients)"
                        .into(),
                    rate: 1796.9
                },
                RefLine {
                    label: "issue #7's script on minimal tables (pgbench, 16 clients)".into(),
                    rate: 2500.0
                }
            ]
        );
    }

    /// A 1,000 × 400 px plotting area with 0 at the bottom and 8,000 at the top, x linear in
    /// workers 0..80; two points (1: `left`, 64: 6,000) and reference lines at `rates`.
    fn legend_covers(left: f64, rates: &[f64]) -> bool {
        let lines: Vec<RefLine> = rates
            .iter()
            .map(|rate| RefLine {
                label: "line".into(),
                rate: *rate,
            })
            .collect();
        legend_covers_points(left, 6000.0, &lines)
    }

    /// The same area with the points 1: `left` and 64: `right`, and `lines`.
    fn legend_covers_points(left: f64, right: f64, lines: &[RefLine]) -> bool {
        let points = [
            RatePoint {
                x: 1,
                http: Some(left),
                in_process: None,
            },
            RatePoint {
                x: 64,
                http: Some(right),
                in_process: None,
            },
        ];
        let spec = RateChart {
            title: "",
            x_desc: "",
            y_desc: "",
            note: "",
            points: &points,
            log_y: false,
            lines,
        };
        #[allow(clippy::cast_possible_truncation)]
        let pixel = |x: f64, v: f64| ((x * 12.5) as i32, (400.0 - v / 20.0) as i32);
        legend_covers_data(&spec, pixel, (0..1000, 0..400))
    }

    #[test]
    fn the_legend_stays_top_left_above_lines_in_the_lower_part() {
        // Six entries take 40 + 6 × 24 = 184 px: down to 4,320 on this axis. The point at 64
        // workers (6,000) is right of the legend (x 800 px of 1,000) and does not count.
        assert!(!legend_covers(400.0, &[1368.0, 1142.0, 2237.0, 3047.0]));
    }

    #[test]
    fn the_legend_moves_when_a_line_reaches_into_its_band() {
        // Three entries take 112 px: down to 5,760 on this axis.
        assert!(legend_covers(400.0, &[6000.0]));
    }

    #[test]
    fn the_legend_counts_as_covering_when_the_line_between_two_points_crosses_it() {
        // One reference line with a label of 100 characters: the legend is 112 px high and
        // 766 px wide. Both points are outside it (1: 380 px down; 64: 800 px right), the
        // segment between them passes through it.
        let lines = [RefLine {
            label: "x".repeat(100),
            rate: 100.0,
        }];
        assert!(legend_covers_points(400.0, 7600.0, &lines));
    }

    #[test]
    fn the_legend_moves_when_a_point_on_the_left_reaches_into_its_band() {
        assert!(legend_covers(7000.0, &[]));
    }

    #[test]
    fn the_sql_floor_becomes_two_labelled_reference_lines() {
        assert_eq!(
            floor_lines(&floor_sample()),
            vec![
                RefLine {
                    label: "same rows in plain SQL (pgbench, batches of 128)".into(),
                    rate: 10046.8
                },
                RefLine {
                    label: "bare queue in plain SQL (no lease, no ledger rows; batches of 128)"
                        .into(),
                    rate: 17798.3
                },
            ]
        );
    }

    #[test]
    fn a_skipped_floor_draws_no_reference_line() {
        let skipped = json!({"runs": [{"name": "full", "skipped": "pgbench not found"}]});
        assert_eq!(floor_lines(&skipped), vec![]);
    }

    #[test]
    fn axis_tops_are_round_and_above_the_data() {
        assert_eq!(axis_top(1362.1, 1.18), 2000.0);
        assert_eq!(axis_top(806.0, 1.18), 1000.0);
        assert_eq!(axis_top(13.756, 1.18), 20.0);
        assert_eq!(axis_top(10.961, 1.18), 15.0);
        assert_eq!(axis_top(56.78, 1.4), 80.0);
        assert_eq!(axis_top(0.0, 1.18), 1.0);
        assert_eq!(axis_top(f64::NAN, 1.18), 1.0);
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(linear_ticks(1000.0).len(), 11);
        assert_eq!(linear_ticks(1000.0)[1], 100.0);
        assert_eq!(
            linear_ticks(80.0),
            vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]
        );
        assert_eq!(
            linear_ticks(15.0),
            vec![0.0, 2.5, 5.0, 7.5, 10.0, 12.5, 15.0]
        );
        let axis = log_axis(712.4, 42100.0);
        assert_eq!(
            axis.keys,
            vec![500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 50000.0]
        );
        assert_eq!(axis.share(axis.range.start), 0.0);
        assert!((axis.share(axis.range.end) - 1.0).abs() < 1e-12);
    }

    /// Width and height from a PNG's IHDR chunk, after checking the signature.
    fn png_size(bytes: &[u8]) -> (u32, u32) {
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert_eq!(&bytes[12..16], b"IHDR");
        let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        (be(16), be(20))
    }

    #[test]
    fn charts_render_to_png_files() {
        let dir = std::env::temp_dir().join(format!("xtask-charts-test-{}", std::process::id()));
        let bench = dir.join("bench");
        let out = dir.join("img");
        std::fs::create_dir_all(&bench).unwrap();
        let write = |name: &str, v: &Value| {
            std::fs::write(bench.join(name), serde_json::to_vec_pretty(v).unwrap()).unwrap()
        };
        write("cycles.json", &cycles_sample());
        write("pickup.json", &pickup_sample());

        let written = render(&bench, &out).unwrap();
        assert_eq!(
            written,
            vec![out.join("throughput.png"), out.join("latency.png")]
        );
        for path in &written {
            let bytes = std::fs::read(path).unwrap();
            assert_eq!(png_size(&bytes), (WIDTH, HEIGHT), "{}", path.display());
        }

        write(
            "batch.json",
            &json!({"runs": [
                {"batch_size": 1, "http": {"items_per_s": 1000.0}, "in_process": {"items_per_s": 1500.0}},
                {"batch_size": 16, "http": {"items_per_s": 9000.0}, "in_process": {"items_per_s": 12000.0}},
                {"batch_size": 128, "http": {"items_per_s": 31000.0}, "in_process": {"items_per_s": 40000.0}},
            ]}),
        );
        let written = render(&bench, &out).unwrap();
        assert_eq!(written.last(), Some(&out.join("batching.png")));
        let bytes = std::fs::read(out.join("batching.png")).unwrap();
        assert_eq!(png_size(&bytes), (WIDTH, HEIGHT));

        // With the SQL floor, the batching chart carries its reference lines.
        write("floor.json", &floor_sample());
        let written = render(&bench, &out).unwrap();
        assert_eq!(written.last(), Some(&out.join("batching.png")));
        let with_floor = std::fs::read(out.join("batching.png")).unwrap();
        assert_eq!(png_size(&with_floor), (WIDTH, HEIGHT));
        assert_ne!(with_floor, bytes, "the reference lines change the picture");

        assert!(render(&dir.join("nowhere"), &out).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
