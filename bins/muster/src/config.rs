//! Command line and environment: the names of protocol.md, flag wins over variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "muster",
    version,
    about = "Queue lease manager and state-transition gatekeeper in front of Logbook"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
    /// The operator commands' server, token and output (`--url`, `--api-token`, `--json`).
    #[command(flatten)]
    pub ops: muster_ops::Target,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply pending migrations to Logbook as the schema owner, grant the runtime role
    /// (`--runtime-role`) what `serve` needs, and exit.
    Migrate,
    /// Solve an edit-intake proof-of-work challenge and print the nonce (the reference solver).
    Solve {
        /// The challenge token from `POST /v1/edits/challenge`.
        challenge: String,
        /// Leading zero bits required.
        #[arg(long, default_value_t = muster_antispam::DEFAULT_DIFFICULTY)]
        difficulty: u8,
    },
    /// Verify every hash chain of the ledger and every checkpoint, in one snapshot, and exit
    /// (non-zero when one is broken); prints the latest checkpoint.
    LedgerVerify {
        /// Also print `N:DIGEST`: the newest ledger sequence N and a digest over every chain
        /// head as of N, to record outside Logbook.
        #[arg(long, conflicts_with_all = ["against", "since"])]
        head: bool,
        /// Also check that the ledger up to N still hashes to DIGEST (as `--head` printed it).
        #[arg(long, value_name = "N:DIGEST", conflicts_with = "since")]
        against: Option<String>,
        /// Verify only what came after this checkpoint (`SEQ`, or `SEQ:DIGEST` as printed, to
        /// also confirm its digest): the later checkpoints and the entries after it.
        #[arg(long, value_name = "CHECKPOINT")]
        since: Option<String>,
        /// Verify an archive file (`ledger-archive`) offline, without a database.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["head", "against", "since"])]
        archive: Option<PathBuf>,
    },
    /// Export the ledger entries between two checkpoints to an archive file (JSON lines,
    /// docs/operations.md), checked against the checkpoints as they are written.
    LedgerArchive {
        /// The file to write; it must not exist yet.
        #[arg(long, value_name = "FILE")]
        to: PathBuf,
        /// The checkpoint the archive ends at (`SEQ` or `SEQ:DIGEST`).
        #[arg(long, value_name = "CHECKPOINT")]
        until: String,
        /// The checkpoint the archive starts after (`SEQ` or `SEQ:DIGEST`; 0, the default,
        /// is the ledger's start).
        #[arg(long, value_name = "CHECKPOINT", default_value = "0")]
        from: String,
    },
    /// Remove from Logbook the ledger entries an archive file (`ledger-archive`) holds, as the
    /// schema owner (`--database-url` naming the owner): the file must verify offline, start
    /// where the last pruned segment ended, and match Logbook's checkpoints and entries; the
    /// entries then go in small batches, each its own transaction.
    LedgerPrune {
        /// The archive file whose entries to remove.
        #[arg(long, value_name = "FILE")]
        archive: PathBuf,
    },
    /// Run one retention pass now (as `serve` does every minute, with `--retain-days` and
    /// `--retain-edit-text-days`), print what it removed, and exit.
    RetentionPass,
    /// Operator commands, through the HTTP API with `--api-token` / `MUSTER_API_TOKEN`.
    #[command(flatten)]
    Ops(muster_ops::OpsCommand),
}

/// How `/v1` bearer tokens are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// The token file of `--tokens` (development and tests).
    TokenFile,
    /// Kubernetes ServiceAccount tokens, checked with the TokenReview API and mapped to principals
    /// by `--serviceaccount-map`.
    Tokenreview,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Pretty,
}

