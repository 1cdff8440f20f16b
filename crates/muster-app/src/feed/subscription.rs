//! One subscriber's stream: the events of its connect (encoded for it alone), its replay read
//! one page at a time, then the shared frames of the broadcast, written in coalesced chunks.

use bytes::{Bytes, BytesMut};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{OwnedSemaphorePermit, broadcast};

use super::{Feed, FeedEvent, Frame};

/// Why a subscription ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The subscriber fell further behind than the buffer: it is cut loose and resumes with
    /// Last-Event-ID.
    TooSlow,
    /// The server is shutting down; the final event (`shutdown`) was sent.
    Shutdown,
    /// A page of the replay could not be read: the subscriber resumes with Last-Event-ID.
    Unavailable,
}

/// The part of a replay not read yet: the ledger sequences after `after`, through `through`.
pub(super) struct Replay {
    pub(super) after: i64,
    pub(super) through: i64,
    /// The replay's place under the feed's replay cap, given back when the replay is sent.
    pub(super) _permit: OwnedSemaphorePermit,
}

/// One subscriber's stream of events.
pub struct Subscription {
    /// Events of the connect (snapshot, reset) or of the current replay page, last first.
    pub(super) first: Vec<FeedEvent>,
    /// The replay still to read, page by page, once `first` is sent.
    pub(super) replay: Option<Replay>,
    pub(super) rx: broadcast::Receiver<Frame>,
    pub(super) skip_through: i64,
    pub(super) feed: Feed,
    pub(super) heartbeat: tokio::time::Interval,
    pub(super) retry_ms: u64,
    pub(super) ended: Option<End>,
    /// When the last chunk was handed out, unless it stopped at `coalesce_bytes`: then more
    /// may be ready, and the next chunk goes without waiting (else a subscriber could never
    /// read more than `coalesce_bytes` per `coalesce_wait`, and a fast reader of a busy feed
    /// would fall behind the buffer and be cut loose).
    pub(super) last_write: Option<tokio::time::Instant>,
    /// The subscriber's place under the feed's subscriber cap.
    pub(super) _admitted: OwnedSemaphorePermit,
}

debug_showing!(Subscription, skip_through = skip_through);

impl Subscription {
    /// The reconnection delay told to this subscriber (`retry:` and the `shutdown` event).
    pub fn retry_ms(&self) -> u64 {
        self.retry_ms
    }

    /// The next event, or why the stream ends.
    pub async fn next(&mut self) -> Result<FeedEvent, End> {
        self.next_frame().await.map(|f| f.event().clone())
    }

    /// The next event with its wire form, or why the stream ends.
    pub async fn next_frame(&mut self) -> Result<Frame, End> {
        if let Some(end) = self.ended {
            return Err(end);
        }
        if let Some(e) = self.first.pop() {
            return Ok(Frame::encode(e));
        }
        while self.first.is_empty() && self.replay.is_some() {
            self.read_replay_page().await?;
            if let Some(e) = self.first.pop() {
                return Ok(Frame::encode(e));
            }
        }
        let signal = self.feed.inner.parts.signal.clone();
        loop {
            tokio::select! {
                biased;
                _ = signal.shutting_down() => return Ok(self.shutdown()),
                r = self.rx.recv() => match r {
                    Ok(f) => {
                        if self.is_history(&f) {
                            continue;
                        }
                        return Ok(f);
                    }
                    Err(RecvError::Lagged(_)) => return Err(*self.ended.insert(End::TooSlow)),
                    Err(RecvError::Closed) => return Err(*self.ended.insert(End::Shutdown)),
                },
                _ = self.heartbeat.tick() => {
                    let e = FeedEvent::Heartbeat { at: self.feed.inner.parts.clock.now(), seq: self.feed.position() };
                    return Ok(Frame::encode(e));
                }
            }
        }
    }

