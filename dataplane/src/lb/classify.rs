//! What a packet is to the load balancer: to a VIP (a client's), to a
//! full-NAT local address in its pool (a backend's), an ICMP error about a
//! flow, or to no address of ours (a DNAT backend's reply to the client).
//! [`Lb::handle`] is where the general path enters.

use conf::counters::Counter;

use super::count_drop;
use super::key::RawKey;
use super::tables::{AddrClass, Adopted};
use super::Lb;
use super::{Out, Rx};
use crate::conntrack::FlowKey;
use crate::counters::Counters;
use crate::port::PortDesc;
use crate::verdict::Verdict;
use crate::wire::{ip_proto, Fragment, L3Kind, Parsed, TcpFlags};

impl<'t> Adopted<'t> {
    /// [`Adopted::vip_index`] on a [`FlowKey`] address.
    #[inline(always)]
    pub(super) fn vip_at(&self, addr: &[u8; 16], v6: bool, port: u16, proto: u8) -> Option<u32> {
        self.by_key.get(&RawKey::new(addr, v6, port, proto))
    }

    /// What the [`FlowKey`] address `addr` is to the appliance.
    #[inline(always)]
    pub(super) fn class_of(&self, addr: &[u8; 16], v6: bool) -> AddrClass {
        self.by_addr
            .get(&RawKey::new(addr, v6, 0, 0))
            .unwrap_or_default()
    }
}

/// Source and destination address of an IP packet as a [`FlowKey`] holds
/// them (IPv4 mapped), read at the offsets `parse_frame` found.
#[inline(always)]
pub(super) fn addrs_of(frame: &[u8], p: &Parsed) -> Option<([u8; 16], [u8; 16], bool)> {
    let l3 = p.l3_offset;
    match p.l3 {
        L3Kind::Ipv4 => {
            let a = frame.get(l3 + 12..l3 + 20)?;
            let mut src = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0];
            let mut dst = src;
            src[12..].copy_from_slice(&a[..4]);
            dst[12..].copy_from_slice(&a[4..]);
            Some((src, dst, false))
        }
        L3Kind::Ipv6 => {
            let a = frame.get(l3 + 8..l3 + 40)?;
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&a[..16]);
            dst.copy_from_slice(&a[16..]);
            Some((src, dst, true))
        }
        _ => None,
    }
}

/// The TCP flags of a packet (0 for UDP).
#[inline(always)]
pub(super) fn flags_of(p: &Parsed) -> u8 {
    p.tcp_flags.map_or(0, |f| f.0)
}

/// Whether TCP flags `flags` are a SYN without ACK: a connection's first segment.
#[inline(always)]
pub(super) fn syn_only(flags: u8) -> bool {
    flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0
}

impl Lb {
    /// Handles load-balancer traffic. `None`: not ours, let the slow path decide.
    ///
    /// The frame is `buf[..len]`; the rest of `buf` is room it may grow into
    /// (a PROXY header), so a `Send` may carry a larger length. `p` is what
    /// `parse_frame` returned for the frame (the rewrites trust its offsets).
    #[inline(always)]
    pub(crate) fn handle(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let tables = self.tables.as_ref()?;
        let proto = p.l4_proto;
        if proto == ip_proto::ICMP || proto == ip_proto::ICMPV6 {
            let frame = buf.get_mut(..len)?;
            return self.icmp_error(frame, p, ports, counters);
        }
        if proto != ip_proto::TCP && proto != ip_proto::UDP {
            return None;
        }
        let (src, dst, v6) = addrs_of(buf.get(..len)?, p)?;
        let key = |ports: crate::wire::Ports| FlowKey {
            src,
            dst,
            sport: ports.src,
            dport: ports.dst,
            proto,
            v6,
        };
        if p.fragment == Fragment::None {
            if let Some(pt) = p.ports {
                if let Some(vi) = tables.vip_at(&dst, v6, pt.dst, proto) {
                    let k = key(pt);
                    let rx = Rx {
                        buf,
                        len,
                        p,
                        in_port,
                    };
                    return Some(self.client_packet(rx, vi, &k, Out { ports, counters }));
                }
            }
        }
        let class = tables.class_of(&dst, v6);
        if p.fragment != Fragment::None {
            if class.vip || class.pool.is_some() {
                return Some(count_drop(counters, Counter::DropFragment));
            }
            return None;
        }
        let pt = p.ports?;
        if class.vip {
            return Some(count_drop(counters, Counter::DropVipUnhandled));
        }
        let frame = buf.get_mut(..len)?;
        if let Some((lo, hi)) = class.pool {
            if pt.dst < lo || pt.dst > hi {
                return None; // the kernel twin's own connection
            }
            let rx = Rx {
                len: frame.len(),
                buf: frame,
                p,
                in_port,
            };
            return Some(self.backend_packet(rx, &key(pt), Out { ports, counters }, true));
        }
        // DNAT replies are addressed to the client, not to us.
        let k = key(pt);
        if ports
            .get(in_port)
            .is_none_or(|port| port.owns_any(k.dst_ip()))
        {
            return None;
        }
        let rx = Rx {
            len: frame.len(),
            buf: frame,
            p,
            in_port,
        };
        Some(self.backend_packet(rx, &k, Out { ports, counters }, false))
    }
}
