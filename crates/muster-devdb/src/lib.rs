//! Throwaway PostgreSQL clusters built from the locally installed binaries.
//!
//! A [`TempCluster`] is a private cluster in a fresh directory under
//! [`std::env::temp_dir`], listening on `127.0.0.1` on a free port and on a
//! private unix socket directory. It is used by the integration tests,
//! `cargo xtask up`/`test`/`db`, the benchmarks and the fault tests.
//!
//! PostgreSQL refuses to run as root, so when the current process is root the
//! cluster's files belong to, and its processes run as, the unprivileged
//! `postgres` account. Otherwise everything runs as the current user.
//!
//! No postmaster is ever leaked: besides [`Drop`], every cluster has a small
//! detached `sh` watchdog that waits for the owning process to disappear (even
//! through `SIGKILL`, or a test binary exiting without running destructors)
//! and then kills the postmaster with `SIGQUIT` and removes the directory.
//!
//! Around a cluster, the local runs (`cargo xtask`, the benchmark lab) share the helpers of
//! `process.rs`, re-exported here: a titled step, `psql`, a free port, a child process stopped
//! on every way out, and waiting for a server's HTTP port to answer 200; of `serve.rs`: a
//! database migrated by `muster migrate`, the runtime role's URL, a server waited for until
//! healthy; and of `tokens.rs`: development tokens and the token file `muster serve --tokens`
//! reads.

mod error;
mod host;
mod process;
mod serve;
mod tokens;

pub use error::DevDbError;
pub use host::find_bin;
use host::{
    Account, cluster_account, create_base_dir, describe_output, is_executable, log_tail, read_from,
};
pub use process::{Probe, Proc, banner, free_port, psql, psql_query, step, wait_for_200};
pub use serve::{migrate, migrated_database, runtime_url, wait_healthy};
pub use tokens::{DevTokens, new_token};

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The superuser name given to `initdb -U`; also the user in [`TempCluster::url`].
pub const SUPERUSER: &str = "postgres";

/// The runtime role `muster migrate` creates and grants by default (`--runtime-role`): the
/// role `muster serve` runs as in the local runs, with production privileges.
pub const RUNTIME_ROLE: &str = "muster_app";

/// The only address the cluster listens on.
const HOST: &str = "127.0.0.1";

/// How many free ports are tried when the chosen one was taken in the meantime.
const PORT_ATTEMPTS: usize = 5;

/// Seconds `pg_ctl` waits for start and stop.
const PG_CTL_TIMEOUT_SECS: &str = "60";

/// Name of the settings file written into the data directory and included
/// from `postgresql.conf`.
const SETTINGS_FILE: &str = "muster-devdb.conf";

/// Watchdog run by `/bin/sh -c`; `$1` = pid to watch, `$2` = data directory,
/// `$3` = directory to remove. It ignores the terminal's SIGINT/SIGHUP (it also
/// runs in its own process group) so that Ctrl-C, which kills an owner that has
/// no handler without running destructors, still leads to a clean-up.
const REAPER_SCRIPT: &str = r#"trap '' INT HUP
while kill -0 "$1" 2>/dev/null; do sleep 1; done
pm=$(head -n 1 "$2/postmaster.pid" 2>/dev/null)
case "$pm" in ''|*[!0-9]*) pm= ;; esac
if [ -n "$pm" ] && [ -d /proc/self ] && ! grep -q postgres "/proc/$pm/cmdline" 2>/dev/null; then pm= ; fi
if [ -n "$pm" ] && kill -QUIT "$pm" 2>/dev/null; then
  i=0
  while kill -0 "$pm" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pm" 2>/dev/null
fi
rm -rf "$3"
"#;

