//! The edit intake: daily salts and counters, spent challenges and edits inside a
//! transaction; the shared key, the moderators' listing and the daily purge outside one.

use async_trait::async_trait;
use muster_app::ports::{IntakeLog, IntakeStore, StoreError};
use muster_app::views::EditView;
use muster_domain::edit::{Edit, EditId, EditState};
use muster_ledger::ChainHead;
use time::OffsetDateTime;
use tokio_postgres::types::ToSql;

use super::PgLogbook;
use super::rows::internal;
use super::tx::PgTx;

impl PgTx {
    /// Writes an edit's state and chain head (`$1` id, `$2` state, `$3` time, `$4` chain length,
    /// `$5` chain head), then `extra` as `$6`….
    async fn write_edit(
        &mut self,
        sql: &str,
        edit: &Edit,
        at: OffsetDateTime,
        extra: &[&(dyn ToSql + Sync)],
    ) -> Result<(), StoreError> {
        let state = edit.state.as_str();
        let len = edit.chain.len as i64;
        let head = edit.chain.hash.as_slice();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&edit.id.0, &state, &at, &len, &head];
        params.extend_from_slice(extra);
        self.execute(sql, &params).await
    }

    /// Runs a conditional write whose `RETURNING` answers a row when it took effect, and says
    /// whether it did.
    async fn took_effect(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<bool, StoreError> {
        Ok(!self.query(sql, params).await?.is_empty())
    }
}

#[async_trait]
impl IntakeStore for PgTx {
    async fn day_salt(
        &mut self,
        day: time::Date,
        candidate: [u8; 32],
    ) -> Result<[u8; 32], StoreError> {
        self.execute(
            include_str!("sql/insert_day_salt.sql"),
            &[&day, &candidate.as_slice()],
        )
        .await?;
        let rows = self
            .query(include_str!("sql/day_salt.sql"), &[&day])
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
        let counted = self
            .took_effect(
                include_str!("sql/count_submission.sql"),
                &[&day, &client_hash.as_slice(), &(limit as i32)],
            )
            .await?;
        Ok(counted && limit > 0)
    }

    async fn spend_challenge(
        &mut self,
        spend_key: [u8; 32],
        expires_at: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        self.took_effect(
            include_str!("sql/spend_challenge.sql"),
            &[&spend_key.as_slice(), &expires_at],
        )
        .await
    }

    async fn insert_edit(
        &mut self,
        edit: &Edit,
        body: &str,
        at: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let extra: [&(dyn ToSql + Sync); 3] = [&edit.target, &edit.owner, &body];
        self.write_edit(include_str!("sql/insert_edit.sql"), edit, at, &extra)
            .await
    }

    async fn lock_edit(&mut self, id: EditId) -> Result<Option<Edit>, StoreError> {
        let rows = self
            .query(include_str!("sql/lock_edit.sql"), &[&id.0])
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
        self.write_edit(include_str!("sql/save_edit.sql"), edit, at, &[])
            .await
    }
}

#[async_trait]
impl IntakeLog for PgLogbook {
    async fn pow_key(&self, candidate: [u8; 32]) -> Result<[u8; 32], StoreError> {
        let mut client = self.reader().await?;
        client
            .execute(
                include_str!("sql/insert_pow_key.sql"),
                &[&candidate.as_slice()],
            )
            .await?;
        let key: Vec<u8> = client
            .query_one(include_str!("sql/pow_key.sql"), &[])
            .await?
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
        let mut client = self.reader().await?;
        let rows = client
            .query(
                include_str!("sql/list_edits.sql"),
                &[&state.as_str(), &after.map(|a| a.0), &limit],
            )
            .await?;
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
        let mut client = self.reader().await?;
        let mut n = 0;
        n += client
            .execute(include_str!("sql/purge_intake_counts.sql"), &[&today])
            .await?;
        n += client
            .execute(include_str!("sql/purge_intake_salts.sql"), &[&today])
            .await?;
        n += client
            .execute(include_str!("sql/purge_pow_spent.sql"), &[&now])
            .await?;
        Ok(n)
    }
}
