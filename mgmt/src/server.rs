//! Listening and running: the gRPC API on a unix socket (default
//! `unix:///run/border/<instance>.sock`) or on TCP with mutual TLS, the
//! Prometheus exporter, the periodic dataplane look / publish retry, and —
//! for the border-mgmt process — signals (SIGHUP reloads the config file,
//! SIGINT/SIGTERM stop cleanly).

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use conf::{ClientRole, Config, Listen, MgmtLimits};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tokio_stream::StreamExt as _;

use conf::os::files::Access;

pub use crate::accept::accept_until;
use crate::authz::{ApiCounters, AuthzLayer, Caller, CallerIo, Identity, Limit};
use crate::budget::{BudgetLayer, ByteBudget, Exceeded};
use crate::manager::Manager;
use crate::peer::PeerPolicy;
use crate::service::BorderService;

/// Why the API or the exporter could not listen. One line each.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `[mgmt].listen` did not parse (cannot happen with a validated config).
    #[error("mgmt.listen `{0}` is not unix:///path or tcp://ip:port")]
    BadListen(String),
    /// TCP without `[mgmt.tls]` (cannot happen with a validated config).
    #[error("mgmt.listen {0}: a TCP listen requires [mgmt.tls]")]
    NeedTls(String),
    /// Another process answers on the socket.
    #[error("{}: socket in use: another process is listening on it", .0.display())]
    SocketInUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{}: exists and is not a socket", .0.display())]
    NotASocket(PathBuf),
    /// Binding failed.
    #[error("cannot listen on {what}: {source}")]
    Bind {
        /// Where.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// TLS material.
    #[error("[mgmt.tls]: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// `[mgmt] operators_group` names no group on this machine.
    #[error("{0}")]
    Access(String),
    /// The gRPC server stopped with an error.
    #[error("gRPC server: {0}")]
    Transport(String),
}

enum Api {
    Unix {
        listener: UnixListener,
        path: PathBuf,
        ino: (u64, u64),
    },
    Tcp {
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
        /// The role of each pinned fingerprint.
        roles: Arc<HashMap<String, ClientRole>>,
    },
}

/// Sockets bound before anything is published, so a bad address fails
/// early with one line.
pub struct Bound {
    api: Api,
    metrics: Option<TcpListener>,
    /// Who may call on the unix socket.
    peers: PeerPolicy,
    /// `[mgmt.limits]`.
    limits: MgmtLimits,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("api", &self.api_addr())
            .finish()
    }
}

impl Bound {
    /// The API address, as `[mgmt].listen` writes it.
    pub fn api_addr(&self) -> String {
        match &self.api {
            Api::Unix { path, .. } => format!("unix://{}", path.display()),
            Api::Tcp { listener, .. } => listener
                .local_addr()
                .map_or_else(|_| "tcp://?".into(), |a| format!("tcp://{a}")),
        }
    }

    /// Gives the sockets up without serving (removes the unix socket).
    pub fn close(self) {
        if let Api::Unix { path, ino, .. } = &self.api {
            remove_socket(path, *ino);
        }
    }

    /// The metrics address, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }
}

/// Binds a unix socket: creates the directory (0750), removes a stale
/// socket file (nobody answers on it), refuses one another process answers
/// on. The socket is made under umask 077 (owner only), so it is never
/// open to others, not even for a moment; then it is set to 0600, or 0660
/// with the operators' group when `access` has one.
pub fn bind_unix(path: &Path, access: Access) -> Result<(UnixListener, (u64, u64)), ServeError> {
    let bind_err = |source| ServeError::Bind {
        what: format!("unix://{}", path.display()),
        source,
    };
    if let Some(dir) = path.parent() {
        conf::os::files::ensure_dir(dir, access).map_err(bind_err)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_socket() {
                return Err(ServeError::NotASocket(path.to_owned()));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ServeError::SocketInUse(path.to_owned()));
            }
            tracing::info!(path = %path.display(), "removing stale socket");
            std::fs::remove_file(path).map_err(bind_err)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(bind_err(e)),
    }
    let listener =
        conf::os::files::with_umask(0o077, || UnixListener::bind(path)).map_err(bind_err)?;
    if let Some(gid) = access.group {
        std::os::unix::fs::lchown(path, None, Some(gid)).map_err(bind_err)?;
    }
    let mode = std::fs::Permissions::from_mode(access.socket_mode());
    std::fs::set_permissions(path, mode).map_err(bind_err)?;
    let meta = std::fs::symlink_metadata(path).map_err(bind_err)?;
    Ok((listener, (meta.dev(), meta.ino())))
}

