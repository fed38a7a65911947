//! Reaching border-mgmt (or the state region) from the target flags, and
//! classifying what went wrong into one line: away (status and stats may
//! fall back to the state region), failed or refused TLS, or the server's
//! own answer.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use conf::state::StateRegion;
use mgmt::client::{
    ConnectError, Route, RoutedBgpClient, RoutedClient as Client, RoutedHealthClient,
};
use mgmt::tls::ClientTls;

use crate::cli::Target;

/// Why a command failed. One line.
#[derive(Debug)]
pub enum Failure {
    /// border-mgmt did not answer (status and stats may use the state region).
    Unreachable(String),
    /// The TLS handshake failed or the server refused this client's
    /// certificate: it answered, but cannot be asked.
    Denied(String),
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unreachable(m) | Failure::Denied(m) | Failure::Other(m) => f.write_str(m),
        }
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Other(s)
    }
}

/// What a command returns: its exit code, or the one-line failure.
pub type Res = Result<ExitCode, Failure>;

/// `a\nb` -> `a; b`: every error stays one line.
pub fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A chain of causes as tonic prints it, without its repetitions and
/// without the uninformative `transport error`.
fn tidy_chain(s: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in s.split(": ") {
        if p == "transport error" {
            continue;
        }
        parts.push(p);
        // `a: b: a: b` -> `a: b`: a cause repeated by its wrapper.
        'shrink: loop {
            for k in 1..=parts.len() / 2 {
                let n = parts.len();
                if parts[n - k..] == parts[n - 2 * k..n - k] {
                    parts.truncate(n - k);
                    continue 'shrink;
                }
            }
            break;
        }
    }
    parts.join(": ")
}

/// A refusal in the TLS handshake (certificates, alerts), not a server that
/// is away.
fn is_tls_failure(why: &str) -> bool {
    [
        "certificate",
        "alert",
        "handshake",
        "AccessDenied",
        "UnknownIssuer",
    ]
    .iter()
    .any(|w| why.contains(w))
}

fn show(target: &conf::Listen) -> String {
    match target {
        conf::Listen::Unix(p) => format!("unix://{}", p.display()),
        conf::Listen::Tcp(a) => format!("tcp://{a}"),
    }
}

/// The instance's name and its state region (`--config` or `--instance`);
/// a region that does not exist (border-dp never ran) is a target that
/// cannot be reached.
pub fn open_local(
    config: Option<&Path>,
    instance: Option<&str>,
) -> Result<(String, StateRegion), Failure> {
    let instance = border::instance_from(config, instance).map_err(|e| e.to_string())?;
    let region = border::open_state(&instance).map_err(|e| match e {
        e @ border::DpStateError::NotRunning { .. } => Failure::Unreachable(e.to_string()),
        e => Failure::Other(e.to_string()),
    })?;
    Ok((instance, region))
}

/// A current-thread runtime for one command's calls.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Other(format!("cannot start the runtime: {e}")))
}

/// A failed connect in one line: a refused client certificate, another TLS
/// failure, or a server that is away.
fn connect_failure(e: &ConnectError) -> Failure {
    let why = tidy_chain(&one_line(&e.to_string()));
    // TLS 1.3 refuses a client certificate after the handshake; the
    // connect waits for it (mgmt::tls::connect_primed).
    let refused = why.contains("AccessDenied")
        || why.contains("closed the connection right after the TLS handshake");
    if refused {
        Failure::Denied(format!(
            "TLS with border-mgmt failed: it refused this client \
             certificate ({why}); is its fingerprint pinned in [mgmt.tls] (client_, reader_ or peer_fingerprints)?"
        ))
    } else if is_tls_failure(&why) {
        Failure::Denied(format!("TLS with border-mgmt failed: {why}"))
    } else {
        Failure::Unreachable(format!("border-mgmt is not reachable: {why}"))
    }
}

impl Target {
    fn timeout(&self) -> Duration {
        self.timeout_ms
    }

    /// The instance, when --config or --instance names one (for the state region).
    pub fn local_instance(&self) -> Option<(Option<&Path>, Option<&str>)> {
        (self.config.is_some() || self.instance.is_some())
            .then_some((self.config.as_deref(), self.instance.as_deref()))
    }

