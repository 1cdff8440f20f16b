//! Scenarios `backlog-fill` and `backlog`: the cost of a large backlog.
//!
//! `backlog-fill` tops the `trawl` queue up to N queued items straight in SQL (one
//! `INSERT … SELECT generate_series`), and with `--done M` the finished `trawl` items up to M,
//! **bypassing the ledger**: the rows have `chain_len` 0 (the queued) or a zero chain head (the
//! done, with UUIDv7 ids as a running system's, so that a retention pass finds them) and no
//! ledger entry, so `ledger-verify` would reject them. The bench database is thrown
//! away and `ledger-verify` is never run on it. The server must be (re)started after a fill: its
//! live feed counts the depths once at start.
//!
//! `backlog` measures, against a running server: `GET /v1/queues` latency, `GET /v1/items` page
//! latency (the seeded `done` history, a minority of a large backlog, and the queued items; each
//! paged on with `next`, from the start again at the last page), and the lease→complete
//! cycle rate at N workers. After each completion the worker enqueues one new trawl item over
//! HTTP (operator token), so the backlog keeps its size for the whole run (a 1,000-item backlog
//! would otherwise drain in about a second; the pipeline routes forbid trawl → trawl `next`
//! items). A cycle is therefore three requests: lease, complete, enqueue; their latencies are
//! reported separately.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::http::{Http, percentiles};
use crate::results::{BacklogFill, BacklogMeasured};
use crate::rounds::Tally;

pub(crate) async fn connect(database_url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(database_url, tokio_postgres::NoTls)
        .await
        .context("connect to PostgreSQL")?;
    tokio::spawn(connection);
    Ok(client)
}

/// `trawl` items in `state`.
async fn count(client: &tokio_postgres::Client, state: &str) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT count(*) FROM core.items WHERE kind = 'trawl' AND state = $1",
            &[&state],
        )
        .await?;
    Ok(row.get::<_, i64>(0))
}

/// The `id` (UUIDv7) and creation time `at` of the item number `g` of a fill, as a `LATERAL`
/// subquery: created a millisecond apart from `$from` on, in id order, with a random tail. A
/// running system's ids are UUIDv7: retention scans each group of finished items in id order up
/// to the id of its cutoff (`core.remove_finished`), and an item's index entries and ledger
/// rows go in at the end of their indexes, where a random id would put each on a leaf page of
/// its own anywhere in the history's.
macro_rules! v7_ids {
    ($from:literal) => {
        concat!(
            "SELECT (lpad(to_hex(t.ms), 12, '0') || '7' || substr(t.r, 1, 3) || '8' \
             || substr(t.r, 4, 15))::uuid AS id, to_timestamp(t.ms / 1000.0) AS at \
             FROM (SELECT (extract(epoch FROM ",
            $from,
            ") * 1000)::bigint + g AS ms, md5(random()::text) AS r) t"
        )
    };
}

/// Finished items that a database without any lease gets before it is measured, each with its
/// finished lease and three ledger rows (see [`seed_history`]), unless `--history` asks for
/// another number.
const HISTORY: u64 = 20_000;

