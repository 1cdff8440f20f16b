//! The judge of a finished simulation run, the one the fault suite asks. From the database:
//! that every chain ended the way its plan dictates and that nothing was lost or applied twice
//! (each rule one SQL query returning the rows that break it; the plan of every chain read from
//! its root item's payload), and that every completion Muster acknowledged is in the ledger.
//! From what the run left outside it ([`Evidence`], `evidence.rs`): that no client saw an
//! answer the contract rules out, that the probes of each fault found no hung request and a
//! replica ready again in time. And the figures of a run: counts, plans, recoveries.
//!
//! Chain-signing is checked separately by `muster ledger-verify` (the hash chains).

mod evidence;

use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, NoTls};

use crate::enqueue::{Planned, planned};
use crate::plan::{Plan, SimPayload};
use crate::stats::Summary;
pub use evidence::{Fault, Figures, Probes, Slowest};

/// Samples kept per broken rule.
const SAMPLES: usize = 5;

/// Items with their root index and stage (1 … 10), and each root's plan and last stage.
const BASE: &str = "
WITH kinds(k) AS (
    SELECT ARRAY['trawl','sextant','assay','countersign','waybill','moldloft','shakedown',
                 'chartroom','tidegauge','bellbuoy']::text[]),
it AS (
    SELECT i.id, i.kind, i.state, i.parent_id, i.payload, i.fence, i.lease_id,
           CASE WHEN i.payload->>'root' ~ '^[0-9]{1,18}$' THEN (i.payload->>'root')::bigint END AS root,
           array_position((SELECT k FROM kinds), i.kind) AS idx
    FROM core.items i),
rt AS (
    SELECT root, payload->'plan' AS plan,
           coalesce(array_position((SELECT k FROM kinds), payload->'plan'->>'fail_at'), 10) AS final_idx
    FROM it WHERE parent_id IS NULL),
lg AS (
    SELECT l.seq, l.subject_id, l.subject_seq, l.event, l.from_state, l.to_state, l.fence,
           l.data::jsonb AS d
    FROM core.ledger l WHERE l.subject_type = 'item'),
per AS (
    SELECT i.id, i.kind, i.state, i.root, i.fence,
           count(l.seq) FILTER (WHERE l.event = 'enqueued') AS enq,
           count(l.seq) FILTER (WHERE l.event = 'completed') AS comp,
           count(l.seq) FILTER (WHERE l.to_state = 'failed') AS final_fail,
           count(l.seq) FILTER (WHERE l.event = 'failed' AND l.to_state = 'queued') AS retries,
           count(l.seq) FILTER (WHERE l.event = 'parked') AS parks,
           count(l.seq) FILTER (WHERE l.event = 'replayed') AS replays,
           count(l.seq) FILTER (WHERE l.event NOT IN
               ('enqueued', 'leased', 'completed', 'failed', 'parked', 'replayed', 'late_result')) AS other
    FROM it i LEFT JOIN lg l ON l.subject_id = i.id::text
    GROUP BY i.id, i.kind, i.state, i.root, i.fence)
";

