//! Between the model's small numbers and muster-domain's types.
//!
//! The server's steps rebuild a real [`Item`] and [`LeaseRecord`] from the model's rows, hand
//! them to the domain's transition and fencing functions, and project the result back. The
//! projection is exact: a value with no counterpart in the model (a time off the tick grid, an
//! id the model never issued) is an [`Anomaly`], never rounded.

use muster_domain::{
    Fence, Item, ItemId, ItemState, Kind, LeaseGrant, LeaseId, LeaseOutcome, LeaseRecord,
    OutcomeKind, Priority, request_digest,
};
use muster_ledger::{ChainHead, SealedEntry};
use serde_json::{Value, json};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::state::{
    Anomaly, Answer, Event, Finish, Grant, ItemNo, ItemRow, LeaseNo, LeaseRow, LedgerRow, Outcome,
    Recorded, Tick, WorkerNo,
};

/// The kind of every root item and of every model worker.
pub const KIND: Kind = Kind::Trawl;
/// The kind of the `next` step a completion enqueues (the default route trawl → sextant).
pub const NEXT_KIND: Kind = Kind::Sextant;
/// The image digest a model worker reports with `needs_subtool`.
pub const WORKER_DIGEST: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000001";

const ITEM_BASE: u128 = 0x1000;
const CHILD_BASE: u128 = 0x2000;
const LEASE_BASE: u128 = 0x3000;

pub fn item_id(item: ItemNo) -> ItemId {
    ItemId(Uuid::from_u128(ITEM_BASE + u128::from(item)))
}

/// The id of the `n`-th `next` item created by root item `item`.
pub fn child_id(item: ItemNo, n: u8) -> ItemId {
    ItemId(Uuid::from_u128(
        CHILD_BASE + (u128::from(item) << 8) + u128::from(n),
    ))
}

pub fn lease_id(lease: LeaseNo) -> LeaseId {
    LeaseId(Uuid::from_u128(LEASE_BASE + u128::from(lease)))
}

pub fn lease_no(id: LeaseId) -> Result<LeaseNo, Anomaly> {
    id.0.as_u128()
        .checked_sub(LEASE_BASE)
        .and_then(|n| u8::try_from(n).ok())
        .ok_or(Anomaly::Unprojectable)
}

pub fn worker_id(worker: WorkerNo) -> String {
    format!("model-worker-{worker}")
}

pub fn worker_no(id: &str) -> Result<WorkerNo, Anomaly> {
    id.strip_prefix("model-worker-")
        .and_then(|n| n.parse().ok())
        .ok_or(Anomaly::Unprojectable)
}

/// Tick `t` on the real clock: `t` seconds after the epoch.
/// The maximum run time the model's server goes by: longer than any run it explores, so a
/// lease is never timed out (the model checks fencing, not the limit).
pub const MAX_RUN: Duration = Duration::days(36_500);

pub fn at(t: Tick) -> OffsetDateTime {
    OffsetDateTime::UNIX_EPOCH + Duration::seconds(i64::from(t))
}

/// The tick of a real time; only whole seconds within the tick range have one.
pub fn tick(at: OffsetDateTime) -> Result<Tick, Anomaly> {
    let since = at - OffsetDateTime::UNIX_EPOCH;
    if since.subsec_nanoseconds() != 0 {
        return Err(Anomaly::Unprojectable);
    }
    Tick::try_from(since.whole_seconds()).map_err(|_| Anomaly::Unprojectable)
}

/// The domain item for a model row. The chain head starts from genesis at every step: the
/// ledger's hashing is checked elsewhere (muster-ledger), and a real chain head would make
/// every history a different state.
pub fn domain_item(item: ItemNo, row: &ItemRow) -> Item {
    Item {
        id: item_id(item),
        kind: KIND,
        priority: Priority::Normal,
        state: row.state,
        attempt: u32::from(row.attempt),
        fence: Fence(u64::from(row.fence)),
        lease: row.lease.map(|g| LeaseGrant {
            lease_id: lease_id(g.lease),
            worker_id: worker_id(g.worker),
            expires_at: at(g.expires),
        }),
        not_before: row.not_before.map(at),
        parked_digest: row.parked.then(|| WORKER_DIGEST.to_owned()),
        chain: ChainHead::genesis(),
    }
}