#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Logbook connection string.
    #[arg(
        long,
        env = "MUSTER_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// The role `muster migrate` grants what `serve` needs (created NOLOGIN when absent; its
    /// login is the operator's business). `serve` connects as it.
    #[arg(long, env = "MUSTER_RUNTIME_ROLE", default_value = muster_pg::DEFAULT_RUNTIME_ROLE,
          global = true, value_parser = runtime_role)]
    pub runtime_role: String,
    /// Address to serve on.
    #[arg(
        long,
        env = "MUSTER_LISTEN",
        default_value = "127.0.0.1:8080",
        global = true
    )]
    pub listen: SocketAddr,
    /// Token file for development and tests.
    #[arg(long, env = "MUSTER_TOKENS", global = true)]
    pub tokens: Option<PathBuf>,
    /// How bearer tokens are checked: `token-file` (the default) or `tokenreview` (in the cluster).
    #[arg(long, env = "MUSTER_AUTH", value_enum, global = true)]
    pub auth: Option<AuthMode>,
    /// ServiceAccount map for `--auth tokenreview`: `{"serviceaccounts": {"<username>": "<principal>"}}`.
    #[arg(long, env = "MUSTER_SERVICEACCOUNT_MAP", global = true)]
    pub serviceaccount_map: Option<PathBuf>,
    /// With `--auth tokenreview`: the audience a caller's token must be meant for (the
    /// manifests project ServiceAccount tokens bound to it; docs/security.md).
    #[arg(long, env = "MUSTER_TOKEN_AUDIENCE", default_value = muster_kube::DEFAULT_AUDIENCE, global = true)]
    pub token_audience: String,
    /// With `--auth tokenreview`: seconds past its 30 s life a token's last positive review
    /// still lets it in while the API server gives no answer (0: never; docs/security.md).
    #[arg(long, env = "MUSTER_TOKENREVIEW_STALE_LIMIT_SECS", default_value_t = muster_kube::DEFAULT_STALE_LIMIT.as_secs(),
          global = true, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub tokenreview_stale_limit_secs: u64,
    /// With `--auth tokenreview`: reviews of unknown tokens a second one peer may start, and
    /// the replica as a whole (each with a burst of twice as many); past them a call is 503.
    #[arg(long, env = "MUSTER_TOKENREVIEW_PEER_RATE", default_value_t = muster_kube::DEFAULT_PEER_RATE,
          global = true, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tokenreview_peer_rate: u32,
    #[arg(long, env = "MUSTER_TOKENREVIEW_RATE", default_value_t = muster_kube::DEFAULT_RATE,
          global = true, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tokenreview_rate: u32,
    /// A file of the cluster's node names, one a line, redacted from health reports (re-read when
    /// it changes). Outside a cluster; with `--auth tokenreview` the names come from the API
    /// server unless this is given. See docs/redaction.md.
    #[arg(long, env = "MUSTER_NODE_NAMES", global = true)]
    pub node_names: Option<PathBuf>,
    /// Path of ownership_map.json (edit intake).
    #[arg(long, env = "MUSTER_OWNERSHIP_MAP", global = true)]
    pub ownership_map: Option<PathBuf>,
    /// Lease time to live in milliseconds.
    #[arg(long, env = "MUSTER_LEASE_TTL_MS", default_value_t = 30_000, global = true,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub lease_ttl_ms: u64,
    /// Group commit: batch transactions of one worker kind that may run at once for
    /// concurrent single lease requests (and as many for completions). 1 writes one batch at
    /// a time; more lets batches overlap. See docs/benchmarks.md.
    #[arg(long, env = "MUSTER_GROUP_COMMITS", default_value_t = 1, global = true,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub group_commits: u16,
    /// Request bodies the server holds at once, in MiB, counted by `Content-Length` on the
    /// worker, operator and Shipkeeper routes. A request that would go over waits up to 5 s
    /// for room, then is answered 503 `E_UNAVAILABLE` with `Retry-After`. Handling a body
    /// takes several times its size (docs/operations.md has the measurement).
    #[arg(long, env = "MUSTER_INFLIGHT_BODY_MIB", default_value_t = 2, global = true,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub inflight_body_mib: u16,
    /// Open connections at most; a connection over the cap is closed at once. The default
    /// fits the pod's memory limit at the measured cost of an idle connection (docs/security.md).
    #[arg(long, env = "MUSTER_MAX_CONNECTIONS", default_value_t = muster_http::server::DEFAULT_MAX_CONNECTIONS, global = true,
          value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..=1_000_000), |n| n as usize))]
    pub max_connections: usize,
    /// The memory budget the server admits every client-held byte against: request bodies,
    /// connections, live-feed subscribers and replays, token reviews (docs/operations.md,
    /// "Memory", has the split). In MiB, or with a unit (`48Mi`, `1Gi`); at least 24 MiB.
    /// Keep it at the pod's memory request, under its limit.
    #[arg(long, env = "MUSTER_MEMORY_BUDGET", default_value = "48Mi", global = true,
          value_parser = memory_size)]
    pub memory_budget: u64,
    /// Open connections from one peer (IP address) at most; one more is closed at once.
    #[arg(long, env = "MUSTER_MAX_CONNECTIONS_PER_PEER", default_value_t = muster_http::server::DEFAULT_MAX_CONNECTIONS_PER_PEER, global = true,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections_per_peer: u32,
    /// A ledger checkpoint is taken once this many entries were written since the last one.
    #[arg(long, env = "MUSTER_CHECKPOINT_EVERY_ENTRIES", default_value_t = 10_000, global = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every_entries: u64,
    /// A ledger checkpoint is taken this many seconds after the last one when entries were
    /// written since.
    #[arg(long, env = "MUSTER_CHECKPOINT_EVERY_SECS", default_value_t = 300, global = true,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub checkpoint_every_secs: u64,
    /// Log format.
    #[arg(
        long,
        env = "MUSTER_LOG_FORMAT",
        value_enum,
        default_value = "json",
        global = true
    )]
    pub log_format: LogFormat,
    /// Pipeline file: routes and retry policies per kind (JSON; see docs/operations.md).
    #[arg(long, env = "MUSTER_PIPELINE", global = true)]
    pub pipeline: Option<PathBuf>,
    /// Least milliseconds between two writes to one live-feed subscriber while events keep
    /// coming (what arrives meanwhile leaves in one write; an event after a quiet spell leaves
    /// at once). Longer costs the server less per subscriber and delays events by as much.
    #[arg(long, env = "MUSTER_FEED_COALESCE_MS", default_value_t = 100, global = true,
          value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub feed_coalesce_ms: u64,
    /// Live-feed tuning (not a flag: the defaults are the contract's).
    #[arg(skip)]
    pub feed: muster_app::feed::FeedSettings,
    /// Server timeouts and drain (not flags: the defaults match the deployment's grace period).
    #[arg(skip)]
    pub server: muster_http::ServerSettings,
    /// Proof-of-work difficulty of edit-intake challenges (leading zero bits).
    #[arg(long, env = "MUSTER_POW_DIFFICULTY", default_value_t = muster_antispam::DEFAULT_DIFFICULTY, global = true,
          value_parser = clap::value_parser!(u8).range(0..=32))]
    pub pow_difficulty: u8,
    /// Edit proposals accepted per client (salted IP hash, IPv6 by /64) per UTC day.
    #[arg(long, env = "MUSTER_EDIT_DAILY_LIMIT", default_value_t = muster_antispam::ip::DEFAULT_DAILY_LIMIT, global = true)]
    pub edit_daily_limit: u32,
    /// How long a lease whose item has no attempts left stays usable after its `expires_at`
    /// with no heartbeat, in milliseconds; then the item is `failed` (by the next lease request
    /// of its kind) and a late result is `409 E_LEASE_LOST`. Default: three lease TTLs.
    #[arg(long, env = "MUSTER_FINAL_GRACE_MS", global = true,
          value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub final_grace_ms: Option<u64>,
    /// Days a finished item (done, failed, cancelled) stays in the working tables after its
    /// last change; then a housekeeping pass removes it and its leases (its ledger entries
    /// stay). 0: at the next pass, within a minute. Must outlast any worker's spool
    /// (docs/operations.md, "Retention").
    #[arg(long, env = "MUSTER_RETAIN_DAYS", default_value_t = muster_app::service::DEFAULT_RETAIN_DAYS, global = true,
          value_parser = clap::value_parser!(u32).range(0..=36_500))]
    pub retain_days: u32,
    /// Days the text of a rejected edit proposal is kept after the decision; then it is
    /// removed (its BLAKE3 stays in the ledger).
    #[arg(long, env = "MUSTER_RETAIN_EDIT_TEXT_DAYS", default_value_t = muster_app::service::DEFAULT_RETAIN_EDIT_TEXT_DAYS, global = true,
          value_parser = clap::value_parser!(u32).range(0..=36_500))]
    pub retain_edit_text_days: u32,
    /// The Clock port's adapter (not a flag: the system clock; tests give a skewed one).
    #[arg(skip)]
    pub clock: ClockAdapter,
    /// Traces: the span exporter's settings, from the standard `OTEL_*` variables (not flags;
    /// [`Settings::traces_from_env`], docs/operations.md "Traces"). `None`: tracing off.
    #[arg(skip)]
    pub telemetry: Option<muster_otel::Config>,
    /// Cross-replica wake-ups over LISTEN/NOTIFY (not a flag: off only for the bench's
    /// comparison).
    #[arg(skip = true)]
    pub peer_wake: bool,
    /// Development only: serve this directory under /dev/web/ (the example edit form,
    /// clients/web). Off by default; never set in the cluster.
    #[arg(long, env = "MUSTER_DEV_WEB_DIR", global = true, value_parser = existing_dir)]
    pub dev_web_dir: Option<PathBuf>,
}

