//! In-place NAT rewrites over a parsed frame: addresses and ports of TCP/UDP
//! packets, TTL/hop limit, MAC addresses, and ICMP errors about a translated
//! flow (docs/design.md §2: "ICMP errors about a VIP flow are matched by their inner
//! header and go to the same backend/client as the flow").
//!
//! Every function takes the frame and the [`Parsed`] that
//! [`parse_frame`](crate::wire::parse_frame) returned for it. `Parsed` is
//! treated as a hint, not trusted: the headers it points at are re-validated
//! through the [`wire`](crate::wire) views, so a stale or foreign `Parsed`
//! gives an error, never a panic or a write outside the packet. Nothing here
//! allocates.
//!
//! # Checksums
//!
//! All checksum work is incremental (RFC 1624 eqn. 3, via
//! [`wire::checksum`](crate::wire::checksum)); nothing is recomputed over
//! the packet:
//!
//! - IPv4 header checksum: per changed address / TTL.
//! - TCP/UDP checksum: per changed pseudo-header address and port. Over IPv4
//!   a UDP checksum of 0 ("none") stays 0; a UDP result of 0 is written as
//!   0xFFFF. A UDP checksum of 0 over IPv6 (invalid per RFC 8200, or RFC 6936
//!   zero-checksum mode) is also left 0 rather than invented.
//! - ICMP errors: the outer IPv4 header checksum, the quoted IPv4 header
//!   checksum, the quoted TCP/UDP checksum and the ICMP/ICMPv6 checksum are
//!   all updated incrementally. Every changed field sits at an even offset of
//!   the ICMP message, so the ICMP checksum is updated word by word for every
//!   changed word (quoted addresses, quoted header checksum, quoted ports,
//!   quoted L4 checksum; for ICMPv6 also the outer pseudo-header addresses).
//!   A message whose checksum was wrong stays wrong, so the receiver still
//!   drops it: a rewrite never launders a corrupted packet into a valid one.
//!
//! Because the wire checksum helpers return canonical values, each result is
//! bit-for-bit what a full recomputation over valid input gives.
//!
//! # Errors leave the frame untouched
//!
//! Each rewrite validates everything (layout, families, protocol) before the
//! first write; on `Err` the frame is unchanged.
//!
//! # IPv6 routing headers
//!
//! The transport checksum of an IPv6 packet carrying a routing header with
//! segments left uses the *final* destination, not the header's destination
//! (RFC 8200 §8.1). Such packets are refused ([`NatError::Ipv6RoutingHeader`])
//! instead of being given a checksum that would not match.

use core::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use conf::counters::Counter;

use crate::wire::checksum;
use crate::wire::icmpv4::msg_type as icmp4;
use crate::wire::icmpv6::msg_type as icmp6;
use crate::wire::{ip_proto, ipv6, Fragment, Ipv4Packet, Ipv6Packet, L3Kind, MacAddr, Parsed};
use crate::wire::{rd16, wr16};

/// Why a NAT rewrite was refused. The frame is unchanged whenever one of
/// these is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NatError {
    /// The frame is not IPv4 or IPv6.
    NotIp,
    /// A fragment without the headers the rewrite needs: a non-first
    /// fragment (no L4 header), or any fragment of an ICMP error (the ICMP
    /// checksum covers the whole message).
    Fragment,
    /// The packet (or the packet quoted in an ICMP error) is not TCP or UDP.
    UnsupportedProto,
    /// A requested address is of the other IP family than the packet;
    /// translation between IPv4 and IPv6 is not supported.
    FamilyMismatch,
    /// IPv6 routing header with segments left: the transport checksum covers
    /// a final destination that is not in the IPv6 header.
    Ipv6RoutingHeader,
    /// Not an ICMP error that quotes a flow (ICMPv4 3, 11, 12; ICMPv6 1-4).
    NotIcmpError,
    /// The packet quoted in an ICMP error is truncated before its ports, is
    /// a non-first fragment, or is not a valid IP header.
    BadQuote,
    /// The frame does not match `Parsed` or its headers are too short.
    Malformed,
}

impl NatError {
    /// Every reason, in declaration order.
    pub const ALL: &'static [NatError] = &[
        NatError::NotIp,
        NatError::Fragment,
        NatError::UnsupportedProto,
        NatError::FamilyMismatch,
        NatError::Ipv6RoutingHeader,
        NatError::NotIcmpError,
        NatError::BadQuote,
        NatError::Malformed,
    ];

    /// The drop counter a packet refused for this reason is counted under.
    pub const fn counter(self) -> Counter {
        match self {
            NatError::NotIp => Counter::DropNatNotIp,
            NatError::Fragment => Counter::DropNatFragment,
            NatError::UnsupportedProto => Counter::DropNatUnsupportedProto,
            NatError::FamilyMismatch => Counter::DropNatFamilyMismatch,
            NatError::Ipv6RoutingHeader => Counter::DropNatIpv6RoutingHeader,
            NatError::NotIcmpError => Counter::DropNatNotIcmpError,
            NatError::BadQuote => Counter::DropNatBadIcmpQuote,
            NatError::Malformed => Counter::DropNatMalformed,
        }
    }

    /// The reason's name: its counter's without the `drop_` every drop
    /// counter's name starts with (snake_case, never changes).
    pub fn counter_name(&self) -> &'static str {
        &self.counter().name()["drop_".len()..]
    }
}

impl fmt::Display for NatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.counter_name())
    }
}

impl std::error::Error for NatError {}

/// The TTL (IPv4) or hop limit (IPv6) is 0 or 1: forwarding would make it 0.
/// The frame is unchanged; the caller drops it (and may answer with ICMP
/// time exceeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TtlExpired;

impl fmt::Display for TtlExpired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ttl_expired")
    }
}

impl std::error::Error for TtlExpired {}

/// The flow an ICMP error is about: the quoted (original, outbound) packet's
/// addresses and ports exactly as it carried them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InnerFlow {
    /// True for IPv6 (ICMPv6 quoting IPv6), false for IPv4.
    pub v6: bool,
    /// TCP or UDP.
    pub proto: u8,
    /// Source address of the quoted packet.
    pub src: IpAddr,
    /// Destination address of the quoted packet.
    pub dst: IpAddr,
    /// Source port of the quoted packet.
    pub sport: u16,
    /// Destination port of the quoted packet.
    pub dport: u16,
}

// ---------------------------------------------------------------------------
// Layout validation (read-only).

/// Where an IP packet and its upper layer sit in a frame, validated against
/// the frame itself. Offsets are absolute.
#[derive(Debug, Clone, Copy)]
struct IpLoc {
    v6: bool,
    /// Start of the IP header.
    l3: usize,
    /// Start of the upper-layer header (after IPv4 options / IPv6 extension
    /// headers); `l3 < l4 <= end`.
    l4: usize,
    /// End of the IP packet (no Ethernet padding).
    end: usize,
    /// Upper-layer protocol.
    proto: u8,
    /// Any fragment, first or not.
    fragment: bool,
}

