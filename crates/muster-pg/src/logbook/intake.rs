//! The edit intake: daily salts and counters, spent challenges and edits inside a
//! transaction; the shared key, the moderators' listing and the daily purge outside one.

use async_trait::async_trait;
use muster_app::ports::{IntakeLog, IntakeStore, StoreError};
use muster_app::views::EditView;
use muster_domain::edit::{Edit, EditId, EditState};
use muster_ledger::ChainHead;
use time::OffsetDateTime;

use super::PgLogbook;
use super::rows::internal;
use super::tx::PgTx;
use crate::error::{pool_err, store_err};

#[async_trait]
impl IntakeStore for PgTx {
    async fn day_salt(
        &mut self,
        day: time::Date,
        candidate: [u8; 32],
    ) -> Result<[u8; 32], StoreError> {
        self.execute(
            "INSERT INTO core.intake_salts (day, salt) VALUES ($1, $2) ON CONFLICT (day) DO NOTHING",
            &[&day, &candidate.as_slice()],
        )
        .await?;
        let rows = self
            .query("SELECT salt FROM core.intake_salts WHERE day = $1", &[&day])
            .await?;
        let salt: Vec<u8> = rows
            .first()
            .ok_or_else(|| internal("no salt for the day"))?
            .get(0);
        salt.try_into()
            .map_err(|_| internal("salt is not 32 bytes"))
    }

    async fn count_submission(
        &mut self,
        day: time::Date,
        client_hash: [u8; 32],
        limit: u32,
    ) -> Result<bool, StoreError> {
        let rows = self
            .query(
                "INSERT INTO core.intake_counts AS c (day, client_hash, count) VALUES ($1, $2, 1)
                 ON CONFLICT (day, client_hash) DO UPDATE SET count = c.count + 1 WHERE c.count < $3
                 RETURNING count",
                &[&day, &client_hash.as_slice(), &(limit as i32)],
            )
            .await?;
        Ok(!rows.is_empty() && limit > 0)
    }

    async fn spend_challenge(
        &mut self,
        spend_key: [u8; 32],
        expires_at: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        let rows = self
            .query(
                "INSERT INTO core.pow_spent (spend_key, expires_at) VALUES ($1, $2)
                 ON CONFLICT (spend_key) DO NOTHING RETURNING 1",
                &[&spend_key.as_slice(), &expires_at],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn insert_edit(
        &mut self,
        edit: &Edit,
        body: &str,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO core.edits (id, target, owner, body, state, submitted_at, chain_len, chain_head)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[&edit.id.0, &edit.target, &edit.owner, &body, &edit.state.as_str(), &at, &(edit.chain.len as i64), &edit.chain.hash.as_slice()],
        )
        .await?;
        Ok(())
    }

    async fn lock_edit(&mut self, id: EditId) -> Result<Option<Edit>, StoreError> {
        let rows = self
            .query("SELECT id, target, owner, state, chain_len, chain_head FROM core.edits WHERE id = $1 FOR UPDATE", &[&id.0])
            .await?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let state: String = r.get(3);
        let head: Vec<u8> = r.get(5);
        Ok(Some(Edit {
            id: EditId(r.get(0)),
            target: r.get(1),
            owner: r.get(2),
            state: state.parse().map_err(internal)?,
            chain: ChainHead {
                len: r.get::<_, i64>(4) as u64,
                hash: head
                    .try_into()
                    .map_err(|_| internal("chain head is not 32 bytes"))?,
            },
        }))
    }

    async fn save_edit(&mut self, edit: &Edit, at: OffsetDateTime) -> Result<(), StoreError> {
        self.execute(
            "UPDATE core.edits SET state = $2, decided_at = $3, chain_len = $4, chain_head = $5 WHERE id = $1",
            &[&edit.id.0, &edit.state.as_str(), &at, &(edit.chain.len as i64), &edit.chain.hash.as_slice()],
        )
        .await?;
        Ok(())
    }
}

#[async_trait]
impl IntakeLog for PgLogbook {
    async fn pow_key(&self, candidate: [u8; 32]) -> Result<[u8; 32], StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        client
            .execute(
                "INSERT INTO core.intake_secrets (name, secret) VALUES ('pow_key', $1) ON CONFLICT (name) DO NOTHING",
                &[&candidate.as_slice()],
            )
            .await
            .map_err(store_err)?;
        let key: Vec<u8> = client
            .query_one(
                "SELECT secret FROM core.intake_secrets WHERE name = 'pow_key'",
                &[],
            )
            .await
            .map_err(store_err)?
            .get(0);
        key.try_into()
            .map_err(|_| internal("pow key is not 32 bytes"))
    }

    async fn list_edits(
        &self,
        state: EditState,
        after: Option<EditId>,
        limit: i64,
    ) -> Result<Vec<EditView>, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let rows = client
            .query(
                "SELECT id, target, owner, body, state, submitted_at FROM core.edits
                 WHERE state = $1 AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
                &[&state.as_str(), &after.map(|a| a.0), &limit],
            )
            .await
            .map_err(store_err)?;
        rows.iter()
            .map(|r| {
                let state: String = r.get(4);
                Ok(EditView {
                    edit_id: r.get::<_, uuid::Uuid>(0).to_string(),
                    target: r.get(1),
                    owner: r.get(2),
                    body: r.get(3),
                    state: state.parse().map_err(internal)?,
                    submitted_at: r.get(5),
                })
            })
            .collect()
    }

    async fn purge_intake(
        &self,
        today: time::Date,
        now: OffsetDateTime,
    ) -> Result<u64, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let mut n = 0;
        n += client
            .execute("DELETE FROM core.intake_counts WHERE day < $1", &[&today])
            .await
            .map_err(store_err)?;
        n += client
            .execute("DELETE FROM core.intake_salts WHERE day < $1", &[&today])
            .await
            .map_err(store_err)?;
        n += client
            .execute("DELETE FROM core.pow_spent WHERE expires_at <= $1", &[&now])
            .await
            .map_err(store_err)?;
        Ok(n)
    }
}