/// How a [`TempCluster`] is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// `fsync` (and `full_page_writes`, `synchronous_commit`); off makes tests fast,
    /// on gives real durability (e.g. for `cargo xtask up` and benchmarks).
    pub fsync: bool,
    /// `max_connections`.
    pub max_connections: u32,
    /// Server log file; `None` means `server.log` inside the cluster's temporary
    /// directory (removed with it). A given file is appended to and kept.
    pub log_to: Option<PathBuf>,
    /// More `name = value` lines for the cluster's settings file, after the ones above
    /// (e.g. `shared_preload_libraries = 'pg_stat_statements'` for `cargo xtask profile`).
    pub extra_settings: Vec<String>,
    /// Files written into the data directory before the first start, readable only by the
    /// cluster's account (e.g. `server.crt` and `server.key` for `ssl = on`): (name, contents).
    pub files: Vec<(String, Vec<u8>)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            fsync: false,
            max_connections: 200,
            log_to: None,
            extra_settings: Vec::new(),
            files: Vec::new(),
        }
    }
}

/// How [`TempCluster::stop`] shuts the server down (`pg_ctl stop -m …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Roll back open transactions, disconnect clients, checkpoint, exit.
    Fast,
    /// Exit at once without a checkpoint; the next start runs crash recovery.
    Immediate,
}