fn locate_ip(frame: &[u8], p: &Parsed) -> Result<IpLoc, NatError> {
    let v6 = match p.l3 {
        L3Kind::Ipv4 => false,
        L3Kind::Ipv6 => true,
        _ => return Err(NatError::NotIp),
    };
    if p.fragment == Fragment::NonFirst {
        return Err(NatError::Fragment);
    }
    let l3b = frame
        .get(p.l3_offset..p.l3_end)
        .ok_or(NatError::Malformed)?;
    let l4_rel = p
        .l4_offset
        .checked_sub(p.l3_offset)
        .ok_or(NatError::Malformed)?;
    let (len, fragment) = if v6 {
        let ip = Ipv6Packet::new_checked(l3b).map_err(|_| NatError::Malformed)?;
        let up = ip.upper_layer().map_err(|_| NatError::Malformed)?;
        if up.fragment.is_some_and(|f| f.offset != 0) {
            return Err(NatError::Fragment);
        }
        if up.offset != l4_rel || up.proto != p.l4_proto {
            return Err(NatError::Malformed);
        }
        if up.ext_headers > 0 && v6_routing_pending(ip.next_header(), ip.payload()) {
            return Err(NatError::Ipv6RoutingHeader);
        }
        let frag = up.fragment.is_some_and(|f| !f.is_atomic());
        (ip.packet_len(), frag)
    } else {
        let ip = Ipv4Packet::new_checked(l3b).map_err(|_| NatError::Malformed)?;
        if ip.frag_offset() != 0 {
            return Err(NatError::Fragment);
        }
        if ip.header_len() != l4_rel || ip.protocol() != p.l4_proto {
            return Err(NatError::Malformed);
        }
        (ip.packet_len(), ip.is_fragment())
    };
    if l4_rel > len {
        return Err(NatError::Malformed);
    }
    Ok(IpLoc {
        v6,
        l3: p.l3_offset,
        l4: p.l4_offset,
        end: p.l3_offset + len,
        proto: p.l4_proto,
        fragment,
    })
}

/// True when the extension-header chain (starting with next header `first`
/// over `payload`, the bytes after the fixed header) holds a routing header
/// with segments left != 0. The walk mirrors
/// [`walk_ext_headers`](crate::wire::ipv6::walk_ext_headers) and stops at a
/// fragment header (routing headers precede it, RFC 8200 §4.1) or anything
/// else it does not know.
fn v6_routing_pending(first: u8, payload: &[u8]) -> bool {
    let mut next = first;
    let mut off = 0usize;
    for _ in 0..ipv6::MAX_EXT_HEADERS {
        let Some(h) = payload.get(off..off + 8) else {
            return false;
        };
        let len = match next {
            ip_proto::IPV6_ROUTE => {
                if h[3] != 0 {
                    return true;
                }
                (usize::from(h[1]) + 1) * 8
            }
            ip_proto::HOPOPT
            | ip_proto::IPV6_OPTS
            | ip_proto::MOBILITY
            | ip_proto::HIP
            | ip_proto::SHIM6 => (usize::from(h[1]) + 1) * 8,
            ip_proto::AH => (usize::from(h[1]) + 2) * 4,
            _ => return false,
        };
        next = h[0];
        off += len;
    }
    false
}

/// Where the checksum of a TCP or UDP header sits, and how long the header
/// must be for the rewrite to touch it.
#[derive(Debug, Clone, Copy)]
struct L4Kind {
    udp: bool,
    csum_at: usize,
}

impl L4Kind {
    fn of(proto: u8) -> Option<L4Kind> {
        match proto {
            ip_proto::TCP => Some(L4Kind {
                udp: false,
                csum_at: 16,
            }),
            ip_proto::UDP => Some(L4Kind {
                udp: true,
                csum_at: 6,
            }),
            _ => None,
        }
    }

    /// Minimum header length for a full (non-quoted) packet.
    fn header_len(self) -> usize {
        if self.udp {
            8
        } else {
            20
        }
    }

    /// The checksum field of `l4` if present and in use (UDP 0 = none).
    fn read_csum(self, l4: &[u8]) -> Option<u16> {
        let c = l4.get(self.csum_at..self.csum_at + 2)?;
        let c = u16::from_be_bytes([c[0], c[1]]);
        (!(self.udp && c == 0)).then_some(c)
    }

    /// The value to write back after incremental updates.
    fn finish(self, c: u16) -> u16 {
        if self.udp {
            checksum::udp_finish(c)
        } else {
            c
        }
    }
}

/// Requested addresses, checked against the packet's family.
#[derive(Debug, Clone, Copy)]
enum Want {
    V4(Option<Ipv4Addr>),
    V6(Option<Ipv6Addr>),
}

fn want(v6: bool, a: Option<IpAddr>) -> Result<Want, NatError> {
    match (v6, a) {
        (false, None) => Ok(Want::V4(None)),
        (true, None) => Ok(Want::V6(None)),
        (false, Some(IpAddr::V4(a))) => Ok(Want::V4(Some(a))),
        (true, Some(IpAddr::V6(a))) => Ok(Want::V6(Some(a))),
        _ => Err(NatError::FamilyMismatch),
    }
}

/// `buf` split at `mid`, without panicking.
fn split_mut(buf: &mut [u8], mid: usize) -> Result<(&mut [u8], &mut [u8]), NatError> {
    buf.split_at_mut_checked(mid).ok_or(NatError::Malformed)
}

/// The IP header (with options / extension headers) and the upper layer of
/// a located packet, as disjoint mutable slices.
fn split_ip<'a>(
    frame: &'a mut [u8],
    loc: &IpLoc,
) -> Result<(&'a mut [u8], &'a mut [u8]), NatError> {
    let pkt = frame.get_mut(loc.l3..loc.end).ok_or(NatError::Malformed)?;
    split_mut(pkt, loc.l4 - loc.l3)
}

// ---------------------------------------------------------------------------
// Writers that report their changes for the checksums that cover them.
// Callers have validated the lengths (`at` is always within `buf`).

/// One changed field, as an RFC 1624 update to apply to a checksum that
/// covers it (all fields here sit at even offsets of what is summed).
#[derive(Debug, Clone, Copy)]
enum Change {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
    Word(u16, u16),
}

impl Change {
    fn apply(self, c: u16) -> u16 {
        match self {
            Change::V4(old, new) => checksum::update_v4_addr(c, old, new),
            Change::V6(old, new) => checksum::update_v6_addr(c, &old, &new),
            Change::Word(old, new) => checksum::update16(c, old, new),
        }
    }
}

/// What [`rewrite_ip_addrs`] changed.
#[derive(Debug, Clone, Copy, Default)]
struct AddrChanges {
    src: Option<Change>,
    dst: Option<Change>,
    /// The IPv4 header checksum (already updated in the header).
    hdr_csum: Option<Change>,
}

impl AddrChanges {
    /// The address changes, as a pseudo-header sees them.
    fn addrs(&self) -> impl Iterator<Item = Change> {
        self.src.into_iter().chain(self.dst)
    }

    /// Every changed word of the header, as a checksum over the header's
    /// bytes sees them (a header quoted inside an ICMP message).
    fn bytes(&self) -> impl Iterator<Item = Change> {
        self.addrs().chain(self.hdr_csum)
    }
}

