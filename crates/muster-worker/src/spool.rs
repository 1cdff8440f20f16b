//! The spool: one durable JSON file per pending delivery, `<lease_id>.<action>.json`.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use muster_domain::trace::TraceContext;
use serde::{Deserialize, Serialize};

use crate::ClientError;

/// What a spooled delivery does to its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Complete,
    Fail,
    NeedsSubtool,
}

impl Action {
    /// The path segment and file-name part: `complete`, `fail`, `needs_subtool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Complete => "complete",
            Action::Fail => "fail",
            Action::NeedsSubtool => "needs_subtool",
        }
    }
}

/// One spool file: `{"lease_id": "…", "action": "complete", "body": {…}, "traceparent": "00-…"}`;
/// `body` is exactly the request body sent to `POST /v1/leases/{lease_id}/{action}`,
/// `traceparent` the header sent with it (absent for a lease without a trace context, and in
/// the files of versions that did not keep it). Fields this version does not know are ignored,
/// so a rollback from a version that writes more still delivers what that version spooled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpoolEntry {
    pub lease_id: String,
    pub action: Action,
    pub body: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl SpoolEntry {
    /// `<lease_id>.<action>.json`.
    pub fn file_name(&self) -> String {
        format!("{}.{}.json", self.lease_id, self.action.as_str())
    }
}

/// Lease ids become file names and URL path segments: only `[A-Za-z0-9_-]`.
pub(crate) fn check_lease_id(id: &str) -> Result<(), ClientError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ClientError::InvalidArgument(format!(
            "lease id {id:?} is not [A-Za-z0-9_-]{{1,128}}"
        )))
    }
}

fn spool_err(path: &Path) -> impl FnOnce(std::io::Error) -> ClientError + '_ {
    move |source| ClientError::Spool {
        path: path.to_owned(),
        source,
    }
}

/// Writes `entry` durably: temp file, fsync, rename into place, fsync the directory.
pub(crate) fn write(dir: &Path, entry: &SpoolEntry) -> Result<PathBuf, ClientError> {
    write_all(dir, std::slice::from_ref(entry)).map(|mut paths| paths.remove(0))
}

/// Writes every entry as [`write`] does, with one directory fsync at the end for all of them.
/// On an error, the files already renamed into place stay (each is a complete delivery).
pub(crate) fn write_all(dir: &Path, entries: &[SpoolEntry]) -> Result<Vec<PathBuf>, ClientError> {
    let paths = entries
        .iter()
        .map(|entry| write_file(dir, entry))
        .collect::<Result<Vec<_>, _>>()?;
    sync_dir(dir).map_err(spool_err(dir))?;
    Ok(paths)
}

/// Temp file, fsync, rename into place; the directory is not synced.
fn write_file(dir: &Path, entry: &SpoolEntry) -> Result<PathBuf, ClientError> {
    let name = entry.file_name();
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::now_v7()));
    let bytes =
        serde_json::to_vec(entry).map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(spool_err(&path))?;
    Ok(path)
}

/// Removes delivered (or finally rejected) spool files of one directory, durably, with one
/// directory fsync for all of them.
pub(crate) fn remove_all(paths: &[PathBuf]) -> Result<(), ClientError> {
    for path in paths {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(spool_err(path)(e)),
        }
    }
    match paths.first().and_then(|p| p.parent()) {
        Some(dir) => sync_dir(dir).map_err(spool_err(dir)),
        None => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The spool files, oldest first (modification time, then name). Temp files (`.…tmp`) and
/// `*.corrupt` files are skipped.
pub(crate) fn list(dir: &Path) -> Result<Vec<PathBuf>, ClientError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(spool_err(dir))? {
        let entry = entry.map_err(spool_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let meta = entry.metadata().map_err(spool_err(&entry.path()))?;
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        files.push((modified, name, entry.path()));
    }
    files.sort();
    Ok(files.into_iter().map(|(_, _, p)| p).collect())
}

/// Reads one spool file; a file that is not a spool entry is renamed to `*.corrupt`. A
/// `traceparent` that is not a valid trace context (a hand-edited or damaged file) is dropped:
/// the delivery is sent without it rather than never.
pub(crate) fn read(path: &Path) -> Result<SpoolEntry, ClientError> {
    let bytes = std::fs::read(path).map_err(spool_err(path))?;
    let parsed = serde_json::from_slice::<SpoolEntry>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|mut e| {
            check_lease_id(&e.lease_id).map_err(|e| e.to_string())?;
            e.traceparent = e.traceparent.filter(|t| is_sendable_traceparent(t));
            Ok(e)
        });
    match parsed {
        Ok(entry) => Ok(entry),
        Err(detail) => {
            let mut corrupt = path.as_os_str().to_owned();
            corrupt.push(".corrupt");
            let _ = std::fs::rename(path, &corrupt);
            Err(ClientError::SpoolCorrupt {
                path: path.to_owned(),
                detail,
            })
        }
    }
}