impl StopMode {
    fn as_arg(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// A private, throwaway PostgreSQL cluster. Dropping it stops the server
/// (immediate mode) and removes its directory.
#[derive(Debug)]
pub struct TempCluster {
    base_dir: PathBuf,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    options: ClusterOptions,
    pg_ctl: PathBuf,
    account: Option<Account>,
    watchdog: Option<Child>,
}

impl TempCluster {
    /// Creates and starts a cluster with [`ClusterOptions::default`].
    pub fn start() -> Result<Self, DevDbError> {
        Self::start_with(ClusterOptions::default())
    }

    /// Creates (`initdb`) and starts a cluster.
    pub fn start_with(options: ClusterOptions) -> Result<Self, DevDbError> {
        let initdb =
            find_bin("initdb").ok_or_else(|| DevDbError::BinaryNotFound("initdb".into()))?;
        let pg_ctl = initdb
            .parent()
            .map(|dir| dir.join("pg_ctl"))
            .filter(|p| is_executable(p))
            .or_else(|| find_bin("pg_ctl"))
            .ok_or_else(|| DevDbError::BinaryNotFound("pg_ctl".into()))?;
        let account = cluster_account()?;
        let base_dir = create_base_dir()?;
        let log_path = match &options.log_to {
            Some(path) => path.clone(),
            None => base_dir.join("server.log"),
        };
        // From here on `Drop` cleans up whatever has been created.
        let mut cluster = TempCluster {
            data_dir: base_dir.join("data"),
            socket_dir: base_dir.join("socket"),
            base_dir,
            log_path,
            port: 0,
            options,
            pg_ctl,
            account,
            watchdog: None,
        };
        cluster.spawn_watchdog()?;
        cluster.prepare_directories()?;
        cluster.initdb(&initdb)?;
        cluster.write_files()?;
        cluster.start_on_free_port()?;
        Ok(cluster)
    }

    /// TCP port the server listens on (stays the same across [`Self::start_again`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Address the server listens on: `127.0.0.1`.
    pub fn host(&self) -> &str {
        HOST
    }

    /// Connection URL for `database` as the superuser, e.g.
    /// `postgresql://postgres@127.0.0.1:54321/postgres` (trust authentication).
    pub fn url(&self, database: &str) -> String {
        format!("postgresql://{SUPERUSER}@{HOST}:{}/{database}", self.port)
    }

    /// Gives `role` (created `NOLOGIN` by `muster migrate`) a login and answers `url` (a URL of
    /// this cluster) as that role. The cluster trusts local connections: no password.
    pub fn login_as(&self, url: &str, role: &str) -> Result<String, DevDbError> {
        psql(&self.url(SUPERUSER), &format!("alter role {role} login"))?;
        Ok(url.replacen(&format!("://{SUPERUSER}@"), &format!("://{role}@"), 1))
    }

    /// Creates database `name` (with psql, as the superuser) and answers its [`Self::url`].
    pub fn create_database(&self, name: &str) -> Result<String, DevDbError> {
        psql(&self.url(SUPERUSER), &format!("create database {name}"))?;
        Ok(self.url(name))
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The private directory holding the server's unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The server log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Stops the server (`pg_ctl stop -m fast|immediate -w`). Stopping a server
    /// that is not running succeeds.
    pub fn stop(&mut self, mode: StopMode) -> Result<(), DevDbError> {
        let output = self.run_pg_ctl(&["stop", "-m", mode.as_arg()])?;
        if output.status.success() || !self.is_running() {
            return Ok(());
        }
        Err(DevDbError::Stop {
            detail: describe_output(&output),
            log: self.log_path.display().to_string(),
            log_tail: log_tail(&self.log_path, 0),
        })
    }

    /// Starts the server again on the same port with the same data, e.g. after
    /// [`Self::stop`] (an immediate stop makes this run crash recovery). Does
    /// nothing when the server is running.
    pub fn start_again(&mut self) -> Result<(), DevDbError> {
        if self.is_running() {
            return Ok(());
        }
        self.try_start().map_err(|failure| failure.error)
    }

    /// Whether the server is running (`pg_ctl status`).
    pub fn is_running(&self) -> bool {
        self.run_pg_ctl(&["status"])
            .map(|output| output.status.success())
            .unwrap_or(false)
    }

    /// A command for a PostgreSQL program, run as the cluster's account, in the
    /// cluster directory, with no `PG*` variables inherited.
    fn pg_command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd.current_dir(&self.base_dir).stdin(Stdio::null());
        if let Some(account) = self.account {
            cmd.uid(account.uid).gid(account.gid);
        }
        cmd
    }

    fn run_pg_ctl(&self, args: &[&str]) -> Result<Output, DevDbError> {
        let mut cmd = self.pg_command(&self.pg_ctl);
        cmd.arg("-D").arg(&self.data_dir);
        if args.first() != Some(&"status") {
            cmd.args(["-w", "-t", PG_CTL_TIMEOUT_SECS]);
        }
        cmd.args(args);
        cmd.output()
            .map_err(|e| DevDbError::io(format!("running {}", self.pg_ctl.display()), e))
    }

    fn chown(&self, path: &Path) -> Result<(), DevDbError> {
        match self.account {
            Some(account) => std::os::unix::fs::chown(path, Some(account.uid), Some(account.gid))
                .map_err(|e| DevDbError::io(format!("chown postgres {}", path.display()), e)),
            None => Ok(()),
        }
    }

    fn spawn_watchdog(&mut self) -> Result<(), DevDbError> {
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(REAPER_SCRIPT)
            .arg("muster-devdb-reaper")
            .arg(std::process::id().to_string())
            .arg(&self.data_dir)
            .arg(&self.base_dir)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| DevDbError::io("spawning the cluster watchdog (/bin/sh)", e))?;
        self.watchdog = Some(child);
        Ok(())
    }

    fn prepare_directories(&self) -> Result<(), DevDbError> {
        self.chown(&self.base_dir)?;
        fs::create_dir(&self.socket_dir)
            .map_err(|e| DevDbError::io(format!("creating {}", self.socket_dir.display()), e))?;
        fs::set_permissions(&self.socket_dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| DevDbError::io(format!("chmod {}", self.socket_dir.display()), e))?;
        self.chown(&self.socket_dir)?;
        // pg_ctl opens the log as the cluster's account: create it up front.
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| DevDbError::io(format!("creating {}", self.log_path.display()), e))?;
        self.chown(&self.log_path)
    }