/// The model row for a domain item (`has_result` is not part of the domain item and is kept).
pub fn project_item(item: &Item, has_result: bool) -> Result<ItemRow, Anomaly> {
    let lease = match &item.lease {
        Some(l) => Some(Grant {
            lease: lease_no(l.lease_id)?,
            worker: worker_no(&l.worker_id)?,
            expires: tick(l.expires_at)?,
        }),
        None => None,
    };
    let parked = match item.parked_digest.as_deref() {
        None => false,
        Some(WORKER_DIGEST) => true,
        Some(_) => return Err(Anomaly::Unprojectable),
    };
    Ok(ItemRow {
        state: item.state,
        attempt: u8::try_from(item.attempt).map_err(|_| Anomaly::Unprojectable)?,
        fence: u8::try_from(item.fence.0).map_err(|_| Anomaly::Unprojectable)?,
        lease,
        not_before: item.not_before.map(tick).transpose()?,
        parked,
        has_result,
    })
}

/// The domain's outcome kind of a recorded outcome.
pub const fn outcome_kind(kind: Recorded) -> OutcomeKind {
    match kind {
        Recorded::Completed => OutcomeKind::Completed,
        Recorded::Failed => OutcomeKind::Failed,
        Recorded::Parked => OutcomeKind::Parked,
        Recorded::Late => OutcomeKind::Late,
    }
}

/// The outcome kind a finishing request is checked and recorded as.
pub const fn request_kind(finish: Finish) -> OutcomeKind {
    match finish {
        Finish::Complete => OutcomeKind::Completed,
        Finish::Fail { .. } => OutcomeKind::Failed,
        Finish::NeedsSubtool => OutcomeKind::Parked,
    }
}

/// The result a model worker delivers for `lease`.
pub fn result_of(lease: LeaseNo) -> Value {
    json!({"lease": lease})
}

/// The canonical request body of a finishing call under `lease`, exactly as the use case
/// builds it before hashing (`muster-app/src/service/`: `complete`, `fail`,
/// `needs_subtool`).
pub fn canonical_body(lease: LeaseNo, finish: Finish) -> Value {
    match finish {
        Finish::Complete => json!({
            "result": result_of(lease),
            "next": [{"kind": NEXT_KIND, "payload": {"parent_lease": lease}, "priority": null}],
        }),
        Finish::Fail { retryable } => json!({
            "error": {"code": "E_MODEL", "message": "the model worker failed"},
            "retryable": retryable,
        }),
        Finish::NeedsSubtool => json!({
            "worker_digest": WORKER_DIGEST,
            "layout": {"signature": "model-layout"},
        }),
    }
}

/// The digest the use case computes for a finishing request.
pub fn digest(lease: LeaseNo, finish: Finish) -> [u8; 32] {
    request_digest(request_kind(finish), &canonical_body(lease, finish))
}

/// The stored answer as the use case serialises it (`Completed`, `Failed`, `Parked` views).
pub fn answer_json(item: ItemNo, finish: Finish, answer: Answer) -> Value {
    let item_id = item_id(item).to_string();
    match finish {
        Finish::Complete => json!({
            "item_id": item_id, "state": answer.state, "ledger_seq": 0, "replayed": false,
        }),
        Finish::Fail { .. } => json!({
            "item_id": item_id,
            "state": answer.state,
            "not_before": answer.not_before.map(|t| at(t).unix_timestamp()),
        }),
        Finish::NeedsSubtool => json!({"item_id": item_id, "state": answer.state}),
    }
}

/// Reads the item state back from a stored answer that the domain handed out for a replay.
pub fn replayed_state(response: &Value) -> Result<ItemState, Anomaly> {
    response
        .get("state")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .ok_or(Anomaly::StoredAnswerUnreadable)
}

/// The lease record `lock_lease` reads for `lease`.
pub fn lease_record(lease: LeaseNo, row: &LeaseRow) -> LeaseRecord {
    LeaseRecord {
        lease_id: lease_id(lease),
        item_id: item_id(row.item),
        fence: Fence(u64::from(row.fence)),
        worker_id: worker_id(row.worker),
        // The model has no maximum run time (see `MAX_RUN`): the grant time is never read.
        granted_at: at(0),
        outcome: row.outcome.map(|o| stored_outcome(lease, row.item, o)),
    }
}

fn stored_outcome(lease: LeaseNo, item: ItemNo, o: Outcome) -> LeaseOutcome {
    LeaseOutcome {
        kind: outcome_kind(o.kind),
        digest: digest(lease, o.finish),
        response: o
            .answer
            .map_or(Value::Null, |a| answer_json(item, o.finish, a)),
    }
}

