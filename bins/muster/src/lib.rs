//! The `muster` binary: configuration, wiring, signals. No logic of its own.

pub mod config;
pub mod pipeline;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use muster_antispam::OwnershipMap;
use muster_app::auth::{Authenticator, TokenTable};
use muster_app::dependency::CallCounts;
use muster_app::feed::{Feed, FeedParts};
use muster_app::intake::{Intake, IntakeParts, Ownership};
use muster_app::nodes::NodeDirectory;
use muster_app::ports::{Clock, Ids, Jitter};
use muster_app::service::{PassReport, Retention};
use muster_app::signal::WorkSignal;
use muster_app::{Config, Muster, Stores};
use muster_domain::edit::EditId;
use muster_domain::redact::NodeNames;
use muster_domain::{ItemId, LeaseId};
use muster_http::{AppParts, AppState, ServerSettings};
use muster_kube::nodes::{NodeWatchSettings, NodeWatcher};
use muster_kube::probe::ApiServerProbe;
use muster_kube::{ServiceAccountMap, TokenReviewAuthenticator, TokenReviewSettings};
use muster_pg::{PgLogbook, PoolSettings};
use tokio::net::TcpListener;

pub use config::{AuthMode, Cli, Command, LogFormat, Settings};

/// The system clock, to the microsecond (Logbook's precision).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> time::OffsetDateTime {
        muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc())
    }
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
    fn edit_id(&self) -> EditId {
        EditId(uuid::Uuid::now_v7())
    }
    fn random32(&self) -> [u8; 32] {
        // ThreadRng: a cryptographically secure generator seeded from the OS.
        rand::random()
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
    /// The ownership map's file, watched for changes while serving.
    pub ownership_file: Option<std::path::PathBuf>,
    /// The node names health reports are redacted with, and where they come from.
    pub nodes: Arc<NodeDirectory>,
    pub node_source: NodeSource,
    /// With `--auth tokenreview`: asks whether the API server answers (start, then every 30 s).
    pub api_probe: Option<Box<ApiServerProbe>>,
    /// Wake-ups to and from the other replicas (LISTEN/NOTIFY), run while serving.
    pub wake: Option<muster_pg::WakeBridge>,
    /// How often the ledger checkpoint task takes a checkpoint.
    pub checkpoints: muster_pg::CheckpointSettings,
}

pub fn database_url(settings: &Settings) -> anyhow::Result<&str> {
    settings
        .database_url
        .as_deref()
        .context("a database URL is required: --database-url or MUSTER_DATABASE_URL")
}

/// The bearer-token authenticator `--auth` names.
pub fn authenticator(settings: &Settings) -> anyhow::Result<Arc<dyn Authenticator>> {
    Ok(authentication(settings)?.0)
}

/// The authenticator and its counts of TokenReviews sent and unanswered (0 with a token file).
fn authentication(
    settings: &Settings,
) -> anyhow::Result<(Arc<dyn Authenticator>, Arc<CallCounts>)> {
    match settings.auth.unwrap_or(AuthMode::TokenFile) {
        AuthMode::TokenFile => {
            if settings.serviceaccount_map.is_some() {
                anyhow::bail!(
                    "--serviceaccount-map is only read with --auth tokenreview (MUSTER_AUTH=tokenreview)"
                );
            }
            Ok((token_file_authenticator(settings)?, Arc::default()))
        }
        AuthMode::Tokenreview => {
            if settings.tokens.is_some() {
                anyhow::bail!(
                    "--tokens and --auth tokenreview exclude each other: choose one way to check tokens"
                );
            }
            let path = settings.serviceaccount_map.as_ref().context(
                "--auth tokenreview needs a ServiceAccount map: --serviceaccount-map or MUSTER_SERVICEACCOUNT_MAP",
            )?;
            let map = ServiceAccountMap::load(path)
                .with_context(|| format!("ServiceAccount map {}", path.display()))?;
            let mut kube = TokenReviewSettings::in_cluster(map);
            kube.audiences = vec![settings.token_audience.clone()];
            kube.stale_limit =
                std::time::Duration::from_secs(settings.tokenreview_stale_limit_secs);
            kube.peer_rate = muster_kube::Rate::of(settings.tokenreview_peer_rate);
            kube.global_rate = muster_kube::Rate::of(settings.tokenreview_rate);
            tracing::info!(
                api_server = %kube.api_server,
                audience = %settings.token_audience,
                serviceaccounts = kube.map.len(),
                "tokens are checked with the Kubernetes TokenReview API"
            );
            let authenticator =
                TokenReviewAuthenticator::new(kube).context("TokenReview authenticator")?;
            let counts = authenticator.counts();
            Ok((Arc::new(authenticator), counts))
        }
    }
}

