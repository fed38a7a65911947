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
        let ip = match self.addrs {
            OuterAddrs::V4 { .. } => IPV4_HEADER,
            OuterAddrs::V6 { .. } => IPV6_HEADER,
        };
        ip + if self.gue.is_some() { GUE_HEADERS } else { 0 }
    }
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
    let ethertype_at = l3.checked_sub(2).ok_or(EncapError::NotIp)?;
    let inner_len = len.checked_sub(l3).ok_or(EncapError::NotIp)?;
    let (inner_v4, tos) = match buf.get(l3..len).and_then(|ip| Some((ip.first()? >> 4, ip))) {
        Some((4, ip)) if ip.len() >= IPV4_HEADER => (true, ip[1]),
        Some((6, ip)) if ip.len() >= IPV6_HEADER => (false, (ip[0] << 4) | (ip[1] >> 4)),
        _ => return Err(EncapError::NotIp),
    };
    let extra = t.overhead();
    if inner_len + extra > usize::from(mtu) {
        return Err(EncapError::TooBig);
    }
    let new_len = len + extra;
    if buf.len() < new_len {
        return Err(EncapError::NoRoom);
    }
    buf.copy_within(l3..len, l3 + extra);
    let inner_proto = if inner_v4 { PROTO_IPIP } else { PROTO_IPV6 };
    let (next, udp_len) = match t.gue {
        Some(_) => (PROTO_UDP, (inner_len + GUE_HEADERS) as u16),
        None => (inner_proto, 0),
    };
    let (ethertype, ip_len) = match t.addrs {
        OuterAddrs::V4 { src, dst } => {
            let h = &mut buf[l3..l3 + IPV4_HEADER];
            write_ipv4(h, tos, (inner_len + extra) as u16, next, src, dst);
            (ETHERTYPE_IPV4, IPV4_HEADER)
        }
        OuterAddrs::V6 { src, dst } => {
            let h = &mut buf[l3..l3 + IPV6_HEADER];
            let payload = (inner_len + extra - IPV6_HEADER) as u16;
            write_ipv6(h, tos, t.entropy, payload, next, src, dst);
            (ETHERTYPE_IPV6, IPV6_HEADER)
        }
    };
    buf[ethertype_at..l3].copy_from_slice(&ethertype.to_be_bytes());
    if let Some(port) = t.gue {
        let at = l3 + ip_len;
        write_gue(
            &mut buf[at..at + GUE_HEADERS],
            t.entropy,
            port,
            udp_len,
            inner_proto,
        );
    }
    Ok(new_len)
}

/// An outer IPv4 header: DF set (border never sends a fragment; a packet
/// too big is refused before), TTL [`OUTER_TTL`], the inner DSCP/ECN.
fn write_ipv4(h: &mut [u8], tos: u8, total: u16, proto: u8, src: Ipv4Addr, dst: Ipv4Addr) {
    h[0] = 0x45;
    h[1] = tos;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&[0, 0]);
    h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    h[8] = OUTER_TTL;
    h[9] = proto;
    h[10..12].copy_from_slice(&[0, 0]);
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let sum = checksum::checksum(h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// An outer IPv6 header: the inner traffic class, the flow's entropy as
/// flow label, hop limit [`OUTER_TTL`].
fn write_ipv6(
    h: &mut [u8],
    tc: u8,
    entropy: u32,
    payload: u16,
    next: u8,
    src: Ipv6Addr,
    dst: Ipv6Addr,
) {
    let word = (6u32 << 28) | (u32::from(tc) << 20) | (entropy & 0x000f_ffff);
    h[0..4].copy_from_slice(&word.to_be_bytes());
    h[4..6].copy_from_slice(&payload.to_be_bytes());
    h[6] = next;
    h[7] = OUTER_TTL;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
}

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
