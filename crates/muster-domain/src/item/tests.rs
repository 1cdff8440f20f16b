use super::*;
use muster_ledger::verify_chain;
use proptest::prelude::*;
use time::macros::datetime;

const T0: OffsetDateTime = datetime!(2026-12-02 12:00:00 UTC);
const TTL: Duration = Duration::seconds(30);
const TRAWL: Principal = Principal::Worker(Kind::Trawl);

fn id(n: u128) -> ItemId {
    ItemId(Uuid::from_u128(n))
}

fn lid(n: u128) -> LeaseId {
    LeaseId(Uuid::from_u128(0xffff_0000 + n))
}

fn queued() -> Item {
    enqueued(None).0
}

/// A trawl item enqueued at `T0` (with `not_before` if given): the item and its entry.
fn enqueued(not_before: Option<OffsetDateTime>) -> (Item, SealedEntry) {
    Item::enqueue(
        id(1),
        Kind::Trawl,
        Priority::Normal,
        Principal::Operator,
        T0,
        None,
        not_before,
    )
}

/// Leases `item` and returns the lease record as Logbook would keep it.
/// The first lease of `item`, by `trawl-1`, finished with `outcome`.
fn first_lease_finished(item: &Item, outcome: LeaseOutcome) -> LeaseRecord {
    LeaseRecord {
        lease_id: lid(1),
        item_id: item.id,
        fence: Fence(1),
        worker_id: "trawl-1".into(),
        granted_at: T0,
        outcome: Some(outcome),
    }
}

/// A queued item leased once and parked for the worker image `digest`.
fn parked_on(digest: &str) -> Item {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    item.park(&rec, TRAWL, Some(digest), &json!({}), T0)
        .unwrap();
    item
}

/// Parks the lease `rec` of `item` on the old worker image and replays it for the new one.
fn bounced_to_a_new_image(
    item: &mut Item,
    rec: &LeaseRecord,
    policy: &RetryPolicy,
) -> Vec<SealedEntry> {
    item.park_and_replay(
        rec,
        TRAWL,
        "sha256:old",
        "sha256:new",
        &json!({}),
        policy,
        T0,
    )
    .unwrap()
}

/// The events of `entries`, in order.
fn events(entries: &[SealedEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.entry.event.as_str()).collect()
}

/// The default retry policy but with `max_attempts` attempts.
fn allowing(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        ..RetryPolicy::default()
    }
}

/// Fails `item` as the trawl worker under the default policy, without jitter.
fn fail_as_trawl(
    item: &mut Item,
    record: &LeaseRecord,
    error: &serde_json::Value,
    retryable: bool,
    now: OffsetDateTime,
) -> Result<(FailOutcome, SealedEntry), TransitionError> {
    item.fail(
        record,
        TRAWL,
        error,
        retryable,
        &RetryPolicy::default(),
        0.0,
        now,
    )
}

fn lease(item: &mut Item, n: u128, now: OffsetDateTime) -> LeaseRecord {
    match item
        .lease(lid(n), "trawl-1", TRAWL, &RetryPolicy::default(), TTL, now)
        .unwrap()
    {
        LeaseResult::Granted(_) => {}
        LeaseResult::Exhausted(_) => panic!("expected a grant"),
    }
    LeaseRecord {
        lease_id: lid(n),
        item_id: item.id,
        fence: item.fence,
        worker_id: "trawl-1".into(),
        granted_at: now,
        outcome: None,
    }
}

