//! TLS to Logbook with libpq's meaning of `sslmode` and `sslrootcert`, on rustls (ring).
//!
//! tokio-postgres's own parser refuses `sslmode=verify-ca`, `verify-full` and `sslrootcert`, so
//! [`parse_url`] reads the connection string (a URL or `key = value` pairs) with the driver's
//! own grammar (`tls/conninfo.rs`), takes `sslrootcert` out, writes `sslmode` back in the
//! driver's words (`verify-*` as `require`) and hands that to tokio-postgres. The driver's
//! reading decides whether the connection is encrypted, so it is the truth: a string whose
//! `sslmode` the driver reads otherwise than Muster is refused at start, one line naming both.
//!
//! | `sslmode`      | TLS                    | server certificate checked                          |
//! |----------------|------------------------|-----------------------------------------------------|
//! | `disable`      | never                  | —                                                   |
//! | `prefer` (default) | if the server offers it | no                                           |
//! | `require`      | always; a server without TLS is refused | no; with a root certificate (given or the default one present), as `verify-ca` |
//! | `verify-ca`    | always                 | chain to `sslrootcert`                              |
//! | `verify-full`  | always                 | chain to `sslrootcert` and the host name            |
//!
//! `sslrootcert` defaults to `~/.postgresql/root.crt` (under `$HOME`), as in libpq; a
//! `sslrootcert` given that cannot be read is an error whatever the mode (libpq ignores it
//! under `require`). The connector is hand-written
//! (about a hundred lines over `tokio-rustls`, which the workspace already builds for the
//! Kubernetes API) rather than the `tokio-postgres-rustls` crate: one crate fewer, and the
//! `verify-ca` verifier (chain without host name) is needed either way. Channel binding
//! (`SCRAM-SHA-256-PLUS`) is not offered; SCRAM runs without it, as libpq's `channel_binding=prefer`
//! does when the client has none.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::WebPkiSupportedAlgorithms;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::PgError;

