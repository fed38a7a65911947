//! The agent listener: accepts tunnels (mutual TLS), reads the preface,
//! checks the certificate is pinned for the appliance id it claims, answers,
//! and becomes the HTTP/2 client of the tunnel. Every refusal is one log
//! line naming the peer, and the claimed id and fingerprint when known.
//!
//! `[limits]` (docs/fleet.md): a connection beyond `handshakes` (or
//! `handshakes_per_source`) in progress is closed at once; TLS and the
//! preface must finish within `handshake_timeout_ms`; a tunnel beyond
//! `tunnels` or `tunnels_per_appliance` is refused with an answer. Each
//! refusal is counted by its limit.
//!
//! Each connection may start with a PROXY v2 header ([`crate::proxied`]):
//! its log lines name the claimed client and the measured peer; one that
//! closes before sending a byte logs nothing.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use mgmt::agent::preface::{Answer, Preface, MAGIC};
use ppv2_accept::{PeerInfo, ProxiedStream, Sniffed};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admission::{Handshakes, TunnelSlot, TunnelSlots};
use crate::config::GwConfig;
use crate::limits::{Limit, Listener, Refusals};
use crate::tunnels::Tunnels;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What the agent listener shares between its connections.
struct Shared {
    acceptor: tokio_rustls::TlsAcceptor,
    cfg: Arc<GwConfig>,
    tunnels: Arc<Tunnels>,
    slots: TunnelSlots,
    refusals: Arc<Refusals>,
    proxy: ppv2_accept::Acceptor,
}

/// Accepts tunnels on `listener` until `shutdown`.
pub async fn accept(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    cfg: Arc<GwConfig>,
    tunnels: Arc<Tunnels>,
    refusals: Arc<Refusals>,
    proxy: ppv2_accept::Acceptor,
    mut shutdown: watch::Receiver<bool>,
) {
    let l = cfg.limits;
    let handshakes = Handshakes::new(l.handshakes, l.handshakes_per_source);
    let shared = Arc::new(Shared {
        acceptor: tokio_rustls::TlsAcceptor::from(tls),
        slots: TunnelSlots::new(l.tunnels, l.tunnels_per_appliance),
        cfg,
        tunnels,
        refusals,
        proxy,
    });
    while let Some((tcp, measured)) =
        mgmt::server::accept_until(&listener, &mut shutdown, "tunnels").await
    {
        let slot = match handshakes.try_admit(measured) {
            Ok(s) => s,
            Err(limit) => {
                shared.refusals.count(Listener::Agent, limit);
                shared
                    .tunnels
                    .counters
                    .refused
                    .fetch_add(1, Ordering::Relaxed);
                // Refused before its first byte: no header read, no claim.
                tracing::debug!(claimed = %"unread", %measured, "tunnel refused: limits.{} handshakes in progress: connection closed", limit.as_str());
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let timeout = shared.cfg.limits.handshake_timeout;
            let deadline = tokio::time::Instant::now() + timeout;
            // Bounded by its own timeout, the handshake's.
            let stream = match shared.proxy.accept(tcp).await {
                Ok(Sniffed::Ready(s)) => *s,
                Ok(Sniffed::Silent) => return,
                Err(refused) => {
                    shared
                        .tunnels
                        .counters
                        .refused
                        .fetch_add(1, Ordering::Relaxed);
                    return tracing::warn!(claimed = %"-", %measured, reason = %refused.reason, "tunnel refused: {refused}");
                }
            };
            let peer = stream.peer().clone();
            let claimed = peer.claimed_text();
            tracing::debug!(%claimed, %measured, "tunnel: connection");
            let opened = tokio::time::timeout_at(deadline, open(stream, &shared)).await;
            drop(slot);
            let refused = || {
                shared
                    .tunnels
                    .counters
                    .refused
                    .fetch_add(1, Ordering::Relaxed)
            };
            match opened {
                Err(_) => {
                    refused();
                    shared
                        .refusals
                        .count(Listener::Agent, Limit::HandshakeTimeout);
                    tracing::warn!(%claimed, %measured, "tunnel refused: no TLS handshake and preface within {timeout:?} (limits.handshake_timeout_ms)")
                }
                Ok(Err(why)) => {
                    refused();
                    tracing::warn!(%claimed, %measured, "tunnel refused: {why}")
                }
                Ok(Ok((tls, preface, slot))) => {
                    run(tls, preface, peer, shared.tunnels.clone()).await;
                    drop(slot);
                }
            }
        });
    }
}

