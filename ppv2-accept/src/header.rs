//! The PROXY protocol v2 header as bytes (haproxy doc/proxy-protocol.txt,
//! section 2.2): the 16-byte fixed part, then the address block its length
//! announces (addresses, then TLVs). Pure functions over byte slices, so
//! every malformed variant is a fixture test.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// The 12 bytes every v2 header starts with.
pub const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Signature, version/command, family/protocol, 2-byte length.
pub const FIXED_LEN: usize = 16;

/// Why a header that started with the signature was refused. Each is a
/// counter of [`crate::AcceptStats`] and a value of the `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The version nibble is not 2.
    Version,
    /// The command nibble is neither LOCAL (0) nor PROXY (1).
    Command,
    /// The family/protocol byte names no family of the spec.
    Family,
    /// The address block is shorter than its family's addresses.
    Length,
    /// The header is longer than the acceptor's bound.
    TooLong,
    /// The connection ended inside the header.
    Truncated,
    /// The rest of the header did not arrive in time.
    Timeout,
    /// Reading the header failed (reset, ...).
    Io,
}

impl Malformed {
    /// Every reason, in counter order.
    pub const ALL: [Malformed; 8] = [
        Malformed::Version,
        Malformed::Command,
        Malformed::Family,
        Malformed::Length,
        Malformed::TooLong,
        Malformed::Truncated,
        Malformed::Timeout,
        Malformed::Io,
    ];

    /// The reason as a metric label and log word.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::Version => "bad_version",
            Malformed::Command => "bad_command",
            Malformed::Family => "bad_family",
            Malformed::Length => "bad_length",
            Malformed::TooLong => "too_long",
            Malformed::Truncated => "truncated",
            Malformed::Timeout => "timeout",
            Malformed::Io => "io_error",
        }
    }

    /// What an operator reads in the log line.
    pub fn describe(self) -> &'static str {
        match self {
            Malformed::Version => "PROXY v2 signature with a version other than 2",
            Malformed::Command => "PROXY v2 header with a command other than LOCAL or PROXY",
            Malformed::Family => "PROXY v2 header with an unknown address family or protocol",
            Malformed::Length => "PROXY v2 header shorter than its address family needs",
            Malformed::TooLong => "PROXY v2 header longer than the acceptor accepts",
            Malformed::Truncated => "connection closed inside a PROXY v2 header",
            Malformed::Timeout => "PROXY v2 header not complete in time",
            Malformed::Io => "reading the PROXY v2 header failed",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The header's command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// The sender's own connection (a health check): the addresses, if
    /// any, are not a client's and are ignored.
    Local,
    /// A relayed connection: the addresses are the original client's and
    /// the address it connected to.
    Proxy,
}

/// The address family of the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// No address (UNSPEC): the receiver uses the socket's.
    Unspec,
    /// IPv4 (TCP or UDP).
    Inet,
    /// IPv6 (TCP or UDP).
    Inet6,
    /// AF_UNIX paths: no socket address to claim.
    Unix,
}

/// Whether `bytes` could still become the signature (every byte so far
/// matches it).
pub fn is_signature_prefix(bytes: &[u8]) -> bool {
    let n = bytes.len().min(SIGNATURE.len());
    bytes[..n] == SIGNATURE[..n]
}

/// Checks the fixed part (which starts with [`SIGNATURE`]) and returns the
/// whole header's length, `max_len` at most.
pub fn header_len(fixed: &[u8; FIXED_LEN], max_len: usize) -> Result<usize, Malformed> {
    debug_assert!(fixed.starts_with(&SIGNATURE));
    let (_, family) = version_command_family(fixed)?;
    let block = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    if block < family_addresses_len(family) {
        return Err(Malformed::Length);
    }
    let total = FIXED_LEN + block;
    if total > max_len {
        return Err(Malformed::TooLong);
    }
    Ok(total)
}

fn version_command_family(fixed: &[u8; FIXED_LEN]) -> Result<(Command, Family), Malformed> {
    if fixed[12] >> 4 != 2 {
        return Err(Malformed::Version);
    }
    let command = match fixed[12] & 0x0f {
        0 => Command::Local,
        1 => Command::Proxy,
        _ => return Err(Malformed::Command),
    };
    let family = match fixed[13] {
        0x00 => Family::Unspec,
        0x11 | 0x12 => Family::Inet,
        0x21 | 0x22 => Family::Inet6,
        0x31 | 0x32 => Family::Unix,
        _ => return Err(Malformed::Family),
    };
    Ok((command, family))
}

