//! The docs cannot drift: every repository path, `MUSTER_…` variable, `--flag`, `/v1` route,
//! metric and live-feed event that a page names must exist in the code. Run with
//! `cargo test --workspace`; a rename without its docs fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Pages checked: every Markdown file of the project's own (not node_modules, not target).
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "deploy/README.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    for entry in std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
    {
        if entry.path().extension().is_some_and(|e| e == "md") {
            pages.push(entry.path());
        }
    }
    pages.sort();
    pages
}

fn root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// Every backticked span of `text` (code fences left out).
fn spans(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            out.extend(line.split('`').skip(1).step_by(2));
        }
    }
    out
}

/// The text of every `.rs` file of the workspace, one after the other.
fn sources(dir: &Path) -> String {
    let mut files = Vec::new();
    crate::tidy::rust_files(dir, &mut files);
    files
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap_or_default() + "\n")
        .collect()
}

fn words(text: &str, prefix: &str, ok: impl Fn(char) -> bool) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices(prefix) {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let word: String = text[at..].chars().take_while(|c| ok(*c)).collect();
        if word.len() > prefix.len() {
            found.insert(word);
        }
    }
    found
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A repository path a page names: starts with one of the project's top folders.
fn repo_path(span: &str) -> Option<&str> {
    const TOPS: [&str; 8] = [
        "crates/",
        "bins/",
        "docs/",
        "deploy/",
        "xtask/",
        "migrations/",
        "clients/",
        ".ci/",
    ];
    let path = span.split_whitespace().next()?;
    let path = path.trim_end_matches([',', '.', ':', ')']);
    let path = path.split_once(':').map_or(path, |(p, _)| p); // file.rs:123
    let path = path.split_once('#').map_or(path, |(p, _)| p); // page.md#anchor
    (TOPS.iter().any(|top| path.starts_with(top)) && !path.contains(['{', '*', '<', '…']))
        .then_some(path)
}

/// Ownership-map targets of the examples: ids that look like paths but name edit targets.
const EXAMPLE_TARGETS: [&str; 1] = ["docs/intro"];

/// Variables Kubernetes would inject for a Service named `muster` (deploy/README.md says why
/// the Deployment turns them off): named by the docs, read by nobody.
const KUBERNETES_INJECTED: [&str; 2] = ["MUSTER_PORT", "MUSTER_SERVICE_HOST"];

/// Flags of other tools that the pages quote (cargo, kubectl, pgbench, kubernetes-validate,
/// Prometheus).
const OTHER_TOOLS_FLAGS: [&str; 11] = [
    "--release",
    "--strict",
    "--features",
    "--timeout",
    "--for",
    "--ignore-not-found",
    "--from-literal",
    "--locked",
    "--workspace",
    "--all-targets",
    "--enable-feature",
];

/// Metric-like names that are not metrics: crates and the runtime role.
fn is_metric_name(name: &str, root: &Path) -> bool {
    let crate_dir = format!("muster-{}", &name["muster_".len()..].replace('_', "-"));
    !root.join("crates").join(&crate_dir).exists()
        && !root.join("bins").join(&crate_dir).exists()
        && name != "muster_app"
}

struct Code {
    text: String,
    routes: BTreeSet<String>,
}

fn code(root: &Path) -> Code {
    let text = sources(root);
    let routes_rs =
        std::fs::read_to_string(root.join("crates/muster-http/src/routes.rs")).expect("routes.rs");
    let routes = routes_rs
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|literal| literal.starts_with("/"))
        .map(normalise_route)
        .collect();
    Code { text, routes }
}

