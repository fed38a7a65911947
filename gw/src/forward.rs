//! Routing one control-plane call (docs/fleet.md): to an idle local tunnel
//! of the appliance named in `border-appliance`, or, when this gateway has
//! none, to the first of the gateways the registry names that says it has
//! one (asked in parallel). Transparent: the call is forwarded at the HTTP/2
//! level, whatever its method, with its metadata and its deadline. Every
//! failure is a gRPC status with one log line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use mgmt::budget::{ByteBudget, Charge, Exceeded};
use tonic::Status;

use crate::config::GwConfig;
use crate::grpc::{self, RespBody};
use crate::limits::{Limit, Listener, Refusals};
use crate::peers::Peers;
use crate::registry::Registry;
use crate::stats::{CallOutcome, CallStats};
use crate::tunnels::{Missing, Tunnels};

/// How long a call waits for a busy appliance's tunnel to come free.
const TUNNEL_WAIT: Duration = Duration::from_secs(5);
/// How long another gateway may take to say whether it has a tunnel.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest request body forwarded (one API message and its framing).
const MAX_REQUEST: usize = mgmt::MAX_MESSAGE_BYTES + (64 << 10);
/// How much earlier than the caller's deadline the gateway answers.
const DEADLINE_MARGIN: Duration = Duration::from_millis(50);
/// How many tunnels a call tries when the one it took was closing.
const ATTEMPTS: usize = 3;

/// A gateway: its config, its tunnels, the registry, the other gateways.
#[derive(Debug)]
pub struct Gateway {
    /// The config.
    pub cfg: Arc<GwConfig>,
    /// Its tunnels.
    pub tunnels: Arc<Tunnels>,
    /// The registry.
    pub registry: Arc<Registry>,
    /// The other gateways.
    pub peers: Arc<Peers>,
    /// What the calls came to (the metrics).
    pub stats: Arc<CallStats>,
    /// What `[limits]` refused (the metrics).
    pub refusals: Arc<Refusals>,
    /// Request bytes buffered at once (`limits.request_memory_mib`).
    pub budget: Arc<ByteBudget>,
    /// The listeners' PROXY v2 sniffing (the metrics count what it saw).
    pub proxy: crate::proxied::ProxyAccept,
}

/// Why a call was not forwarded: what the metrics count, what the caller sees.
type Refusal = (CallOutcome, Status);

enum Fail {
    NoLocal,
    Refused(Refusal),
}

impl From<Refusal> for Fail {
    fn from(r: Refusal) -> Fail {
        Fail::Refused(r)
    }
}

/// The outcome of an answer that came back: an error status in its head
/// (a trailers-only answer) is the appliance's (or the next gateway's).
fn answered(resp: &hyper::Response<RespBody>) -> CallOutcome {
    match resp.headers().get("grpc-status") {
        Some(v) if v != "0" => CallOutcome::ApplianceError,
        _ => CallOutcome::Ok,
    }
}