#[test]
fn enqueue_starts_a_chain_with_one_entry() {
    let (item, entry) = Item::enqueue(
        id(1),
        Kind::Trawl,
        Priority::Urgent,
        Principal::Operator,
        T0,
        None,
        None,
    );
    assert_eq!(item.state, ItemState::Queued);
    assert_eq!(item.chain.len, 1);
    assert_eq!(entry.entry.event, "enqueued");
    assert_eq!(entry.entry.from_state, None);
    assert_eq!(entry.entry.data, r#"{"kind":"trawl","priority":"urgent"}"#);
}

#[test]
fn each_lease_takes_the_next_fence_and_charges_an_attempt() {
    let mut item = queued();
    let first = lease(&mut item, 1, T0);
    assert_eq!((first.fence, item.attempt), (Fence(1), 1));
    let second = lease(&mut item, 2, T0 + TTL);
    assert_eq!((second.fence, item.attempt), (Fence(2), 2));
}

#[test]
fn a_live_lease_cannot_be_taken_again() {
    let mut item = queued();
    lease(&mut item, 1, T0);
    let again = item.lease(
        lid(2),
        "trawl-2",
        TRAWL,
        &RetryPolicy::default(),
        TTL,
        T0 + Duration::seconds(29),
    );
    assert_eq!(again, Err(TransitionError::NotLeasable(ItemState::Leased)));
}

#[test]
fn an_item_is_not_leasable_before_not_before() {
    let mut item = queued();
    item.not_before = Some(T0 + Duration::seconds(5));
    assert!(!item.is_leasable(T0 + Duration::seconds(4)));
    assert!(item.is_leasable(T0 + Duration::seconds(5)));
}

#[test]
fn a_worker_of_another_kind_may_not_lease_the_item() {
    let mut item = queued();
    let r = item.lease(
        lid(1),
        "s-1",
        Principal::Worker(Kind::Sextant),
        &RetryPolicy::default(),
        TTL,
        T0,
    );
    assert_eq!(r, Err(SEXTANT_ON_TRAWL));
}

/// The state a transition was refused in, when it was refused as invalid from it.
fn refused_from<T>(r: Result<T, TransitionError>) -> Option<ItemState> {
    match r {
        Err(TransitionError::InvalidTransition { from, .. }) => Some(from),
        _ => None,
    }
}

/// A sextant worker acting on a trawl item.
const SEXTANT_ON_TRAWL: TransitionError = TransitionError::Forbidden {
    principal: Principal::Worker(Kind::Sextant),
    kind: Kind::Trawl,
};

/// An item leased twice: the item and its first, superseded lease.
fn superseded() -> (Item, LeaseRecord) {
    let mut item = queued();
    let old = lease(&mut item, 1, T0);
    lease(&mut item, 2, T0 + TTL);
    (item, old)
}

#[test]
fn a_superseded_lease_loses_complete_fail_park_and_heartbeat() {
    let (mut item, old) = superseded();
    let d = request_digest(OutcomeKind::Completed, &json!({}));
    assert_eq!(
        item.check_finish(&old, TRAWL, OutcomeKind::Completed, &d),
        Err(TransitionError::LeaseLost)
    );
    assert_eq!(
        item.clone().complete(&old, TRAWL, &json!({}), &[], T0),
        Err(TransitionError::LeaseLost)
    );
    assert_eq!(
        fail_as_trawl(&mut item.clone(), &old, &json!({}), true, T0).unwrap_err(),
        TransitionError::LeaseLost
    );
    assert_eq!(
        item.clone()
            .park(&old, TRAWL, Some("sha256:x"), &json!({}), T0),
        Err(TransitionError::LeaseLost)
    );
    assert_eq!(
        item.heartbeat(&old, TRAWL, "trawl-1", TTL, MAX_RUN, T0 + TTL),
        Err(TransitionError::LeaseLost)
    );
}

#[test]
fn an_expired_lease_that_nobody_superseded_can_still_complete() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    let late = T0 + Duration::minutes(10);
    let d = request_digest(OutcomeKind::Completed, &json!({}));
    assert_eq!(
        item.check_finish(&rec, TRAWL, OutcomeKind::Completed, &d),
        Ok(LeaseUse::Proceed)
    );
    let entry = item
        .complete(&rec, TRAWL, &json!({"ok": true}), &[], late)
        .unwrap();
    assert_eq!(item.state, ItemState::Done);
    assert_eq!(entry.entry.fence, Some(1));
}

