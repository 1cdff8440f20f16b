//! These tests start real PostgreSQL clusters from the installed binaries.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use muster_devdb::{
    ClusterOptions, DevDbError, SUPERUSER, StopMode, TempCluster, psql, psql_query,
};

/// Runs `select 1` over TCP with psql and returns what it printed.
fn select_one(cluster: &TempCluster) -> Result<String, String> {
    query(cluster, "select 1")
}

/// Runs `sql` over TCP with psql and returns what it printed.
fn query(cluster: &TempCluster, sql: &str) -> Result<String, String> {
    psql_query(&cluster.url(SUPERUSER), sql).map_err(|e| e.to_string())
}

/// The directory holding the data directory (what `Drop` removes).
fn base_dir(cluster: &TempCluster) -> PathBuf {
    cluster
        .data_dir()
        .parent()
        .expect("data dir has a parent")
        .to_owned()
}

#[test]
fn cluster_serves_queries_survives_a_restart_and_is_removed_on_drop() {
    let mut cluster = TempCluster::start().expect("cluster starts");
    let base = base_dir(&cluster);
    assert!(cluster.is_running());
    assert_eq!(cluster.host(), "127.0.0.1");
    assert_eq!(
        cluster.url("muster"),
        format!("postgresql://postgres@127.0.0.1:{}/muster", cluster.port())
    );
    assert_eq!(select_one(&cluster).as_deref(), Ok("1"));

    let port = cluster.port();
    cluster.stop(StopMode::Fast).expect("fast stop");
    assert!(!cluster.is_running());
    assert!(
        select_one(&cluster).is_err(),
        "a stopped server answers no query"
    );
    cluster
        .stop(StopMode::Fast)
        .expect("stopping a stopped cluster is fine");

    cluster.start_again().expect("restart");
    assert_eq!(cluster.port(), port);
    assert_eq!(select_one(&cluster).as_deref(), Ok("1"));

    cluster.stop(StopMode::Immediate).expect("immediate stop");
    cluster.start_again().expect("restart after crash recovery");
    assert_eq!(select_one(&cluster).as_deref(), Ok("1"));

    drop(cluster);
    assert!(!base.exists(), "{} is removed on drop", base.display());
}

#[test]
fn durable_cluster_keeps_its_log_where_asked() {
    let log_dir =
        std::env::temp_dir().join(format!("muster-devdb-test-log-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir).expect("log dir");
    let log = log_dir.join("server.log");
    let cluster = TempCluster::start_with(ClusterOptions {
        fsync: true,
        max_connections: 20,
        log_to: Some(log.clone()),
        ..ClusterOptions::default()
    })
    .expect("cluster starts");
    assert_eq!(cluster.log_path(), log.as_path());
    assert_eq!(select_one(&cluster).as_deref(), Ok("1"));
    drop(cluster);
    assert!(log.exists(), "an explicit log file outlives the cluster");
    std::fs::remove_dir_all(&log_dir).expect("clean up the log dir");
}

#[test]
fn extra_settings_reach_the_running_server() {
    let cluster = TempCluster::start_with(ClusterOptions {
        extra_settings: vec!["work_mem = '7MB'".into()],
        ..ClusterOptions::default()
    })
    .expect("cluster starts");
    assert_eq!(query(&cluster, "show work_mem").as_deref(), Ok("7MB"));
}

fn process_alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name; a zombie is gone.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn killed_owner_leaves_no_postmaster_behind() {
    let report = std::env::temp_dir().join(format!(
        "muster-devdb-reaper-test-{}.txt",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new(env!("CARGO_BIN_EXE_muster-devdb-hold"))
        .arg(&report)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let deadline = Instant::now() + Duration::from_secs(90);
    let line = loop {
        if let Ok(line) = std::fs::read_to_string(&report) {
            break line;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("child exited ({status}) before starting a cluster");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child started no cluster in time");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::fs::remove_file(&report);
    let mut fields = line.split_whitespace();
    let pid = fields.next().expect("postmaster pid").to_owned();
    let base = PathBuf::from(fields.next().expect("cluster dir"));
    assert!(process_alive(&pid), "the child's postmaster runs");

    child.kill().expect("SIGKILL the owner");
    child.wait().expect("reap the owner");

    wait_for(
        "the postmaster to be reaped",
        Duration::from_secs(30),
        || !process_alive(&pid),
    );
    wait_for(
        "the cluster directory to be removed",
        Duration::from_secs(30),
        || !base.exists(),
    );
}

#[test]
fn databases_are_created_and_queried_with_psql() {
    let cluster = TempCluster::start().expect("cluster starts");
    let url = cluster.create_database("made_here").expect("created");
    assert_eq!(url, cluster.url("made_here"));
    psql(&url, "create table t (a int, b text)").expect("a statement runs");
    psql(&url, "insert into t values (1, 'x y'), (2, '')").expect("a statement runs");
    assert_eq!(
        psql_query(&url, "select a, b from t order by a").expect("a query runs"),
        "1\tx y\n2\t",
        "rows by line, fields by tab, the last line's empty field kept"
    );
    let error = psql(&url, "select * from missing").expect_err("no such table");
    assert!(
        matches!(&error, DevDbError::Psql { stderr, .. } if stderr.contains("missing")),
        "{error}"
    );
}
