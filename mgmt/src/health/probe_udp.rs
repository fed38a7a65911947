//! The `udp` probe: one datagram to the backend, and the first datagram
//! back must match `expect` / `expect_regex` (any reply passes without
//! them), all within the probe's timeout. Also the connected socket the
//! `dns` probe shares.
//!
//! The socket is connected to the target, so the kernel hands it only the
//! target's datagrams and turns an ICMP port unreachable into an error on
//! the next receive: a stopped service fails at once, not at the timeout.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use conf::{UdpExpect, UdpProbe};
use tokio::net::UdpSocket;
use tokio::time::{timeout_at, Instant};

use super::engine::ProbeOutcome;

/// The largest datagram a UDP probe reads (the largest UDP payload).
pub const MAX_REPLY_BYTES: usize = 65_535;
/// How many bytes of a reply a reason shows.
const SHOWN_BYTES: usize = 40;

fn fail(reason: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome {
        ok: false,
        reason: reason.into(),
        weight: None,
    }
}

/// A socket of `target`'s family on an ephemeral port, connected to
/// `target`, with `payload` sent; or why not, in words.
pub(super) async fn send_to(target: SocketAddr, payload: &[u8]) -> Result<UdpSocket, String> {
    let local: IpAddr = match target {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let sock = UdpSocket::bind(SocketAddr::new(local, 0))
        .await
        .map_err(|e| format!("UDP socket failed: {}", os_words(&e)))?;
    sock.connect(target)
        .await
        .map_err(|e| format!("UDP connect failed: {}", os_words(&e)))?;
    match sock.send(payload).await {
        Ok(_) => Ok(sock),
        Err(e) => Err(unreachable_or(&e, "send failed")),
    }
}

/// The next datagram on `sock` into `buf` before `deadline`: `Ok(None)` at
/// the deadline, `Err` in words when the target's port is unreachable or
/// the receive fails.
pub(super) async fn receive(
    sock: &UdpSocket,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<Option<usize>, String> {
    match timeout_at(deadline, sock.recv(buf)).await {
        Err(_) => Ok(None),
        Ok(Ok(n)) => Ok(Some(n)),
        Ok(Err(e)) => Err(unreachable_or(&e, "receive failed")),
    }
}

/// "port unreachable" for the ICMP error a connected socket reports as
/// ECONNREFUSED; otherwise `what` and the error in words.
fn unreachable_or(e: &std::io::Error, what: &str) -> String {
    if e.kind() == std::io::ErrorKind::ConnectionRefused {
        "port unreachable (ICMP)".to_string()
    } else {
        format!("{what}: {}", os_words(e))
    }
}

/// An OS error without "(os error N)".
fn os_words(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// At most [`SHOWN_BYTES`] of untrusted bytes, quoted, everything outside
/// printable ASCII escaped.
pub(super) fn shown(b: &[u8]) -> String {
    let more = if b.len() > SHOWN_BYTES { "..." } else { "" };
    format!("\"{}\"{more}", b[..b.len().min(SHOWN_BYTES)].escape_ascii())
}

/// Runs one `udp` probe of `target`, ending by `deadline`; `timeout_ms`
/// names that deadline in reasons.
pub async fn probe(
    target: SocketAddr,
    udp: &UdpProbe,
    deadline: Instant,
    timeout_ms: u32,
) -> ProbeOutcome {
    // Compiled per probe: a probe runs once per interval, and the pattern
    // was checked (and bounded in size) when the config was read.
    let regex = match &udp.expect {
        Some(UdpExpect::Regex(p)) => match conf::config::compile_expect_regex(p) {
            Ok(r) => Some(r),
            Err(why) => return fail(why),
        },
        _ => None,
    };
    let sock = match send_to(target, &udp.send).await {
        Ok(s) => s,
        Err(why) => return fail(why),
    };
    let mut buf = vec![0u8; MAX_REPLY_BYTES];
    let n = match receive(&sock, &mut buf, deadline).await {
        Ok(Some(n)) => n,
        Ok(None) => return fail(format!("no UDP reply within {timeout_ms} ms")),
        Err(why) => return fail(why),
    };
    let reply = &buf[..n];
    let (ok, reason) = match (&udp.expect, &regex) {
        (Some(UdpExpect::Contains(want)), _) => {
            if reply.windows(want.len()).any(|w| w == want.as_slice()) {
                (true, format!("UDP reply contains {}", shown(want)))
            } else {
                (
                    false,
                    format!(
                        "UDP reply {} does not contain {}",
                        shown(reply),
                        shown(want)
                    ),
                )
            }
        }
        (Some(UdpExpect::Regex(p)), Some(r)) => {
            if r.is_match(reply) {
                (true, format!("UDP reply matches {p:?}"))
            } else {
                (
                    false,
                    format!("UDP reply {} does not match {p:?}", shown(reply)),
                )
            }
        }
        _ => (true, format!("UDP reply ({n} bytes)")),
    };
    ProbeOutcome {
        ok,
        reason,
        weight: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_shown_escaped_and_cut() {
        assert_eq!(shown(b"PONG\r\n"), r#""PONG\r\n""#);
        assert_eq!(shown(&[0xff, 0, b'"']), r#""\xff\x00\"""#);
        assert_eq!(shown(&[b'a'; 50]), format!("\"{}\"...", "a".repeat(40)));
    }
}
