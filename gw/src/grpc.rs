//! The little of gRPC a transparent proxy needs: a status as a
//! trailers-only response, and the caller's deadline (`grpc-timeout`).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;

/// Any error a response body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every response border-gw sends.
pub type RespBody = UnsyncBoxBody<Bytes, BoxError>;

/// `status` as a gRPC trailers-only response.
pub fn status(status: tonic::Status) -> hyper::Response<RespBody> {
    status.into_http::<RespBody>()
}

/// The caller's deadline: `grpc-timeout` is at most 8 digits and a unit
/// (H, M, S, m, u, n). `None` when absent; an error when malformed.
pub fn timeout(headers: &hyper::HeaderMap) -> Result<Option<Duration>, String> {
    let Some(v) = headers.get("grpc-timeout") else {
        return Ok(None);
    };
    let s = v
        .to_str()
        .map_err(|_| "grpc-timeout is not ASCII".to_string())?;
    let bad = || format!("grpc-timeout {s:?} is not 1..8 digits and a unit (H M S m u n)");
    if s.len() < 2 || s.len() > 9 {
        return Err(bad());
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let d = match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return Err(bad()),
    };
    Ok(Some(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &str) -> Result<Option<Duration>, String> {
        let mut h = hyper::HeaderMap::new();
        h.insert("grpc-timeout", v.parse().unwrap());
        timeout(&h)
    }

    #[test]
    fn grpc_timeouts_parse_every_unit_and_refuse_garbage() {
        assert_eq!(timeout(&hyper::HeaderMap::new()), Ok(None));
        assert_eq!(t("1500m"), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(t("2S"), Ok(Some(Duration::from_secs(2))));
        assert_eq!(t("1H"), Ok(Some(Duration::from_secs(3600))));
        assert_eq!(t("7u"), Ok(Some(Duration::from_micros(7))));
        for bad in ["", "m", "12", "1x", "123456789S", "-1S"] {
            assert!(t(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_status_is_a_trailers_only_grpc_response() {
        let r = status(tonic::Status::unavailable("no tunnel"));
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "14");
        assert_eq!(r.headers()["grpc-message"], "no%20tunnel");
        assert_eq!(r.headers()["content-type"], "application/grpc");
    }
}

/// A forwarded response body whose stream breaks (the tunnel or the other
/// gateway went away mid-call) ends with an UNAVAILABLE status in its
/// trailers, naming what broke, instead of a reset stream.
#[derive(Debug)]
pub struct EndsWithStatus<B> {
    inner: B,
    what: String,
    done: bool,
}

impl<B> EndsWithStatus<B> {
    /// Wraps `inner`; `what` names the far end for the message.
    pub fn new(inner: B, what: String) -> EndsWithStatus<B> {
        EndsWithStatus {
            inner,
            what,
            done: false,
        }
    }
}

impl<B> hyper::body::Body for EndsWithStatus<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        use std::task::Poll;
        if self.done {
            return Poll::Ready(None);
        }
        match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                let st = tonic::Status::unavailable(format!(
                    "border-gw: {} closed mid-call: {e}",
                    self.what
                ));
                tracing::warn!("call broken: {}", st.message());
                let mut trailers = hyper::HeaderMap::new();
                match st.add_header(&mut trailers) {
                    Ok(()) => Poll::Ready(Some(Ok(hyper::body::Frame::trailers(trailers)))),
                    Err(_) => Poll::Ready(None),
                }
            }
            other => other.map_err(|e| -> BoxError { e.to_string().into() }),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }
}
