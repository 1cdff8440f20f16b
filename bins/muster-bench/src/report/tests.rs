use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::*;

/// A document of a run, read as the table reads it.
fn typed<T: DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap()
}

/// Documents of a run, read as the table reads them.
fn all<T: DeserializeOwned>(vs: &[Value]) -> Vec<T> {
    vs.iter().map(typed).collect()
}

/// The rows a section of the table adds to an empty table.
fn rows_of(add: impl FnOnce(&mut Vec<Row>)) -> Vec<Row> {
    let mut rows = Vec::new();
    add(&mut rows);
    rows
}

/// The figure columns of table rows (measured, baseline, ratio), without the label.
fn figures(rows: &[Row]) -> Vec<Vec<String>> {
    rows.iter().map(|r| r[1..].to_vec()).collect()
}

fn floor_run(name: &str, items: u64, items_per_s: f64) -> Value {
    json!({"name": name, "clients": 16, "batch": 128, "items": items,
           "expected_items": 198_656, "seconds": 20.0, "items_per_s": items_per_s})
}

/// A full run at 10,000 items/s that finished `full_items`, and a complete bare run at 20,000.
fn floor_pair(full_items: u64) -> [Value; 2] {
    [
        floor_run("full", full_items, 10_000.0),
        floor_run("bare", 198_656, 20_000.0),
    ]
}

fn floor_table(batches: &[Value], floor: &[Value]) -> Vec<Row> {
    rows_of(|r| floor_rows(r, &all(batches), &all(floor)))
}

#[test]
fn the_floor_row_compares_the_largest_batch_without_a_next_step_with_the_plain_sql_rate() {
    let batches = [
        json!({"batch": 1, "items_per_s": 1000.0}),
        json!({"batch": 128, "items_per_s": 9000.0}),
        json!({"batch": 128, "next": true, "items_per_s": 7000.0}),
    ];
    let floor = floor_pair(198_656);
    let rows = floor_table(&batches, &floor);
    assert_eq!(
        rows[0][1..],
        [
            "9000".to_owned(),
            "10000 in plain SQL".into(),
            "0.90×".into()
        ]
    );
}

#[test]
fn the_bare_queue_row_is_compared_with_the_full_rows() {
    let floor = floor_pair(198_656);
    let rows = floor_table(&[], &floor);
    assert_eq!(
        rows[0][1..],
        [
            "20000".to_owned(),
            "10000 with lease and ledger rows".into(),
            "2.00×".into()
        ]
    );
}

#[test]
fn a_floor_run_that_finished_fewer_items_than_asked_says_so() {
    let floor = floor_pair(198_000);
    let rows = floor_table(&[json!({"batch": 128, "items_per_s": 9000.0})], &floor);
    assert!(
        rows[0][0].contains("198000 items of 198656 asked in 20.00 s"),
        "{}",
        rows[0][0]
    );
}

#[test]
fn the_ceiling_row_compares_the_http_cycles_with_the_single_item_sql_rate_at_the_same_concurrency()
{
    let cycles = [
        json!({"workers": 16, "http": {"cycles_per_s": 2400.0}}),
        json!({"workers": 64, "http": {"cycles_per_s": 5000.0}}),
    ];
    let ceiling = json!({"name": "single-64", "script": "ceiling-single.sql", "clients": 64,
                         "batch": 1, "items": 19_200, "seconds": 16.0, "items_per_s": 1200.0});
    let rows = rows_of(|r| {
        ceiling_rows(
            r,
            &all(&cycles),
            &all(&[floor_run("full", 198_656, 9000.0), ceiling]),
        )
    });
    assert_eq!(
        figures(&rows),
        [[
            "5000".to_owned(),
            "1200 in plain SQL".into(),
            "4.17×".into()
        ]]
    );
}

#[test]
fn without_pgbench_the_floor_is_reported_as_not_measured() {
    let skipped = json!({"name": "full", "skipped": "pgbench not found"});
    let rows = floor_table(&[], &[skipped.clone(), skipped]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][1], "not measured: pgbench not found");
}

