//! Who may call what on the gRPC API (docs/security.md), decided in one
//! place: [`AuthzLayer`], a tower layer in front of every service, keyed by
//! the gRPC path.
//!
//! Each connection is given its [`Caller`] when it is accepted: a unix
//! caller's kernel credentials (`SO_PEERCRED`, checked by
//! [`crate::peer::PeerPolicy`]; allowed callers are operators), or a TLS
//! client's pinned certificate and its role (`[mgmt.tls]`
//! `client_fingerprints` operators, `reader_fingerprints` readers,
//! `peer_fingerprints` peers). tonic hands the [`Caller`] to every request
//! of that connection as its connect info ([`CallerIo`]). A call outside
//! the caller's role is answered `PERMISSION_DENIED`, logged and counted
//! ([`ApiCounters`], metric `border_mgmt_api_role_denied_total{role}`).
//!
//! The [`Caller`] also carries the connection's share of `WatchEvents`
//! streams (`mgmt.limits.watch_streams_per_connection`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use conf::{ClientRole, MgmtLimits};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codegen::http;
use tonic::transport::server::Connected;
use tonic::Status;

/// Calls a reader may make: the `Get*` calls, `WatchEvents` and
/// `ListConnections`.
const READER_CALLS: [&str; 8] = [
    "/border.v1.Border/GetConfig",
    "/border.v1.Border/GetStatus",
    "/border.v1.Border/GetStats",
    "/border.v1.Border/WatchEvents",
    "/border.v1.Border/ListConnections",
    "/border.v1.BorderBgp/GetBgp",
    "/border.v1.BorderHealth/GetObservations",
    "/border.v1.BorderHealth/GetHealth",
];

/// The service a peer appliance's border-mgmt may call.
const PEER_SERVICE: &str = "/border.v1.BorderHealth/";

/// Whether `role` may call the gRPC method at `path`
/// (`/package.Service/Method`). Operators may call everything; a method
/// added later is operator-only until it is listed here.
pub fn allows(role: ClientRole, path: &str) -> bool {
    match role {
        ClientRole::Operator => true,
        ClientRole::Reader => READER_CALLS.contains(&path),
        ClientRole::Peer => path.starts_with(PEER_SERVICE),
    }
}

/// A bound of `[mgmt.limits]` that refused something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `watch_streams`: WatchEvents streams over all connections.
    WatchStreams,
    /// `watch_streams_per_connection`.
    WatchStreamsPerConnection,
    /// `tls_handshakes`: a connection arrived while that many handshakes
    /// were in progress; it was closed.
    TlsHandshakes,
    /// `tls_handshake_timeout_ms`: a handshake took too long.
    TlsHandshakeTimeout,
    /// `metrics_connections`: a scraper's connection beyond it was closed.
    MetricsConnections,
    /// `note_max_bytes`: an operator note was too long.
    NoteMaxBytes,
    /// `request_memory_mib`: the budget of request bytes buffered at once
    /// was taken.
    RequestMemory,
    /// `request_memory_mib` less `operator_reserve_mib`: the part readers
    /// and peers may take was taken.
    ReaderRequestMemory,
}

impl Limit {
    /// Every limit, in the order of their counters.
    pub const ALL: [Limit; 8] = [
        Limit::WatchStreams,
        Limit::WatchStreamsPerConnection,
        Limit::TlsHandshakes,
        Limit::TlsHandshakeTimeout,
        Limit::MetricsConnections,
        Limit::NoteMaxBytes,
        Limit::RequestMemory,
        Limit::ReaderRequestMemory,
    ];

    /// The metric label (the `[mgmt.limits]` key, `_ms` left out).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::WatchStreams => "watch_streams",
            Limit::WatchStreamsPerConnection => "watch_streams_per_connection",
            Limit::TlsHandshakes => "tls_handshakes",
            Limit::TlsHandshakeTimeout => "tls_handshake_timeout",
            Limit::MetricsConnections => "metrics_connections",
            Limit::NoteMaxBytes => "note_max_bytes",
            Limit::RequestMemory => "request_memory",
            Limit::ReaderRequestMemory => "reader_request_memory",
        }
    }
}

const ROLES: [ClientRole; 3] = [ClientRole::Operator, ClientRole::Reader, ClientRole::Peer];