#[test]
fn a_heartbeat_revives_an_expired_lease_that_was_not_superseded() {
    let later = T0 + Duration::minutes(1);
    let (item, _, r) = heartbeated("trawl-1", MAX_RUN, later);
    assert_eq!(r, Ok(later + TTL));
    assert!(!item.is_leasable(later));
}

#[test]
fn a_heartbeat_from_another_worker_is_refused() {
    let (_, _, r) = heartbeated("trawl-9", MAX_RUN, T0);
    assert_eq!(r, Err(TransitionError::WrongWorker));
}

#[test]
fn a_finishing_call_naming_another_worker_is_refused() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    assert_eq!(
        item.check_sender(&rec, TRAWL, Some("trawl-9")),
        Err(TransitionError::WrongWorker)
    );
}

#[test]
fn a_finishing_call_naming_the_lease_worker_or_none_is_allowed() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    assert_eq!(item.check_sender(&rec, TRAWL, Some("trawl-1")), Ok(()));
    assert_eq!(item.check_sender(&rec, TRAWL, None), Ok(()));
}

#[test]
fn a_finishing_call_from_another_kind_is_forbidden_before_its_worker_is_compared() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    assert_eq!(
        item.check_sender(&rec, Principal::Worker(Kind::Sextant), Some("trawl-9")),
        Err(SEXTANT_ON_TRAWL)
    );
}

#[test]
fn a_superseded_lease_named_by_another_worker_is_refused_as_the_wrong_worker() {
    let (item, old) = superseded();
    assert_eq!(
        item.check_sender(&old, TRAWL, Some("trawl-9")),
        Err(TransitionError::WrongWorker)
    );
}

#[test]
fn a_finished_lease_replays_the_same_request_and_refuses_a_different_one() {
    let item = queued();
    let body = json!({"result": {"n": 1}});
    let rec = first_lease_finished(
        &item,
        LeaseOutcome {
            kind: OutcomeKind::Completed,
            digest: request_digest(OutcomeKind::Completed, &body),
            response: json!({"state": "done"}),
        },
    );
    let same = request_digest(OutcomeKind::Completed, &body);
    let other = request_digest(OutcomeKind::Completed, &json!({"result": {"n": 2}}));
    let as_fail = request_digest(OutcomeKind::Failed, &body);
    assert_eq!(
        item.check_finish(&rec, TRAWL, OutcomeKind::Completed, &same),
        Ok(LeaseUse::Replay(json!({"state": "done"})))
    );
    assert_eq!(
        item.check_finish(&rec, TRAWL, OutcomeKind::Completed, &other),
        Err(TransitionError::Conflict)
    );
    assert_eq!(
        item.check_finish(&rec, TRAWL, OutcomeKind::Failed, &as_fail),
        Err(TransitionError::Conflict)
    );
}

#[test]
fn a_late_result_stays_lost_when_delivered_again() {
    let item = queued();
    let rec = first_lease_finished(
        &item,
        LeaseOutcome {
            kind: OutcomeKind::Late,
            digest: [7; 32],
            response: Value::Null,
        },
    );
    assert_eq!(
        item.check_finish(&rec, TRAWL, OutcomeKind::Completed, &[7; 32]),
        Err(TransitionError::LeaseLost)
    );
}

#[test]
fn a_late_result_is_recorded_without_changing_the_state() {
    let mut item = queued();
    let old = lease(&mut item, 1, T0);
    lease(&mut item, 2, T0 + TTL);
    let entry = item.record_late_result(&old, TRAWL, &json!({"x": 1}), T0 + TTL);
    assert_eq!(item.state, ItemState::Leased);
    assert_eq!(entry.entry.event, "late_result");
    assert_eq!(entry.entry.from_state, entry.entry.to_state);
    assert_eq!(entry.entry.fence, Some(1));
}

