//! The audit line of every call through this gateway (docs/fleet.md):
//! one `call` line when the answer ends, with the caller's certificate
//! fingerprint (the original caller's, for a call a pinned peer gateway
//! forwarded, and that gateway's), the appliance, the method and the final
//! gRPC status (from the answer's head or its trailers; `cancelled` when
//! the caller went away first). The client is the connection's claimed
//! address (from a PROXY v2 header, docs/ppv2.md) where it has one, else
//! its measured one; both are on the line as well.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;

use crate::grpc::{BoxError, RespBody};

/// Who called what; logged once, when dropped.
#[derive(Debug)]
pub struct Audit {
    /// The original caller's fingerprint.
    pub caller: Arc<str>,
    /// The pinned peer gateway that forwarded the call, if one did.
    pub via: Option<Arc<str>>,
    /// The appliance named.
    pub appliance: String,
    /// The gRPC method path.
    pub method: String,
    /// The connection's claimed and measured client.
    pub peer: Arc<ppv2_accept::PeerInfo>,
    status: Option<tonic::Code>,
    started: Instant,
}

impl Audit {
    /// A call that just arrived.
    pub fn new(
        caller: Arc<str>,
        via: Option<Arc<str>>,
        appliance: &str,
        method: &str,
        peer: Arc<ppv2_accept::PeerInfo>,
    ) -> Audit {
        Audit {
            caller,
            via,
            appliance: appliance.to_string(),
            method: method.to_string(),
            peer,
            status: None,
            started: Instant::now(),
        }
    }

    fn note(&mut self, headers: &hyper::HeaderMap) {
        if let Some(v) = headers.get("grpc-status") {
            self.status = Some(tonic::Code::from_bytes(v.as_bytes()));
        }
    }

    /// `resp` with its body logging this line when it ends.
    pub fn attach(mut self, resp: hyper::Response<RespBody>) -> hyper::Response<RespBody> {
        self.note(resp.headers());
        resp.map(|inner| Audited { inner, audit: self }.boxed_unsync())
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        let status = self
            .status
            .map_or_else(|| "cancelled".to_string(), |c| format!("{c:?}"));
        tracing::info!(
            caller = %self.caller,
            client = %self.peer.client(),
            claimed = %self.peer.claimed_text(),
            measured = %self.peer.measured,
            via = %self.via.as_deref().unwrap_or("-"),
            appliance = %self.appliance,
            method = %self.method,
            status = %status,
            ms = self.started.elapsed().as_millis() as u64,
            "call"
        );
    }
}

/// A response body that records the status in its trailers.
struct Audited {
    inner: RespBody,
    audit: Audit,
}

impl hyper::body::Body for Audited {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let r = std::pin::Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &r {
            if let Some(t) = frame.trailers_ref() {
                this.audit.note(t);
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
