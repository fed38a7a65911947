//! What a packet is to the load balancer: to a VIP (a client's), to a
//! full-NAT local address in its pool (a backend's), an ICMP error about a
//! flow, or to no address of ours (a DNAT backend's reply to the client).
//! [`Lb::handle`] is where the general path enters.

use std::net::IpAddr;

use conf::counters::Counter;
use hashbrown::HashMap;

use super::count_drop;
use super::Adopted;
use super::Lb;
use super::{Out, Rx};
use crate::conntrack::FlowKey;
use crate::counters::Counters;
use crate::port::PortDesc;
use crate::verdict::Verdict;
use crate::wire::{ip_proto, Fragment, L3Kind, Parsed};

/// An address as the fast path holds it (a [`FlowKey`] address: IPv4
/// mapped) with the family and, for VIP keys, port and protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct RawKey {
    addr: u128,
    /// `v6 | proto << 8 | port << 16` (0 for address-only keys but the family).
    rest: u32,
}

impl RawKey {
    #[inline]
    pub(super) fn new(addr: &[u8; 16], v6: bool, port: u16, proto: u8) -> RawKey {
        RawKey {
            addr: u128::from_ne_bytes(*addr),
            rest: u32::from(v6) | u32::from(proto) << 8 | u32::from(port) << 16,
        }
    }

    pub(super) fn of(addr: IpAddr, port: u16, proto: u8) -> RawKey {
        RawKey::new(&to16(addr), addr.is_ipv6(), port, proto)
    }
}

/// A lookup table from [`RawKey`] to a small value, built once per table
/// generation: linear probing over a power-of-two array at most half full,
/// with a multiplicative hash. Its keys come from the configuration (VIPs,
/// local addresses), not from packets, so no keyed hash is needed to keep
/// probe sequences short; the multiplier is the one of [`MULTIPLIERS`]
/// that leaves the configured keys the fewest extra probes.
#[derive(Clone, Debug)]
pub(super) struct RawMap<V> {
    slots: Box<[Option<(RawKey, V)>]>,
    mask: usize,
    mult: u64,
}

/// The hash multipliers a [`RawMap`] chooses from (odd, well mixed).
const MULTIPLIERS: [u64; 8] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
    0xA076_1D64_78BD_642F,
    0xE703_7ED1_A0B4_28DB,
    0x8EBC_6AF0_9C88_C6E3,
    0x5897_65F6_9DDA_A38B,
];

impl<V: Copy> RawMap<V> {
    pub(super) fn from_map(m: HashMap<RawKey, V>) -> RawMap<V> {
        let n = (2 * m.len()).max(4).next_power_of_two();
        let entries: Vec<(RawKey, V)> = m.into_iter().collect();
        let mut best: Option<(usize, RawMap<V>)> = None;
        for mult in MULTIPLIERS {
            let (map, extra) = Self::place(&entries, n, mult);
            if best.as_ref().is_none_or(|(e, _)| extra < *e) {
                best = Some((extra, map));
            }
            if extra == 0 {
                break;
            }
        }
        match best {
            Some((_, map)) => map,
            None => Self::place(&entries, n, MULTIPLIERS[0]).0,
        }
    }

    /// The table of `entries` in `n` slots with `mult`, and the extra
    /// probes its keys take. Inserted in home-slot order (then key order),
    /// not in the source map's random iteration order: the layout is the
    /// same in every process.
    fn place(entries: &[(RawKey, V)], n: usize, mult: u64) -> (RawMap<V>, usize) {
        let mask = n - 1;
        let mut sorted = entries.to_vec();
        sorted.sort_unstable_by_key(|(k, _)| (Self::home(k, mult, mask), k.addr, k.rest));
        let mut slots = vec![None; n].into_boxed_slice();
        let mut extra = 0;
        for (k, v) in sorted {
            let mut i = Self::home(&k, mult, mask);
            while slots[i].is_some() {
                i = (i + 1) & mask;
                extra += 1;
            }
            slots[i] = Some((k, v));
        }
        (RawMap { slots, mask, mult }, extra)
    }

    #[inline(always)]
    fn home(k: &RawKey, mult: u64, mask: usize) -> usize {
        let x = (k.addr as u64) ^ ((k.addr >> 64) as u64).rotate_left(29) ^ u64::from(k.rest);
        (x.wrapping_mul(mult) >> 40) as usize & mask
    }

    #[inline(always)]
    pub(super) fn get(&self, k: &RawKey) -> Option<V> {
        let mut i = Self::home(k, self.mult, self.mask);
        // Ends: at most half the slots are used.
        loop {
            match self.slots.get(i)? {
                None => return None,
                Some((key, v)) if key == k => return Some(*v),
                Some(_) => i = (i + 1) & self.mask,
            }
        }
    }
}

/// What a destination address is: a VIP address (of some port and
/// protocol) and/or a full-NAT local address with its pool's port range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct AddrClass {
    pub(super) vip: bool,
    pub(super) pool: Option<(u16, u16)>,
}

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

pub(super) fn key_of(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, proto: u8) -> FlowKey {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => FlowKey::v4(s.octets(), d.octets(), sport, dport, proto),
        (s, d) => FlowKey::v6(to16(s), to16(d), sport, dport, proto),
    }
}

pub(super) fn to16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Enough keys that some share a home slot.
    fn keys() -> Vec<(RawKey, u32)> {
        (0..200u32)
            .map(|i| {
                let addr = IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
                (RawKey::of(addr, 80 + (i % 3) as u16, 6), i)
            })
            .collect()
    }

    #[test]
    fn the_layout_does_not_depend_on_the_maps_iteration_order() {
        // Each HashMap has its own random hasher, so each iterates in its
        // own order.
        let layouts: Vec<Vec<Option<(RawKey, u32)>>> = (0..8)
            .map(|_| {
                let m: HashMap<RawKey, u32> = keys().into_iter().collect();
                RawMap::from_map(m).slots.to_vec()
            })
            .collect();
        assert!(layouts.windows(2).all(|w| w[0] == w[1]));
        let map = RawMap::from_map(keys().into_iter().collect());
        // The chosen multiplier leaves no more extra probes than the first.
        let entries = keys();
        let (_, first) = RawMap::place(&entries, map.slots.len(), MULTIPLIERS[0]);
        let (_, chosen) = RawMap::place(&entries, map.slots.len(), map.mult);
        assert!(chosen <= first, "{chosen} > {first}");
        for (k, v) in keys() {
            assert_eq!(map.get(&k), Some(v));
        }
        assert_eq!(
            map.get(&RawKey::of(IpAddr::from([192, 0, 2, 1]), 80, 6)),
            None
        );
    }
}
