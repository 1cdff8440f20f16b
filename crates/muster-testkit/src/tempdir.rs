//! A temporary directory removed on drop.

use std::path::{Path, PathBuf};

/// A directory of its own under the system's temporary directory, removed (with everything in
/// it) when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `<tmp>/<prefix>-<uuid>`.
    pub fn new(prefix: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).expect("create a temporary directory");
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to the file `name` in the directory; its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write into the temporary directory");
        path
    }

    /// The file names in the directory, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .expect("read the temporary directory")
            .map(|e| {
                e.expect("a directory entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
