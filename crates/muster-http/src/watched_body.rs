//! An answer's body with a watcher beside it: [`Watched`] hands every poll to its [`Watch`]
//! first, which may end the body early, and otherwise is the inner body. The connection guard
//! keeps a request counted as in flight this way; the live feed's token recheck ends a feed
//! whose token was revoked; a feed stream notes each write its peer has yet to take.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};

/// What a [`Watched`] body does beside its inner body.
pub(crate) trait Watch: Send + Unpin + 'static {
    /// Asked before each poll of the inner body: true ends the body there.
    fn ends_body(&mut self, cx: &mut Context<'_>) -> bool;

    /// Told after the inner body handed out a frame.
    fn sent(&mut self) {}
}

/// `inner` with `watch` beside it, as long as the body lives.
pub(crate) fn watched(inner: Body, watch: impl Watch) -> Body {
    Body::new(Watched { inner, watch })
}

struct Watched<W> {
    inner: Body,
    watch: W,
}

impl<W: Watch> HttpBody for Watched<W> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.watch.ends_body(cx) {
            return Poll::Ready(None);
        }
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &frame {
            this.watch.sent();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
