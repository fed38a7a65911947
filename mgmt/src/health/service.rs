//! `border.v1.BorderHealth`: the server (observations for peers, verdicts
//! for operators) and the peer client loop.

use std::sync::Arc;
use std::time::Duration;

use conf::Listen;
use rustls::pki_types::ServerName;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::{HealthView, Msg, Options};
use crate::pb::{self, border_health_client::BorderHealthClient, border_health_server};
use crate::proto::{observation_from_pb, observation_to_pb};

/// Implements `border.v1.BorderHealth` over a [`HealthView`].
#[derive(Debug, Clone)]
pub struct HealthService {
    view: Arc<HealthView>,
}

impl HealthService {
    /// A service over `view`.
    pub fn new(view: Arc<HealthView>) -> HealthService {
        HealthService { view }
    }

    /// The tonic server with the API's message size limits.
    pub fn into_server(self) -> border_health_server::BorderHealthServer<HealthService> {
        border_health_server::BorderHealthServer::new(self)
            .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::MAX_MESSAGE_BYTES)
    }
}

#[tonic::async_trait]
impl border_health_server::BorderHealth for HealthService {
    async fn get_observations(
        &self,
        _req: Request<pb::GetObservationsRequest>,
    ) -> Result<Response<pb::GetObservationsResponse>, Status> {
        Ok(Response::new(pb::GetObservationsResponse {
            checker: self.view.checker().to_string(),
            observations: self
                .view
                .observations()
                .iter()
                .map(|(k, o, age)| observation_to_pb(k, o, *age))
                .collect(),
        }))
    }

    async fn get_health(
        &self,
        _req: Request<pb::GetHealthRequest>,
    ) -> Result<Response<pb::GetHealthResponse>, Status> {
        Ok(Response::new((&*self.view.snapshot()).into()))
    }
}

/// A health client to a border-mgmt API (`unix://` or `tcp://` with mutual TLS).
pub async fn connect(
    target: &Listen,
    tls: Option<&crate::tls::ClientTls>,
) -> Result<BorderHealthClient<Channel>, String> {
    let ch = match target {
        Listen::Unix(path) => crate::client::unix_channel(path.clone())
            .await
            .map_err(|e| describe(&e))?,
        Listen::Tcp(addr) => {
            let addr = *addr;
            let tls = tls.ok_or("a tcp:// peer needs [mgmt.tls] (client certificate)")?;
            let cfg = crate::tls::client_config(tls).map_err(|e| e.to_string())?;
            let name = match &tls.server_name {
                Some(n) => ServerName::try_from(n.clone())
                    .map_err(|_| format!("{n:?} is not a valid TLS server name"))?,
                None => ServerName::IpAddress(addr.ip().into()),
            };
            crate::client::tls_channel(addr, cfg, name)
                .await
                .map_err(|e| explain(&e, Some(tls), &format!("tcp://{addr}")))?
        }
    };
    Ok(BorderHealthClient::new(ch)
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(crate::MAX_MESSAGE_BYTES))
}

/// `e` and its sources, `a: b: c`; a source that only repeats the end of
/// the message so far is left out.
fn describe(e: &dyn std::error::Error) -> String {
    chain(e.to_string(), e.source())
}

fn chain(mut msg: String, mut src: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(s) = src {
        let t = s.to_string();
        if !t.is_empty() && !msg.ends_with(&t) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&t);
        }
        src = s.source();
    }
    msg
}

/// The first error of type `T` in `e`'s chain, also inside a
/// `std::io::Error` (whose `source()` skips the error it wraps: that is
/// how rustls errors travel).
fn find<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(r) = c.downcast_ref::<T>() {
            return Some(r);
        }
        if let Some(r) = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|i| i.downcast_ref::<T>())
        {
            return Some(r);
        }
        cur = c.source();
    }
    None
}

/// What an operator should check when the TLS handshake with the peer at
/// `target` failed with `e`; `None` if it is not a certificate matter.
fn tls_hint(
    e: &(dyn std::error::Error + 'static),
    tls: &crate::tls::ClientTls,
    target: &str,
) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C};
    let refused = || {
        let fp = crate::tls::load_certs(&tls.cert)
            .ok()
            .and_then(|c| c.first().map(|c| crate::tls::fingerprint(c)))
            .unwrap_or_else(|| "?".into());
        format!(
            "{target} refused this border-mgmt's client certificate {} ({fp}) in the TLS handshake: it must be pinned in the peer's [mgmt.tls].peer_fingerprints (or client_fingerprints) and signed by the peer's client_ca",
            tls.cert.display()
        )
    };
    if find::<crate::tls::ClosedAfterHandshake>(e).is_some() {
        return Some(refused());
    }
    match find::<rustls::Error>(e)? {
        rustls::Error::AlertReceived(
            A::AccessDenied
            | A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::CertificateRequired,
        ) => Some(refused()),
        rustls::Error::InvalidCertificate(c) => {
            let why = match c {
                C::UnknownIssuer | C::BadSignature => format!(
                    "is not signed by this border-mgmt's [mgmt.tls].client_ca ({})",
                    tls.server_ca.display()
                ),
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    "does not name the address it is reached at (expected it as an IP subject alternative name)".to_string()
                }
                C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. } => {
                    "is expired or not yet valid".to_string()
                }
                _ => "is not accepted".to_string(),
            };
            Some(format!("the server certificate of {target} {why}"))
        }
        _ => None,
    }
}