#[test]
fn a_retryable_failure_requeues_with_backoff() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    let (outcome, entry) =
        fail_as_trawl(&mut item, &rec, &json!({"code": "E_X"}), true, T0).unwrap();
    assert_eq!(
        outcome,
        FailOutcome::Requeued {
            not_before: T0 + Duration::seconds(1)
        }
    );
    assert_eq!(item.state, ItemState::Queued);
    assert_eq!(entry.entry.to_state.as_deref(), Some("queued"));
}

#[test]
fn a_failure_that_is_not_retryable_is_final() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    let (outcome, _) = fail_as_trawl(&mut item, &rec, &json!({}), false, T0).unwrap();
    assert_eq!(outcome, FailOutcome::Failed);
    assert_eq!(item.state, ItemState::Failed);
}

#[test]
fn the_fifth_failed_attempt_is_final_by_default() {
    let mut item = queued();
    let mut now = T0;
    for n in 1..=5 {
        now += Duration::hours(1);
        let rec = lease(&mut item, n, now);
        let (outcome, _) = fail_as_trawl(&mut item, &rec, &json!({}), true, now).unwrap();
        assert_eq!(outcome == FailOutcome::Failed, n == 5, "attempt {n}");
    }
}

#[test]
fn an_expired_lease_with_no_attempts_left_fails_the_item_instead_of_leasing_it() {
    let policy = allowing(1);
    let mut item = queued();
    item.lease(lid(1), "w", TRAWL, &policy, TTL, T0).unwrap();
    let r = item
        .lease(lid(2), "w", TRAWL, &policy, TTL, T0 + TTL)
        .unwrap();
    assert!(matches!(r, LeaseResult::Exhausted(ref e) if e.entry.event == "expired"));
    assert_eq!((item.state, item.fence), (ItemState::Failed, Fence(1)));
}

/// A trawl item leased once at `T0` under a policy of `max_attempts`, its lease checked at
/// `now` against a final grace of `grace`: the item and the entry written, if any.
fn expired_past_grace(
    max_attempts: u32,
    grace: Duration,
    now: OffsetDateTime,
) -> (Item, Option<SealedEntry>) {
    let policy = allowing(max_attempts);
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    let entry = item
        .expire_past_grace(&rec, TRAWL, &policy, grace, now)
        .unwrap();
    (item, entry)
}

#[test]
fn a_last_attempt_lease_past_its_final_grace_fails_the_item_without_a_lease_request() {
    let grace = TTL * 3;
    let (item, entry) = expired_past_grace(1, grace, T0 + TTL + grace);
    assert_eq!(entry.map(|e| e.entry.event), Some("expired".to_owned()));
    assert_eq!((item.state, item.lease), (ItemState::Failed, None));
}

#[test]
fn a_last_attempt_lease_inside_its_final_grace_is_left_alone() {
    let grace = TTL * 3;
    let (item, entry) = expired_past_grace(1, grace, T0 + TTL + grace - Duration::milliseconds(1));
    assert!(entry.is_none());
    assert_eq!(item.state, ItemState::Leased);
}

#[test]
fn an_expired_lease_with_attempts_left_is_not_failed_by_the_final_grace() {
    let (item, entry) = expired_past_grace(2, TTL, T0 + TTL * 10);
    assert!(entry.is_none());
    assert_eq!(item.state, ItemState::Leased);
}

#[test]
fn parking_is_not_charged_as_an_attempt() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    item.park(
        &rec,
        TRAWL,
        Some("sha256:aa"),
        &json!({"signature": "s"}),
        T0,
    )
    .unwrap();
    assert_eq!((item.state, item.attempt), (ItemState::NeedsSubtool, 0));
    assert_eq!(item.parked_digest.as_deref(), Some("sha256:aa"));
}