fn token_file_authenticator(settings: &Settings) -> anyhow::Result<Arc<dyn Authenticator>> {
    Ok(match &settings.tokens {
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
    })
}

/// Wires the adapters to the use cases.
pub fn build(settings: &Settings) -> anyhow::Result<App> {
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    let logbook = PgLogbook::new(pool);
    let (auth, tokenreviews) = authentication(settings)?;
    let (nodes, node_source) = node_names(settings)?;
    let api_probe = match settings.auth {
        Some(AuthMode::Tokenreview) => Some(Box::new(
            ApiServerProbe::new(&NodeWatchSettings::in_cluster(), API_PROBE_INTERVAL)
                .context("API server probe")?,
        )),
        _ => None,
    };
    let mut config = Config {
        lease_ttl: time::Duration::milliseconds(settings.lease_ttl_ms as i64),
        group_commits: usize::from(settings.group_commits),
        final_grace: settings
            .final_grace_ms
            .map(|ms| time::Duration::milliseconds(ms as i64)),
        retention: settings.retention().retain,
        ..Config::default()
    };
    if let Some(path) = &settings.pipeline {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read pipeline file {}", path.display()))?;
        let pipeline = pipeline::parse(&text)?;
        config.routes = pipeline.routes;
        config.retry = pipeline.retry;
        config.max_run = pipeline.max_run;
    }
    let signal = WorkSignal::new();
    let wake = if settings.peer_wake {
        Some(muster_pg::WakeBridge::new(
            database_url(settings)?,
            &PoolSettings::default(),
            signal.clone(),
        )?)
    } else {
        None
    };
    let ownership = Ownership::default();
    if let Some(path) = &settings.ownership_map {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read ownership map {}", path.display()))?;
        let map = OwnershipMap::from_json(&text)
            .with_context(|| format!("ownership map {}", path.display()))?;
        tracing::info!(targets = map.len(), "ownership map loaded");
        ownership.set(map);
    } else {
        tracing::warn!(
            "no ownership map given (--ownership-map): every edit proposal will be refused with E_TARGET"
        );
    }
    let intake = Intake::new(IntakeParts {
        logbook: Arc::new(logbook.clone()),
        records: Arc::new(logbook.clone()),
        clock: settings.clock.0.clone(),
        ids: Arc::new(V7Ids),
        signal: signal.clone(),
        settings: settings.intake(),
        ownership,
    });
    let muster = Muster::new(
        Stores::of(Arc::new(logbook.clone())),
        settings.clock.0.clone(),
        Arc::new(V7Ids),
        Arc::new(RandomJitter),
        signal.clone(),
        config,
    )
    .with_node_names(nodes.clone());
    let server = settings.server_settings();
    let plan = server.memory.plan();
    let retention = Retention::new(
        Arc::new(logbook.clone()),
        settings.clock.0.clone(),
        settings.retention(),
    );
    let feed = Feed::new(FeedParts {
        source: Arc::new(logbook.clone()),
        health: Arc::new(logbook.clone()),
        clock: settings.clock.0.clone(),
        jitter: Arc::new(RandomJitter),
        signal,
        settings: muster_app::feed::FeedSettings {
            coalesce_wait: std::time::Duration::from_millis(settings.feed_coalesce_ms),
            max_subscribers: settings.feed.max_subscribers.min(plan.subscribers),
            max_replays: settings.feed.max_replays.min(plan.replays),
            ..settings.feed.clone()
        },
    });
    let state = AppState::new(AppParts {
        muster,
        intake,
        feed,
        logbook_metrics: Arc::new(logbook.clone()),
        http_metrics: muster_http::metrics::HttpMetrics::default()
            .with_memory(server.memory.clone())
            .with_telemetry(
                settings
                    .telemetry
                    .clone()
                    .map(muster_otel::Telemetry::start),
            ),
        auth,
        tokenreviews,
        api_server: api_probe.as_ref().map(|_| Arc::default()),
        readiness: Arc::new(logbook.clone()),
        retention,
        body_budget: muster_http::BodyBudget::new(
            (u64::from(settings.inflight_body_mib) * 1024 * 1024).min(plan.body_bytes),
            settings.server.body_wait,
            settings.server.body_read_deadline,
        ),
    });
    Ok(App {
        state,
        logbook,
        server,
        ownership_file: settings.ownership_map.clone(),
        nodes,
        node_source,
        api_probe,
        wake,
        checkpoints: muster_pg::CheckpointSettings {
            every_entries: settings.checkpoint_every_entries,
            every: std::time::Duration::from_secs(settings.checkpoint_every_secs),
        },
    })
}

