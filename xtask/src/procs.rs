//! The process helpers every task shares: the workspace's paths, cargo, exit codes, log files
//! and the reaper that kills what a task started if the task itself dies; and, from
//! `muster-devdb` (which the benchmark lab shares), banners and steps, psql, free ports, child
//! processes, a migrated database and a server waited for until healthy.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};

use anyhow::{Context, Result};
pub(crate) use muster_devdb::{
    Probe, Proc, banner, free_port, migrate, migrated_database, psql, psql_query, runtime_url,
    step, wait_for_200, wait_healthy,
};

pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// `cargo build` of `packages` in the debug profile, as a step: the directory of their
/// binaries.
pub(crate) fn build_debug(root: &Path, packages: &[&str]) -> Result<PathBuf> {
    let mut cmd = cargo(root);
    cmd.arg("build");
    for package in packages {
        cmd.args(["-p", package]);
    }
    step(
        &format!("cargo build -p {}", packages.join(" -p ")),
        &mut cmd,
    )?;
    Ok(target_dir(root).join("debug"))
}

/// `cargo` (the one running us, if any) in the workspace root.
pub(crate) fn cargo(root: &Path) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.current_dir(root);
    cmd
}

pub(crate) fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).ok().filter(|c| *c != 0).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}

/// Runs `cmd` (`what` names it in errors), printing its stdout line by line and handing each
/// line to `line` as well; answers its exit status.
pub(crate) fn stream_stdout(
    what: &str,
    cmd: &mut Command,
    mut line: impl FnMut(&str),
) -> Result<ExitStatus> {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not run {what}"))?;
    if let Some(out) = child.stdout.take() {
        for text in std::io::BufReader::new(out).lines() {
            let text = text.with_context(|| format!("read the output of {what}"))?;
            println!("{text}");
            line(&text);
        }
    }
    child
        .wait()
        .with_context(|| format!("could not run {what}"))
}

/// Kills the processes this task started if it dies without cleaning up (SIGKILL, Ctrl-C):
/// a detached `sh` that waits for this process to disappear, then SIGKILLs every pid listed
/// in `<dir>/pids` whose command line still names muster.
pub(crate) struct Reaper {
    pids: PathBuf,
    watchdog: Child,
}

const REAPER_SCRIPT: &str = r#"trap '' INT HUP TERM
while kill -0 "$1" 2>/dev/null; do sleep 1; done
for p in $(cat "$2" 2>/dev/null); do
  if grep -q muster "/proc/$p/cmdline" 2>/dev/null; then kill -KILL "$p" 2>/dev/null; fi
done
"#;

impl Reaper {
    /// Starts the watchdog, with its pid list in `dir`.
    pub(crate) fn start(dir: &Path) -> Result<Reaper> {
        use std::os::unix::process::CommandExt;
        let pids = dir.join("pids");
        File::create(&pids)?;
        let watchdog = Command::new("/bin/sh")
            .arg("-c")
            .arg(REAPER_SCRIPT)
            .arg("muster-chaos-reaper")
            .arg(std::process::id().to_string())
            .arg(&pids)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("spawn the process reaper")?;
        Ok(Reaper { pids, watchdog })
    }

    /// Adds `pid` to the processes killed if this task dies.
    fn track(&self, pid: u32) {
        if let Ok(mut f) = OpenOptions::new().append(true).open(&self.pids) {
            let _ = writeln!(f, "{pid}");
        }
    }

    /// Spawns `cmd` (`what` names it in the error) as a tracked process, SIGKILLed when dropped.
    pub(crate) fn spawn(&self, cmd: &mut Command, what: &str) -> Result<Proc> {
        let child = cmd.spawn().with_context(|| format!("start {what}"))?;
        self.track(child.id());
        Ok(Proc::new(child))
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// `path` opened for appending (created if missing): a log several processes share in turn.
pub(crate) fn append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))
}

/// Writes `bytes` to `path`, readable by the owner only (plain tokens).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}
