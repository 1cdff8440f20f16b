//! The `muster` binary: configuration, wiring, signals. No logic of its own.

pub mod config;
pub mod pipeline;

use std::sync::Arc;

use anyhow::Context;
use muster_app::auth::{Authenticator, TokenTable};
use muster_app::feed::Feed;
use muster_app::ports::{Clock, Ids, Jitter};
use muster_app::signal::WorkSignal;
use muster_app::{Config, Muster};
use muster_domain::{ItemId, LeaseId};
use muster_http::{AppState, ServerSettings};
use muster_pg::{PgLogbook, PoolSettings};
use tokio::net::TcpListener;

pub use config::{Cli, Command, LogFormat, Settings};

/// The system clock, to the microsecond (Logbook's precision).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> time::OffsetDateTime {
        muster_ledger_truncate(time::OffsetDateTime::now_utc())
    }
}

fn muster_ledger_truncate(t: time::OffsetDateTime) -> time::OffsetDateTime {
    let micros = t.nanosecond() / 1_000;
    t.replace_nanosecond(micros * 1_000).unwrap_or(t)
}

/// UUIDv7 ids: time-ordered, so new rows land at the right edge of their indexes.
#[derive(Debug, Clone, Copy)]
pub struct V7Ids;

impl Ids for V7Ids {
    fn item_id(&self) -> ItemId {
        ItemId(uuid::Uuid::now_v7())
    }
    fn lease_id(&self) -> LeaseId {
        LeaseId(uuid::Uuid::now_v7())
    }
}

/// Thread-local randomness for backoff jitter.
#[derive(Debug, Clone, Copy)]
pub struct RandomJitter;

impl Jitter for RandomJitter {
    fn sample(&self) -> f64 {
        rand::random::<f64>()
    }
}

/// Everything `serve` needs, built from the settings.
pub struct App {
    pub state: AppState,
    pub logbook: PgLogbook,
    pub server: ServerSettings,
}

pub fn database_url(settings: &Settings) -> anyhow::Result<&str> {
    settings
        .database_url
        .as_deref()
        .context("a database URL is required: --database-url or MUSTER_DATABASE_URL")
}

/// Wires the adapters to the use cases.
pub fn build(settings: &Settings) -> anyhow::Result<App> {
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    let logbook = PgLogbook::new(pool);
    let auth: Arc<dyn Authenticator> = match &settings.tokens {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read token file {}", path.display()))?;
            let table = TokenTable::from_json(&text)
                .with_context(|| format!("token file {}", path.display()))?;
            tracing::info!(tokens = table.len(), "token file loaded");
            Arc::new(table)
        }
        None => {
            tracing::warn!(
                "no token file given (--tokens): every /v1 call will be refused with 401"
            );
            Arc::new(TokenTable::default())
        }
    };
    let mut config = Config {
        lease_ttl: time::Duration::milliseconds(settings.lease_ttl_ms as i64),
        ..Config::default()
    };
    if let Some(path) = &settings.pipeline {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read pipeline file {}", path.display()))?;
        let (routes, retry) = pipeline::parse(&text)?;
        config.routes = routes;
        config.retry = retry;
    }
    let signal = WorkSignal::new();
    let muster = Muster::new(
        Arc::new(logbook.clone()),
        Arc::new(SystemClock),
        Arc::new(V7Ids),
        Arc::new(RandomJitter),
        signal.clone(),
        config,
    );
    let feed = Feed::new(
        Arc::new(logbook.clone()),
        Arc::new(logbook.clone()),
        Arc::new(SystemClock),
        Arc::new(RandomJitter),
        signal,
        settings.feed.clone(),
    );
    let state = AppState {
        muster,
        feed,
        logbook_metrics: Arc::new(logbook.clone()),
        http_metrics: muster_http::metrics::HttpMetrics::default(),
        auth,
        readiness: Arc::new(logbook.clone()),
    };
    Ok(App {
        state,
        logbook,
        server: settings.server.clone(),
    })
}

/// Serves until `shutdown` resolves: stops accepting, ends long polls (they answer 204), lets
/// requests in flight finish, then returns.
pub async fn serve(
    app: App,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let signal = app.state.muster.signal().clone();
    let pump = tokio::spawn(app.state.feed.clone().run());
    let router = muster_http::router(app.state);
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutdown requested: draining");
        signal.shut_down();
    };
    muster_http::serve(listener, router, app.server, shutdown).await;
    pump.abort();
    Ok(())
}

/// Applies pending migrations.
pub async fn migrate(settings: &Settings) -> anyhow::Result<Vec<i32>> {
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    Ok(muster_pg::migrate(&pool).await?)
}

/// Verifies every ledger chain.
pub async fn ledger_verify(settings: &Settings) -> anyhow::Result<muster_pg::LedgerReport> {
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    Ok(muster_pg::verify_ledger(&pool).await?)
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}