fn role_index(r: ClientRole) -> usize {
    match r {
        ClientRole::Operator => 0,
        ClientRole::Reader => 1,
        ClientRole::Peer => 2,
    }
}

/// What the API refused since the server started, and the open
/// `WatchEvents` streams; the exporter shows them.
#[derive(Debug, Default)]
pub struct ApiCounters {
    unix_refused: AtomicU64,
    role_denied: [AtomicU64; 3],
    limit_refused: [AtomicU64; Limit::ALL.len()],
    watch_streams: AtomicU64,
}

impl ApiCounters {
    /// Calls on the unix socket refused for the caller's credentials.
    pub fn unix_refused(&self) -> u64 {
        self.unix_refused.load(Ordering::Relaxed)
    }

    /// Counts one more refused unix call; returns the new total.
    fn count_unix_refused(&self) -> u64 {
        self.unix_refused.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Calls refused because the caller's role does not allow them.
    pub fn role_denied(&self, role: ClientRole) -> u64 {
        self.role_denied[role_index(role)].load(Ordering::Relaxed)
    }

    /// Every role with its [`ApiCounters::role_denied`].
    pub fn roles_denied(&self) -> impl Iterator<Item = (ClientRole, u64)> + '_ {
        ROLES.into_iter().map(|r| (r, self.role_denied(r)))
    }

    /// Requests or connections `limit` refused.
    pub fn limit_refused(&self, limit: Limit) -> u64 {
        let i = Limit::ALL.iter().position(|l| *l == limit).unwrap_or(0);
        self.limit_refused[i].load(Ordering::Relaxed)
    }

