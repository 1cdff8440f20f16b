//! Checks of `deploy/` that run with `cargo test --workspace`:
//!
//! - every manifest in `deploy/k8s` validates against the Kubernetes schemas, with
//!   kubernetes-validate at the version pinned in `deploy/validate-requirements.txt` (it ships
//!   the schemas, so no network is needed; `.ci/run` installs it; without it the test fails);
//! - the settings the component spec and the operator interface require (unprivileged pods,
//!   48Mi request, priority class, probes, grace period, ClusterIP, default-deny network policy,
//!   migration Job, no committed password) are read mechanically from the YAML.
//!
//! YAML is parsed here with yaml-rust2 (YAML 1.2) into `serde_json::Value`s; the schema
//! validator reads the same files with PyYAML (YAML 1.1 booleans, as Kubernetes' parser), so a
//! YAML 1.1 surprise such as an unquoted `yes` where a string belongs fails the schema check.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

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

/// A YAML node as JSON, refusing what Kubernetes manifests have no use for.
fn to_json(node: &Yaml) -> Result<Value, String> {
    Ok(match node {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(text) => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("unusable number {text:?}"))?,
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (key, value) in hash {
                let key = match key {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => return Err(format!("unsupported mapping key {other:?}")),
                };
                if map.insert(key.clone(), to_json(value)?).is_some() {
                    return Err(format!("duplicate key {key:?}"));
                }
            }
            Value::Object(map)
        }
        Yaml::Alias(_) => return Err("YAML aliases are not used in manifests".to_owned()),
        Yaml::BadValue => return Err("unparsable YAML value".to_owned()),
    })
}