    /// A frame that is ready now, without waiting; `None` when none is (or the stream ended:
    /// the next wait answers why).
    fn try_next_frame(&mut self) -> Option<Frame> {
        if self.ended.is_some() {
            return None;
        }
        if let Some(e) = self.first.pop() {
            return Some(Frame::encode(e));
        }
        // The next replay page is read by the next wait, before any live frame.
        if self.replay.is_some() {
            return None;
        }
        if self.feed.inner.parts.signal.is_shut_down() {
            return Some(self.shutdown());
        }
        loop {
            match self.rx.try_recv() {
                Ok(f) if self.is_history(&f) => continue,
                Ok(f) => return Some(f),
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Lagged(_)) => self.ended = Some(End::TooSlow),
                Err(TryRecvError::Closed) => self.ended = Some(End::Shutdown),
            }
            return None;
        }
    }

    /// The next write: every frame that is ready, up to the feed's `coalesce_bytes` (a single
    /// frame is handed on as the shared buffer itself; several are copied into one). Less than
    /// `coalesce_wait` after the previous write it first waits out the rest of that time, so
    /// what arrives meanwhile leaves together (and the publisher wakes nobody: the events are
    /// there when the wait ends): under load a subscriber writes about once per
    /// `coalesce_wait`, while an event after a quiet spell leaves at once. After a write that
    /// stopped at `coalesce_bytes` the next one does not wait. A subscriber that
    /// fell too far behind still gets what it had, in order; the next call answers
    /// [`End::TooSlow`].
    pub async fn next_chunk(&mut self) -> Result<Bytes, End> {
        let chunk = self.gather().await;
        let full = chunk
            .as_ref()
            .is_ok_and(|c| c.len() >= self.feed.inner.parts.settings.coalesce_bytes);
        self.last_write = (!full).then(tokio::time::Instant::now);
        chunk
    }

    async fn gather(&mut self) -> Result<Bytes, End> {
        let settings = &self.feed.inner.parts.settings;
        let (max, wait) = (settings.coalesce_bytes, settings.coalesce_wait);
        let replaying = !self.first.is_empty() || self.replay.is_some();
        if let (false, Some(last)) = (replaying, self.last_write) {
            let signal = self.feed.inner.parts.signal.clone();
            tokio::select! {
                () = tokio::time::sleep_until(last + wait) => {}
                () = signal.shutting_down() => {}
            }
        }
        let first = self.next_frame().await?;
        if first.bytes().len() >= max {
            return Ok(first.bytes().clone());
        }
        let Some(second) = self.try_next_frame() else {
            return Ok(first.bytes().clone());
        };
        let mut buf = BytesMut::with_capacity(max.min(64 * 1024));
        buf.extend_from_slice(first.bytes());
        buf.extend_from_slice(second.bytes());
        while buf.len() < max {
            match self.try_next_frame() {
                Some(f) => buf.extend_from_slice(f.bytes()),
                None => break,
            }
        }
        Ok(buf.freeze())
    }

    /// Reads the next page of the replay into `first`; the replay ends with its last page. A
    /// page that found the archived boundary past its end goes on from the boundary, so a
    /// prune is reset once, not once per page it covered.
    async fn read_replay_page(&mut self) -> Result<(), End> {
        let Some(replay) = &mut self.replay else {
            return Ok(());
        };
        let page = self.feed.inner.parts.settings.replay_page.max(1);
        let until = replay.through.min(replay.after.saturating_add(page));
        match self.feed.replay_page(replay.after, until).await {
            Ok((mut events, archived)) => {
                replay.after = until.max(archived);
                if replay.after >= replay.through {
                    self.replay = None;
                }
                events.reverse();
                self.first = events;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "a live feed replay page could not be read; the subscriber is cut loose to resume");
                self.replay = None;
                Err(*self.ended.insert(End::Unavailable))
            }
        }
    }

    /// A ledger event (transition or kind) this subscriber already has (replayed on connect,
    /// or the client's own).
    fn is_history(&self, f: &Frame) -> bool {
        match f.event() {
            FeedEvent::Transition(t) => t.seq <= self.skip_through,
            FeedEvent::Kind(k) => k.seq <= self.skip_through,
            _ => false,
        }
    }

    /// The stream's last event: the server is draining, reconnect with Last-Event-ID.
    fn shutdown(&mut self) -> Frame {
        self.ended = Some(End::Shutdown);
        Frame::encode(FeedEvent::Shutdown {
            retry_ms: self.retry_ms,
        })
    }
}