/// Check that `hdr` (an IP header with options or extension headers) opens
/// as the view [`rewrite_ip_addrs`] will use, so that it cannot fail later.
fn check_ip_hdr(hdr: &[u8], v6: bool) -> Result<(), NatError> {
    let ok = if v6 {
        Ipv6Packet::new_checked_truncated(hdr).is_ok()
    } else {
        Ipv4Packet::new_checked_truncated(hdr).is_ok()
    };
    ok.then_some(()).ok_or(NatError::Malformed)
}

/// Apply the address changes to an IP header slice. The IPv4 header
/// checksum is updated incrementally here; every other checksum covering
/// the addresses is the caller's, through the returned changes.
fn rewrite_ip_addrs(hdr: &mut [u8], src: Want, dst: Want) -> Result<AddrChanges, NatError> {
    let mut ch = AddrChanges::default();
    match (src, dst) {
        (Want::V4(src), Want::V4(dst)) => {
            let mut ip = Ipv4Packet::new_checked_truncated(hdr).map_err(|_| NatError::Malformed)?;
            let hc = ip.checksum();
            if let Some(a) = src {
                ch.src = Some(Change::V4(ip.src_addr(), a));
                ip.rewrite_src_addr(a);
            }
            if let Some(a) = dst {
                ch.dst = Some(Change::V4(ip.dst_addr(), a));
                ip.rewrite_dst_addr(a);
            }
            ch.hdr_csum = Some(Change::Word(hc, ip.checksum()));
        }
        (Want::V6(src), Want::V6(dst)) => {
            let mut ip = Ipv6Packet::new_checked_truncated(hdr).map_err(|_| NatError::Malformed)?;
            if let Some(a) = src {
                ch.src = Some(Change::V6(ip.src_addr(), a));
                ip.set_src_addr(&a);
            }
            if let Some(a) = dst {
                ch.dst = Some(Change::V6(ip.dst_addr(), a));
                ip.set_dst_addr(&a);
            }
        }
        _ => return Err(NatError::FamilyMismatch),
    }
    Ok(ch)
}

/// Write a port at `at`, returning the change.
fn put_port(buf: &mut [u8], at: usize, new: u16) -> Change {
    let old = rd16(buf, at);
    wr16(buf, at, new);
    Change::Word(old, new)
}

// ---------------------------------------------------------------------------
// Public API.

/// Rewrite the source and/or destination address and port of a TCP or UDP
/// packet in place (`None` leaves that side alone).
///
/// Checksums are updated incrementally: the IPv4 header checksum for the
/// addresses, the TCP/UDP checksum for the pseudo-header addresses and the
/// ports. UDP over IPv4 with checksum 0 keeps 0; a UDP result of 0 becomes
/// 0xFFFF. First fragments are rewritten (their L4 header and checksum are
/// present; the incremental update is valid for the whole datagram).
///
/// Errors (frame untouched): not IP, non-first fragment, not TCP/UDP, an
/// address of the other family, IPv6 routing header with segments left,
/// frame not matching `p`.
///
/// The packet path forwards through [`forward`] alone. This one stays
/// public as its reference: it validates everything and works field by
/// field with the `wire` views, so the property tests (`tests/nat.rs`, and
/// `forward`'s own here) compare the one-pass rewrite against it, and
/// `forward` uses it for IPv6 packets with extension headers.
pub fn rewrite_addrs(
    frame: &mut [u8],
    p: &Parsed,
    src: Option<(IpAddr, u16)>,
    dst: Option<(IpAddr, u16)>,
) -> Result<(), NatError> {
    let loc = locate_ip(frame, p)?;
    let kind = L4Kind::of(loc.proto).ok_or(NatError::UnsupportedProto)?;
    let want_src = want(loc.v6, src.map(|s| s.0))?;
    let want_dst = want(loc.v6, dst.map(|d| d.0))?;
    let (hdr, l4) = split_ip(frame, &loc)?;
    if l4.len() < kind.header_len() {
        return Err(NatError::Malformed);
    }
    check_ip_hdr(hdr, loc.v6)?;
    // Validated; no error past this point.
    let mut csum = kind.read_csum(l4);
    let addrs = rewrite_ip_addrs(hdr, want_src, want_dst)?;
    let ports = [
        src.map(|(_, port)| put_port(l4, 0, port)),
        dst.map(|(_, port)| put_port(l4, 2, port)),
    ];
    if let Some(c) = csum.as_mut() {
        for ch in addrs.addrs().chain(ports.into_iter().flatten()) {
            *c = ch.apply(*c);
        }
        wr16(l4, kind.csum_at, kind.finish(*c));
    }
    Ok(())
}

