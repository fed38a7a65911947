//! The control-plane listener: mutual TLS (client certificates chained to
//! `tls.client_ca` and pinned in `tls.api_fingerprints`), HTTP/2, every
//! call handed to [`crate::forward`].

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::forward::Gateway;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts calls on `listener` until `shutdown`.
pub async fn accept(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    gw: Arc<Gateway>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "api: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
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
            if !fp
                .as_ref()
                .is_some_and(|f| gw.cfg.api_fingerprints.contains(f))
            {
                return tracing::warn!(%peer, fingerprint = fp.as_deref().unwrap_or("-"), "api: client certificate is CA-valid but not pinned in tls.api_fingerprints: refused");
            }
            let svc = hyper::service::service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, std::convert::Infallible>(gw.handle(req).await) }
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
