//! The order hosts are tried in, and a failover past a host that accepts connections and never
//! answers them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use muster_devdb::TempCluster;

use super::*;
use crate::pool::{PoolSettings, connect_pool, pg_config};

fn book(url: &str) -> HostBook {
    let target = pg_config(url, &PoolSettings::default()).expect("a url");
    HostBook::new(&target.config, Duration::from_secs(2))
}

const TWO: &str = "postgresql://u@10.0.0.1:5432,10.0.0.2:5433/x?target_session_attrs=read-write";

#[test]
fn hosts_are_tried_in_url_order_until_one_answers_read_write() {
    let b = book(TWO);
    let full = Duration::from_secs(2);
    assert_eq!(b.order(Instant::now()), vec![(0, full), (1, full)]);
    b.answered(1);
    assert_eq!(
        b.order(Instant::now()),
        vec![(1, full), (0, full)],
        "the host that answered read-write is tried first"
    );
}

#[test]
fn a_host_that_failed_is_tried_last_within_the_short_budget_until_its_suspicion_ends() {
    let b = book(TWO);
    b.answered(0);
    b.went_silent(0);
    let now = Instant::now();
    let full = Duration::from_secs(2);
    assert_eq!(b.order(now), vec![(1, full), (0, SUSPECT_CONNECT)]);
    assert_eq!(
        b.order(now + SUSPECT_FOR + Duration::from_millis(1)),
        vec![(0, full), (1, full)],
        "once the suspicion is over the preferred host is first again"
    );
    b.answered(0);
    assert_eq!(b.order(now), vec![(0, full), (1, full)]);
}

#[test]
fn a_single_host_is_always_tried_with_the_whole_connect_timeout() {
    let b = book("postgresql://u@10.0.0.1:5432/x");
    b.went_silent(0);
    assert_eq!(b.order(Instant::now()), vec![(0, Duration::from_secs(2))]);
}

#[test]
fn each_host_keeps_every_other_setting_of_the_url_and_its_own_port() {
    let target = pg_config(TWO, &PoolSettings::default()).expect("a url");
    let second = one_host(&target.config, 1);
    assert_eq!(second.get_hosts(), [Host::Tcp("10.0.0.2".into())]);
    assert_eq!(second.get_ports(), [5433]);
    assert_eq!(second.get_user(), Some("u"));
    assert_eq!(second.get_dbname(), Some("x"));
    assert_eq!(second.get_options(), target.config.get_options());
    assert_eq!(second.get_application_name(), Some("muster"));
    assert_eq!(
        second.get_target_session_attrs(),
        tokio_postgres::config::TargetSessionAttrs::ReadWrite
    );
    assert_eq!(second.get_tcp_user_timeout(), Some(&Duration::from_secs(8)));
    assert_eq!(second.get_keepalives_retries(), Some(3));
}

/// A server that accepts TCP connections and never says a word (a frozen primary: its kernel
/// still completes handshakes). Counts the connections it accepted.
async fn frozen_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (port, accepted)
}

#[tokio::test]
async fn a_frozen_first_host_costs_one_bounded_attempt_and_new_connections_go_to_the_one_that_answered()
 {
    let writable = TempCluster::start().expect("a PostgreSQL");
    let (frozen, accepted) = frozen_listener().await;
    let url = format!(
        "postgresql://postgres@127.0.0.1:{frozen},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        writable.port()
    );
    let pool = connect_pool(&url, &PoolSettings::default()).expect("a pool");
    let first = pool.get().await.expect("a connection past the frozen host");
    let second = pool.get().await.expect("a second connection");
    for c in [&first, &second] {
        let row = c
            .query_one("SELECT current_setting('port')", &[])
            .await
            .expect("an answer");
        assert_eq!(row.get::<_, String>(0), writable.port().to_string());
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the second connection went to the host that answered, not to the frozen one first"
    );
}
