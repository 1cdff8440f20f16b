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
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
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
