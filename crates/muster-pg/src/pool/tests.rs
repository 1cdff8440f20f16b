//! The pool's connection settings: dead links found within seconds, and a multi-host URL with
//! `target_session_attrs=read-write` that finds the writable host as libpq does.

use std::time::Duration;

use muster_devdb::{ClusterOptions, TempCluster, free_port};

use super::*;

#[test]
fn a_silently_dead_link_is_found_within_eight_seconds() {
    let target = pg_config("postgresql://u@db/x", &PoolSettings::default()).expect("a url");
    let cfg = &target.config;
    assert!(cfg.get_keepalives());
    assert_eq!(cfg.get_keepalives_idle(), Duration::from_secs(5));
    assert_eq!(cfg.get_keepalives_interval(), Some(Duration::from_secs(1)));
    assert_eq!(cfg.get_keepalives_retries(), Some(3));
    assert_eq!(cfg.get_tcp_user_timeout(), Some(&Duration::from_secs(8)));
}

#[test]
fn a_multi_host_url_keeps_every_host_and_the_session_attributes() {
    let target = pg_config(
        "postgresql://u@10.0.0.1:5432,10.0.0.2:5433/x?target_session_attrs=read-write",
        &PoolSettings::default(),
    )
    .expect("a multi-host url");
    assert_eq!(target.config.get_hosts().len(), 2);
    assert_eq!(target.config.get_ports(), [5432, 5433]);
    assert_eq!(
        target.config.get_target_session_attrs(),
        tokio_postgres::config::TargetSessionAttrs::ReadWrite
    );
}

/// The port of the server a pool on `url` reaches.
async fn served_port(url: &str) -> Result<String, String> {
    let pool = connect_pool(url, &PoolSettings::default()).map_err(|e| e.to_string())?;
    let client = pool
        .get()
        .await
        .map_err(|e| crate::PgError::from(e).to_string())?;
    let row = client
        .query_one("SELECT current_setting('port')", &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// A cluster that answers `transaction_read_only = on`, as a standby does.
fn read_only_cluster() -> TempCluster {
    TempCluster::start_with(ClusterOptions {
        extra_settings: vec!["default_transaction_read_only = on".into()],
        ..ClusterOptions::default()
    })
    .expect("a read-only PostgreSQL")
}

#[tokio::test]
async fn read_write_skips_a_read_only_host_and_a_host_that_refuses() {
    let read_only = read_only_cluster();
    let writable = TempCluster::start().expect("a PostgreSQL");
    let refusing = free_port().expect("a free port");
    let url = format!(
        "postgresql://postgres@127.0.0.1:{refusing},127.0.0.1:{},127.0.0.1:{}/postgres\
         ?target_session_attrs=read-write",
        read_only.port(),
        writable.port()
    );
    assert_eq!(served_port(&url).await, Ok(writable.port().to_string()));
}

#[tokio::test]
async fn without_read_write_the_first_host_that_answers_is_taken() {
    let read_only = read_only_cluster();
    let writable = TempCluster::start().expect("a PostgreSQL");
    let url = format!(
        "postgresql://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
        read_only.port(),
        writable.port()
    );
    assert_eq!(served_port(&url).await, Ok(read_only.port().to_string()));
}
