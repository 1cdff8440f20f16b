//! Workspace hygiene checks that run with `cargo test --workspace`: the crate
//! layering (pure domain → use cases → adapters), followed through every dependency and not
//! only the direct ones, the shared lint settings, and that every test docs/ARCHITECTURE.md
//! names as the proof of an invariant exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Crates that do I/O: a pure domain crate may depend on none of them.
const IO_CRATES: [&str; 9] = [
    "tokio",
    "tokio-postgres",
    "deadpool-postgres",
    "postgres-types",
    "hyper",
    "hyper-util",
    "axum",
    "refinery",
    "reqwest",
];

/// What the use-case layer must not know about.
const APP_FORBIDDEN: [&str; 7] = [
    "tokio-postgres",
    "deadpool-postgres",
    "postgres-types",
    "refinery",
    "hyper",
    "hyper-util",
    "axum",
];

/// What the HTTP adapter must not use in its normal (non-dev) dependencies.
const HTTP_FORBIDDEN: [&str; 5] = [
    "tokio-postgres",
    "deadpool-postgres",
    "postgres-types",
    "refinery",
    "muster-pg",
];

/// What the Kubernetes adapter must not know about: it implements a port, nothing more.
const KUBE_FORBIDDEN: [&str; 6] = [
    "muster-pg",
    "muster-http",
    "tokio-postgres",
    "deadpool-postgres",
    "postgres-types",
    "axum",
];

/// What the PostgreSQL adapter must not know about.
const PG_FORBIDDEN: [&str; 4] = ["hyper", "hyper-util", "axum", "muster-http"];

/// Where each of the workspace's own crates stands: a crate may reach, through its normal
/// dependencies and theirs, only crates of a strictly lower rank. So arrows point only downward,
/// and crates of one rank (the adapters) never reach each other. A new crate must be placed here.
const RANKS: [(&str, u8); 17] = [
    ("muster-ledger", 0),
    ("muster-antispam", 0),
    ("muster-devdb", 0),
    ("muster-domain", 1),
    ("muster-app", 2),
    ("muster-model", 2),
    ("muster-otel", 2),
    ("muster-worker", 2),
    ("muster-pg", 3),
    ("muster-http", 3),
    ("muster-kube", 3),
    ("muster-ops", 3),
    ("muster", 4),
    ("muster-testkit", 5),
    ("muster-bench", 6),
    ("muster-sim", 6),
    ("xtask", 6),
];

#[derive(Debug)]
struct Package {
    name: String,
    manifest_path: PathBuf,
    /// `(dependency package name, kind)`, kind being "normal", "dev" or "build".
    dependencies: Vec<(String, String)>,
    /// Every package reached through normal dependencies, transitively (from the resolved
    /// graph), by name: what is linked into the crate, whichever crate pulled it in.
    reaches: BTreeSet<String>,
}

fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The workspace's own packages, from `cargo metadata` (with the resolved dependency graph).
fn workspace_packages() -> Vec<Package> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
    packages_of(&metadata)
}

