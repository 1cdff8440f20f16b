//! What a simulation process saw: counters, every HTTP status by operation, and the answers no
//! client should ever get. Summarised as one JSON line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use muster_worker::ClientError;
use serde::{Deserialize, Serialize};

/// At most this many unexpected answers are kept verbatim (all are counted).
const KEPT: usize = 50;

/// Counters of one process, or of several summed ([`Summary::add`]).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Summary {
    /// Leases granted (200 on `POST /v1/leases`).
    pub leases: u64,
    /// Completions acknowledged (`replayed` ones included).
    pub completes: u64,
    /// Completions answered `replayed: true` (a delivery retried after its answer was lost).
    pub completes_replayed: u64,
    /// Failures acknowledged (retryable or not).
    pub fails: u64,
    /// `needs_subtool` acknowledged.
    pub parks: u64,
    /// Leases abandoned on purpose (the plan's `crash_at`).
    pub crashes: u64,
    /// Work dropped because a heartbeat said the lease was lost.
    pub abandoned_lost: u64,
    /// Deliveries or heartbeats answered `409 E_LEASE_LOST`.
    pub lease_lost: u64,
    /// Deliveries answered `409 E_CONFLICT`.
    pub conflicts: u64,
    /// Spool files a previous process left, delivered at start.
    pub redelivered_from_spool: u64,
    /// Heartbeats acknowledged.
    pub heartbeats: u64,
    /// Switches to the next `--url` after a connection error, a timeout or a 503.
    pub failovers: u64,
    /// Items enqueued (201 or 200 on `POST /v1/items`).
    pub enqueued: u64,
    /// Digest reports acknowledged, and the items they replayed.
    pub digests_reported: u64,
    pub replayed_by_digest: u64,
    /// Every answer by operation: status code, or `transport` / `timeout` when none came.
    pub statuses: BTreeMap<String, BTreeMap<String, u64>>,
    /// 5xx answers other than `503` (none expected).
    pub bad_5xx: u64,
    /// Answers outside the contract's expectations for this client (any 5xx but 503, any 4xx
    /// but 409 `E_LEASE_LOST`, 2xx bodies that do not parse), the first 50 kept.
    pub unexpected: Vec<Unexpected>,
    pub unexpected_total: u64,
}

/// One answer that should not have happened.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Unexpected {
    pub op: String,
    pub status: String,
    pub code: String,
    pub message: String,
}

impl Summary {
    /// Adds another process's counters: numbers summed, status counts merged, the kept
    /// unexpected answers of both.
    pub fn add(&mut self, other: Summary) {
        // Destructured whole, so that a new counter cannot be forgotten here.
        let Summary {
            leases,
            completes,
            completes_replayed,
            fails,
            parks,
            crashes,
            abandoned_lost,
            lease_lost,
            conflicts,
            redelivered_from_spool,
            heartbeats,
            failovers,
            enqueued,
            digests_reported,
            replayed_by_digest,
            statuses,
            bad_5xx,
            unexpected,
            unexpected_total,
        } = other;
        for (mine, theirs) in [
            (&mut self.leases, leases),
            (&mut self.completes, completes),
            (&mut self.completes_replayed, completes_replayed),
            (&mut self.fails, fails),
            (&mut self.parks, parks),
            (&mut self.crashes, crashes),
            (&mut self.abandoned_lost, abandoned_lost),
            (&mut self.lease_lost, lease_lost),
            (&mut self.conflicts, conflicts),
            (&mut self.redelivered_from_spool, redelivered_from_spool),
            (&mut self.heartbeats, heartbeats),
            (&mut self.failovers, failovers),
            (&mut self.enqueued, enqueued),
            (&mut self.digests_reported, digests_reported),
            (&mut self.replayed_by_digest, replayed_by_digest),
            (&mut self.bad_5xx, bad_5xx),
            (&mut self.unexpected_total, unexpected_total),
        ] {
            *mine += theirs;
        }
        for (op, by_status) in statuses {
            let mine = self.statuses.entry(op).or_default();
            for (status, n) in by_status {
                *mine.entry(status).or_default() += n;
            }
        }
        self.unexpected.extend(unexpected);
    }

    /// The report files of several processes (`--report`), summed. A missing or unreadable
    /// one (a process killed before its first report) counts as empty.
    pub fn sum_reports(paths: &[PathBuf]) -> Summary {
        let mut total = Summary::default();
        for path in paths {
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            if let Ok(report) = serde_json::from_slice::<Summary>(&bytes) {
                total.add(report);
            }
        }
        total
    }

    /// Answers of every operation with one of `statuses` (`"503"`, `"transport"`, …).
    pub fn answers(&self, statuses: &[&str]) -> u64 {
        self.statuses
            .values()
            .flat_map(|by_status| statuses.iter().filter_map(|s| by_status.get(*s)))
            .sum()
    }
}