type Stream = tokio_rustls::server::TlsStream<ProxiedStream>;

/// TLS, preface, pin check, a tunnel slot, answer: the tunnel ready for
/// HTTP/2, holding its slot.
async fn open(
    tcp: ProxiedStream,
    shared: &Shared,
) -> Result<(Stream, Preface, TunnelSlot), String> {
    let cfg = &shared.cfg;
    let mut tls = shared
        .acceptor
        .accept(tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let fp = crate::tls::peer_fingerprint(tls.get_ref().1.peer_certificates())
        .ok_or("no client certificate")?;
    let mut head = [0u8; MAGIC.len() + 4];
    tls.read_exact(&mut head)
        .await
        .map_err(|e| format!("reading the preface (fingerprint {fp}): {e}"))?;
    let preface = match Preface::body_len(&head) {
        Ok(n) => {
            let mut body = vec![0u8; n];
            tls.read_exact(&mut body)
                .await
                .map_err(|e| format!("reading the preface (fingerprint {fp}): {e}"))?;
            Preface::decode_body(&body)
        }
        Err(e) => Err(e),
    };
    let preface = match preface {
        Ok(p) => p,
        Err(e) => {
            if matches!(e, mgmt::agent::preface::PrefaceError::BadId(_)) {
                shared
                    .tunnels
                    .counters
                    .bad_ids
                    .fetch_add(1, Ordering::Relaxed);
            }
            refuse(&mut tls, &e.to_string()).await;
            return Err(format!("{e} (fingerprint {fp})"));
        }
    };
    let pinned = cfg
        .appliances
        .get(&preface.id)
        .is_some_and(|pins| pins.contains(&fp));
    if !pinned {
        let why = if cfg.appliances.contains_key(&preface.id) {
            format!(
                "certificate {fp} is not pinned for appliance {}",
                preface.id
            )
        } else {
            format!(
                "appliance {} is not configured on this gateway (certificate {fp})",
                preface.id
            )
        };
        refuse(&mut tls, &why).await;
        // Logged once, by the caller, with the peer.
        return Err(why);
    }
    let slot = match shared.slots.try_take(&preface.id) {
        Ok(s) => s,
        Err(limit) => {
            shared.refusals.count(Listener::Agent, limit);
            let why = format!(
                "appliance {} has too many tunnels here (limits.{}): try another gateway",
                preface.id,
                limit.as_str()
            );
            refuse(&mut tls, &why).await;
            return Err(why);
        }
    };
    tls.write_all(&Answer::Accepted.encode())
        .await
        .map_err(|e| format!("answering appliance {}: {e}", preface.id))?;
    Ok((tls, preface, slot))
}

async fn refuse(tls: &mut Stream, why: &str) {
    let _ = tls
        .write_all(&Answer::Refused(why.to_string()).encode())
        .await;
    let _ = tls.shutdown().await;
}

/// The tunnel as an HTTP/2 client connection, in the pool until it closes.
async fn run(tls: Stream, preface: Preface, peer: PeerInfo, tunnels: Arc<Tunnels>) {
    let handshake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .handshake(TokioIo::new(tls))
        .await;
    let (sender, conn) = match handshake {
        Ok(x) => x,
        Err(e) => {
            // Accepted, yet never usable: a refusal for the metrics.
            tunnels.counters.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(claimed = %peer.claimed_text(), measured = %peer.measured, appliance = %preface.id, error = %e, "tunnel refused: HTTP/2 handshake failed");
            return;
        }
    };
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let methods: HashSet<String> = preface.methods.into_iter().collect();
    tunnels.add(&preface.id, id, sender, methods);
    let (claimed, measured) = (peer.claimed_text(), peer.measured);
    tracing::debug!(%claimed, %measured, appliance = %preface.id, tunnel = id, "tunnel up");
    let r = conn.await;
    tunnels.remove(&preface.id, id);
    match r {
        Ok(()) => {
            tracing::debug!(%claimed, %measured, appliance = %preface.id, tunnel = id, "tunnel closed")
        }
        Err(e) => {
            tracing::info!(%claimed, %measured, appliance = %preface.id, tunnel = id, error = %e, "tunnel lost")
        }
    }
}
