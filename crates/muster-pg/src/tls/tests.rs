//! `sslmode` and `sslrootcert` against a PostgreSQL started with `ssl = on` and a certificate
//! for `db.muster.test` signed by a throwaway CA.

use std::path::PathBuf;
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
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
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
    let ca = fixture().ca.display().to_string();
    let params = format!("sslmode=verify-full&sslrootcert={ca}");
    assert_eq!(encrypted(&url(HOST, &params)).await, Ok(true));
}

#[tokio::test]
async fn verify_full_refuses_a_host_name_the_certificate_does_not_name() {
    let ca = fixture().ca.display().to_string();
    let params = format!("sslmode=verify-full&sslrootcert={ca}");
    let e = encrypted(&url("127.0.0.1", &params))
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
    let stranger = fixture().stranger.display().to_string();
    let params = format!("sslmode=verify-full&sslrootcert={stranger}");
    let e = encrypted(&url(HOST, &params)).await.expect_err("refused");
    assert!(
        e.contains("Logbook's certificate refused (sslmode=verify-full): the certificate is not signed by a CA of sslrootcert (UnknownIssuer)"),
        "{e}"
    );
}

#[tokio::test]
async fn verify_ca_accepts_any_host_name_on_a_certificate_of_the_ca() {
    let ca = fixture().ca.display().to_string();
    let params = format!("sslmode=verify-ca&sslrootcert={ca}");
    assert_eq!(encrypted(&url("127.0.0.1", &params)).await, Ok(true));
}

#[tokio::test]
async fn require_with_a_root_certificate_checks_the_chain_as_libpq_does() {
    let stranger = fixture().stranger.display().to_string();
    let params = format!("sslmode=require&sslrootcert={stranger}");
    let e = encrypted(&url("127.0.0.1", &params))
        .await
        .expect_err("refused");
    assert!(
        e.contains("Logbook's certificate refused (sslmode=require): the certificate is not signed by a CA of sslrootcert"),
        "{e}"
    );
}

#[test]
fn sslmode_and_sslrootcert_are_taken_out_and_the_rest_kept() {
    let cases = [
        (
            "postgresql://u:p@h:5/db?sslmode=verify-full&application_name=m&sslrootcert=%2Fetc%2Fca.pem",
            "postgresql://u:p@h:5/db?application_name=m",
            SslMode::VerifyFull,
            "/etc/ca.pem",
        ),
        (
            "host=h dbname=db sslmode=verify-ca sslrootcert=/ca.pem",
            "host=h dbname=db",
            SslMode::VerifyCa,
            "/ca.pem",
        ),
    ];
    for (url, rest, mode, root) in cases {
        assert_eq!(
            take_tls_params(url).expect(url),
            (rest.to_owned(), Some(mode), Some(PathBuf::from(root))),
            "{url}"
        );
    }
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
