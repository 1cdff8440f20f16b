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
