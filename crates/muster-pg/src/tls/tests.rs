//! `sslmode` and `sslrootcert` against a PostgreSQL started with `ssl = on` and a certificate
//! for `db.muster.test` signed by a throwaway CA.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use muster_devdb::{ClusterOptions, TempCluster};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

use super::*;
use crate::PoolSettings;

/// The host name on the server's certificate (reached through `hostaddr=127.0.0.1`).
const HOST: &str = "db.muster.test";

struct Fixture {
    cluster: TempCluster,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// Another CA, which signed nothing the server has.
    stranger: PathBuf,
}

fn new_ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    (params.self_signed(&key).expect("a CA"), key)
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let (ca, ca_key) = new_ca("muster test CA");
        let (stranger, _) = new_ca("a stranger's CA");
        let key = KeyPair::generate().expect("a key");
        let cert = CertificateParams::new(vec![HOST.to_owned()])
            .expect("params")
            .signed_by(&key, &ca, &ca_key)
            .expect("the server's certificate");
        let cluster = TempCluster::start_with(ClusterOptions {
            extra_settings: vec![
                "ssl = on".into(),
                "ssl_cert_file = 'server.crt'".into(),
                "ssl_key_file = 'server.key'".into(),
            ],
            files: vec![
                ("server.crt".into(), cert.pem().into_bytes()),
                ("server.key".into(), key.serialize_pem().into_bytes()),
            ],
            ..ClusterOptions::default()
        })
        .expect("start PostgreSQL with ssl = on");
        let dir = std::env::temp_dir().join(format!("muster-pg-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the CA files");
        let (ca_file, stranger_file) = (dir.join("ca.pem"), dir.join("stranger.pem"));
        std::fs::write(&ca_file, ca.pem()).expect("write the CA");
        std::fs::write(&stranger_file, stranger.pem()).expect("write the other CA");
        Fixture {
            cluster,
            ca: ca_file,
            stranger: stranger_file,
        }
    })
}

/// A URL of the fixture's cluster for `host`, with `params` appended.
fn url(host: &str, params: &str) -> String {
    let f = fixture();
    format!(
        "postgresql://postgres@{host}:{}/postgres?hostaddr=127.0.0.1&{params}",
        f.cluster.port()
    )
}

/// Whether the connection made from `url` is encrypted, or why none was made.
async fn encrypted(url: &str) -> Result<bool, String> {
    let pool = crate::connect_pool(url, &PoolSettings::default()).map_err(|e| e.to_string())?;
    let client = pool
        .get()
        .await
        .map_err(|e| crate::PgError::from(e).to_string())?;
    ssl_of(&client).await
}

/// Whether a connection to the fixture's cluster as `host`, with `sslmode` and `root` as
/// `sslrootcert`, is encrypted, or why none was made.
async fn encrypted_with_root(host: &str, sslmode: &str, root: &Path) -> Result<bool, String> {
    let params = format!("sslmode={sslmode}&sslrootcert={}", root.display());
    encrypted(&url(host, &params)).await
}

/// Whether `client`'s connection is encrypted, as the server sees it.
async fn ssl_of(client: &tokio_postgres::Client) -> Result<bool, String> {
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// A cluster without TLS (`ssl = off`).
fn plain_cluster() -> &'static TempCluster {
    static PLAIN: OnceLock<TempCluster> = OnceLock::new();
    PLAIN.get_or_init(|| TempCluster::start().expect("start PostgreSQL without TLS"))
}

/// `sslmode = require` in `key = value` form with spaces around `=`, for the cluster on `port`.
fn key_value_require(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode = require")
}

/// A URL with `sslmode=require` whose password holds an unencoded `?`, for the cluster on `port`.
fn question_mark_password_require(port: u16) -> String {
    format!("postgresql://postgres:pa?ss@127.0.0.1:{port}/postgres?sslmode=require")
}

/// Whether a connection made from `url`, with `home` as the home directory, is encrypted, or
/// why none was made.
async fn encrypted_with_home(url: &str, home: &Path) -> Result<bool, String> {
    let target = parse_with_home(url, Some(home)).map_err(|e| e.to_string())?;
    let (client, connection) = target.config.connect(target.tls).await.map_err(|e| {
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        format!("{e}: {}", cause.unwrap_or_default())
    })?;
    tokio::spawn(connection);
    ssl_of(&client).await
}