/// The clock the use cases read (the Clock port); the system clock by default.
#[derive(Clone)]
pub struct ClockAdapter(pub std::sync::Arc<dyn muster_app::ports::Clock>);

impl Default for ClockAdapter {
    fn default() -> Self {
        ClockAdapter(std::sync::Arc::new(crate::SystemClock))
    }
}

impl std::fmt::Debug for ClockAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClockAdapter")
    }
}

/// A memory size: MiB (`48`, `48Mi`, `48MiB`) or GiB (`1Gi`, `1GiB`), at least 24 MiB.
fn memory_size(raw: &str) -> Result<u64, String> {
    let raw = raw.trim();
    let (digits, shift) = match raw.find(|c: char| !c.is_ascii_digit()) {
        None => (raw, 20),
        Some(at) => match &raw[at..] {
            "Mi" | "MiB" => (&raw[..at], 20),
            "Gi" | "GiB" => (&raw[..at], 30),
            unit => return Err(format!("unknown unit {unit:?} (Mi or Gi)")),
        },
    };
    let n: u64 = digits.parse().map_err(|e| format!("{raw}: {e}"))?;
    let bytes = n
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{raw} is too large"))?;
    if bytes < muster_http::budget::MIN_MEMORY_BUDGET {
        return Err(format!("{raw} is under the least budget, 24Mi"));
    }
    Ok(bytes)
}