#[test]
fn the_feed_load_rows_compare_each_subscriber_count_with_the_mean_of_the_phases_without() {
    let load: FeedLoad = typed(&json!({"workers": 16, "runs": [
        {"subscribers": 0, "items_per_s": 1000.0, "lease": {"n": 1, "p99_ms": 4.0}},
        {"subscribers": 50, "connected": 50, "items_per_s": 950.0, "lease": {"n": 1, "p99_ms": 5.0},
         "server_cpu_us_per_event_per_subscriber": 0.15, "events_delivered": 1000},
        {"subscribers": 0, "items_per_s": 900.0, "lease": {"n": 1, "p99_ms": 6.0}},
    ]}));
    let rows = rows_of(|r| feed_load::rows(r, &load));
    assert_eq!(
        figures(&rows),
        [
            ["950", "950 with none (same run)", "1.00×"],
            ["5.00", "5.00 with none (same run)", "1.00×"],
            ["0.150", "0.3 aim", "0.50×"],
        ]
    );
}

#[test]
fn the_feed_memory_rows_compare_each_layout_with_the_24_mib_aim() {
    let layouts: Vec<FeedMemory> = all(&[
        json!({"protocol": "HTTP/1.1", "subscribers": 1000, "connections": 1000,
               "server_rss_mib_before": 10.8, "server_rss_mib_with_subscribers": 28.0,
               "kib_per_subscriber": 17.6}),
        json!({"protocol": "HTTP/2", "subscribers": 1000, "connections": 5,
               "server_rss_mib_before": 11.0, "server_rss_mib_with_subscribers": 15.8,
               "kib_per_subscriber": 4.9}),
    ]);
    let rows = rows_of(|r| feed_load::memory_rows(r, &layouts));
    assert_eq!(
        figures(&rows),
        [["28.00", "24 aim", "1.17×"], ["15.80", "24 aim", "0.66×"],]
    );
}

#[test]
fn the_feed_memory_rows_name_the_layout_the_rss_before_and_the_cost_per_subscriber() {
    let layouts: Vec<FeedMemory> = all(&[json!({"protocol": "HTTP/2", "subscribers": 1000,
        "connections": 5, "server_rss_mib_before": 11.0, "server_rss_mib_with_subscribers": 15.8,
        "kib_per_subscriber": 4.9})]);
    let rows = rows_of(|r| feed_load::memory_rows(r, &layouts));
    assert_eq!(
        rows[0][0],
        "feed memory: server RSS, MiB, 1000 idle SSE subscribers as HTTP/2 streams over 5 connections, fresh server (11.00 MiB before they connected; 4.9 KiB each)"
    );
}

/// A backlog size whose pages and leases take `ms` at p50 and twice that at p99.
fn backlog_size(size: u64, done: Option<i64>, ms: f64, cycles_per_s: f64) -> BacklogSize {
    let p = json!({"n": 50, "p50_ms": ms, "p99_ms": ms * 2.0});
    typed(&json!({
        "fill": {"done_after": done},
        "measured": {"items_done_page": p, "items_queued_page": p, "lease": p,
                     "cycles_per_s": cycles_per_s, "workers": 16, "seconds": 10.0},
        "size": size,
    }))
}

/// The history rows of a million finished items and 1,000 queued against a backlog of 1,000.
fn history_of_a_million() -> Vec<Row> {
    let base = backlog_size(1_000, None, 2.0, 1000.0);
    let history = backlog_size(1_000, Some(1_000_000), 3.0, 900.0);
    rows_of(|r| history_rows(r, &base, &history))
}

#[test]
fn the_history_rows_compare_a_long_history_with_the_smallest_backlog() {
    assert_eq!(
        figures(&history_of_a_million()),
        [
            [
                "3.00 / 6.00",
                "2.00 / 4.00 with 1,000 queued",
                "1.50× / 1.50×"
            ],
            [
                "3.00 / 6.00",
                "2.00 / 4.00 with 1,000 queued",
                "1.50× / 1.50×"
            ],
            ["900", "1000 with 1,000 queued", "0.90×"],
            [
                "3.00 / 6.00",
                "2.00 / 4.00 with 1,000 queued",
                "1.50× / 1.50×"
            ],
        ]
    );
}