/// A home directory whose `.postgresql/root.crt` is a copy of `ca` (or that has none).
fn home_with_root_crt(name: &str, ca: Option<&Path>) -> PathBuf {
    let home = std::env::temp_dir().join(format!("muster-pg-home-{}-{name}", std::process::id()));
    std::fs::create_dir_all(home.join(".postgresql")).expect("a home directory");
    if let Some(ca) = ca {
        std::fs::copy(ca, home.join(".postgresql/root.crt")).expect("root.crt");
    }
    home
}

#[tokio::test]
async fn require_connects_encrypted() {
    assert_eq!(
        encrypted(&url("127.0.0.1", "sslmode=require")).await,
        Ok(true)
    );
}

#[tokio::test]
async fn disable_connects_in_clear_text() {
    assert_eq!(
        encrypted(&url("127.0.0.1", "sslmode=disable")).await,
        Ok(false)
    );
}

#[tokio::test]
async fn the_default_prefers_tls_when_the_server_offers_it() {
    assert_eq!(
        encrypted(&url("127.0.0.1", "application_name=x")).await,
        Ok(true)
    );
}

#[tokio::test]
async fn verify_full_connects_with_the_right_ca_and_host_name() {
    assert_eq!(
        encrypted_with_root(HOST, "verify-full", &fixture().ca).await,
        Ok(true)
    );
}

#[tokio::test]
async fn verify_full_refuses_a_host_name_the_certificate_does_not_name() {
    let e = encrypted_with_root("127.0.0.1", "verify-full", &fixture().ca)
        .await
        .expect_err("refused");
    assert!(
        e.contains(
            "Logbook's certificate refused (sslmode=verify-full): the certificate does not name the URL's host \"127.0.0.1\""
        ),
        "{e}"
    );
}

#[tokio::test]
async fn verify_full_refuses_a_server_whose_ca_is_unknown() {
    let e = encrypted_with_root(HOST, "verify-full", &fixture().stranger)
        .await
        .expect_err("refused");
    assert!(
        e.contains("Logbook's certificate refused (sslmode=verify-full): the certificate is not signed by a CA of sslrootcert (UnknownIssuer)"),
        "{e}"
    );
}

#[tokio::test]
async fn verify_ca_accepts_any_host_name_on_a_certificate_of_the_ca() {
    assert_eq!(
        encrypted_with_root("127.0.0.1", "verify-ca", &fixture().ca).await,
        Ok(true)
    );
}

#[tokio::test]
async fn require_with_a_root_certificate_checks_the_chain_as_libpq_does() {
    let e = encrypted_with_root("127.0.0.1", "require", &fixture().stranger)
        .await
        .expect_err("refused");
    assert!(
        e.contains("Logbook's certificate refused (sslmode=require): the certificate is not signed by a CA of sslrootcert"),
        "{e}"
    );
}

/// Per connection string under `sslmode=require` (made for a cluster's port): one test that it
/// connects encrypted to the cluster with TLS, one that the cluster without TLS is refused (no
/// fall-back to plain text).
macro_rules! require_holds {
    ($($encrypted:ident, $refused:ident: $string:expr,)*) => {$(
        #[tokio::test]
        async fn $encrypted() {
            assert_eq!(encrypted(&$string(fixture().cluster.port())).await, Ok(true));
        }

        #[tokio::test]
        async fn $refused() {
            let e = encrypted(&$string(plain_cluster().port())).await.expect_err("refused");
            assert!(e.contains("server does not support TLS"), "{e}");
        }
    )*};
}

require_holds! {
    key_value_require_with_spaces_connects_encrypted,
    key_value_require_with_spaces_is_refused_by_a_server_without_tls: key_value_require,
    require_after_a_password_holding_a_question_mark_connects_encrypted,
    require_after_a_password_holding_a_question_mark_is_refused_by_a_server_without_tls:
        question_mark_password_require,
}

#[tokio::test]
async fn require_checks_the_chain_against_the_default_root_certificate_when_present() {
    let home = home_with_root_crt("stranger", Some(&fixture().stranger));
    let e = encrypted_with_home(&url("127.0.0.1", "sslmode=require"), &home)
        .await
        .expect_err("refused");
    assert!(
        e.contains("Logbook's certificate refused (sslmode=require): the certificate is not signed by a CA of sslrootcert"),
        "{e}"
    );
}

#[tokio::test]
async fn require_with_the_servers_ca_as_default_root_certificate_connects_whatever_the_host_name() {
    let home = home_with_root_crt("ca", Some(&fixture().ca));
    assert_eq!(
        encrypted_with_home(&url("127.0.0.1", "sslmode=require"), &home).await,
        Ok(true)
    );
}

