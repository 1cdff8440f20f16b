//! Checks of deploy/monitoring, run with `cargo test --workspace`: the alert rules pass
//! `promtool check rules` and their unit tests (`promtool test rules`), the PrometheusRule holds
//! exactly the plain file's groups, every alert follows the severity policy and links to a runbook
//! entry that exists, and the dashboard is a Grafana dashboard whose panels all query something.
//! That every metric a rule or the dashboard names is one Muster exports is checked against a
//! real server's `/metrics` in the API suite (`bins/muster/tests/api/monitoring.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

fn monitoring(file: &str) -> PathBuf {
    root().join("deploy/monitoring").join(file)
}

fn yaml(file: &str) -> Yaml {
    let text = std::fs::read_to_string(monitoring(file)).expect("read the file");
    YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{file}: not valid YAML: {e}"))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{file}: empty"))
}

/// `promtool ARGS` in deploy/monitoring; promtool comes with Debian's `prometheus` package,
/// which `.ci/run` installs. Without it the check fails: it never skips.
fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(monitoring(""))
        .output()
        .expect("promtool runs (apt-get install prometheus; .ci/run installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

fn alerts() -> Vec<Yaml> {
    let rules = yaml("muster-rules.yaml");
    rules["groups"]
        .as_vec()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_vec().cloned().unwrap_or_default())
        .collect()
}

/// The GitHub-style anchors of docs/operations.md's headings.
fn runbook_anchors() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("docs/operations.md")).expect("read the page");
    text.lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| anchor(heading.trim_start_matches('#')))
        .collect()
}

/// A heading's anchor as GitHub makes it: lower case, spaces to '-', other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

#[test]
fn the_rules_file_passes_promtool_check() {
    let text = promtool(&["check", "rules", "muster-rules.yaml"]);
    assert!(text.contains("SUCCESS"), "{text}");
}

#[test]
fn every_alert_passes_its_promtool_unit_tests() {
    let text = promtool(&["test", "rules", "muster-rules.test.yaml"]);
    assert!(text.contains("SUCCESS"), "{text}");
}

#[test]
fn every_alert_has_a_unit_test() {
    let tests = std::fs::read_to_string(monitoring("muster-rules.test.yaml")).expect("read");
    let untested: Vec<String> = alerts()
        .iter()
        .filter_map(|rule| rule["alert"].as_str().map(str::to_owned))
        .filter(|name| !tests.contains(&format!("alertname: {name}\n")))
        .collect();
    assert!(untested.is_empty(), "alerts without a test: {untested:?}");
}

#[test]
fn the_prometheusrule_holds_exactly_the_rules_files_groups() {
    let plain = yaml("muster-rules.yaml");
    let operator = yaml("prometheusrule.yaml");
    assert_eq!(operator["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(operator["spec"]["groups"], plain["groups"]);
}

#[test]
fn every_alert_has_a_severity_of_the_policy_and_says_what_to_do_first() {
    let offenders: Vec<String> = alerts()
        .iter()
        .filter(|rule| {
            let severity = rule["labels"]["severity"].as_str();
            let said = |key: &str| {
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|text| !text.trim().is_empty())
            };
            !matches!(severity, Some("page" | "ticket")) || !said("summary") || !said("action")
        })
        .map(|rule| format!("{:?}", rule["alert"].as_str()))
        .collect();
    assert!(offenders.is_empty(), "alerts off the policy: {offenders:?}");
}

#[test]
fn every_alert_links_to_a_runbook_entry_that_exists() {
    let anchors = runbook_anchors();
    let broken: Vec<String> = alerts()
        .iter()
        .filter_map(|rule| {
            let link = rule["annotations"]["runbook"].as_str().unwrap_or_default();
            let anchor = link.strip_prefix("docs/operations.md#");
            match anchor {
                Some(anchor) if anchors.iter().any(|a| a == anchor) => None,
                _ => Some(format!("{:?}: {link:?}", rule["alert"].as_str())),
            }
        })
        .collect();
    assert!(
        broken.is_empty(),
        "runbook links that lead nowhere: {broken:?}"
    );
}

#[test]
fn the_dashboard_is_a_grafana_dashboard_whose_panels_all_query() {
    let text = std::fs::read_to_string(monitoring("muster-dashboard.json")).expect("read");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "muster");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let empty: Vec<&Value> = panels
        .iter()
        .filter(|panel| {
            !panel["targets"].as_array().is_some_and(|targets| {
                !targets.is_empty()
                    && targets
                        .iter()
                        .all(|t| t["expr"].as_str().is_some_and(|e| e.contains("muster_")))
            })
        })
        .collect();
    assert!(empty.is_empty(), "panels without a Muster query: {empty:?}");
}

#[test]
fn an_anchor_is_the_heading_in_lower_case_with_dashes_and_no_punctuation() {
    assert_eq!(anchor(" A kind's queue is stuck"), "a-kinds-queue-is-stuck");
    assert_eq!(
        anchor("Logbook unreachable: 503"),
        "logbook-unreachable-503"
    );
}