/// Decrement the IPv4 TTL (header checksum updated incrementally) or the
/// IPv6 hop limit.
///
/// `Err(TtlExpired)` when the value is 0 or 1 (forwarding would make it 0);
/// the frame is then unchanged. Frames that are not IP, or whose IP header
/// does not match `p`, carry no TTL to decrement: they are left untouched and
/// `Ok(())` is returned (the pipeline never forwards them anyway).
pub fn decrement_ttl(frame: &mut [u8], p: &Parsed) -> Result<(), TtlExpired> {
    let Some(l3) = frame.get_mut(p.l3_offset..p.l3_end) else {
        return Ok(());
    };
    match p.l3 {
        L3Kind::Ipv4 => {
            if let Ok(mut ip) = Ipv4Packet::new_checked(l3) {
                let ttl = ip.ttl();
                if ttl <= 1 {
                    return Err(TtlExpired);
                }
                ip.rewrite_ttl(ttl - 1);
            }
        }
        L3Kind::Ipv6 => {
            if let Ok(mut ip) = Ipv6Packet::new_checked(l3) {
                let hl = ip.hop_limit();
                if hl <= 1 {
                    return Err(TtlExpired);
                }
                ip.set_hop_limit(hl - 1);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Set the Ethernet source and destination MAC addresses. A frame shorter
/// than the two addresses (12 bytes) is left untouched.
#[inline]
pub fn set_macs(frame: &mut [u8], src: MacAddr, dst: MacAddr) {
    if let Some(h) = frame.first_chunk_mut::<12>() {
        h[..6].copy_from_slice(&dst);
        h[6..].copy_from_slice(&src);
    }
}

/// An ICMP error and the packet it quotes, validated. Offsets are absolute.
#[derive(Debug, Clone, Copy)]
struct IcmpLoc {
    /// Outer packet; `outer.l4` is the ICMP message, `outer.end` its end.
    outer: IpLoc,
    /// Start of the quoted IP header (`outer.l4 + 8`).
    inner: usize,
    /// Start of the quoted L4 header.
    inner_l4: usize,
    /// Quoted L4 bytes present (at least 8), bounded by the quoted packet's
    /// own length field.
    inner_l4_len: usize,
    /// Quoted L4 protocol (TCP or UDP).
    inner_proto: u8,
}

fn locate_icmp_error(frame: &[u8], p: &Parsed) -> Result<IcmpLoc, NatError> {
    let outer = locate_ip(frame, p)?;
    let icmp_proto = if outer.v6 {
        ip_proto::ICMPV6
    } else {
        ip_proto::ICMP
    };
    if outer.proto != icmp_proto {
        return Err(NatError::NotIcmpError);
    }
    if outer.fragment {
        return Err(NatError::Fragment);
    }
    let msg = frame.get(outer.l4..outer.end).ok_or(NatError::Malformed)?;
    let Some(&ty) = msg.first() else {
        return Err(NatError::Malformed);
    };
    let is_error = if outer.v6 {
        matches!(
            ty,
            icmp6::DEST_UNREACHABLE
                | icmp6::PACKET_TOO_BIG
                | icmp6::TIME_EXCEEDED
                | icmp6::PARAMETER_PROBLEM
        )
    } else {
        matches!(
            ty,
            icmp4::DEST_UNREACHABLE | icmp4::TIME_EXCEEDED | icmp4::PARAMETER_PROBLEM
        )
    };
    if !is_error {
        return Err(NatError::NotIcmpError);
    }
    // Both ICMP headers are 8 bytes; the quoted packet follows.
    let quote = msg.get(8..).ok_or(NatError::Malformed)?;
    let (hdr_len, l4_len, proto) = if outer.v6 {
        let ip = Ipv6Packet::new_checked_truncated(quote).map_err(|_| NatError::BadQuote)?;
        let up = ip.upper_layer().map_err(|_| NatError::BadQuote)?;
        if up.fragment.is_some_and(|f| f.offset != 0) {
            return Err(NatError::BadQuote);
        }
        if up.ext_headers > 0 && v6_routing_pending(ip.next_header(), ip.payload()) {
            return Err(NatError::Ipv6RoutingHeader);
        }
        let l4_len = ip.packet_len().saturating_sub(up.offset);
        (up.offset, l4_len, up.proto)
    } else {
        let ip = Ipv4Packet::new_checked_truncated(quote).map_err(|_| NatError::BadQuote)?;
        if ip.frag_offset() != 0 {
            return Err(NatError::BadQuote);
        }
        (ip.header_len(), ip.payload().len(), ip.protocol())
    };
    if L4Kind::of(proto).is_none() {
        return Err(NatError::UnsupportedProto);
    }
    if l4_len < 8 {
        return Err(NatError::BadQuote);
    }
    let inner = outer.l4 + 8;
    Ok(IcmpLoc {
        outer,
        inner,
        inner_l4: inner + hdr_len,
        inner_l4_len: l4_len,
        inner_proto: proto,
    })
}

/// The flow an ICMP error is about: ICMPv4 destination unreachable (3, incl.
/// code 4 fragmentation needed), time exceeded (11), parameter problem (12);
/// ICMPv6 destination unreachable (1), packet too big (2), time exceeded
/// (3), parameter problem (4). The quoted packet must be TCP or UDP with at
/// least its ports (8 bytes of L4 header) present and not a non-first
/// fragment.
///
/// Returns the quoted packet's addresses and ports as it carried them (it
/// is a packet the appliance sent, so this is the *outbound* direction of
/// the flow). `None` for anything else, or a truncated or garbage quote.
/// The ICMP checksum is not verified here (see [`rewrite_icmp_error`]).
pub fn icmp_error_inner(frame: &[u8], p: &Parsed) -> Option<InnerFlow> {
    let loc = locate_icmp_error(frame, p).ok()?;
    let quote = frame.get(loc.inner..loc.outer.end)?;
    let (src, dst) = if loc.outer.v6 {
        let ip = Ipv6Packet::new_checked_truncated(quote).ok()?;
        (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()))
    } else {
        let ip = Ipv4Packet::new_checked_truncated(quote).ok()?;
        (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()))
    };
    let ports = frame.get(loc.inner_l4..loc.inner_l4 + 4)?;
    Some(InnerFlow {
        v6: loc.outer.v6,
        proto: loc.inner_proto,
        src,
        dst,
        sport: u16::from_be_bytes([ports[0], ports[1]]),
        dport: u16::from_be_bytes([ports[2], ports[3]]),
    })
}

/// The sequence number of the TCP segment an ICMP error quotes (the kinds
/// [`icmp_error_inner`] accepts; RFC 792 and 4443 quote at least the 8
/// bytes that hold it). `None` for a UDP quote or anything else.
pub fn icmp_error_quoted_seq(frame: &[u8], p: &Parsed) -> Option<u32> {
    let loc = locate_icmp_error(frame, p).ok()?;
    if loc.inner_proto != ip_proto::TCP {
        return None;
    }
    let s = frame.get(loc.inner_l4 + 4..loc.inner_l4 + 8)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Translate an ICMP error about a flow (the kinds [`icmp_error_inner`]
/// accepts) in place. `None` leaves a field alone.
///
/// - `outer_src`/`outer_dst`: the outer IP addresses. IPv4: header checksum
///   updated incrementally. IPv6: the ICMPv6 checksum's pseudo-header
///   changes and is accounted for.
/// - `inner_src`/`inner_dst`: address and port of the quoted packet's
///   source/destination. The quoted IPv4 header checksum is updated
///   incrementally. The quoted TCP/UDP checksum is updated incrementally
///   (pseudo-header addresses and ports) when the checksum field itself lies
///   within the quoted bytes, which is exact even when the segment's payload
///   is cut short; when the quote ends before it (e.g. only the 8 bytes
///   RFC 792 promises of a TCP header), it is absent and nothing is written.
///   A quoted UDP checksum of 0 stays 0.
/// - Finally the ICMP/ICMPv6 checksum is updated incrementally for every
///   word changed inside the message (and the IPv6 pseudo-header); it is not
///   recomputed, so a corrupted message stays detectably corrupted.
///
/// Errors (frame untouched): not IP, fragmented, not one of the ICMP error
/// types, quoted packet unusable ([`NatError::BadQuote`]) or not TCP/UDP,
/// an address of the other family, IPv6 routing header with segments left
/// in the outer or quoted packet.
pub fn rewrite_icmp_error(
    frame: &mut [u8],
    p: &Parsed,
    outer_src: Option<IpAddr>,
    outer_dst: Option<IpAddr>,
    inner_src: Option<(IpAddr, u16)>,
    inner_dst: Option<(IpAddr, u16)>,
) -> Result<(), NatError> {
    let loc = locate_icmp_error(frame, p)?;
    let v6 = loc.outer.v6;
    let o_src = want(v6, outer_src)?;
    let o_dst = want(v6, outer_dst)?;
    let i_src = want(v6, inner_src.map(|s| s.0))?;
    let i_dst = want(v6, inner_dst.map(|d| d.0))?;
    let kind = L4Kind::of(loc.inner_proto).ok_or(NatError::UnsupportedProto)?;

    // Disjoint slices: outer header | ICMP header | quoted IP header | quoted
    // L4 bytes (bounded by the quoted length field) | rest of the message.
    let (outer_hdr, msg) = split_ip(frame, &loc.outer)?;
    let (icmp_hdr, quote) = split_mut(msg, loc.inner - loc.outer.l4)?;
    let (inner_hdr, inner_rest) = split_mut(quote, loc.inner_l4 - loc.inner)?;
    let (inner_l4, _) = split_mut(inner_rest, loc.inner_l4_len)?;
    if icmp_hdr.len() < 8 || inner_l4.len() < 8 {
        return Err(NatError::Malformed);
    }
    check_ip_hdr(outer_hdr, v6)?;
    check_ip_hdr(inner_hdr, v6)?;
    // Validated; no error past this point.

    let mut icmp_csum = rd16(icmp_hdr, 2);
    let l4_csum = kind.read_csum(inner_l4);

    // 1. Outer addresses. ICMPv4 has no pseudo-header; ICMPv6 has.
    let outer = rewrite_ip_addrs(outer_hdr, o_src, o_dst)?;
    if v6 {
        for ch in outer.addrs() {
            icmp_csum = ch.apply(icmp_csum);
        }
    }

    // 2. Quoted addresses: the quoted L4 checksum sees them through its
    // pseudo-header; the ICMP checksum sees the bytes, including the quoted
    // IPv4 header checksum that changed with them.
    let inner = rewrite_ip_addrs(inner_hdr, i_src, i_dst)?;
    for ch in inner.bytes() {
        icmp_csum = ch.apply(icmp_csum);
    }

    // 3. Quoted ports.
    let ports = [
        inner_src.map(|(_, port)| put_port(inner_l4, 0, port)),
        inner_dst.map(|(_, port)| put_port(inner_l4, 2, port)),
    ];
    for ch in ports.iter().flatten() {
        icmp_csum = ch.apply(icmp_csum);
    }

    // 4. Quoted L4 checksum, when its field is within the quote.
    if let Some(old) = l4_csum {
        let mut c = old;
        for ch in inner.addrs().chain(ports.into_iter().flatten()) {
            c = ch.apply(c);
        }
        let new = kind.finish(c);
        wr16(inner_l4, kind.csum_at, new);
        icmp_csum = checksum::update16(icmp_csum, old, new);
    }

    // 5. ICMP checksum.
    wr16(icmp_hdr, 2, icmp_csum);
    Ok(())
}

// ---------------------------------------------------------------------------
// The forwarding fast path.

/// Why [`forward`] refused a packet. The frame is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardError {
    /// TTL / hop limit 0 or 1.
    TtlExpired,
    /// See [`NatError`].
    Nat(NatError),
}

/// One end of a translated packet: the address (an IPv4 address as
/// IPv4-mapped IPv6, `::ffff:a.b.c.d`, like [`FlowKey`](crate::conntrack::FlowKey))
/// and the port.
pub type Endpoint<'a> = (&'a [u8; 16], u16);

/// Where the headers of a packet to forward are, as the path that took it
/// knows them.
#[derive(Debug, Clone, Copy)]
pub enum Headers<'a> {
    /// What [`parse_frame`](crate::wire::parse_frame) returned for this
    /// very frame: any layout it accepts. IPv6 packets with extension
    /// headers take the validating path (a routing header with segments
    /// left is refused there).
    Parsed(&'a Parsed),
    /// A layout already checked against the frame (the express lane's
    /// parse).
    Layout(Layout),
}

impl Headers<'_> {
    /// Start of the TCP or UDP header.
    #[inline(always)]
    pub fn l4(&self) -> usize {
        match self {
            Headers::Parsed(p) => p.l4_offset,
            Headers::Layout(at) => at.l4,
        }
    }
}

/// One forwarding rewrite for [`forward`]: where the packet's headers are,
/// its new source and destination (`None` leaves that side alone) and,
/// when they are known, the checksum changes.
#[derive(Debug, Clone, Copy)]
pub struct Rewrite<'a> {
    pub headers: Headers<'a>,
    pub src: Option<Endpoint<'a>>,
    pub dst: Option<Endpoint<'a>>,
    /// The [`Deltas`] of exactly this rewrite of the packet's current
    /// addresses and ports ([`deltas`]; a connection-table hit guarantees
    /// the packet carries the addresses they were computed from). `None`:
    /// worked out from the fields as they are replaced. Both give the same
    /// packet; the validating path (IPv6 extension headers) ignores them.
    pub deltas: Option<Deltas>,
}