/// A one-line reason for a failed connect or call to a peer: `msg` and the
/// error chain from `src`, led, for a certificate problem, by what to check.
fn explain_chain(
    msg: String,
    src: Option<&(dyn std::error::Error + 'static)>,
    tls: Option<&crate::tls::ClientTls>,
    target: &str,
) -> String {
    let hint = match (src, tls) {
        (Some(e), Some(t)) => tls_hint(e, t, target),
        _ => None,
    };
    let detail = chain(msg, src);
    match hint {
        Some(h) => format!("{h} ({detail})"),
        None => detail,
    }
}

/// [`explain_chain`] of `e` itself.
fn explain(
    e: &(dyn std::error::Error + 'static),
    tls: Option<&crate::tls::ClientTls>,
    target: &str,
) -> String {
    explain_chain(String::new(), Some(e), tls, target)
}

/// Asks the peer at `target` for its observations every
/// `opts.peer_interval` (with up to 20% jitter), each call bounded by
/// `opts.peer_timeout`; reports them (or the error) to the runner.
pub(super) async fn peer_loop(
    target: Listen,
    addr: String,
    tx: mpsc::Sender<Msg>,
    view: Arc<HealthView>,
    opts: Options,
) {
    let mut client: Option<BorderHealthClient<Channel>> = None;
    let mut rng = fastrand::Rng::new();
    let mut last_error = String::new();
    loop {
        let result: Result<pb::GetObservationsResponse, String> = async {
            if client.is_none() {
                let c = tokio::time::timeout(
                    opts.peer_timeout,
                    connect(&target, opts.peer_tls.as_ref()),
                )
                .await
                .map_err(|_| {
                    format!("connect timeout after {} ms", opts.peer_timeout.as_millis())
                })??;
                client = Some(c);
            }
            let c = client.as_mut().expect("connected above");
            let req = pb::GetObservationsRequest {
                from_checker: view.checker().to_string(),
            };
            match tokio::time::timeout(opts.peer_timeout, c.get_observations(req)).await {
                Err(_) => Err(format!(
                    "GetObservations timeout after {} ms",
                    opts.peer_timeout.as_millis()
                )),
                Ok(Err(s)) => Err(format!(
                    "GetObservations: {}",
                    explain_chain(
                        s.message().to_string(),
                        std::error::Error::source(&s),
                        opts.peer_tls.as_ref(),
                        &addr
                    )
                )),
                Ok(Ok(r)) => Ok(r.into_inner()),
            }
        }
        .await;
        let now = view.now_ms();
        let msg = match result {
            Ok(r) => {
                if !last_error.is_empty() {
                    tracing::info!(peer = %addr, checker = %r.checker, "health peer answers again");
                    last_error.clear();
                }
                let obs = r
                    .observations
                    .iter()
                    .take(100_000)
                    .filter_map(|o| observation_from_pb(o, now))
                    .collect();
                let id: String = r.checker.chars().take(200).collect();
                Msg::Peer(addr.clone(), id, obs)
            }
            Err(e) => {
                client = None;
                if e != last_error {
                    tracing::warn!(peer = %addr, error = %e, "health peer unreachable; its observations go stale");
                    last_error = e.clone();
                }
                Msg::PeerError(addr.clone(), e)
            }
        };
        if tx.send(msg).await.is_err() {
            return;
        }
        let base = opts.peer_interval.as_millis() as u64;
        let jitter = rng.u64(0..=base / 5);
        tokio::time::sleep(Duration::from_millis(base - base / 10 + jitter)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() -> crate::tls::ClientTls {
        crate::tls::ClientTls {
            server_ca: "/etc/border/ca.pem".into(),
            cert: "/nonexistent/lb-a.pem".into(),
            key: "/nonexistent/lb-a.key".into(),
            server_name: None,
        }
    }

    fn io(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
        std::io::Error::other(e)
    }

    /// An error with a source, shown as `text` (tonic's and hyper's errors
    /// often repeat their source's text in their own).
    #[derive(Debug)]
    struct Wrap(String, std::io::Error);

    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    #[test]
    fn a_source_that_repeats_the_message_is_said_once() {
        let refused = || std::io::Error::other("Connection refused (os error 111)");
        let e = Wrap(
            "transport error: Connection refused (os error 111)".into(),
            refused(),
        );
        assert_eq!(
            describe(&e),
            "transport error: Connection refused (os error 111)"
        );
        // A source with new text is added.
        let e = Wrap("transport error".into(), refused());
        assert_eq!(
            describe(&e),
            "transport error: Connection refused (os error 111)"
        );
    }

    #[test]
    fn certificate_problems_say_what_to_check() {
        let t = tls();
        let target = "tcp://10.0.0.2:50051";
        let foreign = io(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        assert_eq!(
            explain(&foreign, Some(&t), target),
            "the server certificate of tcp://10.0.0.2:50051 is not signed by this border-mgmt's [mgmt.tls].client_ca (/etc/border/ca.pem) (invalid peer certificate: UnknownIssuer)"
        );
        let name = io(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName,
        ));
        assert!(
            explain(&name, Some(&t), target).contains("does not name the address it is reached at")
        );
        for refused in [
            io(rustls::Error::AlertReceived(
                rustls::AlertDescription::AccessDenied,
            )),
            std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                crate::tls::ClosedAfterHandshake,
            ),
        ] {
            let s = explain(&refused, Some(&t), target);
            assert!(
                s.starts_with("tcp://10.0.0.2:50051 refused this border-mgmt's client certificate /nonexistent/lb-a.pem (?) in the TLS handshake: it must be pinned in the peer's [mgmt.tls].peer_fingerprints (or client_fingerprints)"),
                "{s}"
            );
        }
        // Not a certificate matter: the chain as it is.
        let other = io(rustls::Error::AlertReceived(
            rustls::AlertDescription::HandshakeFailure,
        ));
        assert_eq!(
            explain(&other, Some(&t), target),
            "received fatal alert: HandshakeFailure"
        );
    }
}
