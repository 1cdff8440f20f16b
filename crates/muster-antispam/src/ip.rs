//! Layer 3: the daily-salted client-IP limit, without keeping any IP.
//!
//! Conn sets `X-Client-IP`; [`parse_client_ip`] reads it. The address is reduced to the unit
//! one client controls ([`normalize`]): an IPv4 address is itself, an IPv6 address is its /64
//! prefix (one subscriber usually holds a whole /64), and an IPv4-mapped IPv6 address
//! (`::ffff:a.b.c.d`) is the IPv4 address it maps. [`client_hash`] hashes that unit with a
//! random salt chosen per UTC day ([`utc_day`]); the caller counts submissions per hash per
//! day and refuses past its limit ([`DEFAULT_DAILY_LIMIT`]). Once a day's salt is forgotten its
//! hashes cannot be linked to addresses, nor to the next day's hashes.
//!
//! Nothing in this module keeps, logs or echoes an address: errors carry no part of the input.
//!
//! # Header grammar
//!
//! The header value, with leading and trailing ASCII whitespace trimmed, must be one bare
//! address as [`std::net::IpAddr`] parses it: dotted-quad IPv4 (no leading zeros) or textual
//! IPv6 (compressed forms and an IPv4 tail allowed). Refused, with code `E_BAD_REQUEST`: an
//! empty value, a port (`1.2.3.4:80`), a list (`1.2.3.4, 5.6.7.8`), brackets (`[::1]`), a zone
//! (`fe80::1%eth0`), and anything else. Conn sets the header itself, so there is no reason to be
//! lenient.
//!
//! # Hash
//!
//! `client_hash = blake3::keyed_hash(salt, len(tag) ‖ tag ‖ len(key) ‖ key)` with the tag
//! `muster-ip-v1` ([`DOMAIN_TAG`]), `key` the 16 bytes of [`normalize`], and each `len` a
//! big-endian `u32`.

use std::fmt;
use std::net::IpAddr;

use time::{Date, OffsetDateTime, UtcOffset};

/// Default number of submissions one client hash may make per UTC day.
pub const DEFAULT_DAILY_LIMIT: u32 = 10;

/// Domain-separation tag of [`client_hash`].
pub const DOMAIN_TAG: &[u8] = b"muster-ip-v1";

/// Why an `X-Client-IP` value was refused. Code `E_BAD_REQUEST`; no variant carries the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IpError {
    /// The header value is empty (or only whitespace).
    #[error("X-Client-IP is empty")]
    Empty,
    /// The header value is not a single bare IP address.
    #[error("X-Client-IP is not a single bare IP address")]
    Invalid,
}

impl IpError {
    /// Stable error code: `E_BAD_REQUEST`.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        "E_BAD_REQUEST"
    }
}

/// Parses an `X-Client-IP` header value (see *Header grammar*).
///
/// # Errors
///
/// [`IpError::Empty`] for an empty value, [`IpError::Invalid`] for anything that is not one
/// bare address.
pub fn parse_client_ip(header: &str) -> Result<IpAddr, IpError> {
    let value = header.trim_ascii();
    if value.is_empty() {
        return Err(IpError::Empty);
    }
    value.parse().map_err(|_| IpError::Invalid)
}

/// The 16-byte key of the client unit of `ip`.
///
/// IPv4 (and IPv4-mapped IPv6) gives the IPv4-mapped form `::ffff:a.b.c.d`; other IPv6 gives
/// the address with its last 64 bits zeroed. The two never collide: a masked /64 has zero in
/// bytes 10 and 11, the mapped form has `0xff` there.
#[must_use]
pub fn normalize(ip: IpAddr) -> [u8; 16] {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => {
            let mut octets = v6.octets();
            octets[8..].fill(0);
            octets
        }
    }
}

/// The per-UTC-day random salt. Its `Debug` output does not show the salt.
#[derive(Clone)]
pub struct DailySalt([u8; 32]);

impl DailySalt {
    /// Wraps 32 random bytes drawn by the caller for one UTC day.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for DailySalt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DailySalt(<redacted>)")
    }
}

/// The salted hash of `ip`'s client unit (see *Hash*): what the daily counter is keyed by.
#[must_use]
pub fn client_hash(salt: &DailySalt, ip: IpAddr) -> [u8; 32] {
    let key = normalize(ip);
    let mut hasher = blake3::Hasher::new_keyed(&salt.0);
    for field in [DOMAIN_TAG, &key] {
        let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
        hasher.update(&len.to_be_bytes());
        hasher.update(field);
    }
    *hasher.finalize().as_bytes()
}

/// The UTC calendar day of `now`: which salt and which counter apply.
#[must_use]
pub fn utc_day(now: OffsetDateTime) -> Date {
    now.to_offset(UtcOffset::UTC).date()
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn two_addresses_in_one_ipv6_slash_64_hash_equal() {
        assert_eq!(
            client_hash(&SALT, ip("2001:db8:1:2::1")),
            client_hash(&SALT, ip("2001:db8:1:2:ffff:eeee:dddd:cccc"))
        );
    }

    #[test]
    fn addresses_in_different_ipv6_slash_64s_hash_differently() {
        assert_ne!(
            client_hash(&SALT, ip("2001:db8:1:2::1")),
            client_hash(&SALT, ip("2001:db8:1:3::1"))
        );
    }

    #[test]
    fn ipv4_and_its_mapped_ipv6_hash_equal() {
        assert_eq!(
            client_hash(&SALT, ip("192.0.2.7")),
            client_hash(&SALT, ip("::ffff:192.0.2.7"))
        );
    }

    #[test]
    fn neighbouring_ipv4_addresses_hash_differently() {
        assert_ne!(
            client_hash(&SALT, ip("192.0.2.7")),
            client_hash(&SALT, ip("192.0.2.8"))
        );
    }

    #[test]
    fn different_salts_give_different_hashes() {
        let other = DailySalt::from_bytes([4; 32]);
        assert_ne!(
            client_hash(&SALT, ip("192.0.2.7")),
            client_hash(&other, ip("192.0.2.7"))
        );
    }

    #[test]
    fn client_hash_is_keyed_blake3_of_tag_and_normalized_key() {
        let mut message = vec![0, 0, 0, 12];
        message.extend_from_slice(b"muster-ip-v1");
        message.extend_from_slice(&[0, 0, 0, 16]);
        message.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7]);
        assert_eq!(
            client_hash(&SALT, ip("192.0.2.7")),
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
    fn errors_have_code_e_bad_request_and_do_not_echo_the_value() {
        let error = parse_client_ip("203.0.113.9:80").expect_err("refused");
        assert_eq!(error.code(), "E_BAD_REQUEST");
        assert_eq!(IpError::Empty.code(), "E_BAD_REQUEST");
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
}