/// Bytes of addresses each family puts first in the address block.
fn family_addresses_len(family: Family) -> usize {
    match family {
        Family::Unspec => 0,
        Family::Inet => 12,
        Family::Inet6 => 36,
        Family::Unix => 216,
    }
}

/// A parsed header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// LOCAL or PROXY.
    pub command: Command,
    /// The family of the addresses.
    pub family: Family,
    /// The original client, for a PROXY header with IPv4/IPv6 addresses.
    pub source: Option<SocketAddr>,
    /// The address the client connected to (the VIP), likewise.
    pub destination: Option<SocketAddr>,
    /// The TLVs after the addresses, as sent.
    pub tlvs: Vec<u8>,
    /// The whole header's length on the wire.
    pub len: usize,
}

impl Header {
    /// Parses a whole header (`bytes.len()` is what [`header_len`] said).
    pub fn parse(bytes: &[u8], max_len: usize) -> Result<Header, Malformed> {
        let fixed: &[u8; FIXED_LEN] = bytes
            .get(..FIXED_LEN)
            .and_then(|f| f.try_into().ok())
            .ok_or(Malformed::Truncated)?;
        if !fixed.starts_with(&SIGNATURE) {
            return Err(Malformed::Version);
        }
        let len = header_len(fixed, max_len)?;
        let block = bytes.get(FIXED_LEN..len).ok_or(Malformed::Truncated)?;
        let (command, family) = version_command_family(fixed)?;
        let (source, destination) = match family {
            Family::Inet => {
                let ip =
                    |o: usize| Ipv4Addr::new(block[o], block[o + 1], block[o + 2], block[o + 3]);
                let port = |o: usize| u16::from_be_bytes([block[o], block[o + 1]]);
                (
                    Some(SocketAddr::new(ip(0).into(), port(8))),
                    Some(SocketAddr::new(ip(4).into(), port(10))),
                )
            }
            Family::Inet6 => {
                let ip = |o: usize| {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&block[o..o + 16]);
                    Ipv6Addr::from(a)
                };
                let port = |o: usize| u16::from_be_bytes([block[o], block[o + 1]]);
                (
                    Some(SocketAddr::new(ip(0).into(), port(32))),
                    Some(SocketAddr::new(ip(16).into(), port(34))),
                )
            }
            Family::Unspec | Family::Unix => (None, None),
        };
        Ok(Header {
            command,
            family,
            source,
            destination,
            tlvs: block[family_addresses_len(family)..].to_vec(),
            len,
        })
    }

    /// The client the header claims: the source of a PROXY header with
    /// IP addresses; `None` for LOCAL (the sender's own connection),
    /// UNSPEC and UNIX.
    pub fn claimed(&self) -> Option<SocketAddr> {
        match self.command {
            Command::Proxy => self.source,
            Command::Local => None,
        }
    }

    /// The TLVs as (type, value); stops at the first one whose length runs
    /// past the header (the rest cannot be framed).
    pub fn tlvs(&self) -> Tlvs<'_> {
        Tlvs(&self.tlvs)
    }

    /// The value of the first TLV of type `kind`.
    pub fn tlv(&self, kind: u8) -> Option<&[u8]> {
        self.tlvs().find(|(k, _)| *k == kind).map(|(_, v)| v)
    }
}

/// TLV type of the connection's unique id (border writes its connection id).
pub const TLV_UNIQUE_ID: u8 = 0x05;

/// The TLVs of a header.
#[derive(Debug)]
pub struct Tlvs<'a>(&'a [u8]);

