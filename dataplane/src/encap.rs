//! Tunnels to direct-server-return backends, written in place: the IP
//! packet of a frame moves up by the outer headers, which are written in
//! the gap, Katran-style: IPIP (IPv4 in IPv4), IP6IP6 (IPv6 in IPv6) and
//! 4in6/6in4 by the backend's family, or GUE (RFC draft
//! `draft-ietf-intarea-gue`, variant 0 with its 4-byte header) over UDP.
//!
//! The outer source is not one fixed address: it is folded from the
//! client's address and port into the host part of the backend port's
//! subnet ([`outer_source`]), and the GUE source port and the IPv6 flow
//! label carry the same per-flow value, so a backend NIC's RSS (which
//! hashes the outer header) spreads the flows over its queues. Katran
//! does the same with a fixed prefix (its `create_encap_ipip_src`).
//!
//! Sans-IO and allocation-free: the frame's buffer must have room for the
//! outer headers past its length (the worker hands over the whole mbuf).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::wire::checksum;

/// IPv4 header without options.
pub const IPV4_HEADER: usize = 20;
/// IPv6 fixed header.
pub const IPV6_HEADER: usize = 40;
/// UDP header and GUE's 4-byte variant 0 header.
pub const GUE_HEADERS: usize = 8 + 4;
/// Hop limit of the outer header (the inner packet keeps its own).
pub const OUTER_TTL: u8 = 64;

const PROTO_IPIP: u8 = 4;
const PROTO_IPV6: u8 = 41;
const PROTO_UDP: u8 = 17;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

/// Where the outer header goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OuterAddrs {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

/// One encapsulation: the outer addresses, the flow's entropy (GUE source
/// port, IPv6 flow label) and whether it is GUE (else bare IP in IP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunnel {
    pub addrs: OuterAddrs,
    pub entropy: u32,
    /// `Some(port)`: GUE to this UDP destination port.
    pub gue: Option<u16>,
}

impl Tunnel {
    /// Bytes the outer headers add.
    #[inline(always)]
    pub fn overhead(&self) -> usize {
        overhead(
            matches!(self.addrs, OuterAddrs::V6 { .. }),
            self.gue.is_some(),
        )
    }

    /// What stays the same for every packet of this tunnel's flow.
    pub fn consts(&self) -> TunnelConsts {
        match self.addrs {
            OuterAddrs::V4 { src, dst } => TunnelConsts {
                src: u32::from(src),
                aux: (u32::from(fixed_sum_v4(src.octets(), dst.octets())) << 16)
                    | (self.entropy & 0xffff),
            },
            OuterAddrs::V6 { src, .. } => TunnelConsts {
                src: u128::from(src) as u32,
                aux: self.entropy,
            },
        }
    }
}

/// Bytes the outer headers of a tunnel over IPv6 (`v6`) or IPv4, GUE or
/// not, add.
#[inline(always)]
pub fn overhead(v6: bool, gue: bool) -> usize {
    (if v6 { IPV6_HEADER } else { IPV4_HEADER }) + if gue { GUE_HEADERS } else { 0 }
}

/// What a flow's tunnel keeps from one packet to the next
/// ([`Tunnel::consts`], once per flow): with the backend's address (and,
/// over IPv6, the upper 96 bits of the source, the port's subnet's) it is
/// all [`encapsulate_flow`] needs besides the packet, which then only adds
/// the packet's length and TOS to a ready checksum sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelConsts {
    /// The outer source: the IPv4 address, or the low 32 bits of the IPv6
    /// one (the only bits [`outer_source_v6`] takes from the entropy).
    pub src: u32,
    /// IPv4: the one's-complement sum of the outer header's words that are
    /// the same for every packet ([`fixed_sum_v4`]) in the top 16 bits, the
    /// flow's entropy's low 16 in the bottom ones. IPv6: the entropy.
    /// Either way its low 14 bits give the GUE source port and, over IPv6,
    /// its low 20 the flow label.
    pub aux: u32,
}

impl TunnelConsts {
    #[inline(always)]
    fn v4_sum(&self) -> u16 {
        (self.aux >> 16) as u16
    }
}

/// The outer header's destination, as [`encapsulate_flow`] takes it.
#[derive(Clone, Copy, Debug)]
pub enum Outer<'a> {
    /// IPv4 to `dst`, from [`TunnelConsts::src`].
    V4 { dst: [u8; 4] },
    /// IPv6 to `dst`, from `high` (the upper 96 bits, the subnet's: see
    /// [`v6_source_high`]) and [`TunnelConsts::src`] below.
    V6 { high: [u8; 12], dst: &'a [u8; 16] },
}

