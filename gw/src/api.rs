//! The control-plane listener: mutual TLS (client certificates chained to
//! `tls.client_ca` and pinned in `tls.api_fingerprints`, operators, or
//! `tls.reader_fingerprints`, readers), HTTP/2, every call handed to
//! [`crate::forward`] with the caller's role.
//!
//! `[limits]` (issue 24): at most `api_connections` open and `handshakes`
//! (`handshakes_per_source` from one source) in progress, a connection
//! beyond is closed at once; TLS and the HTTP/2 client preface within
//! `handshake_timeout_ms`; `streams_per_connection` calls at once on one
//! connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`: a client queues
//! the rest). Each refusal is counted by its limit.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::admission::Handshakes;
use crate::forward::Gateway;
use crate::limits::{Limit, Listener};

/// What every HTTP/2 connection starts with (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest header block a call may send (its metadata).
const MAX_HEADER_LIST: u32 = 64 << 10;

/// The role of a pinned control-plane client, if it is pinned.
fn role_of(cfg: &crate::config::GwConfig, fingerprint: &str) -> Option<conf::ClientRole> {
    if cfg.api_fingerprints.iter().any(|f| f == fingerprint) {
        Some(conf::ClientRole::Operator)
    } else if cfg.reader_fingerprints.iter().any(|f| f == fingerprint) {
        Some(conf::ClientRole::Reader)
    } else {
        None
    }
}

type Tls = tokio_rustls::server::TlsStream<TcpStream>;

/// TLS, the pinned role, and the HTTP/2 client preface (read here so a
/// connection idle before it is closed at the handshake timeout; replayed
/// to hyper).
async fn open(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: TcpStream,
    gw: &Gateway,
) -> Result<(mgmt::tls::Primed<Tls>, conf::ClientRole), String> {
    let mut tls = acceptor
        .accept(tcp)
        .await
        .map_err(|e| format!("TLS handshake refused: {e}"))?;
    let fp = crate::tls::peer_fingerprint(tls.get_ref().1.peer_certificates());
    let Some(role) = fp.as_deref().and_then(|f| role_of(&gw.cfg, f)) else {
        return Err(format!("client certificate {} is CA-valid but not pinned in tls.api_fingerprints or tls.reader_fingerprints: refused", fp.as_deref().unwrap_or("-")));
    };
    let mut head = vec![0u8; H2_PREFACE.len()];
    tls.read_exact(&mut head)
        .await
        .map_err(|e| format!("reading the HTTP/2 preface: {e}"))?;
    if head != H2_PREFACE {
        return Err("not HTTP/2 (no client preface): refused".into());
    }
    Ok((mgmt::tls::Primed::replaying(head, tls), role))
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
    while let Some((tcp, peer)) = mgmt::server::accept_until(&listener, &mut shutdown, "api").await
    {
        let admitted = connections
            .clone()
            .try_acquire_owned()
            .map_err(|_| Limit::ApiConnections)
            .and_then(|c| handshakes.try_admit(peer).map(|h| (c, h)));
        let (connection, handshake) = match admitted {
            Ok(x) => x,
            Err(limit) => {
                gw.refusals.count(Listener::Api, limit);
                tracing::debug!(%peer, "api: limits.{} reached: connection closed", limit.as_str());
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, gw) = (acceptor.clone(), gw.clone());
        tokio::spawn(async move {
            let opened = tokio::time::timeout(l.handshake_timeout, open(acceptor, tcp, &gw)).await;
            drop(handshake);
            let (io, role) = match opened {
                Ok(Ok(x)) => x,
                Ok(Err(why)) => return tracing::warn!(%peer, "api: {why}"),
                Err(_) => {
                    gw.refusals.count(Listener::Api, Limit::HandshakeTimeout);
                    return tracing::warn!(%peer, "api: no TLS handshake and HTTP/2 preface within {:?} (limits.handshake_timeout_ms): closed", l.handshake_timeout);
                }
            };
            let svc = hyper::service::service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, std::convert::Infallible>(gw.handle(req, role).await) }
            });
            let r = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(Some(Duration::from_secs(30)))
                .max_concurrent_streams(l.streams_per_connection)
                .max_header_list_size(MAX_HEADER_LIST)
                .serve_connection(TokioIo::new(io), svc)
                .await;
            drop(connection);
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "api: connection ended");
            }
        });
    }
}