/// The documents of a YAML text, empty ones dropped.
fn parse_documents(file: &str, text: &str) -> Vec<Value> {
    let docs =
        YamlLoader::load_from_str(text).unwrap_or_else(|e| panic!("{file}: not valid YAML: {e}"));
    docs.iter()
        .map(|doc| to_json(doc).unwrap_or_else(|e| panic!("{file}: {e}")))
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

// ---------------------------------------------------------------------------------------------
// Pods: unprivileged (component spec, "Security & Clean-Room Boundaries").

#[test]
fn pods_run_as_non_root() {
    let all = manifests();
    for m in workloads(&all) {
        let pod = m.pod_spec_pointer().expect("a workload");
        let p = format!("{pod}/securityContext/runAsNonRoot");
        assert_eq!(m.get(&p), &Value::Bool(true), "{} must be true", m.at(&p));
        let p = format!("{pod}/securityContext/runAsUser");
        let uid = m.get(&p);
        assert!(
            uid.is_null() || uid.as_i64().is_some_and(|u| u > 0),
            "{} must not be root, found {uid}",
            m.at(&p)
        );
        for (c, container) in m.containers() {
            let p = format!("{c}/securityContext/runAsNonRoot");
            let value = m.get(&p);
            assert!(
                value.is_null() || value == &Value::Bool(true),
                "{} (container `{}`) must not override the pod's runAsNonRoot, found {value}",
                m.at(&p),
                name_of(container)
            );
            let p = format!("{c}/securityContext/runAsUser");
            let uid = m.get(&p);
            assert!(
                uid.is_null() || uid.as_i64().is_some_and(|u| u > 0),
                "{} must not be root, found {uid}",
                m.at(&p)
            );
        }
    }
}

#[test]
fn containers_cannot_escalate_privileges() {
    let all = manifests();
    for m in workloads(&all) {
        for (c, container) in m.containers() {
            let p = format!("{c}/securityContext/allowPrivilegeEscalation");
            assert_eq!(
                m.get(&p),
                &Value::Bool(false),
                "{} (container `{}`) must be false",
                m.at(&p),
                name_of(container)
            );
            let p = format!("{c}/securityContext/privileged");
            assert_ne!(
                m.get(&p),
                &Value::Bool(true),
                "{} (container `{}`) must not be true",
                m.at(&p),
                name_of(container)
            );
        }
    }
}

#[test]
fn containers_drop_all_capabilities() {
    let all = manifests();
    for m in workloads(&all) {
        for (c, container) in m.containers() {
            let p = format!("{c}/securityContext/capabilities/drop");
            assert_eq!(
                m.get(&p),
                &serde_json::json!(["ALL"]),
                "{} (container `{}`) must be [\"ALL\"]",
                m.at(&p),
                name_of(container)
            );
            let p = format!("{c}/securityContext/capabilities/add");
            assert!(
                m.get(&p).as_array().is_none_or(Vec::is_empty),
                "{} (container `{}`) must add no capability, found {}",
                m.at(&p),
                name_of(container),
                m.get(&p)
            );
        }
    }
}

#[test]
fn containers_have_read_only_root_filesystems() {
    let all = manifests();
    for m in workloads(&all) {
        for (c, container) in m.containers() {
            let p = format!("{c}/securityContext/readOnlyRootFilesystem");
            assert_eq!(
                m.get(&p),
                &Value::Bool(true),
                "{} (container `{}`) must be true",
                m.at(&p),
                name_of(container)
            );
        }
    }
}

#[test]
fn pods_use_the_runtime_default_seccomp_profile() {
    let all = manifests();
    for m in workloads(&all) {
        let pod = m.pod_spec_pointer().expect("a workload");
        let p = format!("{pod}/securityContext/seccompProfile/type");
        assert_eq!(
            m.get(&p),
            &Value::from("RuntimeDefault"),
            "{} must be RuntimeDefault",
            m.at(&p)
        );
        for (c, _) in m.containers() {
            let p = format!("{c}/securityContext/seccompProfile/type");
            let value = m.get(&p);
            assert!(
                value.is_null() || value == "RuntimeDefault" || value == "Localhost",
                "{} must not weaken the pod's seccomp profile, found {value}",
                m.at(&p)
            );
        }
    }
}

#[test]
fn service_account_token_is_mounted_only_where_muster_calls_the_api() {
    let all = manifests();
    let deployment = the(&all, "Deployment");
    let account = the(&all, "ServiceAccount");
    let p = "/spec/template/spec/serviceAccountName";
    assert_eq!(
        deployment.get(p),
        &Value::from(account.name()),
        "{} must be the ServiceAccount of {}",
        deployment.at(p),
        account.file
    );
    let p = "/spec/template/spec/automountServiceAccountToken";
    assert_eq!(
        deployment.get(p),
        &Value::Bool(true),
        "{} must be true: Muster calls TokenReview with its token",
        deployment.at(p)
    );
    let p = "/automountServiceAccountToken";
    assert_eq!(
        account.get(p),
        &Value::Bool(false),
        "{} must be false: only pods that ask get a token",
        account.at(p)
    );
    let job = the(&all, "Job");
    let p = "/spec/template/spec/automountServiceAccountToken";
    assert_eq!(
        job.get(p),
        &Value::Bool(false),
        "{} must be false: the migration talks to Logbook only",
        job.at(p)
    );

    let binding = named(&all, "ClusterRoleBinding", "muster-auth-delegator");
    let p = "/roleRef/name";
    assert_eq!(
        binding.get(p),
        &Value::from("system:auth-delegator"),
        "{} must be system:auth-delegator (TokenReview)",
        binding.at(p)
    );
    let subject = serde_json::json!({
        "kind": "ServiceAccount", "name": account.name(), "namespace": NAMESPACE
    });
    let p = "/subjects";
    assert_eq!(
        binding.get(p),
        &Value::Array(vec![subject.clone()]),
        "{} must be exactly Muster's ServiceAccount",
        binding.at(p)
    );

    // Node names for health redaction: read-only, nodes only, bound to Muster alone.
    let role = named(&all, "ClusterRole", "muster-node-reader");
    let p = "/rules";
    assert_eq!(
        role.get(p),
        &serde_json::json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
        "{} must allow get, list and watch on nodes and nothing else",
        role.at(p)
    );
    let binding = named(&all, "ClusterRoleBinding", "muster-node-reader");
    for (p, expected) in [
        ("/roleRef/name", Value::from("muster-node-reader")),
        ("/subjects", Value::Array(vec![subject])),
    ] {
        assert_eq!(binding.get(p), &expected, "{}", binding.at(p));
    }
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

// ---------------------------------------------------------------------------------------------
// The Deployment: budget, priority, probes, shutdown.

#[test]
fn deployment_requests_48mi_of_memory() {
    let all = manifests();
    let d = the(&all, "Deployment");
    for (c, container) in d.containers() {
        let p = format!("{c}/resources/requests/memory");
        assert_eq!(
            d.get(&p),
            &Value::from("48Mi"),
            "{} (container `{}`) must be 48Mi (component spec, RAM request)",
            d.at(&p),
            name_of(container)
        );
        let p = format!("{c}/resources/limits/memory");
        assert!(
            d.get(&p).is_string(),
            "{} (container `{}`) must be set",
            d.at(&p),
            name_of(container)
        );
        let p = format!("{c}/resources/requests/cpu");
        assert!(
            d.get(&p).is_string(),
            "{} (container `{}`) must be set",
            d.at(&p),
            name_of(container)
        );
    }
}

#[test]
fn deployment_uses_the_priority_class_defined_here() {
    let all = manifests();
    let d = the(&all, "Deployment");
    let class = the(&all, "PriorityClass");
    let p = "/spec/template/spec/priorityClassName";
    assert_eq!(
        d.get(p),
        &Value::from(class.name()),
        "{} must name the PriorityClass of {}",
        d.at(p),
        class.file
    );
    let p = "/value";
    assert!(
        class.get(p).as_i64().is_some_and(|v| v > 0),
        "{} must be a high priority, found {}",
        class.at(p),
        class.get(p)
    );
    let p = "/globalDefault";
    assert_ne!(
        class.get(p),
        &Value::Bool(true),
        "{} must not be true",
        class.at(p)
    );
}

#[test]
fn deployment_probes_readyz_and_healthz() {
    let all = manifests();
    let d = the(&all, "Deployment");
    for (c, container) in d.containers() {
        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            let p = format!("{c}/{probe}/httpGet/path");
            assert_eq!(
                d.get(&p),
                &Value::from(path),
                "{} (container `{}`) must be {path}",
                d.at(&p),
                name_of(container)
            );
            let p = format!("{c}/{probe}/httpGet/port");
            let port = d.get(&p);
            let ports = container["ports"].as_array().cloned().unwrap_or_default();
            assert!(
                ports
                    .iter()
                    .any(|cp| &cp["name"] == port || &cp["containerPort"] == port),
                "{} (container `{}`) must be one of the container's ports, found {port}",
                d.at(&p),
                name_of(container)
            );
        }
    }
}

#[test]
fn deployment_grace_period_covers_the_25s_drain() {
    let all = manifests();
    let d = the(&all, "Deployment");
    let p = "/spec/template/spec/terminationGracePeriodSeconds";
    assert!(
        d.get(p).as_i64().is_some_and(|s| s >= 30),
        "{} must be at least 30 (Muster drains for up to 25 s after SIGTERM), found {}",
        d.at(p),
        d.get(p)
    );
}

#[test]
fn deployment_rolls_out_without_losing_a_serving_pod() {
    let all = manifests();
    let d = the(&all, "Deployment");
    let p = "/spec/replicas";
    assert!(
        d.get(p).as_i64().is_some_and(|r| r >= 2),
        "{} must be at least 2, found {}",
        d.at(p),
        d.get(p)
    );
    let p = "/spec/strategy/rollingUpdate/maxUnavailable";
    assert_eq!(d.get(p), &Value::from(0), "{} must be 0", d.at(p));
    let p = "/spec/selector/matchLabels";
    assert!(
        selects(d.get(p), d.pod_labels()),
        "{} must select the Deployment's own pod labels",
        d.at(p)
    );
}

/// The value of environment variable `name` of a container, when set literally.
fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn deployment_listens_on_the_service_port_on_all_interfaces() {
    // Muster's default listen address is 127.0.0.1:8080, which no other pod can reach.
    let all = manifests();
    let d = the(&all, "Deployment");
    let service = the(&all, "Service");
    let (c, container) = &d.containers()[0];
    let listen = env_value(container, "MUSTER_LISTEN").map(|e| &e["value"]);
    assert_eq!(
        listen,
        Some(&Value::from("0.0.0.0:8080")),
        "{}: env MUSTER_LISTEN must be 0.0.0.0:8080",
        d.at(c)
    );
    let target = service.get("/spec/ports/0/targetPort");
    let ports = container["ports"].as_array().cloned().unwrap_or_default();
    assert!(
        ports.iter().any(|cp| {
            cp["containerPort"] == 8080 && (&cp["name"] == target || &cp["containerPort"] == target)
        }),
        "{}: spec.ports[0].targetPort {target} must be the Deployment's container port 8080",
        service.file
    );
}

#[test]
fn database_url_comes_from_the_secret_and_no_dev_token_file_is_used() {
    let all = manifests();
    let example = all
        .iter()
        .find(|m| m.kind() == "Secret" && is_example(&m.file))
        .expect("deploy/k8s has an example Secret (*.example.yaml)");
    for m in workloads(&all) {
        for (c, container) in m.containers() {
            let entry = env_value(container, "MUSTER_DATABASE_URL")
                .unwrap_or_else(|| panic!("{}: env MUSTER_DATABASE_URL is missing", m.at(&c)));
            let secret = &entry["valueFrom"]["secretKeyRef"];
            assert_eq!(
                secret["name"],
                example.name(),
                "{}: env MUSTER_DATABASE_URL must come from Secret `{}` ({}), found {entry}",
                m.at(&c),
                example.name(),
                example.file
            );
            let key = secret["key"].as_str().unwrap_or_default();
            assert!(
                !example.get(&format!("/stringData/{key}")).is_null(),
                "{}: env MUSTER_DATABASE_URL names key {key:?}, which {} does not have",
                m.at(&c),
                example.file
            );
            assert!(
                env_value(container, "MUSTER_TOKENS").is_none(),
                "{}: env MUSTER_TOKENS is for development only, not the cluster",
                m.at(&c)
            );
        }
    }
}

#[test]
fn the_development_web_directory_is_never_served_in_the_cluster() {
    // `--dev-web-dir` / MUSTER_DEV_WEB_DIR serve static files next to the API, for local
    // development only (docs/edit-intake.md). No manifest, kustomization or the image may set
    // it in any way: not as an env entry, an argument, a ConfigMap key fed by envFrom, nor a
    // default baked into the image. The raw text is searched, comments included.
    let mut files: Vec<PathBuf> = std::fs::read_dir(k8s_dir())
        .expect("read deploy/k8s")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.push(workspace_root().join("deploy").join("Dockerfile"));
    assert!(files.len() > 2, "deploy/k8s has no files");
    for path in &files {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let lower = text.to_lowercase();
        for needle in ["dev-web-dir", "dev_web_dir", "/dev/web"] {
            assert!(
                !lower.contains(needle),
                "{} mentions `{needle}`: the development web directory is never enabled in the \
                 cluster",
                path.display()
            );
        }
    }
    let all = manifests();
    for m in workloads(&all) {
        for (c, container) in m.containers() {
            assert!(
                env_value(container, "MUSTER_DEV_WEB_DIR").is_none(),
                "{}: env MUSTER_DEV_WEB_DIR is for development only",
                m.at(&c)
            );
            for list in ["command", "args"] {
                let words = container[list].as_array().cloned().unwrap_or_default();
                assert!(
                    !words
                        .iter()
                        .any(|w| w.as_str().is_some_and(|w| w.contains("dev-web"))),
                    "{}: {list} enables the development web directory",
                    m.at(&c)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Network exposure.

#[test]
fn service_is_cluster_ip_and_selects_only_the_serving_pods() {
    let all = manifests();
    let service = the(&all, "Service");
    let p = "/spec/type";
    assert_eq!(
        service.get(p),
        &Value::from("ClusterIP"),
        "{} must be ClusterIP (component spec: cluster-private only)",
        service.at(p)
    );
    let p = "/spec/selector";
    let deployment = the(&all, "Deployment");
    assert!(
        selects(service.get(p), deployment.pod_labels()),
        "{} must select the Deployment's pods",
        service.at(p)
    );
    let job = the(&all, "Job");
    assert!(
        !selects(service.get(p), job.pod_labels()),
        "{} must not select the migration Job's pods",
        service.at(p)
    );
    let p = "/spec/ports";
    let ports = service.get(p).as_array().cloned().unwrap_or_default();
    assert!(
        ports
            .iter()
            .any(|port| port["name"] == "http" && port["port"] == 8080),
        "{} must have port 8080 named http",
        service.at(p)
    );
}

#[test]
fn network_policy_denies_by_default_in_both_directions_for_muster_pods() {
    let all = manifests();
    let policy = the(&all, "NetworkPolicy");
    let p = "/spec/podSelector/matchLabels";
    for m in workloads(&all) {
        assert!(
            selects(policy.get(p), m.pod_labels()),
            "{} must select the pods of {} ({})",
            policy.at(p),
            m.name(),
            m.file
        );
    }
    let p = "/spec/policyTypes";
    let types = policy.get(p);
    for wanted in ["Ingress", "Egress"] {
        assert!(
            types
                .as_array()
                .is_some_and(|t| t.contains(&Value::from(wanted))),
            "{} must include {wanted}, found {types}",
            policy.at(p)
        );
    }
}

#[test]
fn network_policy_admits_only_conn_shipkeeper_workers_and_monitoring_on_8080() {
    let all = manifests();
    let policy = the(&all, "NetworkPolicy");
    let rules = policy
        .get("/spec/ingress")
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!rules.is_empty(), "{}: spec.ingress is empty", policy.file);
    let mut peers = BTreeSet::new();
    for i in 0..rules.len() {
        let p = format!("/spec/ingress/{i}/ports");
        assert_eq!(
            policy.get(&p),
            &serde_json::json!([{"protocol": "TCP", "port": 8080}]),
            "{} must be TCP 8080 only",
            policy.at(&p)
        );
        let p = format!("/spec/ingress/{i}/from");
        let from = policy.get(&p).as_array().cloned().unwrap_or_default();
        assert!(
            !from.is_empty(),
            "{} must name its peers (an empty `from` admits everyone)",
            policy.at(&p)
        );
        for peer in from {
            assert!(
                peer.get("ipBlock").is_none(),
                "{}: no ipBlock peers for ingress",
                policy.at(&p)
            );
            peers.insert(peer.to_string());
        }
    }
    let expected: BTreeSet<String> = [
        serde_json::json!({"podSelector": {"matchLabels": {"app.kubernetes.io/name": "conn"}}}),
        serde_json::json!({"podSelector": {"matchLabels": {"app.kubernetes.io/name": "shipkeeper"}}}),
        serde_json::json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "cs-workers"}}}),
        serde_json::json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    assert_eq!(
        peers, expected,
        "{}: spec.ingress must admit exactly Conn, Shipkeeper and the namespaces cs-workers and monitoring",
        policy.file
    );
}

// ---------------------------------------------------------------------------------------------
// The migration Job.

#[test]
fn migration_job_runs_muster_migrate_with_the_server_image() {
    let all = manifests();
    let job = the(&all, "Job");
    let deployment = the(&all, "Deployment");
    let containers = job.containers();
    assert_eq!(containers.len(), 1, "{}: expected one container", job.file);
    let (c, container) = &containers[0];
    let p = format!("{c}/args");
    assert_eq!(
        job.get(&p),
        &serde_json::json!(["migrate"]),
        "{} must be [\"migrate\"]",
        job.at(&p)
    );
    let p = format!("{c}/command");
    assert!(
        job.get(&p).is_null(),
        "{} must be unset: the image's entrypoint is /muster",
        job.at(&p)
    );
    let p = format!("{c}/image");
    assert_eq!(
        job.get(&p),
        &deployment.containers()[0].1["image"],
        "{} must be the Deployment's image",
        job.at(&p)
    );
    assert!(
        container["ports"].is_null(),
        "{}: the Job serves nothing",
        job.at(c)
    );
    let p = "/spec/backoffLimit";
    assert!(
        job.get(p).as_i64().is_some_and(|b| (0..=3).contains(&b)),
        "{} must be small (0..=3), found {}",
        job.at(p),
        job.get(p)
    );
    let p = "/spec/ttlSecondsAfterFinished";
    assert!(
        job.get(p).as_i64().is_some_and(|t| t > 0),
        "{} must be set",
        job.at(p)
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets.

/// The password part of every `scheme://user:password@host` in `text`.
fn url_passwords(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("://") {
        let rest = &text[at + 3..];
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '/' | '?' | '#'))
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        let userinfo = authority.rsplit_once('@').map(|(userinfo, _host)| userinfo);
        if let Some((_user, password)) = userinfo.and_then(|u| u.split_once(':')) {
            found.push(password.to_owned());
        }
    }
    found
}

/// Every `(path, string)` in `value`, keys included as the path's last part.
fn strings(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::String(s) => out.push((path.to_owned(), s.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                strings(item, &format!("{path}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                strings(item, &format!("{path}/{key}"), out);
            }
        }
        _ => {}
    }
}

/// Environment variable names whose value is a credential.
fn is_secret_name(name: &str) -> bool {
    let upper = name.to_uppercase();
    [
        "PASSWORD",
        "PASSWD",
        "SECRET",
        "TOKEN",
        "DATABASE_URL",
        "PRIVATE_KEY",
    ]
    .iter()
    .any(|word| upper.contains(word))
}

#[test]
fn url_password_detection_finds_passwords_and_ignores_plain_urls() {
    assert_eq!(
        url_passwords("url: postgres://muster:s3cret@logbook:5432/db?x=1"),
        vec!["s3cret"]
    );
    assert_eq!(
        url_passwords("'postgresql://u:p%40ss@h/db'"),
        vec!["p%40ss"]
    );
    assert!(url_passwords("postgres://muster@logbook/db").is_empty());
    assert!(url_passwords("https://example.org/a:b@c").is_empty());
    assert!(is_secret_name("PGPASSWORD") && is_secret_name("MUSTER_DATABASE_URL"));
    assert!(!is_secret_name("TOKIO_WORKER_THREADS"));
}

#[test]
fn no_manifest_holds_a_literal_password() {
    // Raw text first, comments included: a URL password anywhere is the placeholder, and only
    // in an example file.
    let mut files = manifest_files();
    files.push("kustomization.yaml".to_owned());
    for file in &files {
        for password in url_passwords(&read(file)) {
            assert!(
                is_example(file) && password == PASSWORD_PLACEHOLDER,
                "{file}: a connection URL carries the password {password:?}; only \
                 *.example.yaml files may hold a URL password, and only {PASSWORD_PLACEHOLDER}"
            );
        }
    }

    for m in manifests() {
        if m.kind() == "Secret" {
            assert!(
                is_example(&m.file),
                "{}: Secret `{}` must not be committed; real Secrets are created out of band \
                 (only *.example.yaml templates live here)",
                m.file,
                m.name()
            );
            assert!(
                m.get("/data").is_null(),
                "{}: data must be empty: an example Secret uses stringData with {PASSWORD_PLACEHOLDER}",
                m.at("/data")
            );
            let data = m
                .get("/stringData")
                .as_object()
                .cloned()
                .unwrap_or_default();
            assert!(
                !data.is_empty(),
                "{}: stringData is empty",
                m.at("/stringData")
            );
            for (key, value) in data {
                assert!(
                    value
                        .as_str()
                        .is_some_and(|v| v.contains(PASSWORD_PLACEHOLDER)),
                    "{}: stringData.{key} must be a template holding {PASSWORD_PLACEHOLDER}",
                    m.file
                );
            }
        }

        let mut found = Vec::new();
        strings(&m.doc, "", &mut found);
        for (path, value) in found {
            let key = path.rsplit('/').next().unwrap_or_default().to_lowercase();
            if (key.contains("password") || key.contains("passwd")) && value != PASSWORD_PLACEHOLDER
            {
                panic!("{}: a literal password", m.at(&path));
            }
        }

        for (c, container) in m.containers() {
            for entry in container["env"].as_array().cloned().unwrap_or_default() {
                let name = entry["name"].as_str().unwrap_or_default();
                assert!(
                    !is_secret_name(name) || entry.get("value").is_none(),
                    "{}: env {name} holds a literal value; take it from a Secret (valueFrom)",
                    m.at(&c)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The kustomization, the namespace, the image.

#[test]
fn kustomization_applies_every_manifest_but_the_secret_example() {
    let text = read("kustomization.yaml");
    let docs = parse_documents("kustomization.yaml", &text);
    assert_eq!(docs.len(), 1, "kustomization.yaml: expected one document");
    let k = &docs[0];
    assert_eq!(
        k["namespace"], NAMESPACE,
        "kustomization.yaml: namespace must be {NAMESPACE}"
    );
    let listed: BTreeSet<String> = k["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| r.as_str().unwrap_or_default().to_owned())
        .collect();
    let expected: BTreeSet<String> = manifest_files()
        .into_iter()
        .filter(|f| !is_example(f))
        .collect();
    assert_eq!(
        listed, expected,
        "kustomization.yaml: resources must list every manifest of deploy/k8s except the \
         *.example.yaml templates"
    );
    // commonLabels (and labels with includeSelectors) also rewrite selectors, the
    // NetworkPolicy's peers among them: "from Conn" would become "from Muster".
    assert!(
        k.get("commonLabels").is_none(),
        "kustomization.yaml: commonLabels rewrites every selector; use labels with \
         includeSelectors: false"
    );
    for (i, entry) in k["labels"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        assert_ne!(
            entry["includeSelectors"], true,
            "kustomization.yaml: labels[{i}].includeSelectors would rewrite the NetworkPolicy's peers"
        );
    }
}

#[test]
fn namespaced_objects_are_in_the_clearedstack_namespace() {
    const CLUSTER_SCOPED: [&str; 4] = [
        "PriorityClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "Namespace",
    ];
    for m in manifests() {
        let p = "/metadata/namespace";
        if CLUSTER_SCOPED.contains(&m.kind()) {
            assert!(
                m.get(p).is_null(),
                "{} must be unset for a {}",
                m.at(p),
                m.kind()
            );
        } else {
            assert_eq!(
                m.get(p),
                &Value::from(NAMESPACE),
                "{} must be {NAMESPACE}",
                m.at(p)
            );
        }
    }
}

/// The Dockerfile's instructions, continuation lines joined and comments dropped, as
/// `(INSTRUCTION, arguments)`.
fn dockerfile_instructions() -> Vec<(String, String)> {
    let path = workspace_root().join("deploy").join("Dockerfile");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (word, rest) = current.split_once(' ').unwrap_or((current.as_str(), ""));
        out.push((word.to_uppercase(), rest.trim().to_owned()));
        current.clear();
    }
    out
}

#[test]
fn image_runs_only_the_muster_binary_as_the_pods_non_root_user() {
    let all_instructions = dockerfile_instructions();
    let last_from = all_instructions
        .iter()
        .rposition(|(i, _)| i == "FROM")
        .expect("deploy/Dockerfile: no FROM");
    let builds = all_instructions[..last_from]
        .iter()
        .any(|(i, args)| i == "RUN" && args.contains("cargo build --release --locked -p muster"));
    assert!(
        builds,
        "deploy/Dockerfile: a build stage must run `cargo build --release --locked -p muster`"
    );
    let runtime = &all_instructions[last_from..];
    assert!(
        runtime[0].1.starts_with("gcr.io/distroless/"),
        "deploy/Dockerfile: the runtime stage must be a distroless image, found {}",
        runtime[0].1
    );
    let find = |name: &str| -> Option<&str> {
        runtime
            .iter()
            .rev()
            .find(|(i, _)| i == name)
            .map(|(_, args)| args.as_str())
    };
    assert_eq!(
        find("ENTRYPOINT"),
        Some(r#"["/muster"]"#),
        "deploy/Dockerfile: ENTRYPOINT"
    );
    assert_eq!(find("CMD"), Some(r#"["serve"]"#), "deploy/Dockerfile: CMD");
    assert_eq!(find("EXPOSE"), Some("8080"), "deploy/Dockerfile: EXPOSE");
    let user = find("USER").expect("deploy/Dockerfile: the runtime stage sets no USER");
    let uid: i64 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "deploy/Dockerfile: USER {user} must be numeric, or runAsNonRoot cannot check it"
            )
        });
    assert_ne!(uid, 0, "deploy/Dockerfile: USER must not be root");

    let all = manifests();
    for m in workloads(&all) {
        let p = format!(
            "{}/securityContext/runAsUser",
            m.pod_spec_pointer().expect("a workload")
        );
        assert_eq!(
            m.get(&p),
            &Value::from(uid),
            "{} must be the image's USER {uid}",
            m.at(&p)
        );
    }
}
