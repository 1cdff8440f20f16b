//! The WAL a phase writes and fsyncs, per item it finishes: PostgreSQL's `pg_stat_wal` (the
//! whole cluster's counters) sampled just before the phase's measured window and again after
//! it, once the backends have reported (an idle backend reports its counters within a second).

use std::time::Duration;

use super::procs::psql_answer;
use crate::results::WalPerItem;

/// How long after a window its last counters take to reach `pg_stat_wal`.
const REPORTED_WITHIN: Duration = Duration::from_secs(2);

/// `pg_stat_wal`'s `wal_bytes`, `wal_sync` and `wal_records` now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalSample {
    bytes: u64,
    syncs: u64,
    records: u64,
}

/// The cluster's WAL counters now, through the database at `url`; `None` when psql cannot tell.
pub(crate) fn sample(url: &str) -> Option<WalSample> {
    let answer = psql_answer(
        url,
        "SELECT format('%s %s %s', wal_bytes, wal_sync, wal_records) FROM pg_stat_wal",
    )?;
    let mut n = answer.split(' ').map(|v| v.parse::<u64>().ok());
    Some(WalSample {
        bytes: n.next()??,
        syncs: n.next()??,
        records: n.next()??,
    })
}

/// What the cluster wrote since `before` per item of `items` finished in the window, read
/// once the window's counters are reported; `None` without a sample or an item.
pub(crate) fn since(before: Option<WalSample>, url: &str, items: u64) -> Option<WalPerItem> {
    std::thread::sleep(REPORTED_WITHIN);
    let (before, after) = (before?, sample(url)?);
    (items > 0).then(|| {
        let per_item = |n: u64| n as f64 / items as f64;
        let (bytes, fsyncs, records) = (
            after.bytes.saturating_sub(before.bytes),
            after.syncs.saturating_sub(before.syncs),
            after.records.saturating_sub(before.records),
        );
        WalPerItem {
            items,
            bytes,
            fsyncs,
            records,
            bytes_per_item: per_item(bytes),
            fsyncs_per_item: per_item(fsyncs),
            records_per_item: per_item(records),
        }
    })
}
