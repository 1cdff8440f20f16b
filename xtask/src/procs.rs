//! The process helpers every task shares: the workspace's paths, cargo, psql, banners and
//! steps, exit codes, and a `muster serve` child process that is stopped on every way out.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_devdb::find_bin;

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

/// `cargo` (the one running us, if any) in the workspace root.
pub(crate) fn cargo(root: &Path) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.current_dir(root);
    cmd
}

pub(crate) fn banner(text: &str) {
    println!("\n==> {text}");
}

pub(crate) fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).ok().filter(|c| *c != 0).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}

/// Prints a banner, runs `cmd` and fails unless it succeeds.
pub(crate) fn step(title: &str, cmd: &mut Command) -> Result<()> {
    banner(title);
    let status = cmd
        .status()
        .with_context(|| format!("could not run `{title}`"))?;
    if !status.success() {
        bail!("`{title}` failed ({status})");
    }
    Ok(())
}

/// Runs one SQL statement with psql.
pub(crate) fn psql(url: &str, sql: &str) -> Result<()> {
    let psql = find_bin("psql").context("psql not found (install the PostgreSQL client)")?;
    let output = Command::new(&psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not run {}", psql.display()))?;
    if !output.status.success() {
        bail!(
            "psql -c '{sql}' failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Stops the server on every way out (SIGTERM, then SIGKILL after 10 s).
pub(crate) struct Server {
    pub(crate) child: Child,
}

impl Server {
    pub(crate) fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