/// The rules: a name and a query (after [`BASE`]) returning one text column per breaking row.
pub const RULES: [(&str, &str); 16] = [
    (
        "every item is a simulation item (root index, known kind, plan)",
        "SELECT id::text FROM it WHERE root IS NULL OR idx IS NULL OR NOT (payload ? 'plan')",
    ),
    (
        "each root index has exactly one root item, of kind trawl",
        "SELECT format('root %s: %s root items (%s)', root, count(*), string_agg(kind, ','))
         FROM it WHERE parent_id IS NULL GROUP BY root
         HAVING count(*) > 1 OR bool_or(kind <> 'trawl')",
    ),
    (
        "each root has at most one item per stage (no duplicate next items)",
        "SELECT format('root %s %s: %s items', root, kind, count(*))
         FROM it GROUP BY root, kind HAVING count(*) > 1",
    ),
    (
        "each chain reaches exactly the last stage its plan dictates",
        "SELECT format('root %s: planned last stage %s, has %s items up to stage %s',
                       r.root, r.final_idx, count(i.id), coalesce(max(i.idx), 0))
         FROM rt r LEFT JOIN it i ON i.root = r.root
         GROUP BY r.root, r.final_idx
         HAVING count(i.id) <> r.final_idx OR coalesce(max(i.idx), 0) <> r.final_idx",
    ),
    (
        "every item ends done, or failed at its plan's fail_at stage",
        "SELECT format('%s root %s %s is %s, planned %s', i.id, i.root, i.kind, i.state, w.want)
         FROM it i JOIN rt r ON r.root = i.root
         CROSS JOIN LATERAL (SELECT CASE WHEN i.idx < r.final_idx OR r.plan->>'fail_at' IS NULL
                                         THEN 'done' ELSE 'failed' END AS want) w
         WHERE i.state <> w.want",
    ),
    (
        "each item's parent is the done previous stage of the same root",
        "SELECT format('%s root %s %s: parent %s', c.id, c.root, c.kind, c.parent_id)
         FROM it c LEFT JOIN it p ON p.id = c.parent_id
         WHERE c.parent_id IS NOT NULL
           AND (p.id IS NULL OR p.root IS DISTINCT FROM c.root OR p.idx <> c.idx - 1 OR p.state <> 'done')",
    ),
    (
        "every stage carries the root's payload unchanged",
        "SELECT format('%s root %s %s: payload %s', c.id, c.root, c.kind, c.payload)
         FROM it c JOIN rt r ON r.root = c.root
         WHERE c.payload IS DISTINCT FROM jsonb_build_object('root', c.root, 'plan', r.plan)",
    ),
    (
        "each item was enqueued once, completed once if done, failed once if failed, nothing else",
        "SELECT format('%s root %s %s (%s): enqueued %s, completed %s, final failures %s, other events %s',
                       id, root, kind, state, enq, comp, final_fail, other)
         FROM per
         WHERE enq <> 1 OR comp <> (state = 'done')::int OR final_fail <> (state = 'failed')::int OR other <> 0",
    ),
    (
        "retryable failures only at the plan's flaky_at stage, on its planned lease",
        "SELECT format('%s root %s %s: retryable failure at fence %s (plan %s)', i.id, i.root, i.kind, l.fence, r.plan)
         FROM lg l JOIN it i ON l.subject_id = i.id::text JOIN rt r ON r.root = i.root
         WHERE l.event = 'failed' AND l.to_state = 'queued'
           AND (i.kind IS DISTINCT FROM r.plan->>'flaky_at'
                OR l.fence IS DISTINCT FROM 1 + (r.plan->>'crash_at' IS NOT DISTINCT FROM i.kind)::int
                                              + (r.plan->>'subtool_at' IS NOT DISTINCT FROM i.kind)::int
                OR l.d->>'retryable' IS DISTINCT FROM 'true')",
    ),
    (
        "final failures only at the plan's fail_at stage, reported non-retryable",
        "SELECT format('%s root %s %s: %s to failed (plan %s)', i.id, i.root, i.kind, l.event, r.plan)
         FROM lg l JOIN it i ON l.subject_id = i.id::text JOIN rt r ON r.root = i.root
         WHERE l.to_state = 'failed'
           AND NOT (l.event = 'failed' AND l.d->>'retryable' = 'false'
                    AND i.kind IS NOT DISTINCT FROM r.plan->>'fail_at')",
    ),
    (
        "parks only at the plan's subtool_at stage, on its planned lease, each replayed",
        "SELECT format('%s root %s %s: parked at fence %s (plan %s)', i.id, i.root, i.kind, l.fence, r.plan)
         FROM lg l JOIN it i ON l.subject_id = i.id::text JOIN rt r ON r.root = i.root
         WHERE l.event = 'parked'
           AND (i.kind IS DISTINCT FROM r.plan->>'subtool_at'
                OR l.fence IS DISTINCT FROM 1 + (r.plan->>'crash_at' IS NOT DISTINCT FROM i.kind)::int)
         UNION ALL
         SELECT format('%s root %s %s: %s parks, %s replays', id, root, kind, parks, replays)
         FROM per WHERE parks <> replays",
    ),
    (
        "the crash stage's first lease never finished",
        "SELECT format('%s root %s %s: first lease finished as %s', i.id, i.root, i.kind, le.outcome)
         FROM core.leases le JOIN it i ON i.id = le.item_id JOIN rt r ON r.root = i.root
         WHERE le.fence = 1 AND i.kind IS NOT DISTINCT FROM r.plan->>'crash_at' AND le.outcome IS NOT NULL",
    ),
    (
        "each ledger row starts in the state the previous one ended, nothing after the end",
        "SELECT format('%s #%s %s: from %s after %s', subject_id, subject_seq, event, from_state, prev)
         FROM (SELECT subject_id, subject_seq, event, from_state, to_state,
                      lag(to_state) OVER (PARTITION BY subject_id ORDER BY subject_seq) AS prev
               FROM lg) x
         WHERE (subject_seq = 1 AND (event <> 'enqueued' OR from_state IS NOT NULL OR to_state <> 'queued'))
            OR (subject_seq > 1 AND from_state IS DISTINCT FROM prev)
            OR (subject_seq > 1 AND prev IN ('done', 'failed') AND event <> 'late_result')
         UNION ALL
         SELECT format('%s is %s but its ledger ends in %s', i.id, i.state, last.to_state)
         FROM it i CROSS JOIN LATERAL (
             SELECT to_state FROM core.ledger l
             WHERE l.subject_type = 'item' AND l.subject_id = i.id::text
             ORDER BY l.subject_seq DESC LIMIT 1) last
         WHERE last.to_state IS DISTINCT FROM i.state",
    ),
    (
        "a completion names exactly the next stage's item as its next",
        "SELECT format('%s root %s %s: next %s, child %s', i.id, i.root, i.kind, l.d->'next', c.id)
         FROM it i JOIN lg l ON l.subject_id = i.id::text AND l.event = 'completed'
         LEFT JOIN it c ON c.parent_id = i.id
         WHERE (l.d->'next') IS DISTINCT FROM
               CASE WHEN c.id IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(c.id::text) END",
    ),
    (
        "leases agree with the ledger: one per fence, one completed per done item",
        "SELECT format('%s root %s %s: fence %s, leases %s (max fence %s), completed %s/%s, failed %s/%s, parked %s/%s',
                       p.id, p.root, p.kind, p.fence, coalesce(le.n, 0), le.mf, coalesce(le.c, 0), p.comp,
                       coalesce(le.f, 0), p.retries + p.final_fail, coalesce(le.pk, 0), p.parks)
         FROM per p LEFT JOIN (
             SELECT item_id, count(*) AS n, max(fence) AS mf,
                    count(*) FILTER (WHERE outcome = 'completed') AS c,
                    count(*) FILTER (WHERE outcome = 'failed') AS f,
                    count(*) FILTER (WHERE outcome = 'parked') AS pk
             FROM core.leases GROUP BY item_id) le ON le.item_id = p.id
         WHERE coalesce(le.n, 0) <> p.fence OR coalesce(le.mf, 0) <> p.fence
            OR coalesce(le.c, 0) <> p.comp OR coalesce(le.f, 0) <> p.retries + p.final_fail
            OR coalesce(le.pk, 0) <> p.parks",
    ),
    (
        "every item finished: none left queued, leased (by a dead lease) or parked",
        "SELECT format('%s root %s %s is %s (lease %s)', id, root, kind, state, lease_id)
         FROM it WHERE state NOT IN ('done', 'failed') OR lease_id IS NOT NULL",
    ),
];

