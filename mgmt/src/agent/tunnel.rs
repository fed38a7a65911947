//! One tunnel: dial a gateway (TCP, mutual TLS, preface, the gateway's
//! answer), then serve border.v1 over it as the HTTP/2 server until it
//! closes, is retired idle, or border-mgmt stops.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conf::GatewayAddr;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::{Layer, ServiceExt};

use crate::authz::{AuthzLayer, Caller, Identity};

use super::body::Guarded;
use super::pool::{Busy, Pool, TunnelState};
use super::preface::{Answer, Preface, MAX_ANSWER};
use crate::backoff::Backoff;

/// How long a connect, handshake and answer may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The stream a tunnel runs on.
pub type TunnelStream = tokio_rustls::client::TlsStream<TcpStream>;

/// Dials tunnels: the gateways in order (stays on one while it answers),
/// the failure count behind the backoff.
pub struct Dialer {
    pub(super) connector: tokio_rustls::TlsConnector,
    pub(super) gateways: Vec<GatewayAddr>,
    pub(super) current: AtomicUsize,
    pub(super) failures: AtomicU32,
    pub(super) backoff: Backoff,
    pub(super) preface: Vec<u8>,
    /// The gateways' pinned certificates (`mgmt.agent.gateway_fingerprints`).
    pub(super) pins: Vec<String>,
    /// How long a tunnel must stay up before the failure count resets.
    pub(super) reset_after: Duration,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("gateways", &self.gateways)
            .field("current", &self.current)
            .field("failures", &self.failures)
            .finish()
    }
}

/// How a tunnel ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Closed cleanly: retired idle, or border-mgmt stops. Not a failure.
    Planned,
    /// The gateway asked it to close (it drains): not a failure; the next
    /// dial goes to the next gateway.
    Drained,
    /// Lost: an error, or a close without close_notify (the gateway died).
    Lost(String),
}

impl Dialer {
    /// The gateway to dial now.
    pub fn gateway(&self) -> (usize, &GatewayAddr) {
        let i = self.current.load(Ordering::SeqCst) % self.gateways.len();
        (i, &self.gateways[i])
    }

