//! Agent mode (`[mgmt.agent]`, docs/fleet.md): border-mgmt dials out to
//! border-gw gateways over mutual TLS and serves its `border.v1` API over
//! each connection it opened, so a control plane reaches appliances that
//! accept no inbound connection.
//!
//! [`pool`] decides how many tunnels to keep, [`tunnel`] dials and serves
//! one, [`crate::backoff`] spaces failed dials, [`preface`] is what a tunnel says
//! before HTTP/2, [`body`] keeps a tunnel busy for a whole response stream.

pub mod body;
pub mod pool;
pub mod preface;
pub mod tunnel;

use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use conf::{Agent, MgmtTls};
use tokio::sync::watch;
use tonic::service::Routes;

use crate::backoff::Backoff;
use crate::tls::{ClientTls, TlsError};
use pool::{Limits, Pool};
use tunnel::{Dialer, Ended};

include!(concat!(env!("OUT_DIR"), "/offered_methods.rs"));

/// The control message a gateway sends on a tunnel to close it cleanly
/// (it drains): the agent answers OK, closes it with GOAWAY, and dials the
/// next gateway without backing off.
pub const DRAIN_PATH: &str = "/border.tunnel.v1.Tunnel/Drain";

/// The ALPN protocol of a tunnel (not h2: a preface comes first).
pub const ALPN: &[u8] = b"border-tunnel/1";

/// What a tunnel serves: border-mgmt's services, behind the same role check
/// as its listener ([`crate::authz`]).
#[derive(Clone, Debug)]
pub struct Served {
    /// border.v1's services.
    pub routes: Routes,
    /// Where refusals are counted.
    pub counters: Arc<crate::authz::ApiCounters>,
    /// `[mgmt.limits]` (WatchEvents streams per tunnel).
    pub limits: conf::MgmtLimits,
}

/// Starts the agent: keeps the pool of tunnels until `shutdown` turns true.
/// `tls`'s cert and key are the appliance's identity; its `client_ca`
/// verifies the gateways' certificates.
pub fn spawn(
    agent: &Agent,
    tls: &MgmtTls,
    routes: Served,
    shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, TlsError> {
    let client = crate::tls::client_config(&ClientTls {
        server_ca: tls.client_ca.clone(),
        cert: tls.cert.clone(),
        key: tls.key.clone(),
        server_name: None,
    })?;
    let mut client = Arc::unwrap_or_clone(client);
    client.alpn_protocols = vec![ALPN.to_vec()];
    let dialer = Arc::new(Dialer {
        connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        gateways: agent.gateways.clone(),
        current: AtomicUsize::new(0),
        failures: AtomicU32::new(0),
        backoff: Backoff {
            base: Duration::from_millis(agent.backoff_min_ms.into()),
            cap: Duration::from_millis(agent.backoff_max_ms.into()),
        },
        preface: tunnel::preface_for(&agent.id),
        pins: agent.gateway_fingerprints.clone(),
        reset_after: Duration::from_millis(agent.backoff_reset_after_ms.into()),
    });
    let pool = Arc::new(Pool::new(Limits {
        min_idle: agent.min_idle as usize,
        grow_by: agent.grow_by as usize,
        max_tunnels: agent.max_tunnels as usize,
        idle_timeout: Duration::from_millis(agent.idle_timeout_ms.into()),
    }));
    tracing::info!(
        id = %agent.id,
        gateways = %agent.gateways.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(","),
        "agent: dialling out to the gateways"
    );
    Ok(tokio::spawn(supervise(dialer, pool, routes, shutdown)))
}

/// Opens tunnels whenever the pool needs them.
async fn supervise(
    dialer: Arc<Dialer>,
    pool: Arc<Pool>,
    routes: Served,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        // A failing gateway gets one dial at a time, not `grow_by`.
        let n = if dialer.failing() {
            pool.reserve_probe()
        } else {
            pool.reserve_dials()
        };
        if n > 0 {
            let s = pool.snapshot();
            tracing::info!(
                opening = n,
                open = s.open,
                idle = s.idle,
                "agent: fewer than {} tunnels idle: opening {n} more",
                pool.limits.min_idle
            );
            for _ in 0..n {
                let (d, p, r, sd) = (
                    dialer.clone(),
                    pool.clone(),
                    routes.clone(),
                    shutdown.clone(),
                );
                tokio::spawn(one_tunnel(d, p, r, sd));
            }
        }
        tokio::select! {
            _ = pool.changed.notified() => {}
            r = shutdown.changed() => if r.is_err() { return },
        }
    }
}

/// Dials until a gateway accepts (backing off between failures), then
/// serves the tunnel until it ends.
async fn one_tunnel(
    dialer: Arc<Dialer>,
    pool: Arc<Pool>,
    routes: Served,
    mut shutdown: watch::Receiver<bool>,
) {
    let (stream, gateway) = loop {
        let wait = dialer.wait();
        if !wait.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
            }
        }
        if *shutdown.borrow() {
            pool.dial_abandoned();
            return;
        }
        let (i, gw) = dialer.gateway();
        match dialer.dial(gw).await {
            Ok(s) => break (s, i),
            Err(why) => {
                tracing::warn!(gateway = %gw, error = %why, "agent: tunnel dial failed");
                dialer.failed(i);
            }
        }
    };
    let state = pool.opened();
    // A dial that succeeds is not yet a working gateway: the failures are
    // forgotten only once this tunnel has stayed up for `reset_after`.
    let stayed_up = {
        let (dialer, pool) = (dialer.clone(), pool.clone());
        tokio::spawn(async move {
            tokio::time::sleep(dialer.reset_after).await;
            dialer.stayed_up();
            // The pool may grow by `grow_by` again.
            pool.changed.notify_one();
        })
    };
    let ended = tunnel::serve(stream, routes, state.clone(), pool.clone(), shutdown).await;
    let was_up_long = stayed_up.is_finished();
    stayed_up.abort();
    pool.closed(&state);
    match ended {
        Ended::Planned => tracing::debug!("agent: tunnel closed (planned)"),
        Ended::Drained => {
            tracing::info!(gateway = %dialer.gateways[gateway], "agent: the gateway drains: tunnel closed, the next goes to the next gateway");
            dialer.move_on(gateway);
        }
        Ended::Lost(why) => {
            tracing::warn!(error = %why, "agent: tunnel lost");
            dialer.lost(was_up_long);
        }
    }
}
