//! Secrets, the kustomization, the namespace and the image.

use yaml_rust2::YamlLoader;

use super::*;

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

/// `kubectl kustomize` of a copy of deploy/k8s, with `env` as its `api-server.env` (`None`:
/// without that file). Answers (success, stdout, stderr). kubectl (with kustomize v5, kubectl
/// 1.27 or later) must be on PATH: the test fails, not skips, without it.
fn render(env: Option<&str>) -> (bool, String, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let copy = std::env::temp_dir().join(format!("muster-kustomize-{}-{run}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy).expect("a temporary directory");
    for entry in std::fs::read_dir(k8s_dir()).expect("deploy/k8s").flatten() {
        if entry.file_name() != "api-server.env" {
            std::fs::copy(entry.path(), copy.join(entry.file_name())).expect("copy a manifest");
        }
    }
    if let Some(text) = env {
        std::fs::write(copy.join("api-server.env"), text).expect("write api-server.env");
    }
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(&copy)
        .output()
        .unwrap_or_else(|e| {
            panic!("kubectl (1.27 or later, for kustomize v5) is needed to render deploy/k8s: {e}")
        });
    let _ = std::fs::remove_dir_all(&copy);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_kustomization_does_not_render_without_the_api_servers_address() {
    let (ok, _, stderr) = render(None);
    assert!(!ok, "rendered without api-server.env");
    assert!(stderr.contains("api-server.env"), "{stderr}");
}

#[test]
fn the_api_servers_address_is_the_network_policys_egress_rule_to_it() {
    let (ok, rendered, stderr) = render(Some("API_SERVER_CIDR=10.96.0.7/32\n"));
    assert!(ok, "{stderr}");
    let docs = YamlLoader::load_from_str(&rendered).expect("kustomize renders YAML");
    let policy = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("NetworkPolicy"))
        .expect("a NetworkPolicy");
    let rules: Vec<(Option<&str>, Vec<i64>)> = policy["spec"]["egress"]
        .as_vec()
        .expect("egress rules")
        .iter()
        .filter(|rule| !rule["to"][0]["ipBlock"].is_badvalue())
        .map(|rule| {
            let ports = rule["ports"].as_vec().cloned().unwrap_or_default();
            (
                rule["to"][0]["ipBlock"]["cidr"].as_str(),
                ports.iter().filter_map(|p| p["port"].as_i64()).collect(),
            )
        })
        .collect();
    assert_eq!(rules, [(Some("10.96.0.7/32"), vec![443, 6443])]);
}

#[test]
fn the_rendered_manifests_validate_against_the_kubernetes_schemas() {
    let (ok, rendered, stderr) = render(Some("API_SERVER_CIDR=10.96.0.7/32\n"));
    assert!(ok, "{stderr}");
    let file = std::env::temp_dir().join(format!("muster-rendered-{}.yaml", std::process::id()));
    // (one test writes this file: no other test renders to it)
    std::fs::write(&file, &rendered).expect("write the rendered manifests");
    let versions: Vec<String> = KUBERNETES_VERSIONS
        .iter()
        .map(|v| format!("{v}.0"))
        .collect();
    let path = file.display().to_string();
    let (valid, output) = run_validator(&validator_args(&[path], &versions), None);
    let _ = std::fs::remove_file(&file);
    let objects =
        rendered.matches("\nkind: ").count() + usize::from(rendered.starts_with("kind: "));
    let passed = output
        .lines()
        .filter(|l| l.contains(" passed for "))
        .count();
    assert!(
        valid && passed == objects * KUBERNETES_VERSIONS.len() && !output.contains("WARN"),
        "{passed} passed of {objects} objects x {} versions:\n{output}",
        KUBERNETES_VERSIONS.len()
    );
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
            m.assert_is(p, &Value::from(NAMESPACE), NAMESPACE);
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

/// The component spec's registry entry: "Version" and "Kind".
const SPEC_VERSION: &str = "v0.1.0-draft";
const SPEC_KIND: &str = "control-plane";

/// The `version` of the package whose manifest is `manifest` (relative to the workspace root).
fn cargo_version(manifest: &str) -> String {
    let path = workspace_root().join(manifest);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .find_map(|line| line.strip_prefix("version = "))
        .unwrap_or_else(|| panic!("{manifest}: no version"))
        .trim_matches('"')
        .to_owned()
}

#[test]
fn the_image_and_its_crates_carry_the_component_specs_version_and_the_deployment_its_kind() {
    let k = &parse_documents("kustomization.yaml", &read("kustomization.yaml"))[0];
    assert_eq!(
        k["images"][0]["newTag"], SPEC_VERSION,
        "kustomization.yaml: the image tag must be the component spec's version"
    );
    let all = manifests();
    for w in workloads(&all) {
        for (at, container) in w.containers() {
            let image = container["image"].as_str().unwrap_or_default();
            assert!(
                image.ends_with(&format!(":{SPEC_VERSION}")),
                "{}: image {image:?} must be tagged {SPEC_VERSION}",
                w.at(&at)
            );
        }
    }
    // Cargo versions are semver: the spec's version without its `v`.
    for manifest in ["bins/muster/Cargo.toml", "crates/muster-worker/Cargo.toml"] {
        assert_eq!(
            cargo_version(manifest),
            SPEC_VERSION[1..],
            "{manifest}: version"
        );
    }
    let deployment = named(&all, "Deployment", "muster");
    for labels in [deployment.get("/metadata/labels"), deployment.pod_labels()] {
        assert_eq!(
            labels["clearedstack/kind"], SPEC_KIND,
            "the Deployment and its pods must carry clearedstack/kind: {SPEC_KIND}"
        );
    }
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
    // The last stage is the one both paths share; what it stands on is a root filesystem
    // assembled by deploy/image/rootfs.sh, on scratch, either way.
    assert_eq!(
        runtime[0].1, "${ROOTFS} AS runtime",
        "deploy/Dockerfile: the last stage must be `FROM ${{ROOTFS}} AS runtime`"
    );
    for stage in ["builder", "host"] {
        assert!(
            all_instructions[..last_from]
                .iter()
                .any(|(i, args)| i == "FROM" && *args == format!("scratch AS {stage}")),
            "deploy/Dockerfile: the `{stage}` stage must be `FROM scratch AS {stage}`"
        );
    }
    assert!(
        all_instructions[..last_from]
            .iter()
            .any(|(i, args)| i == "RUN" && args.contains("sh deploy/image/rootfs.sh")),
        "deploy/Dockerfile: the builder must assemble the root filesystem with deploy/image/rootfs.sh"
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
        m.assert_is(&p, &Value::from(uid), &format!("the image's USER {uid}"));
    }
}
