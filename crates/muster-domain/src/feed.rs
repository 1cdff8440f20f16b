//! The live feed's ordering rules, queue depths and its Server-Sent-Events framing, written
//! ([`sse_frame`]) and read ([`SseReader`]: the operator's `muster watch`, the test harness and
//! the benchmarks read the feed with it). Pure.
//!
//! # Delivering the ledger in order without skipping late commits
//!
//! Ledger sequence numbers are taken when a row is inserted, not when its transaction commits.
//! A reader that has delivered row 101 may later see row 100 appear, committed late; a reader
//! that resumes "after 101" would skip it. [`Cursor`] never delivers past a gap it cannot yet
//! explain. It delivers rows strictly in sequence; at the first missing number it remembers a
//! *fence* — a transaction id greater than every id assigned before the read (the reader takes
//! one with `pg_current_xact_id()` right after reading; a snapshot's `xmax` is NOT such a fence:
//! it is the newest finished id + 1, and running transactions above it are not listed) — and
//! the highest sequence it saw. The missing number is held by a transaction that took its id
//! before the read (or by one that aborted: identity values are not reused). Once a later read
//! runs under a snapshot whose `xmin` (oldest transaction still running) is at least the fence,
//! every such transaction has ended: a number up to the remembered highest sequence that is
//! still missing will never appear, and the cursor moves past it. The wait is as long as the
//! transactions in flight at the gap. Those of Muster are short and bounded (statement and
//! idle-in-transaction timeouts); a long transaction elsewhere in the cluster holds the feed
//! back for as long as it stays open (see the operations runbook).

use std::collections::BTreeMap;

use crate::{ItemState, Kind, Priority};

/// One ledger row as the feed sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedRow<T> {
    pub seq: i64,
    pub row: T,
}

/// Where a read of the ledger stands: what the reading snapshot knew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadHorizon {
    /// `pg_snapshot_xmin` of the reading snapshot.
    pub xmin: u64,
    /// A transaction id above every id assigned before the read (see the module doc); only
    /// consulted when the read shows a gap.
    pub xmax: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PendingGap {
    /// Highest sequence seen by the read that found the gap.
    bound: i64,
    /// The fence of that read.
    xmax: u64,
}

/// The position of a reader that delivers every ledger row exactly once, in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    delivered: i64,
    pending: Option<PendingGap>,
}

impl Cursor {
    /// A cursor that has delivered everything up to and including `seq`.
    pub fn after(seq: i64) -> Self {
        Cursor {
            delivered: seq,
            pending: None,
        }
    }

    /// The last sequence delivered.
    pub fn position(&self) -> i64 {
        self.delivered
    }

    /// Whether a gap is waiting for in-flight transactions to end.
    pub fn is_waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// Takes one read — the rows with `seq > position()` visible to a snapshot, in sequence
    /// order (a prefix of them is fine), and that snapshot's horizon — and answers the rows that
    /// may be delivered now, in order. Rows held back are read again next time.
    pub fn advance<T>(&mut self, rows: Vec<FeedRow<T>>, horizon: ReadHorizon) -> Vec<FeedRow<T>> {
        let highest = rows.last().map(|r| r.seq);
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            if r.seq <= self.delivered {
                continue;
            }
            if r.seq != self.delivered + 1 {
                // Missing: delivered+1 ..= r.seq-1. They can be passed only if a gap was seen
                // before, every transaction in flight then has ended, and they all lie within
                // what that earlier read had seen.
                let passable = self
                    .pending
                    .is_some_and(|p| horizon.xmin >= p.xmax && r.seq - 1 <= p.bound);
                if !passable {
                    let resolved = self.pending.is_some_and(|p| horizon.xmin >= p.xmax);
                    if self.pending.is_none() || resolved {
                        self.pending = Some(PendingGap {
                            bound: highest.unwrap_or(r.seq),
                            xmax: horizon.xmax,
                        });
                    }
                    return out;
                }
            }
            self.delivered = r.seq;
            if self.pending.is_some_and(|p| self.delivered >= p.bound) {
                self.pending = None;
            }
            out.push(r);
        }
        out
    }
}

/// Item counts per kind, priority and state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Depths {
    counts: BTreeMap<(Kind, Priority, ItemState), i64>,
}

