//! Schema migrations: the SQL files of `/migrations`, embedded at build time, applied in version
//! order, each in its own transaction, under an advisory lock so that concurrent `muster migrate`
//! runs cannot interleave. Applied files are remembered with a BLAKE3 checksum; changing an
//! applied file is refused.
//!
//! After the files, the runtime role is granted exactly `grants::RUNTIME_GRANTS` (every run, so
//! drift is repaired): the role's name is a setting, which checksummed SQL files cannot carry.
//!
//! (A runner such as refinery would apply the files too; the job is small enough to own.)

use deadpool_postgres::Pool;

use crate::PgError;

/// One embedded migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// `Migration`s of `migrations/V<version>__<name>.sql`, embedded.
macro_rules! migrations {
    ($($version:literal $name:literal,)*) => {
        &[$(Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../../../migrations/V", $version, "__", $name, ".sql")),
        },)*]
    };
}

/// Every migration this binary knows, in version order.
pub const MIGRATIONS: &[Migration] = migrations![
    1 "core",
    2 "worker_digests",
    3 "worker_health",
    4 "ledger_feed",
    5 "edit_intake",
    6 "pipelined_writes",
    7 "autovacuum",
    8 "lease_indexes",
    9 "drop_lease_order",
    10 "health_events_redacted_anew",
    11 "items_listing_index",
    12 "cancelled",
    13 "cancelled_validated",
    14 "kind_pauses",
    15 "kind_pauses_validated",
    17 "ledger_checkpoints",
    18 "retention",
    20 "ledger_archived",
    21 "lighter_transitions",
    22 "lighter_transitions_contract",
    23 "retention_archived_entries",
    24 "item_trace",
];

/// The newest migration this binary knows.
fn newest_version() -> i32 {
    MIGRATIONS.iter().map(|m| m.version).max().unwrap_or(0)
}

/// An arbitrary fixed key for `pg_advisory_lock`: "muster-migrate".
const LOCK_KEY: i64 = 0x6d75_7374_6572_6d69;

/// The schema and the table that records applied migrations.
const HISTORY_DDL: &str = include_str!("migrate/sql/history.sql");

fn checksum(m: &Migration) -> Vec<u8> {
    blake3::hash(m.sql.as_bytes()).as_bytes().to_vec()
}

