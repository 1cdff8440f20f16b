//! The workloads: unprivileged pods, the Deployment, network exposure, the migration Job.

use super::*;

// ---------------------------------------------------------------------------------------------
// Pods: unprivileged (component spec, "Security & Clean-Room Boundaries").

/// Calls `check` with every container of every workload: its manifest, the container's JSON
/// pointer and its name.
fn each_container(check: impl Fn(&Manifest, &str, &str)) {
    let all = manifests();
    for m in workloads(&all) {
        for (c, container) in m.containers() {
            check(m, &c, name_of(container));
        }
    }
}

/// The `securityContext` setting `field` of the container at `c` is `expected`.
fn assert_container_sets(m: &Manifest, c: &str, name: &str, field: &str, expected: &Value) {
    let p = format!("{c}/securityContext/{field}");
    assert_eq!(
        m.get(&p),
        expected,
        "{} (container `{name}`) must be {expected}",
        m.at(&p)
    );
}

/// The user id at `p`, if set, is not root's.
fn assert_not_root(m: &Manifest, p: &str) {
    let uid = m.get(p);
    assert!(
        uid.is_null() || uid.as_i64().is_some_and(|u| u > 0),
        "{} must not be root, found {uid}",
        m.at(p)
    );
}

#[test]
fn pods_run_as_non_root() {
    let all = manifests();
    for m in workloads(&all) {
        let pod = m.pod_spec_pointer().expect("a workload");
        let p = format!("{pod}/securityContext/runAsNonRoot");
        m.assert_is(&p, &Value::Bool(true), "true");
        assert_not_root(m, &format!("{pod}/securityContext/runAsUser"));
    }
    each_container(|m, c, name| {
        let p = format!("{c}/securityContext/runAsNonRoot");
        let value = m.get(&p);
        assert!(
            value.is_null() || value == &Value::Bool(true),
            "{} (container `{name}`) must not override the pod's runAsNonRoot, found {value}",
            m.at(&p)
        );
        assert_not_root(m, &format!("{c}/securityContext/runAsUser"));
    });
}

#[test]
fn containers_cannot_escalate_privileges() {
    each_container(|m, c, name| {
        assert_container_sets(m, c, name, "allowPrivilegeEscalation", &Value::Bool(false));
        let p = format!("{c}/securityContext/privileged");
        assert_ne!(
            m.get(&p),
            &Value::Bool(true),
            "{} (container `{name}`) must not be true",
            m.at(&p)
        );
    });
}

#[test]
fn containers_drop_all_capabilities() {
    each_container(|m, c, name| {
        assert_container_sets(m, c, name, "capabilities/drop", &serde_json::json!(["ALL"]));
        let p = format!("{c}/securityContext/capabilities/add");
        assert!(
            m.get(&p).as_array().is_none_or(Vec::is_empty),
            "{} (container `{name}`) must add no capability, found {}",
            m.at(&p),
            m.get(&p)
        );
    });
}

#[test]
fn containers_have_read_only_root_filesystems() {
    each_container(|m, c, name| {
        assert_container_sets(m, c, name, "readOnlyRootFilesystem", &Value::Bool(true));
    });
}

#[test]
fn pods_use_the_runtime_default_seccomp_profile() {
    let all = manifests();
    for m in workloads(&all) {
        let pod = m.pod_spec_pointer().expect("a workload");
        let p = format!("{pod}/securityContext/seccompProfile/type");
        m.assert_is(&p, &Value::from("RuntimeDefault"), "RuntimeDefault");
    }
    each_container(|m, c, _| {
        let p = format!("{c}/securityContext/seccompProfile/type");
        let value = m.get(&p);
        assert!(
            value.is_null() || value == "RuntimeDefault" || value == "Localhost",
            "{} must not weaken the pod's seccomp profile, found {value}",
            m.at(&p)
        );
    });
}

#[test]
fn service_account_token_is_mounted_only_where_muster_calls_the_api() {
    let all = manifests();
    let deployment = the(&all, "Deployment");
    let account = the(&all, "ServiceAccount");
    deployment.assert_names("/spec/template/spec/serviceAccountName", account);
    let p = "/spec/template/spec/automountServiceAccountToken";
    deployment.assert_is(
        p,
        &Value::Bool(true),
        "true: Muster calls TokenReview with its token",
    );
    let p = "/automountServiceAccountToken";
    account.assert_is(
        p,
        &Value::Bool(false),
        "false: only pods that ask get a token",
    );
    let job = the(&all, "Job");
    let p = "/spec/template/spec/automountServiceAccountToken";
    job.assert_is(
        p,
        &Value::Bool(false),
        "false: the migration talks to Logbook only",
    );

    let binding = named(&all, "ClusterRoleBinding", "muster-auth-delegator");
    let p = "/roleRef/name";
    binding.assert_is(
        p,
        &Value::from("system:auth-delegator"),
        "system:auth-delegator (TokenReview)",
    );
    let subject = serde_json::json!({
        "kind": "ServiceAccount", "name": account.name(), "namespace": NAMESPACE
    });
    let p = "/subjects";
    binding.assert_is(
        p,
        &Value::Array(vec![subject.clone()]),
        "exactly Muster's ServiceAccount",
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
    d.assert_names("/spec/template/spec/priorityClassName", class);
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
    let examples: Vec<_> = all
        .iter()
        .filter(|m| m.kind() == "Secret" && is_example(&m.file))
        .collect();
    assert!(
        !examples.is_empty(),
        "deploy/k8s has example Secrets (*.example.yaml)"
    );
    for m in workloads(&all) {
        // The migration Job connects as the schema owner, everything else as the runtime role.
        let wanted = if m.kind() == "Job" {
            "muster-database-owner"
        } else {
            "muster-database"
        };
        let example = examples
            .iter()
            .find(|e| e.name() == wanted)
            .unwrap_or_else(|| panic!("no example Secret `{wanted}` in deploy/k8s"));
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
            let url = example.get(&format!("/stringData/{key}"));
            assert!(
                !url.is_null(),
                "{}: env MUSTER_DATABASE_URL names key {key:?}, which {} does not have",
                m.at(&c),
                example.file
            );
            assert!(
                url.as_str()
                    .unwrap_or_default()
                    .contains("sslmode=verify-full"),
                "{}: the example URL must check Logbook's certificate (sslmode=verify-full)",
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
    service.assert_is(
        p,
        &Value::from("ClusterIP"),
        "ClusterIP (component spec: cluster-private only)",
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
        policy.assert_is(
            &p,
            &serde_json::json!([{"protocol": "TCP", "port": 8080}]),
            "TCP 8080 only",
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
    job.assert_is(&p, &serde_json::json!(["migrate"]), "[\"migrate\"]");
    let p = format!("{c}/command");
    assert!(
        job.get(&p).is_null(),
        "{} must be unset: the image's entrypoint is /muster",
        job.at(&p)
    );
    let p = format!("{c}/image");
    job.assert_is(
        &p,
        &deployment.containers()[0].1["image"],
        "the Deployment's image",
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
