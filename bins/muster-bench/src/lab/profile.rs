//! `cargo xtask profile` (`muster-bench profile`): where the time of one drain goes. The release server on a throwaway
//! cluster (fsync on) with `pg_stat_statements`, a `trawl` backlog filled in SQL, one
//! `muster-bench batch` drain over HTTP; then the drain's rate, the server's CPU time per item
//! (`/proc/<pid>/stat`) and PostgreSQL's statement time per item, statement by statement.
//!
//! It measures one configuration at a time; compare two builds or settings by alternating runs
//! — the machine is noisy.

use std::path::Path;

use anyhow::{Context, Result};
use muster_devdb::{ClusterOptions, TempCluster, migrated_database};
use serde_json::json;

use super::Runner;
use super::procs::{
    ServeArgs, free_listen, muster_bench, on_cluster, psql, psql_query, publish, write_serve_files,
};
use crate::procinfo::{cpu_seconds, ticks_per_second};
use crate::results::BatchRun;

/// What one profile drains (`cargo xtask profile` passes its flags on).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub(crate) struct Options {
    /// Concurrent workers.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    workers: u32,
    /// Items per lease (1: the single calls).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Items drained.
    #[arg(long, default_value_t = 40_000, value_parser = clap::value_parser!(u32).range(1..))]
    items: u32,
    /// Statements listed.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..))]
    top: u32,
    /// Finished items (with their leases and three ledger rows each) filled before the queue
    /// (`backlog-fill --history`; its default without it).
    #[arg(long)]
    history: Option<u64>,
}

/// One profile with the `muster` binary at `muster`, its report and raw JSON written to `out`.
pub(crate) fn profile(muster: &Path, out: &Path, options: &Options) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("could not create {}", out.display()))?;

    let report = on_cluster(
        "starting a throwaway PostgreSQL cluster (fsync on) with pg_stat_statements",
        ClusterOptions {
            fsync: true,
            extra_settings: vec![
                "shared_preload_libraries = 'pg_stat_statements'".into(),
                "pg_stat_statements.track = 'all'".into(),
            ],
            ..ClusterOptions::default()
        },
        |cluster| drain(cluster, muster, out, options),
    )?;
    publish(out, "profile.md", "report", &report)
}

fn drain(cluster: &TempCluster, muster: &Path, out: &Path, options: &Options) -> Result<String> {
    let url = migrated_database(cluster, muster, "muster_profile")?;
    psql(&url, "CREATE EXTENSION pg_stat_statements")?;
    let tokens = write_serve_files(out, ["worker:trawl"], json!({}))?;
    let token = tokens.token("worker:trawl").unwrap_or_default().to_owned();

    // More than the drain takes, so that the queue never runs dry under it.
    let backlog = u64::from(options.items) + 20_000;
    let env = [("MUSTER_BENCH_TRAWL_TOKEN", token)];
    let (backlog, history) = (backlog.to_string(), options.history.map(|n| n.to_string()));
    let mut fill = vec!["backlog-fill", "--database-url", &url, "--to", &backlog];
    if let Some(n) = &history {
        fill.extend(["--history", n]);
    }
    Runner { env: &env, out }.run::<serde_json::Value>("backlog-fill", &fill)?;

    let listen = free_listen()?;
    let serve = ServeArgs::new(muster, &url, &listen, out);
    let mut server = serve.start(&out.join("server.log"))?;
    let pid = server.pid();
    let ticks = ticks_per_second();
    let cpu_before = cpu_seconds(pid, ticks)?;
    // Start-up's statements (migration check, the feed's depth count) are not the drain's.
    psql(&url, "SELECT pg_stat_statements_reset()")?;
    let base = format!("http://{listen}");
    let (workers, batch, items) = (
        options.workers.to_string(),
        options.batch.to_string(),
        options.items.to_string(),
    );
    let measured = muster_bench::<BatchRun>(
        &env,
        out,
        "batch",
        &[
            "batch",
            "--url",
            &base,
            "--batch",
            &batch,
            "--workers",
            &workers,
            "--items",
            &items,
            "--seconds",
            "300",
        ],
    );
    let cpu_after = cpu_seconds(pid, ticks);
    server.stop();
    let measured = measured?;
    let server_cpu = cpu_after? - cpu_before;
    let statements = statements(&url, options.top)?;
    Ok(render(options, &measured, server_cpu, &statements))
}

