use proptest::prelude::*;
use time::macros::datetime;

use super::*;

const KEY: ChallengeKey = ChallengeKey::from_bytes([7; 32]);
const SEED: [u8; 16] = [0xa5; 16];
const T0: OffsetDateTime = datetime!(2026-05-01 12:00:00 UTC);

fn token_at(difficulty: u8) -> String {
    issue(&KEY, T0, difficulty, SEED).token
}

/// `verify` of an easy challenge issued at T0, answered with `nonce` at `now`.
fn verify_unsolved(nonce: &str, now: OffsetDateTime) -> Result<VerifiedChallenge, PowError> {
    verify(&KEY, &token_at(0), nonce, now)
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
    let now = T0 + CHALLENGE_TTL - Duration::nanoseconds(1);
    assert!(verify_unsolved("0", now).is_ok());
}

#[test]
fn challenge_expires_exactly_five_minutes_after_issue() {
    assert_eq!(
        verify_unsolved("0", T0 + CHALLENGE_TTL),
        Err(PowError::Expired)
    );
}

#[test]
fn challenge_issued_thirty_seconds_ahead_is_accepted() {
    assert!(verify_unsolved("0", T0 - CLOCK_SKEW).is_ok());
}

#[test]
fn challenge_issued_more_than_thirty_seconds_ahead_is_not_yet_valid() {
    let now = T0 - CLOCK_SKEW - Duration::nanoseconds(1);
    assert_eq!(verify_unsolved("0", now), Err(PowError::NotYetValid));
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
    assert_eq!(
        verify_unsolved("x", T0 + CHALLENGE_TTL),
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
