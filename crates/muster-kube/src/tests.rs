use super::*;
use crate::cache::TtlCache;
use crate::client::parse_endpoint;
use muster_domain::Kind;
use std::time::{Duration, Instant};

#[test]
fn the_map_names_principals_by_username() {
    let map = ServiceAccountMap::from_json(
        r#"{"serviceaccounts": {"system:serviceaccount:cs-workers:trawl": "worker:trawl",
                                "system:serviceaccount:clearedstack:conn": "conn"}}"#,
    )
    .unwrap();
    assert_eq!(map.len(), 2);
    assert_eq!(
        map.get("system:serviceaccount:cs-workers:trawl"),
        Some(Principal::Worker(Kind::Trawl))
    );
    assert_eq!(
        map.get("system:serviceaccount:clearedstack:conn"),
        Some(Principal::Conn)
    );
    assert_eq!(map.get("system:serviceaccount:default:default"), None);
}

#[test]
fn a_map_naming_an_unknown_principal_is_refused() {
    let r = ServiceAccountMap::from_json(
        r#"{"serviceaccounts": {"system:serviceaccount:a:b": "root"}}"#,
    );
    assert_eq!(
        r,
        Err(KubeError::MapEntry {
            username: "system:serviceaccount:a:b".into(),
            principal: "root".into()
        })
    );
}

#[test]
fn a_map_of_another_shape_is_refused() {
    let r = ServiceAccountMap::from_json(r#"{"accounts": {}}"#);
    assert!(matches!(r, Err(KubeError::MapShape(_))));
}

#[test]
fn the_api_server_comes_from_the_service_environment() {
    assert_eq!(
        api_server_url(Some("10.96.0.1"), Some("443")),
        "https://10.96.0.1:443"
    );
    assert_eq!(
        api_server_url(Some("fd00::1"), Some("6443")),
        "https://[fd00::1]:6443"
    );
    assert_eq!(api_server_url(None, None), "https://kubernetes.default.svc");
}

#[test]
fn endpoints_are_parsed_from_https_urls_only() {
    let e = parse_endpoint("https://kubernetes.default.svc").unwrap();
    assert_eq!((e.host.as_str(), e.port), ("kubernetes.default.svc", 443));
    let e = parse_endpoint("https://[fd00::1]:6443/").unwrap();
    assert_eq!((e.host.as_str(), e.port), ("fd00::1", 6443));
    assert_eq!(e.authority, "[fd00::1]:6443");
    let e = parse_endpoint("https://127.0.0.1:8443").unwrap();
    assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 8443));
    assert!(parse_endpoint("http://kubernetes.default.svc").is_err());
    assert!(parse_endpoint("https://kubernetes.default.svc/api").is_err());
    assert!(parse_endpoint("https://host:port").is_err());
}

/// An empty cache of `capacity` answers that keeps each for 30 s.
fn cache_of(capacity: usize) -> TtlCache<Option<Principal>> {
    TtlCache::new(Duration::from_secs(30), capacity)
}

fn value(hit: Option<(Instant, Option<Principal>)>) -> Option<Option<Principal>> {
    hit.map(|(_, v)| v)
}

#[test]
fn the_cache_evicts_the_oldest_answer_when_full() {
    let mut cache = cache_of(2);
    let t0 = Instant::now();
    cache.insert([1; 32], Some(Principal::Conn), t0);
    cache.insert([2; 32], None, t0 + Duration::from_millis(1));
    cache.insert(
        [3; 32],
        Some(Principal::Operator),
        t0 + Duration::from_millis(2),
    );
    let now = t0 + Duration::from_millis(3);
    assert_eq!(cache.len(), 2);
    assert_eq!(value(cache.get(&[1; 32], now)), None);
    assert_eq!(value(cache.get(&[2; 32], now)), Some(None));
    assert_eq!(
        value(cache.get(&[3; 32], now)),
        Some(Some(Principal::Operator))
    );
}

#[test]
fn an_answer_stored_again_is_evicted_by_its_newer_time() {
    let mut cache = cache_of(2);
    let t0 = Instant::now();
    cache.insert([1; 32], None, t0);
    cache.insert([2; 32], None, t0 + Duration::from_millis(1));
    cache.insert([1; 32], None, t0 + Duration::from_millis(2));
    cache.insert([3; 32], None, t0 + Duration::from_millis(3));
    let now = t0 + Duration::from_millis(4);
    assert_eq!(value(cache.get(&[2; 32], now)), None);
    assert_eq!(value(cache.get(&[1; 32], now)), Some(None));
    assert_eq!(value(cache.get(&[3; 32], now)), Some(None));
}

#[test]
fn the_queue_of_a_full_cache_stays_bounded_under_a_flood() {
    let mut cache = cache_of(100);
    let t0 = Instant::now();
    for i in 0..100_000u32 {
        let mut key = [0; 32];
        key[..4].copy_from_slice(&i.to_le_bytes());
        cache.insert(key, None, t0);
    }
    assert_eq!(cache.len(), 100);
    assert!(cache.order.len() <= 101);
}

