use super::{ClusterOptions, Probe, runtime_url};
use crate::host::{Account, account_from_passwd, version_key};

#[test]
fn reads_the_postgres_account_from_passwd() {
    let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                  postgres:x:101:104:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash\n";
    assert_eq!(
        account_from_passwd(passwd, "postgres"),
        Some(Account { uid: 101, gid: 104 })
    );
    assert_eq!(account_from_passwd(passwd, "nobody"), None);
}

#[test]
fn orders_postgresql_versions_numerically() {
    let mut keys = vec![version_key("9.6"), version_key("15"), version_key("10")];
    keys.sort();
    assert_eq!(keys, vec![Some(vec![9, 6]), Some(vec![10]), Some(vec![15])]);
    assert_eq!(version_key("common"), None);
}

#[test]
fn options_default_to_fast_and_roomy() {
    let options = ClusterOptions::default();
    assert!(!options.fsync);
    assert_eq!(options.max_connections, 200);
    assert_eq!(options.log_to, None);
}

/// One connection on a fresh local port answered with `reply`; the port.
fn answer_once(reply: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut head = [0u8; 1024];
        let _ = s.read(&mut head);
        let _ = s.write_all(reply.as_bytes());
    });
    port
}

fn probe() -> Probe<'static> {
    Probe::healthz(std::time::Duration::from_millis(10))
}

#[test]
fn a_probe_reads_the_status_code_of_the_answer() {
    let port = answer_once("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(probe().status(&format!("127.0.0.1:{port}")), Some(503));
}

#[test]
fn a_probe_without_a_status_line_has_no_status() {
    let port = answer_once("garbage");
    assert_eq!(probe().status(&format!("127.0.0.1:{port}")), None);
}

#[test]
fn the_runtime_url_is_the_superusers_with_the_runtime_role() {
    assert_eq!(
        runtime_url("postgresql://postgres@127.0.0.1:5433/muster_bench"),
        "postgresql://muster_app@127.0.0.1:5433/muster_bench"
    );
}
