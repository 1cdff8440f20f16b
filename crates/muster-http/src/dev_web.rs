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
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::server::{ServerSettings, serve as serve_http};

    /// A fresh directory with an index page, a module and a hidden file; removed on drop.
    struct Site(PathBuf);

    impl Site {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!(
                "muster-dev-web-{}-{}",
                std::process::id(),
                uuid::Uuid::now_v7()
            ));
            std::fs::create_dir_all(dir.join("src")).expect("create the site");
            std::fs::write(dir.join("index.html"), "<!doctype html><p>form</p>").expect("write");
            std::fs::write(dir.join("src").join("pow.mjs"), "export {};").expect("write");
            std::fs::write(dir.join(".env"), "SECRET=1").expect("write");
            Self(dir)
        }
    }

    impl Drop for Site {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The API's stand-in: every other path is a 404, like the real router's fallback.
    fn api() -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .fallback(|| async { ApiError::not_found("no such route") })
    }

    /// Serves `api()` through the real server loop with `settings`; returns the address.
    async fn start(settings: ServerSettings) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(serve_http(
            listener,
            api(),
            settings,
            std::future::pending(),
        ));
        addr
    }

    /// One HTTP/1.1 GET; returns the status and the raw response.
    async fn get_raw(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send the request");
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
            .await
            .expect("an answer within 5 s")
            .expect("read the answer");
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, text)
    }

    #[tokio::test]
    async fn the_routes_are_absent_by_default() {
        assert_eq!(ServerSettings::default().dev_web_dir, None);
        let addr = start(ServerSettings::default()).await;
        assert_eq!(get_raw(addr, "/healthz").await.0, 200);
        for path in ["/dev/web", "/dev/web/", "/dev/web/index.html"] {
            let (status, raw) = get_raw(addr, path).await;
            assert_eq!(status, 404, "{path}: {raw}");
            assert!(raw.contains("E_NOT_FOUND"), "{path}: {raw}");
        }
    }

    #[tokio::test]
    async fn the_directory_is_served_when_given() {
        let site = Site::new();
        let addr = start(ServerSettings {
            dev_web_dir: Some(site.0.clone()),
            ..ServerSettings::default()
        })
        .await;
        let (status, raw) = get_raw(addr, "/dev/web/").await;
        assert_eq!(status, 200, "{raw}");
        assert!(raw.contains("<p>form</p>"), "{raw}");
        assert!(raw.contains("text/html; charset=utf-8"), "{raw}");
        assert!(raw.contains(CONTENT_SECURITY_POLICY), "{raw}");
        assert!(raw.contains("cache-control: no-store"), "{raw}");
        let (status, raw) = get_raw(addr, "/dev/web/src/pow.mjs").await;
        assert_eq!(status, 200, "{raw}");
        assert!(raw.contains("text/javascript"), "{raw}");
        let (status, raw) = get_raw(addr, "/dev/web").await;
        assert_eq!(status, 308, "{raw}");
        assert!(raw.contains("location: /dev/web/"), "{raw}");
        // The API is still there.
        assert_eq!(get_raw(addr, "/healthz").await.0, 200);
    }

    #[tokio::test]
    async fn nothing_outside_the_directory_or_hidden_is_served() {
        let site = Site::new();
        let outside = site.0.with_extension("outside");
        std::fs::write(&outside, "secret").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(&outside, site.0.join("link.txt")).expect("symlink");
        let addr = start(ServerSettings {
            dev_web_dir: Some(site.0.clone()),
            ..ServerSettings::default()
        })
        .await;
        let name = outside
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a name");
        for path in [
            "/dev/web/.env".to_owned(),
            "/dev/web/src/../.env".to_owned(),
            "/dev/web/%2e%2e/".to_owned(),
            format!("/dev/web/..%2f{name}"),
            format!("/dev/web/%2e%2e%2f{name}"),
            "/dev/web/link.txt".to_owned(),
            "/dev/web/missing.js".to_owned(),
            "/dev/web/src/pow.mjs/x".to_owned(),
        ] {
            let (status, raw) = get_raw(addr, &path).await;
            assert_eq!(status, 404, "{path}: {raw}");
            assert!(!raw.contains("secret") && !raw.contains("SECRET"), "{path}");
        }
        let _ = std::fs::remove_file(&outside);
    }

    #[test]
    fn segments_are_plain_names() {
        for ok in ["index.html", "pow-worker.mjs", "a_b.c", "v1"] {
            assert!(allowed_segment(ok), "{ok}");
        }
        for bad in ["", ".", "..", ".env", "a b", "a\\b", "a%2f", "é"] {
            assert!(!allowed_segment(bad), "{bad:?}");
        }
    }

    #[test]
    fn media_types_follow_the_extension() {
        assert_eq!(
            media_type(Path::new("a/pow.mjs")),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(media_type(Path::new("x.wasm")), "application/wasm");
        assert_eq!(media_type(Path::new("x")), "application/octet-stream");
    }
}
