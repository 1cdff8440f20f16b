use super::*;

/// Submits `reqs` on lane 1 and keeps their receivers open (a closed one is dropped).
fn submit_all<A>(
    c: &Combiner<u8, u32, A>,
    reqs: impl IntoIterator<Item = u32>,
) -> Vec<oneshot::Receiver<A>> {
    reqs.into_iter().map(|r| c.submit(1, r).0).collect()
}

fn take_all<R, A>(c: &Combiner<u8, R, A>) -> Option<Vec<Waiting<R, A>>> {
    c.next_batch(1, |_| true)
}

#[test]
fn the_first_request_of_an_idle_lane_starts_a_drainer() {
    let c: Combiner<u8, u32, u32> = Combiner::new(2);
    assert!(c.submit(1, 10).1);
}

#[test]
fn requests_beyond_max_running_join_the_running_drainers() {
    let c: Combiner<u8, u32, u32> = Combiner::new(2);
    let started: Vec<bool> = (0..4).map(|i| c.submit(1, i).1).collect();
    assert_eq!(started, [true, true, false, false]);
}

#[test]
fn lanes_are_independent() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    assert!(c.submit(1, 10).1);
    assert!(c.submit(2, 20).1);
}

#[test]
fn a_batch_takes_every_queued_request_in_order() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    let _held = submit_all(&c, 0..3);
    let batch: Vec<u32> = take_all(&c).unwrap().iter().map(|w| w.req).collect();
    assert_eq!(batch, [0, 1, 2]);
}

#[test]
fn requests_pick_refuses_stay_queued_for_the_next_batch_in_order() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    let _held = submit_all(&c, [1, 2, 1, 3, 1]);
    let mut seen = std::collections::HashSet::new();
    let first: Vec<u32> = c
        .next_batch(1, |r| seen.insert(*r))
        .unwrap()
        .iter()
        .map(|w| w.req)
        .collect();
    let second: Vec<u32> = take_all(&c).unwrap().iter().map(|w| w.req).collect();
    assert_eq!((first, second), (vec![1, 2, 3], vec![1, 1]));
}

#[test]
fn an_empty_queue_ends_the_drainer_and_frees_its_place() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    c.submit(1, 10);
    take_all(&c);
    assert!(take_all(&c).is_none());
    assert!(c.submit(1, 11).1);
}

#[test]
fn answers_reach_the_waiting_receiver() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    let (mut rx, _) = c.submit(1, 10);
    for w in take_all(&c).unwrap() {
        w.answer.send(w.req * 2).unwrap();
    }
    assert_eq!(rx.try_recv(), Ok(20));
}

#[test]
fn a_drainer_that_dies_fails_the_queue_when_it_was_the_last() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    let (_, started) = c.submit(1, 10);
    assert!(started);
    let (mut queued, _) = c.submit(1, 11);
    {
        let mut guard = DrainGuard::new(&c, 1);
        let taken = guard.next_batch(|r| *r == 10);
        assert_eq!(taken.map(|b| b.len()), Some(1));
    } // dropped before the lane was empty, as a panic would
    assert_eq!(
        queued.try_recv(),
        Err(tokio::sync::oneshot::error::TryRecvError::Closed)
    );
}

#[test]
fn requeued_requests_lead_the_next_batch_in_their_order() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    let _held = submit_all(&c, 0..4);
    let mut guard = DrainGuard::new(&c, 1);
    let mut first = guard.next_batch(|r| *r < 3).unwrap();
    let again: Vec<_> = first.drain(1..).collect();
    guard.requeue(again);
    let next: Vec<u32> = guard
        .next_batch(|_| true)
        .unwrap()
        .iter()
        .map(|w| w.req)
        .collect();
    assert_eq!(next, [1, 2, 3]);
}

#[test]
fn requests_whose_caller_is_gone_are_dropped_not_batched() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    let (gone, _) = c.submit(1, 10);
    let (_kept, _) = c.submit(1, 11);
    drop(gone);
    let batch: Vec<u32> = take_all(&c).unwrap().iter().map(|w| w.req).collect();
    assert_eq!(batch, [11]);
}

#[test]
fn a_drainer_that_dies_frees_its_place() {
    let c: Combiner<u8, u32, u32> = Combiner::new(1);
    c.submit(1, 10);
    drop(DrainGuard::new(&c, 1));
    assert!(c.submit(1, 11).1);
}

#[test]
fn a_drainer_that_ran_to_its_end_does_not_free_a_second_place() {
    let c: Combiner<u8, u32, u32> = Combiner::new(2);
    c.submit(1, 10);
    {
        let mut guard = DrainGuard::new(&c, 1);
        while guard.next_batch(|_| true).is_some() {}
    }
    let started: Vec<bool> = (0..3).map(|i| c.submit(1, i).1).collect();
    assert_eq!(started, [true, true, false]);
}
