//! In-place NAT rewrites over a parsed frame: addresses and ports of TCP/UDP
//! packets, TTL/hop limit, MAC addresses, and ICMP errors about a translated
//! flow (DESIGN §2: "ICMP errors about a VIP flow are matched by their inner
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

    /// Stable name for drop counters (snake_case, never changes).
    pub fn counter_name(&self) -> &'static str {
        match self {
            NatError::NotIp => "nat_not_ip",
            NatError::Fragment => "nat_fragment",
            NatError::UnsupportedProto => "nat_unsupported_proto",
            NatError::FamilyMismatch => "nat_family_mismatch",
            NatError::Ipv6RoutingHeader => "nat_ipv6_routing_header",
            NatError::NotIcmpError => "nat_not_icmp_error",
            NatError::BadQuote => "nat_bad_icmp_quote",
            NatError::Malformed => "nat_malformed",
        }
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
pub fn set_macs(frame: &mut [u8], src: MacAddr, dst: MacAddr) {
    if let Some(h) = frame.get_mut(..12) {
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
