//! The statements that find items: a page of `GET /v1/items` and a kind's failed items for a
//! bulk retry. Both read `items_listing` (state, kind, priority, id) one group at a time in id
//! order and merge the groups (a Merge Append under the LIMIT), so a page reads about as many
//! index entries as it returns, plus one per group, whatever else the table holds.

use muster_app::ports::StoreError;
use muster_app::views::ItemSummary;
use muster_domain::listing::ItemFilter;
use muster_domain::{ItemState, Kind, Priority};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
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

/// One value a page statement takes beside `after` and the limit.
pub(super) enum Bound {
    Text(String),
    Rank(i16),
}

impl Bound {
    pub(super) fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Bound::Text(t) => t,
            Bound::Rank(r) => r,
        }
    }
}

/// The statement of one page (`$1` after, `$2` rows) and its further parameters. The text
/// depends only on which filters are given, so at most eight statements are prepared per
/// connection; the values the filter does not fix are spelled out from the closed sets of
/// states, kinds and priorities.
pub(super) fn page_statement(filter: &ItemFilter) -> (String, Vec<Bound>) {
    let mut bounds = Vec::new();
    let page = if filter.is_unfiltered() {
        "SELECT i.id FROM core.items i WHERE i.id > $1 ORDER BY i.id LIMIT $2".to_owned()
    } else {
        let mut param = |b: Bound| {
            bounds.push(b);
            format!("${}", bounds.len() + 2)
        };
        let state = filter
            .state
            .map(|s| param(Bound::Text(s.as_str().to_owned())));
        let kind = filter
            .kind
            .map(|k| param(Bound::Text(k.as_str().to_owned())));
        let priority = filter.priority.map(|p| param(Bound::Rank(p.rank())));
        let branches: Vec<String> = filter
            .groups()
            .into_iter()
            .map(|(s, k, p)| {
                branch(
                    &state.clone().unwrap_or_else(|| state_literal(s)),
                    &kind.clone().unwrap_or_else(|| kind_literal(k)),
                    &priority.clone().unwrap_or_else(|| p.rank().to_string()),
                    Some("$1"),
                )
            })
            .collect();
        format!(
            "SELECT u.id FROM ({}) u ORDER BY u.id LIMIT $2",
            branches.join(" UNION ALL ")
        )
    };
    (
        format!(
            "SELECT {SUMMARY_COLS} FROM ({page}) page JOIN core.items i ON i.id = page.id
             ORDER BY i.id"
        ),
        bounds,
    )
}

/// Locks up to `$2` failed items of kind `$1`, oldest first by id, skipping those another
/// transaction holds.
pub(super) fn lock_failed_statement() -> String {
    let branches: Vec<String> = Priority::ALL
        .iter()
        .map(|p| branch("'failed'", "$1", &p.rank().to_string(), None))
        .collect();
    format!(
        "SELECT {ITEM_COLS} FROM core.items i
         WHERE i.id IN (SELECT u.id FROM ({}) u ORDER BY u.id LIMIT $2) AND i.state = 'failed'
         ORDER BY i.id
         FOR UPDATE OF i SKIP LOCKED",
        branches.join(" UNION ALL ")
    )
}

/// One group in id order; `after` bounds it where the statement has a start.
fn branch(state: &str, kind: &str, priority: &str, after: Option<&str>) -> String {
    let after = after.map_or(String::new(), |a| format!(" AND g.id > {a}"));
    format!(
        "SELECT g.id FROM core.items g
         WHERE g.state = {state} AND g.kind = {kind} AND g.priority = {priority}{after}"
    )
}

// States and kinds are closed sets of lower-case words: safe to write into the statement.
fn state_literal(s: ItemState) -> String {
    format!("'{}'", s.as_str())
}

fn kind_literal(k: Kind) -> String {
    format!("'{}'", k.as_str())
}

/// Where a page starts: after the given id, or from the beginning.
pub(super) fn after(filter: &ItemFilter) -> Uuid {
    filter.after.map_or(Uuid::nil(), |a| a.0)
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