/// A role name `migrate` accepts (checked at startup).
fn runtime_role(raw: &str) -> Result<String, String> {
    muster_pg::validate_role(raw)
        .map(|()| raw.to_owned())
        .map_err(|e| e.to_string())
}

/// A directory that exists (checked at startup, so a typo fails loudly).
fn existing_dir(raw: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(raw);
    if path.is_dir() {
        Ok(path)
    } else {
        Err(format!("{raw} is not a directory"))
    }
}

impl Settings {
    /// The server's settings, with the development web directory of `--dev-web-dir`.
    pub fn server_settings(&self) -> muster_http::ServerSettings {
        muster_http::ServerSettings {
            dev_web_dir: self.dev_web_dir.clone(),
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            memory: muster_http::MemoryBudget::new(self.memory_budget),
            ..self.server.clone()
        }
    }

    /// Retention's settings (`--retain-days`, `--retain-edit-text-days`).
    pub fn retention(&self) -> muster_app::service::RetentionSettings {
        muster_app::service::RetentionSettings {
            retain: time::Duration::days(i64::from(self.retain_days)),
            retain_edit_text: time::Duration::days(i64::from(self.retain_edit_text_days)),
            ..muster_app::service::RetentionSettings::default()
        }
    }

    /// The edit intake's settings.
    pub fn intake(&self) -> muster_app::intake::IntakeSettings {
        muster_app::intake::IntakeSettings {
            difficulty: self.pow_difficulty,
            daily_limit: self.edit_daily_limit,
        }
    }
}

