//! The errors of the use cases. The transport maps each to a status and an `E_…` code, in
//! its one table (`muster_http::error::ErrorCode`); nothing here spells a code.

use muster_domain::TransitionError;

use crate::ports::StoreError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The item's working record and its ledger entries were archived out of Logbook.
    #[error("{0}")]
    Gone(String),
    #[error("the lease was superseded by a newer lease or the item was finished by another lease")]
    LeaseLost,
    /// A lease past its kind's maximum run time (`E_LEASE_LOST`, naming the limit).
    #[error("{0}")]
    TimedOut(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Route(String),
    #[error("{0}")]
    Pow(String),
    #[error("{0}")]
    Target(String),
    #[error("the daily submission limit for this client is reached")]
    RateLimited { retry_after_secs: u64 },
    #[error("Logbook is unavailable, try again shortly")]
    Unavailable,
    #[error("internal error")]
    Internal(String),
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(_) => AppError::Unavailable,
            StoreError::Internal(m) => AppError::Internal(m),
        }
    }
}

impl From<TransitionError> for AppError {
    fn from(e: TransitionError) -> Self {
        match e {
            TransitionError::LeaseLost => AppError::LeaseLost,
            TransitionError::Conflict => AppError::Conflict(e.to_string()),
            TransitionError::Forbidden { .. } | TransitionError::WrongWorker => {
                AppError::Forbidden(e.to_string())
            }
            TransitionError::InvalidTransition { .. } | TransitionError::NotLeasable(_) => {
                AppError::Conflict(e.to_string())
            }
            TransitionError::TimedOut { .. } => AppError::TimedOut(e.to_string()),
        }
    }
}

impl From<muster_domain::listing::ListingError> for AppError {
    fn from(e: muster_domain::listing::ListingError) -> Self {
        AppError::BadRequest(e.to_string())
    }
}

/// The edit intake's request-time refusals, each as the use-case error of its layer.
impl From<muster_antispam::IntakeError> for AppError {
    fn from(e: muster_antispam::IntakeError) -> Self {
        use muster_antispam::IntakeError;
        match e {
            IntakeError::Pow(_) => AppError::Pow(e.to_string()),
            IntakeError::ClientIp(_) | IntakeError::TooLarge { .. } => {
                AppError::BadRequest(e.to_string())
            }
            IntakeError::UnknownTarget(_) => AppError::Target(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use muster_antispam::{IntakeError, IpError, PowError, UnknownTarget};

    use super::*;

    #[test]
    fn a_refused_proof_of_work_is_a_pow_error() {
        assert_eq!(
            AppError::from(IntakeError::from(PowError::Expired)),
            AppError::Pow(PowError::Expired.to_string())
        );
    }

    #[test]
    fn a_bad_client_ip_is_a_bad_request() {
        assert_eq!(
            AppError::from(IntakeError::from(IpError::Empty)),
            AppError::BadRequest(IpError::Empty.to_string())
        );
    }

    #[test]
    fn a_body_over_the_limit_is_a_bad_request_naming_the_limit() {
        assert_eq!(
            AppError::from(IntakeError::TooLarge { len: 4097 }),
            AppError::BadRequest(
                "request body is 4097 bytes, more than the 4096-byte limit".into()
            )
        );
    }

    #[test]
    fn an_unknown_target_is_a_target_error() {
        assert!(matches!(
            AppError::from(IntakeError::from(UnknownTarget)),
            AppError::Target(_)
        ));
    }
}
