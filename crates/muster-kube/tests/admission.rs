//! TokenReview admission against the fake API server on loopback, over real TLS: known tokens
//! reviewed again ahead of their expiry and let in on their last answer while the API server
//! gives none; rates and a bounded queue for unknown tokens; the in-flight map.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use muster_app::auth::{Authenticator, ReviewFigures};
use muster_kube::{Rate, TokenReviewAuthenticator};

/// The address of peer `n` of the cluster network.
fn peer(n: u8) -> Option<IpAddr> {
    Some(IpAddr::V4(Ipv4Addr::new(10, 0, 1, n)))
}

/// A rate of `burst` reviews and next to no refill.
fn only(burst: u32) -> Rate {
    Rate {
        per_second: 0.001,
        burst,
    }
}

fn figures(auth: &TokenReviewAuthenticator) -> ReviewFigures {
    auth.figures().unwrap()
}

/// How many reviews were refused unsent for `reason`.
fn rejected(auth: &TokenReviewAuthenticator, reason: &str) -> u64 {
    let f = figures(auth);
    f.rejected.iter().find(|(r, _)| *r == reason).unwrap().1
}

/// Waits until `done` holds, polling; panics past the deadline.
async fn until(deadline: Duration, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < deadline, "not within {deadline:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn requests(server: &FakeApiServer) -> usize {
    server.requests.load(Ordering::SeqCst)
}

/// A known token's answer expires after 300 ms and is not reviewed ahead; reviews time out
/// after 200 ms.
fn short_lived(s: &mut muster_kube::TokenReviewSettings) {
    s.cache_ttl = Duration::from_millis(300);
    s.refresh_ahead = Duration::ZERO;
    s.timeout = Duration::from_millis(200);
}

#[tokio::test]
async fn a_known_token_is_reviewed_again_ahead_of_its_expiry() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        s.cache_ttl = Duration::from_secs(2);
        s.refresh_ahead = Duration::from_secs(1);
    })
    .await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    until(Duration::from_secs(2), || requests(&server) == 2).await;
    until(Duration::from_secs(2), || auth.in_flight() == 0).await;
    assert_eq!(figures(&auth).refreshes, 1);
}

#[tokio::test]
async fn a_call_inside_the_refresh_window_does_not_wait_for_the_review() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        s.cache_ttl = Duration::from_secs(2);
        s.refresh_ahead = Duration::from_secs(1);
        s.timeout = Duration::from_secs(30);
    })
    .await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    server.set(Mode::Hang);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let answer = tokio::time::timeout(Duration::from_secs(2), auth.authenticate(TRAWL_TOKEN)).await;
    assert_eq!(answer, Ok(AS_TRAWL));
    until(Duration::from_secs(2), || auth.in_flight() == 1).await;
}

#[tokio::test]
async fn past_its_expiry_a_known_token_is_let_in_on_its_last_answer_while_the_api_server_hangs() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, short_lived).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    server.set(Mode::Hang);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    assert_eq!(figures(&auth).served_stale, 1);
}

#[tokio::test]
async fn once_a_review_got_no_answer_the_next_call_is_let_in_without_waiting() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        short_lived(s);
        s.timeout = Duration::from_millis(100);
    })
    .await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    server.set(Mode::Hang);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    let answer = tokio::time::timeout(Duration::from_millis(50), auth.authenticate(TRAWL_TOKEN));
    assert_eq!(answer.await, Ok(AS_TRAWL));
    assert_eq!(figures(&auth).served_stale, 2);
}

#[tokio::test]
async fn a_stale_answer_serves_no_longer_than_the_stale_limit() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        short_lived(s);
        s.stale_limit = Duration::from_millis(400);
    })
    .await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    server.set(Mode::Status500);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, UNAVAILABLE);
}

#[tokio::test]
async fn a_negative_answer_ends_a_known_tokens_access_at_once() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, short_lived).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    server.set(Mode::Revoked);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, Ok(None));
    server.set(Mode::Hang);
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, Ok(None));
    assert_eq!(figures(&auth).served_stale, 0);
}

#[tokio::test]
async fn a_refresh_ahead_that_finds_the_token_revoked_ends_its_access_before_its_expiry() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        s.cache_ttl = Duration::from_secs(4);
        s.refresh_ahead = Duration::from_secs(2);
    })
    .await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    server.set(Mode::Revoked);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    until(Duration::from_secs(2), || {
        requests(&server) == 2 && auth.in_flight() == 0
    })
    .await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, Ok(None));
}

