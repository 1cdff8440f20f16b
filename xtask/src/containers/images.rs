//! The images the tests use, built here: a Debian bookworm base from `debootstrap
//! --variant=minbase` imported with `docker import`, and PostgreSQL 15 on it
//! (xtask/images/postgres). Both are kept between runs; the PostgreSQL image is rebuilt when its
//! recipe changes (a label carries the recipe's hash).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::process::{ExitCode, Stdio};

use anyhow::{Context, Result, bail};

use super::{docker, docker_out, image_exists};
use crate::procs::{banner, target_dir, workspace_root};

/// The Debian base every local image starts from.
pub(crate) const BASE_IMAGE: &str = "muster-local/bookworm:minbase";
/// PostgreSQL 15 for the integration tests (muster-testkit's default image).
pub(crate) const POSTGRES_IMAGE: &str = "muster-local/postgres:15";
const RECIPE_LABEL: &str = "org.muster.recipe";

/// `cargo xtask images [--rebuild]`.
pub(crate) fn images_task(args: Vec<std::ffi::OsString>) -> Result<ExitCode> {
    let rebuild = args.iter().any(|a| a == "--rebuild");
    super::require_engine()?;
    ensure_images(rebuild)?;
    Ok(ExitCode::SUCCESS)
}

/// Builds whichever local image is missing or out of date.
pub(crate) fn ensure_images(rebuild: bool) -> Result<()> {
    if rebuild || !image_exists(BASE_IMAGE) {
        build_base()?;
    }
    let recipe = postgres_recipe_hash()?;
    let current = image_exists(POSTGRES_IMAGE)
        .then(|| {
            docker_out(&[
                "image",
                "inspect",
                "--format",
                &format!("{{{{index .Config.Labels \"{RECIPE_LABEL}\"}}}}"),
                POSTGRES_IMAGE,
            ])
            .ok()
        })
        .flatten();
    if rebuild || current.as_deref() != Some(recipe.as_str()) {
        banner(&format!(
            "building {POSTGRES_IMAGE} (xtask/images/postgres)"
        ));
        let dir = workspace_root().join("xtask/images/postgres");
        let status = docker()
            .args(["build", "--quiet", "--build-arg"])
            .arg(format!("BASE={BASE_IMAGE}"))
            .args([
                "--label",
                &format!("{RECIPE_LABEL}={recipe}"),
                "-t",
                POSTGRES_IMAGE,
            ])
            .arg(&dir)
            .env("DOCKER_BUILDKIT", "1")
            .stdout(Stdio::null())
            .status()
            .context("run docker build")?;
        if !status.success() {
            bail!("building {POSTGRES_IMAGE} failed ({status})");
        }
    } else {
        println!("xtask: {POSTGRES_IMAGE} is current (recipe {recipe})");
    }
    Ok(())
}

/// `debootstrap --variant=minbase bookworm` into target/, then `docker import`.
fn build_base() -> Result<()> {
    banner(&format!(
        "building {BASE_IMAGE} (debootstrap --variant=minbase bookworm)"
    ));
    if which("debootstrap").is_none() {
        bail!("debootstrap is missing (apt-get install debootstrap; .ci/run installs it)");
    }
    let mirror = std::env::var("MUSTER_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".into());
    let rootfs = target_dir(&workspace_root()).join("containers/bookworm-rootfs");
    if rootfs.exists() {
        std::fs::remove_dir_all(&rootfs).context("remove an old rootfs")?;
    }
    std::fs::create_dir_all(&rootfs)?;
    let status = std::process::Command::new("debootstrap")
        .args(["--variant=minbase", "bookworm"])
        .arg(&rootfs)
        .arg(&mirror)
        .stdout(Stdio::null())
        .status()
        .context("run debootstrap")?;
    if !status.success() {
        bail!("debootstrap failed ({status})");
    }
    let tar = std::process::Command::new("tar")
        .arg("-C")
        .arg(&rootfs)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("run tar")?;
    let status = docker()
        .args(["import", "-", BASE_IMAGE])
        .stdin(tar.stdout.context("tar's stdout")?)
        .stdout(Stdio::null())
        .status()
        .context("run docker import")?;
    std::fs::remove_dir_all(&rootfs).ok();
    if !status.success() {
        bail!("docker import failed ({status})");
    }
    Ok(())
}

/// A hash of the PostgreSQL image's recipe (its directory's files), so that a changed recipe
/// rebuilds the image. `DefaultHasher` is not stable across Rust releases: a new toolchain
/// rebuilds once, which is harmless.
fn postgres_recipe_hash() -> Result<String> {
    let dir = workspace_root().join("xtask/images/postgres");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let mut hasher = DefaultHasher::new();
    BASE_IMAGE.hash(&mut hasher);
    for file in files {
        file.file_name().hash(&mut hasher);
        std::fs::read(&file)?.hash(&mut hasher);
    }
    Ok(format!("{:016x}", hasher.finish()))
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}