/// How long a stopping server waits for its last spans' export.
const TRACE_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// How often `serve --auth tokenreview` asks whether the API server answers.
const API_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// Where the node names for health redaction come from (docs/redaction.md).
pub enum NodeSource {
    /// None: form and position only.
    None,
    /// `--node-names`: a file, re-read when it changes.
    File(PathBuf),
    /// The API server's node list and watch (`--auth tokenreview`).
    Cluster(Box<NodeWatcher>),
}

/// The node directory and its source: the `--node-names` file (read now: a start with an
/// unreadable file fails), else the cluster's API server with `--auth tokenreview`, else none
/// (a warning: node names are then redacted by form and position only).
fn node_names(settings: &Settings) -> anyhow::Result<(Arc<NodeDirectory>, NodeSource)> {
    if let Some(path) = &settings.node_names {
        let names = read_node_names(path)?;
        if names.is_empty() {
            anyhow::bail!(
                "node names {}: the file lists no node name (one a line; `#` starts a comment)",
                path.display()
            );
        }
        tracing::info!(nodes = names.len(), "node names loaded");
        let directory = NodeDirectory::awaiting_source();
        directory.set_names(names);
        return Ok((Arc::new(directory), NodeSource::File(path.clone())));
    }
    if settings.auth == Some(AuthMode::Tokenreview) {
        let watcher = NodeWatcher::new(NodeWatchSettings::in_cluster())
            .context("node watcher (health redaction)")?;
        return Ok((
            Arc::new(NodeDirectory::awaiting_source()),
            NodeSource::Cluster(Box::new(watcher)),
        ));
    }
    tracing::warn!(
        "node names are redacted from health reports by form and position only: \
         no --node-names file, and not in a cluster (--auth tokenreview)"
    );
    Ok((Arc::new(NodeDirectory::form_only()), NodeSource::None))
}

fn read_node_names(path: &Path) -> anyhow::Result<NodeNames> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read node names {}", path.display()))?;
    Ok(NodeNames::from_lines(&text))
}

/// Serves until `shutdown` resolves: stops accepting, ends long polls (they answer 204), lets
/// requests in flight finish, then returns.
pub async fn serve(
    app: App,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let signal = app.state.muster.signal().clone();
    let mut tasks = vec![
        tokio::spawn(app.state.feed.clone().run()),
        tokio::spawn(app.state.retention.clone().run(signal.clone())),
    ];
    if let Some(wake) = app.wake {
        tasks.push(tokio::spawn(wake.run()));
    }
    tasks.push(tokio::spawn(
        app.logbook.clone().check_role_when_reachable(),
    ));
    tasks.push(tokio::spawn(
        muster_pg::Checkpointer::new(app.logbook.pool().clone(), app.checkpoints).run(),
    ));
    if let (Some(probe), Some(status)) = (app.api_probe, app.state.api_server.clone()) {
        tasks.push(tokio::spawn(probe.run(status)));
    }
    let node_file = match app.node_source {
        NodeSource::File(path) => Some(path),
        NodeSource::Cluster(watcher) => {
            tasks.push(tokio::spawn(watcher.run(app.nodes.clone())));
            None
        }
        NodeSource::None => None,
    };
    tasks.push(tokio::spawn(housekeeping(
        app.state.intake.clone(),
        app.ownership_file.clone(),
        node_file.map(|path| (path, app.nodes.clone())),
    )));
    let telemetry = app.state.http_metrics.telemetry().cloned();
    let router = muster_http::router(app.state);
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutdown requested: draining");
        signal.shut_down();
    };
    muster_http::serve(listener, router, app.server, shutdown).await;
    for task in tasks {
        task.abort();
    }
    if let Some(telemetry) = telemetry {
        // The drain's last spans, within a bound of their own.
        telemetry.shutdown(TRACE_FLUSH).await;
    }
    Ok(())
}

/// A file re-read when its modification time changes.
struct Watched {
    path: PathBuf,
    seen: Option<std::time::SystemTime>,
}

impl Watched {
    /// Read again at the first look: a change between the start's read and this watch's
    /// first look is not missed.
    fn new(path: PathBuf) -> Self {
        Watched { path, seen: None }
    }

    fn modified(path: &Path) -> Option<std::time::SystemTime> {
        std::fs::metadata(path).and_then(|m| m.modified()).ok()
    }