/// A broken rule: how many rows (answers, faults) break it, and a few of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    pub rule: String,
    pub count: u64,
    pub samples: Vec<String>,
}

/// Counts read from the database.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DbStats {
    pub items: i64,
    pub roots: i64,
    pub done: i64,
    pub failed: i64,
    pub unfinished: i64,
    /// Chains that reached bellbuoy `done`.
    pub roots_done: i64,
    pub leases: i64,
    /// Leases that never finished: crashed, killed, or superseded after expiring.
    pub leases_unfinished: i64,
    pub late_results: i64,
    pub retryable_failures: i64,
    pub parks: i64,
    pub replays: i64,
    pub ledger_rows: i64,
}

/// How a fault was recovered from, read from the ledger and the leases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recovery {
    pub name: String,
    /// From the repair to the first completion committed after it.
    pub first_completion_ms: Option<f64>,
    /// The longest time without any completion, from the fault's start to that first
    /// completion after the repair: how long the pipeline stood still.
    pub longest_stall_ms: Option<f64>,
    /// Leases of the killed process that never finished, and how long after the kill the last
    /// of their items was leased again.
    pub abandoned_leases: Option<i64>,
    pub slowest_release_ms: Option<f64>,
}

/// The whole answer of `muster-sim check`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub ok: bool,
    pub stats: DbStats,
    /// What the roots' plans (read back from their payloads) add up to.
    pub planned: Planned,
    pub violations: Vec<Violation>,
    pub recoveries: Vec<Recovery>,
    /// Acknowledged completions compared with the ledger (`--acks`).
    pub acked_completions: u64,
    /// What the clients saw, summed over their reports (`--reports`).
    pub clients: Option<Summary>,
    pub figures: Figures,
}

