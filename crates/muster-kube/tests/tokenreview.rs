//! The TokenReview authenticator against a fake Kubernetes API server on loopback, over real TLS.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use muster_app::auth::{AuthError, Authenticator};
use muster_domain::Principal;
use muster_kube::{KubeError, TokenReviewAuthenticator};

/// How many reviews a fresh authenticator in front of a server in `mode` counts as failures
/// after asking about each of `tokens`.
async fn counts_after<const N: usize>(mode: Mode, tokens: [&str; N]) -> (u64, u64) {
    let Reviewed {
        server: _server,
        auth,
        _dir,
    } = Reviewed::against(mode).await;
    answers(&auth, tokens).await;
    auth.counts().get()
}

/// What a fresh authenticator answers for `token`, and how many reviews the API server saw.
async fn reviewed_once(token: &str) -> (Result<Option<Principal>, AuthError>, usize) {
    let Reviewed { server, auth, _dir } = Reviewed::against(Mode::Review).await;
    let answer = auth.authenticate(token).await;
    (answer, server.requests.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_valid_mapped_token_resolves_to_its_principal() {
    let Reviewed { server, auth, _dir } = Reviewed::against(Mode::Review).await;
    assert_eq!(
        answers(&auth, [TRAWL_TOKEN, CONN_TOKEN]).await,
        [AS_TRAWL, AS_CONN]
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_invalid_token_resolves_to_nobody() {
    assert_eq!(reviewed_once(BOGUS_TOKEN).await, (Ok(None), 1));
}

#[tokio::test]
async fn an_expired_token_resolves_to_nobody() {
    assert_eq!(reviewed_once(EXPIRED_TOKEN).await.0, Ok(None));
}

#[tokio::test]
async fn a_valid_token_of_an_unmapped_serviceaccount_resolves_to_nobody() {
    assert_eq!(reviewed_once(UNMAPPED_TOKEN).await, (Ok(None), 1));
}

#[tokio::test]
async fn an_api_server_that_is_down_is_unavailable_within_the_timeout() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let auth = TokenReviewAuthenticator::new(settings(&dir, &dead_url(), &pki.ca_pem)).unwrap();
    let started = Instant::now();
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, UNAVAILABLE);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test]
async fn an_api_server_that_never_answers_is_unavailable_after_the_timeout() {
    let Reviewed { server, auth, _dir } =
        Reviewed::with(Mode::Hang, |s| s.timeout = Duration::from_millis(300)).await;
    let started = Instant::now();
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, UNAVAILABLE);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "took {took:?}"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_api_server_answering_500_is_unavailable_and_not_cached() {
    let Reviewed { server, auth, _dir } = Reviewed::against(Mode::Status500).await;
    assert_eq!(answers(&auth, [TRAWL_TOKEN; 2]).await, [UNAVAILABLE; 2]);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
    assert_eq!(auth.cached(), 0);
}

#[tokio::test]
async fn every_review_without_an_answer_is_counted_as_a_failure() {
    assert_eq!(
        counts_after(Mode::Status500, [TRAWL_TOKEN, CONN_TOKEN]).await,
        (2, 2)
    );
}

#[tokio::test]
async fn answered_reviews_count_no_failure_whatever_they_say() {
    assert_eq!(
        counts_after(Mode::Review, [TRAWL_TOKEN, BOGUS_TOKEN]).await,
        (2, 0)
    );
}

#[tokio::test]
async fn an_api_server_the_ca_bundle_does_not_vouch_for_is_unavailable() {
    let (pki, other, dir) = (pki(), pki(), TempDir::new("muster-kube-test"));
    let server = fake_api_server(&pki, Mode::Review).await;
    let auth = TokenReviewAuthenticator::new(settings(&dir, &server.url, &other.ca_pem)).unwrap();
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, UNAVAILABLE);
    assert_eq!(server.requests.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_second_call_within_the_ttl_is_answered_from_the_cache() {
    let Reviewed { server, auth, _dir } = Reviewed::against(Mode::Review).await;
    for _ in 0..2 {
        assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
        assert_eq!(auth.authenticate(BOGUS_TOKEN).await, Ok(None));
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
    assert_eq!(auth.cached(), 2);
}

#[tokio::test]
async fn a_call_after_the_ttl_asks_the_api_server_again() {
    let Reviewed { server, auth, _dir } =
        Reviewed::with(Mode::Review, |s| s.cache_ttl = Duration::from_millis(100)).await;
    assert_eq!(auth.authenticate(CONN_TOKEN).await, AS_CONN);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(auth.authenticate(CONN_TOKEN).await, AS_CONN);
    assert_eq!(server.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_rotated_own_token_is_read_again() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let server = fake_api_server(&pki, Mode::Review).await;
    let mut s = settings(&dir, &server.url, &pki.ca_pem);
    std::fs::write(&s.token_path, "stale-own-token").unwrap();
    s.token_refresh = Duration::from_millis(50);
    let token_path = s.token_path.clone();
    let auth = TokenReviewAuthenticator::new(s).unwrap();
    // The fake refuses the stale token with 401: fail closed.
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, UNAVAILABLE);
    std::fs::write(&token_path, OWN_TOKEN).unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
}

#[test]
fn a_missing_ca_bundle_or_own_token_is_a_configuration_error() {
    let (pki, dir) = (pki(), TempDir::new("muster-kube-test"));
    let mut s = settings(&dir, "https://127.0.0.1:6443", &pki.ca_pem);
    s.token_path = dir.0.join("no-such-token");
    assert!(matches!(
        TokenReviewAuthenticator::new(s),
        Err(KubeError::Read { .. })
    ));
    let mut s = settings(&dir, "https://127.0.0.1:6443", &pki.ca_pem);
    s.ca_path = dir.write("empty.crt", "");
    assert!(matches!(
        TokenReviewAuthenticator::new(s),
        Err(KubeError::NoCertificate(_))
    ));
}

#[tokio::test]
async fn a_token_meant_for_the_api_server_is_refused() {
    let (answer, reviews) = reviewed_once(API_AUDIENCE_TOKEN).await;
    assert_eq!((answer, reviews), (Ok(None), 1));
}

#[tokio::test]
async fn an_authenticated_answer_that_names_no_audience_of_ours_is_refused() {
    let Reviewed {
        server: _server,
        auth,
        _dir,
    } = Reviewed::against(Mode::IgnoresAudiences).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, Ok(None));
}

#[tokio::test]
async fn the_audience_asked_for_is_the_configured_one() {
    let Reviewed {
        server: _server,
        auth,
        _dir,
    } = Reviewed::with(Mode::Review, |s| {
        s.audiences = vec![API_AUDIENCE.to_owned()];
    })
    .await;
    assert_eq!(
        answers(&auth, [API_AUDIENCE_TOKEN, TRAWL_TOKEN]).await,
        vec![AS_TRAWL, Ok(None)]
    );
}

#[tokio::test]
async fn reviews_one_after_another_share_one_keep_alive_connection() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        s.peer_rate = UNLIMITED;
    })
    .await;
    for i in 0..20 {
        assert_eq!(auth.authenticate(&format!("random-{i}")).await, Ok(None));
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 20);
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
    assert_eq!(auth.connections_opened(), 1);
}

