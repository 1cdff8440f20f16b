//! What can go wrong in this crate.

use std::io;

/// Everything that can go wrong while managing a [`TempCluster`](crate::TempCluster).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DevDbError {
    /// A PostgreSQL program is not installed.
    #[error(
        "PostgreSQL program `{0}` not found on PATH nor in /usr/lib/postgresql/*/bin \
         (install PostgreSQL, e.g. `apt-get install postgresql`)"
    )]
    BinaryNotFound(String),
    /// Running as root but there is no `postgres` account to run the cluster as.
    #[error(
        "running as root, but /etc/passwd has no `postgres` account to run PostgreSQL as \
         (create it: useradd --system --no-create-home --shell /usr/sbin/nologin postgres)"
    )]
    NoPostgresAccount,
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// `initdb` failed; `output` holds what it printed.
    #[error("initdb failed:\n{output}")]
    Initdb {
        /// Captured stdout and stderr of every attempt.
        output: String,
    },
    /// The server did not start.
    #[error("PostgreSQL did not start: {detail}\n--- last lines of {log} ---\n{log_tail}")]
    Start {
        /// `pg_ctl`'s exit status and output.
        detail: String,
        /// The server log file.
        log: String,
        /// The last lines of the server log.
        log_tail: String,
    },
    /// The server did not stop.
    #[error("PostgreSQL did not stop: {detail}\n--- last lines of {log} ---\n{log_tail}")]
    Stop {
        /// `pg_ctl`'s exit status and output.
        detail: String,
        /// The server log file.
        log: String,
        /// The last lines of the server log.
        log_tail: String,
    },
    /// A step of a task (see [`step`](crate::step)) ran and failed.
    #[error("`{title}` failed ({status})")]
    Step {
        /// The step's title.
        title: String,
        /// Its exit status.
        status: String,
    },
    /// `psql -c` failed.
    #[error("psql -c '{sql}' failed ({status}): {stderr}")]
    Psql {
        /// The statement.
        sql: String,
        /// psql's exit status.
        status: String,
        /// What psql wrote to stderr.
        stderr: String,
    },
    /// A server process exited while it was waited for (see [`wait_for_200`](crate::wait_for_200)).
    #[error("exited early ({status})")]
    ExitedEarly {
        /// Its exit status.
        status: String,
    },
    /// A server did not answer 200 in time (see [`wait_for_200`](crate::wait_for_200)).
    #[error("{request} did not answer 200 within {seconds} s")]
    NoAnswer {
        /// The request, e.g. `GET /healthz`.
        request: String,
        /// How long it was waited for.
        seconds: u64,
    },
    /// `muster serve` did not become healthy (see [`wait_healthy`](crate::wait_healthy)).
    #[error("muster serve on {addr}: {source}; see {log}")]
    Unhealthy {
        /// Where it was to listen.
        addr: String,
        /// Its log file.
        log: String,
        /// Why waiting for it failed.
        #[source]
        source: Box<DevDbError>,
    },
}

impl DevDbError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        DevDbError::Io {
            context: context.into(),
            source,
        }
    }
}