/// A value as its JSON document shows it.
fn text(v: impl serde::Serialize) -> String {
    serde_json::to_string(&v).unwrap_or_default()
}

/// One statement's share of the drain.
#[derive(Debug, Clone, PartialEq)]
struct Statement {
    total_ms: f64,
    calls: u64,
    /// Run by another statement (a foreign-key check, a trigger's query): its time is also in
    /// the statement that ran it.
    nested: bool,
    query: String,
}

/// The drain's statements by total execution time, the `top` first, and the total of the
/// top-level ones (nested statements' time is already inside theirs).
fn statements(url: &str, top: u32) -> Result<(f64, Vec<Statement>)> {
    let sql = format!(
        "SELECT (SELECT sum(total_exec_time) FROM pg_stat_statements WHERE toplevel), \
         total_exec_time, calls, NOT toplevel, translate(query, E'\\n\\r\\t', E'\\x1f  ') \
         FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' \
         ORDER BY total_exec_time DESC LIMIT {top}"
    );
    let rows = psql_query(url, &sql).context("reading pg_stat_statements failed")?;
    Ok(parse_statements(&rows))
}

/// `total \t total_exec_time \t calls \t nested (t/f) \t query` lines, as `statements` asks
/// psql for them (the query's line breaks as `\x1f`).
fn parse_statements(text: &str) -> (f64, Vec<Statement>) {
    let mut total = 0.0;
    let mut rows = Vec::new();
    for line in text.lines() {
        let mut cols = line.splitn(5, '\t');
        let (Some(all), Some(ms), Some(calls), Some(nested), Some(query)) = (
            cols.next(),
            cols.next(),
            cols.next(),
            cols.next(),
            cols.next(),
        ) else {
            continue;
        };
        let (Ok(all), Ok(total_ms), Ok(calls)) = (all.parse(), ms.parse(), calls.parse()) else {
            continue;
        };
        total = all;
        rows.push(Statement {
            total_ms,
            calls,
            nested: nested == "t",
            query: statement_text(query),
        });
    }
    (total, rows)
}

/// A statement on one line without the `--` comment lines it starts with (pg_stat_statements
/// keeps a .sql file's header), its line breaks given as `\x1f`.
fn statement_text(query: &str) -> String {
    let lines = query
        .split('\x1f')
        .skip_while(|l| l.trim().is_empty() || l.trim_start().starts_with("--"));
    let words: Vec<&str> = lines.flat_map(str::split_whitespace).collect();
    words.join(" ")
}

