//! The drawing of the charts (the `charts` feature): plotters into an RGB buffer that the
//! `png` crate encodes.
//!
//! Text uses a subset of DejaVu Sans committed under `bins/muster-bench/assets/` (see the README
//! there), registered with plotters' `ab_glyph` font support (which sizes legends and label
//! areas), so no system font library is involved. The glyphs themselves are drawn by [`Canvas`],
//! a thin wrapper of plotters' bitmap backend: plotters 0.3.7 places each glyph without its left
//! side bearing, which spaces letters unevenly ("H TTP").

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use anyhow::{Context, Result, anyhow, bail, ensure};
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
// `BackendStyle` stays unimported: its `stroke_width` would clash with `Color::stroke_width`.
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};

use super::layout::{
    KeyedAxis, RateChart, axis_top, legend_covers_data, legend_height, linear_ticks, log_axis,
};
use super::{HEIGHT, LatencyGroup, WIDTH, figures};

/// DejaVu Sans, Latin-1 and a few symbols (→ × – … ≤ ≥); licence in `bins/muster-bench/assets/`.
const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");
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

/// Draws every chart the JSON in `bench_dir` has data for into `out_dir` (created if need be)
/// and returns the files written: `throughput.png`, `latency.png`, `batching.png`.
pub(crate) fn render(bench_dir: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    let figures = figures(bench_dir)?;
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
    if let Some(chart) = figures.throughput() {
        write("throughput.png", &|rgb| draw_rates(rgb, &chart))?;
    }
    if !figures.groups.is_empty() {
        write("latency.png", &|rgb| {
            draw_latency(rgb, &figures.groups, &figures.latency_note)
        })?;
    }
    if let Some(chart) = figures.batching() {
        write("batching.png", &|rgb| draw_rates(rgb, &chart))?;
    }
    Ok(written)
}

fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    ensure!(
        ok,
        "the bundled font bins/muster-bench/assets/DejaVuSans-subset.ttf does not load"
    );
    Ok(())
}

fn font(size: u32) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&INK)
}

/// The mesh every chart shares: its label and description fonts, faint bold lines and no
/// light ones.
trait HouseStyle {
    fn house_style(&mut self) -> &mut Self;
}

impl<X, Y, XT, YT, DB> HouseStyle for MeshStyle<'_, '_, X, Y, DB>
where
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
    DB: DrawingBackend,
{
    fn house_style(&mut self) -> &mut Self {
        self.label_style(font(15))
            .axis_desc_style(font(16))
            .bold_line_style(BLACK.mix(0.12))
            .light_line_style(TRANSPARENT)
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
        .house_style()
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
    // Top left, above a rising chart's lines, unless it would cover one of them.
    let legend = if covers {
        SeriesLabelPosition::LowerRight
    } else {
        SeriesLabelPosition::UpperLeft
    };
    legend_and_present(&mut chart, &area, legend)
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
        .house_style()
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

    legend_and_present(&mut chart, &area, SeriesLabelPosition::UpperLeft)
}

/// Draws the chart's legend at `position`, in the style every chart shares, and presents the page.
fn legend_and_present<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, Canvas<'a>, CT>,
    area: &DrawingArea<Canvas<'a>, Shift>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
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
