//! The control-plane listener: mutual TLS (client certificates chained to
//! `tls.client_ca` and pinned in `tls.api_fingerprints`, operators, or
//! `tls.reader_fingerprints`, readers), HTTP/2, every call handed to
//! [`crate::forward`] with the caller's role.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::forward::Gateway;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Accepts calls on `listener` until `shutdown`.
pub async fn accept(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    gw: Arc<Gateway>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    while let Some((tcp, peer)) = mgmt::server::accept_until(&listener, &mut shutdown, "api").await
    {
        let _ = tcp.set_nodelay(true);
        let (acceptor, gw) = (acceptor.clone(), gw.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    return tracing::warn!(%peer, error = %e, "api: TLS handshake refused")
                }
                Err(_) => return tracing::warn!(%peer, "api: TLS handshake timed out"),
            };
            let fp = crate::tls::peer_fingerprint(tls.get_ref().1.peer_certificates());
            let Some(role) = fp.as_deref().and_then(|f| role_of(&gw.cfg, f)) else {
                return tracing::warn!(%peer, fingerprint = fp.as_deref().unwrap_or("-"), "api: client certificate is CA-valid but not pinned in tls.api_fingerprints or tls.reader_fingerprints: refused");
            };
            let caller: Arc<str> = fp.unwrap_or_default().into();
            let svc = hyper::service::service_fn(move |req| {
                let (gw, caller) = (gw.clone(), caller.clone());
                async move { Ok::<_, std::convert::Infallible>(gw.handle(req, role, caller).await) }
            });
            let r = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .keep_alive_interval(Some(Duration::from_secs(30)))
                .serve_connection(TokioIo::new(tls), svc)
                .await;
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "api: connection ended");
            }
        });
    }
}