    /// Counts one refusal by `limit`.
    pub fn count(&self, limit: Limit) {
        let i = Limit::ALL.iter().position(|l| *l == limit).unwrap_or(0);
        self.limit_refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// WatchEvents streams open now.
    pub fn watch_streams(&self) -> u64 {
        self.watch_streams.load(Ordering::Relaxed)
    }

    pub(crate) fn watch_stream_started(&self) {
        self.watch_streams.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn watch_stream_ended(&self) {
        self.watch_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Who is at the other end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A unix-socket caller (`SO_PEERCRED`; `None` where the kernel gave
    /// nothing).
    Unix {
        /// User id.
        uid: Option<u32>,
        /// Primary group id.
        gid: Option<u32>,
        /// Process id at connect time.
        pid: Option<i32>,
        /// Root, border-mgmt's user or a member of the operators' group.
        allowed: bool,
    },
    /// A TLS client with a pinned certificate.
    Cert {
        /// `sha256:<hex>` of its certificate.
        fingerprint: Arc<str>,
        /// Its role (`None`: not pinned, which the handshake already refuses).
        role: Option<ClientRole>,
    },
}

/// A connection's caller, handed to each of its requests (tonic connect
/// info, as a request extension).
#[derive(Debug, Clone)]
pub struct Caller {
    /// Who.
    pub identity: Identity,
    /// The original caller a pinned gateway named for this call
    /// ([`CALLER_HEADER`], read only on agent-mode tunnels): `sha256:<hex>`.
    pub on_behalf_of: Option<Arc<str>>,
    watch_slots: Arc<Semaphore>,
}

/// The metadata a border-gw sets on every call it forwards: the
/// fingerprint of the certificate that made the call (`sha256:<hex>`).
/// border-mgmt believes it only on a tunnel to a pinned gateway
/// (`mgmt.agent.gateway_fingerprints`); on its own listeners it is ignored.
pub const CALLER_HEADER: &str = "border-caller";

/// True for `sha256:` and 64 lowercase hex digits, the only form of
/// [`CALLER_HEADER`] believed (nothing else reaches a log line).
pub fn is_fingerprint(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

impl Caller {
    /// A new connection's caller, with its own share of WatchEvents streams.
    pub fn new(identity: Identity, limits: &MgmtLimits) -> Caller {
        Caller {
            identity,
            on_behalf_of: None,
            watch_slots: Arc::new(Semaphore::new(limits.watch_streams_per_connection as usize)),
        }
    }

    /// This caller (a gateway) calling for `original`, if `original` is a
    /// fingerprint; otherwise unchanged. Shares this connection's
    /// WatchEvents slots.
    pub fn on_behalf_of(&self, original: Option<&str>) -> Caller {
        let mut c = self.clone();
        c.on_behalf_of = original.filter(|o| is_fingerprint(o)).map(Arc::from);
        c
    }

    /// Who, for a log line: the certificate or unix user, and the original
    /// caller a gateway named.
    pub fn who(&self) -> String {
        let direct = match &self.identity {
            Identity::Cert { fingerprint, .. } => fingerprint.to_string(),
            Identity::Unix { uid, pid, .. } => format!("uid {uid:?} pid {pid:?}"),
        };
        match &self.on_behalf_of {
            Some(o) => format!("{o} via gateway {direct}"),
            None => direct,
        }
    }

    /// The caller's role: unix callers allowed by their credentials are
    /// operators; `None` may call nothing.
    pub fn role(&self) -> Option<ClientRole> {
        match &self.identity {
            Identity::Unix { allowed: true, .. } => Some(ClientRole::Operator),
            Identity::Unix { allowed: false, .. } => None,
            Identity::Cert { role, .. } => *role,
        }
    }

    /// One of this connection's WatchEvents slots, if one is free.
    pub fn try_watch_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.watch_slots.clone().try_acquire_owned().ok()
    }
}

/// A connection's I/O with its [`Caller`], which tonic hands to every
/// request on it.
#[derive(Debug)]
pub struct CallerIo<S> {
    inner: S,
    caller: Caller,
}

impl<S> CallerIo<S> {
    /// `inner` as `caller`'s connection.
    pub fn new(inner: S, caller: Caller) -> CallerIo<S> {
        CallerIo { inner, caller }
    }
}

impl<S> Connected for CallerIo<S> {
    type ConnectInfo = Caller;

    fn connect_info(&self) -> Caller {
        self.caller.clone()
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CallerIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for CallerIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Checks a call at `path` from `caller`: `Ok` if its role allows it;
/// otherwise the status to answer, logged and counted.
#[allow(clippy::result_large_err)]
pub fn check(caller: Option<&Caller>, path: &str, counters: &ApiCounters) -> Result<(), Status> {
    let Some(caller) = caller else {
        // Every connection is accepted with a Caller; without one, refuse.
        tracing::warn!(path, "api: call refused: connection without a caller");
        return Err(Status::permission_denied(
            "border-mgmt: unknown caller (no credentials on this connection)",
        ));
    };
    match (&caller.identity, caller.role()) {
        (_, Some(role)) if allows(role, path) => {
            // Every change is logged with who made it (the original caller
            // of a call a gateway forwarded); reads are not.
            if !allows(ClientRole::Reader, path) {
                tracing::info!(caller = %caller.who(), path, "api: call");
            }
            Ok(())
        }
        (Identity::Unix { uid, gid, pid, .. }, None) => {
            Err(refuse_unix(counters, *uid, *gid, *pid))
        }
        (identity, role) => {
            let shown = role.map_or("none", ClientRole::as_str);
            if let Some(r) = role {
                counters.role_denied[role_index(r)].fetch_add(1, Ordering::Relaxed);
            }
            let _ = identity;
            let who = caller.who();
            tracing::warn!(
                caller = %who,
                role = shown,
                path,
                "api: call refused: outside the caller's role"
            );
            Err(Status::permission_denied(format!(
                "border-mgmt: role {shown} may not call {path} (readers: the Get* calls, WatchEvents and ListConnections; peers: BorderHealth; operators: everything)"
            )))
        }
    }
}

/// A call from a unix caller that may not call: logged, counted, and the
/// status to answer.
fn refuse_unix(
    counters: &ApiCounters,
    uid: Option<u32>,
    gid: Option<u32>,
    pid: Option<i32>,
) -> Status {
    let n = counters.count_unix_refused();
    tracing::warn!(
        ?uid,
        ?gid,
        ?pid,
        refused_total = n,
        "api: call refused: the caller is not root, border-mgmt's user or in mgmt.operators_group"
    );
    Status::permission_denied(
        "border-mgmt: this unix user may not call the API (root, border-mgmt's user and mgmt.operators_group may)",
    )
}

/// The tower layer that runs [`check`] before every call.
#[derive(Debug, Clone)]
pub struct AuthzLayer {
    counters: Arc<ApiCounters>,
}

impl AuthzLayer {
    /// Counting refusals in `counters`.
    pub fn new(counters: Arc<ApiCounters>) -> AuthzLayer {
        AuthzLayer { counters }
    }
}

impl<S> tower::Layer<S> for AuthzLayer {
    type Service = Authz<S>;

    fn layer(&self, inner: S) -> Authz<S> {
        Authz {
            inner,
            counters: self.counters.clone(),
        }
    }
}

/// [`AuthzLayer`]'s service.
#[derive(Debug, Clone)]
pub struct Authz<S> {
    inner: S,
    counters: Arc<ApiCounters>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for Authz<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let caller = req.extensions().get::<Caller>();
        match check(caller, req.uri().path(), &self.counters) {
            Ok(()) => Box::pin(self.inner.call(req)),
            Err(status) => Box::pin(std::future::ready(Ok(status.into_http()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_get_and_watch_peers_get_health_operators_everything() {
        use ClientRole::*;
        for (path, op, reader, peer) in [
            ("/border.v1.Border/ApplyConfig", true, false, false),
            ("/border.v1.Border/SetBackend", true, false, false),
            ("/border.v1.Border/AddBackend", true, false, false),
            ("/border.v1.Border/RemoveBackend", true, false, false),
            ("/border.v1.Border/AddVip", true, false, false),
            ("/border.v1.Border/RemoveVip", true, false, false),
            ("/border.v1.Border/GetConfig", true, true, false),
            ("/border.v1.Border/GetStatus", true, true, false),
            ("/border.v1.Border/GetStats", true, true, false),
            ("/border.v1.Border/WatchEvents", true, true, false),
            ("/border.v1.Border/ListConnections", true, true, false),
            ("/border.v1.BorderBgp/GetBgp", true, true, false),
            ("/border.v1.BorderBgp/SetMaintenance", true, false, false),
            ("/border.v1.BorderAdmin/SetLogLevel", true, false, false),
            ("/border.v1.BorderHealth/GetObservations", true, true, true),
            ("/border.v1.BorderHealth/GetHealth", true, true, true),
            ("/border.v1.Border/GetNewThing", true, false, false),
        ] {
            assert_eq!(allows(Operator, path), op, "{path}");
            assert_eq!(allows(Reader, path), reader, "{path}");
            assert_eq!(allows(Peer, path), peer, "{path}");
        }
    }

    #[test]
    fn refusals_are_counted_by_role_and_unknown_callers_refused() {
        let c = ApiCounters::default();
        let limits = MgmtLimits::default();
        let reader = Caller::new(
            Identity::Cert {
                fingerprint: "sha256:ab".into(),
                role: Some(ClientRole::Reader),
            },
            &limits,
        );
        assert!(check(Some(&reader), "/border.v1.Border/GetStatus", &c).is_ok());
        let e = check(Some(&reader), "/border.v1.Border/ApplyConfig", &c).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(c.role_denied(ClientRole::Reader), 1);
        let e = check(None, "/border.v1.Border/GetStatus", &c).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        let outsider = Caller::new(
            Identity::Unix {
                uid: Some(65534),
                gid: Some(65534),
                pid: Some(1),
                allowed: false,
            },
            &limits,
        );
        let e = check(Some(&outsider), "/border.v1.Border/GetStatus", &c).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(c.unix_refused(), 1);
    }

    #[test]
    fn a_connection_has_its_own_watch_slots() {
        let limits = MgmtLimits {
            watch_streams_per_connection: 2,
            ..MgmtLimits::default()
        };
        let id = Identity::Cert {
            fingerprint: "sha256:ab".into(),
            role: Some(ClientRole::Reader),
        };
        let (a, b) = (Caller::new(id.clone(), &limits), Caller::new(id, &limits));
        let a1 = a.try_watch_slot().unwrap();
        let _a2 = a.clone().try_watch_slot().unwrap();
        assert!(
            a.try_watch_slot().is_none(),
            "clones share the connection's slots"
        );
        assert!(b.try_watch_slot().is_some());
        drop(a1);
        assert!(a.try_watch_slot().is_some());
    }
}
