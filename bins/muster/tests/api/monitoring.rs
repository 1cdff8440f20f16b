//! The alert rules and the dashboard in deploy/monitoring name only metrics a real server
//! exports: a rename breaks this test, not the pager.

use std::collections::BTreeSet;

use crate::harness::TestApp;

/// Every `muster_…` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("muster_") {
        if at > 0
            && (text.as_bytes()[at - 1].is_ascii_alphanumeric() || text.as_bytes()[at - 1] == b'_')
        {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        names.insert(name);
    }
    names
}

/// The sample names a scrape can hold, from its `# TYPE` lines (counters get `_total`,
/// histograms `_bucket`, `_sum` and `_count`), so that a labelled family nobody used yet counts.
fn exported(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// Label names a text selects or groups by: the keys inside `{…}` and the names in `by (…)` and
/// `on (…)`.
fn label_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for part in text.split('{').skip(1) {
        let inside = part.split('}').next().unwrap_or_default();
        for matcher in inside.split(',') {
            let key: String = matcher
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !key.is_empty() && matcher.contains('=') {
                names.insert(key);
            }
        }
    }
    for keyword in ["by (", "on ("] {
        for part in text.split(keyword).skip(1) {
            let inside = part.split(')').next().unwrap_or_default();
            names.extend(inside.split(',').map(|n| n.trim().to_owned()));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The label names of a scrape's samples.
fn exported_labels(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| label_names(l.split(' ').next().unwrap_or_default()))
        .collect()
}

fn deploy_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/monitoring")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn every_metric_the_rules_and_the_dashboard_name_is_exported_by_a_real_server() {
    let app = TestApp::spawn().await;
    // The request families are exported from their first answer on.
    assert_eq!(
        app.raw(hyper::Method::GET, "/healthz", None, vec![])
            .await
            .status,
        200
    );
    let exported = exported(&app.metrics().await);
    let mut used = BTreeSet::new();
    for file in [
        "muster-rules.yaml",
        "prometheusrule.yaml",
        "muster-dashboard.json",
    ] {
        used.extend(metric_names(&deploy_file(file)));
    }
    assert!(
        used.len() >= 15,
        "only {} names found: {used:?}",
        used.len()
    );
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(missing.is_empty(), "not exported by /metrics: {missing:?}");
}

#[tokio::test]
async fn every_label_the_rules_and_the_dashboard_use_is_one_muster_or_the_scrape_sets() {
    let app = TestApp::spawn().await;
    // One item queued and one answer given: the labelled families have samples. The depths
    // follow the ledger a moment later (the feed's pump counts them), so wait for them.
    app.enqueue("trawl", "normal", serde_json::json!({})).await;
    let scrape = app
        .metrics_with_line(|l| l.starts_with("muster_queue_depth{"))
        .await;
    let exported = exported_labels(&scrape);
    let mut used = BTreeSet::new();
    for file in ["muster-rules.yaml", "muster-dashboard.json"] {
        used.extend(label_names(&deploy_file(file)));
    }
    // Set by the scrape (Kubernetes service discovery), or by PromQL itself.
    for scrape in ["namespace", "instance", "job", "pod", "le"] {
        used.remove(scrape);
    }
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "labels no sample of /metrics carries: {missing:?}"
    );
}

#[tokio::test]
async fn a_replica_that_can_serve_reports_itself_ready() {
    let app = TestApp::spawn().await;
    let scrape = app.metrics().await;
    assert!(scrape.lines().any(|l| l == "muster_ready 1"), "{scrape}");
}

#[tokio::test]
async fn with_a_token_file_no_tokenreview_failure_is_counted() {
    let app = TestApp::spawn().await;
    let scrape = app.metrics().await;
    assert!(
        scrape
            .lines()
            .any(|l| l == "muster_tokenreview_failures_total 0"),
        "{scrape}"
    );
}

#[test]
fn label_names_are_read_from_selectors_and_groupings() {
    assert_eq!(
        label_names(
            "sum by (namespace, kind) (rate(x{route=~\"/v1/.+\", code=\"E\"}[5m])) unless on (kind) y"
        ),
        ["code", "kind", "namespace", "route"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    );
}

#[test]
fn names_are_read_whole_and_only_where_they_start() {
    assert_eq!(
        metric_names("rate(muster_a_total[5m]) / x_muster_b + muster_c{k=\"v\"}"),
        BTreeSet::from(["muster_a_total".to_owned(), "muster_c".to_owned()])
    );
}

#[test]
fn a_type_line_stands_for_the_sample_names_of_its_kind() {
    let names = exported("# TYPE a counter\n# TYPE b histogram\n# TYPE c gauge\nc 1\n");
    assert_eq!(
        names,
        ["a_total", "b_bucket", "b_count", "b_sum", "c"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    );
}
