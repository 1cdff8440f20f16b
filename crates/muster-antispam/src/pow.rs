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

impl PowError {
    /// Stable error code: `E_POW` for every variant.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        "E_POW"
    }
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
mod tests {
    use proptest::prelude::*;
    use time::macros::datetime;

    use super::*;

    const KEY: ChallengeKey = ChallengeKey::from_bytes([7; 32]);
    const SEED: [u8; 16] = [0xa5; 16];
    const T0: OffsetDateTime = datetime!(2026-05-01 12:00:00 UTC);

    fn token_at(difficulty: u8) -> String {
        issue(&KEY, T0, difficulty, SEED).token
    }

    /// The reference solver's nonce for `token` at `difficulty`.
    fn solved(token: &str, difficulty: u8) -> String {
        solve(token, difficulty, 1 << 20).expect("a nonce within 2^20 tries")
    }

    /// A nonce whose work digest has fewer than `difficulty` leading zero bits.
    fn unsolved(token: &str, difficulty: u8) -> String {
        (0u64..)
            .map(|n| n.to_string())
            .find(|n| leading_zero_bits(&work_digest(token, n)) < u32::from(difficulty))
            .expect("some nonce fails")
    }

    fn malformed(reason: &'static str) -> PowError {
        PowError::Malformed { reason }
    }

    #[test]
    fn issued_solved_challenge_verifies_at_difficulty_8() {
        let challenge = issue(&KEY, T0, 8, SEED);
        let nonce = solved(&challenge.token, 8);
        let verified = verify(&KEY, &challenge.token, &nonce, T0).expect("verifies");
        assert_eq!(verified.expires_at, datetime!(2026-05-01 12:05:00 UTC));
        assert_eq!(
            verified.spend_key,
            *blake3::hash(challenge.token.as_bytes()).as_bytes()
        );
    }

    #[test]
    fn token_has_the_documented_layout() {
        let challenge = issue(&KEY, T0, 20, [0x01; 16]);
        let payload = format!("{:016x}14{}", T0.unix_timestamp(), "01".repeat(16));
        let fields = Fields {
            issued_at: T0.unix_timestamp(),
            difficulty: 20,
            seed: [0x01; 16],
        };
        let mut encoding = Vec::new();
        encoding.extend_from_slice(&[0, 0, 0, 13]);
        encoding.extend_from_slice(b"muster-pow-v1");
        encoding.extend_from_slice(&[0, 0, 0, 1, 1]);
        encoding.extend_from_slice(&[0, 0, 0, 8]);
        encoding.extend_from_slice(&T0.unix_timestamp().to_be_bytes());
        encoding.extend_from_slice(&[0, 0, 0, 1, 20]);
        encoding.extend_from_slice(&[0, 0, 0, 16]);
        encoding.extend_from_slice(&[0x01; 16]);
        assert_eq!(fields.mac_encoding(), encoding);
        let mac = blake3::keyed_hash(&[7; 32], &encoding).to_hex();
        assert_eq!(challenge.token, format!("v1.{payload}.{mac}"));
        assert_eq!(challenge.token.len(), 118);
        assert_eq!(TOKEN_LEN, 118);
    }

    #[test]
    fn challenge_reports_difficulty_and_expiry_five_minutes_after_issue() {
        let challenge = issue(&KEY, T0, DEFAULT_DIFFICULTY, SEED);
        assert_eq!(challenge.difficulty, 21);
        assert_eq!(challenge.expires_at, datetime!(2026-05-01 12:05:00 UTC));
    }

    #[test]
    fn issue_time_is_truncated_to_whole_seconds() {
        let fraction = datetime!(2026-05-01 12:00:00.999 UTC);
        assert_eq!(issue(&KEY, fraction, 8, SEED), issue(&KEY, T0, 8, SEED));
    }

    #[test]
    fn token_with_a_flipped_character_fails_bad_signature() {
        let token = token_at(8);
        let nonce = solved(&token, 8);
        for index in [3, 20, 60, 117] {
            let mut bytes = token.clone().into_bytes();
            bytes[index] = if bytes[index] == b'0' { b'1' } else { b'0' };
            let flipped = String::from_utf8(bytes).expect("ascii");
            assert_eq!(
                verify(&KEY, &flipped, &nonce, T0),
                Err(PowError::BadSignature),
                "index {index}"
            );
        }
    }

    #[test]
    fn token_with_lowered_difficulty_and_old_mac_fails_bad_signature() {
        let token = token_at(24);
        let (mut fields, mac) = parse_token(&token).expect("parses");
        fields.difficulty = 0;
        let mut forged = String::from("v1.");
        push_hex(&mut forged, &fields.payload());
        forged.push('.');
        push_hex(&mut forged, &mac);
        assert_eq!(verify(&KEY, &forged, "0", T0), Err(PowError::BadSignature));
    }

    #[test]
    fn token_signed_with_another_key_fails_bad_signature() {
        let token = issue(&ChallengeKey::from_bytes([8; 32]), T0, 0, SEED).token;
        assert_eq!(verify(&KEY, &token, "0", T0), Err(PowError::BadSignature));
    }