/// Binds the API (`[mgmt].listen`, loading `[mgmt.tls]` for TCP) and the
/// exporter (`[mgmt].metrics_listen`). Needs a tokio runtime.
pub async fn bind(cfg: &Config) -> Result<Bound, ServeError> {
    let access =
        Access::for_group_name(cfg.mgmt.operators_group.as_deref()).map_err(ServeError::Access)?;
    let listen = cfg
        .mgmt
        .listen_addr()
        .ok_or_else(|| ServeError::BadListen(cfg.mgmt.listen.clone()))?;
    let api = match listen {
        Listen::Unix(path) => {
            let (listener, ino) = bind_unix(&path, access)?;
            Api::Unix {
                listener,
                path,
                ino,
            }
        }
        Listen::Tcp(addr) => {
            let tls = cfg
                .mgmt
                .tls
                .as_ref()
                .ok_or_else(|| ServeError::NeedTls(cfg.mgmt.listen.clone()))?;
            let roles = tls.pins().map(|(f, r)| (f.to_owned(), r)).collect();
            let tls = crate::tls::server_config(tls)?;
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind {
                    what: format!("tcp://{addr}"),
                    source,
                })?;
            Api::Tcp {
                listener,
                tls,
                roles: Arc::new(roles),
            }
        }
    };
    let metrics = match cfg.mgmt.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind {
                    what: format!("metrics_listen {addr}"),
                    source,
                })?,
        ),
        None => None,
    };
    Ok(Bound {
        api,
        metrics,
        peers: PeerPolicy::new(access.group),
        limits: cfg.mgmt.limits,
    })
}