#[tokio::test]
async fn a_403_from_tokenreview_ends_stale_answers_at_once() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, short_lived).await;
    assert_eq!(
        answers(&auth, [TRAWL_TOKEN, CONN_TOKEN]).await,
        [AS_TRAWL, AS_CONN]
    );
    server.set(Mode::Status403);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        answers(&auth, [TRAWL_TOKEN, CONN_TOKEN]).await,
        [UNAVAILABLE, UNAVAILABLE]
    );
    assert_eq!(figures(&auth).served_stale, 0);
}

#[tokio::test]
async fn unknown_tokens_of_a_peer_past_its_rate_are_unavailable_and_other_peers_are_not() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        (s.peer_rate, s.global_rate) = (only(2), UNLIMITED);
    })
    .await;
    let mut answers = Vec::new();
    for i in 0..3 {
        answers.push(auth.authenticate_from(&format!("r-{i}"), peer(1)).await);
    }
    answers.push(auth.authenticate_from("r-3", peer(2)).await);
    assert_eq!(answers, [Ok(None), Ok(None), UNAVAILABLE, Ok(None)]);
    assert_eq!(requests(&server), 3);
    assert_eq!(rejected(&auth, "peer_rate"), 1);
}

#[tokio::test]
async fn unknown_tokens_past_the_replicas_rate_are_unavailable_whatever_their_peer() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        (s.peer_rate, s.global_rate) = (UNLIMITED, only(2));
    })
    .await;
    let mut answers = Vec::new();
    for i in 0..3 {
        answers.push(auth.authenticate_from(&format!("r-{i}"), peer(i)).await);
    }
    assert_eq!(answers, [Ok(None), Ok(None), UNAVAILABLE]);
    assert_eq!(requests(&server), 2);
    assert_eq!(rejected(&auth, "global_rate"), 1);
}

#[tokio::test]
async fn a_cached_answer_costs_no_rate() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Review, |s| {
        s.peer_rate = only(2);
    })
    .await;
    for _ in 0..5 {
        assert_eq!(auth.authenticate_from(TRAWL_TOKEN, peer(1)).await, AS_TRAWL);
        assert_eq!(auth.authenticate_from(BOGUS_TOKEN, peer(1)).await, Ok(None));
    }
    assert_eq!(requests(&server), 2);
}

/// An authenticator whose reviews never end, with one slot for unknown tokens and a queue of
/// one, and a lookup in each.
struct Taken {
    _server: FakeApiServer,
    _dir: TempDir,
    auth: Arc<TokenReviewAuthenticator>,
    lookups: Vec<tokio::task::JoinHandle<()>>,
}

async fn slot_and_queue_taken(queue_wait: Duration) -> Taken {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Hang, |s| {
        (s.peer_rate, s.global_rate) = (UNLIMITED, UNLIMITED);
        (s.connections, s.queue, s.queue_wait) = (1, 1, queue_wait);
        s.timeout = Duration::from_secs(60);
    })
    .await;
    let auth = Arc::new(auth);
    let mut lookups = Vec::new();
    for i in 0..2 {
        let auth = Arc::clone(&auth);
        lookups.push(tokio::spawn(async move {
            let _ = auth.authenticate(&format!("held-{i}")).await;
        }));
        until(Duration::from_secs(5), || requests(&server) == 1).await;
    }
    until(Duration::from_secs(5), || auth.in_flight() == 2).await;
    // The second one reaches the queue.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Taken {
        _server: server,
        _dir,
        auth,
        lookups,
    }
}

#[tokio::test]
async fn an_unknown_token_finding_every_slot_and_the_queue_taken_is_unavailable_at_once() {
    let taken = slot_and_queue_taken(Duration::from_secs(60)).await;
    let answer = tokio::time::timeout(Duration::from_secs(2), taken.auth.authenticate("third"));
    assert_eq!(answer.await, Ok(UNAVAILABLE));
    assert_eq!(rejected(&taken.auth, "queue"), 1);
    taken.lookups.iter().for_each(|h| h.abort());
}

#[tokio::test]
async fn a_wait_in_the_queue_ends_after_the_queue_wait() {
    let mut taken = slot_and_queue_taken(Duration::from_millis(200)).await;
    let queued = taken.lookups.pop().unwrap();
    tokio::time::timeout(Duration::from_secs(2), queued)
        .await
        .expect("the queued lookup is still waiting")
        .unwrap();
    assert_eq!(rejected(&taken.auth, "queue"), 1);
    taken.lookups.iter().for_each(|h| h.abort());
}

