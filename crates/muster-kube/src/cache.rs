//! Review answers by token digest: a cache that keeps each answer for one time to live and at
//! most `capacity` of them, the oldest evicted first in O(1) (answers all live equally long,
//! so the oldest inserted is the first to expire: a queue in insertion order finds it).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Answers by key for `ttl`, at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct TtlCache<V> {
    ttl: Duration,
    capacity: usize,
    entries: HashMap<[u8; 32], (Instant, V)>,
    /// Keys in insertion order with their insertion time; an entry whose time no longer
    /// matches the map's was replaced or removed, and is skipped.
    pub(crate) order: VecDeque<([u8; 32], Instant)>,
}

impl<V: Copy> TtlCache<V> {
    pub(crate) fn new(ttl: Duration, capacity: usize) -> Self {
        TtlCache {
            ttl,
            capacity,
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Answers kept now.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// When the answer for `key` was stored, if it is still fresh at `now`.
    pub(crate) fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<(Instant, V)> {
        let (at, value) = *self.entries.get(key)?;
        if now.saturating_duration_since(at) < self.ttl {
            Some((at, value))
        } else {
            self.entries.remove(key);
            None
        }
    }

    /// Forgets the answer for `key`.
    pub(crate) fn remove(&mut self, key: &[u8; 32]) {
        self.entries.remove(key);
    }

    /// Changes the answer kept for `key`, if there is one, keeping when it was stored.
    pub(crate) fn update(&mut self, key: &[u8; 32], change: impl FnOnce(&mut V)) {
        if let Some((_, value)) = self.entries.get_mut(key) {
            change(value);
        }
    }

    pub(crate) fn insert(&mut self, key: [u8; 32], value: V, now: Instant) {
        if self.capacity == 0 || self.ttl.is_zero() {
            return;
        }
        self.entries.insert(key, (now, value));
        self.order.push_back((key, now));
        // The front is the oldest: drop it while it is expired, stale or over the capacity.
        // Each queued key is popped once, so an insert costs O(1) amortized.
        while let Some(&(front, at)) = self.order.front() {
            let live = self.entries.get(&front).is_some_and(|(t, _)| *t == at);
            let expired = now.saturating_duration_since(at) >= self.ttl;
            let over = self.entries.len() > self.capacity;
            if live && !expired && !over {
                break;
            }
            self.order.pop_front();
            if live {
                self.entries.remove(&front);
            }
        }
    }
}
