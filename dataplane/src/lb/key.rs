//! The keys the adopted tables and the connection table are looked up by,
//! as the fast path holds addresses (IPv4 mapped into 16 bytes):
//! [`RawKey`] and its [`RawMap`] (VIPs, full-NAT local addresses),
//! [`ResetKey`] (backends whose flows are reset), and the conversions from
//! `IpAddr` ([`to16`], [`key_of`]).

use std::net::IpAddr;

use hashbrown::HashMap;

use crate::conntrack::FlowKey;

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

/// The [`FlowKey`] of a packet from `src:sport` to `dst:dport`.
pub(super) fn key_of(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, proto: u8) -> FlowKey {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => FlowKey::v4(s.octets(), d.octets(), sport, dport, proto),
        (s, d) => FlowKey::v6(to16(s), to16(d), sport, dport, proto),
    }
}

/// `a` as a [`FlowKey`] holds an address (IPv4 mapped).
pub(super) fn to16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

/// Why a backend's established flows are reset: it decides the counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetWhy {
    /// Health took it down on a VIP with `on_down = "reset"` that does not
    /// fail open (`reset_backend_down`, `forgot_backend_down`).
    Down,
    /// The operator killed it (`flows_killed`), whatever the VIP's
    /// `on_down` and whether it fails open.
    Killed,
}

/// A backend of a VIP whose established flows a worker resets, as a
/// connection-table entry names them: the VIP (the original key's
/// destination) and the backend (the reply key's source).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResetKey {
    vip: [u8; 16],
    backend: [u8; 16],
    vip_port: u16,
    backend_port: u16,
    proto: u8,
}

impl ResetKey {
    /// Backend `backend:backend_port` of the VIP `vip:vip_port` (protocol
    /// number `proto`).
    pub fn new(vip: IpAddr, vip_port: u16, proto: u8, backend: IpAddr, backend_port: u16) -> Self {
        ResetKey {
            vip: to16(vip),
            backend: to16(backend),
            vip_port,
            backend_port,
            proto,
        }
    }

    /// The backend of the flow with these keys.
    #[inline]
    pub(super) fn of_flow(orig: &FlowKey, reply: &FlowKey) -> Self {
        ResetKey {
            vip: orig.dst,
            backend: reply.src,
            vip_port: orig.dport,
            backend_port: reply.sport,
            proto: orig.proto,
        }
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
