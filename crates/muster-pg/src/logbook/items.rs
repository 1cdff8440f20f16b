//! Items: inserted, locked and written back inside a transaction; read with their history
//! outside one.

use async_trait::async_trait;
use muster_app::ports::{Inserted, ItemReads, ItemStore, NewItem, RecordedEntry, StoreError};
use muster_app::views::{HistoryEntry, ItemSummary, ItemView};
use muster_domain::listing::ItemFilter;
use muster_domain::trace::TraceContext;
use muster_domain::{Item, ItemId, ItemState, Kind, Priority};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::rows::{fence_i64, internal, stored_context, stored_trace, traced_item_from_row};
use super::tx::{Param, PgTx};
use super::{PgLogbook, listing};

#[async_trait]
impl ItemStore for PgTx {
    async fn insert_item(&mut self, new: &NewItem) -> Result<Inserted, StoreError> {
        let i = &new.item;
        let inserted = self
            .query(
                include_str!("sql/insert_item.sql"),
                &[
                    &i.id.0,
                    &i.kind.as_str(),
                    &i.priority.rank(),
                    &i.state.as_str(),
                    &(i.attempt as i32),
                    &fence_i64(i.fence)?,
                    &new.created_at,
                    &new.payload,
                    &new.idempotency_key,
                    &new.parent.map(|p| p.0),
                    &(i.chain.len as i64),
                    &i.chain.hash.as_slice(),
                    &new.in_line_at,
                    &i.not_before,
                    &stored_trace(new.trace),
                ],
            )
            .await?;
        if !inserted.is_empty() {
            return Ok(Inserted::New);
        }
        let rows = self
            .query(
                include_str!("sql/item_by_idempotency_key.sql"),
                &[&i.kind.as_str(), &new.idempotency_key],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| internal("idempotency conflict without an existing row"))?;
        let state: String = row.get(1);
        Ok(Inserted::Existing {
            id: ItemId(row.get(0)),
            state: state.parse().map_err(internal)?,
            trace: stored_context(row.get(2)),
        })
    }

    async fn insert_items(&mut self, new: &[NewItem]) -> Result<(), StoreError> {
        let ids: Vec<Uuid> = new.iter().map(|n| n.item.id.0).collect();
        let kinds: Vec<String> = new
            .iter()
            .map(|n| n.item.kind.as_str().to_owned())
            .collect();
        let priorities: Vec<i16> = new.iter().map(|n| n.item.priority.rank()).collect();
        let states: Vec<String> = new
            .iter()
            .map(|n| n.item.state.as_str().to_owned())
            .collect();
        // A next step is never delayed: its place in line is its creation.
        let at: Vec<OffsetDateTime> = new.iter().map(|n| n.created_at).collect();
        let payloads: Vec<Value> = new.iter().map(|n| n.payload.clone()).collect();
        let parents: Vec<Option<Uuid>> = new.iter().map(|n| n.parent.map(|p| p.0)).collect();
        let chain_len: Vec<i64> = new.iter().map(|n| n.item.chain.len as i64).collect();
        let heads: Vec<Vec<u8>> = new.iter().map(|n| n.item.chain.hash.to_vec()).collect();
        let traces: Vec<Option<Vec<u8>>> = new.iter().map(|n| stored_trace(n.trace)).collect();
        self.defer(
            include_str!("sql/insert_items.sql"),
            vec![
                Box::new(ids),
                Box::new(kinds),
                Box::new(priorities),
                Box::new(states),
                Box::new(at),
                Box::new(payloads),
                Box::new(parents),
                Box::new(chain_len),
                Box::new(heads),
                Box::new(traces),
            ],
        )
        .await
    }

    async fn lock_item(
        &mut self,
        id: ItemId,
    ) -> Result<Option<(Item, Option<TraceContext>)>, StoreError> {
        let rows = self
            .query(include_str!("sql/lock_item.sql"), &[&id.0])
            .await?;
        rows.first().map(|r| traced_item_from_row(r, 0)).transpose()
    }

    async fn lock_oldest(
        &mut self,
        kind: Kind,
        state: ItemState,
        max: u32,
    ) -> Result<Vec<(Item, Option<TraceContext>)>, StoreError> {
        // Planned for its values (not cached: `max` varies): see `listing`.
        let sql = listing::lock_oldest_statement(kind, state, max);
        let rows = self.query_once(&sql).await?;
        rows.iter().map(|r| traced_item_from_row(r, 0)).collect()
    }

    async fn save_item(&mut self, item: &Item) -> Result<(), StoreError> {
        self.save_items(&[(item.clone(), None)]).await
    }

