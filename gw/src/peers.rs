//! Connections to the other gateways' api listeners (mutual TLS, HTTP/2,
//! one multiplexed connection per gateway, re-made when it closes): the
//! `HasTunnel` probe and forwarded calls.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;

use crate::tunnels::Sender;

/// How long connecting to another gateway may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The other gateways.
pub struct Peers {
    connector: tokio_rustls::TlsConnector,
    /// `[[peer]]`: the pinned certificates of each peer's api address.
    pins: HashMap<SocketAddr, Arc<[String]>>,
    conns: crate::dial::Dialer<SocketAddr, Sender>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Peers")
    }
}

impl Peers {
    /// With this gateway's client TLS config and the peers' pins.
    pub fn new(tls: Arc<rustls::ClientConfig>, pins: HashMap<SocketAddr, Vec<String>>) -> Peers {
        Peers {
            connector: tokio_rustls::TlsConnector::from(tls),
            pins: pins.into_iter().map(|(a, p)| (a, p.into())).collect(),
            conns: crate::dial::Dialer::default(),
        }
    }

    /// A ready client handle to the gateway at `addr`: connected outside
    /// any lock shared with other addresses ([`crate::dial`]).
    ///
    /// Every connection the dialer makes checks the certificate against
    /// the pins of `addr` (`[[peer]]`); an address with no pins gets no
    /// connection at all: a host holding any certificate of the fleet's CA
    /// is not a gateway for that.
    pub async fn sender(&self, addr: SocketAddr) -> Result<Sender, String> {
        let Some(pins) = self.pins.get(&addr).cloned() else {
            return Err(format!(
                "{addr} is not a configured peer ([[peer]]): not connected"
            ));
        };
        let connect = Self::connect(self.connector.clone(), addr, pins);
        let bounded = async move {
            tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {CONNECT_TIMEOUT:?}")))
        };
        self.conns.get(&addr, |s| !s.is_closed(), bounded).await
    }

    async fn connect(
        connector: tokio_rustls::TlsConnector,
        addr: SocketAddr,
        pins: Arc<[String]>,
    ) -> Result<Sender, String> {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let tls = mgmt::tls::connect_primed(
            &connector,
            ServerName::IpAddress(addr.ip().into()),
            tcp,
            Duration::from_millis(500),
        )
        .await
        .map_err(|e| format!("TLS: {e}"))?;
        // The CA vouches for appliances too: only the certificate pinned
        // for this address in [[peer]] is a gateway.
        let fp = crate::tls::peer_fingerprint(tls.get_ref().get_ref().1.peer_certificates());
        if !fp.as_ref().is_some_and(|f| pins.iter().any(|p| p == f)) {
            return Err(format!(
                "certificate {} is not pinned for peer {addr} ([[peer]] fingerprints): no call sent",
                fp.as_deref().unwrap_or("(none)")
            ));
        }
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP/2: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// True when `addr` is a configured peer (`[[peer]]`).
    pub fn is_peer(&self, addr: SocketAddr) -> bool {
        self.pins.contains_key(&addr)
    }

    /// True when the gateway at `addr` says it holds a tunnel of `appliance`.
    pub async fn has_tunnel(&self, addr: SocketAddr, appliance: &str) -> Result<bool, String> {
        let mut s = self.sender(addr).await?;
        let req = hyper::Request::post(format!("http://{addr}{}", crate::HAS_TUNNEL_PATH))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header(crate::APPLIANCE_HEADER, appliance)
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        s.ready().await.map_err(|e| e.to_string())?;
        let resp = s.send_request(req).await.map_err(|e| e.to_string())?;
        Ok(resp.headers().get("grpc-status").is_some_and(|v| v == "0"))
    }
}