/// The upper 96 bits of every outer source [`outer_source_v6`] folds into
/// `net`/`prefix`: the entropy only ever sets the low 32.
#[inline(always)]
pub fn v6_source_high(net: Ipv6Addr, prefix: u8) -> [u8; 12] {
    // A /127 or /128 gives `net` itself: its upper bits either way.
    let base = u128::from(net) & !(u128::MAX >> prefix.min(127));
    let b = base.to_be_bytes();
    [
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
    ]
}

/// The one's-complement sum of an outer IPv4 header's words that do not
/// change from packet to packet: version and header length, DF, TTL and
/// the addresses (the TOS, total length and protocol are added per packet).
pub fn fixed_sum_v4(src: [u8; 4], dst: [u8; 4]) -> u16 {
    let w = |a: [u8; 4]| {
        u64::from(u16::from_be_bytes([a[0], a[1]])) + u64::from(u16::from_be_bytes([a[2], a[3]]))
    };
    checksum::fold(0x4500 + 0x4000 + (u64::from(OUTER_TTL) << 8) + w(src) + w(dst))
}

/// Why a frame was not encapsulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncapError {
    /// The outer packet would exceed the egress port's MTU.
    TooBig,
    /// The buffer has no room for the outer headers.
    NoRoom,
    /// `l3` does not start an IPv4 or IPv6 packet of the frame.
    NotIp,
}

/// Encapsulates the IP packet `buf[l3..len]` (its ethertype at
/// `l3 - 2`) in `t`, the Ethernet header (and VLAN tag) kept in front:
/// the new frame length, or why not. `mtu` bounds the outer IP packet.
/// The inner packet is not changed (its TTL neither: the appliance is no
/// router hop of the client's packet, as with IPVS).
#[inline]
pub fn encapsulate(
    buf: &mut [u8],
    len: usize,
    l3: usize,
    t: &Tunnel,
    mtu: u16,
) -> Result<usize, EncapError> {
    let c = t.consts();
    match t.addrs {
        OuterAddrs::V4 { dst, .. } => {
            let outer = Outer::V4 { dst: dst.octets() };
            encapsulate_flow(buf, len, l3, outer, &c, t.gue, mtu)
        }
        OuterAddrs::V6 { src, dst } => {
            let s = src.octets();
            let high = [
                s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
            ];
            let dst = dst.octets();
            encapsulate_flow(buf, len, l3, Outer::V6 { high, dst: &dst }, &c, t.gue, mtu)
        }
    }
}

/// [`encapsulate`] for an established flow, from what its tunnel keeps
/// (`c`), to `outer`'s destination, GUE to port `gue` or bare IP in IP:
/// the inner packet's family is read from its version
/// ([`encapsulate_known`] when the caller knows it).
#[inline(always)]
pub fn encapsulate_flow(
    buf: &mut [u8],
    len: usize,
    l3: usize,
    outer: Outer<'_>,
    c: &TunnelConsts,
    gue: Option<u16>,
    mtu: u16,
) -> Result<usize, EncapError> {
    let inner_v4 = match buf.get(l3).map(|b| b >> 4) {
        Some(4) if l3 < len => true,
        Some(6) if l3 < len => false,
        _ => return Err(EncapError::NotIp),
    };
    encapsulate_known(buf, len, l3, inner_v4, outer, c, gue, mtu)
}

/// [`encapsulate_flow`] of a packet whose family the caller knows
/// (`inner_v4`: IPv4, else IPv6; the express lane parsed it). Each of the
/// four outer shapes is its own copy of [`put`], so the per-packet work
/// has no test of the tunnel's kind past this one match, and its sizes and
/// offsets are constants.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn encapsulate_known(
    buf: &mut [u8],
    len: usize,
    l3: usize,
    inner_v4: bool,
    outer: Outer<'_>,
    c: &TunnelConsts,
    gue: Option<u16>,
    mtu: u16,
) -> Result<usize, EncapError> {
    let p = Packet { len, l3, mtu };
    match (outer, gue, inner_v4) {
        (Outer::V4 { dst }, None, true) => put::<false, false, true>(buf, p, &V4Dst(dst), c, 0),
        (Outer::V4 { dst }, None, false) => put::<false, false, false>(buf, p, &V4Dst(dst), c, 0),
        (Outer::V4 { dst }, Some(port), true) => {
            put::<false, true, true>(buf, p, &V4Dst(dst), c, port)
        }
        (Outer::V4 { dst }, Some(port), false) => {
            put::<false, true, false>(buf, p, &V4Dst(dst), c, port)
        }
        (Outer::V6 { high, dst }, None, true) => {
            put::<true, false, true>(buf, p, &V6Dst(high, dst), c, 0)
        }
        (Outer::V6 { high, dst }, None, false) => {
            put::<true, false, false>(buf, p, &V6Dst(high, dst), c, 0)
        }
        (Outer::V6 { high, dst }, Some(port), true) => {
            put::<true, true, true>(buf, p, &V6Dst(high, dst), c, port)
        }
        (Outer::V6 { high, dst }, Some(port), false) => {
            put::<true, true, false>(buf, p, &V6Dst(high, dst), c, port)
        }
    }
}

