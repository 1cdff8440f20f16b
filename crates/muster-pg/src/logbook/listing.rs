//! The statements that find items: a page of `GET /v1/items` and a kind's failed items for a
//! bulk retry. Both read `items_listing_unleased` (state, kind, priority, id) one group at a
//! time in id order, at most a page of each, and merge the groups, so a page reads about as many
//! index entries as it returns, plus one probe per group, whatever else the table holds. Leased
//! items are not in that index (a lease writes no listing entry): a leased group is the kind's
//! items under a lease, read whole from `items_lease_expiry` and sorted, few as they are.
//!
//! Every value is written into the statement (closed sets of words, a UUID and a number: nothing
//! a caller can shape) and the statement is planned for those values each time. A prepared,
//! generic plan does not know how large a group is: it walked the primary key in id order for
//! an empty group, through every later row (seconds with a million items). The statistics
//! `items_listing_groups` (V11) give the planner the size of each (state, kind, priority).

use muster_app::ports::StoreError;
use muster_app::views::ItemSummary;
use muster_domain::listing::ItemFilter;
use muster_domain::{ItemState, Kind, Priority};
use tokio_postgres::Row;
use uuid::Uuid;

use super::rows::{ITEM_COLS, internal};

/// The columns of a listed item: its row, when it last changed (its newest ledger row) and the
/// error of its newest failure.
const SUMMARY_COLS: &str = "i.id, i.kind, i.priority, i.state, i.attempt, i.created_at,
     coalesce((SELECT l.at FROM core.ledger l
               WHERE l.subject_type = 'item' AND l.subject_id = i.id::text
               ORDER BY l.subject_seq DESC LIMIT 1), i.created_at),
     (SELECT l.data::jsonb -> 'error' FROM core.ledger l
      WHERE l.subject_type = 'item' AND l.subject_id = i.id::text AND l.event = 'failed'
      ORDER BY l.subject_seq DESC LIMIT 1)";

/// The statement of one page of at most `rows` items.
pub(super) fn page_statement(filter: &ItemFilter, rows: u32) -> String {
    let page = page_ids(filter, rows);
    format!("SELECT {SUMMARY_COLS} FROM core.items i WHERE i.id = ANY(ARRAY({page})) ORDER BY i.id")
}

/// The ids of one page, in id order.
fn page_ids(filter: &ItemFilter, rows: u32) -> String {
    let after = filter.after.map_or(Uuid::nil(), |a| a.0);
    if filter.is_unfiltered() {
        format!("SELECT p.id FROM core.items p WHERE p.id > '{after}' ORDER BY p.id LIMIT {rows}")
    } else {
        merged(
            filter
                .groups()
                .into_iter()
                .map(|(s, k, p)| group(s.as_str(), k, p, Some(after), rows)),
            rows,
        )
    }
}

/// Locks up to `max` items of `kind` in `state`, oldest first by id, skipping those another
/// transaction holds.
pub(super) fn lock_oldest_statement(kind: Kind, state: ItemState, max: u32) -> String {
    let state = state.as_str();
    let page = merged(
        Priority::ALL
            .iter()
            .map(|&p| group(state, kind, p, None, max)),
        max,
    );
    format!(
        "SELECT {ITEM_COLS} FROM core.items i
         WHERE i.id = ANY(ARRAY({page})) AND i.state = '{state}'
         ORDER BY i.id
         FOR UPDATE OF i SKIP LOCKED"
    )
}

/// The first `rows` ids of the groups, in id order.
fn merged(groups: impl Iterator<Item = String>, rows: u32) -> String {
    let groups: Vec<String> = groups.collect();
    format!(
        "SELECT u.id FROM ({}) u ORDER BY u.id LIMIT {rows}",
        groups.join(" UNION ALL ")
    )
}

/// One group in id order, after `after` where the statement has a start, at most `rows` of
/// it. The LIMIT in each group is what makes the plan a Merge Append of short index scans:
/// without it PostgreSQL reads every row of the groups and sorts them. States, kinds and
/// priorities are closed sets of lower-case words and numbers, safe to write into the text.
///
/// A leased group is read whole behind `OFFSET 0`, which keeps the planner from walking the
/// primary key in id order instead (through every item, when few are leased).
fn group(state: &str, kind: Kind, priority: Priority, after: Option<Uuid>, rows: u32) -> String {
    let after = after.map_or(String::new(), |a| format!(" AND g.id > '{a}'"));
    let (kind, priority) = (kind.as_str(), priority.rank());
    let rows_of_group = format!(
        "SELECT g.id FROM core.items g
          WHERE g.state = '{state}' AND g.kind = '{kind}' AND g.priority = {priority}{after}"
    );
    if state == ItemState::Leased.as_str() {
        format!("(SELECT s.id FROM ({rows_of_group} OFFSET 0) s ORDER BY s.id LIMIT {rows})")
    } else {
        format!("({rows_of_group} ORDER BY g.id LIMIT {rows})")
    }
}