    /// The instance's state region.
    pub fn open_local(&self) -> Result<(String, StateRegion), Failure> {
        open_local(self.config.as_deref(), self.instance.as_deref())
    }

    fn tls(&self) -> Option<ClientTls> {
        let (cert, key, ca) = (self.cert.clone()?, self.key.clone()?, self.ca.clone()?);
        Some(ClientTls {
            server_ca: ca,
            cert,
            key,
            server_name: self.server_name.clone(),
        })
    }

    /// The API's address and how calls are routed: `--gateway` with
    /// `--appliance`, else border-mgmt's own address.
    fn target(&self) -> Result<(conf::Listen, Route, String), Failure> {
        if let (Some(gw), Some(id)) = (&self.gateway, &self.appliance) {
            let target = mgmt::client::parse_target(gw)
                .ok()
                .filter(|t| matches!(t, conf::Listen::Tcp(_)))
                .ok_or_else(|| {
                    Failure::Other(format!(
                        "--gateway `{gw}`: expected tcp://ip:port (border-gw's api_listen)"
                    ))
                })?;
            let route = Route::to(id).ok_or_else(|| {
                Failure::Other(format!("--appliance `{id}` cannot be sent as metadata"))
            })?;
            let shown = format!("{} (appliance {id})", show(&target));
            return Ok((target, route, shown));
        }
        let target = border::api_target(
            self.server.as_deref(),
            self.config.as_deref(),
            self.instance.as_deref(),
        )
        .map_err(|e| Failure::Other(one_line(&e.to_string())))?;
        let shown = show(&target);
        Ok((target, Route::default(), shown))
    }

    pub async fn connect(&self) -> Result<Api, Failure> {
        let (target, route, shown) = self.target()?;
        if matches!(target, conf::Listen::Unix(_)) && self.cert.is_some() {
            return Err(Failure::Other(format!(
                "{shown}: --cert/--key/--ca are for a tcp:// server (a unix socket has no TLS)"
            )));
        }
        let tls = self.tls();
        let connecting = mgmt::client::connect_channel(&target, tls.as_ref());
        let client = match tokio::time::timeout(self.timeout(), connecting).await {
            Err(_) => {
                return Err(Failure::Unreachable(format!(
                    "border-mgmt is not reachable: no answer from {shown} within {} ms",
                    self.timeout_ms.as_millis()
                )))
            }
            Ok(Err(e @ ConnectError::Connect { .. })) => return Err(connect_failure(&e)),
            Ok(Err(e)) => return Err(Failure::Other(one_line(&e.to_string()))),
            Ok(Ok(ch)) => ch,
        };
        let clients = mgmt::client::routed(client, route);
        Ok(Api {
            client: clients.border,
            bgp: clients.bgp,
            health: clients.health,
            admin: clients.admin,
            shown,
            timeout: self.timeout(),
        })
    }
}

/// A connected client and where it is connected.
pub struct Api {
    client: Client,
    /// `border.v1.BorderBgp` on the same connection.
    pub bgp: RoutedBgpClient,
    /// `border.v1.BorderHealth` on the same connection.
    health: RoutedHealthClient,
    /// `border.v1.BorderAdmin` on the same connection.
    admin: mgmt::client::RoutedAdminClient,
    /// The server as `unix:///path` or `tcp://ip:port`.
    pub shown: String,
    timeout: Duration,
}

impl Api {
    /// One unary call, bounded by the timeout; errors become one line.
    pub async fn call<T, F>(&mut self, f: impl FnOnce(Client) -> F) -> Result<T, Failure>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let call = f(self.client.clone());
        self.bounded(call).await
    }

    /// One unary call of `border.v1.BorderBgp`, as [`Api::call`].
    pub async fn call_bgp<T, F>(
        &mut self,
        f: impl FnOnce(RoutedBgpClient) -> F,
    ) -> Result<T, Failure>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let call = f(self.bgp.clone());
        self.bounded(call).await
    }

    /// SetLogLevel (`border.v1.BorderAdmin`), as [`Api::call`].
    pub async fn call_set_log_level(
        &mut self,
        req: mgmt::pb::SetLogLevelRequest,
    ) -> Result<mgmt::pb::SetLogLevelResponse, Failure> {
        let mut a = self.admin.clone();
        self.bounded(async move { a.set_log_level(req).await })
            .await
    }

    /// GetHealth (`border.v1.BorderHealth`), as [`Api::call`].
    pub async fn call_health(&mut self) -> Result<mgmt::pb::GetHealthResponse, Failure> {
        let mut h = self.health.clone();
        self.bounded(async move { h.get_health(mgmt::pb::GetHealthRequest {}).await })
            .await
    }

    /// Waits for `call` up to the timeout; errors become one line.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, call).await {
            Err(_) => Err(Failure::Unreachable(format!(
                "border-mgmt at {} did not answer within {} ms",
                self.shown,
                self.timeout.as_millis()
            ))),
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(st)) => Err(status_failure(&self.shown, &st)),
        }
    }
}

