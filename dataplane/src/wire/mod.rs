//! Zero-copy packet views in the style of smoltcp's `wire` module.
//!
//! Every view wraps a buffer (`&[u8]`, `&mut [u8]`, or anything `AsRef<[u8]>`)
//! and is built by `new_checked`, which validates all lengths the accessors
//! rely on exactly once. The validated bounds are cached inside the view, so
//! no accessor can panic afterwards, not even after a setter has rewritten a
//! length field. (The one assumption: the buffer's `as_ref()` keeps returning
//! the same slice, which holds for slices, arrays and `Vec`.)
//!
//! Views never allocate and never copy the packet.
//!
//! The write side follows smoltcp's `Repr::emit`: a `*Repr` holds a
//! header's fields as values and `emit` writes them into a buffer
//! ([`Ipv4Repr`], [`Ipv6Repr`], [`TcpRepr`], [`NdiscRepr`], [`ArpRepr`],
//! [`EthernetRepr`]), so code that builds or rewrites a frame outside this
//! module names fields, never byte offsets.
//!
//! [`parse_frame`] runs the views over a whole Ethernet frame once and returns
//! the offsets the pipeline needs ([`Parsed`]) or a named [`Malformed`] reason.

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
mod parse;
pub mod tcp;
pub mod udp;

pub use arp::{ArpPacket, ArpRepr};
pub use ethernet::{EthernetFrame, EthernetRepr};
pub use icmpv4::Icmpv4Packet;
pub use icmpv6::{Icmpv6Packet, NdiscRepr};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub(crate) use parse::{
    fast_ipv4, fast_ipv6, fast_l4, fast_link, ipv4_header_ok, parse_fast, parse_views,
};
pub use parse::{
    parse_frame, parse_frame_with, tcp_flags_valid, Fragment, L3Kind, Malformed, NicChecksum,
    ParseOptions, Parsed, Ports,
};
pub use tcp::{TcpFlags, TcpOption, TcpPacket, TcpRepr};
pub use udp::UdpPacket;

use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol numbers used by the views.
pub mod ip_proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// Encapsulating security payload.
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 destination options.
    pub const IPV6_OPTS: u8 = 60;
    /// Mobility header (RFC 6275), generic extension header format.
    pub const MOBILITY: u8 = 135;
    /// Host identity protocol (RFC 7401), generic extension header format.
    pub const HIP: u8 = 139;
    /// Shim6 (RFC 5533), generic extension header format.
    pub const SHIM6: u8 = 140;
}

/// Why a view could not be built over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The buffer is shorter than the fixed header (or than the header length
    /// the packet itself declares).
    Truncated,
    /// IP version field does not match the view.
    BadVersion,
    /// A header length field is impossible (IHL < 5, TCP data offset < 5 or
    /// beyond the segment).
    BadHeaderLen,
    /// A total/payload/datagram length field disagrees with the buffer.
    BadLength,
    /// A checksum did not verify.
    BadChecksum,
    /// A TCP or NDP option is malformed.
    BadOption,
    /// An IPv6 extension header is out of place (hop-by-hop not first, a
    /// second fragment header).
    BadExtHeader,
    /// More IPv6 extension headers than [`ipv6::MAX_EXT_HEADERS`].
    TooManyExtHeaders,
    /// Two (or more) VLAN tags, or an 802.1ad service tag.
    QinQ,
    /// A well-formed packet of a kind the view does not support (e.g. ARP
    /// for something other than Ethernet/IPv4).
    Unsupported,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WireError::Truncated => "truncated",
            WireError::BadVersion => "bad version",
            WireError::BadHeaderLen => "bad header length",
            WireError::BadLength => "bad length field",
            WireError::BadChecksum => "bad checksum",
            WireError::BadOption => "malformed option",
            WireError::BadExtHeader => "misplaced extension header",
            WireError::TooManyExtHeaders => "too many extension headers",
            WireError::QinQ => "stacked VLAN tags",
            WireError::Unsupported => "unsupported",
        };
        f.write_str(s)
    }
}

impl std::error::Error for WireError {}

/// An Ethernet MAC address as raw bytes.
pub type MacAddr = [u8; 6];

/// The broadcast MAC address.
pub const BROADCAST_MAC: MacAddr = [0xff; 6];

/// True for a unicast, non-zero MAC address.
#[inline]
pub fn mac_is_unicast(mac: &MacAddr) -> bool {
    mac[0] & 1 == 0 && *mac != [0; 6]
}

// Field helpers. Callers guarantee `at + N <= b.len()` (checked by the view
// constructors); they are the only place that indexes raw bytes.

#[inline]
pub(crate) fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn wr16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn wr32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn rd_mac(b: &[u8], at: usize) -> MacAddr {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}

#[inline]
pub(crate) fn rd_v4(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

#[inline]
pub(crate) fn rd_v6(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}
