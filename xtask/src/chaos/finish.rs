//! The end of a scenario: every process stopped (each must stop cleanly), then its outcome
//! judged by the two judges: `muster ledger-verify` (the ledger's hash chains) and
//! `muster-sim check`, given the database and everything the run left — the faults and what
//! their probes saw, every acknowledged completion, every client's report.

use std::ffi::OsString;
use std::fs;
use std::path::Path;
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

        if left > 0 {
            println!(
                "  note: {left} spool file(s) left undelivered at the end (see the spool dirs)"
            );
        }

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

        // The outcome, judged from the database and what the run left.
        let faults: Vec<Value> = self.result.faults.iter().map(|f| f.to_json()).collect();
        let faults_path = self.dir.join("faults.json");
        fs::write(&faults_path, serde_json::to_string_pretty(&faults)?)?;
        let flag = |name: &str, path: &Path| [OsString::from(name), path.into()];
        let mut evidence = flag("--faults", &faults_path).to_vec();
        // What every fleet process was acknowledged, incarnations appending to one file.
        for sim in &self.sims {
            let acks = self.dir.join(format!("acks-{}.txt", sim.index));
            evidence.extend(flag("--acks", &acks));
        }
        // Every answer every client saw: the enqueuer's, every fleet incarnation's.
        evidence.extend(flag("--reports", enqueue_report));
        for report in self.sims.iter().flat_map(|s| &s.reports) {
            evidence.extend(flag("--reports", report));
        }
        let check = Command::new(&self.ctx.sim)
            .args([
                "check",
                "--database-url",
                &self.url,
                "--roots",
                &self.scenario.roots.to_string(),
            ])
            .args(evidence)
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
                            "{} ({} found), e.g. {}",
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