impl Gateway {
    /// Answers one call of a client with `role`: the appliance's answer, or
    /// a status saying why not. A reader's call outside what a reader may
    /// do on an appliance (`mgmt::authz`) is refused here: the appliance
    /// sees every gateway as an operator.
    ///
    /// `fingerprint` is the caller's certificate; the audit line names it,
    /// or, for a call a pinned peer gateway forwarded, the original caller
    /// that gateway names ([`mgmt::authz::CALLER_HEADER`]), which goes on
    /// to the appliance too. `peer` is the connection's claimed and
    /// measured client, for the audit line.
    pub async fn handle(
        self: Arc<Self>,
        mut req: hyper::Request<Incoming>,
        role: conf::ClientRole,
        fingerprint: Arc<str>,
        peer: Arc<ppv2_accept::PeerInfo>,
    ) -> hyper::Response<RespBody> {
        let arrived = Instant::now();
        let path = req.uri().path().to_string();
        let appliance = req
            .headers()
            .get(crate::APPLIANCE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if path == crate::HAS_TUNNEL_PATH {
            // Another gateway's probe: not a call, not counted.
            return self.has_tunnel(&appliance);
        }
        let audit = self.audit(&mut req, fingerprint, &appliance, &path, peer);
        let resp = self.answer(req, role, arrived, &appliance, &path).await;
        audit.attach(resp)
    }

    /// The call's audit record; sets [`mgmt::authz::CALLER_HEADER`] to the
    /// original caller (a client's own value is replaced).
    fn audit(
        &self,
        req: &mut hyper::Request<Incoming>,
        fingerprint: Arc<str>,
        appliance: &str,
        path: &str,
        peer: Arc<ppv2_accept::PeerInfo>,
    ) -> crate::audit::Audit {
        let named = req
            .headers()
            .get(mgmt::authz::CALLER_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| mgmt::authz::is_fingerprint(v))
            .map(Arc::<str>::from);
        let (caller, via) = match named {
            Some(original) if self.cfg.is_peer(&fingerprint) => (original, Some(fingerprint)),
            _ => (fingerprint, None),
        };
        if let Ok(v) = hyper::header::HeaderValue::from_str(&caller) {
            req.headers_mut().insert(mgmt::authz::CALLER_HEADER, v);
        }
        crate::audit::Audit::new(caller, via, appliance, path, peer)
    }

    /// The appliance's answer to an authorised call, or why there is none.
    async fn answer(
        &self,
        req: hyper::Request<Incoming>,
        role: conf::ClientRole,
        arrived: Instant,
        appliance: &str,
        path: &str,
    ) -> hyper::Response<RespBody> {
        let (appliance, path) = (appliance.to_string(), path.to_string());
        let result = match grpc::timeout(req.headers()) {
            _ if !mgmt::authz::allows(role, &path) => Err((
                CallOutcome::Denied,
                Status::permission_denied(format!(
                    "border-gw {}: {path} is not open to a reader (tls.reader_fingerprints): only operators (tls.api_fingerprints) may call it",
                    self.cfg.id
                )),
            )),
            Err(e) => Err((
                CallOutcome::Refused,
                Status::invalid_argument(format!("border-gw: {e}")),
            )),
            Ok(timeout) => {
                // The gateway answers a little before the caller gives up,
                // so the caller learns why (DEADLINE_EXCEEDED from border-gw).
                let deadline = timeout.map(|t| Instant::now() + t - (t / 10).min(DEADLINE_MARGIN));
                let work = self.route(req, role, &appliance, &path, deadline);
                match deadline {
                    None => work.await,
                    Some(d) => tokio::time::timeout_at(d.into(), work)
                        .await
                        .unwrap_or_else(|_| {
                            Err((CallOutcome::Deadline, Status::deadline_exceeded(format!(
                                "border-gw {}: the deadline passed before appliance {appliance:?} answered",
                                self.cfg.id
                            ))))
                        }),
                }
            }
        };
        match result {
            Ok(r) => {
                self.stats.count(answered(&r));
                self.stats.forward_latency.observe(arrived.elapsed());
                r
            }
            Err((outcome, st)) => {
                self.stats.count(outcome);
                tracing::warn!(appliance = %appliance, method = %path, code = ?st.code(), "call refused: {}", st.message());
                grpc::status(st)
            }
        }
    }

    /// The answer to [`crate::HAS_TUNNEL_PATH`]: OK when a tunnel of the
    /// appliance is here.
    fn has_tunnel(&self, appliance: &str) -> hyper::Response<RespBody> {
        if !appliance.is_empty() && self.tunnels.has(appliance) {
            grpc::status(Status::new(tonic::Code::Ok, ""))
        } else {
            grpc::status(Status::unavailable(format!(
                "border-gw {}: no tunnel of appliance {appliance}",
                self.cfg.id
            )))
        }
    }

    async fn route(
        &self,
        req: hyper::Request<Incoming>,
        role: conf::ClientRole,
        appliance: &str,
        path: &str,
        deadline: Option<Instant>,
    ) -> Result<hyper::Response<RespBody>, Refusal> {
        if appliance.is_empty() {
            return Err((
                CallOutcome::Refused,
                Status::invalid_argument(format!(
                    "border-gw: no {} metadata: name the appliance to call",
                    crate::APPLIANCE_HEADER
                )),
            ));
        }
        let hop = req.headers().contains_key(crate::HOP_HEADER);
        let (parts, body) = req.into_parts();
        // Held until the call is routed: its bytes are in memory till then.
        let (body, _charge) = self.read_body(body, role).await?;
        match self
            .via_tunnel(&parts, &body, appliance, path, deadline)
            .await
        {
            Ok(r) => Ok(r),
            Err(Fail::Refused(r)) => Err(r),
            Err(Fail::NoLocal) if hop => Err((
                CallOutcome::NoTunnel,
                Status::unavailable(format!(
                    "border-gw {}: no tunnel of appliance {appliance} here any more",
                    self.cfg.id
                )),
            )),
            Err(Fail::NoLocal) => self.via_peer(&parts, body, appliance, deadline).await,
        }
    }

    /// The whole request body, charged to the byte budget, within
    /// `limits.body_read_timeout_ms`; at most [`MAX_REQUEST`] bytes.
    async fn read_body(
        &self,
        mut body: Incoming,
        role: conf::ClientRole,
    ) -> Result<(Bytes, Charge), Refusal> {
        let mut charge = self.budget.charge(Some(role));
        let mut buf = Vec::new();
        let timeout = self.cfg.limits.body_read_timeout;
        let read = async {
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| {
                    (
                        CallOutcome::Refused,
                        Status::cancelled(format!("border-gw: reading the request: {e}")),
                    )
                })?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if buf.len() + data.len() > MAX_REQUEST {
                    return Err((
                        CallOutcome::Refused,
                        Status::resource_exhausted(format!(
                            "border-gw: the request is over {MAX_REQUEST} bytes"
                        )),
                    ));
                }
                // The buffer's whole capacity is charged: it doubles up
                // to MAX_REQUEST.
                let need = buf.len() + data.len();
                if need > charge.bytes() {
                    let target = need.next_power_of_two().min(MAX_REQUEST).max(need);
                    if let Err(e) = charge.take(target - charge.bytes()) {
                        let limit = match e {
                            Exceeded::Total => Limit::RequestMemory,
                            Exceeded::Shared => Limit::ReaderRequestMemory,
                        };
                        self.refusals.count(Listener::Api, limit);
                        let who = format!("border-gw {}", self.cfg.id);
                        return Err((CallOutcome::Refused, mgmt::budget::exceeded_status(&who, e)));
                    }
                    buf.reserve_exact(target - buf.len());
                }
                buf.extend_from_slice(&data);
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r.map(|()| (Bytes::from(buf), charge)),
            Err(_) => {
                self.refusals.count(Listener::Api, Limit::BodyReadTimeout);
                Err((
                    CallOutcome::Refused,
                    Status::deadline_exceeded(format!(
                        "border-gw {}: the request body did not arrive whole within {timeout:?} (limits.body_read_timeout_ms)",
                        self.cfg.id
                    )),
                ))
            }
        }
    }

