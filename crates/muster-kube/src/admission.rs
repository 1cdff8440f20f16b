//! Admission of reviews: token buckets per peer and for the replica (how many reviews of
//! unknown tokens may start), and lanes (how many reviews run at once, and how many may wait
//! for a slot, for how long). Every refusal is immediate or bounded in time: nothing waits
//! without end.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

/// A rate: `per_second` tokens refilled, at most `burst` held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Rate {
    /// `per_second` reviews a second, with a burst of twice as many.
    pub fn of(per_second: u32) -> Self {
        Rate {
            per_second: f64::from(per_second),
            burst: per_second.saturating_mul(2),
        }
    }
}

/// A token bucket, full when made.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Self {
        Bucket {
            tokens: f64::from(rate.burst),
            at: now,
        }
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst));
        self.at = now;
    }

    fn has_one(&self) -> bool {
        self.tokens >= 1.0
    }

    fn is_full(&self, rate: Rate) -> bool {
        self.tokens >= f64::from(rate.burst)
    }
}

/// Why a review was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    PeerRate,
    GlobalRate,
    /// Every slot busy and the queue full, or no slot came free within the wait.
    Queue,
}

impl Refusal {
    pub(crate) const ALL: [Refusal; 3] = [Refusal::PeerRate, Refusal::GlobalRate, Refusal::Queue];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::PeerRate => "peer_rate",
            Refusal::GlobalRate => "global_rate",
            Refusal::Queue => "queue",
        }
    }
}

/// The buckets of unknown tokens' reviews: one per peer, one for the replica. A review takes a
/// token from both, or from neither.
#[derive(Debug)]
pub(crate) struct Rates {
    peer: Rate,
    global: Rate,
    /// At most this many peers' buckets are kept; full buckets are dropped first.
    max_peers: usize,
    state: std::sync::Mutex<RatesState>,
}

#[derive(Debug)]
struct RatesState {
    global: Bucket,
    peers: HashMap<IpAddr, Bucket>,
}

/// Where calls of an unknown peer are counted.
const NO_PEER: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

impl Rates {
    pub(crate) fn new(peer: Rate, global: Rate, max_peers: usize, now: Instant) -> Self {
        Rates {
            peer,
            global,
            max_peers: max_peers.max(1),
            state: std::sync::Mutex::new(RatesState {
                global: Bucket::full(global, now),
                peers: HashMap::new(),
            }),
        }
    }

    /// Takes a token for one review from `peer` at `now`, or says which limit refuses it.
    pub(crate) fn admit(&self, peer: Option<IpAddr>, now: Instant) -> Result<(), Refusal> {
        let peer = peer.map_or(NO_PEER, |p| p.to_canonical());
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let RatesState { global, peers } = &mut *state;
        if !peers.contains_key(&peer) && peers.len() >= self.max_peers {
            // Room for a new peer: forget those whose bucket refilled (they owe nothing).
            let rate = self.peer;
            peers.retain(|_, b| {
                b.refill(rate, now);
                !b.is_full(rate)
            });
            if peers.len() >= self.max_peers {
                return Err(Refusal::PeerRate);
            }
        }
        let bucket = peers
            .entry(peer)
            .or_insert_with(|| Bucket::full(self.peer, now));
        bucket.refill(self.peer, now);
        if !bucket.has_one() {
            return Err(Refusal::PeerRate);
        }
        global.refill(self.global, now);
        if !global.has_one() {
            return Err(Refusal::GlobalRate);
        }
        bucket.tokens -= 1.0;
        global.tokens -= 1.0;
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn peers(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .peers
            .len()
    }
}

/// Slots for reviews running at once, with a bounded queue in front: a review waits for a slot
/// only while fewer than `queue` others wait, and at most `wait`.
#[derive(Debug)]
pub(crate) struct Lane {
    slots: Semaphore,
    waiting: AtomicUsize,
    queue: usize,
    wait: Duration,
}

/// One fewer waiting when dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Lane {
    pub(crate) fn new(slots: usize, queue: usize, wait: Duration) -> Self {
        Lane {
            slots: Semaphore::new(slots.max(1)),
            waiting: AtomicUsize::new(0),
            queue,
            wait,
        }
    }

    /// A slot: at once when one is free, else after a bounded wait in the queue.
    pub(crate) async fn enter(&self) -> Result<SemaphorePermit<'_>, Refusal> {
        if let Ok(permit) = self.slots.try_acquire() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(Refusal::Queue);
        }
        let _waiting = Waiting(&self.waiting);
        match tokio::time::timeout(self.wait, self.slots.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(Refusal::Queue),
        }
    }
}

/// Counters by refusal.
#[derive(Debug, Default)]
pub(crate) struct Refused([AtomicU64; 3]);

impl Refused {
    pub(crate) fn count(&self, r: Refusal) {
        self.0[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL
            .iter()
            .map(|&r| (r.label(), self.0[r as usize].load(Ordering::Relaxed)))
            .collect()
    }
}
