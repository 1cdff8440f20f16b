//! The checks behind Conn's anonymous edit intake (`POST /v1/edits/challenge`,
//! `POST /v1/edits`), as pure functions: no I/O, no async runtime, no clock reads, no
//! randomness source. Time and random bytes are arguments.
//!
//! The contract has five layers, all of which must pass; this crate holds the first four
//! rules, the caller wires them to HTTP and the database:
//!
//! 1. [`pow`]: stateless signed proof-of-work challenges ([`pow::issue`], [`pow::verify`]).
//!    Spending each challenge once is the database's job, keyed by
//!    [`pow::VerifiedChallenge::spend_key`].
//! 2. [`honeypot`]: a non-empty `website` field marks a bot ([`honeypot::is_bot`]); the caller
//!    judges it after every other layer passed and answers as for an accepted proposal, storing
//!    nothing.
//! 3. [`ip`]: the client IP (IPv6 by its /64) hashed with a per-UTC-day random salt
//!    ([`ip::client_hash`]); the caller counts per hash per day. No raw IP is kept.
//! 4. Schema: the request size limit ([`check_request_size`]), the target must be in
//!    `ownership_map.json` ([`ownership::OwnershipMap`]), and the body becomes plain text
//!    ([`text::to_plain_text`]).
//! 5. The review gate lives elsewhere.
//!
//! # Errors
//!
//! Each layer has its own error type; [`IntakeError`] gathers the request-time ones under one
//! type. Which status and `E_…` code a caller gets for each is decided in one place, the
//! transport's error table (muster-http), through the use cases' `AppError`.

pub mod honeypot;
pub mod ip;
pub mod ownership;
pub mod pow;
pub mod text;

pub use honeypot::is_bot;
pub use ip::{DailySalt, IpError, client_hash, parse_client_ip, utc_day};
pub use ownership::{OwnershipError, OwnershipMap, Target, UnknownTarget};
pub use pow::{
    CHALLENGE_TTL, Challenge, ChallengeKey, DEFAULT_DIFFICULTY, PowError, VerifiedChallenge,
    leading_zero_bits, solve,
};
pub use text::{clean_text, is_clean_text, to_plain_text};

/// Largest `POST /v1/edits` request body accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 4096;

/// Why an edit submission was refused at request time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntakeError {
    /// Proof of work refused.
    #[error(transparent)]
    Pow(#[from] PowError),
    /// `X-Client-IP` missing or unparsable.
    #[error(transparent)]
    ClientIp(#[from] IpError),
    /// The request body is larger than [`MAX_REQUEST_BYTES`].
    #[error("request body is {len} bytes, more than the {MAX_REQUEST_BYTES}-byte limit")]
    TooLarge {
        /// The body's length in bytes.
        len: usize,
    },
    /// The target is not in the ownership map.
    #[error(transparent)]
    UnknownTarget(#[from] UnknownTarget),
}

/// Checks a request body's length in bytes against [`MAX_REQUEST_BYTES`] (inclusive).
///
/// # Errors
///
/// [`IntakeError::TooLarge`] for a longer body.
pub const fn check_request_size(len: usize) -> Result<(), IntakeError> {
    if len > MAX_REQUEST_BYTES {
        Err(IntakeError::TooLarge { len })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_of_exactly_4096_bytes_is_accepted() {
        assert_eq!(check_request_size(4096), Ok(()));
        assert_eq!(check_request_size(0), Ok(()));
    }

    #[test]
    fn request_of_4097_bytes_is_too_large() {
        let error = check_request_size(4097).expect_err("too large");
        assert_eq!(error, IntakeError::TooLarge { len: 4097 });
        assert_eq!(
            error.to_string(),
            "request body is 4097 bytes, more than the 4096-byte limit"
        );
    }

    #[test]
    fn intake_errors_show_their_layers_messages() {
        assert_eq!(
            IntakeError::from(PowError::Expired).to_string(),
            "proof-of-work challenge has expired"
        );
        assert_eq!(
            IntakeError::from(UnknownTarget).to_string(),
            "unknown edit target"
        );
    }
}