/// `{id}`, `{lease_id}`, `:id` all become `{}`; a query string is dropped.
fn normalise_route(route: &str) -> String {
    let route = route.split('?').next().unwrap_or(route);
    route
        .split('/')
        .map(|seg| {
            if seg.starts_with('{') || seg.starts_with(':') {
                "{}"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether the code defines the long flag `--name`: a clap field `name` (or `long = "name"`),
/// or the literal `"--name"` of a hand-parsed command line.
fn flag_exists(flag: &str, code: &str) -> bool {
    let name = &flag[2..];
    code.contains(&format!("\"{flag}\""))
        || code.contains(&format!("long = \"{name}\""))
        || code.contains(&format!("pub {}:", name.replace('-', "_")))
        || code.contains(&format!("    {}:", name.replace('-', "_")))
}

/// What a page names that the code lacks, as "page: what".
fn drift(root: &Path) -> Vec<String> {
    let code = code(root);
    let mut missing = Vec::new();
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).expect("read the page");
        let name = page
            .strip_prefix(root)
            .unwrap_or(&page)
            .display()
            .to_string();
        let mut report = |what: String| missing.push(format!("{name}: {what}"));
        for span in spans(&text) {
            if let Some(path) = repo_path(span)
                && !root.join(path).exists()
                && !EXAMPLE_TARGETS.contains(&path)
            {
                report(format!("no file {path}"));
            }
            for var in words(span, "MUSTER_", |c| {
                c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'
            }) {
                if !code.text.contains(&format!("\"{var}\""))
                    && !KUBERNETES_INJECTED.contains(&var.as_str())
                {
                    report(format!("no variable {var}"));
                }
            }
            if let Some(flag) = span
                .split_whitespace()
                .next()
                .filter(|w| w.starts_with("--"))
            {
                let flag = flag.trim_end_matches([',', '.']);
                let flag = flag.split_once('=').map_or(flag, |(f, _)| f);
                if flag.len() > 2
                    && !OTHER_TOOLS_FLAGS.contains(&flag)
                    && !flag_exists(flag, &code.text)
                {
                    report(format!("no flag {flag}"));
                }
            }
            let first = span.split_whitespace().find(|w| w.starts_with("/v1/"));
            if let Some(route) = first {
                let route = normalise_route(route.trim_end_matches([',', '.']));
                if !code.routes.contains(&route) {
                    report(format!("no route {route}"));
                }
            }
            for metric in words(span, "muster_", is_word_char) {
                let base = ["_total", "_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| metric.strip_suffix(s))
                    .unwrap_or(&metric);
                if is_metric_name(&metric, root) && !code.text.contains(&format!("\"{base}\"")) {
                    report(format!("no metric {metric}"));
                }
            }
        }
        for event in event_names(&text) {
            if !code.text.contains(&format!("(\"{event}\"")) {
                report(format!("no live-feed event {event}"));
            }
        }
    }
    missing
}

/// The live-feed events a page names: "`x` event(s)" and "event `x`".
fn event_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let parts: Vec<&str> = flat.split('`').collect();
    for i in (1..parts.len()).step_by(2) {
        let after = parts.get(i + 1).copied().unwrap_or_default();
        let before = parts[i - 1];
        let is_name =
            !parts[i].is_empty() && parts[i].chars().all(|c| c.is_ascii_lowercase() || c == '_');
        if is_name && (after.starts_with(" event") || before.ends_with("event ")) {
            names.insert(parts[i].to_owned());
        }
    }
    names
}

#[test]
fn every_path_variable_flag_route_metric_and_event_the_docs_name_exists() {
    let missing = drift(&root());
    assert!(
        missing.is_empty(),
        "the docs name what the code lacks:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn a_route_is_compared_without_its_parameter_names() {
    assert_eq!(
        normalise_route("/v1/leases/{lease_id}/complete"),
        "/v1/leases/{}/complete"
    );
    assert_eq!(normalise_route("/v1/items?state=failed"), "/v1/items");
}

#[test]
fn repository_paths_are_taken_from_the_projects_folders_only() {
    assert_eq!(
        repo_path("crates/muster-http/src/error.rs:12"),
        Some("crates/muster-http/src/error.rs")
    );
    assert_eq!(
        repo_path("docs/operations.md#runbook"),
        Some("docs/operations.md")
    );
    assert_eq!(repo_path("service/{mod.rs, lease.rs}"), None);
    assert_eq!(repo_path("crates/x/{a,b}.rs"), None);
    assert_eq!(repo_path("/etc/muster/ownership_map.json"), None);
}

#[test]
fn events_are_read_where_a_page_calls_them_events() {
    let names =
        event_names("a `queues` event, the `transition` events, event `reset`; `heartbeat`.");
    assert_eq!(
        names,
        ["queues", "reset", "transition"]
            .into_iter()
            .map(str::to_owned)
            .collect()
    );
}

#[test]
fn a_flag_exists_as_a_clap_field_or_a_literal() {
    let code = "pub struct S {\n    /// x\n    pub node_names: Option<PathBuf>,\n}\nmatch a { \"--short\" => {} }";
    assert!(flag_exists("--node-names", code));
    assert!(flag_exists("--short", code));
    assert!(!flag_exists("--token", code));
}
