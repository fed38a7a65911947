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
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tonic::Status;

use crate::config::GwConfig;
use crate::grpc::{self, RespBody};
use crate::peers::Peers;
use crate::registry::Registry;
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
}

enum Fail {
    NoLocal,
    Status(Status),
}

impl From<Status> for Fail {
    fn from(s: Status) -> Fail {
        Fail::Status(s)
    }
}

impl Gateway {
    /// Answers one call: the appliance's answer, or a status saying why not.
    pub async fn handle(
        self: Arc<Self>,
        req: hyper::Request<Incoming>,
    ) -> hyper::Response<RespBody> {
        let path = req.uri().path().to_string();
        let appliance = req
            .headers()
            .get(crate::APPLIANCE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let result = match grpc::timeout(req.headers()) {
            Err(e) => Err(Status::invalid_argument(format!("border-gw: {e}"))),
            Ok(timeout) => {
                // The gateway answers a little before the caller gives up,
                // so the caller learns why (DEADLINE_EXCEEDED from border-gw).
                let deadline = timeout.map(|t| Instant::now() + t - (t / 10).min(DEADLINE_MARGIN));
                let work = self.route(req, &appliance, &path, deadline);
                match deadline {
                    None => work.await,
                    Some(d) => tokio::time::timeout_at(d.into(), work)
                        .await
                        .unwrap_or_else(|_| {
                            Err(Status::deadline_exceeded(format!(
                                "border-gw {}: the deadline passed before appliance {appliance:?} answered",
                                self.cfg.id
                            )))
                        }),
                }
            }
        };
        match result {
            Ok(r) => r,
            Err(st) => {
                tracing::warn!(appliance = %appliance, method = %path, code = ?st.code(), "call refused: {}", st.message());
                grpc::status(st)
            }
        }
    }

    async fn route(
        &self,
        req: hyper::Request<Incoming>,
        appliance: &str,
        path: &str,
        deadline: Option<Instant>,
    ) -> Result<hyper::Response<RespBody>, Status> {
        if appliance.is_empty() {
            return Err(Status::invalid_argument(format!(
                "border-gw: no {} metadata: name the appliance to call",
                crate::APPLIANCE_HEADER
            )));
        }
        if path == crate::HAS_TUNNEL_PATH {
            return if self.tunnels.has(appliance) {
                Ok(grpc::status(Status::new(tonic::Code::Ok, "")))
            } else {
                Err(Status::unavailable(format!(
                    "border-gw {}: no tunnel of appliance {appliance}",
                    self.cfg.id
                )))
            };
        }
        let hop = req.headers().contains_key(crate::HOP_HEADER);
        let (parts, body) = req.into_parts();
        let body = Limited::new(body, MAX_REQUEST)
            .collect()
            .await
            .map_err(|e| {
                Status::resource_exhausted(format!("border-gw: reading the request: {e}"))
            })?
            .to_bytes();
        match self
            .via_tunnel(&parts, &body, appliance, path, deadline)
            .await
        {
            Ok(r) => Ok(r),
            Err(Fail::Status(s)) => Err(s),
            Err(Fail::NoLocal) if hop => Err(Status::unavailable(format!(
                "border-gw {}: no tunnel of appliance {appliance} here any more",
                self.cfg.id
            ))),
            Err(Fail::NoLocal) => self.via_peer(&parts, body, appliance, deadline).await,
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
                    return Err(Status::resource_exhausted(format!(
                        "border-gw {}: every tunnel of appliance {appliance} stayed busy (waited up to {TUNNEL_WAIT:?} or the deadline)",
                        self.cfg.id
                    ))
                    .into())
                }
            };
            if !lease.methods.contains(path) {
                return Err(Status::unimplemented(format!(
                    "appliance {appliance} does not offer {path} (its tunnels announce {} methods)",
                    lease.methods.len()
                ))
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
        Err(Status::unavailable(format!(
            "border-gw {}: the tunnel to appliance {appliance} failed: {last}",
            self.cfg.id
        ))
        .into())
    }

    async fn via_peer(
        &self,
        parts: &hyper::http::request::Parts,
        body: Bytes,
        appliance: &str,
        deadline: Option<Instant>,
    ) -> Result<hyper::Response<RespBody>, Status> {
        let holders = self.registry.holders(appliance).await.map_err(|e| {
            Status::unavailable(format!(
                "border-gw {}: the tunnel registry (Redis) failed: {e}",
                self.cfg.id
            ))
        })?;
        if holders.is_empty() {
            return Err(if self.cfg.appliances.contains_key(appliance) {
                Status::unavailable(format!(
                    "appliance {appliance} has no tunnel to any gateway (is its border-mgmt running and dialling out?)"
                ))
            } else {
                Status::not_found(format!(
                    "unknown appliance {appliance}: no gateway holds a tunnel of it"
                ))
            });
        }
        let chosen = self.first_holder(&holders, appliance).await.ok_or_else(|| {
            Status::unavailable(format!(
                "appliance {appliance}: none of the gateways the registry names ({}) has a tunnel of it now",
                holders.iter().map(|h| h.to_string()).collect::<Vec<_>>().join(", ")
            ))
        })?;
        let mut sender = self.peers.sender(chosen).await.map_err(|e| {
            Status::unavailable(format!("border-gw: gateway {chosen} is not reachable: {e}"))
        })?;
        let req = outgoing(parts, body, &chosen.to_string(), true, deadline);
        let resp = match sender.ready().await {
            Ok(()) => sender.send_request(req).await,
            Err(e) => Err(e),
        }
        .map_err(|e| {
            Status::unavailable(format!("border-gw: gateway {chosen} failed mid-call: {e}"))
        })?;
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
