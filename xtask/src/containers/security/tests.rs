use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

use super::{CONFINEMENT, Confinement};

fn manifest(name: &str) -> Yaml {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/k8s")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("read the manifest");
    YamlLoader::load_from_str(&text)
        .expect("parse the manifest")
        .remove(0)
}

/// The confinement a workload's manifest declares for its one container.
fn declared(doc: &Yaml) -> Confinement {
    let pod = &doc["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(security["privileged"].as_bool(), Some(false));
    let drops: Vec<&str> = security["capabilities"]["drop"]
        .as_vec()
        .map(|v| v.iter().filter_map(Yaml::as_str).collect())
        .unwrap_or_default();
    let limit = container["resources"]["limits"]["memory"]
        .as_str()
        .expect("a memory limit")
        .to_owned();
    Confinement {
        user: u32::try_from(
            pod["securityContext"]["runAsUser"]
                .as_i64()
                .expect("runAsUser"),
        )
        .expect("a uid"),
        group: u32::try_from(
            pod["securityContext"]["runAsGroup"]
                .as_i64()
                .expect("runAsGroup"),
        )
        .expect("a gid"),
        read_only_root: security["readOnlyRootFilesystem"].as_bool() == Some(true),
        drop_all_capabilities: drops == ["ALL"],
        no_new_privileges: security["allowPrivilegeEscalation"].as_bool() == Some(false),
        memory_limit: Box::leak(limit.into_boxed_str()),
    }
}

#[test]
fn the_container_test_runs_the_image_as_the_deployment_does() {
    assert_eq!(declared(&manifest("deployment.yaml")), CONFINEMENT);
}

#[test]
fn the_container_test_runs_migrate_as_the_job_does() {
    assert_eq!(declared(&manifest("job-migrate.yaml")), CONFINEMENT);
}

#[test]
fn the_confinement_becomes_docker_run_flags() {
    assert_eq!(
        CONFINEMENT.docker_flags(),
        [
            "--user=65532:65532",
            "--read-only",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            "--memory=128m",
            "--memory-swap=128m",
        ]
    );
}
