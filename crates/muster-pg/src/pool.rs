use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use crate::PgError;

/// Bounds on waiting for Logbook. Every one of them turns "the database is gone" into a fast
/// `503 E_UNAVAILABLE` instead of a hang.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_size: usize,
    /// Longest wait for a free connection.
    pub wait_timeout: Duration,
    /// Longest wait for a new connection to be established.
    pub connect_timeout: Duration,
    /// `statement_timeout` of every session.
    pub statement_timeout: Duration,
    /// `lock_timeout` of every session.
    pub lock_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_size: 16,
            wait_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(3),
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

/// A connection pool with every wait bounded.
pub fn connect_pool(url: &str, s: &PoolSettings) -> Result<Pool, PgError> {
    let target = pg_config(url, s)?;
    // A multi-host URL tries its hosts in turn, each within the connect timeout: a new
    // connection may take that long per host (a dead primary first, then the promoted one).
    let hosts = u32::try_from(target.config.get_hosts().len().max(1)).unwrap_or(u32::MAX);
    let create_timeout = s.connect_timeout.saturating_mul(hosts);
    let mgr = Manager::from_config(
        target.config,
        target.tls,
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