fn remove_socket(path: &Path, ino: (u64, u64)) {
    // Only our own socket: a successor may already have bound a new one.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if (meta.dev(), meta.ino()) == ino {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// How long a graceful stop waits for open calls.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What the TLS acceptor needs besides the listener.
struct TlsAccept {
    tls: Arc<rustls::ServerConfig>,
    roles: Arc<HashMap<String, ClientRole>>,
    limits: MgmtLimits,
    counters: Arc<ApiCounters>,
}

/// Accepts TCP connections and runs their TLS handshakes: at most
/// `tls_handshakes` at once (a connection beyond is closed at once), each
/// within `tls_handshake_timeout_ms`; each accepted connection carries its
/// caller (the pinned certificate and its role).
fn tls_incoming(
    listener: TcpListener,
    a: TlsAccept,
    mut shutdown: watch::Receiver<bool>,
) -> ReceiverStream<Result<CallerIo<tokio_rustls::server::TlsStream<TcpStream>>, std::io::Error>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(a.tls.clone());
    let in_flight = Arc::new(tokio::sync::Semaphore::new(
        a.limits.tls_handshakes as usize,
    ));
    let timeout = Duration::from_millis(a.limits.tls_handshake_timeout_ms.into());
    let a = Arc::new(a);
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Some((tcp, peer)) = accept_until(&listener, &mut shutdown, "api").await {
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                a.counters.count(Limit::TlsHandshakes);
                tracing::debug!(%peer, "api: too many TLS handshakes in progress (mgmt.limits.tls_handshakes): connection closed");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, a) = (acceptor.clone(), tx.clone(), a.clone());
            tokio::spawn(async move {
                let r = tokio::time::timeout(timeout, acceptor.accept(tcp)).await;
                drop(permit);
                match r {
                    Ok(Ok(s)) => {
                        let caller = tls_caller(&s, &a.roles, &a.limits);
                        let _ = tx.send(Ok(CallerIo::new(s, caller))).await;
                    }
                    Ok(Err(e)) => tracing::warn!(%peer, error = %e, "api: TLS handshake refused"),
                    Err(_) => {
                        a.counters.count(Limit::TlsHandshakeTimeout);
                        tracing::warn!(%peer, "api: TLS handshake timed out (mgmt.limits.tls_handshake_timeout_ms)");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// The caller of an accepted TLS connection: its certificate's fingerprint
/// and role.
fn tls_caller(
    s: &tokio_rustls::server::TlsStream<TcpStream>,
    roles: &HashMap<String, ClientRole>,
    limits: &MgmtLimits,
) -> Caller {
    let fingerprint = s
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map_or_else(|| "none".to_owned(), |c| crate::tls::fingerprint(c));
    let role = roles.get(&fingerprint).copied();
    Caller::new(
        Identity::Cert {
            fingerprint: fingerprint.into(),
            role,
        },
        limits,
    )
}

/// Serves the API and the exporter on `bound`, and every `tick` looks at the
/// dataplane and retries a pending publish, until `shutdown` turns true.
/// Removes the unix socket on the way out.
pub async fn serve(
    m: Arc<Manager>,
    bound: Bound,
    tick: Duration,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let Bound {
        api,
        metrics,
        peers,
        limits,
    } = bound;
    let counters = Arc::new(ApiCounters::default());
    let mut tasks = Vec::new();
    if let Some(l) = metrics {
        tasks.push(tokio::spawn(crate::metrics::serve(
            l,
            m.clone(),
            shutdown.clone(),
            limits.metrics_connections,
            counters.clone(),
        )));
    }
    {
        let (m, mut shutdown) = (m.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            let mut every = tokio::time::interval(tick);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
                    _ = every.tick() => {
                        let m = m.clone();
                        let _ = tokio::task::spawn_blocking(move || m.tick()).await;
                    }
                }
            }
        }));
    }
    // Connection records (docs/records.md), with `[records]`.
    let records = crate::records::start(&m, shutdown.clone());
    let svc = BorderService::new(m.clone(), shutdown.clone(), counters.clone()).into_server();
    // Health checks (docs/health.md): probes, peers, verdicts into the store.
    let health = crate::health::attach(m.clone(), shutdown.clone());
    let health_svc = crate::health::service::HealthService::new(health).into_server();
    let stopped = {
        let mut s = shutdown.clone();
        async move {
            while !*s.borrow() {
                if s.changed().await.is_err() {
                    break;
                }
            }
        }
    };
    // BGP announcements through gobgpd (docs/bgp.md), with [mgmt.bgp].
    crate::bgp::task::attach(m.clone(), shutdown.clone());
    let bgp_svc = crate::bgp::service::BgpService::new(m.clone()).into_server();
    let admin_svc = crate::admin::AdminService::new(m.clone()).into_server();
    let routes = tonic::service::Routes::new(svc)
        .add_service(health_svc)
        .add_service(bgp_svc)
        .add_service(admin_svc);
    // Agent mode (docs/fleet.md): the same services over tunnels dialled out.
    if let Some(agent) = m.config().mgmt.agent {
        let tls = m
            .config()
            .mgmt
            .tls
            .ok_or_else(|| ServeError::Transport("[mgmt.agent] requires [mgmt.tls]".into()))?;
        tasks.push(crate::agent::spawn(
            &agent,
            &tls,
            crate::agent::Served {
                routes: routes.clone(),
                counters: counters.clone(),
                limits: m.config().mgmt.limits,
            },
            shutdown.clone(),
        )?);
    }
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(limits.streams_per_connection)
        // Request bodies buffered at once, by the callers' roles
        // (`[mgmt.limits] request_memory_mib`, docs/security.md).
        .layer(request_budget(&limits, &counters))
        // Who may call what: one check in front of every service.
        .layer(AuthzLayer::new(counters.clone()))
        .add_routes(routes);
    let result = match api {
        Api::Unix {
            listener,
            path,
            ino,
        } => {
            let incoming = UnixListenerStream::new(listener).map(move |r| {
                r.map(|s| {
                    let caller = peers.caller_of(&s, &limits);
                    CallerIo::new(s, caller)
                })
            });
            let r = graceful(
                router.serve_with_incoming_shutdown(incoming, stopped),
                &shutdown,
            )
            .await;
            remove_socket(&path, ino);
            r
        }
        Api::Tcp {
            listener,
            tls,
            roles,
        } => {
            let accept = TlsAccept {
                tls,
                roles,
                limits,
                counters,
            };
            let incoming = tls_incoming(listener, accept, shutdown.clone());
            graceful(
                router.serve_with_incoming_shutdown(incoming, stopped),
                &shutdown,
            )
            .await
        }
    };
    for t in tasks {
        t.abort();
    }
    // Its last pass takes what the rings still hold.
    if let Some(r) = records {
        let _ = tokio::time::timeout(STOP_GRACE, r).await;
    }
    result
}

/// `[mgmt.limits]` `request_memory_mib`/`operator_reserve_mib` as a layer
/// charging every request body, each refusal counted.
fn request_budget(limits: &MgmtLimits, counters: &Arc<ApiCounters>) -> BudgetLayer {
    let budget = ByteBudget::new(limits.request_memory_mib, limits.operator_reserve_mib);
    let counters = counters.clone();
    BudgetLayer::new(
        Arc::new(budget),
        Arc::new(move |e| {
            counters.count(match e {
                Exceeded::Total => Limit::RequestMemory,
                Exceeded::Shared => Limit::ReaderRequestMemory,
            })
        }),
    )
}

/// Runs the server future; once shutdown is asked, waits at most
/// [`STOP_GRACE`] for open calls.
async fn graceful(
    server: impl Future<Output = Result<(), tonic::transport::Error>>,
    shutdown: &watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let mut s = shutdown.clone();
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => return r.map_err(|e| ServeError::Transport(e.to_string())),
        _ = async { while !*s.borrow() { if s.changed().await.is_err() { std::future::pending::<()>().await } } } => {}
    }
    match tokio::time::timeout(STOP_GRACE, server).await {
        Ok(r) => r.map_err(|e| ServeError::Transport(e.to_string())),
        Err(_) => {
            tracing::warn!("open API calls did not finish within {STOP_GRACE:?}; stopping anyway");
            Ok(())
        }
    }
}

