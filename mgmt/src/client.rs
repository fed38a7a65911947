//! Connecting to border-mgmt's API (for borderctl and tests): a unix socket,
//! or TCP with mutual TLS. Returns the generated tonic client with the same
//! message size limits as the server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use conf::Listen;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::pb::border_client::BorderClient;
use crate::tls::{client_config, ClientTls, TlsError};

/// The client type.
pub type Client = BorderClient<Channel>;

/// Why a connection could not be made. One line each.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Not `unix:///path` or `tcp://ip:port`.
    #[error("`{0}`: expected unix:///path or tcp://ip:port")]
    BadAddress(String),
    /// TCP without client TLS material.
    #[error(
        "{0}: a tcp:// server needs mutual TLS (a CA for the server, a client certificate and key)"
    )]
    NeedTls(String),
    /// TLS material.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// The server name for TLS.
    #[error("`{0}` is not a valid TLS server name")]
    ServerName(String),
    /// The connection itself.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: String,
        /// Why (tonic's transport error, with its causes).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Parses `unix:///path` / `tcp://ip:port` (as `[mgmt].listen` takes them).
pub fn parse_target(s: &str) -> Result<Listen, ConnectError> {
    if let Some(p) = s.strip_prefix("unix://") {
        if p.starts_with('/') && !p.ends_with('/') {
            return Ok(Listen::Unix(PathBuf::from(p)));
        }
    } else if let Some(a) = s.strip_prefix("tcp://") {
        if let Ok(a) = a.parse::<SocketAddr>() {
            return Ok(Listen::Tcp(a));
        }
    }
    Err(ConnectError::BadAddress(s.to_string()))
}

/// The Border client over a channel, with the API's message size limits.
pub fn with_limits(ch: Channel) -> Client {
    BorderClient::new(ch)
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(usize::MAX)
}

fn describe(e: tonic::transport::Error) -> Box<dyn std::error::Error + Send + Sync> {
    // tonic's Display is "transport error"; the cause says what happened.
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg.into()
}

/// Connects to the API at `target` (`unix:///…` or `tcp://…`); TCP needs `tls`.
pub async fn connect(target: &Listen, tls: Option<&ClientTls>) -> Result<Client, ConnectError> {
    match target {
        Listen::Unix(path) => connect_unix(path.clone()).await,
        Listen::Tcp(addr) => {
            let tls = tls.ok_or_else(|| ConnectError::NeedTls(format!("tcp://{addr}")))?;
            connect_tls(*addr, tls).await
        }
    }
}

/// A channel to the API at `target` (`unix:///…` or `tcp://…`; TCP needs
/// `tls`), for the other services on the same listener (`BorderBgp`).
pub async fn connect_channel(
    target: &Listen,
    tls: Option<&ClientTls>,
) -> Result<Channel, ConnectError> {
    match target {
        Listen::Unix(path) => {
            let shown = format!("unix://{}", path.display());
            unix_channel(path.clone())
                .await
                .map_err(|e| ConnectError::Connect {
                    addr: shown,
                    source: describe(e),
                })
        }
        Listen::Tcp(addr) => {
            let tls = tls.ok_or_else(|| ConnectError::NeedTls(format!("tcp://{addr}")))?;
            let cfg = client_config(tls)?;
            let name = match &tls.server_name {
                Some(n) => ServerName::try_from(n.clone())
                    .map_err(|_| ConnectError::ServerName(n.clone()))?,
                None => ServerName::IpAddress(addr.ip().into()),
            };
            tls_channel(*addr, cfg, name)
                .await
                .map_err(|e| ConnectError::Connect {
                    addr: format!("tcp://{addr}"),
                    source: describe(e),
                })
        }
    }
}

/// Names the target appliance in every call (`border-appliance`
/// metadata), for calls through border-gw (docs/fleet.md); `None` adds
/// nothing (a border-mgmt called directly).
#[derive(Clone, Debug, Default)]
pub struct Route(Option<tonic::metadata::AsciiMetadataValue>);

impl Route {
    /// Through a gateway to `appliance`; `None` when the id cannot be metadata.
    pub fn to(appliance: &str) -> Option<Route> {
        appliance.parse().ok().map(|v| Route(Some(v)))
    }
}

impl tonic::service::Interceptor for Route {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("border-appliance", v.clone());
        }
        Ok(req)
    }
}

/// A channel that adds [`Route`]'s metadata.
pub type Routed = tonic::service::interceptor::InterceptedService<Channel, Route>;
/// The Border client over a [`Routed`] channel.
pub type RoutedClient = BorderClient<Routed>;
/// The BorderBgp client over a [`Routed`] channel.
pub type RoutedBgpClient = crate::pb::border_bgp_client::BorderBgpClient<Routed>;

