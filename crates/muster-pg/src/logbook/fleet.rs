//! The fleet: deployed worker images (and the items parked for them), and the health
//! Shipkeeper reports.

use async_trait::async_trait;
use muster_app::ports::{FleetStore, HealthLog, StoreError};
use muster_app::views::HealthView;
use muster_domain::health::{HealthEvent, KindHealth, MAX_EVENTS_PER_KIND};
use muster_domain::trace::TraceContext;
use muster_domain::{Item, Kind};
use serde_json::Value;
use time::OffsetDateTime;

use super::PgLogbook;
use super::rows::{internal, traced_item_from_row};
use super::tx::PgTx;

#[async_trait]
impl FleetStore for PgTx {
    async fn record_digest(
        &mut self,
        kind: Kind,
        digest: &str,
        at: OffsetDateTime,
    ) -> Result<Option<String>, StoreError> {
        // Exclusive against parks of the kind (which take the shared form), also before the
        // kind's first report, when there is no digest row to lock yet. The lock is a statement
        // of its own (it travels in one pipeline with the next): a statement's snapshot is taken
        // when it starts, so only a statement after the lock sees what a report committed while
        // this one waited.
        self.defer(
            include_str!("sql/lock_digest.sql"),
            vec![Box::new(kind.as_str())],
        )
        .await?;
        // `previous` reads the statement's snapshot, from before the upsert: the digest that was
        // deployed until now (NULL before the kind's first report).
        let rows = self
            .query(
                include_str!("sql/record_digest.sql"),
                &[&kind.as_str(), &digest, &at],
            )
            .await?;
        Ok(rows.first().and_then(|r| r.get::<_, Option<String>>(0)))
    }

    async fn deployed_digest(&mut self, kind: Kind) -> Result<Option<String>, StoreError> {
        // The shared advisory lock orders a park against a concurrent digest report even before
        // the kind's first report, when there is no digest row to lock. It is taken by a
        // statement of its own (sent in one pipeline with the read): the read's snapshot is then
        // taken after the lock was granted, so a report that held the lock has committed and its
        // digest is seen. (Read in the locking statement, the digest came from a snapshot older
        // than that report, and the park stranded the item under the old digest.)
        self.defer(
            include_str!("sql/lock_digest_shared.sql"),
            vec![Box::new(kind.as_str())],
        )
        .await?;
        let rows = self
            .query(include_str!("sql/deployed_digest.sql"), &[&kind.as_str()])
            .await?;
        Ok(rows.first().and_then(|r| r.get::<_, Option<String>>(0)))
    }

    async fn lock_parked(
        &mut self,
        kind: Kind,
        deployed: &str,
    ) -> Result<Vec<(Item, Option<TraceContext>)>, StoreError> {
        let rows = self
            .query(
                include_str!("sql/lock_parked.sql"),
                &[&kind.as_str(), &deployed],
            )
            .await?;
        rows.iter().map(|r| traced_item_from_row(r, 0)).collect()
    }
}

#[async_trait]
impl HealthLog for PgLogbook {
    async fn store_health(
        &self,
        health: &[KindHealth],
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let mut client = self.reader().await?;
        let stmt = client
            .prepare_cached(include_str!("sql/store_health.sql"))
            .await?;
        let keep = MAX_EVENTS_PER_KIND as i64;
        for k in health {
            let events = Value::Array(k.events.iter().map(health_event_json).collect());
            client
                .execute(
                    &stmt,
                    &[
                        &k.kind.as_str(),
                        &(k.pods as i32),
                        &k.ready,
                        &(k.restarts as i32),
                        &k.phase,
                        &events,
                        &at,
                        &keep,
                    ],
                )
                .await?;
        }
        Ok(())
    }

    async fn latest_health(&self) -> Result<Vec<HealthView>, StoreError> {
        let mut client = self.reader().await?;
        let rows = client
            .query(include_str!("sql/latest_health.sql"), &[])
            .await?;
        rows.iter()
            .map(|r| {
                let kind: String = r.get(0);
                let events: Value = r.get(4);
                Ok(HealthView {
                    kind: kind.parse().map_err(|e| internal(format!("{e}")))?,
                    digest: r.get(6),
                    ready: r.get(1),
                    restarts: r.get::<_, i32>(2) as u32,
                    phase: r.get(3),
                    events: serde_json::from_value(events).map_err(|e| internal(e.to_string()))?,
                    at: r.get(5),
                })
            })
            .collect()
    }
}

fn health_event_json(e: &HealthEvent) -> Value {
    serde_json::json!({"kind": e.kind, "reason": e.reason, "message": e.message})
}

#[cfg(test)]
mod tests;