/// The one NAT rewrite of a forwarded TCP/UDP packet, everything in one
/// pass: TTL / hop limit decremented, source and/or destination address and
/// port replaced, and each checksum updated once with the combined RFC 1624
/// delta of all its changed words (the IPv4 header checksum for TTL and
/// addresses; the TCP/UDP checksum for the pseudo-header addresses and the
/// ports). The result is bit for bit what [`decrement_ttl`] followed by
/// [`rewrite_addrs`] give, including the UDP rules (checksum 0 stays 0; a
/// result of 0 is written as 0xFFFF).
///
/// Unlike the functions above, the headers are trusted: a `Parsed` must be
/// what `parse_frame` returned for this very frame, a [`Layout`] must have
/// been checked against it, so nothing is re-validated. Reads and writes
/// are still bounds-checked, so a foreign `Parsed` or layout can give a
/// wrong packet or an error, never a panic or a write outside the frame.
///
/// Errors (frame unchanged): TTL / hop limit 0 or 1, not TCP/UDP, a
/// non-first fragment, a frame too short for what the headers say.
#[inline(always)]
pub fn forward(frame: &mut [u8], r: Rewrite<'_>) -> Result<(), ForwardError> {
    let at = match r.headers {
        Headers::Layout(at) => at,
        Headers::Parsed(p) => match layout_of(p)? {
            Some(at) => at,
            None => return forward_validated(frame, p, r.src, r.dst),
        },
    };
    match r.deltas {
        Some(d) => forward_with(frame, at, r.src, r.dst, d),
        None => forward_at(frame, at, r.src, r.dst),
    }
}

/// The [`Layout`] of a parsed TCP or UDP packet; `None` for IPv6 with
/// extension headers (the validating path's).
#[inline(always)]
fn layout_of(p: &Parsed) -> Result<Option<Layout>, ForwardError> {
    let udp = match p.l4_proto {
        ip_proto::TCP => false,
        ip_proto::UDP => true,
        _ => return Err(ForwardError::Nat(NatError::UnsupportedProto)),
    };
    if p.fragment == Fragment::NonFirst {
        return Err(ForwardError::Nat(NatError::Fragment));
    }
    let hl = p.l4_offset.wrapping_sub(p.l3_offset);
    let v4 = match p.l3 {
        L3Kind::Ipv4 => true,
        L3Kind::Ipv6 if hl == ipv6::HEADER_LEN => false,
        L3Kind::Ipv6 => return Ok(None),
        _ => return Err(ForwardError::Nat(NatError::NotIp)),
    };
    Ok(Some(Layout {
        l3: p.l3_offset,
        l4: p.l4_offset,
        v4,
        udp,
    }))
}

/// Where the headers of a TCP or UDP packet start in its frame: the IPv4
/// header (any IHL) or the IPv6 header without extension headers, and the
/// TCP or UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub l3: usize,
    pub l4: usize,
    pub v4: bool,
    pub udp: bool,
}

