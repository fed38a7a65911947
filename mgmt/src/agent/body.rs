//! A response body that holds a guard until it is finished or dropped: a
//! tunnel is busy from a request's start until its response stream ends,
//! whether it ends cleanly, with an error, or because the caller went away.

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};

/// `inner`, with `guard` dropped when the body is.
#[derive(Debug)]
pub struct Guarded<B, G> {
    inner: B,
    guard: Option<G>,
}

impl<B, G> Guarded<B, G> {
    /// Wraps `inner`.
    pub fn new(inner: B, guard: G) -> Guarded<B, G> {
        Guarded {
            inner,
            guard: Some(guard),
        }
    }
}

impl<B: Body + Unpin, G: Unpin> Body for Guarded<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            // The stream is over: the tunnel is free before the body is dropped.
            self.guard = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Count(Arc<AtomicUsize>);
    impl Drop for Count {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn the_guard_goes_when_the_stream_ends_or_the_body_is_dropped() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut b = Guarded::new(
            http_body_util::Full::new(bytes::Bytes::from_static(b"x")),
            Count(dropped.clone()),
        );
        let f = b.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), &b"x"[..]);
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        assert!(b.frame().await.is_none());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(b);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        let b = Guarded::new(
            http_body_util::Empty::<bytes::Bytes>::new(),
            Count(dropped.clone()),
        );
        drop(b);
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
    }
}
