//! The one table from error to HTTP status and public `E_…` code.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_app::AppError;
use serde_json::json;

/// An error answer in the contract's shape: `{"error": {"code": "E_…", "message": "…"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `Retry-After` in seconds, when the caller should wait.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "E_BAD_REQUEST", message)
    }

    pub fn unauthenticated() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "E_UNAUTHENTICATED",
            "a valid bearer token is required",
        )
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "E_NOT_FOUND", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "E_TOO_LARGE",
            format!("the request body is over the limit of {limit} bytes"),
        )
    }

    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "E_UNAVAILABLE",
            AppError::Unavailable.to_string(),
        )
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        let status = match &e {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::LeaseLost | AppError::Conflict(_) => StatusCode::CONFLICT,
            AppError::Route(_) | AppError::Target(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AppError::Pow(_) => StatusCode::BAD_REQUEST,
            AppError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            AppError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &e {
            // Internal details go to the log, not to the caller.
            AppError::Internal(detail) => {
                tracing::error!(error = %detail, "internal error");
                "internal error".to_owned()
            }
            other => other.to_string(),
        };
        let mut api = ApiError::new(status, e.code(), message);
        if let AppError::RateLimited { retry_after_secs } = e {
            api.retry_after = Some(retry_after_secs);
        }
        api
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}}).to_string();
        let mut res = (self.status, body).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        res.extensions_mut()
            .insert(crate::metrics::ErrorCode(self.code));
        let unavailable = self.status == StatusCode::SERVICE_UNAVAILABLE;
        if let Some(secs) = self.retry_after.or(unavailable.then_some(1)) {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(e: AppError) -> (u16, &'static str) {
        let a = ApiError::from(e);
        (a.status.as_u16(), a.code)
    }

    #[test]
    fn every_use_case_error_has_the_contracts_status_and_code() {
        assert_eq!(
            mapped(AppError::BadRequest("x".into())),
            (400, "E_BAD_REQUEST")
        );
        assert_eq!(
            mapped(AppError::Forbidden("x".into())),
            (403, "E_FORBIDDEN")
        );
        assert_eq!(mapped(AppError::NotFound("x".into())), (404, "E_NOT_FOUND"));
        assert_eq!(mapped(AppError::LeaseLost), (409, "E_LEASE_LOST"));
        assert_eq!(mapped(AppError::Conflict("x".into())), (409, "E_CONFLICT"));
        assert_eq!(mapped(AppError::Route("x".into())), (422, "E_ROUTE"));
        assert_eq!(mapped(AppError::Target("x".into())), (422, "E_TARGET"));
        assert_eq!(mapped(AppError::Pow("x".into())), (400, "E_POW"));
        assert_eq!(
            mapped(AppError::RateLimited {
                retry_after_secs: 5
            }),
            (429, "E_RATE_LIMITED")
        );
        assert_eq!(mapped(AppError::Unavailable), (503, "E_UNAVAILABLE"));
        assert_eq!(mapped(AppError::Internal("x".into())), (500, "E_INTERNAL"));
    }

    #[test]
    fn internal_details_are_not_shown_to_the_caller() {
        let a = ApiError::from(AppError::Internal(
            "relation core.items: secret detail".into(),
        ));
        assert_eq!(a.message, "internal error");
    }
}
