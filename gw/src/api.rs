//! The control-plane listener: mutual TLS (client certificates chained to
//! `tls.client_ca` and pinned in `tls.api_fingerprints`, operators, or
//! `tls.reader_fingerprints`, readers), HTTP/2, every call handed to
//! [`crate::forward`] with the caller's role.
//!
//! `[limits]` (docs/fleet.md): at most `api_connections` open and `handshakes`
//! (`handshakes_per_source` from one source) in progress, a connection
//! beyond is closed at once; TLS and the HTTP/2 client preface within
//! `handshake_timeout_ms`; `streams_per_connection` calls at once on one
//! connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`: a client queues
//! the rest). Each refusal is counted by its limit.
//!
//! Each connection may start with a PROXY v2 header ([`crate::proxied`]):
//! its log lines name the claimed client and the measured peer; one that
//! closes before sending a byte logs nothing.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use ppv2_accept::{ProxiedStream, Sniffed};
use std::future::Future;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::admission::Handshakes;
use crate::forward::Gateway;
use crate::limits::{Limit, Listener};

/// The largest header block a call may send (its metadata).
const MAX_HEADER_LIST: u32 = 64 << 10;

/// The role of a pinned control-plane client, if it is pinned. A pinned
/// peer gateway (`[[peer]]`) is an operator: it forwards the calls it
/// already checked.
fn role_of(cfg: &crate::config::GwConfig, fingerprint: &str) -> Option<conf::ClientRole> {
    if cfg.api_fingerprints.iter().any(|f| f == fingerprint) || cfg.is_peer(fingerprint) {
        Some(conf::ClientRole::Operator)
    } else if cfg.reader_fingerprints.iter().any(|f| f == fingerprint) {
        Some(conf::ClientRole::Reader)
    } else {
        None
    }
}

type Tls = tokio_rustls::server::TlsStream<ProxiedStream>;

/// TLS, the pinned role and the caller's fingerprint (for the audit line).
async fn open(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: ProxiedStream,
    gw: &Gateway,
) -> Result<(Tls, conf::ClientRole, Arc<str>), String> {
    let tls = acceptor
        .accept(tcp)
        .await
        .map_err(|e| format!("TLS handshake refused: {e}"))?;
    let fp = crate::tls::peer_fingerprint(tls.get_ref().1.peer_certificates());
    let Some(role) = fp.as_deref().and_then(|f| role_of(&gw.cfg, f)) else {
        return Err(format!("client certificate {} is CA-valid but not pinned in tls.api_fingerprints or tls.reader_fingerprints: refused", fp.as_deref().unwrap_or("-")));
    };
    Ok((tls, role, fp.unwrap_or_default().into()))
}

/// A connection that must deliver the HTTP/2 client preface (its first
/// [`H2_PREFACE_LEN`] bytes) before a deadline: reads fail with `TimedOut`
/// after it. The server speaks first meanwhile (its SETTINGS), as clients
/// that wait for the server's first bytes expect.
struct PrefaceBy<S> {
    inner: S,
    missing: usize,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    timed_out: Arc<std::sync::atomic::AtomicBool>,
}

/// Bytes of the HTTP/2 client preface (RFC 9113 §3.4).
const H2_PREFACE_LEN: usize = 24;

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for PrefaceBy<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        if self.missing > 0 && self.deadline.as_mut().poll(cx).is_ready() {
            self.timed_out
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Poll::Ready(Err(std::io::ErrorKind::TimedOut.into()));
        }
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = buf.filled().len() - before;
        self.missing = self.missing.saturating_sub(got);
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for PrefaceBy<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Accepts calls on `listener` until `shutdown`.
pub async fn accept(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    gw: Arc<Gateway>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let l = gw.cfg.limits;
    let handshakes = Handshakes::new(l.handshakes, l.handshakes_per_source);
    let connections = Arc::new(Semaphore::new(l.api_connections as usize));
    while let Some((tcp, measured)) =
        mgmt::server::accept_until(&listener, &mut shutdown, "api").await
    {
        let admitted = connections
            .clone()
            .try_acquire_owned()
            .map_err(|_| Limit::ApiConnections)
            .and_then(|c| handshakes.try_admit(measured).map(|h| (c, h)));
        let (connection, handshake) = match admitted {
            Ok(x) => x,
            Err(limit) => {
                gw.refusals.count(Listener::Api, limit);
                // Refused before its first byte: no header read, no claim.
                tracing::debug!(claimed = %"unread", %measured, "api: limits.{} reached: connection closed", limit.as_str());
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, gw) = (acceptor.clone(), gw.clone());
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + l.handshake_timeout;
            // Bounded by its own timeout, the handshake's.
            let stream = match gw.proxy.api.accept(tcp).await {
                Ok(Sniffed::Ready(s)) => *s,
                Ok(Sniffed::Silent) => return,
                Err(refused) => {
                    return tracing::warn!(claimed = %"-", %measured, reason = %refused.reason, "api: {refused}")
                }
            };
            let peer = Arc::new(stream.peer().clone());
            let claimed = peer.claimed_text();
            let uid = peer.unique_id.as_deref().unwrap_or("-");
            tracing::debug!(%claimed, %measured, %uid, "api: connection");
            let opened = tokio::time::timeout_at(deadline, open(acceptor, stream, &gw)).await;
            drop(handshake);
            let (tls, role, caller) = match opened {
                Ok(Ok(x)) => x,
                Ok(Err(why)) => return tracing::warn!(%claimed, %measured, "api: {why}"),
                Err(_) => {
                    gw.refusals.count(Listener::Api, Limit::HandshakeTimeout);
                    return tracing::warn!(%claimed, %measured, "api: no TLS handshake and HTTP/2 preface within {:?} (limits.handshake_timeout_ms): closed", l.handshake_timeout);
                }
            };
            let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let io = PrefaceBy {
                inner: tls,
                missing: H2_PREFACE_LEN,
                deadline: Box::pin(tokio::time::sleep_until(deadline)),
                timed_out: timed_out.clone(),
            };
            let refusals = gw.refusals.clone();
            let svc = hyper::service::service_fn(move |req| {
                let (gw, caller, peer) = (gw.clone(), caller.clone(), peer.clone());
                async move {
                    Ok::<_, std::convert::Infallible>(gw.handle(req, role, caller, peer).await)
                }
            });
            let r = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(Some(Duration::from_secs(30)))
                .max_concurrent_streams(l.streams_per_connection)
                .max_header_list_size(MAX_HEADER_LIST)
                .serve_connection(TokioIo::new(io), svc)
                .await;
            drop(connection);
            if timed_out.load(std::sync::atomic::Ordering::Relaxed) {
                refusals.count(Listener::Api, Limit::HandshakeTimeout);
                tracing::warn!(%claimed, %measured, "api: no HTTP/2 preface within {:?} of the connection (limits.handshake_timeout_ms): closed", l.handshake_timeout);
            } else if let Err(e) = r {
                tracing::debug!(%claimed, %measured, error = %e, "api: connection ended");
            }
        });
    }
}
