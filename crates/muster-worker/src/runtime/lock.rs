//! The exclusive lock a runner holds on its spool directory (`<spool>/.lock`, an advisory
//! `flock`-style lock through `File::try_lock`, released when the process dies however it dies).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use super::RunnerError;

/// The name of the lock file inside the spool directory (the spool skips dot files).
pub const LOCK_FILE: &str = ".lock";

/// Held for as long as the runner lives; dropping it releases the lock.
#[derive(Debug)]
pub struct SpoolLock {
    _file: File,
    path: PathBuf,
}

impl SpoolLock {
    /// Creates `dir` if missing and locks it, or fails at once with
    /// [`RunnerError::SpoolLocked`] if another holder has it.
    pub fn acquire(dir: &Path) -> Result<SpoolLock, RunnerError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| RunnerError::Lock {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(SpoolLock { _file: file, path }),
            Err(TryLockError::WouldBlock) => Err(RunnerError::SpoolLocked {
                path: dir.to_owned(),
            }),
            Err(TryLockError::Error(source)) => Err(io(source)),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
