//! `Combiner`, the batching algorithm behind group commit, generic over what it batches:
//! concurrent single requests of one lane (a key; the service's is the worker kind) are answered
//! by one batch transaction instead of one transaction each. It knows no use case;
//! `service/group.rs` puts leases and completions in its lanes.
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
mod tests;
