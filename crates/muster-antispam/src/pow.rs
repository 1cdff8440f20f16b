//! Layer 1: stateless, signed proof-of-work challenges.
//!
//! Conn hands out a challenge with [`issue`] (`POST /v1/edits/challenge`); the browser finds a
//! nonce; Conn checks the pair with [`verify`] (`POST /v1/edits`). Nothing is stored between the
//! two calls: the challenge carries its own issue time, difficulty and a random seed, signed
//! with a keyed BLAKE3 MAC. Spending a challenge exactly once is the database's job (another
//! crate): it records [`VerifiedChallenge::spend_key`] atomically and refuses a second use.
//! Time and the random seed are arguments; this module reads no clock and draws no randomness.
//!
//! # Token
//!
//! ```text
//! token   = "v1." payload-hex "." mac-hex
//! payload = issued_at (i64, big-endian, Unix seconds)   8 bytes
//!           difficulty (u8)                              1 byte
//!           seed                                         16 bytes
//! ```
//!
//! Both hex parts are lowercase: `payload-hex` is 50 characters, `mac-hex` 64, so a token is
//! always exactly [`TOKEN_LEN`] (118) printable, URL-safe ASCII characters. Parsing is strict
//! (no uppercase hex, no padding, no whitespace): every challenge has exactly one spelling, so
//! one challenge cannot be spent twice under two spellings of its token.
//!
//! # MAC
//!
//! `mac = blake3::keyed_hash(key, encoding)` where `encoding` is five fields, each written as
//! its length (`u32`, big-endian) followed by its bytes, 59 bytes in all:
//!
//! | # | field        | length | bytes                                   |
//! |---|--------------|--------|-----------------------------------------|
//! | 1 | domain tag   | 13     | ASCII `muster-pow-v1` ([`DOMAIN_TAG`])  |
//! | 2 | version      | 1      | `0x01` ([`TOKEN_VERSION`])              |
//! | 3 | issued_at    | 8      | Unix seconds, `i64` big-endian          |
//! | 4 | difficulty   | 1      | `u8`                                    |
//! | 5 | seed         | 16     | the caller's random bytes               |
//!
//! The length prefixes make the encoding injective, so bytes cannot be moved from one field to
//! another without changing the MAC. The MAC is compared with [`blake3::Hash`]'s constant-time
//! equality.
//!
//! # Time
//!
//! `issued_at` is kept to whole seconds (sub-seconds are dropped, the offset becomes UTC).
//! `expires_at = issued_at + CHALLENGE_TTL` and is **exclusive**: a challenge is valid while
//! `now < expires_at`. A challenge whose `issued_at` is more than [`CLOCK_SKEW`] (30 s) after
//! `now` is refused as not yet valid (exactly 30 s ahead is accepted).
//!
//! # Work
//!
//! The nonce is 1 to 20 ASCII digits (leading zeros allowed: the challenge is spent once, so
//! several spellings of one number buy nothing). The work digest is
//! `BLAKE3(token UTF-8 bytes ‖ nonce UTF-8 bytes)` ([`work_digest`]); it must have at least
//! `difficulty` leading zero bits, counted from the most significant bit of the first byte
//! ([`leading_zero_bits`]). At [`DEFAULT_DIFFICULTY`] (21) that is about two million hashes.
//!
//! # Order of checks in [`verify`]
//!
//! 1. token format → [`PowError::Malformed`];
//! 2. MAC → [`PowError::BadSignature`];
//! 3. time → [`PowError::Expired`] / [`PowError::NotYetValid`];
//! 4. nonce format → [`PowError::Malformed`];
//! 5. work → [`PowError::InsufficientWork`].
//!
//! Every variant has the code `E_POW`.

use std::fmt;

use time::{Duration, OffsetDateTime};

/// Default number of leading zero bits asked of the client: a median solve of about one second
/// in a browser (headless Chromium with the reference solver of `clients/web`; the figures and
/// how to re-measure them are in docs/edit-intake.md).
pub const DEFAULT_DIFFICULTY: u8 = 21;

/// How long a challenge stays valid after its issue time (the end is exclusive).
pub const CHALLENGE_TTL: Duration = Duration::minutes(5);

/// How far in the future a challenge's issue time may lie and still be accepted.
pub const CLOCK_SKEW: Duration = Duration::seconds(30);

/// Domain-separation tag, the first field of the MAC encoding.
pub const DOMAIN_TAG: &[u8] = b"muster-pow-v1";

/// Token format version, the second field of the MAC encoding (the token says `v1.`).
pub const TOKEN_VERSION: u8 = 1;

/// Most digits a nonce may have (`u64::MAX` has 20).
pub const MAX_NONCE_DIGITS: usize = 20;

/// Length in characters of every token.
pub const TOKEN_LEN: usize = PREFIX.len() + 2 * PAYLOAD_LEN + 1 + 2 * MAC_LEN;

