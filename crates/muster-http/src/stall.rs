//! A connection whose peer takes no byte for a while is closed: [`WriteStall`] wraps a
//! connection's socket and fails a write that has waited `limit` for the socket to take anything.
//! Without it a live-feed subscriber that stops reading altogether (a frozen client whose
//! connection stays up) is never cut loose: hyper stops polling an answer whose socket takes
//! nothing, so the feed's slow-subscriber rule, which acts when the stream is next written,
//! never runs, and the socket's send buffer (kernel memory, charged to the pod) stays full.
//! A peer that reads slowly but reads is not affected: every byte taken restarts the wait.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A socket whose writes fail once one has waited `limit` without the peer taking a byte.
#[derive(Debug)]
pub(crate) struct WriteStall<T> {
    inner: T,
    limit: Duration,
    /// Set while a write waits; allocated at the first wait only (most connections never wait).
    deadline: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl<T> WriteStall<T> {
    pub(crate) fn new(inner: T, limit: Duration) -> Self {
        WriteStall {
            inner,
            limit,
            deadline: None,
            waiting: false,
        }
    }

    /// What a write that found the socket full answers: still waiting, or the error that closes
    /// the connection once the wait has lasted `limit`.
    fn wait<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let at = Instant::now() + self.limit;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if !self.waiting {
            self.waiting = true;
            deadline.as_mut().reset(at);
        }
        match deadline.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                tracing::info!(
                    stall_s = self.limit.as_secs_f64(),
                    "closing a connection whose peer took no byte for the write-stall limit"
                );
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer took no byte within the write-stall limit",
                )))
            }
        }
    }

    fn written<R>(&mut self, r: Poll<io::Result<R>>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => self.wait(cx),
            ready => {
                self.waiting = false;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteStall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteStall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.written(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.written(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.written(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A peer that never reads: a duplex pipe of 64 bytes whose other end is kept, unread.
    fn unread_pipe(
        limit: Duration,
    ) -> (WriteStall<tokio::io::DuplexStream>, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(64);
        (WriteStall::new(ours, limit), theirs)
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_takes_nothing_of_fails_after_the_limit() {
        let (mut w, _peer) = unread_pipe(Duration::from_secs(30));
        let started = Instant::now();
        let err = w.write_all(&[0; 1024]).await.unwrap_err();
        assert_eq!(
            (err.kind(), started.elapsed()),
            (io::ErrorKind::TimedOut, Duration::from_secs(30))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_keeps_taking_bytes_is_never_cut_however_long_the_write() {
        let (mut w, mut peer) = unread_pipe(Duration::from_secs(30));
        // The peer takes 64 bytes every 20 s: the whole write takes 300 s, no wait 30 s.
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while got.len() < 1024 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                let n = tokio::io::AsyncReadExt::read(&mut peer, &mut buf)
                    .await
                    .unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            got.len()
        });
        w.write_all(&[7; 1024]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_socket_takes_at_once_sets_no_deadline() {
        let (mut w, _peer) = unread_pipe(Duration::from_secs(30));
        w.write_all(&[1; 64]).await.unwrap();
        assert!(w.deadline.is_none());
    }
}
