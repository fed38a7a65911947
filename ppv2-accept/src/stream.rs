//! An accepted connection after the sniff: the socket positioned after the
//! header (or untouched), the few bytes the sniff had to take off the
//! socket replayed first, and both peers: the one the header claims and the
//! one the socket measured.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::header::Header;

/// Who is at the other end, two ways.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The client the PROXY header names; `None` without a header, with a
    /// LOCAL header, or with a header that carries no IP address. Whoever
    /// connected wrote it: trust it only as far as `measured` is a
    /// forwarder you trust.
    pub claimed: Option<SocketAddr>,
    /// The address the client connected to, as the header names it (the
    /// VIP behind a load balancer).
    pub claimed_destination: Option<SocketAddr>,
    /// The socket's peer: the forwarder (a load balancer's address, a
    /// full-NAT local address) or the client itself.
    pub measured: SocketAddr,
    /// The socket's own address.
    pub local: SocketAddr,
    /// The header's unique id TLV (border's connection id) as text, every
    /// byte that is not printable ASCII escaped (`\n`, `\xff`): whoever
    /// connected wrote it, and it goes on log lines.
    pub unique_id: Option<String>,
}

impl PeerInfo {
    /// The address to record a client by: the claimed one where a header
    /// names one, else the measured one.
    pub fn client(&self) -> SocketAddr {
        self.claimed.unwrap_or(self.measured)
    }

    /// `claimed` for a log field: the address, or `-`.
    pub fn claimed_text(&self) -> String {
        self.claimed
            .map_or_else(|| "-".to_string(), |a| a.to_string())
    }

    pub(crate) fn new(measured: SocketAddr, local: SocketAddr, header: Option<&Header>) -> Self {
        PeerInfo {
            claimed: header.and_then(Header::claimed),
            claimed_destination: header.and_then(|h| h.claimed().and(h.destination)),
            measured,
            local,
            unique_id: header
                .and_then(|h| h.tlv(crate::header::TLV_UNIQUE_ID))
                .map(|v| v.escape_ascii().to_string()),
        }
    }
}

/// An accepted TCP connection after the sniff.
#[derive(Debug)]
pub struct ProxiedStream {
    tcp: TcpStream,
    /// Bytes the sniff read that were not a header (a signature prefix
    /// that turned into something else): handed out before the socket's.
    replay: Vec<u8>,
    replayed: usize,
    peer: PeerInfo,
    header: Option<Header>,
}

impl ProxiedStream {
    pub(crate) fn new(
        tcp: TcpStream,
        replay: Vec<u8>,
        peer: PeerInfo,
        header: Option<Header>,
    ) -> Self {
        ProxiedStream {
            tcp,
            replay,
            replayed: 0,
            peer,
            header,
        }
    }

    /// Claimed and measured peers.
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    /// The header, if the connection had one (TLVs included).
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// The socket (to set options; reading from it directly would skip
    /// replayed bytes).
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

impl AsyncRead for ProxiedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.replayed < this.replay.len() {
            let rest = &this.replay[this.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.replayed += n;
            if this.replayed == this.replay.len() {
                this.replay = Vec::new();
                this.replayed = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ProxiedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// Served by tonic (`Server::serve_with_incoming` over a stream of
/// `ProxiedStream`s), a handler finds both peers with
/// `request.extensions().get::<PeerInfo>()` (under TLS:
/// `get::<TlsConnectInfo<PeerInfo>>()` and its `get_ref()`).
impl tonic::transport::server::Connected for ProxiedStream {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.peer.clone()
    }
}