    /// The file's text when it changed since the last look (an error when it cannot be read).
    fn changed(&mut self) -> Option<Result<String, String>> {
        let now = Self::modified(&self.path);
        if now == self.seen {
            return None;
        }
        self.seen = now;
        Some(std::fs::read_to_string(&self.path).map_err(|e| e.to_string()))
    }
}

/// Background chores: load the proof-of-work key early, reload the ownership map and the node
/// names when their files change (a broken file keeps the last good one), and delete the
/// intake's expired salts, counters and spent challenges.
async fn housekeeping(
    intake: Intake,
    ownership_file: Option<PathBuf>,
    node_file: Option<(PathBuf, Arc<NodeDirectory>)>,
) {
    if let Err(e) = intake.key().await {
        tracing::warn!(error = %e, "proof-of-work key not loaded yet; will load on first use");
    }
    let mut ownership = ownership_file.map(Watched::new);
    let mut nodes = node_file.map(|(path, directory)| (Watched::new(path), directory));
    let mut ticks: u64 = 0;
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        ticks += 1;
        if let Some(file) = ownership.as_mut() {
            match file.changed().map(|read| {
                read.and_then(|t| OwnershipMap::from_json(&t).map_err(|e| e.to_string()))
            }) {
                None => {}
                Some(Ok(map)) => {
                    tracing::info!(targets = map.len(), "ownership map reloaded");
                    intake.ownership().set(map);
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, path = %file.path.display(), "ownership map not reloaded: keeping the last good one")
                }
            }
        }
        if let Some((file, directory)) = nodes.as_mut() {
            match file.changed() {
                None => {}
                Some(Ok(text)) if NodeNames::from_lines(&text).is_empty() => {
                    // A file being rewritten in place is empty for a moment: keep the names.
                    tracing::error!(path = %file.path.display(), "node names not reloaded: the file lists no node name; keeping the last ones")
                }
                Some(Ok(text)) => {
                    let names = NodeNames::from_lines(&text);
                    tracing::info!(nodes = names.len(), "node names reloaded");
                    directory.set_names(names);
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, path = %file.path.display(), "node names not reloaded: keeping the last ones")
                }
            }
        }
        if ticks.is_multiple_of(30) {
            match intake.purge().await {
                Ok(n) if n > 0 => tracing::info!(
                    rows = n,
                    "expired intake salts, counters and challenges deleted"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "intake purge failed; will retry"),
            }
        }
    }
}

/// Runs one retention pass (`muster retention-pass`): what `serve` does every minute.
pub async fn retention_pass(settings: &Settings) -> anyhow::Result<PassReport> {
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    let retention = Retention::new(
        Arc::new(PgLogbook::new(pool)),
        settings.clock.0.clone(),
        settings.retention(),
    );
    Ok(retention.pass().await?)
}

/// Applies pending migrations.
pub async fn migrate(settings: &Settings) -> anyhow::Result<Vec<i32>> {
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    Ok(muster_pg::migrate(&pool, &settings.runtime_role).await?)
}

/// Verifies every ledger chain.
pub async fn ledger_verify(settings: &Settings) -> anyhow::Result<muster_pg::LedgerReport> {
    Ok(ledger_verify_with(settings, &LedgerCheck::default())
        .await?
        .0)
}

/// What `ledger-verify` checks beyond every chain and checkpoint.
#[derive(Debug, Clone, Default)]
pub struct LedgerCheck {
    /// Answer `N:DIGEST` too.
    pub head: bool,
    /// Check that the ledger up to N still hashes to DIGEST.
    pub against: Option<String>,
    /// Verify only what came after this checkpoint (`SEQ` or `SEQ:DIGEST`).
    pub since: Option<String>,
}

/// Verifies the ledger as `check` says; with `head`, answers `N:DIGEST` too.
pub async fn ledger_verify_with(
    settings: &Settings,
    check: &LedgerCheck,
) -> anyhow::Result<(muster_pg::LedgerReport, Option<muster_pg::LedgerHead>)> {
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    if let Some(since) = &check.since {
        let (seq, digest) = muster_pg::parse_checkpoint(since)?;
        return Ok((muster_pg::verify_since(&pool, seq, digest).await?, None));
    }
    if let Some(recorded) = &check.against {
        let recorded: muster_pg::LedgerHead = recorded.parse()?;
        return Ok((muster_pg::verify_against(&pool, recorded).await?, None));
    }
    if check.head {
        let (report, head) = muster_pg::ledger_head(&pool).await?;
        return Ok((report, Some(head)));
    }
    Ok((muster_pg::verify_ledger(&pool).await?, None))
}