fn str_of(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// The workspace members of a `cargo metadata` document, each with what it reaches.
fn packages_of(metadata: &Value) -> Vec<Package> {
    let empty = Vec::new();
    let all = metadata["packages"].as_array().unwrap_or(&empty);
    let names: BTreeMap<String, String> = all
        .iter()
        .map(|package| (str_of(&package["id"]), str_of(&package["name"])))
        .collect();
    // package id -> the ids of its normal (not dev, not build) dependencies
    let normal: BTreeMap<String, Vec<String>> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|node| {
            let deps = node["deps"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter(|dep| {
                    dep["dep_kinds"]
                        .as_array()
                        .unwrap_or(&empty)
                        .iter()
                        .any(|kind| kind["kind"].is_null())
                })
                .map(|dep| str_of(&dep["pkg"]))
                .collect();
            (str_of(&node["id"]), deps)
        })
        .collect();
    let members: BTreeSet<String> = metadata["workspace_members"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(str_of)
        .collect();
    all.iter()
        .filter(|package| members.contains(&str_of(&package["id"])))
        .map(|package| Package {
            name: str_of(&package["name"]),
            manifest_path: PathBuf::from(str_of(&package["manifest_path"])),
            dependencies: package["dependencies"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(|dep| {
                    let kind = dep["kind"].as_str().unwrap_or("normal").to_owned();
                    (str_of(&dep["name"]), kind)
                })
                .collect(),
            reaches: reachable(&normal, &str_of(&package["id"]))
                .iter()
                .filter_map(|id| names.get(id).cloned())
                .collect(),
        })
        .collect()
}

/// Every id reachable from `start` in `graph`, `start` excluded.
fn reachable(graph: &BTreeMap<String, Vec<String>>, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![start.to_owned()];
    while let Some(id) = todo.pop() {
        for dep in graph.get(&id).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

fn is_pure_domain_crate(name: &str) -> bool {
    name == "muster-domain"
        || name == "muster-ledger"
        || name == "muster-antispam"
        || name.starts_with("muster-domain-")
}

/// Every `package -> dependency (kind)` among `packages` matching `selects` whose dependency
/// is in `forbidden` and whose kind is accepted by `kinds`, and every forbidden package such a
/// package reaches through the normal dependencies of its normal dependencies.
fn violations(
    packages: &[Package],
    selects: impl Fn(&str) -> bool,
    forbidden: &[&str],
    kinds: impl Fn(&str) -> bool,
) -> Vec<String> {
    packages
        .iter()
        .filter(|package| selects(&package.name))
        .flat_map(|package| {
            let direct: Vec<String> = package
                .dependencies
                .iter()
                .filter(|(dep, kind)| forbidden.contains(&dep.as_str()) && kinds(kind))
                .map(|(dep, kind)| format!("{} depends on {dep} ({kind} dependency)", package.name))
                .collect();
            let indirect = package
                .reaches
                .iter()
                .filter(|dep| forbidden.contains(&dep.as_str()))
                .filter(|dep| !package.dependencies.iter().any(|(name, _)| name == *dep))
                .map(|dep| format!("{} reaches {dep} (through its dependencies)", package.name));
            direct.into_iter().chain(indirect).collect::<Vec<_>>()
        })
        .collect()
}

fn rank(name: &str) -> Option<u8> {
    RANKS
        .iter()
        .find(|(crate_name, _)| *crate_name == name)
        .map(|(_, rank)| *rank)
}

/// Every arrow from a workspace crate to a workspace crate of the same or a higher rank,
/// through normal dependencies, transitively.
fn upward_arrows(packages: &[Package]) -> Vec<String> {
    let members: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let mut found = Vec::new();
    for package in packages {
        let Some(own) = rank(&package.name) else {
            found.push(format!("{} has no rank in RANKS", package.name));
            continue;
        };
        for dep in package
            .reaches
            .iter()
            .filter(|d| members.contains(d.as_str()))
        {
            match rank(dep) {
                Some(theirs) if theirs < own => {}
                _ => found.push(format!(
                    "{} (rank {own}) reaches {dep} (rank {})",
                    package.name,
                    rank(dep).map_or("none".to_owned(), |r| r.to_string())
                )),
            }
        }
    }
    found
}

/// The dependencies of the crate `krate` (of the `kinds` selected) on `forbidden` crates.
fn violations_of(krate: &str, forbidden: &[&str], kinds: impl Fn(&str) -> bool) -> Vec<String> {
    violations(
        &workspace_packages(),
        |name| name == krate,
        forbidden,
        kinds,
    )
}

fn assert_none(rule: &str, found: Vec<String>) {
    assert!(
        found.is_empty(),
        "layering rule broken: {rule}\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn domain_crates_depend_on_no_io_crate() {
    assert_none(
        "the pure domain crates (muster-domain, muster-domain-*, muster-ledger, muster-antispam) \
         do no I/O and depend on no runtime, database or HTTP crate",
        violations(
            &workspace_packages(),
            is_pure_domain_crate,
            &IO_CRATES,
            |_| true,
        ),
    );
}

#[test]
fn app_crate_depends_on_no_database_or_http_crate() {
    assert_none(
        "muster-app talks to storage and callers only through its ports",
        violations_of("muster-app", &APP_FORBIDDEN, |_| true),
    );
}

#[test]
fn http_crate_depends_on_no_database_crate() {
    assert_none(
        "muster-http reaches PostgreSQL only through muster-app's ports (dev-dependencies excepted)",
        violations_of("muster-http", &HTTP_FORBIDDEN, |kind| kind == "normal"),
    );
}

#[test]
fn pg_crate_depends_on_no_http_crate() {
    assert_none(
        "muster-pg knows nothing about HTTP",
        violations_of("muster-pg", &PG_FORBIDDEN, |_| true),
    );
}

#[test]
fn kube_crate_depends_on_no_database_or_http_server_crate() {
    assert_none(
        "muster-kube is an adapter: it knows neither PostgreSQL nor the HTTP transport",
        violations_of("muster-kube", &KUBE_FORBIDDEN, |kind| kind == "normal"),
    );
}

#[test]
fn internal_crates_reach_only_lower_ranks_transitively() {
    assert_none(
        "a crate reaches (through any chain of normal dependencies) only crates of a lower rank",
        upward_arrows(&workspace_packages()),
    );
}

/// The rules above name crates; a renamed crate would slip through silently.
#[test]
fn layering_rules_name_existing_packages() {
    let packages = workspace_packages();
    let missing: Vec<&str> = [
        "muster-domain",
        "muster-ledger",
        "muster-app",
        "muster-pg",
        "muster-http",
        "muster-kube",
    ]
    .into_iter()
    .chain(RANKS.iter().map(|(name, _)| *name))
    .filter(|name| !packages.iter().any(|package| package.name == *name))
    .collect();
    assert!(
        missing.is_empty(),
        "the layering rules in xtask/src/tidy.rs name packages the workspace lacks: {}",
        missing.join(", ")
    );
}

/// Whether a manifest opts into the workspace lints: a `[lints]` table with
/// `workspace = true`, or a top-level `lints.workspace = true`.
fn inherits_workspace_lints(manifest: &str) -> bool {
    let mut table = String::new();
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.starts_with('[') {
            table = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if value != "true" {
            continue;
        }
        if (table == "lints" && key == "workspace")
            || (table.is_empty() && key == "lints.workspace")
        {
            return true;
        }
    }
    false
}

#[test]
fn every_package_inherits_workspace_lints() {
    let offenders: Vec<String> = workspace_packages()
        .into_iter()
        .filter(|package| {
            let manifest = std::fs::read_to_string(&package.manifest_path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", package.manifest_path.display()));
            !inherits_workspace_lints(&manifest)
        })
        .map(|package| format!("{} ({})", package.name, package.manifest_path.display()))
        .collect();
    assert!(
        offenders.is_empty(),
        "these packages lack `[lints]\\nworkspace = true` in their Cargo.toml:\n  {}",
        offenders.join("\n  ")
    );
}

#[test]
fn lints_detection_reads_the_lints_table_only() {
    assert!(inherits_workspace_lints(
        "[package]\nname = \"x\"\n\n[lints]\nworkspace = true\n"
    ));
    assert!(inherits_workspace_lints(
        "lints.workspace = true\n[package]\n"
    ));
    assert!(!inherits_workspace_lints(
        "[package]\nworkspace = true\n[lints]\n"
    ));
    assert!(!inherits_workspace_lints(
        "[lints.rust]\nworkspace = true\n"
    ));
}

#[test]
fn violations_name_the_crate_and_the_dependency() {
    let packages = vec![Package {
        name: "muster-domain".to_owned(),
        manifest_path: PathBuf::new(),
        dependencies: vec![
            ("tokio".to_owned(), "dev".to_owned()),
            ("serde".to_owned(), "normal".to_owned()),
        ],
        reaches: BTreeSet::from(["serde".to_owned()]),
    }];
    assert_eq!(
        violations(&packages, is_pure_domain_crate, &IO_CRATES, |_| true),
        vec!["muster-domain depends on tokio (dev dependency)".to_owned()]
    );
    assert!(
        violations(&packages, is_pure_domain_crate, &IO_CRATES, |k| k
            == "normal")
        .is_empty()
    );
}

fn package(name: &str, reaches: &[&str]) -> Package {
    Package {
        name: name.to_owned(),
        manifest_path: PathBuf::new(),
        dependencies: Vec::new(),
        reaches: reaches.iter().map(|dep| (*dep).to_owned()).collect(),
    }
}

#[test]
fn a_forbidden_crate_reached_through_another_dependency_is_a_violation() {
    let packages = vec![package("muster-domain", &["serde", "tokio"])];
    assert_eq!(
        violations(&packages, is_pure_domain_crate, &IO_CRATES, |_| true),
        vec!["muster-domain reaches tokio (through its dependencies)".to_owned()]
    );
}

#[test]
fn an_arrow_to_the_same_or_a_higher_rank_is_upward() {
    let packages = vec![
        package("muster-app", &["muster-domain", "muster-pg"]),
        package("muster-pg", &["muster-http"]),
        package("muster-domain", &[]),
        package("muster-http", &[]),
        package("muster-new", &[]),
    ];
    assert_eq!(
        upward_arrows(&packages),
        vec![
            "muster-app (rank 2) reaches muster-pg (rank 3)".to_owned(),
            "muster-pg (rank 3) reaches muster-http (rank 3)".to_owned(),
            "muster-new has no rank in RANKS".to_owned(),
        ]
    );
}

#[test]
fn reachable_follows_every_chain_once() {
    let graph: BTreeMap<String, Vec<String>> =
        [("a", vec!["b", "c"]), ("b", vec!["c"]), ("c", vec!["a"])]
            .into_iter()
            .map(|(id, deps)| (id.to_owned(), deps.into_iter().map(str::to_owned).collect()))
            .collect();
    assert_eq!(
        reachable(&graph, "b"),
        BTreeSet::from(["a".to_owned(), "b".to_owned(), "c".to_owned()])
    );
}

/// The tests a document names as proof: every backticked span after "Test:" or "Tests:" up to
/// the end of that sentence (a period followed by a space, a line end or the text's end).
fn named_tests(doc: &str) -> Vec<String> {
    let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut names = Vec::new();
    for (at, _) in text.match_indices("Test") {
        let rest = &text[at..];
        let Some(rest) = rest
            .strip_prefix("Tests: ")
            .or_else(|| rest.strip_prefix("Test: "))
        else {
            continue;
        };
        let sentence = rest.split(". ").next().unwrap_or(rest);
        names.extend(sentence.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    names
}

/// Every `.rs` file below `dir`, `target/`, `node_modules/` and hidden folders left out.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Whether `module::path::name` names a function `name` in a file whose path has every module
/// segment as a folder or file stem (`feed::x` is `fn x` in some `feed.rs` or `feed/…`).
fn names_an_existing_test(reference: &str, files: &[(PathBuf, String)]) -> bool {
    let mut segments: Vec<&str> = reference.split("::").collect();
    let Some(name) = segments.pop() else {
        return false;
    };
    let needle = format!("fn {name}(");
    files.iter().any(|(path, text)| {
        let parts: Vec<String> = path
            .iter()
            .map(|part| {
                let part = part.to_string_lossy();
                part.strip_suffix(".rs").unwrap_or(&part).to_owned()
            })
            .collect();
        text.contains(&needle) && segments.iter().all(|s| parts.iter().any(|p| p == s))
    })
}

#[test]
fn every_test_named_in_the_architecture_page_exists() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("read the page");
    let names = named_tests(&doc);
    assert!(
        names.len() >= 10,
        "docs/ARCHITECTURE.md names {} tests after `Test:`/`Tests:`; each invariant names its proof",
        names.len()
    );
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            Some((
                path.strip_prefix(&root).unwrap_or(&path).to_path_buf(),
                text,
            ))
        })
        .collect();
    let missing: Vec<String> = names
        .into_iter()
        .filter(|name| !names_an_existing_test(name, &files))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names tests that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn named_tests_are_the_spans_of_test_sentences_only() {
    let doc = "Uses `tokio`. Tests: `feed::a_b`, `c_d`\n and `e`. Then `f`. Test: `g::h`";
    assert_eq!(named_tests(doc), vec!["feed::a_b", "c_d", "e", "g::h"]);
}

#[test]
fn a_reference_needs_the_function_in_a_file_of_its_modules() {
    let files = vec![(
        PathBuf::from("bins/muster/tests/api/feed.rs"),
        "async fn a_late_commit() {}".to_owned(),
    )];
    assert!(names_an_existing_test("feed::a_late_commit", &files));
    assert!(names_an_existing_test("api::feed::a_late_commit", &files));
    assert!(!names_an_existing_test("ledger::a_late_commit", &files));
    assert!(!names_an_existing_test("feed::an_early_commit", &files));
}