/// A trace context the server reads, in a form a header can carry (a later version's trailing
/// fields are not checked by the parser).
fn is_sendable_traceparent(value: &str) -> bool {
    TraceContext::parse(value).is_some() && hyper::header::HeaderValue::from_str(value).is_ok()
}

#[cfg(test)]
mod tests {
    use muster_testkit::TempDir;

    use super::*;

    #[test]
    fn a_written_entry_reads_back_under_its_lease_and_action_name() {
        let tmp = TempDir::new("muster-spool-unit");
        let dir = tmp.path();
        let entry = SpoolEntry {
            lease_id: "0192-abc".into(),
            action: Action::NeedsSubtool,
            body: serde_json::json!({"worker_digest": "sha256:00"}),
            traceparent: Some(TRACEPARENT.into()),
        };
        let path = write(dir, &entry).unwrap();
        assert_eq!(path, dir.join("0192-abc.needs_subtool.json"));
        assert_eq!(list(dir).unwrap(), vec![path.clone()]);
        assert_eq!(read(&path).unwrap(), entry);
        remove_all(std::slice::from_ref(&path)).unwrap();
        assert_eq!(list(dir).unwrap(), Vec::<PathBuf>::new());
    }

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_file_without_a_traceparent_reads_as_an_entry_without_one() {
        let tmp = TempDir::new("muster-spool-unit");
        let path = tmp.path().join("0192-abc.complete.json");
        std::fs::write(
            &path,
            br#"{"lease_id":"0192-abc","action":"complete","body":{"result":{},"next":[]}}"#,
        )
        .unwrap();
        let entry = read(&path).unwrap();
        assert_eq!(
            entry,
            SpoolEntry {
                lease_id: "0192-abc".into(),
                action: Action::Complete,
                body: serde_json::json!({"result": {}, "next": []}),
                traceparent: None,
            }
        );
    }

    /// Writes `json` as the spool file of lease `0192-abc`'s completion and reads it.
    fn read_completion_file(json: &str) -> SpoolEntry {
        let tmp = TempDir::new("muster-spool-unit");
        let path = tmp.path().join("0192-abc.complete.json");
        std::fs::write(&path, json).unwrap();
        read(&path).unwrap()
    }

    #[test]
    fn a_traceparent_that_is_not_a_trace_context_is_dropped_on_read() {
        for bad in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
            "not a traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "",
        ] {
            let json = serde_json::json!({
                "lease_id": "0192-abc",
                "action": "complete",
                "body": {},
                "traceparent": bad,
            });
            assert_eq!(
                read_completion_file(&json.to_string()).traceparent,
                None,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_later_version_traceparent_with_a_byte_no_header_can_carry_is_dropped_on_read() {
        let json = serde_json::json!({
            "lease_id": "0192-abc",
            "action": "complete",
            "body": {},
            "traceparent": "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x\ny",
        });
        assert_eq!(read_completion_file(&json.to_string()).traceparent, None);
    }

    #[test]
    fn a_file_with_fields_this_version_does_not_know_reads_as_its_entry() {
        let entry = read_completion_file(&format!(
            r#"{{"lease_id":"0192-abc","action":"complete","body":{{}},"traceparent":"{TRACEPARENT}","tracestate":"k=v","attempt":3}}"#
        ));
        assert_eq!(
            entry,
            SpoolEntry {
                lease_id: "0192-abc".into(),
                action: Action::Complete,
                body: serde_json::json!({}),
                traceparent: Some(TRACEPARENT.into()),
            }
        );
    }

    #[test]
    fn an_entry_without_a_traceparent_is_written_without_the_field() {
        let entry = SpoolEntry {
            lease_id: "0192-abc".into(),
            action: Action::Fail,
            body: serde_json::json!({}),
            traceparent: None,
        };
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            r#"{"lease_id":"0192-abc","action":"fail","body":{}}"#
        );
    }

    #[test]
    fn a_corrupt_file_is_set_aside_and_no_longer_listed() {
        let tmp = TempDir::new("muster-spool-unit");
        let dir = tmp.path();
        let path = dir.join("x.complete.json");
        std::fs::write(&path, b"{not json").unwrap();
        let err = read(&path).unwrap_err();
        assert_eq!(err.code(), "E_SPOOL_CORRUPT");
        assert_eq!(list(dir).unwrap(), Vec::<PathBuf>::new());
        assert!(dir.join("x.complete.json.corrupt").exists());
    }

    #[test]
    fn lease_ids_that_could_escape_the_spool_or_the_url_are_refused() {
        for bad in ["", "../x", "a/b", "a.b", "a b", "a?b"] {
            assert_eq!(
                check_lease_id(bad).unwrap_err().code(),
                "E_INVALID_ARGUMENT",
                "{bad:?}"
            );
        }
        assert!(check_lease_id("0192f1f4-8a4e-7cc0-b3c1-4f4f7d0a1b2c").is_ok());
    }
}