const PREFIX: &str = "v1.";
const PAYLOAD_LEN: usize = 8 + 1 + SEED_LEN;
const SEED_LEN: usize = 16;
const MAC_LEN: usize = 32;
const HEX: &[u8; 16] = b"0123456789abcdef";

/// The secret key that signs challenges. Its `Debug` output does not show the key.
#[derive(Clone)]
pub struct ChallengeKey([u8; 32]);

impl ChallengeKey {
    /// Wraps 32 secret bytes (from the deployment's secret store, or random per process).
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for ChallengeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChallengeKey(<redacted>)")
    }
}

/// A freshly issued challenge, as sent to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The signed token (the `challenge` field of the wire contract).
    pub token: String,
    /// Leading zero bits the client must find.
    pub difficulty: u8,
    /// First instant at which the challenge is no longer accepted.
    pub expires_at: OffsetDateTime,
}

/// A challenge whose signature, time window and work all checked out; not yet spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedChallenge {
    /// `BLAKE3(token)`: what the database records to spend the challenge once (it never sees
    /// the raw token). Tokens are canonical, so one challenge has one spend key.
    pub spend_key: [u8; 32],
    /// When the challenge expires; a spent record may be forgotten after this instant.
    pub expires_at: OffsetDateTime,
}

/// Why a proof of work was refused. Every variant has the code `E_POW`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PowError {
    /// The token or the nonce does not have the documented form.
    #[error("malformed proof of work: {reason}")]
    Malformed {
        /// What was wrong, for logs (never echoes the input).
        reason: &'static str,
    },
    /// The token's MAC does not match its fields.
    #[error("proof-of-work challenge has a bad signature")]
    BadSignature,
    /// `now` is at or after the challenge's expiry.
    #[error("proof-of-work challenge has expired")]
    Expired,
    /// The challenge was issued more than the allowed clock skew in the future.
    #[error("proof-of-work challenge is not valid yet")]
    NotYetValid,
    /// The work digest has fewer leading zero bits than the challenge asks for.
    #[error("insufficient proof of work: {found} leading zero bits, {required} required")]
    InsufficientWork {
        /// The challenge's difficulty.
        required: u8,
        /// Leading zero bits of the submitted work digest.
        found: u32,
    },
}

/// The signed fields of a challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    issued_at: i64,
    difficulty: u8,
    seed: [u8; SEED_LEN],
}

impl Fields {
    fn payload(&self) -> [u8; PAYLOAD_LEN] {
        let mut out = [0; PAYLOAD_LEN];
        out[..8].copy_from_slice(&self.issued_at.to_be_bytes());
        out[8] = self.difficulty;
        out[9..].copy_from_slice(&self.seed);
        out
    }

    fn from_payload(payload: &[u8; PAYLOAD_LEN]) -> Self {
        let mut issued_at = [0; 8];
        issued_at.copy_from_slice(&payload[..8]);
        let mut seed = [0; SEED_LEN];
        seed.copy_from_slice(&payload[9..]);
        Self {
            issued_at: i64::from_be_bytes(issued_at),
            difficulty: payload[8],
            seed,
        }
    }

    /// The length-prefixed MAC encoding documented in the module docs.
    fn mac_encoding(&self) -> Vec<u8> {
        let fields: [&[u8]; 5] = [
            DOMAIN_TAG,
            &[TOKEN_VERSION],
            &self.issued_at.to_be_bytes(),
            &[self.difficulty],
            &self.seed,
        ];
        let mut out = Vec::with_capacity(59);
        for field in fields {
            let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(field);
        }
        out
    }

    fn mac(&self, key: &ChallengeKey) -> blake3::Hash {
        blake3::keyed_hash(&key.0, &self.mac_encoding())
    }
}

/// Issues a challenge at `issued_at` (truncated to whole seconds) with the given difficulty and
/// random `nonce_seed` (16 bytes from the caller's randomness source).
#[must_use]
pub fn issue(
    key: &ChallengeKey,
    issued_at: OffsetDateTime,
    difficulty: u8,
    nonce_seed: [u8; 16],
) -> Challenge {
    let fields = Fields {
        issued_at: issued_at.unix_timestamp(),
        difficulty,
        seed: nonce_seed,
    };
    let mac = fields.mac(key);
    let mut token = String::with_capacity(TOKEN_LEN);
    token.push_str(PREFIX);
    push_hex(&mut token, &fields.payload());
    token.push('.');
    push_hex(&mut token, mac.as_bytes());
    Challenge {
        token,
        difficulty,
        expires_at: expiry(issued_at.unix_timestamp()),
    }
}

/// `issued_at + CHALLENGE_TTL`, saturating at the end of `time`'s range.
fn expiry(issued_at: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(issued_at)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
        .saturating_add(CHALLENGE_TTL)
}

