//! The errors of the use cases. The transport maps each to a status and an `E_…` code.

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
    #[error("the lease was superseded by a newer lease or the item was finished by another lease")]
    LeaseLost,
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

impl AppError {
    /// The stable public code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest(_) => "E_BAD_REQUEST",
            AppError::Forbidden(_) => "E_FORBIDDEN",
            AppError::NotFound(_) => "E_NOT_FOUND",
            AppError::LeaseLost => "E_LEASE_LOST",
            AppError::Conflict(_) => "E_CONFLICT",
            AppError::Route(_) => "E_ROUTE",
            AppError::Pow(_) => "E_POW",
            AppError::Target(_) => "E_TARGET",
            AppError::RateLimited { .. } => "E_RATE_LIMITED",
            AppError::Unavailable => "E_UNAVAILABLE",
            AppError::Internal(_) => "E_INTERNAL",
        }
    }
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
        }
    }
}

impl From<muster_domain::listing::ListingError> for AppError {
    fn from(e: muster_domain::listing::ListingError) -> Self {
        AppError::BadRequest(e.to_string())
    }
}
