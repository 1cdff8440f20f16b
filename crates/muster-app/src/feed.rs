//! The live feed: one pump per process reads the ledger from Logbook in order (never skipping a
//! late commit, see `muster_domain::feed::Cursor`), keeps queue depths, and publishes events to
//! subscribers through a bounded broadcast buffer. Every replica runs its own pump on the same
//! ledger, so every replica serves the same feed.
//!
//! The cost of one more subscriber is kept near the cost of copying its bytes: each event is
//! encoded once, SSE framing included, when it is published ([`Frame`]), and every subscriber
//! writes that same buffer; a subscriber's ready events leave in one write
//! ([`Subscription::next_chunk`]). The pump reads the ledger at most every `read_spacing`, so
//! neither the number of commits nor the number of subscribers puts feed work on the path of a
//! lease or a completion (they only bump a counter after their commit).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_domain::feed::{Cursor, Depths, FeedRow};
use muster_domain::{ItemState, Kind, Priority};
use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::{Semaphore, broadcast};

use crate::AppError;
use crate::ports::{Clock, FeedSource, HealthLog, Jitter, LedgerEvent};
use crate::signal::WorkSignal;
use crate::views::HealthView;

mod frame;
mod subscription;

pub use frame::Frame;
use subscription::Replay;
pub use subscription::{End, Subscription};

/// Tuning of the feed.
#[derive(Debug, Clone)]
pub struct FeedSettings {
    /// Events a subscriber may fall behind before it is disconnected (it resumes with
    /// Last-Event-ID). The buffer is shared by all subscribers.
    pub buffer: usize,
    /// Heartbeat interval per subscriber (the contract: at least every 5 s).
    pub heartbeat: Duration,
    /// Least interval between `queues` events.
    pub queues_every: Duration,
    /// How often the pump reads the ledger when this process committed nothing (other
    /// replicas' transitions arrive within this time).
    pub poll: Duration,
    /// A resume further back than this many transitions gets `reset`.
    pub resume_window: i64,
    /// Least time between two reads of the ledger, however often this process commits: rows
    /// committed meanwhile are read (and published) together.
    pub read_spacing: Duration,
    /// Least time between two writes to one subscriber while events keep coming: what arrives
    /// meanwhile leaves in one write (an event after a quiet spell leaves at once).
    pub coalesce_wait: Duration,
    /// Most bytes a subscriber gathers into one write (a single larger event still goes whole).
    pub coalesce_bytes: usize,
    /// Subscribers at once; one more is refused `Unavailable` (the memory budget's share for
    /// subscribers, see docs/operations.md "Memory").
    pub max_subscribers: usize,
    /// Resumes (Last-Event-ID replays) in progress at once; one more is refused `Unavailable`.
    pub max_replays: usize,
    /// A replay is read and sent this many ledger sequences at a time: a subscriber holds at
    /// most one page of its replay.
    pub replay_page: i64,
}

impl Default for FeedSettings {
    fn default() -> Self {
        FeedSettings {
            buffer: 1024,
            heartbeat: Duration::from_secs(4),
            queues_every: Duration::from_secs(2),
            poll: Duration::from_millis(100),
            resume_window: 10_000,
            read_spacing: Duration::from_millis(5),
            coalesce_wait: Duration::from_millis(100),
            coalesce_bytes: 32 * 1024,
            max_subscribers: 1024,
            max_replays: 16,
            replay_page: 256,
        }
    }
}

/// A `transition` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    pub seq: i64,
    pub subject: String,
    pub id: String,
    pub kind: Option<Kind>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub actor: String,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// An edit's target (its ownership-map id); absent for items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// One queue depth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Depth {
    pub kind: Kind,
    pub priority: Priority,
    pub state: ItemState,
    pub count: i64,
}

/// The body of `GET /v1/queues` and of the `queues` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueuesView {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub depths: Vec<Depth>,
    /// The paused kinds, in pipeline order.
    pub paused: Vec<Kind>,
}

/// A `kind` event: a kind was paused or resumed. Its `id:` is the ledger sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindEvent {
    #[serde(skip)]
    pub seq: i64,
    pub kind: Kind,
    pub paused: bool,
    pub reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// An `edit` event: an edit proposal changed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EditEvent {
    pub edit_id: String,
    pub target: Option<String>,
    pub state: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq)]