#[test]
fn only_failed_and_parked_items_can_be_retried_and_retry_resets_attempts() {
    let mut item = queued();
    assert_eq!(
        refused_from(item.retry(Principal::Operator, T0)),
        Some(ItemState::Queued)
    );
    let rec = lease(&mut item, 1, T0);
    fail_as_trawl(&mut item, &rec, &json!({}), false, T0).unwrap();
    item.retry(Principal::Operator, T0).unwrap();
    assert_eq!((item.state, item.attempt), (ItemState::Queued, 0));
}

#[test]
fn a_parked_item_can_be_retried_and_forgets_its_digest() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    item.park(&rec, TRAWL, Some("sha256:aa"), &json!({}), T0)
        .unwrap();
    let entry = item.retry(Principal::Operator, T0).unwrap();
    assert_eq!(
        (item.state, item.attempt, item.parked_digest.as_deref()),
        (ItemState::Queued, 0, None)
    );
    assert_eq!(entry.entry.from_state.as_deref(), Some("needs_subtool"));
}

#[test]
fn a_park_without_a_digest_is_replayed_by_any_image() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    item.park(&rec, TRAWL, None, &json!({}), T0).unwrap();
    assert!(item.replays_for("sha256:bb"));
}

#[test]
fn a_queued_item_is_cancelled_with_the_operators_reason() {
    let mut item = queued();
    let entry = item
        .cancel(Principal::Operator, "wrong payload", T0)
        .unwrap()
        .unwrap();
    assert_eq!(item.state, ItemState::Cancelled);
    assert_eq!(entry.entry.event, "cancelled");
    assert_eq!(entry.entry.actor, "operator");
    assert_eq!(
        serde_json::from_str::<Value>(&entry.entry.data).unwrap()["reason"],
        "wrong payload"
    );
}

#[test]
fn cancelling_a_leased_item_supersedes_its_lease_at_once() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    let entry = item
        .cancel(Principal::Operator, "stop", T0)
        .unwrap()
        .unwrap();
    assert_eq!(entry.entry.from_state.as_deref(), Some("leased"));
    assert_eq!(entry.entry.fence, Some(1));
    assert_eq!(
        item.heartbeat(&rec, TRAWL, "trawl-1", TTL, MAX_RUN, T0),
        Err(TransitionError::LeaseLost)
    );
    let d = request_digest(OutcomeKind::Completed, &json!({}));
    assert_eq!(
        item.check_finish(&rec, TRAWL, OutcomeKind::Completed, &d),
        Err(TransitionError::LeaseLost)
    );
}

#[test]
fn a_cancelled_item_is_cancelled_again_without_a_new_entry() {
    let mut item = queued();
    item.cancel(Principal::Operator, "once", T0).unwrap();
    let head = item.chain;
    assert_eq!(item.cancel(Principal::Operator, "twice", T0), Ok(None));
    assert_eq!(item.chain, head);
}

#[test]
fn a_done_item_cannot_be_cancelled() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    item.complete(&rec, TRAWL, &json!({}), &[], T0).unwrap();
    assert_eq!(
        refused_from(item.cancel(Principal::Operator, "late", T0)),
        Some(ItemState::Done)
    );
}

#[test]
fn a_cancelled_item_is_not_leasable_and_cannot_be_retried() {
    let mut item = queued();
    item.cancel(Principal::Operator, "r", T0).unwrap();
    assert!(!item.is_leasable(T0 + TTL));
    assert!(item.retry(Principal::Operator, T0).is_err());
}

#[derive(Debug, Clone)]
enum Op {
    Lease,
    Heartbeat(usize),
    Complete(usize),
    Fail(usize, bool),
    Park(usize),
    Retry,
    Cancel,
    Wait(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Lease),
        1 => (0usize..8).prop_map(Op::Heartbeat),
        2 => (0usize..8).prop_map(Op::Complete),
        2 => ((0usize..8), any::<bool>()).prop_map(|(i, r)| Op::Fail(i, r)),
        1 => (0usize..8).prop_map(Op::Park),
        1 => Just(Op::Retry),
        1 => Just(Op::Cancel),
        2 => (0i64..40).prop_map(Op::Wait),
    ]
}

