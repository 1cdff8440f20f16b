//! The process helpers of local runs: a child process stopped on every way out, and a server's
//! port waited for until it answers 200.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use muster_devdb::{DevDbError, Probe, Proc, free_port, wait_for_200, wait_healthy};

fn sleeper() -> Proc {
    Proc::new(
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep"),
    )
}

fn running(pid: u32) -> bool {
    // A zombie still has a /proc entry; `Proc` reaps what it stops, so the entry goes away.
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_process_is_killed_when_dropped() {
    let proc = sleeper();
    let pid = proc.pid();
    assert!(running(pid));
    drop(proc);
    assert!(!running(pid), "pid {pid} still runs after the drop");
}

#[test]
fn terminate_sends_sigterm_and_answers_how_it_ended() {
    let mut proc = sleeper();
    let status = proc
        .terminate(Duration::from_secs(5))
        .expect("sleep ends on SIGTERM, within the grace");
    assert!(!status.success());
    assert!(proc.exited().is_some());
}

#[test]
fn waiting_for_a_port_fails_once_the_server_has_exited() {
    let mut proc = Proc::new(Command::new("true").spawn().expect("spawn true"));
    let port = free_port().expect("a free port");
    let error = wait_for_200(
        &format!("127.0.0.1:{port}"),
        &Probe::healthz(Duration::from_millis(20)),
        &mut proc,
        Instant::now(),
    )
    .expect_err("nothing listens");
    assert!(matches!(error, DevDbError::ExitedEarly { .. }), "{error}");
}

#[test]
fn a_server_that_exits_before_it_is_healthy_is_named_with_its_log() {
    let mut proc = Proc::new(Command::new("true").spawn().expect("spawn true"));
    let addr = format!("127.0.0.1:{}", free_port().expect("a free port"));
    let log = std::path::Path::new("target/bench/server.log");
    let error = wait_healthy(&addr, &mut proc, log).expect_err("nothing listens");
    assert!(
        matches!(&error, DevDbError::Unhealthy { source, .. }
            if matches!(**source, DevDbError::ExitedEarly { .. })),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("muster serve on {addr}: exited early"))
            && text.ends_with("; see target/bench/server.log"),
        "{text}"
    );
}

#[test]
fn a_probe_sends_its_bearer_token_and_reads_the_status_line() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let server = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for answer in ["HTTP/1.1 503 Service Unavailable", "HTTP/1.1 200 OK"] {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).expect("read");
            requests.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            s.write_all(format!("{answer}\r\ncontent-length: 0\r\n\r\n").as_bytes())
                .expect("write");
        }
        requests
    });
    let probe = Probe {
        path: "/v1/queues",
        bearer: Some("mst_x"),
        within: Duration::from_secs(10),
        every: Duration::from_millis(10),
        read_timeout: Duration::from_secs(2),
    };
    let mut proc = sleeper();
    wait_for_200(&addr, &probe, &mut proc, Instant::now()).expect("answers 200 on the second try");
    let requests = server.join().expect("server thread");
    assert_eq!(requests.len(), 2);
    assert!(requests[0].starts_with("GET /v1/queues HTTP/1.1\r\n"));
    assert!(requests[0].contains("Authorization: Bearer mst_x\r\n"));
}
