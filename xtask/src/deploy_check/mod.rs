//! Checks of `deploy/` that run with `cargo test --workspace`:
//!
//! - every manifest in `deploy/k8s` validates against the Kubernetes schemas, with
//!   kubernetes-validate at the version pinned in `deploy/validate-requirements.txt` (it ships
//!   the schemas, so no network is needed; `.ci/run` installs it; without it the test fails);
//! - the settings the component spec and the operator interface require (unprivileged pods,
//!   48Mi request, priority class, probes, grace period, ClusterIP, default-deny network policy,
//!   migration Job, no committed password) are read mechanically from the YAML.
//!
//! This module reads the manifests and runs the schema validator; `workloads.rs` checks the
//! pods, the Deployment, the network exposure and the migration Job, `packaging.rs` the
//! secrets, the kustomization, the namespace and the image.
//!
//! YAML is parsed here with yaml-rust2 (YAML 1.2) into `serde_json::Value`s
//! (`muster_testkit::yaml`); the schema validator reads the same files with PyYAML (YAML 1.1
//! booleans, as Kubernetes' parser), so a YAML 1.1 surprise such as an unquoted `yes` where a string belongs fails the schema check.

mod packaging;
mod workloads;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The Kubernetes versions the manifests must be valid for: an older release still common in
/// clusters (every field used here exists there) and the newest the pinned validator knows. The
/// target cluster's version is not written down anywhere yet.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30", "1.37"];

/// The only password allowed in a manifest: the placeholder of the example Secret.
const PASSWORD_PLACEHOLDER: &str = "REPLACE_ME";

const NAMESPACE: &str = "clearedstack";

fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

fn k8s_dir() -> PathBuf {
    workspace_root().join("deploy").join("k8s")
}

/// `*.example.yaml`: shown for reference, never applied (not in the kustomization).
fn is_example(file: &str) -> bool {
    file.ends_with(".example.yaml")
}

/// The manifest files of `deploy/k8s` (file names, sorted), the kustomization excepted: it is
/// kustomize's configuration, not a Kubernetes resource.
fn manifest_files() -> Vec<String> {
    let dir = k8s_dir();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .filter(|name| name != "kustomization.yaml")
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests found in {}", dir.display());
    files
}

fn read(file: &str) -> String {
    let path = k8s_dir().join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The documents of a YAML text, empty ones dropped.
fn parse_documents(file: &str, text: &str) -> Vec<Value> {
    muster_testkit::yaml::documents(text)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .into_iter()
        .filter(|doc| !doc.is_null())
        .collect()
}

/// One Kubernetes object and the file it came from.
#[derive(Debug)]
struct Manifest {
    file: String,
    doc: Value,
}

static NULL: Value = Value::Null;

impl Manifest {
    fn kind(&self) -> &str {
        self.doc["kind"].as_str().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.doc["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// The value at a JSON pointer (`/spec/template`), null when absent.
    fn get(&self, pointer: &str) -> &Value {
        self.doc.pointer(pointer).unwrap_or(&NULL)
    }

    /// `file: dotted.path` for messages.
    fn at(&self, pointer: &str) -> String {
        format!("{}: {}", self.file, dotted(pointer))
    }

    /// Asserts that the value at `pointer` is `expected`; a failure reads
    /// `file: dotted.path must be {must}`.
    fn assert_is(&self, pointer: &str, expected: &Value, must: &str) {
        assert_eq!(
            self.get(pointer),
            expected,
            "{} must be {must}",
            self.at(pointer)
        );
    }

    /// Asserts that the value at `pointer` is the name of `other` (one manifest referring to
    /// another); a failure reads `file: dotted.path must be the {kind} of {other's file}`.
    fn assert_names(&self, pointer: &str, other: &Manifest) {
        let must = format!("the {} of {}", other.kind(), other.file);
        self.assert_is(pointer, &Value::from(other.name()), &must);
    }

    /// JSON pointer of the pod spec, for the kinds that run pods.
    fn pod_spec_pointer(&self) -> Option<&'static str> {
        match self.kind() {
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
                Some("/spec/template/spec")
            }
            "CronJob" => Some("/spec/jobTemplate/spec/template/spec"),
            "Pod" => Some("/spec"),
            _ => None,
        }
    }

    /// `(pointer, container)` of every container and init container of the pod spec.
    fn containers(&self) -> Vec<(String, &Value)> {
        let Some(pod) = self.pod_spec_pointer() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for list in ["containers", "initContainers"] {
            if let Some(items) = self.get(&format!("{pod}/{list}")).as_array() {
                for (i, container) in items.iter().enumerate() {
                    found.push((format!("{pod}/{list}/{i}"), container));
                }
            }
        }
        found
    }

    fn pod_labels(&self) -> &Value {
        match self.kind() {
            "CronJob" => self.get("/spec/jobTemplate/spec/template/metadata/labels"),
            "Pod" => self.get("/metadata/labels"),
            _ => self.get("/spec/template/metadata/labels"),
        }
    }
}

/// A container's name, for messages.
fn name_of(container: &Value) -> &str {
    container["name"].as_str().unwrap_or("?")
}

/// `/spec/containers/0/image` → `spec.containers[0].image`.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.trim_start_matches('/').split('/') {
        if part.parse::<usize>().is_ok() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

/// Every object of every manifest file.
fn manifests() -> Vec<Manifest> {
    let mut all = Vec::new();
    for file in manifest_files() {
        for doc in parse_documents(&file, &read(&file)) {
            all.push(Manifest {
                file: file.clone(),
                doc,
            });
        }
    }
    all
}

/// The one manifest of `kind` named `name`.
fn named<'a>(all: &'a [Manifest], kind: &str, name: &str) -> &'a Manifest {
    let found: Vec<&Manifest> = all
        .iter()
        .filter(|m| m.kind() == kind && m.name() == name && !is_example(&m.file))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind} {name} in deploy/k8s"
    );
    found[0]
}

