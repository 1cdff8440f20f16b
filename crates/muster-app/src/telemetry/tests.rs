use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime};

use muster_domain::trace::{SpanId, TraceContext, TraceId};

use super::*;

/// Span ids 1, 2, 3, … in the order they are drawn.
fn counting() -> SpanId {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    SpanId([NEXT.fetch_add(1, Ordering::Relaxed); 8])
}

fn call(n: u8, sampled: bool) -> CallTrace {
    CallTrace {
        server: TraceContext {
            trace_id: TraceId([n; 16]),
            span_id: SpanId([n; 8]),
            sampled,
        },
        draw: counting,
    }
}

fn figures(statements: u32) -> TxFigures {
    let asked = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    TxFigures {
        statements,
        outcome: TxOutcome::Committed,
        ..TxFigures::new(asked, asked + Duration::from_millis(3))
    }
}

#[test]
fn figures_count_the_wait_between_asking_and_the_grant() {
    let asked = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    let f = TxFigures::new(asked, asked + Duration::from_millis(7));
    assert_eq!(f.connection_wait, Duration::from_millis(7));
}

#[tokio::test]
async fn outside_a_scope_nothing_is_active_and_a_record_is_dropped() {
    assert!(!active());
    assert!(current().is_none());
    record(figures(1));
}

#[tokio::test]
async fn a_scope_gathers_its_transactions_in_order() {
    let ((), gathered) = scope(call(1, true), async {
        assert!(active());
        record(figures(1));
        record(figures(2));
    })
    .await;
    let statements: Vec<u32> = gathered
        .transactions
        .iter()
        .map(|t| t.figures.statements)
        .collect();
    assert_eq!(statements, [1, 2]);
    assert_eq!(gathered.dropped, 0);
}

#[tokio::test]
async fn a_scope_keeps_at_most_sixteen_transactions_and_counts_the_rest() {
    let ((), gathered) = scope(call(1, true), async {
        for _ in 0..20 {
            record(figures(1));
        }
    })
    .await;
    assert_eq!(gathered.transactions.len(), MAX_TRANSACTIONS);
    assert_eq!(gathered.dropped, 4);
}

#[tokio::test]
async fn a_batch_without_traced_members_gathers_nothing() {
    assert!(carrier([None, None]).is_none());
    let (out, batch) = batch(None, 2, async {
        record(figures(1));
        5
    })
    .await;
    assert_eq!(out, 5);
    assert!(batch.is_none());
}

#[test]
fn a_batch_is_carried_by_its_first_sampled_member() {
    let members = [
        None,
        Some(call(1, false)),
        Some(call(2, true)),
        Some(call(3, true)),
    ];
    let chosen = carrier(members).map(|c| c.server);
    assert_eq!(chosen, Some(call(2, true).server));
}

#[test]
fn a_batch_without_sampled_members_is_carried_by_its_first_traced_one() {
    let members = [None, Some(call(1, false)), Some(call(2, false))];
    let chosen = carrier(members).map(|c| c.server);
    assert_eq!(chosen, Some(call(1, false).server));
}

#[tokio::test]
async fn the_carrier_gets_the_batch_transactions_and_every_member_a_link() {
    let (_, batch) = batch(Some(call(1, true)), 2, async {
        record(figures(3));
    })
    .await;
    let batch = batch.expect("traced members");
    let tx = batch.gathered.transactions[0];
    let ((), carrier) = scope(call(1, true), async { rode(&batch) }).await;
    let ((), member) = scope(call(2, true), async { rode(&batch) }).await;
    assert_eq!(carrier.transactions, [tx]);
    assert!(member.transactions.is_empty());
    let link = call(1, true).server.child(tx.span_id);
    assert_eq!(carrier.batch_links, [link]);
    assert_eq!(member.batch_links, [link]);
    assert_eq!(member.batch_size, Some(2));
}

#[tokio::test]
async fn a_batch_of_one_is_the_call_own_transaction_without_a_link() {
    let (_, batch) = batch(Some(call(1, true)), 1, async {
        record(figures(3));
    })
    .await;
    let batch = batch.expect("traced member");
    let ((), carrier) = scope(call(1, true), async { rode(&batch) }).await;
    assert_eq!(carrier.transactions.len(), 1);
    assert!(carrier.batch_links.is_empty());
    assert_eq!(carrier.batch_size, None);
}
