//! Items' trace contexts against a real database: stored in their 25-byte form, read back by
//! the locking reads.

use muster_app::ports::{Logbook, NewItem};
use muster_domain::trace::TraceContext;
use muster_domain::{Item, ItemId, Kind, Principal, Priority};
use serde_json::json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::PgLogbook;

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A new trawl item keeping `trace`, inserted and committed.
async fn inserted(logbook: &PgLogbook, trace: Option<TraceContext>) -> ItemId {
    let now = OffsetDateTime::now_utc();
    let id = ItemId(Uuid::now_v7());
    let (item, entry) = Item::enqueue(
        id,
        Kind::Trawl,
        Priority::Normal,
        Principal::Operator,
        now,
        None,
        None,
    );
    let new = NewItem {
        item,
        payload: json!({}),
        idempotency_key: None,
        parent: None,
        created_at: now,
        in_line_at: now,
        entry,
        trace,
    };
    let mut tx = logbook.begin().await.expect("begin");
    tx.insert_item(&new).await.expect("insert");
    tx.commit().await.expect("commit");
    id
}

#[tokio::test]
async fn an_items_trace_context_is_stored_as_trace_id_span_id_and_flags() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let id = inserted(&logbook, TraceContext::parse(CALLER)).await;
    let row = db
        .client()
        .await
        .query_one(
            "SELECT encode(trace, 'hex') FROM core.items WHERE id = $1",
            &[&id.0],
        )
        .await
        .expect("read");
    let stored: String = row.get(0);
    assert_eq!(
        stored,
        "4bf92f3577b34da6a3ce929d0e0e4736\
         00f067aa0ba902b7\
         01"
    );
}

#[tokio::test]
async fn a_locked_item_comes_with_the_trace_context_it_keeps() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let traced = inserted(&logbook, TraceContext::parse(CALLER)).await;
    let untraced = inserted(&logbook, None).await;
    let mut tx = logbook.begin().await.expect("begin");
    let (_, trace) = tx.lock_item(traced).await.expect("lock").expect("there");
    assert_eq!(trace, TraceContext::parse(CALLER));
    let (_, trace) = tx.lock_item(untraced).await.expect("lock").expect("there");
    assert_eq!(trace, None);
}

#[tokio::test]
async fn logbook_refuses_a_trace_context_of_another_length() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let id = inserted(&logbook, None).await;
    let refused = db
        .client()
        .await
        .execute(
            "UPDATE core.items SET trace = '\\x0102'::bytea WHERE id = $1",
            &[&id.0],
        )
        .await
        .expect_err("a 2-byte trace context");
    assert_eq!(
        refused.as_db_error().and_then(|e| e.constraint()),
        Some("items_trace_stored")
    );
}

#[tokio::test]
async fn stored_bytes_that_are_no_trace_context_lock_the_item_without_one() {
    let db = muster_testkit::fresh_db().await;
    let logbook = PgLogbook::new(db.pool());
    let id = inserted(&logbook, TraceContext::parse(CALLER)).await;
    db.client()
        .await
        .execute(
            "UPDATE core.items SET trace = decode(repeat('00', 25), 'hex') WHERE id = $1",
            &[&id.0],
        )
        .await
        .expect("25 zero bytes");
    let mut tx = logbook.begin().await.expect("begin");
    let (item, trace) = tx.lock_item(id).await.expect("lock").expect("there");
    assert_eq!((item.id, trace), (id, None));
}