#[tokio::test]
async fn a_known_tokens_review_takes_its_own_slot_while_unknown_ones_hold_theirs() {
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::HangsUnknown, |s| {
        short_lived(s);
        (s.connections, s.queue) = (1, 0);
        s.timeout = Duration::from_secs(60);
    })
    .await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    let auth = Arc::new(auth);
    let held = {
        let auth = Arc::clone(&auth);
        tokio::spawn(async move { auth.authenticate("never-answered").await })
    };
    until(Duration::from_secs(5), || requests(&server) == 2).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(auth.authenticate(TRAWL_TOKEN).await, AS_TRAWL);
    assert_eq!(requests(&server), 3);
    assert_eq!(figures(&auth).served_stale, 0);
    held.abort();
}

#[tokio::test]
async fn a_lookup_whose_caller_goes_away_leaves_nothing_in_flight() {
    let Reviewed {
        server: _server,
        auth,
        _dir,
    } = Reviewed::against(Mode::Hang).await;
    let mut lookup = Box::pin(auth.authenticate(BOGUS_TOKEN));
    let polled = tokio::time::timeout(Duration::from_millis(200), &mut lookup).await;
    assert!(polled.is_err(), "the hanging review answered");
    assert_eq!(auth.in_flight(), 1);
    drop(lookup);
    assert_eq!(auth.in_flight(), 0);
}

#[tokio::test]
async fn a_review_shared_by_two_lookups_stays_in_flight_until_both_are_gone() {
    let Reviewed {
        server: _server,
        auth,
        _dir,
    } = Reviewed::against(Mode::Hang).await;
    let mut first = Box::pin(auth.authenticate(BOGUS_TOKEN));
    let mut second = Box::pin(auth.authenticate(BOGUS_TOKEN));
    for lookup in [&mut first, &mut second] {
        let polled = tokio::time::timeout(Duration::from_millis(100), lookup).await;
        assert!(polled.is_err(), "the hanging review answered");
    }
    drop(first);
    assert_eq!(auth.in_flight(), 1);
    drop(second);
    assert_eq!(auth.in_flight(), 0);
}

#[tokio::test]
async fn a_good_worker_is_served_throughout_a_flood_of_random_tokens_while_reviews_take_half_a_second()
 {
    // The settings of production but a known token's answer lives 1 s, reviewed 300 ms ahead.
    let Reviewed { server, auth, _dir } = Reviewed::with(Mode::Sluggish, |s| {
        s.cache_ttl = Duration::from_secs(1);
        s.refresh_ahead = Duration::from_millis(300);
    })
    .await;
    let auth = Arc::new(auth);
    let worker = peer(1);
    assert_eq!(auth.authenticate_from(TRAWL_TOKEN, worker).await, AS_TRAWL);
    // Sixteen flooders: eight from one peer, eight from a peer each; each asks again as soon as
    // it is answered.
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..16u8)
        .map(|t| {
            let (auth, stop) = (Arc::clone(&auth), Arc::clone(&stop));
            let from = if t < 8 { peer(200) } else { peer(100 + t) };
            tokio::spawn(async move {
                let (mut refused, mut i) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let answer = auth
                        .authenticate_from(&format!("flood-{t}-{i}"), from)
                        .await;
                    assert!(matches!(answer, Ok(None) | UNAVAILABLE), "{answer:?}");
                    refused += u64::from(answer.is_err());
                    i += 1;
                }
                refused
            })
        })
        .collect();
    // The worker calls every 50 ms for 3.5 s: past three expiries of its answer.
    let started = Instant::now();
    let mut calls = 0;
    while started.elapsed() < Duration::from_millis(3500) {
        let answer = auth.authenticate_from(TRAWL_TOKEN, worker).await;
        assert_eq!(answer, AS_TRAWL, "call {calls} at {:?}", started.elapsed());
        calls += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut refused = 0;
    for f in flood {
        refused += tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("a flooder was left hanging")
            .unwrap();
    }
    let f = figures(&auth);
    assert!(refused > 0, "the flood was never refused");
    assert!(rejected(&auth, "peer_rate") > 0, "{f:?}");
    assert!(f.refreshes >= 2, "{f:?}");
    let known_positive = f
        .reviews
        .iter()
        .find(|r| r.0 == "known" && r.1 == "positive");
    assert!(known_positive.unwrap().2 >= 2, "{f:?}");
    assert!(requests(&server) > 0);
}
