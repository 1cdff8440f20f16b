//! What operators, Conn, metrics and Shipkeeper read or report outside the item transitions:
//! an item with its history, the age of the queues, the fleet's health.

use muster_domain::health::{self, HealthEvent, PodHealth};
use muster_domain::{ItemId, Kind, Principal};

use std::sync::Arc;

use super::Muster;
use crate::error::AppError;
use crate::nodes::NodeDirectory;
use crate::views::{HealthAccepted, HealthSnapshot, ItemView};

impl Muster {
    /// Redacts health reports with the node names `nodes` holds (form and position only until
    /// this is called).
    pub fn with_node_names(mut self, nodes: Arc<NodeDirectory>) -> Self {
        self.nodes = nodes;
        self
    }

    /// `GET /v1/items/{id}`: operators and Conn.
    pub async fn item(&self, actor: Principal, id: ItemId) -> Result<ItemView, AppError> {
        crate::auth::may_read_items(actor)?;
        match self.stores.items.item_view(id).await? {
            Some(view) => Ok(view),
            None => self.removed_item(id).await,
        }
    }

    /// `GET /v1/health`: the current health of every kind with a stored report.
    pub async fn health(&self, actor: Principal) -> Result<HealthSnapshot, AppError> {
        crate::auth::may_read_health(actor)?;
        let kinds = self.stores.health.latest_health().await?;
        Ok(HealthSnapshot {
            at: self.clock.now(),
            kinds,
        })
    }

    /// How long the oldest queued item of each kind and priority has waited, and how long the
    /// oldest lease out of each kind has run, in seconds (for metrics), with each kind's
    /// maximum run time.
    pub async fn oldest_ages(&self) -> Result<OldestAges, AppError> {
        let now = self.clock.now();
        let age = |at: time::OffsetDateTime| (now - at).as_seconds_f64().max(0.0);
        let queued = self.stores.items.oldest_queued().await?;
        let leases = self.stores.items.oldest_leases().await?;
        Ok(OldestAges {
            queued: queued
                .into_iter()
                .map(|(k, p, at)| (k, p, age(at)))
                .collect(),
            leases: leases.into_iter().map(|(k, at)| (k, age(at))).collect(),
            max_run: Kind::ALL
                .iter()
                .map(|k| (*k, self.config.max_run(*k).as_seconds_f64()))
                .collect(),
        })
    }

    /// `POST /v1/health`: Shipkeeper's pod health and error events, redacted before anything
    /// is stored, logged or published.
    pub async fn report_health(
        &self,
        actor: Principal,
        pods: &[PodHealth],
        events: &[HealthEvent],
    ) -> Result<HealthAccepted, AppError> {
        if actor != Principal::Shipkeeper {
            return Err(AppError::Forbidden(format!(
                "{actor} may not report health"
            )));
        }
        let nodes = self.nodes.snapshot();
        let (kinds, redacted) = health::sanitize_with(pods, events, nodes.knowledge());
        self.stores
            .health
            .store_health(&kinds, self.clock.now())
            .await?;
        if redacted > 0 {
            tracing::info!(
                redacted,
                "addresses, host or node names redacted (or messages withheld) in a health report"
            );
        }
        Ok(HealthAccepted {
            accepted: (pods.len() + events.len()) as u64,
            redacted: redacted as u64,
        })
    }
}

/// The ages `/metrics` shows, in seconds ([`Muster::oldest_ages`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OldestAges {
    /// The oldest queued item per kind and priority.
    pub queued: Vec<(Kind, muster_domain::Priority, f64)>,
    /// The oldest lease out per kind (kinds with none are absent).
    pub leases: Vec<(Kind, f64)>,
    /// Every kind's maximum run time.
    pub max_run: Vec<(Kind, f64)>,
}
