//! The ledger: appended inside a transaction, never changed.

use async_trait::async_trait;
use muster_app::ports::{LedgerAppend, StoreError};
use muster_ledger::SealedEntry;
use tokio_postgres::types::ToSql;

use super::rows::internal;
use super::tx::{Param, PgTx};

#[async_trait]
impl LedgerAppend for PgTx {
    async fn append(&mut self, entries: &[SealedEntry]) -> Result<Vec<i64>, StoreError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let params = ledger_params(entries);
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref() as _).collect();
        let rows = self.query(LEDGER_APPEND, &refs).await?;
        let seqs: std::collections::HashMap<(&str, &str, i64), i64> = rows
            .iter()
            .map(|r| ((r.get(1), r.get(2), r.get(3)), r.get(0)))
            .collect();
        entries
            .iter()
            .map(|s| {
                let key = (
                    s.entry.subject_type.as_str(),
                    s.entry.subject_id.as_str(),
                    s.subject_seq as i64,
                );
                seqs.get(&key)
                    .copied()
                    .ok_or_else(|| internal("ledger insert returned no sequence for an entry"))
            })
            .collect()
    }
}

/// Inserts the rows of [`ledger_params`] in their order, with each item's kind and priority for
/// the live feed.
pub(super) const LEDGER_INSERT: &str = include_str!("sql/ledger_insert.sql");

/// [`LEDGER_INSERT`], answering each entry's sequence number.
const LEDGER_APPEND: &str = concat!(
    include_str!("sql/ledger_insert.sql"),
    "RETURNING seq, subject_type, subject_id, subject_seq\n"
);

/// The thirteen column arrays of [`LEDGER_INSERT`] and [`LEDGER_APPEND`].
pub(super) fn ledger_params(entries: &[SealedEntry]) -> Vec<Param> {
    let column = |f: &dyn Fn(&SealedEntry) -> Option<String>| -> Param {
        Box::new(entries.iter().map(f).collect::<Vec<Option<String>>>())
    };
    let n = entries.len();
    vec![
        column(&|s| Some(s.entry.subject_type.clone())),
        column(&|s| Some(s.entry.subject_id.clone())),
        Box::new(
            entries
                .iter()
                .map(|s| s.subject_seq as i64)
                .collect::<Vec<_>>(),
        ),
        column(&|s| Some(s.entry.event.clone())),
        column(&|s| s.entry.from_state.clone()),
        column(&|s| s.entry.to_state.clone()),
        column(&|s| Some(s.entry.actor.clone())),
        Box::new(
            entries
                .iter()
                .map(|s| s.entry.fence.map(|f| f as i64))
                .collect::<Vec<_>>(),
        ),
        Box::new(entries.iter().map(|s| s.entry.at).collect::<Vec<_>>()),
        column(&|s| Some(s.entry.data.clone())),
        Box::new(
            entries
                .iter()
                .map(|s| s.prev_hash.to_vec())
                .collect::<Vec<_>>(),
        ),
        Box::new(entries.iter().map(|s| s.hash.to_vec()).collect::<Vec<_>>()),
        Box::new((0..n as i32).collect::<Vec<i32>>()),
    ]
}
