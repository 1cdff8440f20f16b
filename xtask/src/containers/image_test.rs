//! `cargo xtask container-test`: Muster's image, built by `deploy/Dockerfile` from the release
//! binary built here, run exactly as `deploy/k8s/deployment.yaml` runs it (numeric non-root user,
//! read-only root filesystem, every capability dropped, no-new-privileges, the manifest's memory
//! limit) next to a PostgreSQL container on a network of its own: the migrate step as the Job
//! runs it (as the schema owner), `serve` as the Deployment runs it (as the runtime role),
//! `/healthz` and `/readyz`, a lease → complete cycle, the runtime role refused a DELETE on the
//! ledger, an SSE subscriber, then SIGTERM to PID 1. Test traffic goes only to the loopback-published port of the container this
//! run started. Everything it starts is removed when it ends, however it ends.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use muster_devdb::DevTokens;

use super::security::CONFINEMENT;
use super::{POSTGRES_IMAGE, docker, docker_out, ensure_images, require_engine};
use crate::procs::{banner, cargo, step, target_dir, workspace_root};

const IMAGE: &str = "muster-local/muster:test";
/// `terminationGracePeriodSeconds` of the Deployment.
const GRACE: Duration = Duration::from_secs(30);

/// Containers and the network of one run, removed on drop.
struct Run {
    name: String,
    containers: Vec<String>,
    network: Option<String>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for c in self.containers.drain(..) {
            let _ = docker()
                .args(["rm", "-f", &c])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if let Some(n) = self.network.take() {
            let _ = docker()
                .args(["network", "rm", &n])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

pub(crate) fn container_test(_args: Vec<std::ffi::OsString>) -> Result<ExitCode> {
    require_engine()?;
    ensure_images(false)?;
    let root = workspace_root();
    let work = target_dir(&root).join("containers");
    build_image(&root, &work)?;
    report_image(&work)?;

    let mut run = Run {
        name: format!("muster-ct-{}", std::process::id()),
        containers: Vec::new(),
        network: None,
    };
    banner("a network of its own, PostgreSQL on it");
    docker_out(&["network", "create", &run.name])?;
    run.network = Some(run.name.clone());
    let db = format!("{}-logbook", run.name);
    docker_out(&[
        "run",
        "-d",
        "--name",
        &db,
        "--network",
        &run.name,
        "--network-alias",
        "logbook",
        POSTGRES_IMAGE,
    ])?;
    run.containers.push(db.clone());
    wait_for_log(
        &db,
        "database system is ready to accept connections",
        Duration::from_secs(120),
    )?;
    // The two roles of deploy/README ("Database roles"): the schema owner the Job connects as
    // and the runtime role the Deployment connects as, its login made out of band (trust
    // authentication in this test image, so the passwords are not checked).
    banner("the schema owner, its database and the runtime role's login");
    let mut roles = psql_in(&db, "postgres", "postgres").to_vec();
    roles.extend([
        "-c",
        "CREATE ROLE muster LOGIN",
        "-c",
        "CREATE DATABASE logbook OWNER muster",
        "-c",
        "CREATE ROLE muster_app LOGIN",
    ]);
    docker_out(&roles)?;
    let owner_url = "postgresql://muster@logbook:5432/logbook";
    let url = "postgresql://muster_app@logbook:5432/logbook";

    banner("muster migrate, as the Job runs it");
    let status = docker()
        .args(["run", "--rm", "--network", &run.name])
        .args(CONFINEMENT.docker_flags())
        .args([
            "-e",
            &format!("MUSTER_DATABASE_URL={owner_url}"),
            "-e",
            "MUSTER_RUNTIME_ROLE=muster_app",
            "-e",
            "MUSTER_LOG_FORMAT=json",
            IMAGE,
            "migrate",
        ])
        .status()
        .context("run the migrate container")?;
    ensure!(
        status.success(),
        "migrate in the container failed ({status})"
    );

    banner("muster serve, as the Deployment runs it");
    let tokens = DevTokens::new(["operator", "conn", "worker:trawl"]);
    let auth_dir = work.join("auth");
    std::fs::create_dir_all(&auth_dir)?;
    std::fs::write(auth_dir.join("tokens.json"), tokens.server_file() + "\n")?;
    // Readable by the container's numeric user.
    std::fs::set_permissions(
        &auth_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    std::fs::set_permissions(
        auth_dir.join("tokens.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )?;
    let server = format!("{}-muster", run.name);
    docker_out(
        &[
            &[
                "run",
                "-d",
                "--name",
                &server,
                "--network",
                &run.name,
                "-p",
                "127.0.0.1::8080",
            ][..],
            &CONFINEMENT
                .docker_flags()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            &[
                "-v",
                &format!("{}:/etc/muster-auth:ro", auth_dir.display()),
                "-e",
                &format!("MUSTER_DATABASE_URL={url}"),
                "-e",
                "MUSTER_TOKENS=/etc/muster-auth/tokens.json",
                "-e",
                "MUSTER_LEASE_TTL_MS=30000",
                "-e",
                "RUST_LOG=info",
                "-e",
                "TOKIO_WORKER_THREADS=2",
                "-e",
                "MALLOC_MMAP_THRESHOLD_=131072",
                IMAGE,
                "serve",
            ],
        ]
        .concat(),
    )?;
    run.containers.push(server.clone());
    let port = docker_out(&["port", &server, "8080/tcp"])?;
    let base = format!(
        "http://{}",
        port.lines().next().context("a published port")?
    );
    ensure!(
        base.starts_with("http://127.0.0.1:"),
        "the port must be published on loopback: {base}"
    );

    let token = |p: &str| tokens.token(p).unwrap_or_default().to_owned();
    let (operator, conn, trawl) = (token("operator"), token("conn"), token("worker:trawl"));
    wait_status(&base, "/healthz", 200, Duration::from_secs(30))?;
    wait_status(&base, "/readyz", 200, Duration::from_secs(30))?;
    println!("xtask: /healthz and /readyz answer 200");

    let sse_file = work.join("events.txt");
    let mut sse = curl_background(&base, "GET", "/v1/events", &conn, None, &sse_file)?;

    banner("a lease → complete cycle");
    let (code, _) = curl(
        &base,
        "POST",
        "/v1/items",
        &operator,
        Some(r#"{"kind":"trawl","priority":"normal","payload":{"n":1}}"#),
    )?;
    ensure!(code == 201 || code == 200, "enqueue answered {code}");
    let (code, lease) = curl(
        &base,
        "POST",
        "/v1/leases",
        &trawl,
        Some(r#"{"worker_id":"ct-1","wait_ms":0}"#),
    )?;
    ensure!(code == 200, "lease answered {code}: {lease}");
    let lease_id = json_string(&lease, "lease_id").context("a lease_id in the lease")?;
    let (code, body) = curl(
        &base,
        "POST",
        &format!("/v1/leases/{lease_id}/complete"),
        &trawl,
        Some(r#"{"result":{"ok":true}}"#),
    )?;
    ensure!(code == 200, "complete answered {code}: {body}");
    println!("xtask: enqueue, lease and complete answered");

    // What the Deployment's credentials may do to the ledger: append, not rewrite.
    let rewrite = docker()
        .args(psql_in(&db, "muster_app", "logbook"))
        .args(["-c", "DELETE FROM core.ledger"])
        .output()
        .context("run psql as the runtime role")?;
    let refusal = String::from_utf8_lossy(&rewrite.stderr);
    ensure!(
        !rewrite.status.success() && refusal.contains("permission denied for table ledger"),
        "the runtime role could delete from core.ledger ({}): {refusal}",
        rewrite.status
    );
    println!("xtask: the runtime role is refused DELETE on core.ledger");

    banner("SIGTERM to PID 1 with a long poll in flight");
    let poll_file = work.join("long-poll.txt");
    let mut poll = curl_background(
        &base,
        "POST",
        "/v1/leases",
        &trawl,
        Some(r#"{"worker_id":"ct-2","wait_ms":20000}"#),
        &poll_file,
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let peak = peak_memory(&server);
    let sent = Instant::now();
    docker_out(&["kill", "--signal", "TERM", &server])?;
    let exit = wait_exit(&server, GRACE)?;
    let took = sent.elapsed();
    let poll_status = poll.wait()?;
    let _ = sse.wait();
    let answered = std::fs::read_to_string(&poll_file).unwrap_or_default();
    let events = std::fs::read_to_string(&sse_file).unwrap_or_default();
    let last_event = events
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("event: "))
        .unwrap_or("")
        .to_owned();
    println!(
        "xtask: exit code {exit} after {:.1} s; long poll: {} ({}); last SSE event: `{last_event}`; peak memory of the container's cgroup {} (limit {})",
        took.as_secs_f64(),
        answered.trim(),
        poll_status,
        peak.map_or("unknown".into(), |b| format!(
            "{:.1} MiB",
            b as f64 / 1048576.0
        )),
        CONFINEMENT.memory_limit
    );
    let oom = docker_out(&["inspect", "--format", "{{.State.OOMKilled}}", &server])?;
    ensure!(
        oom == "false",
        "the container was killed for its memory limit"
    );
    ensure!(exit == 0, "muster exited {exit}, not 0, on SIGTERM");
    ensure!(took < GRACE, "muster took {took:?}, past the grace period");
    ensure!(
        answered.trim() == "204",
        "the long poll in flight was not answered 204 (`{}`)",
        answered.trim()
    );
    ensure!(
        last_event == "shutdown",
        "the stream's last event was `{last_event}`, not `shutdown`"
    );
    drop(run);
    println!("xtask: the container test passed");
    Ok(ExitCode::SUCCESS)
}

/// The release binary, its root filesystem (deploy/image/rootfs.sh) and the image, built by
/// deploy/Dockerfile's `host` path.
fn build_image(root: &Path, work: &Path) -> Result<()> {
    step(
        "cargo build --release -p muster",
        cargo(root).args(["build", "--release", "--locked", "-p", "muster"]),
    )?;
    let binary = target_dir(root).join("release/muster");
    let rootfs = work.join("rootfs");
    if rootfs.exists() {
        std::fs::remove_dir_all(&rootfs)?;
    }
    step(
        "deploy/image/rootfs.sh",
        Command::new("sh")
            .arg(root.join("deploy/image/rootfs.sh"))
            .arg(&binary)
            .arg(&rootfs),
    )?;
    step(
        &format!("docker build (deploy/Dockerfile, ROOTFS=host) -t {IMAGE}"),
        docker()
            .args(["build", "--quiet", "-f"])
            .arg(root.join("deploy/Dockerfile"))
            .args(["--build-arg", "ROOTFS=host", "-t", IMAGE])
            .arg(work)
            .env("DOCKER_BUILDKIT", "1"),
    )?;
    Ok(())
}

/// The image's size, user and file list.
fn report_image(work: &Path) -> Result<()> {
    let size: u64 = docker_out(&["image", "inspect", "--format", "{{.Size}}", IMAGE])?
        .parse()
        .unwrap_or(0);
    let user = docker_out(&["image", "inspect", "--format", "{{.Config.User}}", IMAGE])?;
    ensure!(
        user == format!("{}:{}", CONFINEMENT.user, CONFINEMENT.group),
        "the image's user is `{user}`"
    );
    // The image's own files: its one layer, as `docker save` writes it (a container would add
    // the files the engine injects, /etc/hosts and the like).
    let save = docker()
        .args(["save", IMAGE])
        .stdout(Stdio::piped())
        .spawn()
        .context("docker save")?;
    let layer = Command::new("tar")
        .args(["-x", "-O", "--wildcards", "*/layer.tar"])
        .stdin(save.stdout.context("save's stdout")?)
        .stdout(Stdio::piped())
        .spawn()
        .context("tar")?;
    let out = Command::new("tar")
        .arg("-t")
        .stdin(layer.stdout.context("the layer")?)
        .output()?;
    let files: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(str::to_owned)
        .collect();
    ensure!(!files.is_empty(), "no files found in the image's layer");
    std::fs::write(work.join("image-files.txt"), files.join("\n") + "\n")?;
    println!(
        "xtask: {IMAGE}: {:.1} MiB, user {user}, {} files:",
        size as f64 / 1048576.0,
        files.len()
    );
    for f in &files {
        println!("  /{f}");
    }
    Ok(())
}

fn curl_args(base: &str, method: &str, path: &str, token: &str, body: Option<&str>) -> Vec<String> {
    let mut args = vec![
        "-sS".into(),
        "-N".into(),
        "-o".into(),
        "-".into(),
        "-X".into(),
        method.into(),
        "-H".into(),
        format!("Authorization: Bearer {token}"),
    ];
    if let Some(b) = body {
        args.extend([
            "-H".into(),
            "content-type: application/json".into(),
            "--data".into(),
            b.into(),
        ]);
    }
    args.push(format!("{base}{path}"));
    args
}

/// One request: the status and the body.
fn curl(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> Result<(u16, String)> {
    let out = Command::new("curl")
        .args(curl_args(base, method, path, token, body))
        .args(["-w", "\n%{http_code}"])
        .output()
        .context("run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    Ok((code.trim().parse().unwrap_or(0), body.to_owned()))
}

/// A request left running: the body (or for `POST`, the status alone) goes to `out`.
fn curl_background(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&str>,
    out: &PathBuf,
) -> Result<Child> {
    let file = File::create(out)?;
    let mut cmd = Command::new("curl");
    cmd.args(curl_args(base, method, path, token, body));
    if method == "POST" {
        cmd.args(["-o", "/dev/null", "-w", "%{http_code}"]);
    }
    cmd.stdout(file)
        .stderr(Stdio::null())
        .spawn()
        .context("run curl")
}

fn wait_status(base: &str, path: &str, want: u16, within: Duration) -> Result<()> {
    let until = Instant::now() + within;
    loop {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{base}{path}"),
            ])
            .output()?;
        let code: u16 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        if code == want {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("{path} answered {code}, not {want}, within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `docker exec` arguments that run psql in the container `db` as `user` on `database`,
/// stopping at the first error; the statements (`-c …`) follow.
fn psql_in<'a>(db: &'a str, user: &'a str, database: &'a str) -> [&'a str; 11] {
    [
        "exec",
        db,
        "psql",
        "-h",
        "127.0.0.1",
        "-U",
        user,
        "-d",
        database,
        "-v",
        "ON_ERROR_STOP=1",
    ]
}

fn wait_for_log(container: &str, line: &str, within: Duration) -> Result<()> {
    let until = Instant::now() + within;
    loop {
        let out = docker().args(["logs", container]).output()?;
        if String::from_utf8_lossy(&out.stderr).contains(line)
            || String::from_utf8_lossy(&out.stdout).contains(line)
        {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("{container} did not log `{line}` within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The container's exit code, once it has exited (within `within`).
fn wait_exit(container: &str, within: Duration) -> Result<i64> {
    let until = Instant::now() + within + Duration::from_secs(5);
    loop {
        let state = docker_out(&[
            "inspect",
            "--format",
            "{{.State.Running}} {{.State.ExitCode}}",
            container,
        ])?;
        if let Some(code) = state.strip_prefix("false ") {
            return Ok(code.parse().unwrap_or(-1));
        }
        if Instant::now() > until {
            bail!("{container} still runs {within:?} after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The cgroup's peak memory use (cgroup v1 or v2), when the host shows it.
fn peak_memory(container: &str) -> Option<u64> {
    let id = docker_out(&["inspect", "--format", "{{.Id}}", container]).ok()?;
    [
        format!("/sys/fs/cgroup/memory/docker/{id}/memory.max_usage_in_bytes"),
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/memory.peak"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok())
}

/// A top-level string field of a JSON object (enough for the lease's `lease_id`).
fn json_string(json: &str, field: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    value.get(field)?.as_str().map(str::to_owned)
}