impl Depths {
    pub fn from_counts(
        counts: impl IntoIterator<Item = ((Kind, Priority, ItemState), i64)>,
    ) -> Self {
        Depths {
            counts: counts.into_iter().collect(),
        }
    }

    /// Applies one transition: one item left `from` (if any) and entered `to` (if any).
    pub fn apply(
        &mut self,
        kind: Kind,
        priority: Priority,
        from: Option<ItemState>,
        to: Option<ItemState>,
    ) {
        if from == to {
            return;
        }
        if let Some(f) = from {
            *self.counts.entry((kind, priority, f)).or_default() -= 1;
        }
        if let Some(t) = to {
            *self.counts.entry((kind, priority, t)).or_default() += 1;
        }
    }

    /// The non-zero counts, in kind, priority, state order.
    pub fn snapshot(&self) -> Vec<(Kind, Priority, ItemState, i64)> {
        self.counts
            .iter()
            .filter(|(_, n)| **n != 0)
            .map(|((k, p, s), n)| (*k, *p, *s, *n))
            .collect()
    }
}

/// One Server-Sent Event as it goes on the wire: `id:` (when given), `event:`, one `data:` line
/// per line of `data` (JSON is one line; a line break can never end the frame early), and the
/// blank line that ends it. The live feed encodes each event once with this and shares the bytes
/// among all its subscribers.
pub fn sse_frame(name: &str, id: Option<i64>, data: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + name.len() + 32);
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.to_string().as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    for line in data.split(['\n', '\r']) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// The `retry:` field alone: how long a client waits before it reconnects.
pub fn sse_retry(retry_ms: u64) -> Vec<u8> {
    format!("retry: {retry_ms}\n\n").into_bytes()
}

/// One block of a `text/event-stream` (its lines up to a blank line), its fields as sent: the
/// text after the colon and one optional space; several `data:` lines joined by `\n`; comment
/// lines (`:…`) and unknown fields dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseBlock {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Option<String>,
    pub retry: Option<String>,
}

impl SseBlock {
    /// The event this block dispatches: one with data or an id; named `message` when it names
    /// none. A block of `retry:` or comments alone dispatches none.
    pub fn event(&self) -> Option<SseEvent> {
        if self.data.is_none() && self.id.is_none() {
            return None;
        }
        Some(SseEvent {
            id: self.id.clone(),
            event: self.event.clone().unwrap_or_else(|| "message".to_owned()),
            data: self.data.clone().unwrap_or_default(),
        })
    }

    /// The reconnection delay the block asks for, in milliseconds, when it holds a valid one.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry.as_deref()?.parse().ok()
    }
}

/// One server-sent event, as a client dispatches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// The reading side of [`sse_frame`] and [`sse_retry`]: cuts a `text/event-stream` into
/// [`SseBlock`]s, whatever the chunks it arrives in (a block, a line or a UTF-8 character may be
/// cut anywhere); `\r\n` line ends are read as `\n`.
#[derive(Debug, Default)]
pub struct SseReader {
    buf: Vec<u8>,
}

impl SseReader {
    /// Feeds a chunk; the blocks it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseBlock> {
        self.buf.extend_from_slice(chunk);
        if self.buf.contains(&b'\r') {
            let mut lf = Vec::with_capacity(self.buf.len());
            for (i, &b) in self.buf.iter().enumerate() {
                if !(b == b'\r' && self.buf.get(i + 1) == Some(&b'\n')) {
                    lf.push(b);
                }
            }
            self.buf = lf;
        }
        let mut blocks = Vec::new();
        while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.buf.drain(..end + 2).collect();
            blocks.push(parse_block(&String::from_utf8_lossy(&block)));
        }
        blocks
    }
}

fn parse_block(text: &str) -> SseBlock {
    let mut block = SseBlock::default();
    for line in text.lines().filter(|line| !line.starts_with(':')) {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        match field {
            "id" => block.id = Some(value),
            "event" => block.event = Some(value),
            "retry" => block.retry = Some(value),
            "data" => match &mut block.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => block.data = Some(value),
            },
            _ => {}
        }
    }
    block
}

#[cfg(test)]
mod tests;
