use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use time::macros::{date, datetime, offset};

use super::*;

const SALT: DailySalt = DailySalt::from_bytes([3; 32]);

/// The /64 prefix an IPv6 address belongs to.
fn prefix64(ip: Ipv6Addr) -> [u8; 8] {
    let mut prefix = [0; 8];
    prefix.copy_from_slice(&ip.octets()[..8]);
    prefix
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address")
}

/// The client hash of the address `text` under the test salt.
fn hashed(text: &str) -> [u8; 32] {
    client_hash(&SALT, ip(text))
}

#[test]
fn two_addresses_in_one_ipv6_slash_64_hash_equal() {
    assert_eq!(
        hashed("2001:db8:1:2::1"),
        hashed("2001:db8:1:2:ffff:eeee:dddd:cccc")
    );
}

#[test]
fn addresses_in_different_ipv6_slash_64s_hash_differently() {
    assert_ne!(hashed("2001:db8:1:2::1"), hashed("2001:db8:1:3::1"));
}

#[test]
fn ipv4_and_its_mapped_ipv6_hash_equal() {
    assert_eq!(hashed("192.0.2.7"), hashed("::ffff:192.0.2.7"));
}

#[test]
fn neighbouring_ipv4_addresses_hash_differently() {
    assert_ne!(hashed("192.0.2.7"), hashed("192.0.2.8"));
}

#[test]
fn different_salts_give_different_hashes() {
    let other = DailySalt::from_bytes([4; 32]);
    assert_ne!(hashed("192.0.2.7"), client_hash(&other, ip("192.0.2.7")));
}

#[test]
fn client_hash_is_keyed_blake3_of_tag_and_normalized_key() {
    let mut message = vec![0, 0, 0, 12];
    message.extend_from_slice(b"muster-ip-v1");
    message.extend_from_slice(&[0, 0, 0, 16]);
    message.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7]);
    assert_eq!(
        hashed("192.0.2.7"),
        *blake3::keyed_hash(&[3; 32], &message).as_bytes()
    );
}

#[test]
fn normalize_maps_ipv4_into_ipv6() {
    assert_eq!(
        normalize(ip("192.0.2.7")),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7]
    );
}

#[test]
fn normalize_masks_ipv6_to_its_slash_64() {
    assert_eq!(
        normalize(ip("2001:db8:aaaa:bbbb:1:2:3:4")),
        [
            0x20, 0x01, 0x0d, 0xb8, 0xaa, 0xaa, 0xbb, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0
        ]
    );
}

#[test]
fn ipv4_compatible_ipv6_is_an_ipv6_slash_64() {
    // `::c000:207` is not IPv4-mapped: it is the /64 `::/64`, not 192.0.2.7.
    assert_eq!(normalize(ip("::192.0.2.7")), [0; 16]);
}

#[test]
fn parse_accepts_bare_addresses_with_surrounding_whitespace() {
    assert_eq!(
        parse_client_ip(" 192.0.2.7\t"),
        Ok(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)))
    );
    assert_eq!(parse_client_ip("::1"), Ok(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    assert_eq!(
        parse_client_ip("::ffff:192.0.2.7"),
        Ok(ip("::ffff:192.0.2.7"))
    );
}

#[test]
fn parse_refuses_an_empty_value() {
    assert_eq!(parse_client_ip(""), Err(IpError::Empty));
    assert_eq!(parse_client_ip("  "), Err(IpError::Empty));
}

#[test]
fn parse_refuses_anything_but_one_bare_address() {
    for value in [
        "1.2.3.4:80",
        "1.2.3.4, 5.6.7.8",
        "1.2.3.4 5.6.7.8",
        "[::1]",
        "[::1]:443",
        "fe80::1%eth0",
        "01.2.3.4",
        "1.2.3",
        "1.2.3.256",
        "localhost",
        "1.2.3.4\0",
    ] {
        assert_eq!(parse_client_ip(value), Err(IpError::Invalid), "{value:?}");
    }
}

#[test]
fn errors_do_not_echo_the_value() {
    let error = parse_client_ip("203.0.113.9:80").expect_err("refused");
    assert!(!error.to_string().contains("203.0.113.9"));
    assert!(!format!("{error:?}").contains("203"));
}

#[test]
fn salt_debug_does_not_print_the_salt() {
    assert_eq!(format!("{SALT:?}"), "DailySalt(<redacted>)");
}

#[test]
fn utc_day_converts_to_utc_first() {
    assert_eq!(
        utc_day(datetime!(2026-05-01 23:59:59 UTC)),
        date!(2026 - 05 - 01)
    );
    assert_eq!(
        utc_day(datetime!(2026-05-01 23:30:00 UTC).to_offset(offset!(+02:00))),
        date!(2026 - 05 - 01)
    );
    assert_eq!(
        utc_day(datetime!(2026-05-02 00:00:00 UTC).to_offset(offset!(-05:00))),
        date!(2026 - 05 - 02)
    );
}

proptest! {
    #[test]
    fn ipv6_hash_depends_only_on_the_slash_64(a in any::<u128>(), b in any::<u128>()) {
        let (a, b) = (Ipv6Addr::from(a), Ipv6Addr::from(b));
        prop_assume!(a.to_ipv4_mapped().is_none() && b.to_ipv4_mapped().is_none());
        let same = prefix64(a) == prefix64(b);
        let equal = client_hash(&SALT, IpAddr::V6(a)) == client_hash(&SALT, IpAddr::V6(b));
        prop_assert_eq!(same, equal);
    }

    #[test]
    fn ipv4_never_shares_a_key_with_a_native_ipv6_prefix(
        v4 in any::<u32>(),
        v6 in any::<u128>(),
    ) {
        let v6 = Ipv6Addr::from(v6);
        prop_assume!(v6.to_ipv4_mapped().is_none());
        prop_assert_ne!(
            normalize(IpAddr::V4(Ipv4Addr::from(v4))),
            normalize(IpAddr::V6(v6))
        );
    }

    #[test]
    fn parse_round_trips_every_displayed_address(bits in any::<u128>(), v4 in any::<bool>()) {
        let addr = if v4 {
            IpAddr::V4(Ipv4Addr::from(bits as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(bits))
        };
        prop_assert_eq!(parse_client_ip(&addr.to_string()), Ok(addr));
    }
}