/// Applies every pending migration, then gives the runtime role `runtime_role` (created
/// `NOLOGIN` when absent) exactly the privileges of [`crate::grants::RUNTIME_GRANTS`]; answers
/// the versions applied now. Runs as the schema owner.
pub async fn migrate(pool: &Pool, runtime_role: &str) -> Result<Vec<i32>, PgError> {
    crate::grants::validate_role(runtime_role)?;
    let mut client = pool.get().await?;
    crate::grants::refuse_runtime_role_as_owner(&client, runtime_role).await?;
    client
        .execute(include_str!("migrate/sql/lock.sql"), &[&LOCK_KEY])
        .await?;
    let result = match apply_pending(&mut client).await {
        Ok(applied) => crate::grants::grant_runtime_role(&mut client, runtime_role)
            .await
            .map(|()| applied),
        Err(e) => Err(e),
    };
    let unlock = client
        .execute(include_str!("migrate/sql/unlock.sql"), &[&LOCK_KEY])
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_pending(client: &mut deadpool_postgres::Object) -> Result<Vec<i32>, PgError> {
    client.batch_execute(HISTORY_DDL).await?;
    let rows = client
        .query(include_str!("migrate/sql/applied.sql"), &[])
        .await?;
    let known: Vec<(i32, Vec<u8>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let newest = newest_version();
    let mut newer = Vec::new();
    for (version, sum) in &known {
        match MIGRATIONS.iter().find(|m| m.version == *version) {
            Some(m) if checksum(m) == *sum => {}
            Some(_) => return Err(PgError::MigrationChanged { version: *version }),
            // A newer release migrated this database: expected after a rollback.
            None if *version > newest => newer.push(*version),
            None => return Err(PgError::UnknownMigration(*version)),
        }
    }
    let pending: Vec<&Migration> = MIGRATIONS
        .iter()
        .filter(|m| !known.iter().any(|(v, _)| *v == m.version))
        .collect();
    if let Some(first) = newer.first() {
        // Applying an older migration after newer ones could undo what they rely on.
        if !pending.is_empty() {
            return Err(PgError::UnknownMigration(*first));
        }
        tracing::warn!(
            newer = ?newer,
            newest_known = newest,
            "the schema is newer than this binary; nothing to apply (a rollback by one release is served)"
        );
    }
    let mut applied = Vec::new();
    for m in pending {
        let tx = client.transaction().await?;
        tx.batch_execute(m.sql).await?;
        tx.execute(
            include_str!("migrate/sql/record.sql"),
            &[&m.version, &m.name, &checksum(m)],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version = m.version, name = m.name, "migration applied");
        applied.push(m.version);
    }
    Ok(applied)
}

/// Where the database's schema stands relative to this binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaStatus {
    Current,
    /// Migrations are pending: `muster migrate` has not run for this binary yet.
    Behind {
        applied: i32,
        expected: i32,
    },
    /// The database has migrations this binary does not know (a newer binary migrated it).
    Ahead {
        applied: i32,
        expected: i32,
    },
}

/// Compares the applied migrations with the embedded ones (for `/readyz`).
pub async fn schema_status(pool: &Pool) -> Result<SchemaStatus, PgError> {
    let client = pool.get().await?;
    let expected = newest_version();
    let exists: bool = client
        .query_one(include_str!("migrate/sql/history_exists.sql"), &[])
        .await?
        .get(0);
    let applied: i32 = if exists {
        client
            .query_one(include_str!("migrate/sql/newest_applied.sql"), &[])
            .await?
            .get(0)
    } else {
        0
    };
    Ok(match applied.cmp(&expected) {
        std::cmp::Ordering::Equal => SchemaStatus::Current,
        std::cmp::Ordering::Less => SchemaStatus::Behind { applied, expected },
        std::cmp::Ordering::Greater => SchemaStatus::Ahead { applied, expected },
    })
}

#[cfg(test)]
mod tests {
    /// The indexes of `core.items` after every migration, by name.
    async fn item_indexes() -> Vec<String> {
        let db = muster_testkit::fresh_db().await;
        let rows = db
            .client()
            .await
            .query(
                "SELECT indexname::text FROM pg_indexes
                 WHERE schemaname = 'core' AND tablename = 'items' ORDER BY indexname",
                &[],
            )
            .await
            .expect("list the indexes");
        rows.iter().map(|r| r.get(0)).collect()
    }

    /// `migrate` on a fully migrated database that also records `version` as applied.
    async fn migrate_with_recorded(version: i32) -> Result<Vec<i32>, crate::PgError> {
        let db = muster_testkit::fresh_db().await;
        db.client()
            .await
            .execute(
                "INSERT INTO core.schema_migrations (version, name, checksum) \
                 VALUES ($1, 'from elsewhere', '\\x00')",
                &[&version],
            )
            .await
            .expect("record a migration");
        super::migrate(&db.pool(), crate::DEFAULT_RUNTIME_ROLE).await
    }

    #[tokio::test]
    async fn an_older_binary_applies_nothing_to_a_newer_schema_and_succeeds() {
        assert_eq!(
            migrate_with_recorded(super::newest_version() + 1)
                .await
                .expect("migrate"),
            Vec::<i32>::new()
        );
    }

    #[tokio::test]
    async fn an_unknown_migration_older_than_the_binarys_newest_is_refused() {
        let err = migrate_with_recorded(0).await.expect_err("refused");
        assert_eq!(err.code(), "E_MIGRATION_UNKNOWN");
    }

    #[tokio::test]
    async fn v10_drops_the_health_events_stored_before_node_names_were_known() {
        let db = muster_testkit::fresh_db().await;
        let client = db.client().await;
        client
            .execute(
                "INSERT INTO core.worker_health (kind, events, updated_at) \
                 VALUES ('trawl', '[{\"reason\": \"NodeNotReady\", \"message\": \"rack3-blade12\"}]', now())",
                &[],
            )
            .await
            .expect("a health row from before");
        let v10 = super::MIGRATIONS
            .iter()
            .find(|m| m.version == 10)
            .expect("V10");
        client.batch_execute(v10.sql).await.expect("V10 runs again");
        let events: String = client
            .query_one(
                "SELECT events::text FROM core.worker_health WHERE kind = 'trawl'",
                &[],
            )
            .await
            .expect("the row")
            .get(0);
        assert_eq!(events, "[]");
    }

    #[tokio::test]
    async fn the_items_table_keeps_only_the_indexes_its_statements_read() {
        assert_eq!(
            item_indexes().await,
            [
                "items_idempotency",
                "items_lease_expiry",
                "items_listing_unleased",
                "items_parked",
                "items_pkey",
                "items_queued_order",
            ]
        );
    }
}