/// [`forward`] at a known layout, each checksum change worked out as its
/// field is replaced.
#[inline(always)]
fn forward_at(
    frame: &mut [u8],
    at: Layout,
    src: Option<Endpoint<'_>>,
    dst: Option<Endpoint<'_>>,
) -> Result<(), ForwardError> {
    let (v4, udp) = (at.v4, at.udp);
    let csum_at = if udp { 6 } else { 16 };
    let Some((ip, l4)) = frame
        .get_mut(at.l3..)
        .and_then(|pkt| pkt.split_at_mut_checked(at.l4.wrapping_sub(at.l3)))
    else {
        return Err(ForwardError::Nat(NatError::Malformed));
    };
    // Ports, then the checksum field (TCP at 16, UDP at 6).
    let Some(&[c0, c1]) = l4.get(csum_at..csum_at + 2) else {
        return Err(ForwardError::Nat(NatError::Malformed));
    };
    let c = u16::from_be_bytes([c0, c1]);
    // The address changes, as the IPv4 header and the pseudo-header see them.
    let mut addr_acc = 0u64;
    if v4 {
        let Some(ip) = ip.get_mut(..20) else {
            return Err(ForwardError::Nat(NatError::Malformed));
        };
        let ttl = ip[8];
        if ttl <= 1 {
            return Err(ForwardError::TtlExpired);
        }
        if let Some((a, _)) = src {
            addr_acc += swap_word(&mut ip[12..16], &a[12..16]);
        }
        if let Some((a, _)) = dst {
            addr_acc += swap_word(&mut ip[16..20], &a[12..16]);
        }
        // The TTL shares its header word with the protocol.
        let word = u16::from_be_bytes([ttl, ip[9]]);
        ip[8] = ttl - 1;
        let h = u16::from_be_bytes([ip[10], ip[11]]);
        let h =
            !checksum::fold(u64::from(!h) + u64::from(!word) + u64::from(word - 0x100) + addr_acc);
        ip[10..12].copy_from_slice(&h.to_be_bytes());
    } else {
        let Some(ip) = ip.get_mut(..40) else {
            return Err(ForwardError::Nat(NatError::Malformed));
        };
        let hop = ip[7];
        if hop <= 1 {
            return Err(ForwardError::TtlExpired);
        }
        ip[7] = hop - 1;
        if let Some((a, _)) = src {
            for w in 0..4 {
                addr_acc += swap_word(&mut ip[8 + 4 * w..12 + 4 * w], &a[4 * w..4 * w + 4]);
            }
        }
        if let Some((a, _)) = dst {
            for w in 0..4 {
                addr_acc += swap_word(&mut ip[24 + 4 * w..28 + 4 * w], &a[4 * w..4 * w + 4]);
            }
        }
    }
    let mut l4_acc = addr_acc;
    let Some(ports) = l4.get_mut(..4) else {
        return Err(ForwardError::Nat(NatError::Malformed));
    };
    if let Some((_, port)) = src {
        l4_acc += swap_port(&mut ports[0..2], port);
    }
    if let Some((_, port)) = dst {
        l4_acc += swap_port(&mut ports[2..4], port);
    }
    if !(udp && c == 0) {
        let new = !checksum::fold(u64::from(!c) + l4_acc);
        let new = if udp { checksum::udp_finish(new) } else { new };
        if let Some(csum) = l4.get_mut(csum_at..csum_at + 2) {
            csum.copy_from_slice(&new.to_be_bytes());
        }
    }
    Ok(())
}

/// The checksum changes of one forwarding rewrite, folded: what [`forward`]
/// adds to the IPv4 header checksum (addresses and the TTL decrement) and to
/// the TCP/UDP checksum (pseudo-header addresses and ports). They depend
/// only on the old and new addresses and ports, so a flow's are computed
/// once ([`deltas`]) and every packet of the flow is rewritten with them
/// ([`Rewrite::deltas`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Deltas {
    pub ip: u16,
    pub l4: u16,
}

/// The [`Deltas`] of rewriting a packet from `src` to `dst` (addresses as
/// [`Endpoint`]s hold them) into one from `new_src` / `new_dst` (`None`:
/// unchanged), over IPv4 (`v4`) or IPv6.
pub fn deltas(
    v4: bool,
    src: Endpoint<'_>,
    dst: Endpoint<'_>,
    new_src: Option<Endpoint<'_>>,
    new_dst: Option<Endpoint<'_>>,
) -> Deltas {
    let (mut a, mut p) = (0u64, 0u64);
    if let Some(n) = new_src {
        a += addr_sum(v4, src.0, n.0);
        p += u64::from(!src.1) + u64::from(n.1);
    }
    if let Some(n) = new_dst {
        a += addr_sum(v4, dst.0, n.0);
        p += u64::from(!dst.1) + u64::from(n.1);
    }
    Deltas::of(a, p)
}

/// [`deltas`] of a rewrite of all four fields, and of its inverse (the
/// full-NAT reply: every field back to what it was).
pub fn deltas_both(
    v4: bool,
    src: Endpoint<'_>,
    dst: Endpoint<'_>,
    new_src: Endpoint<'_>,
    new_dst: Endpoint<'_>,
) -> (Deltas, Deltas) {
    let a = addr_sum(v4, src.0, new_src.0) + addr_sum(v4, dst.0, new_dst.0);
    let p = u64::from(!src.1) + u64::from(new_src.1) + u64::from(!dst.1) + u64::from(new_dst.1);
    // Per word, `(~o + n) + (~n + o)` is twice the word's all-ones, so the
    // inverse's unfolded sums follow exactly from these.
    let words: u64 = if v4 { 2 } else { 8 };
    let (ra, rp) = (2 * words * 0xFFFF_FFFF - a, 4 * 0xFFFF - p);
    (Deltas::of(a, p), Deltas::of(ra, rp))
}

impl Deltas {
    /// From the unfolded sums of the address words and of the port words.
    fn of(a: u64, p: u64) -> Deltas {
        // The TTL's word (TTL above 1, protocol): ~w + (w - 0x100) = 0xFEFF.
        Deltas {
            ip: checksum::fold(a + 0xFEFF),
            l4: checksum::fold(a + p),
        }
    }
}

/// `~old + new` over the 32-bit words of an address (one for IPv4, in the
/// mapped form's last four bytes), unfolded.
#[inline]
fn addr_sum(v4: bool, old: &[u8; 16], new: &[u8; 16]) -> u64 {
    let w = |a: &[u8; 16], i: usize| u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
    if v4 {
        u64::from(!w(old, 12)) + u64::from(w(new, 12))
    } else {
        [0, 4, 8, 12]
            .into_iter()
            .map(|i| u64::from(!w(old, i)) + u64::from(w(new, i)))
            .sum()
    }
}