/// Gives a database that has never granted a lease the history of a running system: `n` `done`
/// items of kind `trawl` (UUIDv7 ids), each with a lease (inserted, then completed) and an
/// `enqueued`, a `leased` and a `completed` ledger row (zero hashes, like the fill's items: no
/// valid chain). Before the server starts, like the fill itself: a running server's live feed
/// would take the seeded ledger rows for transitions and count them in its queue depths.
///
/// Without it a run on a fresh database measures PostgreSQL's plans for tables that are still
/// tiny: Muster plans each statement once per pooled connection (generic plans), autovacuum
/// analyzes `core.leases` after its first few dozen rows and not again for a minute, so the
/// completion's lease lock and the finishing of leases scanned the growing table sequentially
/// (`cargo xtask profile` on a fresh database: 124 and 74 µs per item, against 7 and 11 on a
/// database with history). A running system's leases and ledger are never that small.
async fn seed_history(client: &tokio_postgres::Client, n: u64) -> Result<()> {
    let has_leases = client
        .query_opt("SELECT 1 FROM core.leases LIMIT 1", &[])
        .await
        .context("read core.leases")?
        .is_some();
    if has_leases {
        return Ok(());
    }
    let t = Instant::now();
    client
        .execute(
            concat!(
                "WITH done AS ( \
                 INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, \
                     payload, result, created_at, chain_len, chain_head) \
                 SELECT v.id, 'trawl', 1, 'done', 1, 1, v.at, '{}'::jsonb, '{}'::jsonb, v.at, \
                     3, decode(repeat('00', 32), 'hex') \
                 FROM generate_series(1, $1::bigint) g, LATERAL (",
                v7_ids!("now() - interval '2 days'"),
                ") v \
                 RETURNING id), \
             leased AS ( \
                 INSERT INTO core.leases (id, item_id, kind, fence, worker_id, leased_at) \
                 SELECT gen_random_uuid(), id, 'trawl', 1, 'history', now() FROM done \
                 RETURNING item_id) \
             INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, from_state, \
                 to_state, actor, fence, at, data, prev_hash, hash, kind, priority) \
             SELECT 'item', f.item_id::text, s.seq, s.event, s.from_state, s.to_state, \
                 'worker:trawl', 1, now(), '{}', decode(repeat('00', 32), 'hex'), \
                 decode(repeat('00', 32), 'hex'), 'trawl', 1 \
             FROM leased f CROSS JOIN (VALUES (1, 'enqueued', NULL, 'queued'), \
                 (2, 'leased', 'queued', 'leased'), (3, 'completed', 'leased', 'done')) \
                 AS s(seq, event, from_state, to_state)"
            ),
            &[&i64::try_from(n)?],
        )
        .await
        .context("seed history")?;
    // Finished as the server finishes them: a lease row grows about 2.4 times when it is, and
    // where it lies on its page depends on the size it was inserted with.
    client
        .execute(
            "UPDATE core.leases SET outcome = 'completed', \
             outcome_digest = decode(repeat('00', 32), 'hex'), response = '{}'::jsonb, \
             finished_at = now()",
            &[],
        )
        .await
        .context("finish the seeded leases")?;
    eprintln!(
        "muster-bench: no lease yet; seeded {n} finished items with their leases and ledger rows ({:.1}s)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `VACUUM ANALYZE` of every table of the database that holds a row, then `CHECKPOINT`.
///
/// An empty table is left alone: vacuumed or analyzed while empty, PostgreSQL records it as
/// empty (`reltuples` 0), and Muster's generic plans, made once per pooled connection, then
/// scan it sequentially as it grows until autovacuum analyzes it again. With the empty
/// `core.leases` and `core.ledger` of a fresh database analyzed, `cargo xtask profile` measured
/// the completion's lease lock at 180 µs per item and the live feed's ledger read at 191
/// (7 and 5 with [`seed_history`]).
pub(crate) async fn settle(client: &tokio_postgres::Client) -> Result<()> {
    let tables = client
        .query(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
             AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1",
            &[],
        )
        .await
        .context("list tables")?;
    for row in tables {
        let table: String = row.get(0);
        let holds_a_row = client
            .query_opt(&format!("SELECT 1 FROM {table} LIMIT 1"), &[])
            .await
            .with_context(|| format!("read {table}"))?
            .is_some();
        if holds_a_row {
            let sql = format!("VACUUM ANALYZE {table}");
            client.batch_execute(&sql).await.context(sql)?;
        }
    }
    client
        .batch_execute("CHECKPOINT")
        .await
        .context("CHECKPOINT")
}

/// `pg_total_relation_size` (heap, indexes, TOAST) of every table of the `core` schema.
async fn core_bytes(client: &tokio_postgres::Client) -> Result<BTreeMap<String, i64>> {
    let rows = client
        .query(
            "SELECT c.relname::text, pg_total_relation_size(c.oid) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'core' AND c.relkind = 'r'",
            &[],
        )
        .await
        .context("core table sizes")?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Tops the finished `trawl` items up to `to`: `done` items without leases or ledger rows (a
/// long history beside a short queue; `GET /v1/items` and the lease path must not pay for it).
async fn fill_done(client: &tokio_postgres::Client, to: u64) -> Result<i64> {
    let add = i64::try_from(to)?
        .saturating_sub(count(client, "done").await?)
        .max(0);
    client
        .execute(
            concat!(
                "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, \
             payload, result, created_at, chain_len, chain_head) \
             SELECT v.id, 'trawl', 1, 'done', 1, 1, v.at, '{}'::jsonb, '{}'::jsonb, v.at, 2, \
             decode(repeat('00', 32), 'hex') \
             FROM generate_series(1, $1::bigint) g, LATERAL (",
                v7_ids!("now() - interval '2 days'"),
                ") v"
            ),
            &[&add],
        )
        .await
        .context("bulk insert of done items")?;
    count(client, "done").await
}

/// `muster-bench backlog-fill`.
#[derive(Debug, clap::Args)]
pub(crate) struct FillArgs {
    #[arg(long, env = "MUSTER_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[arg(long)]
    to: u64,
    /// Also top the finished (`done`) `trawl` items up to this many (no leases, no ledger).
    #[arg(long)]
    done: Option<u64>,
    /// On a database that has never granted a lease: this many finished items with their
    /// leases and three ledger rows each (default 20,000), measured in `core_bytes` before the
    /// queue is filled.
    #[arg(long)]
    history: Option<u64>,
    /// Then add this many delayed `trawl` items (`not_before` a day ahead, in line at it, as
    /// `POST /v1/items` with `not_before` places them).
    #[arg(long)]
    delayed: Option<u64>,
    /// The queued items added carry a sampled trace context each (a random trace and span id,
    /// flags 01), as items enqueued under a sampled `traceparent` do.
    #[arg(long)]
    traced: bool,
}

pub(crate) async fn fill(args: &FillArgs) -> Result<BacklogFill> {
    let (database_url, to) = (&args.database_url, args.to);
    let (done, delayed) = (args.done, args.delayed);
    let client = connect(database_url).await?;
    let t = Instant::now();
    seed_history(&client, args.history.unwrap_or(HISTORY)).await?;
    let core_bytes = match args.history {
        Some(_) => Some(core_bytes(&client).await?),
        None => None,
    };
    let before = count(&client, "queued").await?;
    let add = i64::try_from(to)?.saturating_sub(before).max(0);
    client
        .execute(
            concat!(
                "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, \
                 payload, created_at, chain_len, chain_head, trace) \
                 SELECT v.id, 'trawl', 1, 'queued', 0, 0, now(), '{}'::jsonb, now(), 0, \
                 decode(repeat('00', 32), 'hex'), CASE WHEN $2::bool THEN decode(md5(random()::text) \
                 || left(md5(random()::text), 16) || '01', 'hex') END \
                 FROM generate_series(1, $1::bigint) g, LATERAL (",
                v7_ids!("now() - interval '1 hour'"),
                ") v"
            ),
            &[&add, &args.traced],
        )
        .await
        .context("bulk insert")?;
    let done_after = match done {
        Some(to) => Some(fill_done(&client, to).await?),
        None => None,
    };
    if let Some(n) = delayed {
        client
            .execute(
                "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at, \
                 not_before, payload, created_at, chain_len, chain_head) \
                 SELECT gen_random_uuid(), 'trawl', 1, 'queued', 0, 0, now() + interval '1 day', \
                 now() + interval '1 day', '{}'::jsonb, now(), 0, decode(repeat('00', 32), 'hex') \
                 FROM generate_series(1, $1::bigint)",
                &[&i64::try_from(n)?],
            )
            .await
            .context("insert delayed items")?;
    }
    let insert_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    settle(&client).await?;
    let settle_s = t.elapsed().as_secs_f64();
    let after = count(&client, "queued").await?;
    eprintln!(
        "muster-bench: backlog {before} → {after} queued trawl items{} (insert {insert_s:.1}s, VACUUM ANALYZE + CHECKPOINT {settle_s:.1}s)",
        done_after
            .map(|d| format!(", {d} done"))
            .unwrap_or_default()
    );
    Ok(BacklogFill {
        core_bytes,
        delayed_added: delayed.map(|n| n as i64),
        done_after,
        insert_seconds: Some((insert_s * 100.0).round() / 100.0),
        inserted: add,
        queued_after: after,
        queued_before: before,
        scenario: "backlog-fill".to_owned(),
        vacuum_checkpoint_seconds: (settle_s * 100.0).round() / 100.0,
    })
}

/// `requests` sequential `GET /v1/items?{filter}&limit=100` pages, each after the previous
/// page's `next` (from the start again after the last page): their latencies.
pub(crate) async fn item_pages(
    http: &Http,
    operator_token: &str,
    filter: &str,
    requests: usize,
) -> Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(requests);
    let mut next: Option<String> = None;
    for _ in 0..requests {
        let path = match &next {
            Some(after) => format!("/v1/items?{filter}&limit=100&after={after}"),
            None => format!("/v1/items?{filter}&limit=100"),
        };
        let t = Instant::now();
        let (status, body) = http.get(&path, operator_token).await?;
        out.push(t.elapsed());
        if status != 200 {
            bail!("GET {path} answered {status}: {body}");
        }
        next = body["next"].as_str().map(str::to_owned);
    }
    Ok(out)
}

/// Per-request latencies of a cycle.
#[derive(Default)]
struct Lat {
    lease: Vec<Duration>,
    complete: Vec<Duration>,
    enqueue: Vec<Duration>,
}

/// One lease (wait 0), its completion, and one new trawl item (the refill).
async fn cycle(
    http: &Http,
    token: &str,
    operator_token: &str,
    worker_id: &str,
    lat: &mut Lat,
) -> Result<bool> {
    let t = Instant::now();
    let Some(body) = http.lease_now(token, worker_id).await? else {
        return Ok(false);
    };
    lat.lease.push(t.elapsed());
    let id = body["lease_id"].as_str().context("lease_id missing")?;
    let t = Instant::now();
    http.complete(token, id, &json!({"result": {}})).await?;
    lat.complete.push(t.elapsed());
    let t = Instant::now();
    let item = json!({"kind": "trawl", "priority": "normal", "payload": {"bench": "backlog"}});
    http.enqueue(operator_token, &item).await?;
    lat.enqueue.push(t.elapsed());
    Ok(true)
}

/// `muster-bench backlog`.
#[derive(Debug, clap::Args)]
pub(crate) struct MeasureArgs {
    #[command(flatten)]
    server: crate::Operated,
    /// Sequential `GET /v1/queues` requests.
    #[arg(long, default_value_t = 100)]
    requests: usize,
    #[arg(long, default_value_t = 16)]
    workers: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

pub(crate) async fn measure(args: &MeasureArgs) -> Result<BacklogMeasured> {
    let (url, operator_token, worker_token) = (
        &args.server.trawl.url,
        &args.server.operator_token,
        &args.server.trawl.worker_token,
    );
    let (requests, workers, length) = (
        args.requests,
        args.workers,
        Duration::from_secs(args.seconds),
    );
    let http = Arc::new(Http::new(url));

    // GET /v1/queues, sequential, answered from memory.
    let mut queues = Vec::with_capacity(requests);
    let mut depth = Value::Null;
    for _ in 0..requests {
        let t = Instant::now();
        let (status, body) = http.get("/v1/queues", operator_token).await?;
        queues.push(t.elapsed());
        if status != 200 {
            bail!("GET /v1/queues answered {status}: {body}");
        }
        depth = body["depths"].clone();
    }
    let trawl_queued: i64 = depth
        .as_array()
        .map(|ds| {
            ds.iter()
                .filter(|d| d["kind"] == "trawl" && d["state"] == "queued")
                .filter_map(|d| d["count"].as_i64())
                .sum()
        })
        .unwrap_or(0);

    // GET /v1/items, sequential: a page of the minority (the seeded done history) and of the
    // majority (the queued backlog).
    let done_pages = item_pages(&http, operator_token, "state=done&kind=trawl", requests).await?;
    let queued_pages = item_pages(
        &http,
        operator_token,
        "state=queued&kind=trawl&priority=normal",
        requests,
    )
    .await?;

    // Lease→complete (+ one next item) at `workers`.
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (http, token, op) = (
                http.clone(),
                worker_token.to_owned(),
                operator_token.to_owned(),
            );
            tokio::spawn(async move {
                let worker_id = format!("bench-backlog-{w}");
                let (mut n, mut lat, mut tally) = (0u64, Lat::default(), Tally::default());
                while Instant::now() < deadline {
                    let round = cycle(&http, &token, &op, &worker_id, &mut lat).await;
                    n += u64::from(matches!(round, Ok(true)));
                    if !tally.go_on_after(round) {
                        break;
                    }
                }
                (n, tally, lat)
            })
        })
        .collect();
    let (mut cycles, mut tally, mut lat) = (0u64, Tally::default(), Lat::default());
    for t in tasks {
        let (n, worker, l) = t.await?;
        lat.lease.extend(l.lease);
        lat.complete.extend(l.complete);
        lat.enqueue.extend(l.enqueue);
        cycles += n;
        tally.add(worker);
    }
    let elapsed = start.elapsed().as_secs_f64();
    eprintln!(
        "muster-bench: {trawl_queued} queued (per /v1/queues): {cycles} cycles in {elapsed:.1}s at {workers} workers"
    );
    Ok(BacklogMeasured {
        complete: percentiles(lat.complete),
        cycles,
        cycles_per_s: Some(((cycles as f64 / elapsed) * 10.0).round() / 10.0),
        depths: depth,
        enqueue: percentiles(lat.enqueue),
        errors: tally.errors,
        first_error: tally.first_error,
        items_done_page: percentiles(done_pages),
        items_queued_page: percentiles(queued_pages),
        lease: percentiles(lat.lease),
        queues: percentiles(queues),
        ran_dry: tally.ran_dry,
        scenario: "backlog".to_owned(),
        seconds: (elapsed * 1000.0).round() / 1000.0,
        trawl_queued,
        workers: workers as u64,
    })
}