    async fn save_items(&mut self, items: &[(Item, Option<Value>)]) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let col = |f: &dyn Fn(&Item) -> Option<String>| -> Param {
            Box::new(items.iter().map(|(i, _)| f(i)).collect::<Vec<_>>())
        };
        let fences = items
            .iter()
            .map(|(i, _)| fence_i64(i.fence))
            .collect::<Result<Vec<_>, _>>()?;
        let params: Vec<Param> = vec![
            Box::new(items.iter().map(|(i, _)| i.id.0).collect::<Vec<_>>()),
            col(&|i| Some(i.state.as_str().to_owned())),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.attempt as i32)
                    .collect::<Vec<_>>(),
            ),
            Box::new(fences),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.lease.as_ref().map(|l| l.lease_id.0))
                    .collect::<Vec<_>>(),
            ),
            col(&|i| i.lease.as_ref().map(|l| l.worker_id.clone())),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.lease.as_ref().map(|l| l.expires_at))
                    .collect::<Vec<_>>(),
            ),
            Box::new(items.iter().map(|(i, _)| i.not_before).collect::<Vec<_>>()),
            col(&|i| i.parked_digest.clone()),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.chain.len as i64)
                    .collect::<Vec<_>>(),
            ),
            Box::new(
                items
                    .iter()
                    .map(|(i, _)| i.chain.hash.to_vec())
                    .collect::<Vec<_>>(),
            ),
            Box::new(items.iter().map(|(_, r)| r.is_some()).collect::<Vec<_>>()),
            Box::new(items.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>()),
            Box::new(items.len() as i64),
        ];
        // Every row is locked by this transaction and items are never deleted: all of them
        // are there, once each.
        self.defer(include_str!("sql/save_items.sql"), params).await
    }
}

#[async_trait]
impl ItemReads for PgLogbook {
    async fn item_view(&self, id: ItemId) -> Result<Option<ItemView>, StoreError> {
        let mut client = self.reader().await?;
        let stmt = client
            .prepare_cached(include_str!("sql/item_view.sql"))
            .await?;
        let Some(row) = client.query_opt(&stmt, &[&id.0]).await? else {
            return Ok(None);
        };
        let kind: String = row.get(1);
        let priority: i16 = row.get(2);
        let state: String = row.get(3);
        let attempt: i32 = row.get(4);
        let history = client
            .query(include_str!("sql/item_history.sql"), &[&id.to_string()])
            .await?
            .iter()
            .map(history_entry)
            .collect();
        Ok(Some(ItemView {
            id: id.to_string(),
            kind: kind.parse().map_err(|e| internal(format!("{e}")))?,
            priority: Priority::from_rank(priority).ok_or_else(|| internal("bad priority"))?,
            state: state.parse().map_err(internal)?,
            attempt: attempt as u32,
            payload: row.get(5),
            result: row.get(6),
            not_before: row.get(7),
            created_at: row.get(8),
            history,
            removed: false,
        }))
    }

    async fn item_ledger(&self, id: ItemId) -> Result<Vec<RecordedEntry>, StoreError> {
        let mut client = self.reader().await?;
        let stmt = client
            .prepare_cached(include_str!("sql/item_ledger.sql"))
            .await?;
        let rows = client.query(&stmt, &[&id.to_string()]).await?;
        rows.iter()
            .map(|r| {
                let data: String = r.get(9);
                Ok(RecordedEntry {
                    history: history_entry(r),
                    kind: r.get::<_, Option<String>>(7).and_then(|k| k.parse().ok()),
                    priority: r.get::<_, Option<i16>>(8).and_then(Priority::from_rank),
                    data: serde_json::from_str(&data)
                        .map_err(|e| internal(format!("ledger entry data of item {id}: {e}")))?,
                })
            })
            .collect()
    }

    async fn archived_until(&self) -> Result<Option<OffsetDateTime>, StoreError> {
        self.archived_until_at().await
    }

    async fn list_items(
        &self,
        filter: &ItemFilter,
        rows: u32,
    ) -> Result<Vec<ItemSummary>, StoreError> {
        // Planned for its values each time (not prepared and cached): see `listing`.
        let sql = listing::page_statement(filter, rows);
        let mut client = self.reader().await?;
        client
            .query(sql.as_str(), &[])
            .await?
            .iter()
            .map(listing::summary_from_row)
            .collect()
    }

    async fn oldest_leases(&self) -> Result<Vec<(Kind, OffsetDateTime)>, StoreError> {
        let mut client = self.reader().await?;
        let stmt = client
            .prepare_cached(include_str!("sql/oldest_leases.sql"))
            .await?;
        let rows = client.query(&stmt, &[]).await?;
        rows.iter()
            .map(|r| {
                let kind: Kind = r
                    .get::<_, String>(0)
                    .parse()
                    .map_err(|e| internal(format!("{e}")))?;
                Ok((kind, r.get(1)))
            })
            .collect()
    }

    async fn oldest_queued(&self) -> Result<Vec<(Kind, Priority, OffsetDateTime)>, StoreError> {
        let mut client = self.reader().await?;
        let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        let stmt = client
            .prepare_cached(include_str!("sql/oldest_queued.sql"))
            .await?;
        let rows = client.query(&stmt, &[&kinds]).await?;
        let mut out = Vec::new();
        for r in &rows {
            let Some(at) = r.get::<_, Option<OffsetDateTime>>(2) else {
                continue;
            };
            let kind: Kind = r
                .get::<_, String>(0)
                .parse()
                .map_err(|e| internal(format!("{e}")))?;
            let priority = Priority::from_rank(r.get(1)).ok_or_else(|| internal("bad priority"))?;
            out.push((kind, priority, at));
        }
        Ok(out)
    }
}

/// A history entry from the first seven columns of `item_history.sql` or `item_ledger.sql`.
fn history_entry(r: &tokio_postgres::Row) -> HistoryEntry {
    HistoryEntry {
        seq: r.get(0),
        at: r.get(1),
        event: r.get(2),
        from: r.get(3),
        to: r.get(4),
        actor: r.get(5),
        fence: r.get::<_, Option<i64>>(6).map(|f| f as u64),
    }
}

#[cfg(test)]
mod tests;