/// The packet [`put`] encapsulates: the frame's length, where its IP
/// packet starts and the egress MTU.
#[derive(Clone, Copy)]
struct Packet {
    len: usize,
    l3: usize,
    mtu: u16,
}

/// The outer destination of one family, written by [`put`].
trait OuterDst {
    /// Writes the outer IP header's addresses (and, over IPv6, nothing
    /// else) into `h`, the outer header.
    fn write_addrs(&self, h: &mut [u8], src: u32);
}

struct V4Dst([u8; 4]);

impl OuterDst for V4Dst {
    #[inline(always)]
    fn write_addrs(&self, h: &mut [u8], src: u32) {
        put_u64(
            h,
            12,
            (u64::from(src) << 32) | u64::from(u32::from_be_bytes(self.0)),
        );
    }
}

struct V6Dst<'a>([u8; 12], &'a [u8; 16]);

impl OuterDst for V6Dst<'_> {
    #[inline(always)]
    fn write_addrs(&self, h: &mut [u8], src: u32) {
        h[8..20].copy_from_slice(&self.0);
        h[20..24].copy_from_slice(&src.to_be_bytes());
        h[24..40].copy_from_slice(self.1);
    }
}

/// Writes `v` big-endian at `h[at..at + 8]`.
#[inline(always)]
fn put_u64(h: &mut [u8], at: usize, v: u64) {
    h[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Encapsulates `p`, an IPv4 packet (`INNER_V4`) or an IPv6 one, over
/// IPv6 (`V6`) or IPv4, in GUE to `port` (`GUE`) or bare: one copy for
/// each of the eight shapes, so that no test of the shape is left past the
/// caller's match and every size and offset is a constant. The outer
/// headers are written as a few words assembled from the kept constants
/// and the packet's TOS and length. A packet of at most [`SMALL_MOVE`]
/// bytes (a pure ACK) moves up as one fixed-size copy, without a call to
/// `memmove`, under one bounds check with the ethertype and the headers.
#[inline(always)]
fn put<const V6: bool, const GUE: bool, const INNER_V4: bool>(
    buf: &mut [u8],
    p: Packet,
    dst: &impl OuterDst,
    c: &TunnelConsts,
    port: u16,
) -> Result<usize, EncapError> {
    let extra = overhead(V6, GUE);
    let Packet { len, l3, mtu } = p;
    let ethertype_at = l3.checked_sub(2).ok_or(EncapError::NotIp)?;
    let inner_len = len.checked_sub(l3).ok_or(EncapError::NotIp)?;
    if inner_len < if INNER_V4 { IPV4_HEADER } else { IPV6_HEADER } {
        return Err(EncapError::NotIp);
    }
    if inner_len + extra > usize::from(mtu) {
        return Err(EncapError::TooBig);
    }
    let new_len = len + extra;
    let ethertype = if V6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 }.to_be_bytes();
    let tos_of = |a: u8, b: u8| if INNER_V4 { b } else { (a << 4) | (b >> 4) };
    let head = Head {
        outer_len: (inner_len + extra) as u16,
        inner_proto: if INNER_V4 { PROTO_IPIP } else { PROTO_IPV6 },
        port,
    };
    if inner_len <= SMALL_MOVE {
        // The bytes past the frame that the fixed copy takes along are the
        // buffer's spare ones.
        if let Some(w) = buf.get_mut(ethertype_at..l3 + extra + SMALL_MOVE) {
            let tos = tos_of(w[2], w[3]);
            let mut t = [0u8; SMALL_MOVE];
            t.copy_from_slice(&w[2..2 + SMALL_MOVE]);
            w[2 + extra..].copy_from_slice(&t);
            w[..2].copy_from_slice(&ethertype);
            write_outer::<V6, GUE>(&mut w[2..2 + extra], tos, head, dst, c);
            return Ok(new_len);
        }
    }
    if buf.len() < new_len {
        return Err(EncapError::NoRoom);
    }
    let tos = tos_of(buf[l3], buf[l3 + 1]);
    buf.copy_within(l3..len, l3 + extra);
    buf[ethertype_at..l3].copy_from_slice(&ethertype);
    write_outer::<V6, GUE>(&mut buf[l3..l3 + extra], tos, head, dst, c);
    Ok(new_len)
}

/// What [`write_outer`] takes of the packet besides its TOS: the outer
/// packet's length, the inner protocol, the GUE port.
#[derive(Clone, Copy)]
struct Head {
    outer_len: u16,
    inner_proto: u8,
    port: u16,
}

/// Writes the outer headers of [`put`] into `h` (exactly their length).
#[inline(always)]
fn write_outer<const V6: bool, const GUE: bool>(
    h: &mut [u8],
    tos: u8,
    head: Head,
    dst: &impl OuterDst,
    c: &TunnelConsts,
) {
    let Head {
        outer_len,
        inner_proto,
        port,
    } = head;
    let ip_len = if V6 { IPV6_HEADER } else { IPV4_HEADER };
    let next = if GUE { PROTO_UDP } else { inner_proto };
    if V6 {
        let word = (6u32 << 28) | (u32::from(tos) << 20) | (c.aux & 0x000f_ffff);
        let payload = outer_len - IPV6_HEADER as u16;
        put_u64(
            h,
            0,
            (u64::from(word) << 32)
                | (u64::from(payload) << 16)
                | (u64::from(next) << 8)
                | u64::from(OUTER_TTL),
        );
    } else {
        // The kept sum has the fixed words; the TOS, length and protocol
        // are below 2^16 each: two folds finish it.
        let s = u32::from(c.v4_sum()) + u32::from(tos) + u32::from(outer_len) + u32::from(next);
        let s = (s & 0xffff) + (s >> 16);
        let s = (s & 0xffff) + (s >> 16);
        let sum = !(s as u16);
        put_u64(
            h,
            0,
            0x4500_0000_0000_4000 | (u64::from(tos) << 48) | (u64::from(outer_len) << 32),
        );
        h[8..12].copy_from_slice(
            &((u32::from(OUTER_TTL) << 24) | (u32::from(next) << 16) | u32::from(sum))
                .to_be_bytes(),
        );
    }
    dst.write_addrs(h, c.src);
    if GUE {
        let udp_len = outer_len - ip_len as u16;
        put_u64(
            h,
            ip_len,
            (u64::from(gue_source_port(c.aux)) << 48)
                | (u64::from(port) << 32)
                | (u64::from(udp_len) << 16),
        );
        h[ip_len + 8..ip_len + 12].copy_from_slice(&[0, inner_proto, 0, 0]);
    }
}

/// The largest packet [`put`] moves without `memmove`.
const SMALL_MOVE: usize = 64;

/// The GUE source port of a flow: in the dynamic range 49152..=65535.
#[inline(always)]
pub fn gue_source_port(entropy: u32) -> u16 {
    0xc000 | (entropy as u16 & 0x3fff)
}

/// A flow's entropy from its client end (address as a flow key holds it,
/// and port): the same for every packet of the flow, different across
/// clients and ports.
#[inline(always)]
pub fn flow_entropy(client: &[u8; 16], sport: u16) -> u32 {
    let w = |i: usize| u32::from_ne_bytes([client[i], client[i + 1], client[i + 2], client[i + 3]]);
    let mut x = w(0) ^ w(4) ^ w(8) ^ w(12) ^ u32::from(sport).wrapping_mul(0x9e37_79b1);
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^ (x >> 13)
}

/// The outer source of a flow of `entropy`: the subnet `net`/`prefix`
/// with its host part from the entropy, never the subnet's first or last
/// address (a /31 or /32 gives `net` itself), and never `avoid` (the
/// backend: a kernel drops a tunnel packet from its own address).
pub fn outer_source_v4(net: Ipv4Addr, prefix: u8, entropy: u32, avoid: Ipv4Addr) -> Ipv4Addr {
    if prefix >= 31 {
        return net;
    }
    let host_mask = u32::MAX >> prefix;
    let base = u32::from(net) & !host_mask;
    let mut host = entropy & host_mask;
    if host == 0 || host == host_mask {
        host = 1;
    }
    let mut a = base | host;
    if a == u32::from(avoid) {
        a = base | if host == 1 { 2 } else { host - 1 };
    }
    Ipv4Addr::from(a)
}

/// As [`outer_source_v4`] for IPv6: the entropy goes into the low 32 bits
/// of the host part (all of it for prefixes longer than /96).
pub fn outer_source_v6(net: Ipv6Addr, prefix: u8, entropy: u32, avoid: Ipv6Addr) -> Ipv6Addr {
    if prefix >= 127 {
        return net;
    }
    let host_mask = u128::MAX >> prefix;
    let base = u128::from(net) & !host_mask;
    let mut host = u128::from(entropy) & host_mask;
    if host == 0 || host == host_mask {
        host = 1;
    }
    let mut a = base | host;
    if a == u128::from(avoid) {
        a = base | if host == 1 { 2 } else { host - 1 };
    }
    Ipv6Addr::from(a)
}

#[cfg(test)]
mod tests;
