//! Workspace hygiene checks that run with `cargo test --workspace`: the crate
//! layering (pure domain → use cases → adapters) and shared lint settings.

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

#[derive(Debug)]
struct Package {
    name: String,
    manifest_path: PathBuf,
    /// `(dependency package name, kind)`, kind being "normal", "dev" or "build".
    dependencies: Vec<(String, String)>,
}

fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The workspace's own packages, from `cargo metadata --no-deps`.
fn workspace_packages() -> Vec<Package> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(workspace_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
    let packages = metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages");
    packages
        .iter()
        .map(|package| Package {
            name: package["name"].as_str().unwrap_or_default().to_owned(),
            manifest_path: PathBuf::from(package["manifest_path"].as_str().unwrap_or_default()),
            dependencies: package["dependencies"]
                .as_array()
                .map(|deps| {
                    deps.iter()
                        .map(|dep| {
                            (
                                dep["name"].as_str().unwrap_or_default().to_owned(),
                                dep["kind"].as_str().unwrap_or("normal").to_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

fn is_pure_domain_crate(name: &str) -> bool {
    name == "muster-domain"
        || name == "muster-ledger"
        || name == "muster-antispam"
        || name.starts_with("muster-domain-")
}

/// Every `package -> dependency (kind)` among `packages` matching `selects`
/// whose dependency is in `forbidden` and whose kind is accepted by `kinds`.
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
            package
                .dependencies
                .iter()
                .filter(|(dep, kind)| forbidden.contains(&dep.as_str()) && kinds(kind))
                .map(|(dep, kind)| format!("{} depends on {dep} ({kind} dependency)", package.name))
                .collect::<Vec<_>>()
        })
        .collect()
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
    let packages = workspace_packages();
    assert_none(
        "the pure domain crates (muster-domain, muster-domain-*, muster-ledger, muster-antispam) \
         do no I/O and depend on no runtime, database or HTTP crate",
        violations(&packages, is_pure_domain_crate, &IO_CRATES, |_| true),
    );
}

#[test]
fn app_crate_depends_on_no_database_or_http_crate() {
    let packages = workspace_packages();
    assert_none(
        "muster-app talks to storage and callers only through its ports",
        violations(
            &packages,
            |name| name == "muster-app",
            &APP_FORBIDDEN,
            |_| true,
        ),
    );
}

#[test]
fn http_crate_depends_on_no_database_crate() {
    let packages = workspace_packages();
    assert_none(
        "muster-http reaches PostgreSQL only through muster-app's ports (dev-dependencies excepted)",
        violations(
            &packages,
            |name| name == "muster-http",
            &HTTP_FORBIDDEN,
            |kind| kind == "normal",
        ),
    );
}

#[test]
fn pg_crate_depends_on_no_http_crate() {
    let packages = workspace_packages();
    assert_none(
        "muster-pg knows nothing about HTTP",
        violations(
            &packages,
            |name| name == "muster-pg",
            &PG_FORBIDDEN,
            |_| true,
        ),
    );
}

#[test]
fn kube_crate_depends_on_no_database_or_http_server_crate() {
    let packages = workspace_packages();
    assert_none(
        "muster-kube is an adapter: it knows neither PostgreSQL nor the HTTP transport",
        violations(
            &packages,
            |name| name == "muster-kube",
            &KUBE_FORBIDDEN,
            |kind| kind == "normal",
        ),
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