#[test]
fn cached_answers_expire_after_the_ttl() {
    let mut cache = cache_of(10);
    let t0 = Instant::now();
    cache.insert([1; 32], Some(Principal::Conn), t0);
    assert_eq!(
        value(cache.get(&[1; 32], t0 + Duration::from_secs(29))),
        Some(Some(Principal::Conn))
    );
    assert_eq!(
        value(cache.get(&[1; 32], t0 + Duration::from_secs(30))),
        None
    );
    assert_eq!(cache.len(), 0);
}

mod admission {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::time::{Duration, Instant};

    use crate::admission::{Lane, Rate, Rates, Refusal};

    const A: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    const B: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    const C: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)));
    const UNLIMITED: Rate = Rate {
        per_second: 1e9,
        burst: u32::MAX,
    };

    fn one_a_second(burst: u32) -> Rate {
        Rate {
            per_second: 1.0,
            burst,
        }
    }

    fn takes(
        rates: &Rates,
        peer: Option<IpAddr>,
        at: Instant,
        n: usize,
    ) -> Vec<Result<(), Refusal>> {
        (0..n).map(|_| rates.admit(peer, at)).collect()
    }

    #[test]
    fn a_peer_gets_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let rates = Rates::new(one_a_second(2), UNLIMITED, 10, t0);
        assert_eq!(
            takes(&rates, A, t0, 3),
            [Ok(()), Ok(()), Err(Refusal::PeerRate)]
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(takes(&rates, A, t1, 2), [Ok(()), Err(Refusal::PeerRate)]);
        assert_eq!(takes(&rates, B, t1, 1), [Ok(())]);
    }

    #[test]
    fn the_replicas_bucket_refuses_whatever_the_peer() {
        let t0 = Instant::now();
        let rates = Rates::new(UNLIMITED, one_a_second(2), 10, t0);
        let answers: Vec<_> = [A, B, C].iter().map(|p| rates.admit(*p, t0)).collect();
        assert_eq!(answers, [Ok(()), Ok(()), Err(Refusal::GlobalRate)]);
    }

    #[test]
    fn a_review_refused_by_one_bucket_takes_nothing_from_the_other() {
        let t0 = Instant::now();
        let rates = Rates::new(one_a_second(1), one_a_second(2), 10, t0);
        assert_eq!(
            takes(&rates, A, t0, 3),
            [Ok(()), Err(Refusal::PeerRate), Err(Refusal::PeerRate)]
        );
        assert_eq!(takes(&rates, B, t0, 2), [Ok(()), Err(Refusal::PeerRate)]);
        assert_eq!(takes(&rates, C, t0, 1), [Err(Refusal::GlobalRate)]);
    }

    #[test]
    fn an_ipv4_mapped_address_is_the_same_peer() {
        let t0 = Instant::now();
        let rates = Rates::new(one_a_second(1), UNLIMITED, 10, t0);
        let mapped = Some(IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped()));
        assert_eq!(rates.admit(A, t0), Ok(()));
        assert_eq!(rates.admit(mapped, t0), Err(Refusal::PeerRate));
        assert_eq!(
            rates.admit(Some(IpAddr::V6(Ipv6Addr::LOCALHOST)), t0),
            Ok(())
        );
    }

    #[test]
    fn the_peers_tracked_stay_bounded_and_refilled_ones_are_forgotten_first() {
        let t0 = Instant::now();
        let rates = Rates::new(one_a_second(1), UNLIMITED, 2, t0);
        assert_eq!(rates.admit(A, t0), Ok(()));
        assert_eq!(rates.admit(B, t0), Ok(()));
        assert_eq!(rates.admit(C, t0), Err(Refusal::PeerRate));
        assert_eq!(rates.admit(C, t0 + Duration::from_secs(5)), Ok(()));
        assert_eq!(rates.peers(), 1);
    }

    #[tokio::test]
    async fn a_lane_refuses_at_once_when_its_slots_and_queue_are_taken() {
        let lane = Lane::new(1, 0, Duration::from_secs(60));
        let _slot = lane.enter().await.unwrap();
        let refused = tokio::time::timeout(Duration::from_secs(1), lane.enter()).await;
        assert!(matches!(refused, Ok(Err(Refusal::Queue))));
    }

    #[tokio::test]
    async fn a_lane_gives_a_freed_slot_to_the_one_waiting() {
        let lane = Lane::new(1, 1, Duration::from_secs(60));
        let slot = lane.enter().await.unwrap();
        let waiting = lane.enter();
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut waiting)
                .await
                .is_err()
        );
        drop(slot);
        assert!(waiting.await.is_ok());
    }
}
