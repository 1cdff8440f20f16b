//! `cargo xtask bench | charts | profile`: thin orchestration of the benchmark lab, which lives
//! in `bins/muster-bench` (its `suite`, `charts` and `profile` commands). These build it in
//! release with the `charts` feature (plotters stays out of `cargo xtask test`'s build) next to
//! `muster`, and run it from the workspace root; the lab starts its own clusters and servers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

use crate::procs::{cargo, exit_code, step, target_dir, workspace_root};

/// Builds `muster` and `muster-bench` (with its charts) in release and answers muster-bench.
fn release_lab(root: &Path) -> Result<PathBuf> {
    step(
        "cargo build --release -p muster -p muster-bench --features muster-bench/charts",
        cargo(root).args([
            "build",
            "--release",
            "-p",
            "muster",
            "-p",
            "muster-bench",
            "--features",
            "muster-bench/charts",
        ]),
    )?;
    Ok(target_dir(root).join("release").join("muster-bench"))
}

/// Runs the release `muster-bench ARGS` in the workspace root.
fn run_lab(args: &[OsString]) -> Result<ExitCode> {
    let root = workspace_root();
    let lab = release_lab(&root)?;
    let status = Command::new(&lab)
        .args(args)
        .current_dir(&root)
        .status()
        .with_context(|| format!("could not run {}", lab.display()))?;
    Ok(exit_code(status))
}

/// `cargo xtask bench`: `muster-bench suite` into `target/bench/`.
pub(crate) fn bench(extra: Vec<OsString>) -> Result<ExitCode> {
    if !extra.is_empty() {
        bail!("`cargo xtask bench` takes no arguments (see docs/benchmarks.md)");
    }
    let out = target_dir(&workspace_root()).join("bench");
    run_lab(&["suite".into(), "--out".into(), out.into()])
}

/// `cargo xtask charts [BENCH [OUT]]`: from `target/bench/` into `docs/img/` by default.
pub(crate) fn charts(args: Vec<OsString>) -> Result<ExitCode> {
    if args.len() > 2 || args.iter().any(|a| a.to_string_lossy().starts_with('-')) {
        bail!("usage: cargo xtask charts [BENCH [OUT]]");
    }
    let root = workspace_root();
    let mut args = args.into_iter().map(PathBuf::from);
    let bench_dir = args
        .next()
        .unwrap_or_else(|| target_dir(&root).join("bench"));
    let out_dir = args.next().unwrap_or_else(|| root.join("docs").join("img"));
    run_lab(&["charts".into(), bench_dir.into(), out_dir.into()])
}

/// `cargo xtask profile [--workers N] [--batch N] [--items N] [--top N]`: `muster-bench
/// profile` into `target/profile/`.
pub(crate) fn profile(args: Vec<OsString>) -> Result<ExitCode> {
    let out = target_dir(&workspace_root()).join("profile");
    let mut lab: Vec<OsString> = vec!["profile".into(), "--out".into(), out.into()];
    lab.extend(args);
    run_lab(&lab)
}
