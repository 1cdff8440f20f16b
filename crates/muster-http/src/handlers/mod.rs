//! The handlers: each translates HTTP into one use-case call and back.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

pub(crate) mod edits;
pub(crate) mod feed;
pub(crate) mod fleet;
pub(crate) mod items;
pub(crate) mod leases;
pub(crate) mod ops;

pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) fn ok_json(status: StatusCode, body: &impl serde::Serialize) -> Response {
    let mut res = (
        status,
        serde_json::to_string(body).unwrap_or_else(|_| "{}".into()),
    )
        .into_response();
    res.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    res
}
