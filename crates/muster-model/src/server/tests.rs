use super::*;
use crate::model::Config;
use crate::state::{Event, Grant};

fn model() -> LeaseModel {
    LeaseModel::new(Config::default())
}

const COMPLETE_0: Request = Request::Finish {
    worker: 0,
    lease: 0,
    finish: Finish::Complete,
};

fn leased_to_worker_0(m: &LeaseModel) -> State {
    let s = m.initial_state();
    let (s, response) = m
        .serve(&s, Request::Lease { worker: 0 })
        .expect("in bounds");
    assert_eq!(response, Response::Leased { lease: 0 });
    s
}

/// Worker 1 asks for a lease once worker 0's lease has expired.
fn worker_1_leases_after_the_expiry(m: &LeaseModel) -> (State, Response) {
    let mut s = leased_to_worker_0(m);
    s.now = 1;
    m.serve(&s, Request::Lease { worker: 1 })
        .expect("in bounds")
}

#[test]
fn the_first_lease_takes_the_first_item_with_fence_one() {
    let m = model();
    let s = leased_to_worker_0(&m);
    assert_eq!(s.items[0].state, ItemState::Leased);
    assert_eq!((s.items[0].fence, s.items[0].attempt), (1, 1));
    assert_eq!(
        s.items[0].lease,
        Some(Grant {
            lease: 0,
            worker: 0,
            expires: 1
        })
    );
    assert_eq!(s.leases[0].promised_until, 1);
    assert_eq!(s.items[1].state, ItemState::Queued);
}

#[test]
fn a_completion_writes_the_result_the_next_item_and_the_outcome_once() {
    let m = model();
    let s = leased_to_worker_0(&m);
    let (s, first) = m.serve(&s, COMPLETE_0).expect("in bounds");
    assert_eq!(first, Response::Finished(Reply::Ok { replayed: false }));
    let (again, second) = m.serve(&s, COMPLETE_0).expect("in bounds");
    assert_eq!(second, Response::Finished(Reply::Ok { replayed: true }));
    assert_eq!(again.items, s.items);
    assert_eq!(again.ledger, s.ledger);
    assert_eq!(again.children, vec![1, 0]);
    assert!(again.items[0].has_result);
    assert_eq!(
        again.ledger[0].iter().map(|r| r.event).collect::<Vec<_>>(),
        vec![Event::Enqueued, Event::Leased, Event::Completed]
    );
    assert_eq!(again.witness, Some(Witness::ReplayedCompletion));
    assert!(again.false_answers.is_empty());
}

#[test]
fn a_completion_after_a_re_lease_is_refused_and_recorded_as_late() {
    let m = model();
    // The first item's lease expired: the next lease request takes it again.
    let (s, response) = worker_1_leases_after_the_expiry(&m);
    assert_eq!(response, Response::Leased { lease: 1 });
    assert_eq!(s.items[0].fence, 2);
    let (after, late) = m.serve(&s, COMPLETE_0).expect("in bounds");
    assert_eq!(late, Response::Finished(Reply::LeaseLost));
    assert_eq!(after.items, s.items);
    assert_eq!(after.children, vec![0, 0]);
    assert_eq!(
        after.ledger[0].last().map(|r| r.event),
        Some(Event::LateResult)
    );
    assert_eq!(
        after.leases[0].outcome.map(|o| o.kind),
        Some(Recorded::Late)
    );
    // Delivered again, the late result is refused without a second ledger row.
    let (again, refused) = m.serve(&after, COMPLETE_0).expect("in bounds");
    assert_eq!(refused, Response::Finished(Reply::LeaseLost));
    assert_eq!(again.ledger, after.ledger);
}

#[test]
fn a_heartbeat_revives_an_expired_lease_that_nobody_superseded() {
    let m = model();
    let mut s = leased_to_worker_0(&m);
    s.now = 1;
    let heartbeat = Request::Heartbeat {
        worker: 0,
        lease: 0,
    };
    let (s, response) = m.serve(&s, heartbeat).expect("in bounds");
    assert_eq!(response, Response::HeartbeatOk);
    assert_eq!(s.items[0].lease.map(|g| g.expires), Some(2));
    assert_eq!(s.leases[0].promised_until, 2);
    // Revived, the item is not leasable: the second item is handed out instead.
    let (s, response) = m
        .serve(&s, Request::Lease { worker: 1 })
        .expect("in bounds");
    assert_eq!(response, Response::Leased { lease: 1 });
    assert_eq!(s.leases[1].item, 1);
}

#[test]
fn a_retryable_failure_requeues_the_item_one_tick_later() {
    let m = model();
    let s = leased_to_worker_0(&m);
    let fail = Request::Finish {
        worker: 0,
        lease: 0,
        finish: Finish::Fail { retryable: true },
    };
    let (s, response) = m.serve(&s, fail).expect("in bounds");
    assert_eq!(response, Response::Finished(Reply::Ok { replayed: false }));
    assert_eq!(
        (s.items[0].state, s.items[0].not_before, s.items[0].lease),
        (ItemState::Queued, Some(1), None)
    );
    // Equal jitter at zero, capped at the base: one second, one tick, on every attempt.
    assert_eq!(m.retry_policy().delay(1, JITTER), Duration::seconds(1));
    assert_eq!(m.retry_policy().delay(2, JITTER), Duration::seconds(1));
}

#[test]
fn an_expired_lease_with_no_attempts_left_fails_its_item_at_the_next_lease_request() {
    let m = LeaseModel::new(Config {
        max_attempts: 1,
        ..Config::default()
    });
    let (s, response) = worker_1_leases_after_the_expiry(&m);
    // The first item fails; the second is handed out in the same transaction.
    assert_eq!(response, Response::Leased { lease: 1 });
    assert_eq!(s.items[0].state, ItemState::Failed);
    assert_eq!(s.ledger[0].last().map(|r| r.event), Some(Event::Expired));
    assert_eq!(s.items[1].state, ItemState::Leased);
}

#[test]
fn a_lease_beyond_the_bound_is_not_explored() {
    let m = LeaseModel::new(Config {
        max_leases: 1,
        ..Config::default()
    });
    let s = leased_to_worker_0(&m);
    assert_eq!(m.serve(&s, Request::Lease { worker: 1 }), None);
}

#[test]
fn an_expired_lease_on_the_last_attempt_is_kept_through_the_final_grace() {
    let m = LeaseModel::new(Config {
        max_attempts: 1,
        final_grace: 1,
        ..Config::default()
    });
    let (s, response) = worker_1_leases_after_the_expiry(&m);
    // Tick 1: worker 0's lease expired, but its grace runs to tick 2: the second item is
    // handed out, the first stays with worker 0.
    assert_eq!(response, Response::Leased { lease: 1 });
    assert_eq!(s.items[0].state, ItemState::Leased);
    let (s, completed) = m.serve(&s, COMPLETE_0).expect("in bounds");
    assert_eq!(completed, Response::Finished(Reply::Ok { replayed: false }));
    assert_eq!(s.items[0].state, ItemState::Done);
}

#[test]
fn past_the_final_grace_a_lease_request_fails_the_item() {
    let m = LeaseModel::new(Config {
        max_attempts: 1,
        final_grace: 1,
        items: 1,
        ..Config::default()
    });
    let mut s = leased_to_worker_0(&m);
    s.now = 2;
    let (s, response) = m
        .serve(&s, Request::Lease { worker: 1 })
        .expect("in bounds");
    assert_eq!(response, Response::NoWork);
    assert_eq!(s.items[0].state, ItemState::Failed);
    assert_eq!(s.ledger[0].last().map(|r| r.event), Some(Event::Expired));
}