    /// A failed dial of gateway `i`: one more failure, and the next gateway.
    pub fn failed(&self, i: usize) {
        self.failures.fetch_add(1, Ordering::SeqCst);
        let next = (i + 1) % self.gateways.len();
        let _ = self
            .current
            .compare_exchange(i, next, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Gateway `i` drains: the next dial goes to the next gateway, with no
    /// failure counted.
    pub fn move_on(&self, i: usize) {
        let next = (i + 1) % self.gateways.len();
        let _ = self
            .current
            .compare_exchange(i, next, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// A tunnel was lost. One that had stayed up for `reset_after`
    /// (`was_up_long`: a gateway that worked went away) leaves at least one
    /// failure, the short wait of the first; one lost sooner counts one
    /// more failure, so a gateway that accepts tunnels and drops them is
    /// redialled ever more slowly, up to `backoff_max_ms`, not as fast as
    /// the pool grows.
    pub fn lost(&self, was_up_long: bool) {
        if was_up_long {
            self.failures.fetch_max(1, Ordering::SeqCst);
        } else {
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// True while failures are counted (no tunnel has stayed up since).
    pub fn failing(&self) -> bool {
        self.failures.load(Ordering::SeqCst) > 0
    }

    /// A tunnel has stayed up for `reset_after`: the gateway works, the
    /// failures are forgotten.
    pub fn stayed_up(&self) {
        self.failures.store(0, Ordering::SeqCst);
    }

    /// The wait before the next dial (full jitter).
    pub fn wait(&self) -> Duration {
        self.backoff
            .wait(self.failures.load(Ordering::SeqCst), fastrand::f64())
    }

    /// Connects to `gw`, says the preface and reads the answer.
    pub async fn dial(&self, gw: &GatewayAddr) -> Result<TunnelStream, String> {
        tokio::time::timeout(DIAL_TIMEOUT, self.dial_inner(gw))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {DIAL_TIMEOUT:?}")))
    }

    async fn dial_inner(&self, gw: &GatewayAddr) -> Result<TunnelStream, String> {
        let tcp = TcpStream::connect((gw.host.as_str(), gw.port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(gw.host.clone())
            .map_err(|_| format!("`{}` is not a valid TLS server name", gw.host))?;
        let mut tls = self
            .connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        // The CA vouches for appliances as well as gateways: only a pinned
        // gateway hears the preface and gets to call this appliance.
        let fingerprint = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| crate::tls::fingerprint(c));
        match fingerprint {
            Some(fp) if self.pins.contains(&fp) => {}
            fp => {
                let _ = tls.shutdown().await;
                return Err(format!(
                    "the gateway's certificate {} is not pinned in mgmt.agent.gateway_fingerprints: tunnel closed before the preface",
                    fp.as_deref().unwrap_or("(none)")
                ));
            }
        }
        tls.write_all(&self.preface)
            .await
            .map_err(|e| format!("sending the preface: {e}"))?;
        tls.flush()
            .await
            .map_err(|e| format!("sending the preface: {e}"))?;
        let line = read_line(&mut tls).await?;
        match Answer::decode(&line).map_err(|e| e.to_string())? {
            Answer::Accepted => Ok(tls),
            Answer::Refused(why) => Err(format!("the gateway refused the tunnel: {why}")),
        }
    }
}

/// The answer line, without its newline; byte by byte, so nothing of the
/// HTTP/2 that follows is read.
async fn read_line(s: &mut TunnelStream) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    loop {
        let b = s.read_u8().await.map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                "the gateway closed the tunnel before answering (is this appliance's certificate pinned there?)".to_string()
            }
            _ => format!("reading the gateway's answer: {e}"),
        })?;
        if b == b'\n' {
            return Ok(line);
        }
        if line.len() >= MAX_ANSWER {
            return Err("the gateway's answer is longer than a line".into());
        }
        line.push(b);
    }
}

/// Serves `routes` over `stream` (border-mgmt is the HTTP/2 server) until
/// the tunnel ends. Idle for the pool's idle timeout with enough others
/// idle: a graceful close (GOAWAY). `shutdown`: the same.
pub async fn serve(
    stream: TunnelStream,
    served: super::Served,
    state: Arc<TunnelState>,
    pool: Arc<Pool>,
    mut shutdown: watch::Receiver<bool>,
) -> Ended {
    // Calls over a tunnel come from the gateway, which checked the caller's
    // pinned certificate (its tls.api_fingerprints): they run as operator
    // calls of a caller named by the gateway's certificate and, for the
    // audit, the original caller the gateway names (`border-caller`), with
    // this tunnel's own share of WatchEvents streams.
    let gateway = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map_or_else(|| "gateway".to_string(), |c| crate::tls::fingerprint(c));
    let caller = Caller::new(
        Identity::Cert {
            fingerprint: gateway.into(),
            role: Some(conf::ClientRole::Operator),
        },
        &served.limits,
    );
    let routes = AuthzLayer::new(served.counters.clone()).layer(served.routes.clone());
    let drained = Arc::new(tokio::sync::Notify::new());
    let svc = {
        let (state, pool, drained) = (state.clone(), pool.clone(), drained.clone());
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            // The gateway is pinned (`Dialer::dial`): the original caller
            // it names is believed, for the audit lines.
            let original = req
                .headers()
                .get(crate::authz::CALLER_HEADER)
                .and_then(|v| v.to_str().ok());
            let this_call = caller.on_behalf_of(original);
            req.extensions_mut().insert(this_call);
            let busy = Busy::new(state.clone(), pool.clone());
            let drain = req.uri().path() == super::DRAIN_PATH;
            if drain {
                drained.notify_one();
            }
            let call = routes.clone().oneshot(req);
            async move {
                if drain {
                    let ok = tonic::Status::new(tonic::Code::Ok, "closing")
                        .into_http::<tonic::body::Body>();
                    return Ok::<_, Infallible>(ok.map(|b| Guarded::new(b, busy)));
                }
                let resp = match call.await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(resp.map(|b| Guarded::new(b, busy)))
            }
        })
    };
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10))
        .max_concurrent_streams(8)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let check =
        (pool.limits.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut every = tokio::time::interval(check);
    let mut closing = false;
    let mut was_drained = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                return match r {
                    _ if was_drained => Ended::Drained,
                    _ if closing => Ended::Planned,
                    Ok(()) => Ended::Lost("the gateway closed the tunnel".into()),
                    Err(e) => Ended::Lost(describe(&e)),
                }
            }
            _ = drained.notified(), if !closing => {
                closing = true;
                was_drained = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = every.tick(), if !closing => {
                if pool.try_retire(&state) {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
            r = shutdown.changed(), if !closing => {
                if r.is_err() || *shutdown.borrow() {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

fn describe(e: &hyper::Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

/// The preface this appliance says on each tunnel.
pub fn preface_for(id: &str) -> Vec<u8> {
    Preface {
        id: id.to_string(),
        methods: crate::agent::OFFERED_METHODS
            .iter()
            .map(|m| m.to_string())
            .collect(),
    }
    .encode()
}