/// Writes the ledger entries after checkpoint `from` up to checkpoint `until` to a new file
/// `to`; answers the entries written. On an error the file is removed.
pub async fn ledger_archive(
    settings: &Settings,
    to: &Path,
    from: &str,
    until: &str,
) -> anyhow::Result<u64> {
    let (from, until) = (
        muster_pg::parse_checkpoint(from)?,
        muster_pg::parse_checkpoint(until)?,
    );
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(to)
        .with_context(|| format!("create {}", to.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let written = async {
        let entries = muster_pg::export_archive(&pool, from, until, &mut out).await?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        anyhow::Ok(entries)
    }
    .await;
    if written.is_err() {
        let _ = std::fs::remove_file(to);
    }
    written
}

/// The longest line an archive file may hold, in MiB: an entry's line holds at most a request
/// body (1 MiB) escaped, the header one digest per checkpoint. A longer line is not read whole.
const MAX_ARCHIVE_LINE_MIB: u64 = 64;

/// Verifies an archive file offline; answers its header and number of entries.
pub fn verify_archive(path: &Path) -> anyhow::Result<(muster_ledger::archive::ArchiveHeader, u64)> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut input = std::io::BufReader::new(file);
    let mut reader = muster_ledger::archive::ArchiveReader::default();
    let max = MAX_ARCHIVE_LINE_MIB * 1024 * 1024;
    let mut line = Vec::new();
    for n in 1u64.. {
        line.clear();
        let read = (&mut input)
            .take(max + 1)
            .read_until(b'\n', &mut line)
            .with_context(|| format!("read {}", path.display()))?;
        if read == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if read as u64 > max {
            anyhow::bail!(
                "line {n} of {} is longer than {MAX_ARCHIVE_LINE_MIB} MiB: not a ledger archive",
                path.display()
            );
        }
        let text = std::str::from_utf8(&line)
            .with_context(|| format!("line {n} of {} is not UTF-8", path.display()))?;
        reader.line(text)?;
    }
    Ok(reader.finish()?)
}

/// Removes from Logbook the ledger entries of the archive file at `path` (`ledger-prune`),
/// after the file verified offline and Logbook was found to hold the same segment.
pub async fn ledger_prune(settings: &Settings, path: &Path) -> anyhow::Result<muster_pg::Pruned> {
    let (header, entries) = verify_archive(path).context("nothing removed")?;
    let pool = muster_pg::connect_pool(database_url(settings)?, &PoolSettings::default())?;
    Ok(muster_pg::prune_archive(&pool, &header, entries, muster_pg::PRUNE_BATCH).await?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings(args: &[&str]) -> Settings {
        let mut argv = vec!["muster"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).expect("arguments parse").settings
    }

    #[test]
    fn the_token_file_is_the_default_way_to_check_tokens() {
        let s = settings(&[]);
        assert_eq!(s.auth, None);
        assert!(authenticator(&s).is_ok());
    }

    #[test]
    fn auth_flags_take_their_documented_values() {
        let s = settings(&["--auth", "tokenreview", "--serviceaccount-map", "/m.json"]);
        assert_eq!(s.auth, Some(AuthMode::Tokenreview));
        assert_eq!(s.serviceaccount_map, Some("/m.json".into()));
        assert_eq!(
            settings(&["--auth", "token-file"]).auth,
            Some(AuthMode::TokenFile)
        );
        assert!(Cli::try_parse_from(["muster", "--auth", "oidc"]).is_err());
    }

    /// Why the authenticator of `args` is refused at startup.
    fn refusal(args: &[&str]) -> String {
        authenticator(&settings(args))
            .err()
            .expect("refused")
            .to_string()
    }

    #[test]
    fn tokenreview_without_a_serviceaccount_map_is_refused_at_startup() {
        let e = refusal(&["--auth", "tokenreview"]);
        assert!(e.contains("--serviceaccount-map"), "{e}");
    }

    #[test]
    fn tokenreview_and_a_token_file_together_are_refused_at_startup() {
        let e = refusal(&[
            "--auth",
            "tokenreview",
            "--tokens",
            "/t.json",
            "--serviceaccount-map",
            "/m.json",
        ]);
        assert!(e.contains("exclude each other"), "{e}");
    }

    #[test]
    fn a_serviceaccount_map_without_tokenreview_is_refused_at_startup() {
        let e = refusal(&["--serviceaccount-map", "/m.json"]);
        assert!(e.contains("--auth tokenreview"), "{e}");
    }
}
