//! Kinds: a kind's pause state and the head of its ledger chain (`core.kind_pauses`). The
//! lease statement reads the same table (`sql/lease_scan.sql`).

use async_trait::async_trait;
use muster_app::ports::{KindStore, StoreError};
use muster_domain::Kind;
use muster_domain::pause::KindPause;
use muster_ledger::ChainHead;
use time::OffsetDateTime;

use super::rows::internal;
use super::tx::PgTx;

#[async_trait]
impl KindStore for PgTx {
    async fn lock_kind(&mut self, kind: Kind) -> Result<KindPause, StoreError> {
        let rows = self
            .query(include_str!("sql/lock_kind.sql"), &[&kind.as_str()])
            .await?;
        let r = rows
            .first()
            .ok_or_else(|| internal("locking a kind answered no row"))?;
        let chain_len: i64 = r.get(4);
        let chain_head: Vec<u8> = r.get(5);
        Ok(KindPause {
            kind,
            paused: r.get(0),
            since: r.get::<_, Option<OffsetDateTime>>(1),
            reason: r.get(2),
            actor: r.get(3),
            chain: ChainHead {
                len: u64::try_from(chain_len).map_err(|_| internal("negative chain length"))?,
                hash: chain_head
                    .try_into()
                    .map_err(|_| internal("a chain head is not 32 bytes"))?,
            },
        })
    }

    async fn save_kind(&mut self, pause: &KindPause) -> Result<(), StoreError> {
        let chain_len =
            i64::try_from(pause.chain.len).map_err(|_| internal("chain length out of range"))?;
        self.defer(
            include_str!("sql/save_kind.sql"),
            vec![
                Box::new(pause.kind.as_str()),
                Box::new(pause.paused),
                Box::new(pause.since),
                Box::new(pause.reason.clone()),
                Box::new(pause.actor.clone()),
                Box::new(chain_len),
                Box::new(pause.chain.hash.to_vec()),
            ],
        )
        .await
    }
}
