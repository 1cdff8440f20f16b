use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use crate::PgError;

pub(crate) mod hosts;

/// The longest Muster waits for Logbook's answer to one round trip of a transaction: a
/// pipeline of statements, the COMMIT, the ROLLBACK of a dropped transaction, a statement's
/// preparation. Past it the connection is closed (its protocol state is unknown, so it never
/// goes back to the pool), its host is marked (`pool/hosts.rs`) and the caller gets
/// `StoreError::Unavailable` (503). A COMMIT that met it is in doubt: it may have committed;
/// the answer claims neither outcome and the client's retry settles it (per-lease
/// idempotency replays a committed completion).
///
/// Why 2 s and not a setting: the statements of a transaction are index lookups and writes
/// answered in milliseconds, and a live server answers the slow ones itself before this
/// (`lock_timeout` 1.5 s); the only waits it cuts are a server that does not answer at all. It
/// is the pool wait and the connect timeout too, so "Logbook is gone" costs a caller about 2 s
/// however it shows, and it keeps a failover within seconds: connections to a frozen primary
/// are let go 2 s after their last request.
pub const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(2);

/// Bounds on waiting for Logbook. Every one of them turns "the database is gone" into a fast
/// `503 E_UNAVAILABLE` instead of a hang.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_size: usize,
    /// Longest wait for a free connection.
    pub wait_timeout: Duration,
    /// Longest wait for a new connection to be established.
    pub connect_timeout: Duration,
    /// `statement_timeout` of every session (the bound of reads outside a transaction; inside
    /// one, [`ROUND_TRIP_TIMEOUT`] cuts first).
    pub statement_timeout: Duration,
    /// `lock_timeout` of every session; under [`ROUND_TRIP_TIMEOUT`].
    pub lock_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_size: 16,
            wait_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            // Under ROUND_TRIP_TIMEOUT: a live server answers a lock wait itself (55P03, 503)
            // before the client takes it for silent.
            lock_timeout: Duration::from_millis(1500),
        }
    }
}

/// Idle time of a connection before the first keep-alive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
/// Time between unanswered keep-alive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// Unanswered probes after which the connection is dead.
pub const KEEPALIVE_RETRIES: u32 = 3;
/// Longest time written data may stay unacknowledged before the connection is dead.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(8);

/// Parses a connection URL (`sslmode` and `sslrootcert` as libpq reads them) and applies the
/// session settings Muster relies on.
pub(crate) fn pg_config(url: &str, s: &PoolSettings) -> Result<crate::tls::DbTarget, PgError> {
    let mut target = crate::tls::parse_url(url)?;
    let cfg = &mut target.config;
    cfg.connect_timeout(s.connect_timeout);
    // A link that drops packets silently (a partition, a dead host) gives no error: without
    // these a connection waits for TCP's own limits (minutes to hours). Keep-alives find a
    // dead peer of an idle or waiting connection after KEEPALIVE_IDLE + RETRIES × INTERVAL
    // (8 s); TCP_USER_TIMEOUT bounds how long sent data may stay unacknowledged (a query or a
    // COMMIT written into a dead link) to the same 8 s. The connection then fails, the request
    // is answered 503 E_UNAVAILABLE, and the pool connects afresh (to the next host of a
    // multi-host URL, with `target_session_attrs=read-write`, after a failover).
    cfg.keepalives(true);
    cfg.keepalives_idle(KEEPALIVE_IDLE);
    cfg.keepalives_interval(KEEPALIVE_INTERVAL);
    cfg.keepalives_retries(KEEPALIVE_RETRIES);
    cfg.tcp_user_timeout(TCP_USER_TIMEOUT);
    cfg.application_name("muster");
    // Every statement is prepared once per connection and written to be an index lookup
    // whatever its parameters; the bulk statements take arrays (`unnest`), for which PostgreSQL
    // would otherwise plan afresh at every execution (a custom plan for a one-element array
    // always looks cheaper than the generic one). Generic plans: planned once per connection.
    cfg.options(format!(
        "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout=30000 -c TimeZone=UTC -c plan_cache_mode=force_generic_plan",
        s.statement_timeout.as_millis(),
        s.lock_timeout.as_millis()
    ));
    Ok(target)
}

/// A connection pool with every wait bounded. New connections go to the host that last
/// answered read-write first, and a host that just failed is tried last within a short
/// budget (`pool/hosts.rs`).
pub fn connect_pool(url: &str, s: &PoolSettings) -> Result<Pool, PgError> {
    let target = pg_config(url, s)?;
    let book = Arc::new(hosts::HostBook::new(&target.config, s.connect_timeout));
    // A multi-host URL tries its hosts in turn, each within the connect timeout (a suspect
    // one within less): a new connection may take that long per host.
    let hosts = u32::try_from(book.order(std::time::Instant::now()).len()).unwrap_or(u32::MAX);
    let create_timeout = s.connect_timeout.saturating_mul(hosts);
    let connect = hosts::OrderedConnect {
        book,
        tls: target.tls,
    };
    let mgr = Manager::from_connect(
        target.config,
        connect,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(mgr)
        .max_size(s.max_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(s.wait_timeout))
        .create_timeout(Some(create_timeout))
        .recycle_timeout(Some(s.connect_timeout))
        .build()
        .map_err(|e| PgError::Db(e.to_string()))
}

#[cfg(test)]
mod tests;