/// [`forward_at`] with the checksum changes given: the packet's addresses
/// and ports must be the `src` and `dst` the deltas were computed from
/// (a connection-table hit guarantees it). The result is the same.
#[inline(always)]
fn forward_with(
    frame: &mut [u8],
    at: Layout,
    src: Option<Endpoint<'_>>,
    dst: Option<Endpoint<'_>>,
    d: Deltas,
) -> Result<(), ForwardError> {
    let malformed = ForwardError::Nat(NatError::Malformed);
    let csum_at = if at.udp { 6 } else { 16 };
    let Some((ip, l4)) = frame
        .get_mut(at.l3..)
        .and_then(|pkt| pkt.split_at_mut_checked(at.l4.wrapping_sub(at.l3)))
    else {
        return Err(malformed);
    };
    let Some(l4) = l4.get_mut(..csum_at + 2) else {
        return Err(malformed);
    };
    if at.v4 {
        let Some(ip) = ip.get_mut(..20) else {
            return Err(malformed);
        };
        let ttl = ip[8];
        if ttl <= 1 {
            return Err(ForwardError::TtlExpired);
        }
        ip[8] = ttl - 1;
        if let Some((a, _)) = src {
            ip[12..16].copy_from_slice(&a[12..]);
        }
        if let Some((a, _)) = dst {
            ip[16..20].copy_from_slice(&a[12..]);
        }
        let h = u16::from_be_bytes([ip[10], ip[11]]);
        ip[10..12].copy_from_slice(&(!fold17(u32::from(!h) + u32::from(d.ip))).to_be_bytes());
    } else {
        let Some(ip) = ip.get_mut(..40) else {
            return Err(malformed);
        };
        let hop = ip[7];
        if hop <= 1 {
            return Err(ForwardError::TtlExpired);
        }
        ip[7] = hop - 1;
        if let Some((a, _)) = src {
            ip[8..24].copy_from_slice(a);
        }
        if let Some((a, _)) = dst {
            ip[24..40].copy_from_slice(a);
        }
    }
    if let Some((_, port)) = src {
        l4[0..2].copy_from_slice(&port.to_be_bytes());
    }
    if let Some((_, port)) = dst {
        l4[2..4].copy_from_slice(&port.to_be_bytes());
    }
    let c = u16::from_be_bytes([l4[csum_at], l4[csum_at + 1]]);
    if !(at.udp && c == 0) {
        let new = !fold17(u32::from(!c) + u32::from(d.l4));
        let new = if at.udp {
            checksum::udp_finish(new)
        } else {
            new
        };
        l4[csum_at..csum_at + 2].copy_from_slice(&new.to_be_bytes());
    }
    Ok(())
}

/// [`checksum::fold`] of a sum of two 16-bit values.
#[inline(always)]
fn fold17(x: u32) -> u16 {
    let x = (x & 0xFFFF) + (x >> 16);
    ((x & 0xFFFF) + (x >> 16)) as u16
}

/// Replaces the 32-bit word at `field` with `new` (both 4 bytes) and
/// returns its RFC 1624 delta (`~old + new`, unfolded).
#[inline(always)]
fn swap_word(field: &mut [u8], new: &[u8]) -> u64 {
    let (Ok(f), Ok(n)) = (<&mut [u8; 4]>::try_from(field), <&[u8; 4]>::try_from(new)) else {
        return 0;
    };
    let old = u32::from_be_bytes(*f);
    *f = *n;
    u64::from(!old) + u64::from(u32::from_be_bytes(*n))
}

/// Replaces the port at `field` (2 bytes) and returns its RFC 1624 delta.
#[inline(always)]
fn swap_port(field: &mut [u8], new: u16) -> u64 {
    let Ok(f) = <&mut [u8; 2]>::try_from(field) else {
        return 0;
    };
    let old = u16::from_be_bytes(*f);
    *f = new.to_be_bytes();
    u64::from(!old) + u64::from(new)
}