/// Checks a token and nonce at `now`, in the order given in the module docs.
///
/// # Errors
///
/// A [`PowError`] naming the first check that failed.
pub fn verify(
    key: &ChallengeKey,
    token: &str,
    nonce: &str,
    now: OffsetDateTime,
) -> Result<VerifiedChallenge, PowError> {
    let (fields, mac) = parse_token(token)?;
    if fields.mac(key) != blake3::Hash::from_bytes(mac) {
        return Err(PowError::BadSignature);
    }
    let issued_at =
        OffsetDateTime::from_unix_timestamp(fields.issued_at).map_err(|_| PowError::Malformed {
            reason: "issue time out of range",
        })?;
    let expires_at = issued_at.saturating_add(CHALLENGE_TTL);
    if now >= expires_at {
        return Err(PowError::Expired);
    }
    if issued_at > now.saturating_add(CLOCK_SKEW) {
        return Err(PowError::NotYetValid);
    }
    check_nonce(nonce)?;
    let found = leading_zero_bits(&work_digest(token, nonce));
    if found < u32::from(fields.difficulty) {
        return Err(PowError::InsufficientWork {
            required: fields.difficulty,
            found,
        });
    }
    Ok(VerifiedChallenge {
        spend_key: *blake3::hash(token.as_bytes()).as_bytes(),
        expires_at,
    })
}

/// Splits and decodes a token; checks form only, not the MAC.
fn parse_token(token: &str) -> Result<(Fields, [u8; MAC_LEN]), PowError> {
    let malformed = |reason| PowError::Malformed { reason };
    if token.len() != TOKEN_LEN {
        return Err(malformed("token has the wrong length"));
    }
    let rest = token
        .strip_prefix(PREFIX)
        .ok_or(malformed("token has an unknown version"))?;
    let (payload_hex, mac_hex) = rest
        .split_once('.')
        .ok_or(malformed("token lacks its signature"))?;
    let mut payload = [0; PAYLOAD_LEN];
    let mut mac = [0; MAC_LEN];
    if !decode_hex(payload_hex, &mut payload) || !decode_hex(mac_hex, &mut mac) {
        return Err(malformed("token is not lowercase hex"));
    }
    Ok((Fields::from_payload(&payload), mac))
}

/// A nonce is 1 to [`MAX_NONCE_DIGITS`] ASCII digits.
fn check_nonce(nonce: &str) -> Result<(), PowError> {
    if nonce.is_empty() || nonce.len() > MAX_NONCE_DIGITS {
        return Err(PowError::Malformed {
            reason: "nonce must have 1 to 20 digits",
        });
    }
    if !nonce.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PowError::Malformed {
            reason: "nonce must be decimal digits",
        });
    }
    Ok(())
}

/// `BLAKE3(token ‖ nonce)` over their UTF-8 bytes: the digest whose leading zeros are the work.
#[must_use]
pub fn work_digest(token: &str, nonce: &str) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(token.as_bytes());
    hasher.update(nonce.as_bytes());
    *hasher.finalize().as_bytes()
}

/// Number of leading zero bits of `digest`, from the most significant bit of its first byte
/// (0 to 256).
#[must_use]
pub fn leading_zero_bits(digest: &[u8; 32]) -> u32 {
    let mut bits = 0;
    for byte in digest {
        if *byte != 0 {
            return bits + byte.leading_zeros();
        }
        bits += 8;
    }
    bits
}

/// The reference solver: tries nonces `0, 1, 2, …` (as decimal strings without leading zeros)
/// and returns the first whose work digest has at least `difficulty` leading zero bits, or
/// `None` after `max_tries` attempts.
#[must_use]
pub fn solve(token: &str, difficulty: u8, max_tries: u64) -> Option<String> {
    let mut prefix = blake3::Hasher::new();
    prefix.update(token.as_bytes());
    let mut buf = [0; MAX_NONCE_DIGITS];
    for n in 0..max_tries {
        let digits = decimal(n, &mut buf);
        let mut hasher = prefix.clone();
        hasher.update(digits);
        if leading_zero_bits(hasher.finalize().as_bytes()) >= u32::from(difficulty) {
            return Some(digits.iter().map(|&d| char::from(d)).collect());
        }
    }
    None
}

/// Writes `n` in decimal at the end of `buf` and returns the digits.
fn decimal(mut n: u64, buf: &mut [u8; MAX_NONCE_DIGITS]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        // `n % 10` is below 10, so the cast cannot truncate.
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
}

/// Decodes lowercase hex of exactly `2 * out.len()` characters; `false` on anything else.
fn decode_hex(hex: &str, out: &mut [u8]) -> bool {
    let hex = hex.as_bytes();
    if hex.len() != 2 * out.len() {
        return false;
    }
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(high), Some(low)) => *byte = (high << 4) | low,
            _ => return false,
        }
    }
    true
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