proptest! {
    /// Random operation sequences: only the newest fence ever transitions the item, fences only
    /// grow, `done` is terminal, attempts stay within the policy, and the ledger chain of every
    /// entry produced verifies; `cancelled` is terminal too.
    #[test]
    fn random_operation_sequences_keep_the_invariants(ops in proptest::collection::vec(op(), 1..60)) {
        let policy = RetryPolicy::default();
        let (mut item, first) = Item::enqueue(id(1), Kind::Trawl, Priority::Normal, Principal::Operator, T0, None, None);
        let mut entries = vec![first];
        let mut leases: Vec<LeaseRecord> = Vec::new();
        let mut now = T0;
        for op in ops {
            let before = item.clone();
            let pick = |i: usize| if leases.is_empty() { None } else { Some(leases[i % leases.len()].clone()) };
            match op {
                Op::Lease => {
                    let n = leases.len() as u128 + 1;
                    match item.lease(lid(n), "w", TRAWL, &policy, TTL, now) {
                        Ok(LeaseResult::Granted(e)) => {
                            prop_assert!(before.is_leasable(now));
                            prop_assert_eq!(item.fence.0, before.fence.0 + 1);
                            leases.push(LeaseRecord { lease_id: lid(n), item_id: item.id, fence: item.fence, worker_id: "w".into(), granted_at: now, outcome: None });
                            entries.push(e);
                        }
                        Ok(LeaseResult::Exhausted(e)) => { prop_assert_eq!(item.state, ItemState::Failed); entries.push(e); }
                        Err(_) => prop_assert_eq!(&item, &before),
                    }
                }
                Op::Heartbeat(i) => if let Some(r) = pick(i) {
                    if item.heartbeat(&r, TRAWL, "w", TTL, MAX_RUN, now).is_err() { prop_assert_eq!(&item, &before); }
                    else { prop_assert_eq!(r.fence, item.fence); }
                },
                Op::Complete(i) => if let Some(r) = pick(i) {
                    match item.complete(&r, TRAWL, &json!({}), &[], now) {
                        Ok(e) => { prop_assert_eq!(r.fence, before.fence); prop_assert_eq!(before.state, ItemState::Leased); entries.push(e); }
                        Err(_) => prop_assert_eq!(&item, &before),
                    }
                },
                Op::Fail(i, retryable) => if let Some(r) = pick(i) {
                    match item.fail(&r, TRAWL, &json!({}), retryable, &policy, 0.5, now) {
                        Ok((_, e)) => { prop_assert_eq!(r.fence, before.fence); entries.push(e); }
                        Err(_) => prop_assert_eq!(&item, &before),
                    }
                },
                Op::Park(i) => if let Some(r) = pick(i) {
                    match item.park(&r, TRAWL, Some("sha256:d"), &json!({}), now) {
                        Ok(e) => { prop_assert_eq!(r.fence, before.fence); entries.push(e); }
                        Err(_) => prop_assert_eq!(&item, &before),
                    }
                },
                Op::Retry => match item.retry(Principal::Operator, now) {
                    Ok(e) => { prop_assert!(matches!(before.state, ItemState::Failed | ItemState::NeedsSubtool)); entries.push(e); }
                    Err(_) => prop_assert_eq!(&item, &before),
                },
                Op::Cancel => match item.cancel(Principal::Operator, "r", now) {
                    Ok(Some(e)) => { prop_assert_eq!(item.state, ItemState::Cancelled); entries.push(e); }
                    Ok(None) => { prop_assert_eq!(before.state, ItemState::Cancelled); prop_assert_eq!(&item, &before); }
                    Err(_) => { prop_assert_eq!(before.state, ItemState::Done); prop_assert_eq!(&item, &before); }
                },
                Op::Wait(s) => now += Duration::seconds(s),
            }
            prop_assert!(item.fence >= before.fence);
            prop_assert!(item.attempt <= policy.max_attempts);
            if matches!(before.state, ItemState::Done | ItemState::Cancelled) { prop_assert_eq!(&item, &before); }
            prop_assert_eq!(item.lease.is_some(), item.state == ItemState::Leased);
        }
        let head = verify_chain("item", &item.id.to_string(), &entries).unwrap();
        prop_assert_eq!(head, item.chain);
    }
}

