//! `needs_subtool`: parking an item no deployed image can handle (to park = the transition to
//! the state `needs_subtool`; a parked item is one in that state), and replaying parked items
//! when Shipkeeper reports a new image.

use muster_domain::{ItemState, Kind, LeaseId, OutcomeKind, Principal, is_image_digest};
use serde_json::json;

use super::{Finishing, Muster};
use crate::error::AppError;
use crate::views::{DigestRecorded, NeedsSubtoolRequest, Parked};

impl Muster {
    /// `POST /v1/leases/{id}/needs_subtool`: parks the item with the digest that could not
    /// handle it.
    pub async fn needs_subtool(
        &self,
        actor: Principal,
        lease_id: LeaseId,
        req: NeedsSubtoolRequest,
    ) -> Result<Parked, AppError> {
        if !is_image_digest(&req.worker_digest) {
            return Err(AppError::BadRequest(
                "worker_digest must be sha256: followed by 64 lowercase hex digits".into(),
            ));
        }
        let request = json!({"worker_digest": req.worker_digest, "layout": req.layout});
        let mut f = match self
            .begin_finish(
                actor,
                lease_id,
                req.worker_id.as_deref(),
                (OutcomeKind::Parked, &request),
                "park",
            )
            .await?
        {
            Finishing::Proceed(f) => *f,
            Finishing::Replay(answer, trace) => return Ok(Parked { trace, ..answer }),
        };
        // A worker still running an image other than the one already reported as deployed
        // (a rollout in progress): the deployed image may handle the layout, so the item is
        // replayed at once rather than waiting for a digest report that already happened.
        let deployed =
            f.tx.deployed_digest(f.item.kind)
                .await?
                .filter(|d| *d != req.worker_digest);
        let (record, now) = (&f.record, f.now);
        let entries = match deployed {
            Some(deployed) => {
                let policy = self.config.policy(f.item.kind);
                f.item.park_and_replay(
                    record,
                    actor,
                    &req.worker_digest,
                    &deployed,
                    &req.layout,
                    &policy,
                    now,
                )?
            }
            None => vec![
                f.item
                    .park(record, actor, Some(&req.worker_digest), &req.layout, now)?,
            ],
        };
        let item = f.item.clone();
        let answer = Parked {
            item_id: item.id.to_string(),
            state: item.state,
            trace: f.item_trace(),
        };
        self.close_finish(f, &answer, &entries).await?;
        self.stats.parked.add(item.kind, 1);
        match item.state {
            ItemState::Queued => {
                self.stats.replayed.add(item.kind, 1);
                self.signal.notify(item.kind);
            }
            ItemState::Failed => self.stats.failed_final.add(item.kind, 1),
            _ => {}
        }
        Ok(answer)
    }

    /// `PUT /v1/workers/{kind}/digest`: Shipkeeper reports the image deployed for a kind. Every
    /// item of that kind parked under another digest returns to the queue, in the transaction
    /// that records the digest.
    pub async fn report_digest(
        &self,
        actor: Principal,
        kind: Kind,
        digest: &str,
    ) -> Result<DigestRecorded, AppError> {
        if actor != Principal::Shipkeeper {
            return Err(AppError::Forbidden(format!(
                "{actor} may not report worker digests"
            )));
        }
        if !is_image_digest(digest) {
            return Err(AppError::BadRequest(
                "digest must be sha256: followed by 64 lowercase hex digits".into(),
            ));
        }
        let now = self.clock.now();
        let mut tx = self.stores.logbook.begin().await?;
        let previous = tx.record_digest(kind, digest, now).await?;
        if previous.as_deref() == Some(digest) {
            self.commit(tx).await?;
            return Ok(DigestRecorded {
                kind,
                digest: digest.to_owned(),
                replayed: 0,
                traces: Vec::new(),
            });
        }
        let (mut parked, traces): (Vec<_>, Vec<_>) =
            tx.lock_parked(kind, digest).await?.into_iter().unzip();
        let mut entries = Vec::with_capacity(parked.len());
        for item in &mut parked {
            entries.push(item.replay(actor, digest, now)?);
            tx.save_item(item).await?;
        }
        self.commit_with(tx, &entries).await?;
        self.stats.replayed.add(kind, parked.len() as u64);
        if !parked.is_empty() {
            tracing::info!(kind = %kind, replayed = parked.len(), "parked items replayed for a new worker digest");
            self.signal.notify(kind);
        }
        Ok(DigestRecorded {
            kind,
            digest: digest.to_owned(),
            replayed: parked.len() as u64,
            traces: traces.into_iter().flatten().collect(),
        })
    }
}
