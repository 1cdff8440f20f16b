//! Development only: the files of one directory under `/dev/web/`, on the API's own origin.
//!
//! `muster serve --dev-web-dir clients/web` serves the reference edit form next to a local
//! Muster, so that the page can call `/v1/edits/…` without CORS (docs/edit-intake.md). Off by
//! default: without the flag the routes do not exist and `/dev/web/…` answers 404 like any
//! unknown path. The cluster manifests never set it (checked by `xtask`'s deploy checks).
//!
//! What is served, and what is not:
//!
//! - `GET` and `HEAD` of regular files under the directory; a path naming a directory serves
//!   its `index.html`; `/dev/web` redirects to `/dev/web/`.
//! - The path is checked after percent-decoding: each segment is letters, digits, `_`, `-` and
//!   `.`, and does not start with a dot (no `..`, no hidden files). The file's canonical path
//!   must lie under the directory's (no escape through a symbolic link).
//! - Every answer is `Cache-Control: no-store` and carries a strict Content-Security-Policy:
//!   scripts and workers from this origin only, WebAssembly compilation allowed (the BLAKE3
//!   solver needs it), no inline script or style, no framing. The example form works under
//!   it, which shows Conn the policy the solver needs.
//!
//! The files are read on the blocking pool (small files, a development server).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;

/// Where the directory is served.
pub const PREFIX: &str = "/dev/web";

/// The Content-Security-Policy of every development page.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
     worker-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self' data:; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Largest file served (the biggest of the example's files is a few hundred KiB).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// `router` plus the `/dev/web/` routes when `dir` is given; `router` unchanged otherwise.
pub fn mount(router: Router, dir: Option<&Path>) -> Router {
    let Some(dir) = dir else {
        return router;
    };
    match dir.canonicalize() {
        Ok(root) => {
            tracing::warn!(
                dir = %root.display(),
                "development web directory served under {PREFIX}/ (--dev-web-dir): never in production"
            );
            router.merge(routes(root))
        }
        Err(e) => {
            // The flag's parser checks the directory at startup; it vanished since.
            tracing::error!(dir = %dir.display(), error = %e, "development web directory not served");
            router
        }
    }
}

fn routes(root: PathBuf) -> Router {
    Router::new()
        .route(PREFIX, get(to_index))
        .route(&format!("{PREFIX}/"), get(index))
        .route(&format!("{PREFIX}/{{*path}}"), get(file))
        .with_state(Arc::new(root))
}

async fn to_index() -> Response {
    let mut res = StatusCode::PERMANENT_REDIRECT.into_response();
    res.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/dev/web/"));
    res
}

async fn index(State(root): State<Arc<PathBuf>>) -> Response {
    serve(root, String::new()).await
}

async fn file(State(root): State<Arc<PathBuf>>, UrlPath(path): UrlPath<String>) -> Response {
    serve(root, path).await
}

async fn serve(root: Arc<PathBuf>, path: String) -> Response {
    let found = tokio::task::spawn_blocking(move || read(&root, &path))
        .await
        .ok()
        .flatten();
    match found {
        Some((bytes, content_type)) => {
            let mut res = (StatusCode::OK, Body::from(bytes)).into_response();
            let headers = res.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            );
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            headers.insert(
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            );
            res
        }
        None => ApiError::not_found("no such development file").into_response(),
    }
}

/// Whether one path segment may be served.
fn allowed_segment(segment: &str) -> bool {
    !segment.is_empty()
        && !segment.starts_with('.')
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The file at `path` (relative, `/`-separated) under `root` (canonical), with its media type;
/// `None` for anything not servable.
fn read(root: &Path, path: &str) -> Option<(Vec<u8>, &'static str)> {
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let mut candidate = root.to_path_buf();
    if !trimmed.is_empty() {
        for segment in trimmed.split('/') {
            if !allowed_segment(segment) {
                return None;
            }
            candidate.push(segment);
        }
    }
    let mut real = candidate.canonicalize().ok()?;
    if real.is_dir() {
        real = real.join("index.html").canonicalize().ok()?;
    }
    if !real.starts_with(root) {
        return None;
    }
    let meta = std::fs::metadata(&real).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let bytes = std::fs::read(&real).ok()?;
    Some((bytes, media_type(&real)))
}

fn media_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "wasm" => "application/wasm",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests;