#[test]
fn image_digests_are_sha256_and_64_lowercase_hex_digits() {
    assert!(is_image_digest(&format!("sha256:{}", "ab".repeat(32))));
    assert!(!is_image_digest(&format!("sha256:{}", "AB".repeat(32))));
    assert!(!is_image_digest(&format!("sha256:{}", "ab".repeat(31))));
    assert!(!is_image_digest(&format!("sha512:{}", "ab".repeat(32))));
}

#[test]
fn a_parked_item_replays_for_any_other_digest_but_not_its_own() {
    let item = parked_on("sha256:old");
    assert!(!item.replays_for("sha256:old"));
    assert!(item.replays_for("sha256:new"));
}

#[test]
fn replay_requeues_a_parked_item_keeping_priority_and_attempts() {
    let mut item = parked_on("sha256:old");
    let entry = item
        .replay(Principal::Shipkeeper, "sha256:new", T0)
        .unwrap();
    assert_eq!(
        (item.state, item.attempt, item.priority),
        (ItemState::Queued, 0, Priority::Normal)
    );
    assert_eq!(item.parked_digest, None);
    assert_eq!(
        entry.entry.data,
        r#"{"new_digest":"sha256:new","old_digest":"sha256:old"}"#
    );
}

#[test]
fn only_parked_items_can_be_replayed() {
    let mut item = queued();
    assert_eq!(
        refused_from(item.replay(Principal::Shipkeeper, "sha256:x", T0)),
        Some(ItemState::Queued)
    );
}

#[test]
fn an_item_bounced_by_outdated_pods_fails_through_the_attempt_limit() {
    let policy = allowing(3);
    let mut item = queued();
    let mut last = Vec::new();
    for n in 1..=3 {
        item.lease(lid(n), "old", TRAWL, &policy, TTL, T0).unwrap();
        let rec = LeaseRecord {
            lease_id: lid(n),
            item_id: item.id,
            fence: item.fence,
            worker_id: "old".into(),
            granted_at: T0,
            outcome: None,
        };
        last = bounced_to_a_new_image(&mut item, &rec, &policy);
    }
    assert_eq!(item.state, ItemState::Failed);
    assert_eq!(events(&last), ["parked", "failed"]);
}

#[test]
fn park_and_replay_charges_the_attempt_and_requeues() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    let entries = bounced_to_a_new_image(&mut item, &rec, &RetryPolicy::default());
    assert_eq!((item.state, item.attempt), (ItemState::Queued, 1));
    assert_eq!(events(&entries), ["parked", "replayed"]);
}

#[test]
fn a_delayed_item_is_not_leasable_before_its_not_before() {
    let later = T0 + Duration::seconds(60);
    let (item, _) = enqueued(Some(later));
    assert!(!item.is_leasable(later - Duration::seconds(1)));
    assert!(item.is_leasable(later));
}

#[test]
fn a_delayed_item_takes_its_place_in_line_at_its_not_before() {
    let later = T0 + Duration::seconds(60);
    let (item, _) = enqueued(Some(later));
    assert_eq!(item.place_in_line(T0), later);
}

#[test]
fn a_not_before_in_the_past_is_no_delay_and_no_place_ahead_in_line() {
    let (item, entry) = enqueued(Some(T0 - Duration::hours(1)));
    assert_eq!(item.not_before, None);
    assert_eq!(item.place_in_line(T0), T0);
    assert!(!entry.entry.data.contains("not_before"));
}

