//! Request extractors: the caller's principal, JSON bodies under a size limit, ids in paths
//! and query strings; and the body budget's middleware, which authenticates a large request
//! before its room is reserved.

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use muster_app::auth::AuthError;
use muster_domain::edit::EditId;
use muster_domain::{ItemId, Kind, LeaseId, Principal};
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
        let caller = if let Some(Authenticated(p)) = parts.extensions.get::<Authenticated>() {
            Caller(*p)
        } else {
            let token = bearer(&parts.headers).ok_or_else(ApiError::unauthenticated)?;
            let peer = parts.extensions.get::<Peer>().map(|p| p.0);
            match state.auth.authenticate_from(token, peer).await {
                Ok(Some(p)) => Caller(p),
                Ok(None) => return Err(ApiError::unauthenticated()),
                Err(AuthError::Unavailable) => return Err(ApiError::unavailable()),
            }
        };
        // The call's span names its principal (tracing on only).
        if let Some(slot) = parts.extensions.get::<crate::spans::CallerSlot>() {
            slot.set(caller.0);
        }
        // The connection's guard: this connection carries a caller's valid token.
        if let Some(accepted) = parts.extensions.get::<TokenAccepted>() {
            accepted.set();
        }
        Ok(caller)
    }
}

/// Set, in a request's extensions, once its token named a principal (the `Caller` extractor):
/// what lets a connection on probation stay (`conn_guard`).
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenAccepted(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl TokenAccepted {
    pub(crate) fn set(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The remote address of the request's connection (set by the server on every request); for
/// admission only, never logged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) std::net::IpAddr);

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

/// What a route's one path parameter names: a lease, an item, an edit or a worker kind.
/// Anything that does not parse names nothing that exists (404 `E_NOT_FOUND`).
pub(crate) trait Named: Sized {
    /// How an error answer names it: "no lease …".
    const WHAT: &'static str;
    fn parse(raw: &str) -> Option<Self>;
}

/// `Named` for ids that wrap a UUID: `Id => "what"`.
macro_rules! named_by_uuid {
    ($($id:ident => $what:literal),+ $(,)?) => {$(
        impl Named for $id {
            const WHAT: &'static str = $what;
            fn parse(raw: &str) -> Option<Self> {
                Uuid::parse_str(raw).ok().map($id)
            }
        }
    )+};
}

named_by_uuid!(LeaseId => "lease", ItemId => "item", EditId => "edit");

impl Named for Kind {
    const WHAT: &'static str = "worker kind";
    fn parse(raw: &str) -> Option<Self> {
        raw.parse().ok()
    }
}

/// Parses `raw` as a `T`, or answers that there is no such thing.
pub(crate) fn named<T: Named>(raw: &str) -> Result<T, ApiError> {
    T::parse(raw).ok_or_else(|| ApiError::not_found(format!("no {} {raw:?}", T::WHAT)))
}

/// axum's extractor `E`, its rejection answered 400 `E_BAD_REQUEST` ("invalid `what`: …").
async fn strictly<E>(parts: &mut Parts, state: &AppState, what: &str) -> Result<E, ApiError>
where
    E: FromRequestParts<AppState>,
    E::Rejection: std::fmt::Display,
{
    E::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::bad_request(format!("invalid {what}: {e}")))
}

/// The value named by the route's one path parameter (`/v1/leases/{id}/…`).
#[derive(Debug)]
pub(crate) struct InPath<T>(pub T);

impl<T: Named + Send> FromRequestParts<AppState> for InPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Path(raw) = strictly::<Path<String>>(parts, state, "path").await?;
        named(&raw).map(InPath)
    }
}

/// The query string as a `T`; one that does not parse is 400 `E_BAD_REQUEST`.
#[derive(Debug)]
pub(crate) struct InQuery<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for InQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Query(q) = strictly::<Query<T>>(parts, state, "query").await?;
        Ok(InQuery(q))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_request_carries_its_connections_remote_address() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = |axum::Extension(Peer(ip)): axum::Extension<Peer>| async move { ip.to_string() };
        let router = axum::Router::new().route("/peer", axum::routing::get(peer));
        let settings = crate::server::ServerSettings::default();
        tokio::spawn(crate::server::serve(
            listener,
            router,
            settings,
            std::future::pending(),
        ));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = "GET /peer HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = String::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            stream.read_to_string(&mut raw),
        )
        .await
        .expect("an answer within 5 s")
        .unwrap();
        assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
        assert!(raw.ends_with("\r\n\r\n127.0.0.1"), "{raw}");
    }

    #[test]
    fn a_lease_id_that_is_not_a_uuid_names_no_lease() {
        let e = named::<LeaseId>("lease-1").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (crate::error::ErrorCode::NotFound, "no lease \"lease-1\"")
        );
    }

    #[test]
    fn an_unknown_worker_kind_names_no_kind() {
        let e = named::<Kind>("harpoon").unwrap_err();
        assert_eq!(e.message, "no worker kind \"harpoon\"");
    }

    #[test]
    fn an_item_id_parses_as_its_uuid() {
        let id = "0190a4a0-0000-7000-8000-000000000001";
        assert_eq!(
            named::<ItemId>(id).unwrap(),
            ItemId(Uuid::parse_str(id).unwrap())
        );
    }
}
