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
/// the outer header is assembled whole and copied in front at once, and
/// its IPv4 checksum is the kept sum plus the packet's TOS, length and
/// protocol.
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
    let ethertype_at = l3.checked_sub(2).ok_or(EncapError::NotIp)?;
    let inner_len = len.checked_sub(l3).ok_or(EncapError::NotIp)?;
    let (inner_v4, tos) = match buf.get(l3..len).and_then(|ip| Some((ip.first()? >> 4, ip))) {
        Some((4, ip)) if ip.len() >= IPV4_HEADER => (true, ip[1]),
        Some((6, ip)) if ip.len() >= IPV6_HEADER => (false, (ip[0] << 4) | (ip[1] >> 4)),
        _ => return Err(EncapError::NotIp),
    };
    let v6 = matches!(outer, Outer::V6 { .. });
    let extra = overhead(v6, gue.is_some());
    if inner_len + extra > usize::from(mtu) {
        return Err(EncapError::TooBig);
    }
    let new_len = len + extra;
    if buf.len() < new_len {
        return Err(EncapError::NoRoom);
    }
    move_up(buf, l3, len, extra);
    let inner_proto = if inner_v4 { PROTO_IPIP } else { PROTO_IPV6 };
    let next = if gue.is_some() {
        PROTO_UDP
    } else {
        inner_proto
    };
    let src = c.src.to_be_bytes();
    let (ethertype, ip_len) = match outer {
        Outer::V4 { dst } => {
            let total = (inner_len + extra) as u16;
            let sum = checksum::fold(
                u64::from(c.v4_sum()) + u64::from(tos) + u64::from(total) + u64::from(next),
            );
            let (t, k) = (total.to_be_bytes(), (!sum).to_be_bytes());
            #[rustfmt::skip]
            let h = [
                0x45, tos, t[0], t[1],
                0, 0, 0x40, 0,
                OUTER_TTL, next, k[0], k[1],
                src[0], src[1], src[2], src[3],
                dst[0], dst[1], dst[2], dst[3],
            ];
            buf[l3..l3 + IPV4_HEADER].copy_from_slice(&h);
            (ETHERTYPE_IPV4, IPV4_HEADER)
        }
        Outer::V6 { high, dst } => {
            let payload = ((inner_len + extra - IPV6_HEADER) as u16).to_be_bytes();
            let word = (6u32 << 28) | (u32::from(tos) << 20) | (c.aux & 0x000f_ffff);
            let w = word.to_be_bytes();
            let mut h = [0u8; IPV6_HEADER];
            h[..8].copy_from_slice(&[
                w[0], w[1], w[2], w[3], payload[0], payload[1], next, OUTER_TTL,
            ]);
            h[8..20].copy_from_slice(&high);
            h[20..24].copy_from_slice(&src);
            h[24..40].copy_from_slice(dst);
            buf[l3..l3 + IPV6_HEADER].copy_from_slice(&h);
            (ETHERTYPE_IPV6, IPV6_HEADER)
        }
    };
    buf[ethertype_at..l3].copy_from_slice(&ethertype.to_be_bytes());
    if let Some(port) = gue {
        let at = l3 + ip_len;
        let udp_len = (inner_len + GUE_HEADERS) as u16;
        write_gue(
            &mut buf[at..at + GUE_HEADERS],
            c.aux,
            port,
            udp_len,
            inner_proto,
        );
    }
    Ok(new_len)
}

/// Moves `buf[from..end]` up by `by` bytes (the caller checked that
/// `end + by` fits). A packet of at most [`SMALL_MOVE`] bytes (a pure ACK,
/// most of a download's client packets) moves as one fixed-size copy
/// through a local buffer, without a call to `memmove`; the bytes it moves
/// past `end` are the buffer's spare ones, past the new frame.
#[inline(always)]
fn move_up(buf: &mut [u8], from: usize, end: usize, by: usize) {
    if end - from <= SMALL_MOVE {
        if let Some(w) = buf.get_mut(from..from + SMALL_MOVE + by) {
            let mut t = [0u8; SMALL_MOVE];
            t.copy_from_slice(&w[..SMALL_MOVE]);
            w[by..].copy_from_slice(&t);
            return;
        }
    }
    buf.copy_within(from..end, from + by);
}

/// The largest packet [`move_up`] moves without `memmove`.
const SMALL_MOVE: usize = 64;

/// UDP and a GUE variant 0 header (version 0, no flags, no options, the
/// inner protocol). The UDP checksum is zero, over IPv6 too: RFC 6935 and
/// RFC 6936 allow it for tunnels, and the inner packet carries its own.
fn write_gue(h: &mut [u8], entropy: u32, port: u16, udp_len: u16, inner_proto: u8) {
    h[0..2].copy_from_slice(&gue_source_port(entropy).to_be_bytes());
    h[2..4].copy_from_slice(&port.to_be_bytes());
    h[4..6].copy_from_slice(&udp_len.to_be_bytes());
    h[6..8].copy_from_slice(&[0, 0]);
    h[8..12].copy_from_slice(&[0, inner_proto, 0, 0]);
}

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
