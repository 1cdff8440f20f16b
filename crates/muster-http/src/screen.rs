//! The transport's input screen: what is refused before any handler sees it. A string
//! PostgreSQL cannot store (U+0000, in `text` and `jsonb` alike) anywhere in a JSON body (the
//! body extractor asks [`json_has_nul`]), the path or the query, and a path whose
//! percent-encoding is malformed or does not decode to UTF-8 (the [`uri`] middleware, before
//! routing).
//!
//! Invariant: such a request is answered 400 `E_BAD_REQUEST` in the contract's JSON shape,
//! whatever the field or the route, and writes nothing.
//!
//! Why it exists: checked one field at a time, a field or route added later would slip through
//! and PostgreSQL would answer a 500; one screen in front of them all cannot be forgotten.

use axum::body::Body;
use axum::http::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Whether a JSON text holds the escape `\u0000` in a string (a key or a value). JSON cannot
/// carry a raw U+0000 (control characters must be escaped), so this is the only way one
/// arrives; an escaped backslash followed by `u0000` is six plain characters and passes.
pub(crate) fn json_has_nul(text: &[u8]) -> bool {
    let mut backslashes = 0usize;
    for (i, &b) in text.iter().enumerate() {
        if b == b'\\' {
            backslashes += 1;
            continue;
        }
        if b == b'u' && backslashes % 2 == 1 && text[i + 1..].starts_with(b"0000") {
            return true;
        }
        backslashes = 0;
    }
    false
}

/// The error for a string PostgreSQL cannot store.
pub(crate) fn nul_refused() -> ApiError {
    ApiError::bad_request("a string holds U+0000, which cannot be stored")
}

/// Why a URI is refused, if it is.
pub(crate) fn uri_fault(path: &str, query: Option<&str>) -> Option<ApiError> {
    let decoded = match percent_decode(path) {
        Some(bytes) => bytes,
        None => {
            return Some(ApiError::bad_request(
                "the path holds a malformed percent-encoding",
            ));
        }
    };
    if String::from_utf8(decoded).is_err() {
        return Some(ApiError::bad_request(
            "the path does not percent-decode to UTF-8",
        ));
    }
    let nul = |s: &str| s.contains('\0') || s.contains("%00");
    (nul(path) || query.is_some_and(nul)).then(nul_refused)
}

/// `raw` with every `%XX` decoded; `None` when a `%` is not followed by two hex digits.
fn percent_decode(raw: &str) -> Option<Vec<u8>> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Middleware: a request whose URI is refused is answered before routing.
pub(crate) async fn uri(req: Request<Body>, next: Next) -> Response {
    match uri_fault(req.uri().path(), req.uri().query()) {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    }
}

#[cfg(test)]
mod tests;
