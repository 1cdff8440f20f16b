//! Containers: the Docker engine, the images built on this machine (`cargo xtask images`), and
//! the Muster image's container test (`cargo xtask container-test`). No registry is reachable
//! here, so every image is built locally: a Debian base from `debootstrap`, PostgreSQL 15 on it,
//! and Muster's own image from `deploy/Dockerfile`.

use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

mod image_test;
mod images;
mod security;

pub(crate) use image_test::container_test;
pub(crate) use images::{POSTGRES_IMAGE, ensure_images, images_task};

/// The Docker CLI: `MUSTER_DOCKER`, else Debian's `docker.io` client (`/usr/bin/docker`, which
/// has BuildKit built in; a standalone client needs the buildx plugin for it), else `docker`.
pub(crate) fn docker() -> Command {
    let program = std::env::var_os("MUSTER_DOCKER").unwrap_or_else(|| {
        if std::path::Path::new("/usr/bin/docker").exists() {
            "/usr/bin/docker".into()
        } else {
            "docker".into()
        }
    });
    Command::new(program)
}

/// Whether a Docker engine answers.
pub(crate) fn engine_answers() -> bool {
    docker()
        .args(["info", "--format", "{{.ServerVersion}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The engine must answer: where Docker is expected, nothing falls back.
pub(crate) fn require_engine() -> Result<()> {
    if engine_answers() {
        return Ok(());
    }
    bail!(
        "no Docker engine answers `docker info` (start dockerd, as .ci/run does, or choose the \
         installed PostgreSQL binaries explicitly with `cargo xtask test --local-postgres`)"
    )
}

/// Runs a docker command; its trimmed stdout.
pub(crate) fn docker_out(args: &[&str]) -> Result<String> {
    let out = docker()
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("run docker {}", args.join(" ")))?;
    if !out.status.success() {
        bail!("`docker {}` failed ({})", args.join(" "), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Whether an image of that reference exists locally.
pub(crate) fn image_exists(reference: &str) -> bool {
    docker()
        .args(["image", "inspect", "--format", "{{.Id}}", reference])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
