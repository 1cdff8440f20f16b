//! Ledger verification: every subject's chain recomputed from the rows and compared with the
//! chain head its subject row records (items, edits and paused kinds), every edit's stored text with the
//! BLAKE3 its `submitted` entry records, and, for `--head` / `--against`, one digest over
//! every chain head as of a ledger sequence (`muster_ledger::heads_digest`).

use deadpool_postgres::Pool;
use futures_util::TryStreamExt;
use muster_ledger::{ChainError, ChainHead, Entry, Hash, SealedEntry, verify_against_head};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::PgError;

/// What a verification covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LedgerReport {
    pub subjects: u64,
    pub entries: u64,
    /// Subjects that are items with a row in `core.items`.
    pub item_subjects: u64,
    /// Subjects that are edits with a row in `core.edits`.
    pub edit_subjects: u64,
    /// Subjects that are kinds with a row in `core.kind_pauses` (kinds ever paused).
    pub kind_subjects: u64,
    /// Edit texts checked against their `submitted` entry (edits submitted before the entry
    /// recorded the text's BLAKE3 have none to check).
    pub bodies: u64,
}

/// `N:DIGEST`: the ledger's sequence N and the digest over every chain head as of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerHead {
    pub seq: u64,
    pub digest: Hash,
}

impl std::fmt::Display for LedgerHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}",
            self.seq,
            blake3::Hash::from(self.digest).to_hex()
        )
    }
}

impl std::str::FromStr for LedgerHead {
    type Err = PgError;

    fn from_str(s: &str) -> Result<Self, PgError> {
        let bad = || {
            PgError::Ledger(format!(
                "{s:?} is not N:DIGEST (as `ledger-verify --head` prints it)"
            ))
        };
        let (n, hex) = s.split_once(':').ok_or_else(bad)?;
        Ok(LedgerHead {
            seq: n.parse().map_err(|_| bad())?,
            digest: *blake3::Hash::from_hex(hex).map_err(|_| bad())?.as_bytes(),
        })
    }
}

/// A subject row's recorded head, and for an edit the BLAKE3 of its stored text.
struct Recorded {
    head: ChainHead,
    body: Option<String>,
}