fn render(
    options: &Options,
    measured: &BatchRun,
    server_cpu_s: f64,
    (total_ms, statements): &(f64, Vec<Statement>),
) -> String {
    let items = measured.items as f64;
    let per_item_us = |ms: f64| {
        if items > 0.0 {
            format!("{:.1}", ms * 1000.0 / items)
        } else {
            "n/a".into()
        }
    };
    let mut text = format!(
        "`cargo xtask profile --workers {} --batch {} --items {}`: {} items in {} s, {} items/s \
         ({} errors); server CPU {} µs per item; PostgreSQL statement time {} µs per item\n\n\
         | µs per item | calls | statement |\n|---:|---:|---|\n",
        options.workers,
        options.batch,
        options.items,
        measured.items,
        text(measured.seconds),
        text(measured.items_per_s),
        measured.errors,
        per_item_us(server_cpu_s * 1000.0),
        per_item_us(*total_ms),
    );
    for s in statements {
        let mut query: String = s.query.chars().take(100).collect();
        if query.len() < s.query.len() {
            query.push('…');
        }
        let nested = if s.nested {
            " (nested: also counted in the statement that ran it)"
        } else {
            ""
        };
        text.push_str(&format!(
            "| {} | {} | `{}`{nested} |\n",
            per_item_us(s.total_ms),
            s.calls,
            query.replace('|', "\\|").replace('`', "'")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(v: &serde_json::Value) -> BatchRun {
        serde_json::from_value(v.clone()).unwrap()
    }

    /// `muster-bench profile ARGS`, parsed as the command line is.
    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            options: Options,
        }
        let args = std::iter::once("profile").chain(args.iter().copied());
        <Cli as clap::Parser>::try_parse_from(args).map(|cli| cli.options)
    }

    #[test]
    fn without_arguments_a_profile_drains_40000_items_with_64_workers_one_at_a_time() {
        let expected = Options {
            workers: 64,
            batch: 1,
            items: 40_000,
            top: 12,
            history: None,
        };
        assert_eq!(parse(&[]).unwrap(), expected);
    }

    #[test]
    fn the_flags_set_workers_batch_items_top_and_history_and_refuse_zero() {
        let options = parse(&[
            "--workers",
            "16",
            "--batch",
            "128",
            "--items",
            "9",
            "--top",
            "5",
            "--history",
            "1000000",
        ]);
        let expected = Options {
            workers: 16,
            batch: 128,
            items: 9,
            top: 5,
            history: Some(1_000_000),
        };
        assert_eq!(options.unwrap(), expected);
        assert!(parse(&["--workers", "0"]).is_err());
    }

    #[test]
    fn statement_lines_carry_the_total_and_each_statement() {
        let text = "2000.5\t1200.25\t300\tf\tUPDATE core.items SET state = $1\n\
                    2000.5\t800.25\t40\tt\tSELECT 1\n";
        assert_eq!(
            parse_statements(text),
            (
                2000.5,
                vec![
                    Statement {
                        total_ms: 1200.25,
                        calls: 300,
                        nested: false,
                        query: "UPDATE core.items SET state = $1".into()
                    },
                    Statement {
                        total_ms: 800.25,
                        calls: 40,
                        nested: true,
                        query: "SELECT 1".into()
                    }
                ]
            )
        );
    }

    #[test]
    fn a_statement_is_shown_on_one_line_without_its_leading_comment_lines() {
        let text = "10\t5\t2\tf\t-- Leases the oldest item.\x1f  -- $1: kind\x1f\x1fSELECT id\x1f                      FROM core.items -- the queue\x1fWHERE kind = $1\n";
        assert_eq!(
            parse_statements(text).1[0].query,
            "SELECT id FROM core.items -- the queue WHERE kind = $1"
        );
    }

    #[test]
    fn the_report_gives_time_per_item() {
        let measured = json!({"items": 40_000, "seconds": 10.0, "items_per_s": 4000.0,
                              "errors": 0});
        let statements = (
            4000.0,
            vec![
                Statement {
                    total_ms: 1320.0,
                    calls: 2703,
                    nested: false,
                    query: "WITH w AS (UPDATE core.items i SET state = u.state)".into(),
                },
                Statement {
                    total_ms: 80.0,
                    calls: 40_000,
                    nested: true,
                    query: "SELECT 1 FROM ONLY core.items x".into(),
                },
            ],
        );
        let report = render(&parse(&[]).unwrap(), &typed(&measured), 4.48, &statements);
        assert_eq!(
            report,
            "`cargo xtask profile --workers 64 --batch 1 --items 40000`: 40000 items in 10.0 s, \
             4000.0 items/s (0 errors); server CPU 112.0 µs per item; PostgreSQL statement time \
             100.0 µs per item\n\n\
             | µs per item | calls | statement |\n|---:|---:|---|\n\
             | 33.0 | 2703 | `WITH w AS (UPDATE core.items i SET state = u.state)` |\n\
             | 2.0 | 40000 | `SELECT 1 FROM ONLY core.items x` (nested: also counted in the \
             statement that ran it) |\n"
        );
    }
}
