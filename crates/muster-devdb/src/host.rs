//! What a cluster needs from the machine: PostgreSQL's programs, the account to run them as,
//! a fresh directory, and the tail of a log.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::DevDbError;

/// Distinguishes clusters created by one process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// How many trailing lines of the server log go into an error.
const LOG_TAIL_LINES: usize = 40;

/// The unprivileged account the cluster runs as when we are root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// Finds a PostgreSQL program: on `PATH` first, then in
/// `/usr/lib/postgresql/<version>/bin`, highest version first.
pub fn find_bin(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let path = PathBuf::from(name);
        return is_executable(&path).then_some(path);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return Some(candidate);
            }
        }
    }
    let mut versions: Vec<(Vec<u64>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let key = version_key(&entry.file_name().to_string_lossy())?;
            Some((key, entry.path().join("bin").join(name)))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions
        .into_iter()
        .map(|(_, path)| path)
        .find(|path| is_executable(path))
}

/// `"15"` → `[15]`, `"9.6"` → `[9, 6]`; anything else is not a version.
pub(crate) fn version_key(name: &str) -> Option<Vec<u64>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The account the cluster must run as: `postgres` when we are root, else ourselves.
pub(crate) fn cluster_account() -> Result<Option<Account>, DevDbError> {
    if effective_uid() != Some(0) {
        return Ok(None);
    }
    let passwd =
        fs::read_to_string("/etc/passwd").map_err(|e| DevDbError::io("reading /etc/passwd", e))?;
    account_from_passwd(&passwd, "postgres")
        .map(Some)
        .ok_or(DevDbError::NoPostgresAccount)
}

pub(crate) fn account_from_passwd(passwd: &str, user: &str) -> Option<Account> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != user {
            return None;
        }
        let _password = fields.next()?;
        let uid = fields.next()?.trim().parse().ok()?;
        let gid = fields.next()?.trim().parse().ok()?;
        Some(Account { uid, gid })
    })
}

/// The effective uid, from `/proc/self/status`, else from `id -u`.
fn effective_uid() -> Option<u32> {
    if let Ok(status) = fs::read_to_string("/proc/self/status") {
        let uid = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|euid| euid.parse().ok());
        if uid.is_some() {
            return uid;
        }
    }
    let output = Command::new("id").arg("-u").output().ok()?;
    String::from_utf8_lossy(&output.stdout).trim().parse().ok()
}

/// Creates `<tmp>/muster-pg-<pid>-<counter>-<nanos>`.
pub(crate) fn create_base_dir() -> Result<PathBuf, DevDbError> {
    let tmp = std::env::temp_dir();
    loop {
        let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = tmp.join(format!(
            "muster-pg-{}-{counter}-{nanos}",
            std::process::id()
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(DevDbError::io(format!("creating {}", dir.display()), e)),
        }
    }
}

pub(crate) fn describe_output(output: &Output) -> String {
    let mut text = format!("exit status {}", output.status);
    for stream in [&output.stdout, &output.stderr] {
        let s = String::from_utf8_lossy(stream);
        let s = s.trim();
        if !s.is_empty() {
            text.push('\n');
            text.push_str(s);
        }
    }
    text
}

/// The log from byte `offset` on (lossy; at most the last 64 KiB).
pub(crate) fn read_from(path: &Path, offset: u64) -> String {
    const MAX: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = offset.max(len.saturating_sub(MAX)).min(len);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last lines of the log written since `offset` (or of the whole log if
/// nothing was written since).
pub(crate) fn log_tail(path: &Path, offset: u64) -> String {
    let mut text = read_from(path, offset);
    if text.trim().is_empty() {
        text = read_from(path, 0);
    }
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.trim().is_empty() {
        "(empty)".to_owned()
    } else {
        tail
    }
}