mod conninfo;
use conninfo::ConnInfo;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, PgError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` (plain first, TLS if refused) has no counterpart in the driver.
            other => {
                return Err(PgError::Url(format!(
                    "sslmode={other}: use disable, prefer, require, verify-ca or verify-full"
                )));
            }
        })
    }

    /// What the driver (which knows no `verify-*`) is told: TLS or not, and whether it must be.
    fn for_driver(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// A connection URL read: the driver's configuration and the TLS connector it needs.
#[derive(Clone)]
pub struct DbTarget {
    pub config: tokio_postgres::Config,
    pub mode: SslMode,
    pub tls: MakeRustls,
}

impl std::fmt::Debug for DbTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbTarget")
            .field("mode", &self.mode)
            .finish()
    }
}

/// Reads `sslmode` and `sslrootcert` out of `url`, the rest with tokio-postgres; the root
/// certificate's default is under `$HOME`.
pub fn parse_url(url: &str) -> Result<DbTarget, PgError> {
    parse_with_home(url, std::env::var_os("HOME").map(PathBuf::from).as_deref())
}

/// [`parse_url`] with `home` as the home directory.
fn parse_with_home(url: &str, home: Option<&Path>) -> Result<DbTarget, PgError> {
    let (for_driver, mode, rootcert) = read_tls_params(url)?;
    let config: tokio_postgres::Config = for_driver
        .parse()
        .map_err(|e: tokio_postgres::Error| PgError::Url(e.to_string()))?;
    let mode = mode.unwrap_or(SslMode::Prefer);
    same_reading(mode, config.get_ssl_mode())?;
    let tls = MakeRustls::new(mode, root_file(rootcert.as_deref(), home).as_deref())?;
    Ok(DbTarget { config, mode, tls })
}

/// `url` for the driver (`sslrootcert` taken out, `sslmode` in the driver's words where it
/// stands), and the `sslmode` and `sslrootcert` it gives.
fn read_tls_params(url: &str) -> Result<(String, Option<SslMode>, Option<PathBuf>), PgError> {
    let info = ConnInfo::split(url)?;
    let (mut mode, mut rootcert) = (None, None);
    let mut kept = Vec::with_capacity(info.params.len());
    for p in &info.params {
        match p.key.as_str() {
            "sslmode" => {
                let m = SslMode::parse(&p.value)?;
                mode = Some(m);
                kept.push(format!("sslmode={}", driver_word(m.for_driver())));
            }
            "sslrootcert" => rootcert = Some(PathBuf::from(&p.value)),
            _ => kept.push(p.raw.to_owned()),
        }
    }
    Ok((info.join(&kept), mode, rootcert))
}

fn driver_word(mode: tokio_postgres::config::SslMode) -> &'static str {
    match mode {
        tokio_postgres::config::SslMode::Disable => "disable",
        tokio_postgres::config::SslMode::Require => "require",
        _ => "prefer",
    }
}

/// Refuses a connection string whose `sslmode` Muster read as `muster` where the driver, which
/// decides whether the connection is encrypted, read `driver`.
fn same_reading(muster: SslMode, driver: tokio_postgres::config::SslMode) -> Result<(), PgError> {
    if muster.for_driver() == driver {
        return Ok(());
    }
    Err(PgError::Url(format!(
        "sslmode is {muster} as Muster reads the connection string but {} as the PostgreSQL driver reads it: percent-encode `?`, `@`, `&` and `/` in the user name and password (%3F, %40, %26, %2F)",
        driver_word(driver)
    )))
}

/// The CA file: `sslrootcert`, else libpq's default `~/.postgresql/root.crt` when it exists.
fn root_file(given: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_owned());
    }
    let default = home?.join(".postgresql/root.crt");
    default.is_file().then_some(default)
}

fn load_roots(path: &Path) -> Result<RootCertStore, PgError> {
    let pem = std::fs::read(path)
        .map_err(|e| PgError::Tls(format!("sslrootcert {}: {e}", path.display())))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| {
            PgError::Tls(format!(
                "sslrootcert {}: not a PEM certificate bundle: {e}",
                path.display()
            ))
        })?;
        roots.add(cert).map_err(|e| {
            PgError::Tls(format!(
                "sslrootcert {}: certificate refused: {e}",
                path.display()
            ))
        })?;
    }
    if roots.is_empty() {
        return Err(PgError::Tls(format!(
            "sslrootcert {}: no certificate in the file",
            path.display()
        )));
    }
    Ok(roots)
}

/// A tokio-postgres TLS connector on rustls.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
    mode: SslMode,
}

impl MakeRustls {
    /// The connector for `mode`, with the CA file `roots` (given or found) when there is one.
    fn new(mode: SslMode, roots: Option<&Path>) -> Result<MakeRustls, PgError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| PgError::Tls(e.to_string()))?;
        let roots = match mode {
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let path = roots.ok_or_else(|| {
                    PgError::Tls(
                        "sslmode=verify-ca and verify-full need the CA's certificate: sslrootcert=<file> (or ~/.postgresql/root.crt)"
                            .into(),
                    )
                })?;
                Some(load_roots(path)?)
            }
            // libpq: with a root certificate (given, or ~/.postgresql/root.crt present),
            // `require` verifies as `verify-ca`.
            SslMode::Require => roots.map(load_roots).transpose()?,
            SslMode::Disable | SslMode::Prefer => None,
        };
        let chain = roots
            .map(|roots| {
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| PgError::Tls(e.to_string()))
            })
            .transpose()?;
        let verifier = Arc::new(LibpqVerifier {
            chain,
            check_name: mode == SslMode::VerifyFull,
            algorithms: provider.signature_verification_algorithms,
        });
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustls {
            config: Arc::new(config),
            mode,
        })
    }
}

/// The server's certificate as libpq checks it: the chain against the CA when there is one
/// (`verify-ca`, `verify-full`, `require` with a root certificate), the host name only for
/// `verify-full`; without a CA (`prefer`, `require` without one) not at all: encrypted, the
/// server not authenticated. The handshake's signatures are checked either way.
#[derive(Debug)]
struct LibpqVerifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for LibpqVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{domain:?} is no host name for TLS: {e}"),
            )
        })?;
        Ok(RustlsConnect {
            connector: tokio_rustls::TlsConnector::from(Arc::clone(&self.config)),
            name,
            mode: self.mode,
        })
    }
}

/// One connection's handshake.
pub struct RustlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    mode: SslMode,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let (mode, host) = (self.mode, self.name.to_str().into_owned());
        Box::pin(async move {
            self.connector
                .connect(self.name, stream)
                .await
                .map(|s| RustlsStream(Box::new(s)))
                .map_err(|e| explain(e, mode, &host))
        })
    }
}

/// A refused certificate, said in the terms of the URL.
fn explain(e: io::Error, mode: SslMode, host: &str) -> io::Error {
    let refused = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .and_then(|r| match r {
            rustls::Error::InvalidCertificate(c) => Some(c.clone()),
            _ => None,
        });
    match refused {
        Some(c) => {
            let hint = match c {
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. } => {
                    format!("the certificate does not name the URL's host {host:?}")
                }
                rustls::CertificateError::UnknownIssuer
                | rustls::CertificateError::BadSignature => {
                    "the certificate is not signed by a CA of sslrootcert".to_owned()
                }
                _ => "the certificate is not acceptable".to_owned(),
            };
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("Logbook's certificate refused (sslmode={mode}): {hint} ({c:?})"),
            )
        }
        None => e,
    }
}

/// An encrypted connection to Logbook.
pub struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests;