#[test]
fn the_history_rows_name_the_finished_and_queued_items() {
    let rows = history_of_a_million();
    assert!(
        rows[0][0].ends_with("1,000,000 done, 1,000 queued"),
        "{}",
        rows[0][0]
    );
}

#[test]
fn the_delayed_rows_compare_the_backlog_with_delayed_items_beside_it_against_it_alone() {
    let base = backlog_size(1_000_000, None, 2.0, 1000.0);
    let mut delayed = backlog_size(1_000_000, None, 2.2, 950.0);
    delayed.fill.delayed_added = Some(500_000);
    let rows = rows_of(|r| delayed_rows(r, &base, &delayed));
    assert_eq!(
        figures(&rows),
        [
            ["950", "1000 with 1,000,000 queued alone", "0.95×"],
            [
                "2.20 / 4.40",
                "2.00 / 4.00 with 1,000,000 queued alone",
                "1.10× / 1.10×"
            ],
        ]
    );
    assert!(
        rows[0][0].ends_with("1,000,000 queued beside 500,000 delayed a day"),
        "{}",
        rows[0][0]
    );
}

#[test]
fn the_runtime_rows_compare_the_runner_with_the_bare_client_loop_on_each_path_and_its_two_paths() {
    let runtime: RuntimeDoc = typed(&json!({"runs": [
        {"concurrency": 16,
         "single": {"runtime_items_per_s": 1419.4, "bare_items_per_s": 1329.0,
                    "bare_drained": true, "runtime_drained": true},
         "lease_next": {"runtime_items_per_s": 2129.1, "bare_items_per_s": 2000.0,
                        "bare_drained": true, "runtime_drained": false}},
    ]}));
    let rows = rows_of(|r| runtime_rows(r, &runtime));
    assert_eq!(
        rows,
        [
            [
                "worker runtime items/s, concurrency 16, single calls (lease, then complete)",
                "1419",
                "1329 bare client loop, same calls",
                "1.07×"
            ],
            [
                "worker runtime items/s, concurrency 16, completions with `lease_next` (a run hit its time cap)",
                "2129",
                "2000 bare client loop, same calls",
                "1.06×"
            ],
            [
                "worker runtime items/s, concurrency 16, with `lease_next` (the default)",
                "2129",
                "1419 with single calls",
                "1.50×"
            ],
        ]
    );
}

/// `pg_stat_wal`'s growth over a run of `items` items: `bytes` and `fsyncs` per item.
fn wal(items: u64, bytes: f64, fsyncs: f64) -> Value {
    json!({"items": items, "bytes_per_item": bytes, "fsyncs_per_item": fsyncs})
}

#[test]
fn the_wal_rows_set_single_calls_beside_the_single_item_ceiling_and_the_largest_batch_beside_the_floor()
 {
    let batches = all(&[
        json!({"batch": 1, "workers": 16, "wal": wal(4_000, 4000.0, 1.0)}),
        json!({"batch": 1, "lease_next": true, "workers": 16, "wal": wal(5_000, 3000.0, 0.5)}),
        json!({"batch": 1, "next": true, "workers": 16, "wal": wal(3_000, 5000.0, 1.0)}),
        json!({"batch": 16, "workers": 16, "wal": wal(200_000, 2600.0, 0.1)}),
        json!({"batch": 128, "workers": 16, "wal": wal(200_000, 2400.0, 0.01)}),
    ]);
    let ceiling = |clients: u64, bytes: f64| {
        json!({"name": format!("single-{clients}"), "script": "ceiling-single.sql",
               "clients": clients, "batch": 1, "wal": wal(16_000, bytes, 0.5)})
    };
    let floor = all(&[
        json!({"name": "full", "script": "floor-full.sql", "clients": 16, "batch": 128,
               "wal": wal(198_656, 2000.0, 0.008)}),
        json!({"name": "bare", "script": "floor-bare.sql", "clients": 16, "batch": 128,
               "wal": wal(198_656, 500.0, 0.004)}),
        ceiling(16, 2000.0),
        ceiling(64, 1000.0),
    ]);
    let rows = rows_of(|r| wal_rows(r, &batches, &floor));

    assert_eq!(
        figures(&rows),
        [
            [
                "4000 B / 1.000",
                "2000 B / 0.500 in plain SQL",
                "2.00× / 2.00×"
            ],
            [
                "3000 B / 0.500",
                "2000 B / 0.500 in plain SQL",
                "1.50× / 1.00×"
            ],
            [
                "2400 B / 0.010",
                "2000 B / 0.008 in plain SQL",
                "1.20× / 1.25×"
            ],
            [
                "500 B / 0.004",
                "2000 B / 0.008 with lease and ledger rows",
                "0.25× / 0.50×"
            ],
        ]
    );
    assert_eq!(
        rows[1][0],
        "WAL per finished item, bytes / fsyncs: batch size 1 with `lease_next`, 16 workers over \
         HTTP (5000 items), against the same rows in plain SQL (ceiling-single.sql, 16 clients, \
         batches of 1)"
    );
}

