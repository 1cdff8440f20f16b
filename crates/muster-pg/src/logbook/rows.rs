//! Row mappers: the columns the locking reads return, and how a row becomes a domain value.

use muster_app::ports::StoreError;
use muster_domain::trace::TraceContext;
use muster_domain::{
    Fence, Item, ItemId, LeaseGrant, LeaseId, LeaseOutcome, LeaseRecord, Priority,
};
use muster_ledger::ChainHead;
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::Row;
use uuid::Uuid;

/// The item columns every locking read returns, in the order [`item_from_row`] reads them, then
/// the item's trace context ([`traced_item_from_row`] reads both). The
/// statements in `sql/` list them themselves (`sql_tidy` checks that they do); `listing` splices
/// them into the statements it builds.
pub(crate) const ITEM_COLS: &str = "i.id, i.kind, i.priority, i.state, i.attempt, i.fence, i.lease_id, \
     i.lease_worker, i.lease_expires_at, i.not_before, i.parked_digest, i.chain_len, i.chain_head, i.trace";
pub(super) const ITEM_COL_COUNT: usize = 14;

pub(super) fn internal(msg: impl Into<String>) -> StoreError {
    StoreError::Internal(msg.into())
}

pub(super) fn item_from_row(row: &Row, at: usize) -> Result<Item, StoreError> {
    let kind: String = row.get(at + 1);
    let priority: i16 = row.get(at + 2);
    let state: String = row.get(at + 3);
    let attempt: i32 = row.get(at + 4);
    let fence: i64 = row.get(at + 5);
    let lease_id: Option<Uuid> = row.get(at + 6);
    let lease_worker: Option<String> = row.get(at + 7);
    let lease_expires_at: Option<OffsetDateTime> = row.get(at + 8);
    let chain_len: i64 = row.get(at + 11);
    let chain_head: Vec<u8> = row.get(at + 12);
    let lease = match (lease_id, lease_worker, lease_expires_at) {
        (Some(id), Some(worker_id), Some(expires_at)) => Some(LeaseGrant {
            lease_id: LeaseId(id),
            worker_id,
            expires_at,
        }),
        _ => None,
    };
    Ok(Item {
        id: ItemId(row.get(at)),
        kind: kind.parse().map_err(|e| internal(format!("{e}")))?,
        priority: Priority::from_rank(priority)
            .ok_or_else(|| internal(format!("bad priority {priority}")))?,
        state: state.parse().map_err(internal)?,
        attempt: u32::try_from(attempt).map_err(|_| internal("negative attempt"))?,
        fence: Fence(u64::try_from(fence).map_err(|_| internal("negative fence"))?),
        lease,
        not_before: row.get(at + 9),
        parked_digest: row.get(at + 10),
        chain: ChainHead {
            len: u64::try_from(chain_len).map_err(|_| internal("negative chain length"))?,
            hash: chain_head
                .try_into()
                .map_err(|_| internal("chain head is not 32 bytes"))?,
        },
    })
}

/// A `lock_leases` row: the lease's columns, then the item's.
pub(super) fn lease_from_row(
    row: &Row,
) -> Result<(LeaseRecord, Item, Option<TraceContext>), StoreError> {
    let fence: i64 = row.get(2);
    let outcome: Option<String> = row.get(4);
    let digest: Option<Vec<u8>> = row.get(5);
    let outcome = match (outcome, digest) {
        (Some(kind), Some(digest)) => Some(LeaseOutcome {
            kind: kind.parse().map_err(internal)?,
            digest: digest
                .try_into()
                .map_err(|_| internal("outcome digest is not 32 bytes"))?,
            response: row.get::<_, Option<Value>>(6).unwrap_or(Value::Null),
        }),
        _ => None,
    };
    let record = LeaseRecord {
        lease_id: LeaseId(row.get(0)),
        item_id: ItemId(row.get(1)),
        fence: Fence(u64::try_from(fence).map_err(|_| internal("negative fence"))?),
        worker_id: row.get(3),
        granted_at: row.get(7),
        outcome,
    };
    let (item, trace) = traced_item_from_row(row, 8)?;
    Ok((record, item, trace))
}

/// A stored trace context (`core.items.trace`) read back: `None` for an item enqueued before
/// items kept one, and for bytes that are no context (all-zero ids, which no writer stores): a
/// trace never stops an item's work.
pub(super) fn stored_context(bytes: Option<&[u8]>) -> Option<TraceContext> {
    bytes.and_then(TraceContext::from_stored)
}

/// An item and its trace context, from the columns [`ITEM_COLS`] from `at`.
pub(super) fn traced_item_from_row(
    row: &Row,
    at: usize,
) -> Result<(Item, Option<TraceContext>), StoreError> {
    let trace = stored_context(row.get(at + ITEM_COL_COUNT - 1));
    Ok((item_from_row(row, at)?, trace))
}

/// The stored form of an optional trace context.
pub(super) fn stored_trace(trace: Option<TraceContext>) -> Option<Vec<u8>> {
    trace.map(|t| t.to_stored().to_vec())
}

pub(super) fn fence_i64(f: Fence) -> Result<i64, StoreError> {
    i64::try_from(f.0).map_err(|_| internal("fence out of range"))
}