/// [`forward`] through the validating functions (IPv6 extension headers).
fn forward_validated(
    frame: &mut [u8],
    p: &Parsed,
    src: Option<Endpoint<'_>>,
    dst: Option<Endpoint<'_>>,
) -> Result<(), ForwardError> {
    let v6 = |(a, port): Endpoint<'_>| (IpAddr::V6(Ipv6Addr::from(*a)), port);
    if p.l3 != L3Kind::Ipv6 {
        return Err(ForwardError::Nat(NatError::Malformed));
    }
    if frame.get(p.l3_offset + 7).is_none_or(|&hop| hop <= 1) {
        return Err(ForwardError::TtlExpired);
    }
    // Validates everything and leaves the frame alone on error; the hop
    // limit is then known to be there and above 1.
    rewrite_addrs(frame, p, src.map(v6), dst.map(v6)).map_err(ForwardError::Nat)?;
    decrement_ttl(frame, p).map_err(|_| ForwardError::TtlExpired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{parse_frame_with, ParseOptions};
    use etherparse::{
        IpHeaders, IpNumber, Ipv4Header, Ipv4Options, Ipv6Extensions, Ipv6FlowLabel, Ipv6Header,
        Ipv6RawExtHeader, Ipv6RoutingExtensions, PacketBuilder, TcpHeader,
    };
    use proptest::prelude::*;

    #[test]
    fn every_reason_has_its_own_drop_counter() {
        let mut counters: Vec<Counter> = NatError::ALL.iter().map(|e| e.counter()).collect();
        for e in NatError::ALL {
            let c = e.counter();
            assert!(c.is_drop(), "{e:?}: {}", c.name());
            assert_eq!(c.name(), format!("drop_{e}"));
            assert_eq!(Counter::from_name(c.name()), Some(c));
        }
        counters.sort_by_key(|c| c.index());
        counters.dedup();
        assert_eq!(counters.len(), NatError::ALL.len());
    }

    #[derive(Debug, Clone)]
    struct Case {
        v6: bool,
        tcp: bool,
        src: u128,
        dst: u128,
        sport: u16,
        dport: u16,
        ttl: u8,
        v4_option_words: usize,
        v6_dest_opts: bool,
        v6_routing: Option<u8>,
        payload: Vec<u8>,
        /// Overwrites the TCP/UDP checksum field (0 included).
        l4_csum: Option<u16>,
        /// Overwrites the IPv4 header checksum field.
        ip_csum: Option<u16>,
        new_src: Option<(u128, u16)>,
        new_dst: Option<(u128, u16)>,
    }

    fn mapped(v6: bool, raw: u128) -> [u8; 16] {
        if v6 {
            raw.to_be_bytes()
        } else {
            Ipv4Addr::from(raw as u32).to_ipv6_mapped().octets()
        }
    }

    fn build(c: &Case) -> Vec<u8> {
        let proto = if c.tcp { IpNumber::TCP } else { IpNumber::UDP };
        let ip = if c.v6 {
            let h = Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::ZERO,
                payload_length: 0,
                next_header: proto,
                hop_limit: c.ttl,
                source: c.src.to_be_bytes(),
                destination: c.dst.to_be_bytes(),
            };
            let mut exts = Ipv6Extensions::default();
            if c.v6_dest_opts {
                exts.destination_options =
                    Some(Ipv6RawExtHeader::new_raw(proto, &[1, 4, 0, 0, 0, 0]).unwrap());
            }
            if let Some(left) = c.v6_routing {
                exts.routing = Some(Ipv6RoutingExtensions {
                    routing: Ipv6RawExtHeader::new_raw(proto, &[4, left, 0, 0, 0, 0]).unwrap(),
                    final_destination_options: None,
                });
            }
            IpHeaders::Ipv6(h, exts)
        } else {
            let s = (c.src as u32).to_be_bytes();
            let d = (c.dst as u32).to_be_bytes();
            let mut h = Ipv4Header::new(0, c.ttl, proto, s, d).unwrap();
            let opts = vec![1u8; 4 * c.v4_option_words];
            h.options = Ipv4Options::try_from(&opts[..]).unwrap();
            IpHeaders::Ipv4(h, Default::default())
        };
        let step = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ip(ip);
        let mut out = Vec::new();
        if c.tcp {
            let t = TcpHeader::new(c.sport, c.dport, 7, 1000);
            step.tcp_header(t).write(&mut out, &c.payload).unwrap();
        } else {
            step.udp(c.sport, c.dport)
                .write(&mut out, &c.payload)
                .unwrap();
        }
        let p = parse_frame_with(&out, &ParseOptions::default()).unwrap();
        if let Some(v) = c.l4_csum {
            let at = p.l4_offset + if c.tcp { 16 } else { 6 };
            out[at..at + 2].copy_from_slice(&v.to_be_bytes());
        }
        if let (Some(v), false) = (c.ip_csum, c.v6) {
            let at = p.l3_offset + 10;
            out[at..at + 2].copy_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            (any::<bool>(), any::<bool>(), any::<u128>(), any::<u128>()),
            (
                any::<u16>(),
                any::<u16>(),
                prop_oneof![Just(0u8), Just(1), Just(2), any::<u8>()],
            ),
            (
                0usize..=10,
                any::<bool>(),
                prop::option::of(prop_oneof![Just(0u8), Just(3)]),
            ),
            prop::collection::vec(any::<u8>(), 0..40),
            (
                prop::option::of(prop_oneof![Just(0u16), Just(0xFFFF), any::<u16>()]),
                prop::option::of(prop_oneof![Just(0u16), Just(0xFFFF), any::<u16>()]),
            ),
            (
                prop::option::of((any::<u128>(), any::<u16>())),
                prop::option::of((any::<u128>(), any::<u16>())),
            ),
        )
            .prop_map(
                |(
                    (v6, tcp, src, dst),
                    (sport, dport, ttl),
                    (v4_option_words, v6_dest_opts, v6_routing),
                    payload,
                    (l4_csum, ip_csum),
                    (new_src, new_dst),
                )| Case {
                    v6,
                    tcp,
                    src,
                    dst,
                    sport,
                    dport,
                    ttl,
                    v4_option_words,
                    v6_dest_opts,
                    v6_routing,
                    payload,
                    l4_csum,
                    ip_csum,
                    new_src,
                    new_dst,
                },
            )
    }

    /// What `forward` must do: the validated functions, one after the other.
    fn reference(
        f: &mut [u8],
        p: &Parsed,
        src: Option<Endpoint<'_>>,
        dst: Option<Endpoint<'_>>,
    ) -> Result<(), ForwardError> {
        if p.ttl <= 1 {
            return Err(ForwardError::TtlExpired);
        }
        let ip = |v6: bool, (a, port): Endpoint<'_>| {
            let a = Ipv6Addr::from(*a);
            match (v6, a.to_ipv4_mapped()) {
                (false, Some(v4)) => (IpAddr::V4(v4), port),
                _ => (IpAddr::V6(a), port),
            }
        };
        let v6 = p.l3 == L3Kind::Ipv6;
        rewrite_addrs(f, p, src.map(|e| ip(v6, e)), dst.map(|e| ip(v6, e)))
            .map_err(ForwardError::Nat)?;
        decrement_ttl(f, p).map_err(|_| ForwardError::TtlExpired)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn forward_equals_ttl_then_rewrite(c in case()) {
            let frame = build(&c);
            let no_verify = ParseOptions { verify_ipv4_checksum: false };
            let p = parse_frame_with(&frame, &no_verify).unwrap();
            let s = c.new_src.map(|(a, port)| (mapped(c.v6, a), port));
            let d = c.new_dst.map(|(a, port)| (mapped(c.v6, a), port));
            let (s, d) = (s.as_ref().map(|(a, p)| (a, *p)), d.as_ref().map(|(a, p)| (a, *p)));
            let mut want = frame.clone();
            let want_r = reference(&mut want, &p, s, d);
            let mut got = frame.clone();
            let got_r = forward(&mut got, Rewrite { headers: Headers::Parsed(&p), src: s, dst: d, deltas: None });
            prop_assert_eq!(got_r, want_r);
            prop_assert_eq!(&got, &want);
            if got_r.is_err() {
                prop_assert_eq!(&got, &frame, "an error leaves the frame alone");
            }
        }

        #[test]
        fn forward_with_deltas_equals_forward(c in case()) {
            if c.v6 && (c.v6_dest_opts || c.v6_routing.is_some()) {
                // Extension headers: not a `Layout`.
                return Ok(());
            }
            let frame = build(&c);
            let no_verify = ParseOptions { verify_ipv4_checksum: false };
            let p = parse_frame_with(&frame, &no_verify).unwrap();
            let s = c.new_src.map(|(a, port)| (mapped(c.v6, a), port));
            let d = c.new_dst.map(|(a, port)| (mapped(c.v6, a), port));
            let (s, d) = (s.as_ref().map(|(a, p)| (a, *p)), d.as_ref().map(|(a, p)| (a, *p)));
            let old_s = mapped(c.v6, c.src);
            let old_d = mapped(c.v6, c.dst);
            let dl = deltas(!c.v6, (&old_s, c.sport), (&old_d, c.dport), s, d);
            let at = Layout {
                l3: p.l3_offset,
                l4: p.l4_offset,
                v4: !c.v6,
                udp: !c.tcp,
            };
            let mut want = frame.clone();
            let want_r = forward(&mut want, Rewrite { headers: Headers::Parsed(&p), src: s, dst: d, deltas: None });
            let mut got = frame.clone();
            let got_r = forward(&mut got, Rewrite { headers: Headers::Layout(at), src: s, dst: d, deltas: Some(dl) });
            prop_assert_eq!(got_r, want_r);
            prop_assert_eq!(&got, &want);
        }

        #[test]
        fn deltas_of_the_inverse_rewrite(
            v6 in any::<bool>(),
            a in any::<[u128; 4]>(),
            p in any::<[u16; 4]>(),
        ) {
            let m = a.map(|x| mapped(v6, x));
            let (fwd, rev) = deltas_both(!v6, (&m[0], p[0]), (&m[1], p[1]), (&m[2], p[2]), (&m[3], p[3]));
            let want_fwd = deltas(!v6, (&m[0], p[0]), (&m[1], p[1]), Some((&m[2], p[2])), Some((&m[3], p[3])));
            let want_rev = deltas(!v6, (&m[2], p[2]), (&m[3], p[3]), Some((&m[0], p[0])), Some((&m[1], p[1])));
            prop_assert_eq!(fwd, want_fwd);
            prop_assert_eq!(rev, want_rev);
        }

        #[test]
        fn forward_never_panics_on_foreign_parse(
            c in case(),
            l3_offset in 0usize..120,
            l4_offset in 0usize..160,
            l3_end in 0usize..200,
        ) {
            let mut frame = build(&c);
            let mut p = parse_frame_with(&frame, &ParseOptions { verify_ipv4_checksum: false })
                .unwrap();
            p.l3_offset = l3_offset;
            p.l4_offset = l4_offset;
            p.l3_end = l3_end;
            let a = [7u8; 16];
            let r = Rewrite { headers: Headers::Parsed(&p), src: Some((&a, 1)), dst: Some((&a, 2)), deltas: None };
            let _ = forward(&mut frame, r);
        }
    }
}