#[test]
fn without_a_wal_sample_of_the_plain_sql_run_there_is_no_wal_row() {
    let batches = all(&[json!({"batch": 128, "workers": 16, "wal": wal(200_000, 2400.0, 0.01)})]);
    let floor = all(&[floor_run("full", 198_656, 10_000.0)]);
    let rows = rows_of(|r| wal_rows(r, &batches, &floor));

    assert_eq!(rows, Vec::<[String; 4]>::new());
}

fn hostile_run() -> Hostile {
    typed(&json!({
        "scenario": "hostile", "workers": 16, "feed_connections": 10, "feed_streams": 20,
        "resume_back": 9999, "uploads": 60, "slow_heads": 200, "hog": 80,
        "flood_rate": 400, "flood_connections": 8, "flood_requests_per_s": 398.4,
        "idle": {"hwm_mib": 11.0, "rss_mib": 10.0},
        "quiet": {"lease": {"n": 900, "p99_ms": 8.0}, "server": {"hwm_mib": 14.0, "rss_mib": 13.0}},
        "flood": {"lease": {"n": 800, "p99_ms": 10.0}, "answers": {"flood 401": 3985}},
        "clients": {"lease": {"n": 700, "p99_ms": 12.0}, "errors": 2,
                    "server": {"hwm_mib": 25.0, "rss_mib": 20.0},
                    "answers": {"feed 200": 16, "feed 503": 184, "hog closed by the server": 16}},
    }))
}

#[test]
fn the_hostile_rows_set_the_peak_rss_beside_the_idle_rss_and_each_lease_p99_beside_the_quiet_one() {
    let rows = rows_of(|r| hostile::rows(r, &hostile_run()));
    assert_eq!(
        figures(&rows),
        [
            ["25.00", "10.00 idle after start", "2.50×"],
            ["12.00", "8.00 without (same run)", "1.50×"],
            ["10.00", "8.00 without (same run)", "1.25×"],
        ]
    );
}

#[test]
fn the_hostile_rows_name_the_clients_their_answers_the_auth_path_and_the_workers_errors() {
    let rows = rows_of(|r| hostile::rows(r, &hostile_run()));
    assert_eq!(
        [
            rows[0][0].as_str(),
            rows[1][0].as_str(),
            rows[2][0].as_str()
        ],
        [
            "hostile clients: server peak RSS (VmHWM), MiB, fresh server, after 10 HTTP/2 \
             connections with a zero window opening 20 feed resumes 9999 events back each, 60 \
             HTTP/2 uploads of 1 MiB without a length, 200 slow heads, 80 idle connections from \
             one peer (answered feed 200: 16, feed 503: 184, hog closed by the server: 16)",
            "hostile clients: lease p99 ms of 16 single-call workers beside them (workers: 2 errors)",
            "token flood: lease p99 ms of 16 single-call workers beside `POST /v1/leases` with \
             random bearer tokens, 400 a second asked over 8 connections, 398 sent (token-file \
             auth: the edge's rejection path; answered flood 401: 3985)",
        ]
    );
}

#[test]
fn a_suite_without_a_hostile_document_has_no_hostile_rows() {
    let rows = rows_of(|r| hostile::rows(r, &Hostile::default()));
    assert!(rows.is_empty());
}

