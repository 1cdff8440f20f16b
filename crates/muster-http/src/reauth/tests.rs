use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use axum::body::Body;
use http_body_util::BodyExt;
use hyper::body::Bytes;

use super::*;

/// Resolves every token to Conn while `valid`, else to nobody.
struct Flip(AtomicBool);

#[async_trait]
impl Authenticator for Flip {
    async fn authenticate(&self, _token: &str) -> Result<Option<Principal>, AuthError> {
        Ok(self.0.load(Ordering::SeqCst).then_some(Principal::Conn))
    }
}

/// A streaming answer that never ends on its own.
fn endless() -> Response {
    let stream = futures_util::stream::pending::<Result<Bytes, std::convert::Infallible>>();
    Response::new(Body::from_stream(stream))
}

#[tokio::test]
async fn the_stream_ends_once_its_token_is_no_longer_valid() {
    let auth = Arc::new(Flip(AtomicBool::new(true)));
    let res = until_token_invalid(
        endless(),
        auth.clone(),
        "t".into(),
        Principal::Conn,
        Duration::from_millis(20),
    );
    let mut body = res.into_body();
    // Still valid: still open after several checks.
    let open = tokio::time::timeout(Duration::from_millis(150), body.frame()).await;
    assert!(open.is_err(), "the stream ended while its token was valid");
    auth.0.store(false, Ordering::SeqCst);
    let ended = tokio::time::timeout(Duration::from_secs(2), body.frame()).await;
    assert!(matches!(ended, Ok(None)), "the stream did not end");
}
