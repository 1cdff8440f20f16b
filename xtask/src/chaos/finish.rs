//! The end of a scenario: every process stopped, then its outcome checked — what the clients
//! saw, the ledger's hash chains (`muster ledger-verify`) and the items and leases in the
//! database (`muster-sim check`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::procs::Proc;
use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::run::Run;

impl Run<'_> {
    /// Stops everything and checks the outcome.
    pub(super) fn finish(&mut self, mut enqueuer: Proc, enqueue_report: &Path) -> Result<()> {
        if enqueuer.terminate(Duration::from_secs(5)).is_none() {
            self.result
                .violations
                .push("muster-sim enqueue did not finish".into());
        }
        // Give deliveries still retrying a moment to reach an answer.
        let until = Instant::now() + Duration::from_secs(5);
        while spool_files(&self.dir) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
        let left = spool_files(&self.dir);
        for sim in &mut self.sims {
            if let Some(mut proc) = sim.proc.take() {
                match proc.terminate(Duration::from_secs(15)) {
                    Some(status) if status.success() => {}
                    Some(status) => self.result.violations.push(format!(
                        "fleet process {} exited with {status} on SIGTERM",
                        sim.index
                    )),
                    None => self.result.violations.push(format!(
                        "fleet process {} did not stop within 15 s of SIGTERM",
                        sim.index
                    )),
                }
            }
        }
        for (i, replica) in self.replicas.iter_mut().enumerate() {
            if let Some(mut proc) = replica.proc.take() {
                match proc.terminate(Duration::from_secs(30)) {
                    Some(status) if status.success() => {}
                    Some(status) => self.result.violations.push(format!(
                        "muster replica {i} exited with {status} on SIGTERM"
                    )),
                    None => self.result.violations.push(format!(
                        "muster replica {i} did not stop within 30 s of SIGTERM"
                    )),
                }
            }
        }

        // Every answer every client saw.
        let mut reports = vec![enqueue_report.to_owned()];
        reports.extend(self.sims.iter().flat_map(|s| s.reports.iter().cloned()));
        let clients = merge_reports(&reports);
        let bad = clients["bad_5xx"].as_u64().unwrap_or(0);
        if bad > 0 {
            self.result.violations.push(format!(
                "clients saw {bad} 5xx answer(s) other than 503: {}",
                clients["unexpected"]
            ));
        }
        let unexpected = clients["unexpected_total"].as_u64().unwrap_or(0);
        if unexpected > bad {
            self.result.violations.push(format!(
                "clients saw {} answer(s) outside the contract's expectations (4xx other than \
                 409 E_LEASE_LOST, bad bodies): {}",
                unexpected - bad,
                clients["unexpected"]
            ));
        }
        // The lost COMMIT answers exist to make commits whose outcome the replica never
        // learned; their deliveries come out right only as replays.
        if self.scenario.faults.contains(&super::Fault::LostCommits)
            && clients["completes_replayed"].as_u64().unwrap_or(0) == 0
        {
            self.result.violations.push(
                "the lost COMMIT answers produced no completion answered replayed:true: the \
                 unknown-outcome case was not exercised"
                    .into(),
            );
        }
        if left > 0 {
            println!(
                "  note: {left} spool file(s) left undelivered at the end (see the spool dirs)"
            );
        }
        self.result.clients = clients;

        // The ledger's hash chains.
        let verify = Command::new(&self.ctx.muster)
            .args([
                "ledger-verify",
                "--database-url",
                &self.url,
                "--log-format",
                "pretty",
            ])
            .output()
            .context("muster ledger-verify")?;
        self.result.ledger = String::from_utf8_lossy(&verify.stdout).trim().to_owned();
        if !verify.status.success() {
            self.result.violations.push(format!(
                "muster ledger-verify failed: {}",
                String::from_utf8_lossy(&verify.stderr).trim()
            ));
        }

        // The outcome, from the database itself.
        let faults: Vec<Value> = self
            .result
            .faults
            .iter()
            .map(|f| {
                let probes = f.figures.as_ref().map(|p| {
                    json!({"probed": p.probed, "unavailable_after_ms": p.unavailable_after_ms,
                           "longest_answer_ms": p.longest_answer_ms,
                           "answered_200": p.answered_200, "answered_503": p.answered_503,
                           "ready_after_ms": p.ready_after_ms})
                });
                json!({"name": f.name, "start_ms": f.start_ms, "end_ms": f.end_ms,
                       "worker_prefix": f.worker_prefix, "probes": probes})
            })
            .collect();
        let faults_path = self.dir.join("faults.json");
        fs::write(&faults_path, serde_json::to_string_pretty(&faults)?)?;
        let check = Command::new(&self.ctx.sim)
            .args([
                "check",
                "--database-url",
                &self.url,
                "--roots",
                &self.scenario.roots.to_string(),
            ])
            .arg("--faults")
            .arg(&faults_path)
            // What every fleet process was acknowledged, incarnations appending to one file.
            .args(self.sims.iter().flat_map(|sim| {
                [
                    "--acks".into(),
                    self.dir.join(format!("acks-{}.txt", sim.index)),
                ]
                .map(std::ffi::OsString::from)
            }))
            .output()
            .context("muster-sim check")?;
        fs::write(self.dir.join("check.json"), &check.stdout)?;
        let report: Value = serde_json::from_slice(&check.stdout).unwrap_or_else(
            |_| json!({"ok": false, "error": String::from_utf8_lossy(&check.stderr).trim()}),
        );
        if report["ok"] != true {
            match report["violations"].as_array() {
                Some(list) if !list.is_empty() => {
                    for v in list {
                        self.result.violations.push(format!(
                            "{} ({} rows), e.g. {}",
                            v["rule"].as_str().unwrap_or("?"),
                            v["count"],
                            v["samples"]
                        ));
                    }
                }
                _ => self
                    .result
                    .violations
                    .push(format!("muster-sim check failed: {}", report["error"])),
            }
        }
        self.result.check = report;
        Ok(())
    }
}

/// Spool files (pending deliveries) under a scenario's spool directories.
fn spool_files(dir: &Path) -> usize {
    fn count(p: &Path) -> usize {
        let Ok(entries) = fs::read_dir(p) else {
            return 0;
        };
        entries
            .filter_map(Result::ok)
            .map(|e| {
                let path = e.path();
                if path.is_dir() {
                    count(&path)
                } else {
                    usize::from(path.extension().is_some_and(|x| x == "json"))
                }
            })
            .sum()
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("spool-"))
        .map(|e| count(&e.path()))
        .sum()
}

/// Sums the JSON summaries of every client process (numbers added, status maps merged,
/// `unexpected` lists concatenated). A missing report (a process killed before its first
/// second) counts as empty.
fn merge_reports(paths: &[PathBuf]) -> Value {
    let mut total = json!({});
    for path in paths {
        let Ok(bytes) = fs::read(path) else { continue };
        let Ok(report) = serde_json::from_slice::<Value>(&bytes) else {
            continue;
        };
        merge(&mut total, &report);
    }
    total
}

pub(super) fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => a.extend(b.iter().cloned()),
        (a @ Value::Number(_), Value::Number(b)) => {
            let sum = a.as_u64().unwrap_or(0) + b.as_u64().unwrap_or(0);
            *a = json!(sum);
        }
        _ => {}
    }
}