fn retention_run() -> Retention {
    typed(&json!({
        "scenario": "retention", "workers": 16, "phase_seconds": 10,
        "quiet": [{"lease": {"n": 900, "p99_ms": 10.0}, "items_per_s": 2000.0},
                  {"lease": {"n": 900, "p99_ms": 12.0}, "items_per_s": 1800.0}],
        "during": {"lease": {"n": 800, "p99_ms": 15.0}, "items_per_s": 1520.0, "errors": 3},
        "pass": {"items_removed": 1_020_000, "leases_removed": 20_000, "seconds": 51.0,
                 "items_per_s": 20_000.0, "finished_before": 1_050_000, "outlasted_phase": true},
    }))
}

#[test]
fn the_retention_rows_set_the_workers_beside_the_pass_against_them_alone_before_it_and_the_removal_rate_against_their_rate()
 {
    let rows = rows_of(|r| retention::rows(r, &retention_run()));
    assert_eq!(
        figures(&rows),
        [
            ["15.00", "10.00 alone before it (same run)", "1.50×"],
            ["1520", "2000 alone before it (same run)", "0.76×"],
            ["20000", "2000 finished/s (same run)", "10.00×"],
        ]
    );
}

#[test]
fn the_retention_rows_name_what_the_pass_removed_and_the_workers_errors() {
    let rows = rows_of(|r| retention::rows(r, &retention_run()));
    assert_eq!(
        [rows[0][0].as_str(), rows[2][0].as_str()],
        [
            "retention: lease p99 ms of 16 single-call workers while a retention pass removes \
             1,020,000 finished items (of 1,050,000) (workers: 3 errors) (alone after it: 12.00)",
            "retention: finished items removed per second by the pass (1,020,000 items and \
             20,000 leases in 51.00 s, beside the workers), against the rate \
             the workers finish them",
        ]
    );
}

#[test]
fn a_pass_that_ended_within_the_phase_is_named_in_the_rows() {
    let mut run = retention_run();
    run.pass.outlasted_phase = false;
    let rows = rows_of(|r| retention::rows(r, &run));
    assert_eq!(
        rows[1][0],
        "retention: items/s of 16 single-call workers while a retention pass removes 1,020,000 \
         finished items (of 1,050,000); the pass ended within the phase (alone after it: 1800)"
    );
}

#[test]
fn a_suite_without_a_retention_document_has_no_retention_rows() {
    let rows = rows_of(|r| retention::rows(r, &Retention::default()));
    assert!(rows.is_empty());
}

fn history_size(finished: u64, p99: f64, verify_s: f64, ledger_bytes: i64) -> Value {
    let lat = json!({"n": 100, "p50_ms": p99 / 2.0, "p99_ms": p99});
    json!({
        "size": finished,
        "fill": {"core_bytes": {"items": 500 * finished, "leases": 300 * finished,
                                "ledger": ledger_bytes, "edits": 8192}},
        "runs": [{"finished": finished, "ledger_rows": 3 * finished, "workers": 16,
                  "resume_back": 5000, "entries_after_checkpoint": 40_000,
                  "drain": {"lease": lat, "complete": lat, "seconds": 10.0},
                  "items_done_page": lat, "feed_resume": lat,
                  "since_verify": {"seconds": verify_s, "peak_rss_mib": 10.0}}],
    })
}

#[test]
fn the_history_cost_rows_set_each_figure_of_the_largest_history_against_the_smallest() {
    let sizes: Vec<HistorySize> = all(&[
        history_size(10_000, 4.0, 1.0, 12_000_000),
        history_size(1_000_000, 5.0, 1.1, 1_500_000_000),
    ]);
    let rows = rows_of(|r| history_cost::rows(r, &sizes));
    assert_eq!(
        figures(&rows),
        [
            [
                "2.50 / 5.00",
                "2.00 / 4.00 with 10,000 finished",
                "1.25× / 1.25×"
            ],
            [
                "2.50 / 5.00",
                "2.00 / 4.00 with 10,000 finished",
                "1.25× / 1.25×"
            ],
            [
                "2.50 / 5.00",
                "2.00 / 4.00 with 10,000 finished",
                "1.25× / 1.25×"
            ],
            [
                "2.50 / 5.00",
                "2.00 / 4.00 with 10,000 finished",
                "1.25× / 1.25×"
            ],
            [
                "1.10 / 10.00",
                "1.00 / 10.00 with 10,000 finished",
                "1.10× / 1.00×"
            ],
            ["500", "500 with 10,000 finished", "1.00×"],
            ["300", "300 with 10,000 finished", "1.00×"],
            ["1500", "1200 with 10,000 finished", "1.25×"],
            ["2300", "2000 with 10,000 finished", "1.15×"],
        ]
    );
}