    async fn via_tunnel(
        &self,
        parts: &hyper::http::request::Parts,
        body: &Bytes,
        appliance: &str,
        path: &str,
        deadline: Option<Instant>,
    ) -> Result<hyper::Response<RespBody>, Fail> {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let wait = Instant::now() + TUNNEL_WAIT;
            let until = deadline.map_or(wait, |d| d.min(wait));
            let mut lease = match self.tunnels.take(appliance, until).await {
                Ok(l) => l,
                Err(Missing::NoTunnel) if last.is_empty() => return Err(Fail::NoLocal),
                Err(Missing::NoTunnel) => break,
                Err(Missing::AllBusy) => {
                    return Err((CallOutcome::Busy, Status::resource_exhausted(format!(
                        "border-gw {}: every tunnel of appliance {appliance} stayed busy (waited up to {TUNNEL_WAIT:?} or the deadline)",
                        self.cfg.id
                    )))
                    .into())
                }
            };
            if !lease.methods.contains(path) {
                return Err((
                    CallOutcome::Refused,
                    Status::unimplemented(format!(
                        "appliance {appliance} does not offer {path} (its tunnels announce {} methods)",
                        lease.methods.len()
                    )),
                )
                    .into());
            }
            let Some(sender) = lease.sender.as_mut() else {
                continue;
            };
            let req = outgoing(parts, body.clone(), appliance, false, deadline);
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(req).await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(resp) => {
                    let what = format!("the tunnel of appliance {appliance}");
                    return Ok(resp.map(|b| {
                        grpc::EndsWithStatus::new(mgmt::agent::body::Guarded::new(b, lease), what)
                            .boxed_unsync()
                    }));
                }
                Err(e) => {
                    last = e.to_string();
                    // Retried only on another tunnel when this one was closing.
                    if !sender.is_closed() {
                        break;
                    }
                }
            }
        }
        Err((
            CallOutcome::ApplianceError,
            Status::unavailable(format!(
                "border-gw {}: the tunnel to appliance {appliance} failed: {last}",
                self.cfg.id
            )),
        )
            .into())
    }

    async fn via_peer(
        &self,
        parts: &hyper::http::request::Parts,
        body: Bytes,
        appliance: &str,
        deadline: Option<Instant>,
    ) -> Result<hyper::Response<RespBody>, Refusal> {
        let holders = self.registry.holders(appliance).await.map_err(|e| {
            (
                CallOutcome::RegistryError,
                Status::unavailable(format!(
                    "border-gw {}: the tunnel registry (Redis) failed: {e}",
                    self.cfg.id
                )),
            )
        })?;
        // Registry entries are hints among the configured peers only: an
        // address no [[peer]] names (a forged entry) gets no probe, no call.
        let (holders, unknown): (Vec<SocketAddr>, Vec<SocketAddr>) =
            holders.into_iter().partition(|h| self.peers.is_peer(*h));
        for h in &unknown {
            self.stats.count_unknown_holder();
            tracing::warn!(gateway = %h, appliance = %appliance, "registry: an entry names a gateway that is not a configured [[peer]]: ignored");
        }
        if holders.is_empty() {
            let no_tunnel = if self.cfg.appliances.contains_key(appliance) {
                Status::unavailable(format!(
                    "appliance {appliance} has no tunnel to any gateway (is its border-mgmt running and dialling out?)"
                ))
            } else {
                Status::not_found(format!(
                    "unknown appliance {appliance}: no gateway holds a tunnel of it"
                ))
            };
            return Err((CallOutcome::NoTunnel, no_tunnel));
        }
        let chosen = self.first_holder(&holders, appliance).await.ok_or_else(|| {
            (CallOutcome::NoTunnel, Status::unavailable(format!(
                "appliance {appliance}: none of the gateways the registry names ({}) has a tunnel of it now",
                holders.iter().map(|h| h.to_string()).collect::<Vec<_>>().join(", ")
            )))
        })?;
        let gateway_error = |what: String| (CallOutcome::GatewayError, Status::unavailable(what));
        let mut sender = self.peers.sender(chosen).await.map_err(|e| {
            gateway_error(format!("border-gw: gateway {chosen} is not reachable: {e}"))
        })?;
        let req = outgoing(parts, body, &chosen.to_string(), true, deadline);
        self.stats.count_peer_forward();
        let resp = match sender.ready().await {
            Ok(()) => sender.send_request(req).await,
            Err(e) => Err(e),
        }
        .map_err(|e| gateway_error(format!("border-gw: gateway {chosen} failed mid-call: {e}")))?;
        let what = format!("gateway {chosen}");
        Ok(resp.map(|b| grpc::EndsWithStatus::new(b, what).boxed_unsync()))
    }

    /// Asks every holder in parallel; the first that has a tunnel wins.
    async fn first_holder(&self, holders: &[SocketAddr], appliance: &str) -> Option<SocketAddr> {
        let mut asks = tokio::task::JoinSet::new();
        for &h in holders {
            let (peers, a) = (self.peers.clone(), appliance.to_string());
            asks.spawn(async move {
                let r = tokio::time::timeout(PROBE_TIMEOUT, peers.has_tunnel(h, &a)).await;
                (h, r)
            });
        }
        while let Some(r) = asks.join_next().await {
            match r {
                Ok((h, Ok(Ok(true)))) => return Some(h),
                Ok((h, Ok(Err(e)))) => {
                    tracing::warn!(gateway = %h, error = %e, "asking a gateway for a tunnel failed")
                }
                Ok((h, Err(_))) => {
                    tracing::warn!(gateway = %h, "a gateway did not say within {PROBE_TIMEOUT:?} whether it has a tunnel")
                }
                _ => {}
            }
        }
        None
    }
}

/// The call as sent on: same method, path, metadata and body; `hop` marks
/// a call forwarded to another gateway; `grpc-timeout` says the time left
/// before `deadline`.
fn outgoing(
    parts: &hyper::http::request::Parts,
    body: Bytes,
    authority: &str,
    hop: bool,
    deadline: Option<Instant>,
) -> hyper::Request<Full<Bytes>> {
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = hyper::Request::new(Full::new(body));
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = format!("http://{authority}{pq}")
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("http://appliance/"));
    for (k, v) in &parts.headers {
        if k != hyper::header::HOST {
            req.headers_mut().append(k, v.clone());
        }
    }
    if hop {
        req.headers_mut().insert(
            crate::HOP_HEADER,
            hyper::header::HeaderValue::from_static("1"),
        );
    }
    if let Some(d) = deadline {
        let left = d
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        let value = format!("{}m", left.min(99_999_999));
        if let Ok(v) = hyper::header::HeaderValue::from_str(&value) {
            req.headers_mut().insert("grpc-timeout", v);
        }
    }
    req
}