/// Both clients over `ch`, each call routed by `route`, with the API's limits.
pub fn routed(ch: Channel, route: Route) -> RoutedClients {
    let border = BorderClient::with_interceptor(ch.clone(), route.clone())
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(usize::MAX);
    let bgp =
        crate::pb::border_bgp_client::BorderBgpClient::with_interceptor(ch.clone(), route.clone())
            .max_decoding_message_size(crate::MAX_MESSAGE_BYTES);
    let health = crate::pb::border_health_client::BorderHealthClient::with_interceptor(
        ch.clone(),
        route.clone(),
    )
    .max_decoding_message_size(crate::MAX_MESSAGE_BYTES);
    let admin = crate::pb::border_admin_client::BorderAdminClient::with_interceptor(ch, route)
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES);
    RoutedClients {
        border,
        bgp,
        health,
        admin,
    }
}

/// The `border.v1.BorderHealth` client of a [`routed`] connection.
pub type RoutedHealthClient = crate::pb::border_health_client::BorderHealthClient<Routed>;

/// The `border.v1.BorderAdmin` client of a [`routed`] connection.
pub type RoutedAdminClient = crate::pb::border_admin_client::BorderAdminClient<Routed>;

/// The four `border.v1` services over one [`routed`] connection.
pub struct RoutedClients {
    /// `border.v1.Border`.
    pub border: RoutedClient,
    /// `border.v1.BorderBgp`.
    pub bgp: RoutedBgpClient,
    /// `border.v1.BorderHealth`.
    pub health: RoutedHealthClient,
    /// `border.v1.BorderAdmin`.
    pub admin: RoutedAdminClient,
}

/// The `border.v1.BorderBgp` client type.
pub type BgpClient = crate::pb::border_bgp_client::BorderBgpClient<Channel>;

/// The BorderBgp client over a channel from [`connect_channel`].
pub fn bgp_client(ch: Channel) -> BgpClient {
    crate::pb::border_bgp_client::BorderBgpClient::new(ch)
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
}

/// Connects over a unix socket.
pub async fn connect_unix(path: PathBuf) -> Result<Client, ConnectError> {
    let shown = format!("unix://{}", path.display());
    let ch = unix_channel(path)
        .await
        .map_err(|e| ConnectError::Connect {
            addr: shown,
            source: describe(e),
        })?;
    Ok(with_limits(ch))
}

/// A channel to a border-mgmt API on the unix socket at `path` (the
/// Border and BorderHealth clients both ride on it).
pub async fn unix_channel(path: PathBuf) -> Result<Channel, tonic::transport::Error> {
    // The URI is required by tonic but unused: the connector dials the socket.
    Endpoint::from_static("http://border-mgmt.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(s))
            }
        }))
        .await
}

/// Connects over TCP with mutual TLS.
pub async fn connect_tls(addr: SocketAddr, tls: &ClientTls) -> Result<Client, ConnectError> {
    let cfg = client_config(tls)?;
    let name = match &tls.server_name {
        Some(n) => {
            ServerName::try_from(n.clone()).map_err(|_| ConnectError::ServerName(n.clone()))?
        }
        None => ServerName::IpAddress(addr.ip().into()),
    };
    connect_tls_with(addr, cfg, name).await
}

/// How long a TLS connect waits for the server's first bytes (its HTTP/2
/// settings, or the alert refusing our certificate).
const FIRST_DATA_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Connects over TCP with a prepared rustls client config.
pub async fn connect_tls_with(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
) -> Result<Client, ConnectError> {
    let ch = tls_channel(addr, cfg, name)
        .await
        .map_err(|e| ConnectError::Connect {
            addr: format!("tcp://{addr}"),
            source: describe(e),
        })?;
    Ok(with_limits(ch))
}

/// A channel to a border-mgmt API at `addr` over TCP with mutual TLS
/// (the Border and BorderHealth clients both ride on it).
pub async fn tls_channel(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
) -> Result<Channel, tonic::transport::Error> {
    let connector = tokio_rustls::TlsConnector::from(cfg);
    Endpoint::from_shared(format!("http://{addr}"))?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let (connector, name) = (connector.clone(), name.clone());
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                tcp.set_nodelay(true)?;
                // Under TLS 1.3 a refused client certificate arrives as an
                // alert after the handshake; waiting for the server's first
                // bytes makes it this connect's error instead of a vague
                // transport error on the first call.
                let s = crate::tls::connect_primed(&connector, name, tcp, FIRST_DATA_WAIT).await?;
                Ok::<_, std::io::Error>(TokioIo::new(s))
            }
        }))
        .await
}
