//! The summary table of a run: one column per scenario, from what this task did and what its
//! judges (`muster-sim check`, `muster ledger-verify`) found.

use serde_json::Value;

use super::Fault;
use super::run::ScenarioResult;

/// The figures `keys` of the object `v`, as [`n`] shows each.
fn ns<const N: usize>(v: &Value, keys: [&str; N]) -> [String; N] {
    keys.map(|key| n(&v[key]))
}

fn n(v: &Value) -> String {
    match v {
        Value::Number(x) => x.to_string(),
        Value::Null => "0".into(),
        other => other.to_string(),
    }
}

/// A `Slowest` of `muster-sim check`'s figures: the duration and its fault, or `n/a`.
fn show(slowest: &Value) -> String {
    match slowest["ms"].as_f64() {
        Some(x) => format!("{x:.0} ms ({})", slowest["fault"].as_str().unwrap_or("?")),
        None => "n/a".into(),
    }
}

/// What the probes saw during each `fault` of a scenario, `·`-separated; `n/a` without one.
fn network_cell(r: &ScenarioResult, fault: Fault) -> String {
    let s = |v: Option<f64>| v.map_or_else(|| "n/a".into(), |x| format!("{:.2} s", x / 1000.0));
    let cells: Vec<String> = r
        .faults
        .iter()
        .filter(|f| f.fault == fault)
        .filter_map(|f| f.figures.as_ref())
        .map(|f| match fault {
            Fault::Failover | Fault::FrozenPrimary => s(f.ready_after_ms),
            _ => format!(
                "{} / {} / {}",
                s(f.unavailable_after_ms),
                s(Some(f.longest_answer_ms)),
                s(f.ready_after_ms)
            ),
        })
        .collect();
    if cells.is_empty() {
        "n/a".into()
    } else {
        cells.join(" · ")
    }
}

/// The summary table: one column per scenario.
pub(super) fn render(results: &[ScenarioResult]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&ScenarioResult) -> String| {
        rows.push((label.to_owned(), results.iter().map(f).collect()));
    };
    row("roots enqueued", &|r| r.roots.to_string());
    row("items (done / failed)", &|r| {
        let [items, done, failed] = ns(&r.check["stats"], ["items", "done", "failed"]);
        format!("{items} ({done} / {failed})")
    });
    row("chains done at bellbuoy / failed as planned", &|r| {
        let s = &r.check["stats"];
        format!("{} / {}", n(&s["roots_done"]), n(&s["failed"]))
    });
    row("faults injected / planned", &|r| {
        format!("{} / {}", r.faults.len(), r.faults_planned)
    });
    row("muster SIGKILLs (restarted)", &|r| {
        format!("{} ({})", r.muster_kills, r.muster_restarts)
    });
    row("replicas lost for good", &|r| r.replicas_lost.to_string());
    row("PostgreSQL restarts fast / immediate", &|r| {
        format!("{} / {}", r.pg_fast, r.pg_immediate)
    });
    row("fleet processes SIGKILLed (restarted)", &|r| {
        format!("{0} ({0})", r.sim_kills)
    });
    row("planned crashes / parks / flaky failures", &|r| {
        ns(&r.check["planned"], ["crashes", "parks", "flaky_failures"]).join(" / ")
    });
    row("retries (retryable failures in the ledger)", &|r| {
        n(&r.check["stats"]["retryable_failures"])
    });
    row("acknowledged completions found in the ledger", &|r| {
        n(&r.check["acked_completions"])
    });
    row("parks / replays (ledger)", &|r| {
        let s = &r.check["stats"];
        format!("{} / {}", n(&s["parks"]), n(&s["replays"]))
    });
    row("digest reports (items they replayed)", &|r| {
        format!(
            "{} ({})",
            n(&r.check["clients"]["digests_reported"]),
            n(&r.check["clients"]["replayed_by_digest"])
        )
    });
    row(
        "leases (never finished: crashed, killed, superseded)",
        &|r| {
            let s = &r.check["stats"];
            format!("{} ({})", n(&s["leases"]), n(&s["leases_unfinished"]))
        },
    );
    row("late results recorded", &|r| {
        n(&r.check["stats"]["late_results"])
    });
    row(
        "deliveries redelivered from a spool after a restart",
        &|r| n(&r.check["clients"]["redelivered_from_spool"]),
    );
    row("completions answered replayed:true", &|r| {
        n(&r.check["clients"]["completes_replayed"])
    });
    row("409 E_LEASE_LOST seen by workers", &|r| {
        n(&r.check["clients"]["lease_lost"])
    });
    row("503 answers / connection errors / failovers seen", &|r| {
        let [s503, no_answer] = ns(&r.check["figures"], ["answered_503", "no_answer"]);
        format!(
            "{s503} / {no_answer} / {}",
            n(&r.check["clients"]["failovers"])
        )
    });
    row("5xx other than 503 seen by clients", &|r| {
        n(&r.check["clients"]["bad_5xx"])
    });
    row("slowest recovery (repair done → next completion)", &|r| {
        show(&r.check["figures"]["slowest_recovery"])
    });
    row("longest stall (no completion anywhere)", &|r| {
        show(&r.check["figures"]["longest_stall"])
    });
    row("slowest re-lease after a fleet kill (TTL 2 s)", &|r| {
        show(&r.check["figures"]["slowest_release"])
    });
    for (fault, label) in [
        (
            Fault::CutFromLogbook,
            "replica cut from the primary: first 503 / longest answer / 200 after the heal",
        ),
        (
            Fault::OneWay,
            "one-way partition: first 503 / longest answer / 200 after the heal",
        ),
        (
            Fault::LostCommits,
            "lost COMMIT answers: first 503 / longest answer / 200 after the heal",
        ),
        (
            Fault::Failover,
            "failover: both replicas answer 200 after the promotion",
        ),
        (
            Fault::FrozenPrimary,
            "frozen primary: both replicas answer 200 after the promotion",
        ),
    ] {
        if results
            .iter()
            .any(|r| r.faults.iter().any(|f| f.fault == fault))
        {
            row(label, &|r| network_cell(r, fault));
        }
    }
    row("ledger-verify", &|r| r.ledger.clone());
    row("duration", &|r| format!("{:.1} s", r.seconds));
    row("violations", &|r| r.violations.len().to_string());

    let mut t = String::from("| | ");
    t.push_str(
        &results
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
    );
    t.push_str(" |\n|---|");
    t.push_str(&"---:|".repeat(results.len()));
    t.push('\n');
    for (label, cells) in rows {
        t.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    }
    t
}
