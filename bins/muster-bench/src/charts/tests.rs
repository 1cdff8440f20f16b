use serde_json::{Value, json};

use super::layout::{RateChart, axis_top, legend_covers_data, linear_ticks, log_axis};
use super::*;

/// A document of a run, read as the charts read it.
fn typed<T: DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap()
}

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
    let levels = levels(&typed(&cycles_sample()));
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
    let groups = latency_groups(
        Some(&typed(&cycles_sample())),
        Some(&typed(&pickup_sample())),
    );
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
    let groups = latency_groups(Some(&typed(&cycles)), None);
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].name, "lease (8 workers)");
    assert!(groups[0].http.is_empty());
    assert_eq!(groups[0].in_process, pcts(5.991, 11.808));
    assert_eq!(latency_groups(None, None), vec![]);
}

#[test]
fn batching_points_are_the_http_rates_by_batch_size_without_lease_next_or_next_steps() {
    let doc: Runs<Vec<BatchRun>> = typed(&json!({"runs": [
        {"batch": 128, "items_per_s": 15155.0},
        {"batch": 1, "items_per_s": 2424.0},
        {"batch": 1, "lease_next": true, "items_per_s": 3329.0},
        {"batch": 128, "next": true, "items_per_s": 12974.0},
        {"batch": 16, "items_per_s": 9029.0},
        {"batch": 4},
    ]}));
    let http = |x: u64, rate: f64| RatePoint {
        x,
        http: Some(rate),
        in_process: None,
    };
    assert_eq!(
        batch_points(&doc.runs),
        vec![http(1, 2424.0), http(16, 9029.0), http(128, 15155.0)]
    );
}

fn floor_sample() -> Value {
    json!({"runs": [
        {"name": "full", "batch": 128, "items_per_s": 10046.8},
        {"name": "bare", "batch": 128, "items_per_s": 17798.3},
        {"name": "single-64", "batch": 1, "clients": 64, "items_per_s": 892.0},
    ]})
}

/// The runs of `floor.json`, as the charts read them.
fn floor_runs(v: &Value) -> Vec<FloorResult> {
    typed::<Runs<Vec<FloorResult>>>(v).runs
}

#[test]
fn the_single_item_ceiling_becomes_a_reference_line_per_client_count() {
    assert_eq!(
        ceiling_lines(&floor_runs(&floor_sample())),
        vec![RefLine {
            label: "same rows, one item per transaction (pgbench, 64 clients)".into(),
            rate: 892.0
        }]
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
        floor_lines(&floor_runs(&floor_sample())),
        vec![
            RefLine {
                label: "same rows in plain SQL (pgbench, batches of 128)".into(),
                rate: 10046.8
            },
            RefLine {
                label: "bare queue in plain SQL (no lease, no ledger rows; batches of 128)".into(),
                rate: 17798.3
            },
        ]
    );
}

#[test]
fn a_skipped_floor_draws_no_reference_line() {
    let skipped = json!({"runs": [{"name": "full", "skipped": "pgbench not found"}]});
    assert_eq!(floor_lines(&floor_runs(&skipped)), vec![]);
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

#[cfg(feature = "charts")]
/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

#[cfg(feature = "charts")]
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
            {"batch": 1, "items_per_s": 1000.0},
            {"batch": 16, "items_per_s": 9000.0},
            {"batch": 128, "items_per_s": 31000.0},
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
