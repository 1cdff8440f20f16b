//! Group commit: concurrent single requests of one lane (a worker kind) are answered by one
//! batch transaction instead of one transaction each.
//!
//! A request joins its lane's queue. While fewer than `max_running` batches of that lane are
//! being written, the request starts a drainer; otherwise one of the running drainers takes it
//! with its next batch. A drainer takes every queued request it may (the caller's `pick` says
//! which: at most so many, no lease twice), writes them in one transaction, answers each, and
//! looks again until the queue is empty. A lone request is therefore written at once, as
//! before; under load the batches grow by themselves, with no timer and no added wait.
//!
//! The drainer runs as its own task, so a client that hangs up does not cancel a transaction
//! that other requests share. If a drainer dies (a panic), its requests and, when it was the
//! lane's last drainer, everything still queued are answered with an internal error instead
//! of waiting forever.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// One queued request and where its answer goes.
pub(crate) struct Waiting<R, A> {
    pub(crate) req: R,
    pub(crate) answer: oneshot::Sender<A>,
}

struct Lane<R, A> {
    queue: VecDeque<Waiting<R, A>>,
    running: usize,
}

impl<R, A> Default for Lane<R, A> {
    fn default() -> Self {
        Lane {
            queue: VecDeque::new(),
            running: 0,
        }
    }
}

/// The lanes of one kind of request.
pub(crate) struct Combiner<K, R, A> {
    lanes: Mutex<HashMap<K, Lane<R, A>>>,
    max_running: usize,
}

impl<K: Hash + Eq + Copy, R, A> Combiner<K, R, A> {
    pub(crate) fn new(max_running: usize) -> Self {
        Combiner {
            lanes: Mutex::new(HashMap::new()),
            max_running: max_running.max(1),
        }
    }

    fn lanes(&self) -> MutexGuard<'_, HashMap<K, Lane<R, A>>> {
        // The lock is never held across an await or a call that can panic halfway through a
        // change, so a poisoned lock still guards consistent lanes.
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `req` on `key`'s lane. `true` when the caller must start a drainer for the lane
    /// (and then call [`Combiner::next_batch`] until it says the lane is empty).
    pub(crate) fn submit(&self, key: K, req: R) -> (oneshot::Receiver<A>, bool) {
        let (answer, receiver) = oneshot::channel();
        let mut lanes = self.lanes();
        let lane = lanes.entry(key).or_default();
        lane.queue.push_back(Waiting { req, answer });
        let start = lane.running < self.max_running;
        if start {
            lane.running += 1;
        }
        (receiver, start)
    }

    /// Queues `req` on `key`'s lane and waits for its answer; `start_drainer` is called when
    /// the lane needs one more drainer (which must then drain it through a [`DrainGuard`]).
    /// `None` when the request went unanswered (its drainer died).
    pub(crate) async fn call(&self, key: K, req: R, start_drainer: impl FnOnce()) -> Option<A> {
        let (answer, start) = self.submit(key, req);
        if start {
            start_drainer();
        }
        answer.await.ok()
    }

    /// The next batch for a drainer of `key`'s lane: the queued requests `pick` accepts, in
    /// queue order (the others stay queued, in order). `pick` sees every queued request; the
    /// first is taken even when it refuses it. `None` when there is nothing left, and
    /// then the drainer has stopped (it must not call again).
    pub(crate) fn next_batch(
        &self,
        key: K,
        mut pick: impl FnMut(&R) -> bool,
    ) -> Option<Vec<Waiting<R, A>>> {
        let mut lanes = self.lanes();
        let lane = lanes.entry(key).or_default();
        let mut batch = Vec::new();
        let mut rest = VecDeque::with_capacity(lane.queue.len());
        while let Some(waiting) = lane.queue.pop_front() {
            if waiting.answer.is_closed() {
                // Its caller is gone (hung up, timed out): writing it would lease items nobody
                // receives, or complete what the worker will deliver again anyway.
                continue;
            }
            // The first is always taken, so that a queue is never left without a drainer.
            let picked = pick(&waiting.req);
            if batch.is_empty() || picked {
                batch.push(waiting);
            } else {
                rest.push_back(waiting);
            }
        }
        lane.queue = rest;
        if batch.is_empty() {
            lane.running = lane.running.saturating_sub(1);
            return None;
        }
        Some(batch)
    }

    /// Puts requests back at the head of `key`'s lane, in their order, for a running drainer's
    /// next batch.
    fn requeue_front(&self, key: K, waiting: Vec<Waiting<R, A>>) {
        let mut lanes = self.lanes();
        let lane = lanes.entry(key).or_default();
        for w in waiting.into_iter().rev() {
            lane.queue.push_front(w);
        }
    }

    /// A drainer of `key`'s lane ended without `next_batch` saying so (it panicked): it no
    /// longer counts, and when no other drainer is left the queue is dropped, which answers
    /// every queued request's receiver with an error.
    pub(crate) fn abandon(&self, key: K) {
        let dropped = {
            let mut lanes = self.lanes();
            let lane = lanes.entry(key).or_default();
            lane.running = lane.running.saturating_sub(1);
            if lane.running == 0 {
                std::mem::take(&mut lane.queue)
            } else {
                VecDeque::new()
            }
        };
        drop(dropped);
    }
}

/// Held by a drainer: calls [`Combiner::abandon`] unless the drainer ran to its end.
pub(crate) struct DrainGuard<'a, K: Hash + Eq + Copy, R, A> {
    combiner: &'a Combiner<K, R, A>,
    key: K,
    finished: bool,
}

impl<'a, K: Hash + Eq + Copy, R, A> DrainGuard<'a, K, R, A> {
    pub(crate) fn new(combiner: &'a Combiner<K, R, A>, key: K) -> Self {
        DrainGuard {
            combiner,
            key,
            finished: false,
        }
    }

    /// The next batch (see [`Combiner::next_batch`]); after `None` the guard does nothing.
    pub(crate) fn next_batch(
        &mut self,
        pick: impl FnMut(&R) -> bool,
    ) -> Option<Vec<Waiting<R, A>>> {
        let batch = self.combiner.next_batch(self.key, pick);
        self.finished = batch.is_none();
        batch
    }

    /// Requests of the last batch that must go with the next one instead of being answered.
    pub(crate) fn requeue(&self, waiting: Vec<Waiting<R, A>>) {
        if !waiting.is_empty() {
            self.combiner.requeue_front(self.key, waiting);
        }
    }
}

impl<K: Hash + Eq + Copy, R, A> Drop for DrainGuard<'_, K, R, A> {
    fn drop(&mut self) {
        if !self.finished {
            self.combiner.abandon(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
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
}