pub(super) fn summary_from_row(r: &Row) -> Result<ItemSummary, StoreError> {
    let id: Uuid = r.get(0);
    let kind: String = r.get(1);
    let state: String = r.get(3);
    Ok(ItemSummary {
        id: id.to_string(),
        kind: kind.parse().map_err(|e| internal(format!("{e}")))?,
        priority: Priority::from_rank(r.get(2)).ok_or_else(|| internal("bad priority"))?,
        state: state.parse().map_err(internal)?,
        attempt: r.get::<_, i32>(4) as u32,
        created_at: r.get(5),
        updated_at: r.get(6),
        last_error: r.get(7),
    })
}

#[cfg(test)]
mod tests {
    use muster_domain::listing::ItemFilter;
    use muster_domain::{ItemState, Kind};

    /// Buffers (shared hits and reads) the plan of `sql` touched when it ran.
    async fn buffers(client: &tokio_postgres::Client, sql: &str) -> i64 {
        let plan: serde_json::Value = client
            .query_one(
                &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
                &[],
            )
            .await
            .expect("explain")
            .get(0);
        let top = &plan[0]["Plan"];
        top["Shared Hit Blocks"].as_i64().unwrap_or(0)
            + top["Shared Read Blocks"].as_i64().unwrap_or(0)
    }

    /// 50,000 `done` trawl items of normal priority (time-ordered ids), analyzed.
    async fn many_done() -> muster_testkit::TestDb {
        let db = muster_testkit::fresh_db().await;
        db.execute(
            "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
                     payload, created_at, chain_len, chain_head)
                 SELECT (lpad(to_hex(1700000000000 + g), 12, '0') || '70008000' || lpad(to_hex(g), 12, '0'))::uuid,
                     'trawl', 1, 'done', 1, 1, now(), '{}'::jsonb, now(), 0,
                     decode(repeat('00', 32), 'hex')
                 FROM generate_series(1, 50000) g;
                 ANALYZE core.items;",
        )
        .await;
        db
    }

    #[tokio::test]
    async fn a_page_of_leased_items_reads_the_items_under_a_lease_not_the_table() {
        let db = many_done().await;
        let client = db.client().await;
        client
            .batch_execute(
                "INSERT INTO core.items (id, kind, priority, state, attempt, fence, enqueued_at,
                     payload, created_at, chain_len, chain_head, lease_id, lease_worker,
                     lease_expires_at)
                 SELECT ('00000000-0000-7000-8000-00000000000' || g)::uuid, 'trawl', 1, 'leased',
                     1, 1, now(), '{}'::jsonb, now(), 0, decode(repeat('00', 32), 'hex'),
                     gen_random_uuid(), 'w', now() + interval '1 minute'
                 FROM generate_series(1, 3) g;
                 ANALYZE core.items;",
            )
            .await
            .expect("leased items");
        let leased = ItemFilter::new(Some(ItemState::Leased), Some(Kind::Trawl), None, None, None)
            .expect("a filter");
        let sql = super::page_ids(&leased, 2);
        let ids: Vec<String> = client
            .query(&format!("SELECT id::text FROM ({sql}) p"), &[])
            .await
            .expect("the page")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            ids,
            [
                "00000000-0000-7000-8000-000000000001",
                "00000000-0000-7000-8000-000000000002"
            ]
        );
        // The three leased items' index entries and rows, not the 50,000 done ones.
        let touched = buffers(&client, &sql).await;
        assert!(
            touched <= 20,
            "{touched} buffers for a page of leased items"
        );
    }

    #[tokio::test]
    async fn retentions_oldest_finished_probe_touches_few_buffers_per_group() {
        let db = many_done().await;
        let client = db.client().await;
        let list = |items: Vec<String>| format!("ARRAY[{}]", items.join(", "));
        let states = list(
            ["done", "failed", "cancelled"]
                .map(|s| format!("'{s}'"))
                .to_vec(),
        );
        let kinds = list(
            Kind::ALL
                .iter()
                .map(|k| format!("'{}'", k.as_str()))
                .collect(),
        );
        let ranks = list(
            muster_domain::Priority::ALL
                .iter()
                .map(|p| p.rank().to_string())
                .collect(),
        );
        let sql = include_str!("sql/oldest_finished.sql")
            .replace("$1", &states)
            .replace("$2", &kinds)
            .replace("$3", &ranks);
        // About three buffers for each of the 90 (state, kind, priority) groups' one descent of
        // the listing index; walking the primary key for each empty group: 42,395 in all.
        let touched = buffers(&client, &sql).await;
        assert!(
            touched <= 400,
            "{touched} buffers for the oldest finished item"
        );
    }

    #[tokio::test]
    async fn a_page_of_a_large_group_or_of_an_empty_one_touches_few_buffers() {
        let db = many_done().await;
        let client = db.client().await;
        let done = ItemFilter::new(Some(ItemState::Done), Some(Kind::Trawl), None, None, None)
            .expect("a filter");
        let failed =
            ItemFilter::new(Some(ItemState::Failed), None, None, None, None).expect("a filter");
        // The ids of a page: a few leaf pages of the large group, about three buffers per
        // empty group (30 of them). Reading the large group whole is hundreds; walking the
        // primary key for an empty group, thousands.
        for (name, filter, most) in [("done trawl", done, 20), ("failed", failed, 120)] {
            let touched = buffers(&client, &super::page_ids(&filter, 101)).await;
            assert!(
                touched <= most,
                "{name}: {touched} buffers for the ids of one page"
            );
        }
    }
}
