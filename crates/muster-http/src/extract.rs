//! Request extractors: the caller's principal, JSON bodies under a size limit and ids in
//! paths; and the body budget's middleware, which authenticates a large request before its
//! room is reserved.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use muster_app::auth::AuthError;
use muster_domain::Principal;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::budget::BODY_LIMIT;
use crate::error::ApiError;
use crate::state::AppState;

/// The authenticated caller.
#[derive(Debug, Clone, Copy)]
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // Already authenticated by the body budget (a large body is, before its room is
        // reserved): the token is not checked twice.
        if let Some(Authenticated(p)) = parts.extensions.get::<Authenticated>() {
            return Ok(Caller(*p));
        }
        let token = bearer(&parts.headers).ok_or_else(ApiError::unauthenticated)?;
        match state.auth.authenticate(token).await {
            Ok(Some(p)) => Ok(Caller(p)),
            Ok(None) => Err(ApiError::unauthenticated()),
            Err(AuthError::Unavailable) => Err(ApiError::unavailable()),
        }
    }
}

/// The bearer token of `Authorization`, if there is one.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme name is case-insensitive (RFC 7235).
        .and_then(|v| {
            v.split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token)
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The principal of a request the body budget authenticated ([`hold`]).
#[derive(Debug, Clone, Copy)]
struct Authenticated(Principal);

/// Middleware of the body budget ([`crate::budget`]): authenticates a request with a large
/// body and holds its share of the budget until its answer is ready.
pub(crate) async fn hold(
    State(state): State<AppState>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let budget = &state.body_budget;
    let kib = budget.charge(&req);
    if kib == 0 {
        return next.run(req).await;
    }
    // Only a caller with a valid token may take room: anyone else is answered now.
    let (mut parts, body) = req.into_parts();
    let caller = match Caller::from_request_parts(&mut parts, &state).await {
        Ok(Caller(p)) => p,
        Err(e) => return e.into_response(),
    };
    parts.extensions.insert(Authenticated(caller));
    let req = Request::from_parts(parts, body);
    match budget.reserve(kib).await {
        Ok(permit) => {
            let res = next.run(req).await;
            drop(permit);
            res
        }
        Err(e) => e.into_response(),
    }
}

/// A JSON body, read to at most `LIMIT` bytes (refused while reading, never buffered beyond
/// the limit) and parsed strictly into `T`.
#[derive(Debug)]
pub struct JsonBody<T, const LIMIT: usize = BODY_LIMIT>(pub T);

impl<T: DeserializeOwned, const LIMIT: usize> FromRequest<AppState> for JsonBody<T, LIMIT> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let ok = ct
                .to_str()
                .ok()
                .and_then(|s| s.split(';').next())
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
            if !ok {
                return Err(ApiError::bad_request(
                    "Content-Type must be application/json",
                ));
            }
        }
        let bytes = read_limited(req.into_body(), LIMIT, state.body_budget.read_deadline()).await?;
        // Before parsing, so that every field of every body is covered, keys included.
        if crate::screen::json_has_nul(&bytes) {
            return Err(crate::screen::nul_refused());
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// Reads a body up to `limit` bytes; a longer one is refused as soon as it passes the limit,
/// and one that has not arrived whole within `deadline` is answered 503 (a stalled sender
/// holds neither a handler nor its room in the body budget for longer).
pub async fn read_limited(
    body: Body,
    limit: usize,
    deadline: std::time::Duration,
) -> Result<axum::body::Bytes, ApiError> {
    let Ok(read) = tokio::time::timeout(deadline, Limited::new(body, limit).collect()).await else {
        return Err(ApiError::unavailable_because(format!(
            "the request body did not arrive within {} ms",
            deadline.as_millis()
        )));
    };
    match read {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ApiError::too_large(limit))
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "could not read the request body: {e}"
        ))),
    }
}

/// An id in a path: anything that is not a UUID names nothing that exists.
pub(crate) fn path_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found(format!("no {what} {raw:?}")))
}