#[tokio::test]
async fn concurrent_lookups_of_one_token_send_one_review() {
    let Reviewed { server, auth, _dir } = Reviewed::against(Mode::Slow).await;
    let auth = std::sync::Arc::new(auth);
    let lookups: Vec<_> = (0..50)
        .map(|_| {
            let auth = auth.clone();
            tokio::spawn(async move { auth.authenticate(TRAWL_TOKEN).await })
        })
        .collect();
    for l in lookups {
        assert_eq!(l.await.unwrap(), AS_TRAWL);
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
    assert_eq!(auth.in_flight(), 0);
}

#[tokio::test]
async fn a_flood_of_random_tokens_leaves_the_good_tokens_cached_and_working() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        s.negative_capacity = 100;
        (s.peer_rate, s.global_rate) = (UNLIMITED, UNLIMITED);
    })
    .await;
    assert_eq!(
        answers(&auth, [TRAWL_TOKEN, CONN_TOKEN]).await,
        vec![AS_TRAWL, AS_CONN]
    );
    let auth = std::sync::Arc::new(auth);
    let flood: Vec<_> = (0..8)
        .map(|t| {
            let auth = auth.clone();
            tokio::spawn(async move {
                for i in 0..250 {
                    assert_eq!(auth.authenticate(&format!("flood-{t}-{i}")).await, Ok(None));
                }
            })
        })
        .collect();
    // While the flood runs, and after it, the good tokens are answered from the cache.
    for _ in 0..20 {
        assert_eq!(
            answers(&auth, [TRAWL_TOKEN, CONN_TOKEN]).await,
            vec![AS_TRAWL, AS_CONN]
        );
        tokio::task::yield_now().await;
    }
    for f in flood {
        f.await.unwrap();
    }
    assert_eq!(
        answers(&auth, [TRAWL_TOKEN, CONN_TOKEN]).await,
        vec![AS_TRAWL, AS_CONN]
    );
    // 2 good tokens and 2,000 random ones: one review each, the good ones never again.
    assert_eq!(server.requests.load(Ordering::SeqCst), 2 + 2000);
    // Negative answers stay within their own small cache.
    assert!(auth.cached() <= 2 + 100, "{} cached", auth.cached());
    // At most the pool's connections were opened for 2,002 reviews.
    assert!(
        auth.connections_opened() <= 4,
        "{}",
        auth.connections_opened()
    );
}