    #[test]
    fn challenge_is_valid_one_nanosecond_before_expiry() {
        let token = token_at(0);
        let now = T0 + CHALLENGE_TTL - Duration::nanoseconds(1);
        assert!(verify(&KEY, &token, "0", now).is_ok());
    }

    #[test]
    fn challenge_expires_exactly_five_minutes_after_issue() {
        let token = token_at(0);
        assert_eq!(
            verify(&KEY, &token, "0", T0 + CHALLENGE_TTL),
            Err(PowError::Expired)
        );
    }

    #[test]
    fn challenge_issued_thirty_seconds_ahead_is_accepted() {
        let token = token_at(0);
        assert!(verify(&KEY, &token, "0", T0 - CLOCK_SKEW).is_ok());
    }

    #[test]
    fn challenge_issued_more_than_thirty_seconds_ahead_is_not_yet_valid() {
        let token = token_at(0);
        let now = T0 - CLOCK_SKEW - Duration::nanoseconds(1);
        assert_eq!(verify(&KEY, &token, "0", now), Err(PowError::NotYetValid));
    }

    #[test]
    fn bad_signature_is_reported_before_expiry() {
        let mut token = token_at(0);
        let last = if token.ends_with('0') { "1" } else { "0" };
        token.replace_range(TOKEN_LEN - 1.., last);
        assert_eq!(
            verify(&KEY, &token, "0", T0 + Duration::days(1)),
            Err(PowError::BadSignature)
        );
    }

    #[test]
    fn expiry_is_reported_before_a_malformed_nonce() {
        let token = token_at(0);
        assert_eq!(
            verify(&KEY, &token, "x", T0 + CHALLENGE_TTL),
            Err(PowError::Expired)
        );
    }

    #[test]
    fn malformed_nonces_are_refused() {
        let token = token_at(0);
        let too_long = "1".repeat(21);
        for nonce in ["", too_long.as_str(), "12a", "-1", "+1", " 1", "1 ", "١"] {
            assert!(
                matches!(
                    verify(&KEY, &token, nonce, T0),
                    Err(PowError::Malformed { .. })
                ),
                "nonce {nonce:?}"
            );
        }
    }

    #[test]
    fn twenty_digit_nonce_with_leading_zeros_is_well_formed() {
        let token = token_at(0);
        assert!(verify(&KEY, &token, "00000000000000000000", T0).is_ok());
        assert!(verify(&KEY, &token, "99999999999999999999", T0).is_ok());
    }