/// What a run left outside the database, for the rules and figures that need it.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// The faults injected, in order (`--faults`).
    pub faults: Vec<Fault>,
    /// Every completion Muster acknowledged (`--acks`).
    pub acked: Vec<Acked>,
    /// Every client's report, summed (`--reports`); `None`: the clients are not judged.
    pub clients: Option<Summary>,
}

/// Connects to `url` (no TLS: a local or cluster-private database).
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!("database connection ended: {e}");
        }
    });
    Ok(client)
}

/// Runs every rule, the counts, the recoveries and the figures. `roots`: how many roots were
/// enqueued (indexes `0 .. roots`).
pub async fn check(db: &Client, roots: u64, evidence: &Evidence) -> anyhow::Result<Report> {
    let Evidence {
        faults,
        acked,
        clients,
    } = evidence;
    let mut violations = Vec::new();
    if let Some(v) = lost_acks(db, acked).await? {
        violations.push(v);
    }
    for (rule, sql) in RULES {
        let rows = db
            .query(&format!("{BASE} {sql}"), &[])
            .await
            .map_err(|e| anyhow::anyhow!("rule `{rule}`: {e}"))?;
        if !rows.is_empty() {
            violations.push(Violation {
                rule: rule.to_owned(),
                count: rows.len() as u64,
                samples: rows
                    .iter()
                    .take(SAMPLES)
                    .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
                    .collect(),
            });
        }
    }
    // Lost roots: every enqueued index must be there.
    let row = db
        .query_one(
            &format!(
                "{BASE} SELECT count(DISTINCT root), coalesce(min(root), -1), coalesce(max(root), -1)
                 FROM it WHERE parent_id IS NULL"
            ),
            &[],
        )
        .await?;
    let (distinct, min, max): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let want_max = roots as i64 - 1;
    if distinct != roots as i64 || (roots > 0 && (min != 0 || max != want_max)) {
        violations.push(Violation {
            rule: format!("every enqueued root 0..{roots} is in the database"),
            count: (roots as i64 - distinct).unsigned_abs().max(1),
            samples: vec![format!("{distinct} distinct roots, indexes {min}..={max}")],
        });
    }
    let stats = stats(db).await?;
    let plans = root_plans(db).await?;
    let mut recoveries = Vec::new();
    for fault in faults {
        recoveries.push(recovery(db, fault).await?);
    }
    violations.extend(evidence::probe_violations(faults));
    if let Some(clients) = clients {
        violations.extend(evidence::client_violations(clients, faults));
    }
    Ok(Report {
        ok: violations.is_empty(),
        stats,
        planned: planned(&plans),
        violations,
        figures: evidence::figures(&recoveries, clients.as_ref()),
        recoveries,
        acked_completions: acked.len() as u64,
        clients: clients.clone(),
    })
}

/// A completion Muster acknowledged: the item and the ledger entry its answer named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub item_id: String,
    pub ledger_seq: i64,
}

/// The `ITEM_ID LEDGER_SEQ` lines of `muster-sim run --acks`; a line cut short by a killed
/// process (the last one, at most) is skipped.
pub fn parse_acks(text: &str) -> Vec<Acked> {
    text.lines()
        .filter_map(|line| {
            let (item, seq) = line.split_once(' ')?;
            Some(Acked {
                item_id: item.to_owned(),
                ledger_seq: seq.parse().ok()?,
            })
        })
        .collect()
}

/// The rule no run may break whatever its faults: every completion Muster acknowledged is in
/// the ledger, as the `completed` entry of that item at the sequence number the answer named.
/// A commit acknowledged and then lost (a failover to a standby that never had it) breaks it
/// even when the item was completed again later.
async fn lost_acks(db: &Client, acked: &[Acked]) -> anyhow::Result<Option<Violation>> {
    const RULE: &str =
        "every acknowledged completion is in the ledger at the sequence number its answer named";
    let items: Vec<&str> = acked.iter().map(|a| a.item_id.as_str()).collect();
    let seqs: Vec<i64> = acked.iter().map(|a| a.ledger_seq).collect();
    let rows = db
        .query(
            "SELECT format('item %s, ledger seq %s', a.id, a.seq)
             FROM unnest($1::text[], $2::bigint[]) AS a(id, seq)
             WHERE NOT EXISTS (SELECT 1 FROM core.ledger l
                               WHERE l.seq = a.seq AND l.subject_type = 'item'
                                 AND l.subject_id = a.id AND l.event = 'completed')",
            &[&items, &seqs],
        )
        .await
        .map_err(|e| anyhow::anyhow!("rule `{RULE}`: {e}"))?;
    Ok((!rows.is_empty()).then(|| Violation {
        rule: RULE.to_owned(),
        count: rows.len() as u64,
        samples: rows.iter().take(SAMPLES).map(|r| r.get(0)).collect(),
    }))
}

