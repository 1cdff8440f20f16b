//! The one table from error to HTTP status and public `E_…` code.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_app::AppError;
use serde_json::json;

/// Every kind of error answer the transport gives. Its HTTP status and its public `E_…` code
/// come from one table, [`ErrorCode::answer`]; nothing else in this crate spells a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    BadRequest,
    /// A method the route does not have: 405, with the code of any malformed request.
    MethodNotAllowed,
    Unauthenticated,
    Forbidden,
    NotFound,
    Gone,
    LeaseLost,
    Conflict,
    Route,
    Target,
    Pow,
    TooLarge,
    RateLimited,
    Unavailable,
    Internal,
}

impl ErrorCode {
    /// THE table: the status and the public code of each kind of error answer.
    pub const fn answer(self) -> (StatusCode, &'static str) {
        match self {
            ErrorCode::BadRequest => (StatusCode::BAD_REQUEST, "E_BAD_REQUEST"),
            ErrorCode::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "E_BAD_REQUEST"),
            ErrorCode::Unauthenticated => (StatusCode::UNAUTHORIZED, "E_UNAUTHENTICATED"),
            ErrorCode::Forbidden => (StatusCode::FORBIDDEN, "E_FORBIDDEN"),
            ErrorCode::NotFound => (StatusCode::NOT_FOUND, "E_NOT_FOUND"),
            ErrorCode::Gone => (StatusCode::GONE, "E_GONE"),
            ErrorCode::LeaseLost => (StatusCode::CONFLICT, "E_LEASE_LOST"),
            ErrorCode::Conflict => (StatusCode::CONFLICT, "E_CONFLICT"),
            ErrorCode::Route => (StatusCode::UNPROCESSABLE_ENTITY, "E_ROUTE"),
            ErrorCode::Target => (StatusCode::UNPROCESSABLE_ENTITY, "E_TARGET"),
            ErrorCode::Pow => (StatusCode::BAD_REQUEST, "E_POW"),
            ErrorCode::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "E_TOO_LARGE"),
            ErrorCode::RateLimited => (StatusCode::TOO_MANY_REQUESTS, "E_RATE_LIMITED"),
            ErrorCode::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "E_UNAVAILABLE"),
            ErrorCode::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "E_INTERNAL"),
        }
    }

    pub const fn status(self) -> StatusCode {
        self.answer().0
    }

    /// The public code, also the `code` label of `muster_http_requests_total`.
    pub const fn as_str(self) -> &'static str {
        self.answer().1
    }
}

impl From<&AppError> for ErrorCode {
    fn from(e: &AppError) -> Self {
        match e {
            AppError::BadRequest(_) => ErrorCode::BadRequest,
            AppError::Forbidden(_) => ErrorCode::Forbidden,
            AppError::NotFound(_) => ErrorCode::NotFound,
            AppError::Gone(_) => ErrorCode::Gone,
            AppError::LeaseLost | AppError::TimedOut(_) => ErrorCode::LeaseLost,
            AppError::Conflict(_) => ErrorCode::Conflict,
            AppError::Route(_) => ErrorCode::Route,
            AppError::Target(_) => ErrorCode::Target,
            AppError::Pow(_) => ErrorCode::Pow,
            AppError::RateLimited { .. } => ErrorCode::RateLimited,
            AppError::Unavailable => ErrorCode::Unavailable,
            AppError::Internal(_) => ErrorCode::Internal,
        }
    }
}

/// An error answer in the contract's shape: `{"error": {"code": "E_…", "message": "…"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// `Retry-After` in seconds, when the caller should wait.
    pub retry_after: Option<u64>,
    /// What went wrong inside, for the log only (never in the answer): logged by the request
    /// middleware ([`crate::metrics::track`]) under the request's span.
    pub detail: Option<String>,
}

/// The inner detail of a 500, left on the response for the request middleware to log.
#[derive(Debug, Clone)]
pub(crate) struct InternalDetail(pub String);

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
            detail: None,
        }
    }

    /// 500 `E_INTERNAL`: the caller reads "internal error", the log reads `detail`.
    pub fn internal(detail: impl Into<String>) -> Self {
        ApiError {
            detail: Some(detail.into()),
            ..Self::new(ErrorCode::Internal, "internal error")
        }
    }

    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn unauthenticated() -> Self {
        Self::new(
            ErrorCode::Unauthenticated,
            "a valid bearer token is required",
        )
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            ErrorCode::TooLarge,
            format!("the request body is over the limit of {limit} bytes"),
        )
    }

    /// 503 `E_UNAVAILABLE` (answered with `Retry-After: 1`).
    pub fn unavailable_because(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    pub fn unavailable() -> Self {
        Self::unavailable_because(AppError::Unavailable.to_string())
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        match e {
            // Internal details go to the log, not to the caller.
            AppError::Internal(detail) => ApiError::internal(detail),
            AppError::RateLimited { retry_after_secs } => ApiError {
                retry_after: Some(retry_after_secs),
                ..ApiError::new(ErrorCode::from(&e), e.to_string())
            },
            other => ApiError::new(ErrorCode::from(&other), other.to_string()),
        }
    }
}

/// The contract's error object, `{"code": "E_…", "message": "…"}`: the `error` of every error
/// answer, and of a refused entry in an answer of many.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
}

impl ErrorBody {
    pub fn of(e: &ApiError) -> Self {
        ErrorBody {
            code: e.code.as_str(),
            message: e.message.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": ErrorBody::of(&self)}).to_string();
        let status = self.code.status();
        let mut res = (status, body).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Left on the response for the metrics layer, which counts answers by code (and
        // logs an internal detail).
        res.extensions_mut().insert(self.code);
        if let Some(detail) = self.detail {
            res.extensions_mut().insert(InternalDetail(detail));
        }
        let unavailable = status == StatusCode::SERVICE_UNAVAILABLE;
        if let Some(secs) = self.retry_after.or(unavailable.then_some(1)) {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

#[cfg(test)]
mod tests;