/// A refused call as one line: the server's message for the errors it
/// explains itself (NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION).
pub fn status_failure(shown: &str, st: &tonic::Status) -> Failure {
    use tonic::Code;
    let mut msg = one_line(st.message());
    let mut src = std::error::Error::source(st);
    while let Some(s) = src {
        let more = one_line(&s.to_string());
        if !msg.contains(&more) {
            msg.push_str(": ");
            msg.push_str(&more);
        }
        src = s.source();
    }
    let msg = tidy_chain(&msg);
    // Over TLS 1.3 a client whose certificate the server refuses learns it
    // only on its first request: as an alert, or as a closed connection.
    let tls = shown.starts_with("tcp://");
    let lost = matches!(
        st.code(),
        Code::Unknown | Code::Cancelled | Code::Unavailable
    );
    if tls && lost && msg.contains("AccessDenied") {
        return Failure::Denied(format!(
            "TLS with border-mgmt at {shown} failed: it refused this client certificate ({msg}); \
             is its fingerprint pinned in [mgmt.tls] (client_, reader_ or peer_fingerprints)?"
        ));
    }
    if tls
        && lost
        && ["broken pipe", "connection closed", "connection reset"]
            .iter()
            .any(|w| msg.contains(w))
    {
        return Failure::Denied(format!(
            "border-mgmt at {shown} closed the connection ({msg}): over TLS that is how it \
             refuses a client certificate whose fingerprint is not pinned in [mgmt.tls]"
        ));
    }
    match st.code() {
        Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition => Failure::Other(msg),
        Code::Unavailable if is_tls_failure(&msg) => {
            Failure::Denied(format!("TLS with border-mgmt at {shown} failed: {msg}"))
        }
        Code::Unavailable => {
            Failure::Unreachable(format!("border-mgmt at {shown} is not reachable: {msg}"))
        }
        Code::OutOfRange => Failure::Other(format!(
            "border-mgmt refused the request: larger than the API's {} MiB limit (OUT_OF_RANGE: {msg})",
            mgmt::MAX_MESSAGE_BYTES >> 20
        )),
        code => Failure::Other(format!("border-mgmt at {shown}: {code:?}: {msg}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_stay_on_one_line() {
        assert_eq!(one_line("a\n  b\n\nc"), "a; b; c");
        assert_eq!(
            tidy_chain(
                "cannot connect to x: transport error: gone (os error 2): gone (os error 2)"
            ),
            "cannot connect to x: gone (os error 2)"
        );
        assert_eq!(
            tidy_chain("cannot connect to x: bad cert: UnknownIssuer: bad cert: UnknownIssuer"),
            "cannot connect to x: bad cert: UnknownIssuer"
        );
    }

    #[test]
    fn refusals_are_told_from_a_server_that_is_away() {
        let st = tonic::Status::unavailable("tcp connect error: Connection refused");
        assert!(matches!(
            status_failure("unix:///x.sock", &st),
            Failure::Unreachable(m) if m == "border-mgmt at unix:///x.sock is not reachable: tcp connect error: Connection refused"
        ));
        let st = tonic::Status::not_found("no VIP `nope` in the running config");
        assert!(matches!(
            status_failure("unix:///x.sock", &st),
            Failure::Other(m) if m == "no VIP `nope` in the running config"
        ));
        let st = tonic::Status::unknown("received fatal alert: AccessDenied");
        assert!(matches!(
            status_failure("tcp://10.0.0.1:50051", &st),
            Failure::Denied(m) if m.contains("refused this client certificate")
        ));
    }
}
