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
//! IPv6 (compressed forms and an IPv4 tail allowed). Refused: an
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
mod tests;
