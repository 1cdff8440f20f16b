use muster_domain::ItemState;

use super::*;
use crate::state::Witness;

fn model() -> LeaseModel {
    LeaseModel::new(Config::default())
}

fn step(m: &LeaseModel, s: &State, action: Action) -> State {
    m.next_state(s, action).expect("the step is within bounds")
}

/// The model without symmetry reduction: the workers keep their numbers.
fn numbered_model() -> LeaseModel {
    LeaseModel::new(Config {
        symmetry: false,
        ..Config::default()
    })
}

/// Worker 0 asked for a lease and its request was delivered: it holds the first item.
fn worker_0_holds_a_lease(m: &LeaseModel) -> State {
    let s = step(m, &m.initial_state(), Action::RequestLease(0));
    step(m, &s, Action::Deliver(Request::Lease { worker: 0 }))
}

#[test]
fn states_that_differ_only_in_worker_numbering_have_one_representative() {
    let m = model();
    let s = m.initial_state();
    let first = step(&m, &s, Action::RequestLease(0));
    let second = step(&m, &s, Action::RequestLease(1));
    assert_eq!(first, second);
    assert_eq!(first.workers, vec![Worker::Idle, Worker::AwaitingLease]);
    assert_eq!(
        first.requests.iter().copied().collect::<Vec<_>>(),
        vec![Request::Lease { worker: 1 }]
    );
}

#[test]
fn without_symmetry_the_workers_keep_their_numbers() {
    let m = numbered_model();
    let s = step(&m, &m.initial_state(), Action::RequestLease(0));
    assert_eq!(s.workers, vec![Worker::AwaitingLease, Worker::Idle]);
}

#[test]
fn a_lease_whose_answer_is_lost_is_orphaned_and_its_worker_idle_again() {
    let m = model();
    let s = step(&m, &m.initial_state(), Action::RequestLease(0));
    let lease = Request::Lease { worker: 1 };
    let s = step(&m, &s, Action::DeliverAnswerLost(lease));
    assert_eq!(s.workers, vec![Worker::Idle, Worker::Idle]);
    assert_eq!(s.items[0].state, ItemState::Leased);
    assert_eq!(s.leases.len(), 1);
    assert!(s.requests.is_empty());
}

#[test]
fn a_lost_answer_to_a_finishing_call_puts_the_spooled_result_back_in_flight() {
    let m = numbered_model();
    let s = step(
        &m,
        &worker_0_holds_a_lease(&m),
        Action::Finish(0, Finish::Complete),
    );
    let complete = Request::Finish {
        worker: 0,
        lease: 0,
        finish: Finish::Complete,
    };
    let lost = step(&m, &s, Action::DeliverAnswerLost(complete));
    assert_eq!(lost.items[0].state, ItemState::Done);
    assert_eq!(
        lost.workers[0],
        Worker::Delivering {
            lease: 0,
            finish: Finish::Complete
        }
    );
    assert!(lost.requests.contains(&complete));
    let replayed = step(&m, &lost, Action::Deliver(complete));
    assert_eq!(replayed.witness, Some(Witness::ReplayedCompletion));
    assert_eq!(replayed.workers[0], Worker::Idle);
    assert_eq!(replayed.children, vec![1, 0]);
    assert!(replayed.requests.is_empty());
}

#[test]
fn a_heartbeat_is_offered_only_when_it_could_move_the_expiry() {
    let m = numbered_model();
    let s = worker_0_holds_a_lease(&m);
    let offered = |s: &State| {
        let mut actions = Vec::new();
        m.actions(s, &mut actions);
        actions.contains(&Action::Heartbeat(0))
    };
    assert!(
        !offered(&s),
        "granted at tick 0, the lease runs to tick 1 already"
    );
    let s = step(&m, &s, Action::Tick);
    assert!(offered(&s));
}
