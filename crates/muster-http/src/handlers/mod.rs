//! The handlers: each parses its request with typed extractors (a rejection is the contract's
//! error answer), makes one use-case call, and returns `Result<Json<T>, ApiError>` (or a
//! status with it). Errors are answered by [`ApiError`]'s one table and logged by the request
//! middleware ([`crate::metrics::track`]), not here.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

pub(crate) mod edits;
pub(crate) mod feed;
pub(crate) mod fleet;
pub(crate) mod items;
pub(crate) mod kinds;
pub(crate) mod leases;
pub(crate) mod ops;

/// A JSON answer (`Content-Type: application/json`). A value that cannot be serialised is a
/// 500 `E_INTERNAL` with the reason in the log, never an empty or made-up body.
#[derive(Debug)]
pub(crate) struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.0) {
            Ok(body) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => ApiError::internal(format!("an answer could not be serialised: {e}"))
                .into_response(),
        }
    }
}

/// What most handlers return.
pub(crate) type Answer<T> = Result<Json<T>, ApiError>;

/// The answer of an item operation: with the item spans it made, for the request middleware.
pub(crate) type Spanned<T> = Result<(axum::Extension<crate::trace::ItemSpans>, Json<T>), ApiError>;

/// The answer of a call that sent items back to the queue: with the links to their traces,
/// for the request middleware.
pub(crate) type Replayed<T> =
    Result<(axum::Extension<crate::trace::ReplayLinks>, Json<T>), ApiError>;

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    /// Refuses to be serialised.
    struct Unserialisable;

    impl serde::Serialize for Unserialisable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refused on purpose"))
        }
    }

    #[test]
    fn a_json_answer_is_its_value_with_the_json_content_type() {
        let res = Json(serde_json::json!({"a": 1})).into_response();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            res.headers().get(header::CONTENT_TYPE).unwrap(),
            "application/json"
        );
    }

    #[test]
    fn an_answer_that_cannot_be_serialised_is_a_500_not_an_empty_object() {
        let res = Json(Unserialisable).into_response();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            res.extensions()
                .get::<crate::error::InternalDetail>()
                .map(|d| d.0.as_str()),
            Some("an answer could not be serialised: refused on purpose")
        );
    }
}