pub enum FeedEvent {
    Transition(Transition),
    Queues(QueuesView),
    Health(HealthView),
    Heartbeat {
        at: OffsetDateTime,
        seq: i64,
    },
    Edit(EditEvent),
    Kind(KindEvent),
    Reset {
        reason: String,
    },
    /// The last event of every stream when the server drains: `{"reason": "draining",
    /// "retry_ms": n}`; the client reconnects with Last-Event-ID.
    Shutdown {
        retry_ms: u64,
    },
}

struct State {
    started: bool,
    position: i64,
    depths: Depths,
    /// The paused kinds, kept like the depths: read in the start snapshot, then moved by each
    /// `kind` ledger row that snapshot did not see.
    paused: BTreeSet<Kind>,
    /// Since when the cursor has been waiting at a gap, if it is.
    waiting_since: Option<tokio::time::Instant>,
    /// The health the pump read last: the snapshot on connect while Logbook cannot be read.
    health: Vec<HealthView>,
    /// Items retention removed per kind, priority and state, as last read: the depths count
    /// them (the start's count does, and no ledger row tells of a removal), the view does not.
    removed: BTreeMap<(Kind, Priority, ItemState), i64>,
}

/// What [`Feed::new`] is built from: its ports, the work signal and its settings.
pub struct FeedParts {
    pub source: Arc<dyn FeedSource>,
    pub health: Arc<dyn HealthLog>,
    pub clock: Arc<dyn Clock>,
    pub jitter: Arc<dyn Jitter>,
    pub signal: WorkSignal,
    pub settings: FeedSettings,
}

struct Inner {
    parts: FeedParts,
    /// One permit per subscriber ([`FeedSettings::max_subscribers`]).
    subscribers: Arc<Semaphore>,
    /// One permit per replay in progress ([`FeedSettings::max_replays`]).
    replays: Arc<Semaphore>,
    tx: broadcast::Sender<Frame>,
    state: Mutex<State>,
    started: tokio::sync::watch::Sender<bool>,
}

/// The live feed of one process.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

debug_showing!(Feed, settings = inner.parts.settings);

const READ_LIMIT: i64 = 500;
/// How often the pump reads how many items retention removed: a pass's removals reach the
/// depths of every replica within this (and the next `queues` event).
const REMOVED_READ_EVERY: Duration = Duration::from_secs(15);
/// While Logbook cannot be read, the wait between reads doubles from the poll interval up to
/// this, so an outage costs neither a read nor a log line every 100 ms.
const READ_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Failed reads between two log lines once the backoff is at its longest (about 30 s).
const READ_FAILURES_PER_LOG: u32 = 6;

/// The wait after `failures` failed reads in a row: `poll`, doubled for each failure after the
/// first, at most [`READ_BACKOFF_MAX`].
fn read_backoff(poll: Duration, failures: u32) -> Duration {
    poll.saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(READ_BACKOFF_MAX)
}