#[test]
fn a_run_without_history_sizes_has_no_history_cost_rows() {
    let rows = rows_of(|r| history_cost::rows(r, &[]));
    assert!(rows.is_empty());
}

#[test]
fn the_history_cost_latencies_are_the_mean_of_each_sizes_runs() {
    let mut sizes: Vec<HistorySize> = all(&[
        history_size(10_000, 4.0, 1.0, 12_000_000),
        history_size(1_000_000, 5.0, 1.1, 1_500_000_000),
    ]);
    let mut second = sizes[1].runs[0].clone();
    second.drain.lease.p99_ms = Some(7.0);
    sizes[1].runs.push(second);
    let rows = rows_of(|r| history_cost::rows(r, &sizes));
    assert_eq!(
        rows[0][1..],
        [
            "2.50 / 6.00",
            "2.00 / 4.00 with 10,000 finished",
            "1.25× / 1.50×"
        ]
    );
}

#[test]
fn the_trace_cost_rows_compare_tracing_on_with_the_mean_of_the_phases_with_it_off() {
    let cost: TraceCost = typed(&json!({"workers": 16, "phase_seconds": 10, "runs": [
        {"tracing": false, "items": 10000, "items_per_s": 1000.0, "lease": {"n": 1, "p99_ms": 4.0},
         "server_cpu_us_per_item": 300.0},
        {"tracing": true, "items": 9000, "items_per_s": 900.0, "lease": {"n": 1, "p99_ms": 6.0},
         "server_cpu_us_per_item": 420.0, "otlp_requests": 20, "otlp_bytes": 18_000_000,
         "spans_exported": 72000, "spans_dropped": 0, "spans_failed": 0},
        {"tracing": false, "items": 8000, "items_per_s": 800.0, "lease": {"n": 1, "p99_ms": 8.0},
         "server_cpu_us_per_item": 400.0},
    ]}));
    let rows = rows_of(|r| trace_cost::rows(r, &cost));
    let off = "tracing off (mean of 2, same run)";
    assert_eq!(
        figures(&rows),
        [
            ["900".to_owned(), format!("900 {off}"), "1.00×".into()],
            ["6.00".into(), format!("6.00 {off}"), "1.00×".into()],
            ["420".into(), format!("350 {off}"), "1.20×".into()],
            [
                "8.00".into(),
                "– (none with tracing off)".into(),
                "–".into()
            ],
            [
                "2000".into(),
                "– (none with tracing off)".into(),
                "–".into()
            ],
        ]
    );
}

#[test]
fn the_trace_cost_rows_say_the_phase_order_and_the_spans_dropped() {
    let cost: TraceCost = typed(&json!({"workers": 16, "phase_seconds": 10, "runs": [
        {"tracing": false, "items": 10, "items_per_s": 1.0},
        {"tracing": true, "items": 10, "items_per_s": 1.0, "spans_exported": 70,
         "spans_dropped": 5, "spans_failed": 0, "otlp_requests": 3},
        {"tracing": false, "items": 10, "items_per_s": 1.0},
    ]}));
    let rows = rows_of(|r| trace_cost::rows(r, &cost));
    assert!(
        rows[0][0].contains("(phases off, on, off)"),
        "{}",
        rows[0][0]
    );
    assert!(
        rows[3][0].contains("(70 exported, 5 dropped, 0 failed)"),
        "{}",
        rows[3][0]
    );
    assert!(rows[4][0].contains("(3 export requests)"), "{}", rows[4][0]);
}

#[test]
fn without_a_phase_with_tracing_on_there_are_no_trace_cost_rows() {
    let cost: TraceCost = typed(&json!({"runs": [{"tracing": false, "items_per_s": 1.0}]}));
    assert!(rows_of(|r| trace_cost::rows(r, &cost)).is_empty());
}
