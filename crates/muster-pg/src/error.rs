use muster_app::ports::StoreError;

/// Errors of the adapter outside the ports (setup, migrations, verification).
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("invalid database URL: {0}")]
    Url(String),
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Db(String),
    #[error("migration {version} was changed after it was applied (checksum differs)")]
    MigrationChanged { version: i32 },
    #[error(
        "the database has migration {0}, which this binary does not know and cannot serve alongside its own"
    )]
    UnknownMigration(i32),
    #[error(transparent)]
    Chain(#[from] muster_ledger::ChainError),
    #[error("database role: {0}")]
    Role(String),
    #[error("TLS to Logbook: {0}")]
    Tls(String),
    #[error("ledger: {0}")]
    Ledger(String),
}

impl PgError {
    pub fn code(&self) -> &'static str {
        match self {
            PgError::Url(_) => "E_DB_URL",
            PgError::Unavailable(_) => "E_UNAVAILABLE",
            PgError::Db(_) => "E_DB",
            PgError::MigrationChanged { .. } => "E_MIGRATION_CHANGED",
            PgError::UnknownMigration(_) => "E_MIGRATION_UNKNOWN",
            PgError::Chain(e) => e.code(),
            PgError::Role(_) => "E_DB_ROLE",
            PgError::Tls(_) => "E_DB_TLS",
            PgError::Ledger(_) => "E_LEDGER",
        }
    }
}

/// Whether a driver error means "the database cannot be reached or is shedding load" rather
/// than "this statement is wrong".
pub(crate) fn is_unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        // 08: connection exception; 53: insufficient resources; 57: operator intervention
        // (admin shutdown, statement timeout / cancel); 55P03 (lock timeout) is transient too,
        // and so are 40001 (serialization failure) and 40P01 (deadlock detected): PostgreSQL
        // rolled the transaction back whole, and the same request, retried, can succeed. Every
        // call that reaches the database is safe to retry (leases are re-offered, completions
        // are idempotent by lease id), so the client's retry on 503 is the right remedy.
        Some(state) => {
            let c = state.code();
            c.starts_with("08")
                || c.starts_with("53")
                || c.starts_with("57")
                || c == "55P03"
                || c == "40001"
                || c == "40P01"
        }
        // No SQLSTATE: unavailable only if the connection itself failed (I/O, connect,
        // timeout); a type conversion or row-count error is a bug, not an outage.
        None => {
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                if s.is::<std::io::Error>() {
                    return true;
                }
                source = s.source();
            }
            let text = e.to_string();
            text.starts_with("error connecting")
                || text.contains("timeout")
                || text.contains("timed out")
        }
    }
}

/// The driver's own `Display` says only "db error"; this adds the server's message and SQLSTATE.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({}): {}", db.severity(), db.code().code(), db.message()),
        None => match std::error::Error::source(e) {
            Some(src) => format!("{e}: {src}"),
            None => e.to_string(),
        },
    }
}

pub(crate) fn store_err(e: tokio_postgres::Error) -> StoreError {
    if is_unavailable(&e) {
        StoreError::Unavailable(describe(&e))
    } else {
        StoreError::Internal(describe(&e))
    }
}

pub(crate) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => store_err(e),
        other => StoreError::Unavailable(other.to_string()),
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        if is_unavailable(&e) {
            PgError::Unavailable(describe(&e))
        } else {
            PgError::Db(describe(&e))
        }
    }
}

impl From<deadpool_postgres::PoolError> for PgError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match pool_err(e) {
            StoreError::Unavailable(m) => PgError::Unavailable(m),
            StoreError::Internal(m) => PgError::Db(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_unavailable;

    /// The driver error PostgreSQL answers when a statement raises `sqlstate`.
    async fn raised(sqlstate: &str) -> tokio_postgres::Error {
        let db = muster_testkit::fresh_db().await;
        let client = db.client().await;
        let sql =
            format!("DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{sqlstate}'; END $$");
        client
            .batch_execute(&sql)
            .await
            .expect_err("the statement raises")
    }

    #[tokio::test]
    async fn a_deadlock_is_a_transient_unavailability() {
        assert!(is_unavailable(&raised("40P01").await));
    }

    #[tokio::test]
    async fn a_serialization_failure_is_a_transient_unavailability() {
        assert!(is_unavailable(&raised("40001").await));
    }

    #[tokio::test]
    async fn a_deferred_constraint_failure_at_commit_is_not_transient() {
        assert!(!is_unavailable(&raised("40002").await));
    }

    #[tokio::test]
    async fn a_unique_violation_is_a_bug_not_an_outage() {
        assert!(!is_unavailable(&raised("23505").await));
    }

    #[tokio::test]
    async fn an_admin_shutdown_is_a_transient_unavailability() {
        assert!(is_unavailable(&raised("57P01").await));
    }
}
