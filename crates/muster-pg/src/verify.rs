//! Ledger verification: every subject's chain recomputed from the rows, and compared with the
//! chain head its subject row records.

use deadpool_postgres::Pool;
use futures_util::TryStreamExt;
use muster_ledger::{ChainHead, Entry, SealedEntry, verify_against_head};
use std::collections::HashMap;

use crate::PgError;

/// What a verification covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LedgerReport {
    pub subjects: u64,
    pub entries: u64,
    /// Subjects that are items with a row in `core.items`.
    pub item_subjects: u64,
}

/// Verifies every chain in the ledger; the first broken chain is the error.
pub async fn verify_ledger(pool: &Pool) -> Result<LedgerReport, PgError> {
    let client = pool.get().await?;
    let heads: HashMap<String, ChainHead> = client
        .query(
            "SELECT id::text, chain_len, chain_head FROM core.items",
            &[],
        )
        .await?
        .iter()
        .map(|r| {
            let hash: Vec<u8> = r.get(2);
            let head = ChainHead {
                len: r.get::<_, i64>(1) as u64,
                hash: hash.try_into().unwrap_or([0xff; 32]),
            };
            (r.get::<_, String>(0), head)
        })
        .collect();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 0] = [];
    let rows = client
        .query_raw(
            "SELECT subject_type, subject_id, subject_seq, event, from_state, to_state, actor, fence,
                    at, data, prev_hash, hash
             FROM core.ledger ORDER BY subject_type, subject_id, subject_seq",
            params,
        )
        .await?;
    futures_util::pin_mut!(rows);
    let mut report = LedgerReport::default();
    let mut current: Vec<SealedEntry> = Vec::new();
    while let Some(r) = rows.try_next().await? {
        let prev: Vec<u8> = r.get(10);
        let hash: Vec<u8> = r.get(11);
        let sealed = SealedEntry {
            entry: Entry {
                subject_type: r.get(0),
                subject_id: r.get(1),
                event: r.get(3),
                from_state: r.get(4),
                to_state: r.get(5),
                actor: r.get(6),
                fence: r.get::<_, Option<i64>>(7).map(|f| f as u64),
                at: r.get(8),
                data: r.get(9),
            },
            subject_seq: r.get::<_, i64>(2) as u64,
            prev_hash: prev.try_into().unwrap_or([0xff; 32]),
            hash: hash.try_into().unwrap_or([0xff; 32]),
        };
        let new_subject = current.first().is_some_and(|first| {
            first.entry.subject_type != sealed.entry.subject_type
                || first.entry.subject_id != sealed.entry.subject_id
        });
        if new_subject {
            finish_subject(&current, &heads, &mut report)?;
            current.clear();
        }
        current.push(sealed);
    }
    if !current.is_empty() {
        finish_subject(&current, &heads, &mut report)?;
    }
    // Every item has at least its `enqueued` entry: an item whose chain is missing entirely
    // is as broken as one whose chain was cut short.
    if report.item_subjects != heads.len() as u64 {
        let seen = report.item_subjects;
        return Err(PgError::Db(format!(
            "{} items have no ledger chain (items: {}, chains: {seen})",
            heads.len() as u64 - seen.min(heads.len() as u64),
            heads.len()
        )));
    }
    Ok(report)
}

fn finish_subject(
    chain: &[SealedEntry],
    heads: &HashMap<String, ChainHead>,
    report: &mut LedgerReport,
) -> Result<(), PgError> {
    let first = &chain[0].entry;
    let (t, id) = (first.subject_type.as_str(), first.subject_id.as_str());
    match (t, heads.get(id)) {
        ("item", Some(head)) => {
            verify_against_head(t, id, chain, *head)?;
            report.item_subjects += 1;
        }
        _ => {
            muster_ledger::verify_chain(t, id, chain)?;
        }
    }
    report.subjects += 1;
    report.entries += chain.len() as u64;
    Ok(())
}