/// The border-mgmt process after its config is loaded and its instance lock
/// taken: opens the tables region, binds, publishes, serves; SIGHUP reloads
/// `opts.config_path`; SIGINT/SIGTERM stop (a second one exits at once).
pub async fn run(
    cfg: Config,
    text: String,
    origin: String,
    opts: crate::Options,
    tick: Duration,
) -> Result<(), RunError> {
    use tokio::signal::unix::{signal, SignalKind};
    let sig = |k: SignalKind| signal(k).map_err(RunError::Signals);
    let (mut int, mut term, mut hup) = (
        sig(SignalKind::interrupt())?,
        sig(SignalKind::terminate())?,
        sig(SignalKind::hangup())?,
    );
    let bound = bind(&cfg).await?;
    let (m, opened) = match Manager::new(cfg.clone(), text, origin, opts) {
        Ok(x) => x,
        Err(e) => {
            bound.close();
            return Err(RunError::Start(e.to_string()));
        }
    };
    match &opened {
        crate::publisher::Opened::Attached { generation } => tracing::info!(
            path = %m.options().paths.tables.display(),
            generation,
            "attached to the tables region (the published generation stays)"
        ),
        crate::publisher::Opened::Created { arena, replaced } => tracing::info!(
            path = %m.options().paths.tables.display(),
            arena_bytes = arena,
            replaced = replaced.as_deref().unwrap_or("-"),
            "created the tables region"
        ),
    }
    let first = {
        let m = m.clone();
        match tokio::task::spawn_blocking(move || m.publish_now("startup")).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                bound.close();
                return Err(RunError::Start(format!("cannot publish the tables: {e}")));
            }
            Err(e) => {
                bound.close();
                return Err(RunError::Start(e.to_string()));
            }
        }
    };
    tracing::info!(
        instance = %cfg.instance,
        api = %bound.api_addr(),
        metrics = %bound.metrics_addr().map_or("off".into(), |a| a.to_string()),
        generation = m.published_generation(),
        published_now = first.changed,
        vips = cfg.vips.len(),
        "border-mgmt running"
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut server = tokio::spawn(serve(m.clone(), bound, tick, stop_rx));
    // The service manager (systemd Type=notify): ready now that the API
    // listens and the tables are published; the watchdog pings come from
    // this loop, so they stop if the runtime stops turning.
    let mut notify = conf::os::notify::ServiceNotify::from_env();
    notify.ready(&format!(
        "serving: tables generation {}",
        m.published_generation()
    ));
    let mut watchdog =
        tokio::time::interval(notify.watchdog().unwrap_or(Duration::from_secs(3600)));
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = watchdog.tick() => notify.ping(),
            r = &mut server => return match r {
                Ok(Ok(())) => Err(RunError::Start("the API server stopped unexpectedly".into())),
                Ok(Err(e)) => Err(e.into()),
                Err(e) => Err(RunError::Start(e.to_string())),
            },
            _ = int.recv() => break,
            _ = term.recv() => break,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config file");
                let m = m.clone();
                // Errors are logged and sent as events by the manager.
                let _ = tokio::task::spawn_blocking(move || m.reload_file()).await;
            }
        }
    }
    tracing::info!("signal received, stopping");
    notify.stopping("stopping");
    withdraw_before_stop(&m).await;
    let _ = stop_tx.send(true);
    // A second signal ends the process at once.
    let second = async {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    };
    tokio::select! {
        r = server => match r {
            Ok(r) => r?,
            Err(e) => return Err(RunError::Start(e.to_string())),
        },
        _ = second => {
            tracing::warn!("second signal: exiting now");
            std::process::exit(130);
        }
    }
    Ok(())
}

/// With `[mgmt.bgp]`: withdraws every VIP route (bounded wait), then waits
/// `withdraw_grace_ms` so routers move traffic away while border-dp still
/// forwards (docs/bgp.md).
async fn withdraw_before_stop(m: &Manager) {
    let Some(bgp) = m.config().mgmt.bgp else {
        return;
    };
    if !m.bgp().withdraw_for_shutdown(Duration::from_secs(2)).await {
        tracing::warn!("BGP: could not confirm the withdraw within 2 s; stopping anyway");
    }
    tokio::time::sleep(Duration::from_millis(bgp.withdraw_grace_ms.into())).await;
}

/// Why the border-mgmt process stopped with an error. One line each.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Signal handlers.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// Listening.
    #[error("{0}")]
    Serve(#[from] ServeError),
    /// The tables region or the first publish.
    #[error("{0}")]
    Start(String),
}