    fn initdb(&self, initdb: &Path) -> Result<(), DevDbError> {
        let mut transcript = String::new();
        for locale_args in [&["--locale=C.UTF-8"][..], &["--no-locale"][..]] {
            let output = self
                .pg_command(initdb)
                .arg("-D")
                .arg(&self.data_dir)
                .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "-N"])
                .args(locale_args)
                .output()
                .map_err(|e| DevDbError::io(format!("running {}", initdb.display()), e))?;
            if output.status.success() {
                return self.write_include();
            }
            transcript.push_str(&format!(
                "$ initdb {} ...\n{}\n",
                locale_args.join(" "),
                describe_output(&output)
            ));
            if self.data_dir.exists() {
                fs::remove_dir_all(&self.data_dir).map_err(|e| {
                    DevDbError::io(format!("removing {}", self.data_dir.display()), e)
                })?;
            }
        }
        Err(DevDbError::Initdb { output: transcript })
    }

    fn write_files(&self) -> Result<(), DevDbError> {
        for (name, contents) in &self.options.files {
            let path = self.data_dir.join(name);
            fs::write(&path, contents)
                .map_err(|e| DevDbError::io(format!("writing {}", path.display()), e))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                .map_err(|e| DevDbError::io(format!("chmod {}", path.display()), e))?;
            self.chown(&path)?;
        }
        Ok(())
    }

    fn write_include(&self) -> Result<(), DevDbError> {
        let conf = self.data_dir.join("postgresql.conf");
        let mut file = OpenOptions::new()
            .append(true)
            .open(&conf)
            .map_err(|e| DevDbError::io(format!("opening {}", conf.display()), e))?;
        writeln!(file, "\n# added by muster-devdb\ninclude '{SETTINGS_FILE}'")
            .map_err(|e| DevDbError::io(format!("writing {}", conf.display()), e))
    }

    fn write_settings(&self) -> Result<(), DevDbError> {
        let on_off = |b: bool| if b { "on" } else { "off" };
        let durable = on_off(self.options.fsync);
        let socket_dir = self.socket_dir.to_string_lossy().replace('\'', "''");
        let mut text = format!(
            "# written by muster-devdb: a throwaway cluster\n\
             listen_addresses = '{HOST}'\n\
             port = {port}\n\
             unix_socket_directories = '{socket_dir}'\n\
             max_connections = {max_connections}\n\
             shared_buffers = '128MB'\n\
             fsync = {durable}\n\
             synchronous_commit = {durable}\n\
             full_page_writes = {durable}\n\
             log_min_messages = warning\n",
            port = self.port,
            max_connections = self.options.max_connections,
        );
        for line in &self.options.extra_settings {
            text.push_str(line);
            text.push('\n');
        }
        let path = self.data_dir.join(SETTINGS_FILE);
        fs::write(&path, text)
            .map_err(|e| DevDbError::io(format!("writing {}", path.display()), e))?;
        self.chown(&path)
    }

    fn start_on_free_port(&mut self) -> Result<(), DevDbError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.port = free_port()?;
            self.write_settings()?;
            match self.try_start() {
                Ok(()) => return Ok(()),
                Err(failure) if failure.port_in_use && attempt < PORT_ATTEMPTS => continue,
                Err(failure) => return Err(failure.error),
            }
        }
    }

    fn try_start(&self) -> Result<(), StartFailure> {
        let log_offset = fs::metadata(&self.log_path).map(|m| m.len()).unwrap_or(0);
        let output = self
            .run_pg_ctl(&["-l", &self.log_path.to_string_lossy(), "start"])
            .map_err(|error| StartFailure {
                error,
                port_in_use: false,
            })?;
        if output.status.success() {
            return Ok(());
        }
        let new_log = read_from(&self.log_path, log_offset);
        let port_in_use = new_log.contains("Address already in use")
            || new_log.contains("could not bind")
            || new_log.contains("could not create any TCP/IP sockets");
        // A postmaster that outlived pg_ctl's timeout must not linger.
        if self.is_running() {
            let _ = self.run_pg_ctl(&["stop", "-m", "immediate"]);
        }
        Err(StartFailure {
            error: DevDbError::Start {
                detail: describe_output(&output),
                log: self.log_path.display().to_string(),
                log_tail: log_tail(&self.log_path, log_offset),
            },
            port_in_use,
        })
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        let stopped = !self.data_dir.join("postmaster.pid").exists() || {
            let _ = self.run_pg_ctl(&["stop", "-m", StopMode::Immediate.as_arg()]);
            !self.is_running()
        };
        let removed = stopped
            && (0..3)
                .any(|_| fs::remove_dir_all(&self.base_dir).is_ok() || !self.base_dir.exists());
        if !(stopped && removed) {
            // The watchdog finishes the job when this process exits.
            return;
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

struct StartFailure {
    error: DevDbError,
    port_in_use: bool,
}

#[cfg(test)]
mod tests;
