//! No token, the callers' nor Muster's own, appears in what the authenticator logs, returns or
//! shows. Alone in its test binary: tracing's per-callsite interest cache does not mix a scoped
//! subscriber on one test thread with none on the others.

mod common;

use std::path::Path;

use common::*;
use muster_app::auth::{AuthError, Authenticator};
use muster_kube::{ServiceAccountMap, TokenReviewAuthenticator};
use muster_testkit::CapturedLogs;

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn no_token_appears_in_logs_errors_or_answers() {
    let captured = CapturedLogs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let good = fake_api_server(&pki, Mode::Review).await;
    let failing = fake_api_server(&pki, Mode::Status500).await;
    let auth = authenticator_for(&good, &pki, &dir).await;
    let failing_dir = TempDir::new("muster-kube-test");
    let broken = authenticator_for(&failing, &pki, &failing_dir).await;
    let down = TokenReviewAuthenticator::new(settings(
        &TempDir::new("muster-kube-test"),
        "https://127.0.0.1:1",
        &pki.ca_pem,
    ))
    .unwrap();

    let mut said = Vec::new();
    for token in [TRAWL_TOKEN, UNMAPPED_TOKEN, EXPIRED_TOKEN, BOGUS_TOKEN] {
        said.push(format!("{:?}", auth.authenticate(token).await));
    }
    for a in [&broken, &down] {
        let r = a.authenticate(TRAWL_TOKEN).await;
        assert_eq!(r, Err(AuthError::Unavailable));
        said.push(format!("{r:?} {}", r.clone().unwrap_err()));
    }
    said.push(format!("{auth:?}"));
    let bad_map = ServiceAccountMap::from_json(r#"{"serviceaccounts": {"x": 1}}"#);
    said.push(format!("{bad_map:?}"));
    let logs = captured.text();
    said.push(logs.clone());
    let said = said.join("\n");

    for secret in [
        TRAWL_TOKEN,
        UNMAPPED_TOKEN,
        EXPIRED_TOKEN,
        BOGUS_TOKEN,
        OWN_TOKEN,
    ] {
        assert!(!said.contains(secret), "{secret} leaked into:\n{said}");
    }
    // The logs did say something useful: the unmapped username (not a secret) and the failures.
    assert!(
        logs.contains("system:serviceaccount:default:default"),
        "logs:\n{logs}"
    );
    assert!(logs.contains("500"), "logs:\n{logs}");
    assert!(logs.contains("connect"), "logs:\n{logs}");
    // The token files themselves are the only place the own token is written.
    assert_eq!(text(&dir.0.join("token")).trim(), OWN_TOKEN);
}
