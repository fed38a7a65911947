//! The sniff: look at a fresh connection's first bytes without taking
//! them; only a complete v2 signature makes them a header, which is then
//! read off the socket exactly (never a byte of what follows). Anything
//! else (a TLS ClientHello, the HTTP/2 preface, a v1 text header) leaves
//! the socket as it was.
//!
//! `peek` shows what the kernel holds without consuming it, so the common
//! cases need no buffer: the first segment decides. Only a signature that
//! arrives in pieces is read as it comes (the next `peek` then waits for
//! new bytes instead of seeing the same ones again); if it turns into
//! something else, those few bytes are replayed by the stream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::header::{self, Family, Header, Malformed, FIXED_LEN, SIGNATURE};
use crate::stats::{AcceptStats, Arrival};
use crate::stream::{PeerInfo, ProxiedStream};

/// How the acceptor waits and what it accepts.
#[derive(Clone, Copy, Debug)]
pub struct AcceptOptions {
    /// How long the first bytes and the whole header may take. A
    /// connection that sends nothing by then passes as it is (a client
    /// that waits for the server to speak first); one inside a header is
    /// refused ([`Malformed::Timeout`]).
    pub timeout: Duration,
    /// The longest header accepted, TLVs included (the spec's limit is
    /// 16 + 65535; border writes at most `proxy_protocol_max_len`).
    pub max_len: usize,
}

impl Default for AcceptOptions {
    fn default() -> Self {
        AcceptOptions {
            timeout: Duration::from_secs(5),
            max_len: 2048,
        }
    }
}

/// A connection after the sniff.
#[derive(Debug)]
pub enum Sniffed {
    /// Ready for the application: positioned after the header, or
    /// untouched. (Boxed: the silent case should not carry its size.)
    Ready(Box<ProxiedStream>),
    /// Closed before sending anything: not an error, nothing to log.
    Silent,
}

/// A connection closed because its header was malformed.
#[derive(Debug)]
pub struct Refused {
    /// Why.
    pub reason: Malformed,
    /// The socket's peer.
    pub measured: SocketAddr,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): connection closed",
            self.reason.describe(),
            self.reason
        )
    }
}

/// Sniffs connections of one listener and counts what it saw.
#[derive(Clone, Debug, Default)]
pub struct Acceptor {
    /// Waits and bounds.
    pub options: AcceptOptions,
    /// Shared counters.
    pub stats: Arc<AcceptStats>,
}

impl Acceptor {
    /// An acceptor with `options` and fresh counters.
    pub fn new(options: AcceptOptions) -> Self {
        Acceptor {
            options,
            stats: Arc::default(),
        }
    }

    /// Reads the optional header of a connection just accepted; counts
    /// the outcome. A refused connection is dropped (closed) here.
    pub async fn accept(&self, tcp: TcpStream) -> Result<Sniffed, Refused> {
        let measured = match tcp.peer_addr() {
            Ok(a) => a,
            // Gone already (reset before we looked): nothing was sent.
            Err(_) => {
                self.stats.arrived(Arrival::Silent);
                return Ok(Sniffed::Silent);
            }
        };
        let local = tcp.local_addr().unwrap_or(measured);
        let deadline = Instant::now() + self.options.timeout;
        match sniff(tcp, deadline, self.options.max_len).await {
            Ok(Found::Nothing) => {
                self.stats.arrived(Arrival::Silent);
                Ok(Sniffed::Silent)
            }
            Ok(Found::Other(tcp, replay)) => {
                self.stats.arrived(Arrival::Direct);
                let peer = PeerInfo::new(measured, local, None);
                Ok(Sniffed::Ready(Box::new(ProxiedStream::new(
                    tcp, replay, peer, None,
                ))))
            }
            Ok(Found::Header(tcp, h)) => {
                self.stats.arrived(match (h.command, h.family) {
                    (header::Command::Local, _) => Arrival::Local,
                    (_, Family::Inet | Family::Inet6) => Arrival::Proxied,
                    _ => Arrival::ProxiedWithoutAddress,
                });
                let peer = PeerInfo::new(measured, local, Some(&h));
                Ok(Sniffed::Ready(Box::new(ProxiedStream::new(
                    tcp,
                    Vec::new(),
                    peer,
                    Some(h),
                ))))
            }
            Err(reason) => {
                self.stats.refuse(reason);
                Err(Refused { reason, measured })
            }
        }
    }
}

enum Found {
    /// EOF before the first byte.
    Nothing,
    /// Not a header: the socket and the bytes taken off it.
    Other(TcpStream, Vec<u8>),
    /// A header, read off the socket.
    Header(TcpStream, Header),
}

async fn sniff(mut tcp: TcpStream, deadline: Instant, max_len: usize) -> Result<Found, Malformed> {
    // Signature bytes read off the socket so far (fewer than 16 only when
    // they arrived in pieces).
    let mut taken: Vec<u8> = Vec::new();
    let mut fixed = [0u8; FIXED_LEN];
    loop {
        let want = FIXED_LEN - taken.len();
        let peeked = match tokio::time::timeout_at(deadline, tcp.peek(&mut fixed[..want])).await {
            Err(_) if taken.len() < SIGNATURE.len() => return Ok(Found::Other(tcp, taken)),
            Err(_) => return Err(Malformed::Timeout),
            Ok(Err(_)) if taken.is_empty() => return Ok(Found::Nothing),
            Ok(Err(_)) => return Err(Malformed::Io),
            Ok(Ok(n)) => n,
        };
        if peeked == 0 {
            return match taken.len() {
                0 => Ok(Found::Nothing),
                n if n < SIGNATURE.len() => Ok(Found::Other(tcp, taken)),
                _ => Err(Malformed::Truncated),
            };
        }
        let mut seen = taken.clone();
        seen.extend_from_slice(&fixed[..peeked]);
        if !header::is_signature_prefix(&seen) {
            return Ok(Found::Other(tcp, taken));
        }
        // These bytes are in the kernel's buffer: reading them cannot block.
        tcp.read_exact(&mut fixed[..peeked])
            .await
            .map_err(|_| Malformed::Io)?;
        taken.extend_from_slice(&fixed[..peeked]);
        if taken.len() == FIXED_LEN {
            break;
        }
    }
    let fixed: [u8; FIXED_LEN] = taken.as_slice().try_into().map_err(|_| Malformed::Io)?;
    let len = header::header_len(&fixed, max_len)?;
    let mut whole = vec![0u8; len];
    whole[..FIXED_LEN].copy_from_slice(&fixed);
    match tokio::time::timeout_at(deadline, tcp.read_exact(&mut whole[FIXED_LEN..])).await {
        Err(_) => return Err(Malformed::Timeout),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(Malformed::Truncated)
        }
        Ok(Err(_)) => return Err(Malformed::Io),
        Ok(Ok(_)) => {}
    }
    let h = Header::parse(&whole, max_len)?;
    Ok(Found::Header(tcp, h))
}