/// Shared, thread-safe counters; optionally mirrored to a report file.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    inner: Arc<Mutex<Summary>>,
    report: Option<PathBuf>,
    /// The acknowledged completions, one `ITEM_ID LEDGER_SEQ` line each, appended as they
    /// arrive (see [`Stats::with_acks`]).
    acks: Option<Arc<Mutex<std::fs::File>>>,
}

/// The status key of an error: the HTTP status, or `transport` / `timeout` / `local`.
pub fn error_status(e: &ClientError) -> String {
    match e {
        ClientError::LeaseLost { .. } | ClientError::Conflict { .. } => "409".into(),
        ClientError::Unauthenticated { .. } => "401".into(),
        ClientError::Rejected { status, .. }
        | ClientError::Unavailable { status, .. }
        | ClientError::UnexpectedStatus { status }
        | ClientError::BadResponse { status, .. } => status.to_string(),
        ClientError::Transport(_) => "transport".into(),
        ClientError::Timeout => "timeout".into(),
        ClientError::Undelivered { last, .. } => error_status(last),
        ClientError::Spool { .. }
        | ClientError::SpoolCorrupt { .. }
        | ClientError::InvalidArgument(_) => "local".into(),
    }
}

/// Whether an error means "try the other replica": no answer, or `503`.
pub fn is_failover(e: &ClientError) -> bool {
    match e {
        ClientError::Transport(_) | ClientError::Timeout => true,
        ClientError::Unavailable { status, .. } => *status == 503,
        ClientError::Undelivered { last, .. } => is_failover(last),
        _ => false,
    }
}

/// Whether an answer is one this client can meet in normal operation (including outages):
/// the protocol's success statuses, `409 E_LEASE_LOST`, `503`, and no answer at all.
pub fn is_expected_status(status: &str) -> bool {
    matches!(
        status,
        "200" | "201" | "204" | "503" | "transport" | "timeout"
    )
}

impl Stats {
    /// Counters that are also written to `report` (atomically) by [`Stats::write_report`].
    pub fn with_report(report: Option<PathBuf>) -> Stats {
        Stats {
            inner: Arc::default(),
            report,
            acks: None,
        }
    }

