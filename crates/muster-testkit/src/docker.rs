//! PostgreSQL in a container, through testcontainers, from the locally built test image.

use std::process::{Command, Stdio};
use std::time::Duration;

use testcontainers::bollard::models::PortBinding;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{GenericImage, ImageExt};

/// The image `cargo xtask images` builds (xtask/images/postgres).
const DEFAULT_IMAGE: &str = "muster-local/postgres:15";

/// Starts this process's PostgreSQL container; its superuser URL on a loopback-published port.
pub(crate) fn start() -> Result<String, String> {
    let image =
        std::env::var("MUSTER_TEST_POSTGRES_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.into());
    let (name, tag) = image
        .rsplit_once(':')
        .ok_or_else(|| format!("image `{image}` has no tag"))?;
    let engine = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !engine {
        return Err("no Docker engine answers `docker info`".into());
    }
    let (name, tag) = (name.to_owned(), tag.to_owned());
    // The blocking runner makes its own runtime: keep it off the test's runtime thread.
    std::thread::spawn(move || {
        let container = GenericImage::new(name, tag)
            .with_exposed_port(5432.tcp())
            .with_wait_for(WaitFor::message_on_stderr(
                "database system is ready to accept connections",
            ))
            .with_startup_timeout(Duration::from_secs(120))
            .with_label("org.muster.test-pid", std::process::id().to_string())
            // Published on the loopback interface only, never on the machine's other addresses.
            .with_host_config_modifier(|config| {
                config.publish_all_ports = Some(false);
                config.port_bindings = Some(
                    [(
                        "5432/tcp".to_owned(),
                        Some(vec![PortBinding {
                            host_ip: Some("127.0.0.1".into()),
                            host_port: Some(String::new()),
                        }]),
                    )]
                    .into(),
                );
            })
            .start()
            .map_err(|e| {
                format!("start a container of `{image}` (built by `cargo xtask images`): {e}")
            })?;
        let port = container
            .get_host_port_ipv4(5432)
            .map_err(|e| format!("the container's port: {e}"))?;
        let id = container.id().to_owned();
        // The container outlives this handle (statics are not dropped); a watchdog removes it
        // once the test process is gone.
        let watchdog = format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; docker rm -f {id} >/dev/null 2>&1",
            std::process::id()
        );
        Command::new("sh")
            .args(["-c", &watchdog])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start the container's watchdog: {e}"))?;
        std::mem::forget(container);
        Ok(format!("postgresql://postgres@127.0.0.1:{port}/postgres"))
    })
    .join()
    .map_err(|_| "the container start panicked".to_owned())?
}
