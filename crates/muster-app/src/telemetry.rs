//! What a call's Logbook transactions did, gathered for its trace without a use case knowing:
//! the transport runs a traced call inside [`scope`], the store adapter hands each transaction's
//! [`TxFigures`] to [`record`] when the transaction ends, and a group commit hands the batch's
//! transactions to one of the calls that rode in it and a link to every one ([`batch`],
//! [`rode`]). Outside a scope (tracing off) nothing is kept: [`active`] answers `false` from a
//! task-local lookup, without an allocation or an atomic operation.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use muster_domain::trace::{SpanId, TraceContext};

/// At most this many transactions (and as many batch links) are kept for one call; the rest
/// are counted ([`Gathered::dropped`]).
pub const MAX_TRANSACTIONS: usize = 16;

tokio::task_local! {
    static SINK: Sink;
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    Committed,
    /// Dropped without a commit after it had sent something: the store rolled it back.
    RolledBack,
    /// A connection was not granted, a statement or the COMMIT failed, or Logbook went silent.
    Failed,
}

/// What one Logbook transaction did, as the store adapter measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxFigures {
    /// When the pool was asked for a connection.
    pub asked: SystemTime,
    /// How long the pool took to grant it (or to refuse it).
    pub connection_wait: Duration,
    /// Statements sent, BEGIN and COMMIT not counted.
    pub statements: u32,
    /// Round trips to Logbook: pipelines (BEGIN rides with the first), statement preparations
    /// that missed the connection's cache, the COMMIT's pipeline.
    pub round_trips: u32,
    /// When the COMMIT's pipeline was sent, and how long its answer took.
    pub commit: Option<(SystemTime, Duration)>,
    pub end: SystemTime,
    pub outcome: TxOutcome,
}

impl TxFigures {
    /// A transaction that asked for a connection at `asked` and got one (or a refusal) at
    /// `granted`; nothing sent yet.
    pub fn new(asked: SystemTime, granted: SystemTime) -> Self {
        TxFigures {
            asked,
            connection_wait: granted.duration_since(asked).unwrap_or_default(),
            statements: 0,
            round_trips: 0,
            commit: None,
            end: granted,
            outcome: TxOutcome::Failed,
        }
    }
}

/// A traced call: its SERVER span, and how the transport draws span ids.
#[derive(Debug, Clone, Copy)]
pub struct CallTrace {
    pub server: TraceContext,
    pub draw: fn() -> SpanId,
}

/// One transaction of a call, with the id of its span (a child of the call's SERVER span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxSpan {
    pub span_id: SpanId,
    pub figures: TxFigures,
}

/// What a call gathered for its trace.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gathered {
    /// Its own transactions and those of the batches it carried, at most [`MAX_TRANSACTIONS`].
    pub transactions: Vec<TxSpan>,
    /// Transactions and batch links beyond the bound.
    pub dropped: u64,
    /// The size of the last group-commit batch its operation rode in.
    pub batch_size: Option<usize>,
    /// The transactions of the batches it rode in (spans of the call that carried them), at
    /// most [`MAX_TRANSACTIONS`].
    pub batch_links: Vec<TraceContext>,
}

impl Gathered {
    fn push_transaction(&mut self, tx: TxSpan) {
        if self.transactions.len() < MAX_TRANSACTIONS {
            self.transactions.push(tx);
        } else {
            self.dropped += 1;
        }
    }
}

struct Sink {
    trace: CallTrace,
    gathered: RefCell<Gathered>,
}

/// Runs `f` with a sink for `trace`'s call, and answers what it gathered.
pub async fn scope<F: Future>(trace: CallTrace, f: F) -> (F::Output, Gathered) {
    let sink = Sink {
        trace,
        gathered: RefCell::default(),
    };
    let mut scoped = std::pin::pin!(SINK.scope(sink, f));
    let output = scoped.as_mut().await;
    let gathered = scoped
        .as_mut()
        .take_value()
        .map(|s| s.gathered.into_inner())
        .unwrap_or_default();
    (output, gathered)
}

/// Whether the running call is traced (inside a [`scope`]).
pub fn active() -> bool {
    SINK.try_with(|_| ()).is_ok()
}

/// The running call's trace, when it is traced.
pub fn current() -> Option<CallTrace> {
    SINK.try_with(|s| s.trace).ok()
}

/// Hands a finished transaction's figures to the running call's sink (nothing without one).
pub fn record(figures: TxFigures) {
    let _ = SINK.try_with(|s| {
        let span_id = (s.trace.draw)();
        s.gathered
            .borrow_mut()
            .push_transaction(TxSpan { span_id, figures });
    });
}

/// The transactions of one group-commit batch, for the calls that rode in it.
#[derive(Debug)]
pub struct BatchTrace {
    /// The call whose trace holds the transactions' spans.
    owner: TraceContext,
    size: usize,
    gathered: Gathered,
}

/// Which of a group-commit batch's members (their calls' traces, in the batch's order) carries
/// its transactions: the first sampled traced one, else the first traced one.
pub fn carrier(members: impl IntoIterator<Item = Option<CallTrace>>) -> Option<CallTrace> {
    let mut owner: Option<CallTrace> = None;
    for trace in members.into_iter().flatten() {
        if owner.is_none() || (trace.server.sampled && !owner.is_some_and(|o| o.server.sampled)) {
            owner = Some(trace);
        }
    }
    owner
}

/// Runs a group-commit batch of `size` operations, gathering its transactions for `carrier`
/// ([`carrier`]). No carrier (no member traced): `f` runs as it is and there is no batch trace.
pub async fn batch<F: Future>(
    carrier: Option<CallTrace>,
    size: usize,
    f: F,
) -> (F::Output, Option<Arc<BatchTrace>>) {
    let Some(owner) = carrier else {
        return (f.await, None);
    };
    let (output, gathered) = scope(owner, f).await;
    let batch = BatchTrace {
        owner: owner.server,
        size,
        gathered,
    };
    (output, Some(Arc::new(batch)))
}

/// The running call's operation rode in `batch`: its transactions join the call's own when the
/// call carried it; with others in it, the call links to each of them.
pub fn rode(batch: &BatchTrace) {
    let _ = SINK.try_with(|s| {
        let mut gathered = s.gathered.borrow_mut();
        let carried = s.trace.server == batch.owner;
        if carried {
            for tx in &batch.gathered.transactions {
                gathered.push_transaction(*tx);
            }
            gathered.dropped += batch.gathered.dropped;
        }
        if batch.size < 2 {
            return;
        }
        gathered.batch_size = Some(batch.size);
        for tx in &batch.gathered.transactions {
            if gathered.batch_links.len() < MAX_TRANSACTIONS {
                gathered.batch_links.push(batch.owner.child(tx.span_id));
            } else {
                gathered.dropped += 1;
            }
        }
    });
}

#[cfg(test)]
mod tests;