    /// The same counters, also appending every acknowledged completion to `path` (created if
    /// missing): the evidence `muster-sim check --acks` compares with the ledger. Each line is
    /// written by one `write` call as the answer arrives, so a process killed at any moment
    /// leaves every acknowledgement it had received, bar at most the one being written.
    pub fn with_acks(mut self, path: &Path) -> std::io::Result<Stats> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        self.acks = Some(Arc::new(Mutex::new(file)));
        Ok(self)
    }

    /// Records that Muster acknowledged the completion of `item_id` with ledger entry `seq`.
    pub fn ack(&self, item_id: &str, seq: i64) {
        use std::io::Write;
        let Some(file) = &self.acks else { return };
        let line = format!("{item_id} {seq}\n");
        let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::error!("could not record an acknowledged completion: {e}");
        }
    }

    fn lock(&self) -> MutexGuard<'_, Summary> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the counters.
    pub fn update(&self, f: impl FnOnce(&mut Summary)) {
        f(&mut self.lock());
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> Summary {
        self.lock().clone()
    }

    /// Records an answer (status `"200"`, `"503"`, `"transport"`, …) to `op`.
    pub fn status(&self, op: &str, status: &str) {
        let mut s = self.lock();
        *s.statuses
            .entry(op.to_owned())
            .or_default()
            .entry(status.to_owned())
            .or_default() += 1;
    }

    /// Records an error answer to `op`; flags it when no client should ever see it. A bad 5xx
    /// is also written to the report file at once, so a process killed right after still
    /// leaves it behind.
    pub fn error(&self, op: &str, e: &ClientError) {
        let status = error_status(e);
        self.status(op, &status);
        let lease_lost = matches!(e, ClientError::LeaseLost { .. })
            || matches!(e, ClientError::Undelivered { last, .. } if matches!(**last, ClientError::LeaseLost { .. }));
        if is_expected_status(&status) || lease_lost {
            return;
        }
        let bad_5xx = status.starts_with('5') && status.len() == 3;
        self.flag(
            op,
            &status,
            e.code(),
            &e.to_string(),
            bad_5xx && status != "503",
        );
    }

    /// Records an answer that should not have happened.
    pub fn flag(&self, op: &str, status: &str, code: &str, message: &str, bad_5xx: bool) {
        tracing::error!(op, status, code, "unexpected answer: {message}");
        {
            let mut s = self.lock();
            s.unexpected_total += 1;
            if bad_5xx {
                s.bad_5xx += 1;
            }
            if s.unexpected.len() < KEPT {
                s.unexpected.push(Unexpected {
                    op: op.to_owned(),
                    status: status.to_owned(),
                    code: code.to_owned(),
                    message: message.chars().take(300).collect(),
                });
            }
        }
        if bad_5xx {
            self.write_report();
        }
    }

    /// The summary as one JSON line.
    pub fn summary_line(&self) -> String {
        serde_json::to_string(&self.snapshot())
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Writes the summary to the report file, if any: temp file, then rename.
    pub fn write_report(&self) {
        let Some(path) = &self.report else { return };
        if let Err(e) = write_atomically(path, self.summary_line().as_bytes()) {
            tracing::warn!(path = %path.display(), "could not write the report: {e}");
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_counted_per_operation() {
        let stats = Stats::default();
        stats.status("lease", "200");
        stats.status("lease", "200");
        stats.status("lease", "204");
        stats.error("complete", &ClientError::Transport("refused".into()));
        let s = stats.snapshot();
        assert_eq!(s.statuses["lease"]["200"], 2);
        assert_eq!(s.statuses["lease"]["204"], 1);
        assert_eq!(s.statuses["complete"]["transport"], 1);
        assert_eq!((s.unexpected_total, s.bad_5xx), (0, 0));
    }

    #[test]
    fn a_500_is_a_bad_5xx_and_a_503_is_not() {
        let stats = Stats::default();
        let e503 = ClientError::Unavailable {
            status: 503,
            code: Some("E_UNAVAILABLE".into()),
            message: "down".into(),
            retry_after: None,
        };
        let e500 = ClientError::Unavailable {
            status: 500,
            code: None,
            message: "boom".into(),
            retry_after: None,
        };
        stats.error("heartbeat", &e503);
        stats.error("complete", &e500);
        let s = stats.snapshot();
        assert_eq!((s.bad_5xx, s.unexpected_total), (1, 1));
        assert_eq!(s.unexpected[0].op, "complete");
        assert_eq!(s.unexpected[0].status, "500");
        assert_eq!(s.statuses["heartbeat"]["503"], 1);
    }

    #[test]
    fn lease_lost_is_expected_but_other_client_errors_are_flagged() {
        let stats = Stats::default();
        stats.error(
            "complete",
            &ClientError::LeaseLost {
                message: "superseded".into(),
            },
        );
        stats.error(
            "fail",
            &ClientError::Rejected {
                status: 422,
                code: Some("E_ROUTE".into()),
                message: "no".into(),
            },
        );
        let s = stats.snapshot();
        assert_eq!(s.statuses["complete"]["409"], 1);
        assert_eq!((s.unexpected_total, s.bad_5xx), (1, 0));
        assert_eq!(s.unexpected[0].status, "422");
    }

    #[test]
    fn undelivered_errors_count_under_their_last_answer() {
        let e = ClientError::Undelivered {
            attempts: 1,
            last: Box::new(ClientError::Unavailable {
                status: 503,
                code: None,
                message: String::new(),
                retry_after: None,
            }),
        };
        assert_eq!(error_status(&e), "503");
        assert!(is_failover(&e));
        let refused = ClientError::Rejected {
            status: 404,
            code: None,
            message: String::new(),
        };
        assert!(!is_failover(&refused));
    }

    #[test]
    fn reports_are_summed_field_by_field() {
        let one = Summary {
            leases: 2,
            statuses: [("lease".into(), [("200".into(), 2)].into())].into(),
            unexpected: vec![unexpected("complete")],
            ..Summary::default()
        };
        let two = Summary {
            leases: 3,
            bad_5xx: 1,
            statuses: [(
                "lease".into(),
                [("200".into(), 1), ("503".into(), 4)].into(),
            )]
            .into(),
            unexpected: vec![unexpected("fail")],
            ..Summary::default()
        };
        let mut total = Summary::default();
        total.add(one);
        total.add(two);
        assert_eq!((total.leases, total.bad_5xx), (5, 1));
        assert_eq!(total.statuses["lease"]["200"], 3);
        assert_eq!(total.statuses["lease"]["503"], 4);
        let ops: Vec<&str> = total.unexpected.iter().map(|u| u.op.as_str()).collect();
        assert_eq!(ops, ["complete", "fail"]);
        assert_eq!(total.answers(&["503", "200"]), 7);
    }

    #[test]
    fn missing_and_partial_reports_are_summed_as_what_they_hold() {
        let dir = std::env::temp_dir().join(format!("muster-sim-sum-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let written = dir.join("a.json");
        std::fs::write(
            &written,
            r#"{"completes": 4, "statuses": {"complete": {"transport": 2}}}"#,
        )
        .unwrap();
        let total = Summary::sum_reports(&[written, dir.join("never-written.json")]);
        assert_eq!(total.completes, 4);
        assert_eq!(total.answers(&["transport", "timeout"]), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn unexpected(op: &str) -> Unexpected {
        Unexpected {
            op: op.into(),
            status: "500".into(),
            code: String::new(),
            message: String::new(),
        }
    }

    #[test]
    fn the_report_file_holds_the_summary_line() {
        let path =
            std::env::temp_dir().join(format!("muster-sim-report-{}.json", std::process::id()));
        let stats = Stats::with_report(Some(path.clone()));
        stats.update(|s| s.leases = 7);
        stats.write_report();
        let back: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back["leases"], 7);
        assert_eq!(back["bad_5xx"], 0);
        std::fs::remove_file(path).unwrap();
    }
}