async fn root_plans(db: &Client) -> anyhow::Result<Vec<(u64, Plan)>> {
    let rows = db
        .query(
            "SELECT payload FROM core.items WHERE parent_id IS NULL",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| serde_json::from_value::<SimPayload>(r.get(0)).ok())
        .map(|p| (p.root, p.plan))
        .collect())
}

/// The counts of [`DbStats`].
pub async fn stats(db: &Client) -> anyhow::Result<DbStats> {
    let items = db
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE parent_id IS NULL),
                    count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'failed'),
                    count(*) FILTER (WHERE state NOT IN ('done', 'failed')),
                    count(*) FILTER (WHERE kind = 'bellbuoy' AND state = 'done')
             FROM core.items",
            &[],
        )
        .await?;
    let leases = db
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE outcome IS NULL OR outcome = 'late') FROM core.leases",
            &[],
        )
        .await?;
    let ledger = db
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE event = 'late_result'),
                    count(*) FILTER (WHERE event = 'failed' AND to_state = 'queued'),
                    count(*) FILTER (WHERE event = 'parked'), count(*) FILTER (WHERE event = 'replayed')
             FROM core.ledger WHERE subject_type = 'item'",
            &[],
        )
        .await?;
    Ok(DbStats {
        items: items.get(0),
        roots: items.get(1),
        done: items.get(2),
        failed: items.get(3),
        unfinished: items.get(4),
        roots_done: items.get(5),
        leases: leases.get(0),
        leases_unfinished: leases.get(1),
        ledger_rows: ledger.get(0),
        late_results: ledger.get(1),
        retryable_failures: ledger.get(2),
        parks: ledger.get(3),
        replays: ledger.get(4),
    })
}

async fn recovery(db: &Client, fault: &Fault) -> anyhow::Result<Recovery> {
    let first = db
        .query_one(
            "SELECT extract(epoch FROM min(at))::float8 * 1000 - $1::float8
             FROM core.ledger WHERE event = 'completed' AND at > to_timestamp($1::float8 / 1000)",
            &[&fault.end_ms],
        )
        .await?;
    let first_ms: Option<f64> = first.get(0);
    let stall = match first_ms {
        Some(after) => db
            .query_one(
                "SELECT max(gap) FROM (
                     SELECT extract(epoch FROM t - lag(t) OVER (ORDER BY t))::float8 * 1000 AS gap
                     FROM (SELECT to_timestamp($1::float8 / 1000) AS t
                           UNION ALL
                           SELECT at FROM core.ledger
                           WHERE event = 'completed' AND at > to_timestamp($1::float8 / 1000)
                             AND at <= to_timestamp($2::float8 / 1000)) points) gaps",
                &[&fault.start_ms, &(fault.end_ms + after + 0.001)],
            )
            .await?
            .get::<_, Option<f64>>(0),
        None => None,
    };
    let (abandoned, slowest) = match &fault.worker_prefix {
        Some(prefix) => {
            let row = db
                .query_one(
                    "SELECT count(*), extract(epoch FROM max(nx.leased_at))::float8 * 1000 - $2::float8
                     FROM core.leases le
                     LEFT JOIN core.leases nx ON nx.item_id = le.item_id AND nx.fence = le.fence + 1
                     WHERE starts_with(le.worker_id, $1) AND le.outcome IS NULL
                       AND le.leased_at <= to_timestamp($2::float8 / 1000)
                       AND (nx.id IS NULL OR nx.leased_at > to_timestamp($2::float8 / 1000))",
                    &[prefix, &fault.start_ms],
                )
                .await?;
            (Some(row.get::<_, i64>(0)), row.get::<_, Option<f64>>(1))
        }
        None => (None, None),
    };
    Ok(Recovery {
        name: fault.name.clone(),
        first_completion_ms: first_ms,
        longest_stall_ms: stall,
        abandoned_leases: abandoned,
        slowest_release_ms: slowest,
    })
}
