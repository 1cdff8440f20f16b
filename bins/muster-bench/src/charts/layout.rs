//! The arithmetic of the charts' layout: round axis tops and ticks, log axes, and where the
//! legend goes. No drawing here, so that it is tested in every build.

use super::{RatePoint, RefLine};

/// A round number at least `headroom` times `max`, for the top of a value axis.
pub(super) fn axis_top(max: f64, headroom: f64) -> f64 {
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
pub(super) struct KeyedAxis {
    pub(super) range: std::ops::Range<f64>,
    pub(super) keys: Vec<f64>,
    log: bool,
}

impl KeyedAxis {
    pub(super) fn linear(range: std::ops::Range<f64>, keys: Vec<f64>) -> Self {
        Self {
            range,
            keys,
            log: false,
        }
    }

    pub(super) fn log(range: std::ops::Range<f64>, keys: Vec<f64>) -> Self {
        Self {
            range,
            keys,
            log: true,
        }
    }

    /// Where `value` lies between the ends of the range, 0 to 1.
    pub(super) fn share(&self, value: f64) -> f64 {
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

/// Ticks from 0 to `top` (from [`axis_top`]) at a round step, 5 to 10 intervals.
pub(super) fn linear_ticks(top: f64) -> Vec<f64> {
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
pub(super) fn log_axis(min: f64, max: f64) -> KeyedAxis {
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

pub(super) struct RateChart<'a> {
    pub(super) title: &'a str,
    pub(super) x_desc: &'a str,
    pub(super) y_desc: &'a str,
    pub(super) note: &'a str,
    pub(super) points: &'a [RatePoint],
    /// A log value axis (batching spans decades); else linear from 0.
    pub(super) log_y: bool,
    /// Dashed horizontal reference lines, each labelled.
    pub(super) lines: &'a [RefLine],
}

/// The legend's height in px: about 24 per entry (the two sides and every reference line) plus
/// its margins.
pub(super) fn legend_height(spec: &RateChart<'_>) -> i32 {
    40 + 24 * (2 + i32::try_from(spec.lines.len()).unwrap_or(i32::MAX / 64))
}

/// The legend's width in px, estimated from its longest label (about 6.6 px per character at
/// the legend's 15 px, a reference line's label followed by `": <rate>"`) plus the swatch and
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
pub(super) fn legend_covers_data(
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