fn event(name: &str) -> Result<Event, Anomaly> {
    Ok(match name {
        "enqueued" => Event::Enqueued,
        "leased" => Event::Leased,
        "expired" => Event::Expired,
        "completed" => Event::Completed,
        "failed" => Event::Failed,
        "parked" => Event::Parked,
        "late_result" => Event::LateResult,
        _ => return Err(Anomaly::Unprojectable),
    })
}

fn state(name: &str) -> Result<ItemState, Anomaly> {
    name.parse().map_err(|_| Anomaly::Unprojectable)
}

/// The model's ledger row for an entry the domain sealed.
pub fn ledger_row(sealed: &SealedEntry) -> Result<LedgerRow, Anomaly> {
    let e = &sealed.entry;
    let data: Value = serde_json::from_str(&e.data).map_err(|_| Anomaly::Unprojectable)?;
    let lease = match data.get("lease_id").and_then(Value::as_str) {
        Some(id) => Some(lease_no(LeaseId(
            id.parse().map_err(|_| Anomaly::Unprojectable)?,
        ))?),
        None => None,
    };
    Ok(LedgerRow {
        event: event(&e.event)?,
        from: e.from_state.as_deref().map(state).transpose()?,
        to: state(e.to_state.as_deref().ok_or(Anomaly::Unprojectable)?)?,
        fence: e
            .fence
            .map(|f| u8::try_from(f).map_err(|_| Anomaly::Unprojectable))
            .transpose()?,
        lease,
    })
}

#[cfg(test)]
mod tests {
    use muster_domain::item::LeaseResult;
    use muster_domain::{Principal, RetryPolicy};

    use super::*;

    fn queued() -> ItemRow {
        ItemRow {
            state: ItemState::Queued,
            attempt: 0,
            fence: 0,
            lease: None,
            not_before: None,
            parked: false,
            has_result: false,
        }
    }

    #[test]
    fn a_leased_item_comes_back_from_the_domain_unchanged() {
        let row = ItemRow {
            state: ItemState::Leased,
            attempt: 2,
            fence: 3,
            lease: Some(Grant {
                lease: 4,
                worker: 1,
                expires: 5,
            }),
            not_before: None,
            parked: false,
            has_result: false,
        };
        assert_eq!(project_item(&domain_item(1, &row), false), Ok(row));
    }

    #[test]
    fn a_lease_granted_by_the_domain_projects_to_the_next_fence_and_the_promised_expiry() {
        let mut item = domain_item(0, &queued());
        let granted = item
            .lease(
                lease_id(0),
                &worker_id(1),
                Principal::Worker(KIND),
                &RetryPolicy::default(),
                Duration::seconds(1),
                at(2),
            )
            .expect("a queued item is leasable");
        let LeaseResult::Granted(entry) = granted else {
            panic!("expected a grant, got {granted:?}");
        };
        let row = project_item(&item, false).expect("projectable");
        assert_eq!(
            row.lease,
            Some(Grant {
                lease: 0,
                worker: 1,
                expires: 3
            })
        );
        assert_eq!(
            (row.state, row.fence, row.attempt),
            (ItemState::Leased, 1, 1)
        );
        assert_eq!(
            ledger_row(&entry),
            Ok(LedgerRow {
                event: Event::Leased,
                from: Some(ItemState::Queued),
                to: ItemState::Leased,
                fence: Some(1),
                lease: Some(0),
            })
        );
    }

    #[test]
    fn a_time_between_two_ticks_has_no_tick() {
        assert_eq!(tick(at(3)), Ok(3));
        assert_eq!(
            tick(at(3) + Duration::milliseconds(500)),
            Err(Anomaly::Unprojectable)
        );
        assert_eq!(
            tick(at(0) - Duration::seconds(1)),
            Err(Anomaly::Unprojectable)
        );
    }

    #[test]
    fn ids_the_model_never_issued_have_no_number() {
        assert_eq!(lease_no(lease_id(7)), Ok(7));
        assert_eq!(
            lease_no(LeaseId(Uuid::from_u128(5))),
            Err(Anomaly::Unprojectable)
        );
        assert_eq!(worker_no(&worker_id(2)), Ok(2));
        assert_eq!(worker_no("trawl-7f9c"), Err(Anomaly::Unprojectable));
    }

    #[test]
    fn different_finishes_of_one_lease_have_different_digests() {
        let all: std::collections::BTreeSet<[u8; 32]> =
            Finish::ALL.iter().map(|f| digest(0, *f)).collect();
        assert_eq!(all.len(), Finish::ALL.len());
        assert_ne!(digest(0, Finish::Complete), digest(1, Finish::Complete));
    }
}