impl<'a> Iterator for Tlvs<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let [kind, hi, lo, rest @ ..] = self.0 else {
            self.0 = &[];
            return None;
        };
        let n = usize::from(u16::from_be_bytes([*hi, *lo]));
        let Some(value) = rest.get(..n) else {
            self.0 = &[];
            return None;
        };
        self.0 = &rest[n..];
        Some((*kind, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(ver_cmd: u8, fam: u8, len: u16) -> [u8; FIXED_LEN] {
        let mut f = [0u8; FIXED_LEN];
        f[..12].copy_from_slice(&SIGNATURE);
        f[12] = ver_cmd;
        f[13] = fam;
        f[14..].copy_from_slice(&len.to_be_bytes());
        f
    }

    #[test]
    fn each_bad_fixed_part_has_its_reason() {
        assert_eq!(
            header_len(&fixed(0x11, 0x11, 12), 512),
            Err(Malformed::Version)
        );
        assert_eq!(
            header_len(&fixed(0x22, 0x11, 12), 512),
            Err(Malformed::Command)
        );
        assert_eq!(
            header_len(&fixed(0x21, 0x41, 12), 512),
            Err(Malformed::Family)
        );
        assert_eq!(
            header_len(&fixed(0x21, 0x13, 12), 512),
            Err(Malformed::Family)
        );
        assert_eq!(
            header_len(&fixed(0x21, 0x11, 11), 512),
            Err(Malformed::Length)
        );
        assert_eq!(
            header_len(&fixed(0x21, 0x21, 35), 512),
            Err(Malformed::Length)
        );
        assert_eq!(
            header_len(&fixed(0x21, 0x31, 215), 512),
            Err(Malformed::Length)
        );
        assert_eq!(
            header_len(&fixed(0x21, 0x11, 600), 512),
            Err(Malformed::TooLong)
        );
        assert_eq!(header_len(&fixed(0x21, 0x11, 12), 512), Ok(28));
        assert_eq!(header_len(&fixed(0x20, 0x00, 0), 512), Ok(16));
    }

    /// A whole header: fixed part and `block` as the address block.
    fn whole(ver_cmd: u8, fam: u8, block: &[u8]) -> Vec<u8> {
        let mut h = fixed(ver_cmd, fam, block.len() as u16).to_vec();
        h.extend_from_slice(block);
        h
    }

    #[test]
    fn only_a_proxy_header_with_ip_addresses_claims_a_client() {
        let v4 = [192, 0, 2, 1, 192, 0, 2, 100, 0x04, 0xd2, 0, 80];
        let h = Header::parse(&whole(0x21, 0x11, &v4), 512).unwrap();
        assert_eq!(h.claimed(), Some("192.0.2.1:1234".parse().unwrap()));
        assert_eq!(h.destination, Some("192.0.2.100:80".parse().unwrap()));
        assert_eq!(h.len, 28);
        // LOCAL with addresses: the sender's own connection, no claim.
        let h = Header::parse(&whole(0x20, 0x11, &v4), 512).unwrap();
        assert_eq!(h.command, Command::Local);
        assert_eq!(h.claimed(), None);
        // PROXY over UNSPEC (with a TLV) and over AF_UNIX: no IP to claim.
        let h = Header::parse(&whole(0x21, 0x00, &[0x05, 0, 1, b'7']), 512).unwrap();
        assert_eq!((h.family, h.claimed()), (Family::Unspec, None));
        assert_eq!(h.tlv(TLV_UNIQUE_ID), Some(&b"7"[..]));
        let h = Header::parse(&whole(0x21, 0x31, &[0u8; 216]), 512).unwrap();
        assert_eq!((h.family, h.claimed()), (Family::Unix, None));
        // A block shorter than the length says.
        let mut cut = whole(0x21, 0x11, &v4);
        cut.truncate(20);
        assert_eq!(Header::parse(&cut, 512), Err(Malformed::Truncated));
    }

    #[test]
    fn signature_prefixes() {
        assert!(is_signature_prefix(b""));
        assert!(is_signature_prefix(b"\r\n\r\n"));
        assert!(is_signature_prefix(&SIGNATURE));
        assert!(!is_signature_prefix(b"\x16\x03\x01"));
        assert!(!is_signature_prefix(b"PRI * HTTP/2.0"));
        assert!(!is_signature_prefix(b"\r\n\r\n\x01"));
    }

    #[test]
    fn tlvs_stop_at_one_running_past_the_header() {
        let h = Header {
            command: Command::Proxy,
            family: Family::Unspec,
            source: None,
            destination: None,
            tlvs: vec![0x05, 0, 2, b'a', b'b', 0x03, 0, 9, 1],
            len: 0,
        };
        let all: Vec<_> = h.tlvs().collect();
        assert_eq!(all, vec![(0x05, &b"ab"[..])]);
        assert_eq!(h.tlv(TLV_UNIQUE_ID), Some(&b"ab"[..]));
        assert_eq!(h.tlv(0x03), None);
    }
}