#[tokio::test]
async fn require_without_a_root_certificate_connects_without_checking_the_certificate() {
    let home = home_with_root_crt("none", None);
    assert_eq!(
        encrypted_with_home(&url("127.0.0.1", "sslmode=require"), &home).await,
        Ok(true)
    );
}

#[test]
fn sslmode_and_sslrootcert_are_read_where_the_driver_reads_parameters() {
    let cases = [
        (
            "postgresql://u:p@h:5/db?sslmode=verify-full&application_name=m&sslrootcert=%2Fetc%2Fca.pem",
            "postgresql://u:p@h:5/db?sslmode=require&application_name=m",
            SslMode::VerifyFull,
            Some("/etc/ca.pem"),
        ),
        (
            "host=h dbname=db sslmode=verify-ca sslrootcert=/ca.pem",
            "host=h dbname=db sslmode=require",
            SslMode::VerifyCa,
            Some("/ca.pem"),
        ),
        (
            "host=h dbname=db sslmode = require",
            "host=h dbname=db sslmode=require",
            SslMode::Require,
            None,
        ),
        (
            "host=h password='x sslmode=disable' user=a\\ sslmode=disable sslmode\t=\trequire",
            "host=h password='x sslmode=disable' user=a\\ sslmode=disable sslmode=require",
            SslMode::Require,
            None,
        ),
        (
            "postgresql://u:pa?ss@h/db?sslmode=require",
            "postgresql://u:pa?ss@h/db?sslmode=require",
            SslMode::Require,
            None,
        ),
        (
            "postgresql://u:p?sslmode=disable@h/db?sslmode=verify%2Dca",
            "postgresql://u:p?sslmode=disable@h/db?sslmode=require",
            SslMode::VerifyCa,
            None,
        ),
    ];
    for (url, for_driver, mode, root) in cases {
        assert_eq!(
            read_tls_params(url).expect(url),
            (for_driver.to_owned(), Some(mode), root.map(PathBuf::from)),
            "{url}"
        );
    }
}

#[test]
fn require_with_spaces_around_the_equals_sign_is_require_for_the_driver_too() {
    let target = parse_url("host=h dbname=db sslmode = require").expect("parsed");
    assert_eq!(
        (target.mode, target.config.get_ssl_mode()),
        (SslMode::Require, tokio_postgres::config::SslMode::Require)
    );
}

#[test]
fn require_after_a_password_holding_a_question_mark_is_require_and_the_password_whole() {
    let target = parse_url("postgresql://u:pa?ss@h/db?sslmode=require").expect("parsed");
    assert_eq!(
        (
            target.mode,
            target.config.get_ssl_mode(),
            target.config.get_password()
        ),
        (
            SslMode::Require,
            tokio_postgres::config::SslMode::Require,
            Some(&b"pa?ss"[..])
        )
    );
}

#[test]
fn an_sslmode_the_driver_reads_otherwise_is_refused_naming_both_readings() {
    let e = same_reading(SslMode::VerifyFull, tokio_postgres::config::SslMode::Prefer)
        .expect_err("refused");
    assert_eq!(
        (e.code(), e.to_string()),
        (
            "E_DB_URL",
            "invalid database URL: sslmode is verify-full as Muster reads the connection string but prefer as the PostgreSQL driver reads it: percent-encode `?`, `@`, `&` and `/` in the user name and password (%3F, %40, %26, %2F)".to_owned()
        )
    );
}

#[test]
fn the_default_sslmode_is_prefer_as_in_libpq() {
    let target = parse_url("postgresql://u@h/db").expect("parsed");
    assert_eq!(target.mode, SslMode::Prefer);
}

#[test]
fn an_unknown_sslmode_is_a_url_error() {
    let e = parse_url("postgresql://u@h/db?sslmode=allow").expect_err("refused");
    assert_eq!(
        (e.code(), e.to_string()),
        (
            "E_DB_URL",
            "invalid database URL: sslmode=allow: use disable, prefer, require, verify-ca or verify-full".to_owned()
        )
    );
}

#[test]
fn a_missing_root_certificate_file_is_a_tls_error_naming_it() {
    let e = parse_url("postgresql://u@h/db?sslmode=verify-full&sslrootcert=/no/such/ca.pem")
        .expect_err("refused");
    assert_eq!(e.code(), "E_DB_TLS");
    assert!(e.to_string().contains("/no/such/ca.pem"), "{e}");
}