async fn recorded(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<HashMap<String, Recorded>, PgError> {
    Ok(client
        .query(sql, &[])
        .await?
        .iter()
        .map(|r| {
            let hash: Vec<u8> = r.get(2);
            let body: Option<String> = r.get(3);
            let head = ChainHead {
                len: r.get::<_, i64>(1) as u64,
                hash: hash.try_into().unwrap_or([0xff; 32]),
            };
            let body = body.map(|b| muster_domain::edit::body_digest(&b));
            (r.get::<_, String>(0), Recorded { head, body })
        })
        .collect())
}

/// Verifies every chain in the ledger; the first broken chain is the error.
pub async fn verify_ledger(pool: &Pool) -> Result<LedgerReport, PgError> {
    Ok(verify(pool, None).await?.0)
}

/// Verifies every chain and answers the newest ledger sequence N with the digest over every
/// chain head as of N. N is taken once every transaction that was writing when it was read
/// has ended, so no entry at or below N can still appear.
pub async fn ledger_head(pool: &Pool) -> Result<(LedgerReport, LedgerHead), PgError> {
    let client = pool.get().await?;
    let row = client
        .query_one(include_str!("verify/sql/head_position.sql"), &[])
        .await?;
    let (snapshot, seq): (String, i64) = (row.get(0), row.get(1));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let settled: bool = client
            .query_one(include_str!("verify/sql/settled.sql"), &[&snapshot])
            .await?
            .get(0);
        if settled {
            break;
        }
        if Instant::now() > deadline {
            return Err(PgError::Ledger(
                "a transaction older than 30 s is still open: the head cannot be taken yet".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
    let (report, digest) = verify(pool, Some(seq as u64)).await?;
    Ok((
        report,
        LedgerHead {
            seq: seq as u64,
            digest: digest.unwrap_or_default(),
        },
    ))
}

/// Verifies every chain and that the ledger up to `expected.seq` still hashes to
/// `expected.digest`.
pub async fn verify_against(pool: &Pool, expected: LedgerHead) -> Result<LedgerReport, PgError> {
    let (report, digest) = verify(pool, Some(expected.seq)).await?;
    let found = digest.unwrap_or_default();
    if found != expected.digest {
        return Err(ChainError::DigestMismatch {
            seq: expected.seq,
            expected: blake3::Hash::from(expected.digest).to_hex().to_string(),
            found: blake3::Hash::from(found).to_hex().to_string(),
        }
        .into());
    }
    Ok(report)
}

/// Heads as of a ledger sequence, gathered while the chains are verified.
struct HeadsAt {
    at: u64,
    heads: Vec<(String, String, ChainHead)>,
}

async fn verify(pool: &Pool, at: Option<u64>) -> Result<(LedgerReport, Option<Hash>), PgError> {
    let client = pool.get().await?;
    let items = recorded(&client, include_str!("verify/sql/item_heads.sql")).await?;
    let edits = recorded(&client, include_str!("verify/sql/edit_heads.sql")).await?;
    let kinds = recorded(&client, include_str!("verify/sql/kind_heads.sql")).await?;
    let subjects = Subjects {
        items: &items,
        edits: &edits,
        kinds: &kinds,
    };
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 0] = [];
    let rows = client
        .query_raw(include_str!("verify/sql/chains.sql"), params)
        .await?;
    futures_util::pin_mut!(rows);
    let mut report = LedgerReport::default();
    let mut heads = at.map(|at| HeadsAt {
        at,
        heads: Vec::new(),
    });
    let mut current: Vec<(SealedEntry, u64)> = Vec::new();
    // `type:id` of every subject with a chain.
    let mut chained: HashSet<String> = HashSet::new();
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
        let new_subject = current.first().is_some_and(|(first, _)| {
            first.entry.subject_type != sealed.entry.subject_type
                || first.entry.subject_id != sealed.entry.subject_id
        });
        if new_subject {
            finish_subject(&current, &subjects, &mut report, heads.as_mut())?;
            chained.insert(format!(
                "{}:{}",
                current[0].0.entry.subject_type, current[0].0.entry.subject_id
            ));
            current.clear();
        }
        current.push((sealed, r.get::<_, i64>(12) as u64));
    }
    if !current.is_empty() {
        finish_subject(&current, &subjects, &mut report, heads.as_mut())?;
        chained.insert(format!(
            "{}:{}",
            current[0].0.entry.subject_type, current[0].0.entry.subject_id
        ));
    }
    // Every item and edit has at least its first entry, and so has every kind whose row
    // records one: a subject whose chain is missing entirely is as broken as one whose chain
    // was cut short.
    for (t, rows) in [("item", &items), ("edit", &edits), ("kind", &kinds)] {
        let mut missing: Vec<String> = rows
            .iter()
            .filter(|(_, r)| r.head.len > 0)
            .map(|(id, _)| format!("{t}:{id}"))
            .filter(|subject| !chained.contains(subject))
            .collect();
        missing.sort();
        if let Some(subject) = missing.into_iter().next() {
            return Err(ChainError::NoChain { subject }.into());
        }
    }
    let digest = heads.map(|h| {
        muster_ledger::heads_digest(
            h.at,
            h.heads
                .iter()
                .map(|(t, id, head)| (t.as_str(), id.as_str(), *head)),
        )
    });
    Ok((report, digest))
}

/// The recorded heads of every kind of subject row.
struct Subjects<'a> {
    items: &'a HashMap<String, Recorded>,
    edits: &'a HashMap<String, Recorded>,
    kinds: &'a HashMap<String, Recorded>,
}

fn finish_subject(
    chain: &[(SealedEntry, u64)],
    subjects: &Subjects<'_>,
    report: &mut LedgerReport,
    heads: Option<&mut HeadsAt>,
) -> Result<(), PgError> {
    let first = &chain[0].0.entry;
    let (t, id) = (first.subject_type.as_str(), first.subject_id.as_str());
    let entries = chain.iter().map(|(e, _)| e);
    let recorded = match t {
        "item" => subjects.items.get(id),
        "edit" => subjects.edits.get(id),
        "kind" => subjects.kinds.get(id),
        _ => None,
    };
    match (t, recorded) {
        ("item", Some(recorded)) => {
            verify_against_head(t, id, entries, recorded.head)?;
            report.item_subjects += 1;
        }
        ("kind", Some(recorded)) => {
            verify_against_head(t, id, entries, recorded.head)?;
            report.kind_subjects += 1;
        }
        ("edit", Some(recorded)) => {
            verify_against_head(t, id, entries, recorded.head)?;
            report.edit_subjects += 1;
            if check_body(t, id, chain, recorded)? {
                report.bodies += 1;
            }
        }
        _ => {
            muster_ledger::verify_chain(t, id, entries)?;
        }
    }
    if let Some(h) = heads {
        // The newest entry at or below the sequence: chains are appended in sequence order.
        if let Some((e, _)) = chain.iter().rev().find(|(_, seq)| *seq <= h.at) {
            h.heads.push((
                t.to_owned(),
                id.to_owned(),
                ChainHead {
                    len: e.subject_seq,
                    hash: e.hash,
                },
            ));
        }
    }
    report.subjects += 1;
    report.entries += chain.len() as u64;
    Ok(())
}

/// Whether the edit's `submitted` entry records a text digest, and (if so) that it is the
/// stored text's.
fn check_body(
    t: &str,
    id: &str,
    chain: &[(SealedEntry, u64)],
    recorded: &Recorded,
) -> Result<bool, PgError> {
    let Some((submitted, _)) = chain.iter().find(|(e, _)| e.entry.event == "submitted") else {
        return Ok(false);
    };
    let data: serde_json::Value = serde_json::from_str(&submitted.entry.data)
        .map_err(|e| PgError::Ledger(format!("{t}:{id}: entry data is not JSON: {e}")))?;
    let Some(committed) = data.get("body_blake3").and_then(|v| v.as_str()) else {
        return Ok(false);
    };
    if recorded.body.as_deref() != Some(committed) {
        return Err(ChainError::BodyChanged {
            subject: format!("{t}:{id}"),
        }
        .into());
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