    #[test]
    fn nonce_with_too_little_work_fails_insufficient_work() {
        let token = token_at(12);
        let nonce = unsolved(&token, 12);
        let found = leading_zero_bits(&work_digest(&token, &nonce));
        assert_eq!(
            verify(&KEY, &token, &nonce, T0),
            Err(PowError::InsufficientWork {
                required: 12,
                found
            })
        );
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let token = token_at(0);
        let upper = token.to_ascii_uppercase().replacen("V1.", "v1.", 1);
        let v2 = token.replacen("v1.", "v2.", 1);
        let no_dot = format!("v1.{}0{}", &token[3..53], &token[54..]);
        let cases = [
            ("", "token has the wrong length"),
            (&token[..TOKEN_LEN - 1], "token has the wrong length"),
            (&v2, "token has an unknown version"),
            (&upper, "token is not lowercase hex"),
            (&no_dot, "token lacks its signature"),
        ];
        for (bad, reason) in cases {
            assert_eq!(
                verify(&KEY, bad, "0", T0),
                Err(malformed(reason)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn uppercase_hex_token_is_refused_so_each_challenge_has_one_spelling() {
        let token = token_at(0);
        let upper = format!("v1.{}", token[3..].to_ascii_uppercase());
        assert_eq!(
            verify(&KEY, &upper, "0", T0),
            Err(malformed("token is not lowercase hex"))
        );
    }

    #[test]
    fn non_ascii_token_of_the_right_length_is_malformed() {
        let token = format!("v1.{}é", &token_at(0)[3..TOKEN_LEN - 2]);
        assert_eq!(token.len(), TOKEN_LEN);
        assert_eq!(
            verify(&KEY, &token, "0", T0),
            Err(malformed("token is not lowercase hex"))
        );
    }

    #[test]
    fn different_seeds_give_different_tokens_and_spend_keys() {
        let a = issue(&KEY, T0, 0, [1; 16]).token;
        let b = issue(&KEY, T0, 0, [2; 16]).token;
        assert_ne!(a, b);
        let spend = |t: &str| verify(&KEY, t, "0", T0).expect("verifies").spend_key;
        assert_ne!(spend(&a), spend(&b));
    }

    #[test]
    fn every_error_has_code_e_pow() {
        let errors = [
            malformed("x"),
            PowError::BadSignature,
            PowError::Expired,
            PowError::NotYetValid,
            PowError::InsufficientWork {
                required: 1,
                found: 0,
            },
        ];
        for error in errors {
            assert_eq!(error.code(), "E_POW");
        }
    }

    #[test]
    fn error_messages_are_distinct() {
        assert_eq!(
            malformed("nonce must be decimal digits").to_string(),
            "malformed proof of work: nonce must be decimal digits"
        );
        assert_eq!(
            PowError::BadSignature.to_string(),
            "proof-of-work challenge has a bad signature"
        );
        assert_eq!(
            PowError::Expired.to_string(),
            "proof-of-work challenge has expired"
        );
        assert_eq!(
            PowError::NotYetValid.to_string(),
            "proof-of-work challenge is not valid yet"
        );
        assert_eq!(
            PowError::InsufficientWork {
                required: 20,
                found: 3
            }
            .to_string(),
            "insufficient proof of work: 3 leading zero bits, 20 required"
        );
    }

    #[test]
    fn key_debug_does_not_print_the_key() {
        let debug = format!("{:?}", ChallengeKey::from_bytes([0xab; 32]));
        assert_eq!(debug, "ChallengeKey(<redacted>)");
    }

    #[test]
    fn leading_zero_bits_of_crafted_digests() {
        let mut digest = [0xff; 32];
        digest[0] = 0x00;
        digest[1] = 0x0f;
        assert_eq!(leading_zero_bits(&digest), 12);
        digest[0] = 0x80;
        assert_eq!(leading_zero_bits(&digest), 0);
        digest[0] = 0x01;
        assert_eq!(leading_zero_bits(&digest), 7);
        assert_eq!(leading_zero_bits(&[0; 32]), 256);
        let mut last = [0; 32];
        last[31] = 1;
        assert_eq!(leading_zero_bits(&last), 255);
    }

    #[test]
    fn work_digest_hashes_token_then_nonce() {
        assert_eq!(
            work_digest("v1.ab", "42"),
            *blake3::hash(b"v1.ab42").as_bytes()
        );
    }

    #[test]
    fn solver_counts_from_zero_in_decimal() {
        assert_eq!(solve("anything", 0, 1).as_deref(), Some("0"));
        assert_eq!(solve("anything", 255, 0), None);
    }

    #[test]
    fn solver_returns_the_first_nonce_that_meets_the_difficulty() {
        let token = token_at(8);
        let nonce = solved(&token, 8);
        let n: u64 = nonce.parse().expect("decimal");
        assert_eq!(nonce, n.to_string());
        assert!(leading_zero_bits(&work_digest(&token, &nonce)) >= 8);
        assert!((0..n).all(|m| leading_zero_bits(&work_digest(&token, &m.to_string())) < 8));
    }

    #[test]
    fn decimal_writes_u64_max_in_twenty_digits() {
        let mut buf = [0; MAX_NONCE_DIGITS];
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(1_000, &mut buf), b"1000");
    }

    /// Bit-by-bit reference for `leading_zero_bits`.
    fn reference_leading_zero_bits(digest: &[u8; 32]) -> u32 {
        let mut count = 0;
        for i in 0..256 {
            if digest[i / 8] & (0x80 >> (i % 8)) != 0 {
                break;
            }
            count += 1;
        }
        count
    }

    fn sparse_digest() -> impl Strategy<Value = [u8; 32]> {
        // Mostly zero prefixes, so every count from 0 to 256 is reached.
        (0usize..=32, any::<[u8; 32]>()).prop_map(|(zeros, mut digest)| {
            digest[..zeros].fill(0);
            digest
        })
    }

    proptest! {
        #[test]
        fn leading_zero_bits_agrees_with_bitwise_reference(digest in sparse_digest()) {
            prop_assert_eq!(leading_zero_bits(&digest), reference_leading_zero_bits(&digest));
        }

        #[test]
        fn decimal_agrees_with_to_string(n in any::<u64>()) {
            let mut buf = [0; MAX_NONCE_DIGITS];
            let expected = n.to_string();
            prop_assert_eq!(decimal(n, &mut buf), expected.as_bytes());
        }

        #[test]
        fn issued_tokens_parse_back_to_their_fields(
            secs in -60_000_000_000i64..60_000_000_000,
            difficulty in any::<u8>(),
            seed in any::<[u8; 16]>(),
        ) {
            let at = OffsetDateTime::from_unix_timestamp(secs).expect("in range");
            let token = issue(&KEY, at, difficulty, seed).token;
            let (fields, mac) = parse_token(&token).expect("parses");
            prop_assert_eq!(fields, Fields { issued_at: secs, difficulty, seed });
            prop_assert_eq!(blake3::Hash::from_bytes(mac), fields.mac(&KEY));
            prop_assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'));
        }

        #[test]
        fn any_single_character_change_is_refused(
            index in 0..TOKEN_LEN,
            replacement in "[0-9a-z.]",
        ) {
            let token = token_at(0);
            let mut changed = token.clone();
            changed.replace_range(index..=index, &replacement);
            prop_assume!(changed != token);
            prop_assert!(verify(&KEY, &changed, "0", T0).is_err());
        }
    }
}