/// The one object of `kind` outside the examples.
fn the<'a>(all: &'a [Manifest], kind: &str) -> &'a Manifest {
    let found: Vec<&Manifest> = all
        .iter()
        .filter(|m| m.kind() == kind && !is_example(&m.file))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind} in deploy/k8s, found {}: {:?}",
        found.len(),
        found.iter().map(|m| &m.file).collect::<Vec<_>>()
    );
    found[0]
}

/// Objects that run pods, which must include the Deployment and the migration Job.
fn workloads(all: &[Manifest]) -> Vec<&Manifest> {
    let found: Vec<&Manifest> = all
        .iter()
        .filter(|m| m.pod_spec_pointer().is_some())
        .collect();
    for kind in ["Deployment", "Job"] {
        assert!(
            found.iter().any(|m| m.kind() == kind),
            "deploy/k8s has no {kind}"
        );
    }
    found
}

/// Whether `selector` (a `matchLabels` map) selects pods with `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    match selector.as_object() {
        Some(wanted) if !wanted.is_empty() => wanted.iter().all(|(k, v)| labels.get(k) == Some(v)),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// The schema validator.

/// The pinned validator version, from `deploy/validate-requirements.txt`.
fn pinned_validator_version() -> String {
    let path = workspace_root()
        .join("deploy")
        .join("validate-requirements.txt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let pins: Vec<&str> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("kubernetes-validate=="))
        .collect();
    assert_eq!(
        pins.len(),
        1,
        "{}: expected exactly one `kubernetes-validate==VERSION` line",
        path.display()
    );
    pins[0].trim().to_owned()
}

fn install_hint() -> String {
    "install it with `python3 -m pip install -r deploy/validate-requirements.txt` \
     (.ci/run does this before the tests)"
        .to_owned()
}

/// `python3 -m kubernetes_validate ARGS` in `deploy/k8s`, after making sure the pinned version
/// is the one installed. Returns (success, stdout + stderr).
fn run_validator(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let pinned = pinned_validator_version();
    let version = Command::new("python3")
        .args(["-m", "kubernetes_validate", "--version"])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run python3 ({e}); the manifests are checked with kubernetes-validate \
                 {pinned} under python3: install Python 3, then {}",
                install_hint()
            )
        });
    let installed = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    assert!(
        version.status.success(),
        "kubernetes-validate (the schema validator of deploy/k8s) is not installed for python3: \
         {}\n{}",
        install_hint(),
        String::from_utf8_lossy(&version.stderr).trim()
    );
    assert_eq!(
        installed,
        pinned,
        "python3 has kubernetes-validate {installed}, deploy/validate-requirements.txt pins \
         {pinned}: {}",
        install_hint()
    );

    let mut child = Command::new("python3")
        .args(["-m", "kubernetes_validate"])
        .args(args)
        .current_dir(k8s_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 -m kubernetes_validate starts");
    {
        let mut input = child.stdin.take().expect("stdin is piped");
        if let Some(text) = stdin {
            input
                .write_all(text.as_bytes())
                .expect("write the validator's input");
        }
    }
    let output = child.wait_with_output().expect("the validator finishes");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn validator_args<'a>(files: &'a [String], versions: &'a [String]) -> Vec<&'a str> {
    let mut args = vec!["--strict"];
    for version in versions {
        args.extend(["--kubernetes-version", version.as_str()]);
    }
    args.extend(files.iter().map(String::as_str));
    args
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    let files = manifest_files();
    let versions: Vec<String> = KUBERNETES_VERSIONS
        .iter()
        .map(|v| format!("{v}.0"))
        .collect();
    let (ok, output) = run_validator(&validator_args(&files, &versions), None);
    println!("{output}");

    // kubernetes-validate reports a kind it has no schema for as a WARN and still exits 0, so
    // success means: exactly one `passed` line per object and version, and nothing else.
    let mut expected = BTreeSet::new();
    for m in manifests() {
        for version in KUBERNETES_VERSIONS {
            expected.insert(format!(
                "INFO {} passed for resource {}/{} against version {version}",
                m.file,
                m.kind().to_lowercase(),
                m.name()
            ));
        }
    }
    let lines: BTreeSet<String> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let unexpected: Vec<&String> = lines.difference(&expected).collect();
    let missing: Vec<&String> = expected.difference(&lines).collect();
    assert!(
        ok && unexpected.is_empty() && missing.is_empty(),
        "deploy/k8s does not validate against the Kubernetes {KUBERNETES_VERSIONS:?} schemas \
         (kubernetes-validate --strict)\nunexpected output: {unexpected:#?}\n\
         objects not reported as passed: {missing:#?}\nfull output:\n{output}"
    );
}

#[test]
fn validator_rejects_unknown_fields_and_kinds() {
    // The negative control: strict mode must catch a misspelt field, and a kind without a
    // schema must not pass silently.
    let broken = "\
apiVersion: v1
kind: Service
metadata: {name: broken}
spec:
  tpye: ClusterIP
  ports: [{port: 8080}]
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: unknown}
";
    let version = format!("{}.0", KUBERNETES_VERSIONS[0]);
    let (ok, output) = run_validator(
        &["--strict", "--kubernetes-version", &version, "-"],
        Some(broken),
    );
    assert!(!ok, "a misspelt field passed the validator:\n{output}");
    assert!(
        output.contains("'tpye' was unexpected"),
        "the validator did not name the misspelt field:\n{output}"
    );
    assert!(
        output.contains("WARN") && output.contains("Widget"),
        "the validator did not report the unknown kind:\n{output}"
    );
}