impl Feed {
    pub fn new(parts: FeedParts) -> Self {
        let (tx, _) = broadcast::channel(parts.settings.buffer.max(1));
        let subscribers = Arc::new(Semaphore::new(parts.settings.max_subscribers));
        let replays = Arc::new(Semaphore::new(parts.settings.max_replays));
        Feed {
            inner: Arc::new(Inner {
                subscribers,
                replays,
                parts,
                tx,
                state: Mutex::new(State {
                    started: false,
                    position: 0,
                    depths: Depths::default(),
                    paused: BTreeSet::new(),
                    waiting_since: None,
                    health: Vec::new(),
                    removed: BTreeMap::new(),
                }),
                started: tokio::sync::watch::channel(false).0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The reconnection delay to tell one subscriber: 1 to 3 s, jittered so that a restart
    /// does not bring every client back in the same instant.
    pub fn retry_ms(&self) -> u64 {
        1000 + (self.inner.parts.jitter.sample().clamp(0.0, 1.0) * 2000.0) as u64
    }

    /// How long the feed has been held back at a gap (a transaction still open that holds an
    /// earlier ledger number); zero when it is not.
    pub fn gap_wait(&self) -> Duration {
        self.state()
            .waiting_since
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    fn note_waiting(&self, waiting: bool) {
        let mut st = self.state();
        match (waiting, st.waiting_since) {
            (true, None) => st.waiting_since = Some(tokio::time::Instant::now()),
            (true, Some(since)) => {
                let held = since.elapsed();
                if held > Duration::from_secs(10) && held.as_millis() % 10_000 < 25 {
                    tracing::warn!(
                        position = st.position,
                        held_ms = held.as_millis() as u64,
                        "live feed held back: a transaction holding an earlier ledger number is still open"
                    );
                }
            }
            (false, _) => st.waiting_since = None,
        }
    }

    /// Open subscriptions.
    pub fn subscribers(&self) -> usize {
        self.inner.tx.receiver_count()
    }

    /// The last ledger sequence this process has published.
    pub fn position(&self) -> i64 {
        self.state().position
    }

    /// The current depths (answered from memory: no query, whatever the backlog).
    pub async fn queues(&self) -> Result<QueuesView, AppError> {
        self.wait_started().await?;
        Ok(self.current_queues())
    }

    fn current_queues(&self) -> QueuesView {
        let st = self.state();
        self.view(&st)
    }

    /// Waits (briefly) for the pump's first count; a feed that cannot start is unavailable.
    async fn wait_started(&self) -> Result<(), AppError> {
        if self.state().started {
            return Ok(());
        }
        let mut rx = self.inner.started.subscribe();
        match tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|s| *s)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(AppError::Unavailable),
        }
    }

    fn view(&self, st: &State) -> QueuesView {
        QueuesView {
            at: self.inner.parts.clock.now(),
            paused: st.paused.iter().copied().collect(),
            depths: st
                .depths
                .snapshot()
                .into_iter()
                .filter_map(|(kind, priority, state, count)| {
                    let removed = st.removed.get(&(kind, priority, state)).copied();
                    let count = count - removed.unwrap_or(0);
                    (count != 0).then_some(Depth {
                        kind,
                        priority,
                        state,
                        count,
                    })
                })
                .collect(),
        }
    }

    fn publish(&self, event: FeedEvent) {
        // No subscriber: nothing to encode for. (A subscriber that arrives meanwhile gets the
        // state in its snapshot.)
        if self.inner.tx.receiver_count() == 0 {
            return;
        }
        // No subscriber left is not an error.
        let _ = self.inner.tx.send(Frame::encode(event));
    }

    /// The pump: runs until shutdown. Logbook outages are waited out.
    pub async fn run(self) {
        let s = self.inner.clone();
        let (start, removed) = loop {
            if s.parts.signal.is_shut_down() {
                return;
            }
            let started = match s.parts.source.start().await {
                Ok(start) => s.parts.source.removed_counts().await.map(|r| (start, r)),
                Err(e) => Err(e),
            };
            match started {
                Ok(started) => break started,
                Err(e) => {
                    tracing::warn!(error = %e, "live feed cannot start yet; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let mut cursor = Cursor::after(start.position);
        {
            let mut st = self.state();
            st.depths = Depths::from_counts(start.counts);
            st.removed = removed.into_iter().collect();
            st.paused = start.paused.iter().copied().collect();
            st.position = start.position;
            st.started = true;
        }
        self.inner.started.send_replace(true);
        let mut last_queues = unstamped(self.current_queues());
        let mut last_health: Vec<HealthView> = Vec::new();
        let mut next_tick = tokio::time::Instant::now();
        let mut next_removed_read = tokio::time::Instant::now() + REMOVED_READ_EVERY;
        let mut failed_reads: u32 = 0;
        while !s.parts.signal.is_shut_down() {
            let read_at = tokio::time::Instant::now();
            match s
                .parts
                .source
                .read_after(cursor.position(), &start.snapshot, READ_LIMIT)
                .await
            {
                Ok((rows, horizon)) => {
                    if failed_reads > 0 {
                        tracing::info!(failed_reads, "live feed reads again");
                        failed_reads = 0;
                    }
                    let full = rows.len() as i64 == READ_LIMIT;
                    let rows = rows
                        .into_iter()
                        .map(|r| FeedRow { seq: r.seq, row: r })
                        .collect();
                    for r in cursor.advance(rows, horizon) {
                        self.deliver(r.row);
                    }
                    if full && !cursor.is_waiting() {
                        continue;
                    }
                }
                Err(e) => {
                    failed_reads = failed_reads.saturating_add(1);
                    // One line when reads start failing, then one about every 30 s.
                    if failed_reads == 1 || failed_reads.is_multiple_of(READ_FAILURES_PER_LOG) {
                        tracing::warn!(error = %e, failed_reads, "live feed read failed; retrying with backoff");
                    }
                }
            }
            if tokio::time::Instant::now() >= next_removed_read {
                next_removed_read = tokio::time::Instant::now() + REMOVED_READ_EVERY;
                match s.parts.source.removed_counts().await {
                    Ok(removed) => self.state().removed = removed.into_iter().collect(),
                    Err(e) => tracing::warn!(error = %e, "live feed: removed counts not read"),
                }
            }
            if tokio::time::Instant::now() >= next_tick {
                next_tick = tokio::time::Instant::now() + s.parts.settings.queues_every;
                let q = self.current_queues();
                if unstamped(q.clone()) != last_queues {
                    last_queues = unstamped(q.clone());
                    self.publish(FeedEvent::Queues(q));
                }
                match s.parts.health.latest_health().await {
                    Ok(health) => {
                        for h in health.iter().filter(|h| !last_health.contains(h)) {
                            self.publish(FeedEvent::Health(h.clone()));
                        }
                        self.state().health = health.clone();
                        last_health = health;
                    }
                    Err(e) => tracing::warn!(error = %e, "live feed health read failed"),
                }
            }
            self.note_waiting(cursor.is_waiting());
            let wait = if failed_reads > 0 {
                read_backoff(s.parts.settings.poll, failed_reads)
            } else if cursor.is_waiting() {
                Duration::from_millis(20)
            } else {
                s.parts.settings.poll
            };
            s.parts.signal.wait_ledger(wait).await;
            tokio::time::sleep_until(read_at + s.parts.settings.read_spacing).await;
        }
    }

    fn deliver(&self, e: LedgerEvent) {
        {
            let mut st = self.state();
            let counts = !e.counted && e.subject_type == "item";
            if let (true, Some(kind), Some(priority)) = (counts, e.kind, e.priority) {
                let from = e.from_state.as_deref().and_then(|s| s.parse().ok());
                let to = e.to_state.as_deref().and_then(|s| s.parse().ok());
                st.depths.apply(kind, priority, from, to);
            }
            if let (false, Some(k)) = (e.counted, kind_event(&e)) {
                if k.paused {
                    st.paused.insert(k.kind);
                } else {
                    st.paused.remove(&k.kind);
                }
            }
            st.position = e.seq;
        }
        if let Some(k) = kind_event(&e) {
            self.publish(FeedEvent::Kind(k));
            return;
        }
        let edit = (e.subject_type == "edit").then(|| EditEvent {
            edit_id: e.subject_id.clone(),
            target: e.target.clone(),
            state: e.to_state.clone(),
            at: e.at,
        });
        self.publish(FeedEvent::Transition(transition(e)));
        if let Some(edit) = edit {
            self.publish(FeedEvent::Edit(edit));
        }
    }

    /// Subscribes; with `last_event_id`, first replays every transition after it, one page
    /// ([`FeedSettings::replay_page`]) at a time as the subscriber takes them. Over the
    /// subscriber cap, or over the replay cap with a replay to send: `Unavailable`.
    pub async fn subscribe(&self, last_event_id: Option<i64>) -> Result<Subscription, AppError> {
        self.wait_started().await?;
        let Ok(admitted) = Arc::clone(&self.inner.subscribers).try_acquire_owned() else {
            tracing::info!(
                max_subscribers = self.inner.parts.settings.max_subscribers,
                "live feed subscriber refused: the subscriber cap is reached"
            );
            return Err(AppError::Unavailable);
        };
        let rx = self.inner.tx.subscribe();
        let (position, queues) = {
            let st = self.state();
            (st.position, self.view(&st))
        };
        let mut first = vec![FeedEvent::Queues(queues)];
        // Right after the depths, the current health of every kind with a stored report.
        let health = match self.inner.parts.health.latest_health().await {
            Ok(health) => health,
            Err(e) => {
                tracing::warn!(error = %e, "health snapshot read failed; sending the last one read");
                self.state().health.clone()
            }
        };
        first.extend(health.into_iter().map(FeedEvent::Health));
        let mut skip_through = position;
        let mut replay = None;
        if let Some(last) = last_event_id {
            let newest = self.inner.parts.source.newest_seq().await?;
            if last > newest || last < 0 {
                first.push(FeedEvent::Reset {
                    reason: format!("unknown event id {last}; reload /v1/queues"),
                });
            } else if position - last > self.inner.parts.settings.resume_window
                || last < self.inner.parts.source.archived_through().await?
            {
                first.push(too_old(last));
            } else if last < position {
                let Ok(permit) = Arc::clone(&self.inner.replays).try_acquire_owned() else {
                    tracing::info!(
                        max_replays = self.inner.parts.settings.max_replays,
                        "live feed resume refused: the replay cap is reached"
                    );
                    return Err(AppError::Unavailable);
                };
                replay = Some(Replay {
                    after: last,
                    through: position,
                    _permit: permit,
                });
            } else {
                // This replica has not published `last` yet: skip up to it.
                skip_through = last;
            }
        }
        first.reverse();
        Ok(Subscription {
            first,
            replay,
            rx,
            skip_through,
            feed: self.clone(),
            heartbeat: tokio::time::interval_at(
                tokio::time::Instant::now() + self.inner.parts.settings.heartbeat,
                self.inner.parts.settings.heartbeat,
            ),
            retry_ms: self.retry_ms(),
            ended: None,
            last_write: None,
            _admitted: admitted,
        })
    }

    /// The events of the replay page after `after`, through `through` at most. A prune records
    /// its boundary before it deletes anything, so the boundary read after the page tells
    /// whether entries of the page may have been deleted before it was read: when it passed
    /// `after`, the page begins with a reset and keeps only the events past the boundary.
    /// Returns the page's events and the boundary read, from which the replay goes on.
    async fn replay_page(
        &self,
        after: i64,
        through: i64,
    ) -> Result<(Vec<FeedEvent>, i64), AppError> {
        let page = self.inner.parts.source.backlog(after, through).await?;
        let archived = self.inner.parts.source.archived_through().await?;
        let reset = (archived > after).then(|| too_old(after));
        let events =
            reset
                .into_iter()
                .chain(page.into_iter().filter(|e| e.seq > archived).map(|e| {
                    match kind_event(&e) {
                        Some(k) => FeedEvent::Kind(k),
                        None => FeedEvent::Transition(transition(e)),
                    }
                }))
                .collect();
        Ok((events, archived))
    }
}

/// The reset of a resume from `last`, whose transitions are no longer all to be read.
fn too_old(last: i64) -> FeedEvent {
    FeedEvent::Reset {
        reason: format!("event id {last} is older than the retained window; reload /v1/queues"),
    }
}

/// A `queues` view without its time, to tell whether anything in it changed.
fn unstamped(q: QueuesView) -> (Vec<Depth>, Vec<Kind>) {
    (q.depths, q.paused)
}

/// The `kind` event of a kind's pause or resume; `None` for any other ledger row.
fn kind_event(e: &LedgerEvent) -> Option<KindEvent> {
    if e.subject_type != muster_domain::pause::SUBJECT {
        return None;
    }
    Some(KindEvent {
        seq: e.seq,
        kind: e.subject_id.parse().ok()?,
        paused: e.to_state.as_deref() == Some("paused"),
        reason: e.reason.clone(),
        at: e.at,
    })
}

fn transition(e: LedgerEvent) -> Transition {
    let target = if e.subject_type == "edit" {
        e.target
    } else {
        None
    };
    Transition {
        seq: e.seq,
        subject: e.subject_type,
        id: e.subject_id,
        kind: e.kind,
        from: e.from_state,
        to: e.to_state,
        actor: e.actor,
        at: e.at,
        target,
    }
}

#[cfg(test)]
mod tests;