impl Settings {
    /// Settings for tests and embedding: everything at its default.
    /// These settings with the span exporter the `OTEL_*` variables configure: its service
    /// version is this binary's, and its instance the pod (`HOSTNAME`) unless
    /// `OTEL_RESOURCE_ATTRIBUTES` names one. A bad value fails the start, naming the variable.
    pub fn traces_from_env(self) -> Result<Self, muster_otel::ConfigError> {
        self.traces_from(|v| std::env::var(v).ok())
    }

    /// [`Settings::traces_from_env`] with the variables `var` reads.
    pub fn traces_from(
        mut self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, muster_otel::ConfigError> {
        let host = var("HOSTNAME").filter(|h| !h.is_empty());
        self.telemetry = muster_otel::Config::from_env(var)?.map(|mut c| {
            c.service_version = env!("CARGO_PKG_VERSION").to_owned();
            let named = c
                .resource_attributes
                .iter()
                .any(|(k, _)| k == "service.instance.id");
            if c.service_instance_id.is_none() && !named {
                c.service_instance_id = host;
            }
            c
        });
        Ok(self)
    }

    pub fn new(database_url: impl Into<String>) -> Self {
        Settings {
            database_url: Some(database_url.into()),
            runtime_role: muster_pg::DEFAULT_RUNTIME_ROLE.to_owned(),
            listen: "127.0.0.1:0".parse().expect("literal address"),
            tokens: None,
            auth: None,
            serviceaccount_map: None,
            token_audience: muster_kube::DEFAULT_AUDIENCE.to_owned(),
            tokenreview_stale_limit_secs: muster_kube::DEFAULT_STALE_LIMIT.as_secs(),
            tokenreview_peer_rate: muster_kube::DEFAULT_PEER_RATE,
            tokenreview_rate: muster_kube::DEFAULT_RATE,
            ownership_map: None,
            node_names: None,
            lease_ttl_ms: 30_000,
            final_grace_ms: None,
            retain_days: muster_app::service::DEFAULT_RETAIN_DAYS,
            retain_edit_text_days: muster_app::service::DEFAULT_RETAIN_EDIT_TEXT_DAYS,
            peer_wake: true,
            telemetry: None,
            clock: ClockAdapter::default(),
            group_commits: 1,
            inflight_body_mib: 2,
            max_connections: muster_http::server::DEFAULT_MAX_CONNECTIONS,
            memory_budget: muster_http::budget::DEFAULT_MEMORY_BUDGET,
            max_connections_per_peer: muster_http::server::DEFAULT_MAX_CONNECTIONS_PER_PEER,
            log_format: LogFormat::Json,
            pipeline: None,
            feed_coalesce_ms: 100,
            checkpoint_every_entries: muster_pg::CheckpointSettings::default().every_entries,
            checkpoint_every_secs: muster_pg::CheckpointSettings::default().every.as_secs(),
            feed: muster_app::feed::FeedSettings::default(),
            server: muster_http::ServerSettings::default(),
            pow_difficulty: muster_antispam::DEFAULT_DIFFICULTY,
            edit_daily_limit: muster_antispam::ip::DEFAULT_DAILY_LIMIT,
            dev_web_dir: None,
        }
    }
}

#[cfg(test)]
mod tests {
    /// Settings with the `OTEL_*` (and `HOSTNAME`) variables `vars`.
    fn traced(vars: &[(&str, &str)]) -> Result<super::Settings, muster_otel::ConfigError> {
        let vars: std::collections::HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        super::Settings::new("postgres://x").traces_from(|v| vars.get(v).cloned())
    }