#[test]
fn a_delayed_items_enqueue_entry_records_its_not_before() {
    let later = T0 + Duration::seconds(60);
    let (_, entry) = enqueued(Some(later));
    let data: Value = serde_json::from_str(&entry.entry.data).unwrap();
    assert_eq!(
        data["not_before"],
        json!(later.unix_timestamp_nanos() / 1000)
    );
}

/// The default maximum run time in these tests.
const MAX_RUN: Duration = Duration::hours(1);

/// A trawl item leased by `trawl-1` at `T0`, then heartbeated by `worker` at `at` under a
/// maximum run time of `max_run`: the item, its lease and the heartbeat's answer.
fn heartbeated(
    worker: &str,
    max_run: Duration,
    at: OffsetDateTime,
) -> (Item, LeaseRecord, Result<OffsetDateTime, TransitionError>) {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    let r = item.heartbeat(&rec, TRAWL, worker, TTL, max_run, at);
    (item, rec, r)
}

#[test]
fn a_heartbeat_at_the_maximum_run_time_is_refused_naming_the_limit() {
    let (_, _, r) = heartbeated("trawl-1", Duration::minutes(5), T0 + Duration::minutes(5));
    assert_eq!(
        r,
        Err(TransitionError::TimedOut {
            max_run_ms: 300_000
        })
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "the lease passed its kind's maximum run time of 300000 ms and is no longer extended"
    );
}

#[test]
fn a_heartbeat_before_the_maximum_run_time_extends_the_lease() {
    let at = T0 + Duration::minutes(4);
    let (_, _, r) = heartbeated("trawl-1", Duration::minutes(5), at);
    assert_eq!(r, Ok(at + TTL));
}

/// An item leased at `T0` whose worker heartbeated at 4:59, so that its lease runs on past a
/// five-minute maximum run time: the item and its lease.
fn kept_alive_past_five_minutes() -> (Item, LeaseRecord) {
    let (item, rec, r) = heartbeated("trawl-1", Duration::minutes(5), T0 + Duration::seconds(299));
    r.unwrap();
    (item, rec)
}

#[test]
fn timing_out_cuts_the_lease_at_the_limit_and_records_it_once() {
    let (mut item, rec) = kept_alive_past_five_minutes();
    let max_run = Duration::minutes(5);
    let now = T0 + Duration::seconds(305);
    let entry = item.time_out(&rec, TRAWL, max_run, now).unwrap();
    assert_eq!(
        (
            entry.entry.event.as_str(),
            entry.entry.from_state.as_deref(),
            entry.entry.fence
        ),
        ("timed_out", Some("leased"), Some(1))
    );
    assert_eq!(item.lease.as_ref().unwrap().expires_at, T0 + max_run);
    assert!(item.is_leasable(now), "leasable again, as an expired lease");
    assert_eq!(
        item.time_out(&rec, TRAWL, max_run, now),
        None,
        "recorded once"
    );
}

#[test]
fn a_lease_that_expired_before_its_limit_is_not_timed_out() {
    let mut item = queued();
    let rec = lease(&mut item, 1, T0);
    assert_eq!(
        item.time_out(&rec, TRAWL, Duration::minutes(5), T0 + Duration::minutes(6)),
        None
    );
}

#[test]
fn a_timed_out_lease_can_still_complete_until_superseded() {
    let (mut item, rec) = kept_alive_past_five_minutes();
    item.time_out(
        &rec,
        TRAWL,
        Duration::minutes(5),
        T0 + Duration::seconds(305),
    )
    .unwrap();
    let d = request_digest(OutcomeKind::Completed, &json!({}));
    assert_eq!(
        item.check_finish(&rec, TRAWL, OutcomeKind::Completed, &d),
        Ok(LeaseUse::Proceed)
    );
}