    #[test]
    fn traces_are_off_without_an_endpoint() {
        assert!(
            traced(&[("HOSTNAME", "muster-0")])
                .unwrap()
                .telemetry
                .is_none()
        );
    }

    #[test]
    fn the_exporter_names_this_binarys_version_and_the_pod_as_its_instance() {
        let s = traced(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("HOSTNAME", "muster-0"),
        ])
        .unwrap();
        let c = s.telemetry.unwrap();
        assert_eq!(
            (c.service_version.as_str(), c.service_instance_id.as_deref()),
            ("0.1.0-draft", Some("muster-0"))
        );
    }

    #[test]
    fn an_instance_named_in_the_resource_attributes_is_not_replaced_by_the_pod() {
        let s = traced(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=blue-1"),
            ("HOSTNAME", "muster-0"),
        ])
        .unwrap();
        assert_eq!(s.telemetry.unwrap().service_instance_id, None);
    }

    #[test]
    fn an_unsupported_protocol_fails_the_start_naming_its_variable() {
        let e = traced(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap_err();
        assert_eq!(e.var(), "OTEL_EXPORTER_OTLP_PROTOCOL");
    }

    use clap::Parser;

    use super::*;

    #[test]
    fn a_live_feed_subscriber_is_written_at_most_every_twenty_ms_by_default() {
        let cli = Cli::try_parse_from(["muster", "serve"]).expect("arguments parse");
        assert_eq!(cli.settings.feed_coalesce_ms, 100);
    }

    #[test]
    fn the_memory_budget_is_48_mib_by_default_and_takes_mebibytes_or_gibibytes() {
        let parse = |v: &str| {
            Cli::try_parse_from(["muster", "serve", "--memory-budget", v])
                .map(|c| c.settings.memory_budget)
                .ok()
        };
        let default = Cli::try_parse_from(["muster", "serve"]).expect("arguments parse");
        assert_eq!(
            (
                default.settings.memory_budget,
                parse("64"),
                parse("64Mi"),
                parse("1Gi"),
                parse("23Mi"),
                parse("64M")
            ),
            (
                48 << 20,
                Some(64 << 20),
                Some(64 << 20),
                Some(1 << 30),
                None,
                None
            )
        );
    }

    #[test]
    fn the_development_web_directory_is_off_by_default() {
        let cli = Cli::try_parse_from(["muster", "serve"]).expect("arguments parse");
        assert_eq!(cli.settings.dev_web_dir, None);
        assert_eq!(cli.settings.server_settings().dev_web_dir, None);
        assert_eq!(Settings::new("postgres://x").dev_web_dir, None);
    }

    #[test]
    fn the_development_web_directory_flag_reaches_the_server_and_must_exist() {
        let dir = std::env::temp_dir();
        let shown = dir.to_string_lossy().into_owned();
        let cli = Cli::try_parse_from(["muster", "serve", "--dev-web-dir", shown.as_str()])
            .expect("arguments parse");
        assert_eq!(cli.settings.server_settings().dev_web_dir, Some(dir));
        let missing = Cli::try_parse_from(["muster", "--dev-web-dir", "/no/such/muster/dir"]);
        assert!(missing.is_err());
    }
}
