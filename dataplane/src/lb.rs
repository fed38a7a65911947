//! Load balancing on one worker: VIP lookup, the connection table, the
//! Maglev pick, full-NAT/DNAT rewrites, replies, ICMP errors about flows and
//! next-hop resolution.
//!
//! Sans-IO like the rest of the pipeline: [`Lb::handle`] takes a parsed
//! frame and returns a verdict, or `None` when the frame is not load-balancer
//! traffic (then the slow path or the kernel twin gets it).

use std::net::IpAddr;

use arrayvec::ArrayVec;
use conf::counters::Counter;
use conf::flowhash::FlowHasher;
use conf::state::{FlowStat, FlowStats};
use conf::tables::{BackendRecord, BlockId};
use conf::Mode;
use hashbrown::HashMap;

use crate::conntrack::{
    Conntrack, Dir, EntryId, FlowKey, Hint, InsertError, KeyHash, State, Timeouts,
};
use crate::counters::Counters;
use crate::local_ports::{self, LocalPorts, SetId};
use crate::nat;
use crate::neigh::{Binding, NeighborSync, Neighbors, Resolution, Slot};
use crate::neigh_queue;
use crate::port::PortInfo;
use crate::ppv2::{self, PpConfig, PpFlow, PpWorker};
use crate::tstamp;
use crate::verdict::Verdict;
use crate::wire::{ip_proto, Fragment, L3Kind, Parsed};

/// Local ports tried for one new full-NAT flow before giving up.
const LOCAL_PORT_TRIES: u32 = 64;
/// Full-NAT local tuples counted for the pool gauges per poll iteration.
const LOCAL_TUPLE_SCAN_BUDGET: usize = 512;
/// Connection-table entries examined for expiry per poll iteration.
pub const EXPIRE_BUDGET: usize = 64;
/// Entries examined per wake-up of a worker sleeping on Rx interrupts,
/// which polls ~100 times a second instead of millions: with this, a
/// table of a million entries is swept in ~10 s while idle (64 per
/// wake-up would take ~3 minutes), for a few microseconds per wake-up.
pub const IDLE_EXPIRE_BUDGET: usize = 1024;

/// A backend as a worker needs it to forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendRt {
    /// Stable backend id; also its statistics key.
    pub id: u32,
    /// This worker's statistics slot for the backend (set on adoption).
    pub stat_slot: u32,
    pub addr: IpAddr,
    pub port: u16,
    /// Data port that reaches the backend, and the next hop on it.
    pub out_port: usize,
    pub next_hop: IpAddr,
    /// Full-NAT source address (from the out port's pool), if any.
    pub local: Option<IpAddr>,
    /// `addr` as a [`FlowKey`] holds it (IPv4-mapped for IPv4).
    pub addr16: [u8; 16],
    /// The local addresses full-NAT connections to it take tuples from.
    pub local_set: Option<SetId>,
    /// The next hop's slot in this worker's neighbour table (set on adoption).
    pub hop: Slot,
}

/// A VIP as a worker needs it.
#[derive(Clone, Debug)]
pub struct VipRt<'t> {
    pub id: u32,
    /// Statistics key ([`conf::state::vip_stat_key`] of the name).
    pub stat_key: u32,
    /// This worker's statistics slot for the VIP (set on adoption).
    pub stat_slot: u32,
    pub addr: IpAddr,
    pub port: u16,
    pub proto: u8,
    pub mode: Mode,
    /// Maglev ring: indices into `backends`.
    pub ring: &'t [u32],
    pub backends: Vec<BackendRt>,
    /// PROXY protocol v2 settings (off by default).
    pub pp: PpConfig,
    /// Full-NAT TCP flows get their timestamps translated ([`tstamp`]).
    pub translate_timestamps: bool,
    /// The tables-region block the VIP was read from (`None`: built in
    /// process). [`Lb::adopt`] keeps the runtime of a VIP whose block the
    /// previous generation had too, instead of deriving it again.
    pub src: Option<VipSrc>,
    /// Backend records of a VIP read from a block, not yet turned into
    /// `backends`: [`Lb::adopt`] carries them over from the previous
    /// generation or builds them (then empty).
    records: &'t [BackendRecord],
}

/// Where a VIP of an adopted generation was read from: a block of the
/// tables region `region` ([`conf::tables::TablesReader::region_id`]). Two
/// VIPs with the same source in consecutive adoptions are the same bytes (a
/// published block is never written, and is not reused before every live
/// worker has passed the generation that retired it), so the worker keeps
/// what it derived from the first: backends with their routes, statistics
/// slots and neighbour slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VipSrc {
    pub region: u64,
    pub block: BlockId,
}

/// A full-NAT source pool entry: address, the data port it lives on, port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPool {
    pub addr: IpAddr,
    pub port: usize,
    pub range: (u16, u16),
}

/// Where to send packets for an address: data port and next hop.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    /// (data port, subnets of the port, gateway)
    pub ports: Vec<(usize, Vec<conf::IpNet>, Option<IpAddr>)>,
    pub pools: Vec<LocalPool>,
}

impl Routes {
    pub fn from_config(cfg: &conf::Config) -> Routes {
        let mut r = Routes::default();
        for (i, p) in cfg.ports.iter().enumerate() {
            r.ports.push((i, p.addresses.clone(), p.gateway));
            if let Some(range) = p.local_port_range {
                for a in &p.local_addresses {
                    r.pools.push(LocalPool {
                        addr: *a,
                        port: i,
                        range,
                    });
                }
            }
        }
        r
    }

    /// The data port and next hop for `dst`: on-link first, else a gateway of the same family.
    pub fn route(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
        if let Some((p, _, _)) = self
            .ports
            .iter()
            .find(|(_, nets, _)| nets.iter().any(|n| n.contains(dst)))
        {
            return Some((*p, dst));
        }
        self.ports
            .iter()
            .find_map(|(p, _, gw)| gw.filter(|g| g.is_ipv4() == dst.is_ipv4()).map(|g| (*p, g)))
    }

    /// The full-NAT pool used towards a backend reached through `port`.
    pub fn pool_for(&self, port: usize, v4: bool) -> Option<&LocalPool> {
        self.pools
            .iter()
            .find(|l| l.port == port && l.addr.is_ipv4() == v4)
            .or_else(|| self.pools.iter().find(|l| l.addr.is_ipv4() == v4))
    }
}

/// One VIP and its backends as handed to [`Adopted::new`].
#[derive(Clone, Debug)]
pub struct VipInput<'t> {
    pub id: u32,
    /// Statistics key ([`conf::state::vip_stat_key`] of the name).
    pub stat_key: u32,
    pub addr: IpAddr,
    pub port: u16,
    pub proto: u8,
    pub mode: Mode,
    pub ring: &'t [u32],
    /// (backend id, address, port); empty when `block` is set.
    pub backends: Vec<(u32, IpAddr, u16)>,
    /// PROXY protocol v2 settings; `PpConfig::default()` is off.
    pub pp: PpConfig,
    pub translate_timestamps: bool,
    /// A VIP read in place from a validated tables-region block: its source
    /// and its backend records. Its backends are built (or carried over from
    /// the previous generation) by [`Lb::adopt`], not by [`Adopted::new`].
    pub block: Option<(VipSrc, &'t [BackendRecord])>,
}

/// A backend's runtime (statistics and neighbour slots unset), reached
/// through `routes`.
fn backend_rt(routes: &Routes, mode: Mode, id: u32, addr: IpAddr, port: u16) -> BackendRt {
    let (out_port, next_hop) = routes.route(addr).unwrap_or((usize::MAX, addr));
    let local = match mode {
        Mode::FullNat => routes.pool_for(out_port, addr.is_ipv4()).map(|l| l.addr),
        Mode::Dnat => None,
    };
    let local_set = local.and_then(|_| local_ports::set_for(routes, out_port, addr.is_ipv4()));
    BackendRt {
        id,
        stat_slot: u32::MAX,
        addr,
        port,
        out_port,
        next_hop,
        local,
        addr16: to16(addr),
        local_set,
        hop: Slot::NONE,
    }
}

/// Records `backends` of the DNAT VIP at `index` in the reverse map: a
/// backend of two VIPs (same protocol) is ambiguous (`None`).
fn note_dnat(
    map: &mut HashMap<VipKey, Option<u32>, ahash::RandomState>,
    backends: &[BackendRt],
    proto: u8,
    index: u32,
) {
    for b in backends {
        map.entry((b.addr, b.port, proto))
            .and_modify(|e| {
                if *e != Some(index) {
                    *e = None
                }
            })
            .or_insert(Some(index));
    }
}

/// `ring` if every entry indexes one of `n` backends, else empty (the VIP
/// then takes no new flows) and `refused` counts it.
fn checked_ring<'t>(ring: &'t [u32], n: usize, refused: &mut usize) -> &'t [u32] {
    // One branch-free pass (vectorises).
    let max = ring.iter().fold(0u32, |m, &e| m.max(e));
    if ring.is_empty() || (max as usize) < n {
        ring
    } else {
        *refused += 1;
        &[]
    }
}

type VipKey = (IpAddr, u16, u8);

/// An address as the fast path holds it (a [`FlowKey`] address: IPv4
/// mapped) with the family and, for VIP keys, port and protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct RawKey {
    addr: u128,
    /// `v6 | proto << 8 | port << 16` (0 for address-only keys but the family).
    rest: u32,
}

impl RawKey {
    #[inline]
    fn new(addr: &[u8; 16], v6: bool, port: u16, proto: u8) -> RawKey {
        RawKey {
            addr: u128::from_ne_bytes(*addr),
            rest: u32::from(v6) | u32::from(proto) << 8 | u32::from(port) << 16,
        }
    }

    fn of(addr: IpAddr, port: u16, proto: u8) -> RawKey {
        RawKey::new(&to16(addr), addr.is_ipv6(), port, proto)
    }
}

/// A lookup table from [`RawKey`] to a small value, built once per table
/// generation: linear probing over a power-of-two array at most half full,
/// with a multiplicative hash. Its keys come from the configuration (VIPs,
/// local addresses), not from packets, so no keyed hash is needed to keep
/// probe sequences short.
#[derive(Clone, Debug)]
struct RawMap<V> {
    slots: Box<[Option<(RawKey, V)>]>,
    mask: usize,
}

impl<V: Copy> RawMap<V> {
    fn from_map(m: HashMap<RawKey, V>) -> RawMap<V> {
        let n = (2 * m.len()).max(4).next_power_of_two();
        let mut slots = vec![None; n].into_boxed_slice();
        for (k, v) in m {
            let mut i = Self::home(&k, n - 1);
            while slots[i].is_some() {
                i = (i + 1) & (n - 1);
            }
            slots[i] = Some((k, v));
        }
        RawMap { slots, mask: n - 1 }
    }

    #[inline(always)]
    fn home(k: &RawKey, mask: usize) -> usize {
        let x = (k.addr as u64) ^ ((k.addr >> 64) as u64).rotate_left(29) ^ u64::from(k.rest);
        (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & mask
    }

    #[inline(always)]
    fn get(&self, k: &RawKey) -> Option<V> {
        let mut i = Self::home(k, self.mask);
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
struct AddrClass {
    vip: bool,
    pool: Option<(u16, u16)>,
}

/// A table generation adopted by a worker, with the lookup structures built
/// from it. Built off the fast path (allocation is fine here).
#[derive(Clone)]
pub struct Adopted<'t> {
    pub generation: u64,
    pub vips: Vec<VipRt<'t>>,
    /// (address, port, protocol) -> VIP index, on raw addresses.
    by_key: RawMap<u32>,
    /// What a destination address is to this appliance, on raw addresses.
    by_addr: RawMap<AddrClass>,
    /// DNAT backend (addr, port, proto) -> VIP index; None when ambiguous.
    dnat_reverse: HashMap<VipKey, Option<u32>, ahash::RandomState>,
    /// `dnat_reverse` lacks the VIPs read from blocks: [`Lb::adopt`]
    /// completes it (patching the previous generation's where it can).
    dnat_stale: bool,
    /// [`Lb::adopt`] patched the previous generation's DNAT reverse map
    /// instead of building one.
    pub dnat_patched: bool,
    hasher: FlowHasher,
    pub routes: Routes,
    /// VIPs whose ring points outside their backend list: refused (empty
    /// ring) when their backends are built.
    pub refused: usize,
    /// VIPs [`Lb::adopt`] carried over from the previous generation, and
    /// VIPs whose backends it built (from block records or in
    /// [`Adopted::new`]).
    pub carried: usize,
    pub built: usize,
    /// Backends whose established flows are reset (`on_down = "reset"`,
    /// health-down, VIP not failing open): see [`Adopted::with_resets`].
    resets: hashbrown::HashSet<ResetKey, ahash::RandomState>,
    /// `resets` is not empty: the express lane leaves every packet to the
    /// general path, which checks each flow's backend.
    pub reset_pending: bool,
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
    fn of_flow(orig: &FlowKey, reply: &FlowKey) -> Self {
        ResetKey {
            vip: orig.dst,
            backend: reply.src,
            vip_port: orig.dport,
            backend_port: reply.sport,
            proto: orig.proto,
        }
    }
}

impl<'t> Adopted<'t> {
    pub fn new(
        generation: u64,
        flow_hash_key: [u8; 16],
        inputs: Vec<VipInput<'t>>,
        routes: Routes,
    ) -> Self {
        let mut vips = Vec::with_capacity(inputs.len());
        let mut by_key: HashMap<RawKey, u32> = HashMap::new();
        let mut by_addr: HashMap<RawKey, AddrClass> = HashMap::new();
        let mut dnat_reverse: HashMap<VipKey, Option<u32>, ahash::RandomState> =
            HashMap::with_hasher(ahash::RandomState::new());
        let mut refused = 0;
        let mut built = 0;
        let mut dnat_stale = false;
        for v in inputs {
            let index = vips.len() as u32;
            let (backends, ring, records) = match v.block {
                // Checked and built on adoption, only if not carried over.
                Some((_, records)) => (Vec::new(), v.ring, records),
                None => {
                    let backends: Vec<BackendRt> = v
                        .backends
                        .iter()
                        .map(|&(id, addr, port)| backend_rt(&routes, v.mode, id, addr, port))
                        .collect();
                    built += 1;
                    let ring = checked_ring(v.ring, backends.len(), &mut refused);
                    (backends, ring, &[][..])
                }
            };
            by_key.insert(RawKey::of(v.addr, v.port, v.proto), index);
            by_addr.entry(RawKey::of(v.addr, 0, 0)).or_default().vip = true;
            if v.mode == Mode::Dnat {
                // VIPs read from blocks are added by `Lb::adopt`.
                dnat_stale |= v.block.is_some();
                note_dnat(&mut dnat_reverse, &backends, v.proto, index);
            }
            vips.push(VipRt {
                id: v.id,
                stat_key: v.stat_key,
                stat_slot: u32::MAX,
                addr: v.addr,
                port: v.port,
                proto: v.proto,
                mode: v.mode,
                ring,
                backends,
                pp: v.pp,
                translate_timestamps: v.translate_timestamps,
                src: v.block.map(|(src, _)| src),
                records,
            });
        }
        for pool in &routes.pools {
            let class = by_addr.entry(RawKey::of(pool.addr, 0, 0)).or_default();
            // The first pool of an address is the one `Routes::pool_of` finds.
            class.pool = class.pool.or(Some(pool.range));
        }
        Adopted {
            generation,
            vips,
            by_key: RawMap::from_map(by_key),
            by_addr: RawMap::from_map(by_addr),
            dnat_reverse,
            dnat_stale,
            dnat_patched: false,
            hasher: FlowHasher::new(flow_hash_key),
            routes,
            refused,
            carried: 0,
            built,
            resets: Default::default(),
            reset_pending: false,
        }
    }

    /// Established flows to these backends are reset: the next packet of
    /// such a TCP connection, from either end, is answered with a RST and
    /// the entry removed; a UDP flow is forgotten, so its next datagram
    /// picks a backend again (see `tables_source::resets_from_view`).
    pub fn with_resets(mut self, keys: impl IntoIterator<Item = ResetKey>) -> Self {
        self.resets.extend(keys);
        self.reset_pending = !self.resets.is_empty();
        self
    }

    /// Whether flows to this backend are reset.
    pub fn resets(&self, k: &ResetKey) -> bool {
        self.reset_pending && self.resets.contains(k)
    }

    /// Gives VIP `i` its backends if it has only block records: those of the
    /// previous generation's VIP with the same source (taken out of `old`,
    /// with their statistics and neighbour slots), else built from the
    /// records (ring checked). Returns the old VIP's position if they were
    /// carried over.
    fn resolve_vip(
        &mut self,
        i: usize,
        old: Option<&mut Adopted<'t>>,
        by_src: &mut Option<HashMap<VipSrc, usize>>,
    ) -> Option<usize> {
        let v = &mut self.vips[i];
        let src = v.src?;
        if v.records.is_empty() && !v.backends.is_empty() {
            // Resolved already (an adopted generation adopted again).
            return None;
        }
        if let Some(o) = old {
            let at = match o.vips.get(i) {
                Some(ov) if ov.src == Some(src) => Some(i),
                _ => by_src
                    .get_or_insert_with(|| {
                        o.vips
                            .iter()
                            .enumerate()
                            .filter_map(|(j, ov)| Some((ov.src?, j)))
                            .collect()
                    })
                    .get(&src)
                    .copied(),
            };
            if let Some((j, ov)) = at.and_then(|j| Some((j, o.vips.get_mut(j)?))) {
                if ov.src == Some(src) && ov.records.is_empty() {
                    // Taken: it cannot match a second VIP.
                    ov.src = None;
                    v.backends = std::mem::take(&mut ov.backends);
                    v.stat_slot = ov.stat_slot;
                    v.records = &[];
                    if ov.ring.is_empty() && !v.ring.is_empty() {
                        // Refused before: the same bytes still are.
                        v.ring = &[];
                        self.refused += 1;
                    }
                    self.carried += 1;
                    return Some(j);
                }
            }
        }
        let (routes, mode) = (&self.routes, v.mode);
        v.backends = v
            .records
            .iter()
            .map(|r| backend_rt(routes, mode, r.id, r.ip(), r.port))
            .collect();
        v.records = &[];
        v.ring = checked_ring(v.ring, v.backends.len(), &mut self.refused);
        self.built += 1;
        None
    }

    /// Completes `dnat_reverse` once every VIP has its backends. `old`: the
    /// previous generation, if every VIP carried over from it kept its
    /// position; then its map is taken and patched for the VIPs at the
    /// positions `built` (their old backends out, their new ones in), so a
    /// change to one VIP costs that VIP, not every DNAT backend. A backend
    /// claimed by two VIPs (ambiguous) in the way makes it build the map
    /// from scratch.
    fn finish_dnat(&mut self, old: Option<&mut Adopted<'t>>, built: &[usize]) {
        if !std::mem::take(&mut self.dnat_stale) {
            return;
        }
        if let Some(o) = old.filter(|o| !o.dnat_stale && o.vips.len() == self.vips.len()) {
            let mut map = std::mem::take(&mut o.dnat_reverse);
            if self.patch_dnat(&mut map, o, built) {
                self.dnat_reverse = map;
                self.dnat_patched = true;
                return;
            }
        }
        let mut map = HashMap::with_hasher(ahash::RandomState::new());
        for (i, v) in self.vips.iter().enumerate() {
            if v.mode == Mode::Dnat {
                note_dnat(&mut map, &v.backends, v.proto, i as u32);
            }
        }
        self.dnat_reverse = map;
    }

    /// [`Adopted::finish_dnat`]'s patch; false if the map cannot be patched
    /// (then it is left half done).
    fn patch_dnat(
        &self,
        map: &mut HashMap<VipKey, Option<u32>, ahash::RandomState>,
        old: &Adopted<'t>,
        built: &[usize],
    ) -> bool {
        for &i in built {
            let index = i as u32;
            if let Some(ov) = old.vips.get(i).filter(|ov| ov.mode == Mode::Dnat) {
                for b in &ov.backends {
                    let k = (b.addr, b.port, ov.proto);
                    if map.get(&k) != Some(&Some(index)) {
                        return false;
                    }
                    map.remove(&k);
                }
            }
        }
        for &i in built {
            let index = i as u32;
            if let Some(v) = self.vips.get(i).filter(|v| v.mode == Mode::Dnat) {
                for b in &v.backends {
                    match map.entry((b.addr, b.port, v.proto)) {
                        hashbrown::hash_map::Entry::Vacant(e) => {
                            e.insert(Some(index));
                        }
                        hashbrown::hash_map::Entry::Occupied(e) if *e.get() == Some(index) => {}
                        hashbrown::hash_map::Entry::Occupied(_) => return false,
                    }
                }
            }
        }
        true
    }

    pub fn vip_index(&self, addr: IpAddr, port: u16, proto: u8) -> Option<u32> {
        self.by_key.get(&RawKey::of(addr, port, proto))
    }

    /// The DNAT VIP whose backend `addr:port` is (`Some(None)`: of several).
    pub fn dnat_vip(&self, addr: IpAddr, port: u16, proto: u8) -> Option<Option<u32>> {
        self.dnat_reverse.get(&(addr, port, proto)).copied()
    }

    /// The whole DNAT reverse map, sorted (tests).
    #[cfg(test)]
    pub(crate) fn dnat_entries(&self) -> Vec<(VipKey, Option<u32>)> {
        let mut v: Vec<_> = self.dnat_reverse.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort_unstable();
        v
    }

    /// [`Adopted::vip_index`] on a [`FlowKey`] address.
    #[inline(always)]
    fn vip_at(&self, addr: &[u8; 16], v6: bool, port: u16, proto: u8) -> Option<u32> {
        self.by_key.get(&RawKey::new(addr, v6, port, proto))
    }

    /// What the [`FlowKey`] address `addr` is to the appliance.
    #[inline(always)]
    fn class_of(&self, addr: &[u8; 16], v6: bool) -> AddrClass {
        self.by_addr
            .get(&RawKey::new(addr, v6, 0, 0))
            .unwrap_or_default()
    }

    /// The backend Maglev picks for the flow of a client's packet.
    #[inline]
    fn pick_key(&self, vip: &VipRt<'_>, k: &FlowKey) -> Option<u32> {
        if vip.ring.is_empty() {
            return None;
        }
        let h = if k.v6 {
            self.hasher.hash_v6(k.src, k.dst, k.sport, k.dport, k.proto)
        } else {
            let v4 = |a: &[u8; 16]| [a[12], a[13], a[14], a[15]];
            self.hasher
                .hash_v4(v4(&k.src), v4(&k.dst), k.sport, k.dport, k.proto)
        };
        vip.ring
            .get(conf::maglev::slot(h, vip.ring.len() as u32))
            .copied()
    }

    /// The backend Maglev picks for this flow, if the VIP has any.
    pub fn pick(&self, vip: &VipRt<'_>, key: &Flow4or6) -> Option<u32> {
        if vip.ring.is_empty() {
            return None;
        }
        let h = match key {
            Flow4or6::V4 {
                src,
                dst,
                sport,
                dport,
                proto,
            } => self.hasher.hash_v4(*src, *dst, *sport, *dport, *proto),
            Flow4or6::V6 {
                src,
                dst,
                sport,
                dport,
                proto,
            } => self.hasher.hash_v6(*src, *dst, *sport, *dport, *proto),
        };
        vip.ring
            .get(conf::maglev::slot(h, vip.ring.len() as u32))
            .copied()
    }
}

/// The 5-tuple of a packet in the form the flow hash takes.
#[derive(Clone, Copy, Debug)]
pub enum Flow4or6 {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        proto: u8,
    },
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
        sport: u16,
        dport: u16,
        proto: u8,
    },
}

/// What a worker remembers about one connection, next to the entry's two
/// keys: the original key is the client's packets as they arrive (client ->
/// VIP), the reply key the backend's (backend -> local address for full-NAT,
/// backend -> client for DNAT). The addresses and ports a packet is
/// translated to are those of the other direction's key, so they are not
/// stored twice.
///
/// What every packet needs comes first (32 bytes, in the entry's second
/// cache line with the deadline and the end of the keys); the PROXY
/// protocol state and the connection id, which only PROXY flows read,
/// come after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct FlowRec {
    /// Statistics slots of the VIP and the backend (see `FlowStats`).
    pub vip_slot: u32,
    pub backend_slot: u32,
    /// What full-NAT adds to the client's TCP timestamps (TSval) on the
    /// way to the backend, and takes off the backend's echoes (TSecr), when
    /// [`FLOW_TS`] is set: see [`crate::local_ports`].
    pub ts_delta: u32,
    /// The backend's next hop in the worker's neighbour table.
    pub hop: Slot,
    /// Checksum changes of the client's packets' rewrite (to the reply key
    /// reversed) and of the backend's (to the original key reversed, for
    /// full-NAT), fixed with the keys.
    pub fwd: nat::Deltas,
    pub rev: nat::Deltas,
    pub client_mac: [u8; 6],
    /// Where the client's packets came from: reply out of this port to this MAC.
    pub client_port: u8,
    /// The data port the backend is reached through.
    pub backend_port: u8,
    pub mode: Mode,
    /// [`FLOW_PP`], [`FLOW_TS`], [`FLOW_TS_ECHOED`].
    pub bits: u8,
    /// This connection's id: worker number in the top 16 bits, the
    /// worker's connection counter below (the PPv2 `UNIQUE_ID`).
    pub conn_id: u64,
    /// PROXY protocol v2 state (off unless the VIP has it).
    pub pp: PpFlow,
}

/// `FlowRec::bits`: `pp.is_on()`, fixed when the connection starts.
pub const FLOW_PP: u8 = 1;
/// The client's SYN carried timestamps and `ts_delta` translates them.
pub const FLOW_TS: u8 = 2;
/// The backend's SYN-ACK carried timestamps too: the connection uses them,
/// so its local tuple may be reused soon after it closes (RFC 6191).
pub const FLOW_TS_ECHOED: u8 = 4;

impl FlowRec {
    #[inline(always)]
    pub fn pp_on(&self) -> bool {
        self.bits & FLOW_PP != 0
    }

    #[inline(always)]
    pub fn ts_on(&self) -> bool {
        self.bits & FLOW_TS != 0
    }

    /// Whether the local tuple of this connection (its `reply` key) may be
    /// reused soon after it ends: it used timestamps both ways, or it is
    /// UDP (no TIME_WAIT).
    pub fn rests_briefly(&self, reply: &FlowKey) -> bool {
        reply.proto != ip_proto::TCP
            || self.bits & (FLOW_TS | FLOW_TS_ECHOED) == FLOW_TS | FLOW_TS_ECHOED
    }
}

/// Gives back what a connection-table entry held when it goes: its
/// active-connection counts and, for full-NAT, its local tuple, which
/// rests from the entry's last packet on.
struct Release<'a> {
    vip_stats: FlowStats<'static>,
    backend_stats: FlowStats<'static>,
    local_ports: &'a mut LocalPorts,
    state_timeouts_ms: &'a [u64; 7],
}

impl<'a> Release<'a> {
    fn of(
        vip_stats: FlowStats<'static>,
        backend_stats: FlowStats<'static>,
        local_ports: &'a mut LocalPorts,
        state_timeouts_ms: &'a [u64; 7],
    ) -> Self {
        Release {
            vip_stats,
            backend_stats,
            local_ports,
            state_timeouts_ms,
        }
    }

    fn entry(&mut self, e: &crate::conntrack::Entry<FlowRec>) {
        let v = &e.value;
        self.vip_stats
            .sub(v.vip_slot, FlowStat::ActiveConnections, 1);
        self.backend_stats
            .sub(v.backend_slot, FlowStat::ActiveConnections, 1);
        if v.mode == Mode::FullNat {
            let r = e.reply();
            let ready = self
                .local_ports
                .ready_at(e.last_seen(self.state_timeouts_ms), v.rests_briefly(r));
            self.local_ports.released(&r.dst, r.dport, ready);
        }
    }
}

impl Default for FlowRec {
    fn default() -> Self {
        FlowRec {
            vip_slot: u32::MAX,
            backend_slot: u32::MAX,
            ts_delta: 0,
            hop: Slot::NONE,
            fwd: nat::Deltas::default(),
            rev: nat::Deltas::default(),
            client_mac: [0; 6],
            client_port: 0,
            backend_port: 0,
            mode: Mode::FullNat,
            bits: 0,
            conn_id: 0,
            pp: PpFlow::default(),
        }
    }
}

/// An ARP request or neighbour solicitation the worker should send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighRequest {
    pub port: usize,
    pub target: IpAddr,
}

/// Per-worker load-balancing state.
pub struct Lb {
    pub worker: usize,
    workers: usize,
    owner_mask: u16,
    pub tables: Option<Adopted<'static>>,
    pub conntrack: Conntrack<FlowRec>,
    pub neighbors: Neighbors,
    sync: NeighborSync,
    vip_stats: FlowStats<'static>,
    backend_stats: FlowStats<'static>,
    /// Full-NAT local tuples (rebuilt when adopted routes change pools).
    local_ports: LocalPorts,
    local_port_cooldown: u32,
    /// `conntrack::timeout_table` of the table's timeouts.
    state_timeouts_ms: [u64; 7],
    pub requests: ArrayVec<NeighRequest, 32>,
    pub now_ms: u64,
    /// Connections created by this worker (the low bits of `FlowRec::conn_id`).
    conn_counter: u64,
    /// Extra frames to send and PROXY header retransmission timers.
    pub pp: PpWorker,
    /// Tests compare the express lane with the general path.
    #[cfg(test)]
    express_off: bool,
    /// Frames the express lane took (tests).
    #[cfg(test)]
    express_taken: u64,
}

/// Which worker owns full-NAT local port `port` among `workers`.
pub fn port_owner(port: u16, workers: usize) -> usize {
    let mask = (workers.next_power_of_two() - 1) as u16;
    (port & mask) as usize
}

fn key_of(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, proto: u8) -> FlowKey {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => FlowKey::v4(s.octets(), d.octets(), sport, dport, proto),
        (s, d) => FlowKey::v6(to16(s), to16(d), sport, dport, proto),
    }
}

fn to16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

/// Source and destination address of an IP packet as a [`FlowKey`] holds
/// them (IPv4 mapped), read at the offsets `parse_frame` found.
#[inline(always)]
fn addrs_of(frame: &[u8], p: &Parsed) -> Option<([u8; 16], [u8; 16], bool)> {
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

/// TCP flags the express lane looks at.
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// The express lane's parse: the layout, the flow key and the TCP flags
/// (0 for UDP) of a frame of the shape [`Lb::express`] takes, with the
/// checks `parse_frame` makes of such a frame (`parse_fast` accepts every
/// frame this does, with the same offsets) and those `client_packet` and
/// `backend_packet` make before any state changes (TTL above 1, TCP flags
/// valid). A SYN is refused: it may start a connection.
#[inline(always)]
fn express_parse(f: &[u8]) -> Option<(nat::Layout, FlowKey, u8)> {
    let rd =
        |at: usize| -> Option<u16> { Some(u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?])) };
    let (l3, et) = match rd(12)? {
        0x8100 => (18, rd(16)?),
        et => (14, et),
    };
    let (v4, end, proto, mut key) = match et {
        0x0800 => {
            let h: &[u8; 20] = f.get(l3..l3 + 20)?.try_into().ok()?;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            // Version 4 without options, within the frame, not a fragment, TTL > 1.
            if h[0] != 0x45
                || total < 20
                || l3 + total > f.len()
                || (h[6] & 0x3F) | h[7] != 0
                || h[8] <= 1
            {
                return None;
            }
            // The header checksum verifies: the one's-complement sum is
            // 0xFFFF, i.e. the plain sum is a non-zero multiple of 0xFFFF.
            // Either byte order will do for that (RFC 1071 §2(B)).
            let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            let sum = w(0) + w(4) + w(8) + w(12) + w(16);
            if sum == 0 || sum % 0xFFFF != 0 {
                return None;
            }
            let s = u32::from_ne_bytes([h[12], h[13], h[14], h[15]]).to_ne_bytes();
            let d = u32::from_ne_bytes([h[16], h[17], h[18], h[19]]).to_ne_bytes();
            (true, l3 + total, h[9], FlowKey::v4(s, d, 0, 0, h[9]))
        }
        0x86DD => {
            let h: &[u8; 40] = f.get(l3..l3 + 40)?.try_into().ok()?;
            let end = l3 + 40 + usize::from(u16::from_be_bytes([h[4], h[5]]));
            if h[0] >> 4 != 6 || end > f.len() || h[7] <= 1 {
                return None;
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&h[8..24]);
            d.copy_from_slice(&h[24..40]);
            (false, end, h[6], FlowKey::v6(s, d, 0, 0, h[6]))
        }
        _ => return None,
    };
    let l4 = l3 + if v4 { 20 } else { 40 };
    let seg = f.get(l4..end)?;
    let (udp, flags) = match proto {
        ip_proto::TCP => {
            let h = seg.get(..20)?;
            let doff = usize::from(h[12] >> 4) * 4;
            let flags = h[13];
            if doff < 20
                || doff > seg.len()
                || flags & 0x02 != 0
                || !crate::wire::tcp_flags_valid(crate::wire::TcpFlags(flags))
            {
                return None;
            }
            (false, flags)
        }
        ip_proto::UDP => {
            let ulen = usize::from(u16::from_be_bytes([*seg.get(4)?, *seg.get(5)?]));
            if ulen < 8 || ulen > seg.len() {
                return None;
            }
            (true, 0)
        }
        _ => return None,
    };
    key.sport = u16::from_be_bytes([*seg.first()?, *seg.get(1)?]);
    key.dport = u16::from_be_bytes([*seg.get(2)?, *seg.get(3)?]);
    Some((nat::Layout { l3, l4, v4, udp }, key, flags))
}

/// A frame [`Lb::express_prepare`] took: its layout, flow key, TCP flags,
/// the direction the key must have in the connection table (original: to
/// a VIP; reply: to a full-NAT local address) and the key's index hash.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prepared {
    key: FlowKey,
    hash: KeyHash,
    /// Set by [`Lb::express_prefetch`] (none without it).
    hint: Hint,
    /// `nat::Layout`'s offsets (at most 18 and 58).
    l3: u8,
    l4: u8,
    flags: u8,
    /// [`PREP_V4`], [`PREP_UDP`], [`PREP_REPLY`].
    bits: u8,
}

const PREP_V4: u8 = 1;
const PREP_UDP: u8 = 2;
/// The key must be a reply key (else an original key).
const PREP_REPLY: u8 = 4;
/// The destination is no VIP or local address: only a DNAT reply (to an
/// address the input port does not own) is the lane's.
const PREP_NOT_LOCAL: u8 = 8;

/// What a new flow's pick produced.
enum Picked {
    /// Tracked under this entry.
    Tracked(EntryId),
    /// Not tracked (table full, DNAT): forwarded by the pick alone.
    Stateless(FlowRec, FlowKey),
}

/// The TCP flags of a packet (0 for UDP).
#[inline(always)]
fn flags_of(p: &Parsed) -> u8 {
    p.tcp_flags.map_or(0, |f| f.0)
}

impl Lb {
    pub fn new(
        worker: usize,
        workers: usize,
        conntrack_capacity: usize,
        timeouts: Timeouts,
        sync: NeighborSync,
        vip_stats: FlowStats<'static>,
        backend_stats: FlowStats<'static>,
    ) -> Lb {
        Lb {
            worker,
            workers: workers.max(1),
            owner_mask: (workers.max(1).next_power_of_two() - 1) as u16,
            tables: None,
            conntrack: Conntrack::new(conntrack_capacity, timeouts),
            neighbors: Neighbors::new(),
            sync,
            vip_stats,
            backend_stats,
            local_ports: LocalPorts::default(),
            local_port_cooldown: timeouts.local_port_cooldown,
            state_timeouts_ms: crate::conntrack::timeout_table(&timeouts),
            requests: ArrayVec::new(),
            now_ms: 0,
            conn_counter: 0,
            pp: PpWorker::default(),
            #[cfg(test)]
            express_off: false,
            #[cfg(test)]
            express_taken: 0,
        }
    }

    /// Switches to a new table generation. Flows keep the backend they have.
    ///
    /// A VIP read from the same tables-region block as a VIP of the current
    /// generation takes over that VIP's runtime as is (backends, routes,
    /// statistics and neighbour slots): the work is proportional to the VIPs
    /// that changed, not to all of them. The others get their backends
    /// built, statistics slots, and neighbour slots with a resolution
    /// started for next hops not known yet.
    pub fn adopt(&mut self, mut t: Adopted<'static>) {
        let mut old = self.tables.take();
        let mut by_src = None;
        // Every carried VIP kept its position, and which VIPs were built.
        let mut in_place = true;
        let mut built = Vec::new();
        for i in 0..t.vips.len() {
            if let Some(j) = t.resolve_vip(i, old.as_mut(), &mut by_src) {
                in_place &= j == i;
                continue;
            }
            built.push(i);
            let v = &mut t.vips[i];
            v.stat_slot = self.vip_stats.slot_for(v.stat_key).unwrap_or(u32::MAX);
            for b in &mut v.backends {
                b.stat_slot = self.backend_stats.slot_for(b.id).unwrap_or(u32::MAX);
                // Make sure the next hop gets resolved before the first
                // packet needs it, and keep its neighbour slot.
                if b.out_port != usize::MAX && self.neighbors.get(b.next_hop).is_none() {
                    self.want_neighbor(b.out_port, b.next_hop);
                }
                b.hop = self.neighbors.slot(b.next_hop).unwrap_or(Slot::NONE);
            }
        }
        t.finish_dnat(old.as_mut().filter(|_| in_place), &built);
        if !self.local_ports.built_for(&t.routes) {
            self.local_ports = LocalPorts::build(
                &t.routes,
                self.worker,
                self.workers,
                self.local_port_cooldown,
            );
        }
        self.tables = Some(t);
    }

    pub fn generation(&self) -> Option<u64> {
        self.tables.as_ref().map(|t| t.generation)
    }

    fn want_neighbor(&mut self, port: usize, ip: IpAddr) {
        match self.neighbors.resolve(ip, self.now_ms) {
            Resolution::Request | Resolution::KnownRefresh(_) => {
                let _ = self.requests.try_push(NeighRequest { port, target: ip });
            }
            _ => {}
        }
    }

    /// Learns a binding seen on the wire and tells the other workers.
    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6]) {
        if self.neighbors.learn(ip, mac, self.now_ms) && self.workers > 1 {
            self.sync.share(self.worker, Binding { ip, mac });
        }
    }

    /// Housekeeping once per poll iteration: bindings from other workers, expiry.
    pub fn tick(&mut self, now_ms: u64, counters: &mut Counters) {
        self.now_ms = now_ms;
        self.sync
            .drain_into(self.worker, &mut self.neighbors, now_ms);
        self.expire(EXPIRE_BUDGET, counters);
        if let Some(t) = self.local_ports.scan(now_ms, LOCAL_TUPLE_SCAN_BUDGET) {
            counters.set(Counter::LocalTuples, t.tuples);
            counters.set(Counter::LocalTuplesInUse, t.in_use);
            counters.set(Counter::LocalTuplesResting, t.resting);
        }
        let (ct, pp) = (&self.conntrack, &mut self.pp);
        pp.timers.tick(
            now_ms,
            |id, conn_id| {
                let live = ct.is_live(id) && !ct.get(id).is_expired(now_ms) && !ct.is_closing(id);
                match &ct.get(id).value {
                    v if live && v.conn_id == conn_id => v.pp.pending(),
                    _ => ppv2::queue::Pending::Done,
                }
            },
            &mut pp.emits,
            counters,
        );
    }

    /// Examines up to `budget` more connection-table entries for expiry
    /// (at the `now` of the last [`Lb::tick`]).
    pub fn expire(&mut self, budget: usize, counters: &mut Counters) {
        let mut release = Release::of(
            self.vip_stats,
            self.backend_stats,
            &mut self.local_ports,
            &self.state_timeouts_ms,
        );
        let freed = self
            .conntrack
            .expire(self.now_ms, budget, |e| release.entry(e));
        counters.add(Counter::ConntrackExpired, freed as u64);
    }

    fn owner(&self, local_port: u16) -> usize {
        (local_port & self.owner_mask) as usize
    }

    /// The express lane: a packet of an established flow, client -> VIP,
    /// backend -> full-NAT local address or backend -> client (DNAT), in
    /// the frame's most common shape
    /// (Ethernet with at most one VLAN tag; IPv4 without options and not a
    /// fragment, or IPv6 without extension headers; TCP without SYN, or
    /// UDP), of a flow without PROXY protocol. Everything else, and every
    /// packet this lane is unsure about, gets `None` before anything was
    /// changed, and takes the general path (`parse_frame`, then
    /// [`Lb::handle`]).
    ///
    /// For the packets it takes, the lane does what the general path does,
    /// step for step and with the same functions (connection state,
    /// [`nat::forward`]'s rewrite, statistics, next hop), without building
    /// a `Parsed`: its header checks are those of `parse_frame` (IPv4
    /// header checksum included) restricted to that shape.
    ///
    /// This is [`Lb::express_prepare`] then [`Lb::express_prepared`]; a
    /// worker runs the two over a whole burst in separate passes, with
    /// [`Lb::express_prefetch`] in between, so the connection table's cache
    /// misses overlap.
    #[inline]
    pub fn express(
        &mut self,
        buf: &mut [u8],
        len: usize,
        in_port: usize,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let prep = self.express_prepare(buf.get(..len)?)?;
        self.express_prepared(buf, len, &prep, in_port, ports, counters)
    }

    /// The express lane's first step, which changes nothing: parses the
    /// frame, finds whether it is addressed to a VIP, to a full-NAT local
    /// address in its pool's port range or to no address of ours (a DNAT
    /// reply on its way to the client), hashes its key and starts loading
    /// the connection table's index bucket for it. `None`: not a frame for
    /// the lane (the general path takes it).
    #[inline(always)]
    pub fn express_prepare(&self, frame: &[u8]) -> Option<Prepared> {
        let mut prep = Prepared::default();
        self.express_prepare_into(frame, &mut prep).then_some(prep)
    }

    /// [`Lb::express_prepare`] into `out`, in place (a worker's array for
    /// the burst). False: not a frame for the lane; `out` may have
    /// changed, but means nothing.
    #[inline(always)]
    pub fn express_prepare_into(&self, frame: &[u8], out: &mut Prepared) -> bool {
        self.express_prepare_opt(frame, out).is_some()
    }

    #[inline(always)]
    fn express_prepare_opt(&self, frame: &[u8], out: &mut Prepared) -> Option<()> {
        #[cfg(test)]
        if self.express_off {
            return None;
        }
        let tables = self.tables.as_ref()?;
        // Some flow may have to be reset: the general path checks each.
        if tables.reset_pending {
            return None;
        }
        let (at, key, flags) = express_parse(frame)?;
        let mut not_local = false;
        let dir = if tables
            .vip_at(&key.dst, key.v6, key.dport, key.proto)
            .is_some()
        {
            Dir::Original
        } else {
            let class = tables.class_of(&key.dst, key.v6);
            match class.pool {
                _ if class.vip => return None,
                Some((lo, hi)) if key.dport < lo || key.dport > hi => return None,
                Some(_) => {}
                // Not a VIP or local address; unless a port owns it (checked
                // once the flow is found), a DNAT reply.
                None => not_local = true,
            }
            Dir::Reply
        };
        let hash = self.conntrack.hash_of(&key);
        self.conntrack.prefetch_bucket(hash);
        out.key = key;
        out.hash = hash;
        out.hint = Hint::default();
        out.l3 = at.l3 as u8;
        out.l4 = at.l4 as u8;
        out.flags = flags;
        out.bits = (u8::from(at.v4) * PREP_V4)
            | (u8::from(at.udp) * PREP_UDP)
            | (u8::from(dir == Dir::Reply) * PREP_REPLY)
            | (u8::from(not_local) * PREP_NOT_LOCAL);
        Some(())
    }

    /// The express lane's second step, a hint that changes nothing: starts
    /// loading the connection-table entry of a prepared frame (its index
    /// bucket should have arrived since [`Lb::express_prepare`]).
    #[inline(always)]
    pub fn express_prefetch(&self, prep: &mut Prepared) {
        prep.hint = self.conntrack.prefetch_entry(prep.hash);
    }

    /// The express lane's last step: the frame in `buf[..len]`, which
    /// [`Lb::express_prepare`] prepared as `prep` in this poll iteration
    /// (same tables; the frame unchanged since), as [`Lb::express`] takes
    /// it. `None`, with nothing changed: the general path takes the frame.
    #[inline(always)]
    pub fn express_prepared(
        &mut self,
        buf: &mut [u8],
        len: usize,
        prep: &Prepared,
        in_port: usize,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let frame = buf.get_mut(..len)?;
        let Prepared {
            ref key,
            hash,
            hint,
            l3,
            l4,
            flags,
            bits,
        } = *prep;
        let at = nat::Layout {
            l3: usize::from(l3),
            l4: usize::from(l4),
            v4: bits & PREP_V4 != 0,
            udp: bits & PREP_UDP != 0,
        };
        let dir = if bits & PREP_REPLY != 0 {
            Dir::Reply
        } else {
            Dir::Original
        };
        let now = self.now_ms;
        let (id, found) = self.conntrack.lookup_hinted(key, hash, hint, now)?;
        if found != dir {
            return None;
        }
        let e = self.conntrack.get(id);
        // PROXY protocol flows once past their header: only sequence or
        // acknowledgement numbers move (no SYN: the SYN-ACK's MSS is clamped
        // on the general path; replies need the ACK they translate).
        if e.value.pp_on()
            && !(e.value.pp.steady()
                && !at.udp
                && flags & TCP_SYN == 0
                && (dir == Dir::Original || flags & TCP_ACK != 0))
        {
            return None;
        }
        // As `handle`: a packet to an address the port owns is not a DNAT
        // reply (the local stack takes it).
        if bits & PREP_NOT_LOCAL != 0
            && (e.value.mode != Mode::Dnat
                || ports
                    .get(in_port)
                    .is_none_or(|port| port.owns_any(key.dst_ip())))
        {
            return None;
        }
        #[cfg(test)]
        {
            self.express_taken += 1;
        }
        // As `client_packet` (original) or `backend_packet` (reply) from here on.
        if at.udp {
            self.conntrack.touch(id, now);
        } else {
            self.conntrack.update_tcp(id, dir, flags, now);
        }
        let e = self.conntrack.get(id);
        let rec = &e.value;
        // The packet becomes the other key reversed.
        let other = e.key(dir.reverse());
        if other.v6 != key.v6 {
            return Some(drop(counters, Counter::DropSlowpathUnhandled));
        }
        let (src, deltas) = match dir {
            Dir::Original => (
                (rec.mode == Mode::FullNat).then_some((&other.dst, other.dport)),
                rec.fwd,
            ),
            Dir::Reply => (Some((&other.dst, other.dport)), rec.rev),
        };
        let dst = Some((&other.src, other.sport));
        if let Err(err) = nat::forward_with(frame, at, src, dst, deltas) {
            return Some(drop(counters, forward_drop(err)));
        }
        if rec.ts_on() {
            let seg = frame.get_mut(at.l4..)?;
            match dir {
                Dir::Original => tstamp::shift_tsval(seg, rec.ts_delta),
                Dir::Reply => tstamp::unshift_tsecr(seg, rec.ts_delta),
            }
        }
        let rec = *rec;
        self.vip_stats.add(rec.vip_slot, FlowStat::Packets, 1);
        self.vip_stats
            .add(rec.vip_slot, FlowStat::Bytes, len as u64);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Packets, 1);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Bytes, len as u64);
        // PROXY protocol: as `pp_client` / `PpFlow::backend_segment` do for
        // a steady flow, at the same points.
        let segment = |frame: &[u8]| ppv2::seg::locate_at(frame, !at.v4, at.l3, at.l4);
        if dir == Dir::Original {
            let v = self.send_to_hop(frame, rec.backend_port as usize, rec.hop, ports, counters);
            if rec.pp_on() && matches!(v, Verdict::Park { .. }) {
                return Some(drop(counters, Counter::DropNeighborUnresolved));
            }
            if rec.pp_on() && matches!(v, Verdict::Send { .. }) {
                let Some(s) = segment(frame) else {
                    return Some(drop(counters, Counter::DropPpBadSegment));
                };
                rec.pp.shift_client(frame, &s);
            }
            return Some(v);
        }
        if rec.pp_on() {
            let Some(s) = segment(frame) else {
                return Some(drop(counters, Counter::DropPpBadSegment));
            };
            rec.pp.map_backend(frame, &s);
        }
        let out = rec.client_port as usize;
        let Some(port) = ports.get(out) else {
            return Some(drop(counters, Counter::DropNoRoute));
        };
        nat::set_macs(frame, port.mac, rec.client_mac);
        Some(Verdict::Send { port: out, len })
    }

    /// Handles load-balancer traffic. `None`: not ours, let the slow path decide.
    ///
    /// The frame is `buf[..len]`; the rest of `buf` is room it may grow into
    /// (a PROXY header), so a `Send` may carry a larger length. `p` is what
    /// `parse_frame` returned for the frame (the rewrites trust its offsets).
    #[inline(always)]
    pub fn handle(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        ports: &[PortInfo],
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
                    return Some(self.client_packet(buf, len, p, in_port, vi, &k, ports, counters));
                }
            }
        }
        let class = tables.class_of(&dst, v6);
        if p.fragment != Fragment::None {
            if class.vip || class.pool.is_some() {
                return Some(drop(counters, Counter::DropFragment));
            }
            return None;
        }
        let pt = p.ports?;
        if class.vip {
            return Some(drop(counters, Counter::DropVipUnhandled));
        }
        let frame = buf.get_mut(..len)?;
        if let Some((lo, hi)) = class.pool {
            if pt.dst < lo || pt.dst > hi {
                return None; // the kernel twin's own connection
            }
            return Some(self.backend_packet(frame, p, in_port, &key(pt), ports, counters, true));
        }
        // DNAT replies are addressed to the client, not to us.
        let k = key(pt);
        if ports
            .get(in_port)
            .is_none_or(|port| port.owns_any(k.dst_ip()))
        {
            return None;
        }
        Some(self.backend_packet(frame, p, in_port, &k, ports, counters, false))
    }

    // The packet, its parse, where it came from and what it matched travel
    // together; bundling them would only rename the list.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn client_packet(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        vi: u32,
        key: &FlowKey,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        if !p.tcp_flags_valid {
            return drop(counters, Counter::DropBadTcpFlags);
        }
        // Before any state: a packet that cannot be forwarded creates no
        // entry, takes no local port and counts no connection.
        if p.ttl <= 1 {
            return drop(counters, Counter::DropTtlExceeded);
        }
        let flags = flags_of(p);
        let tcp = key.proto == ip_proto::TCP;
        let syn_only = tcp && flags & 0x12 == 0x02;
        let now = self.now_ms;
        let id = match self.conntrack.lookup(key, now) {
            Some((id, Dir::Original)) => {
                if syn_only && self.conntrack.is_closing(id) {
                    // A new connection on the tuple of a closing one.
                    let closing = Some(id);
                    return self
                        .client_miss(buf, len, p, in_port, vi, key, closing, ports, counters);
                }
                id
            }
            _ => return self.client_miss(buf, len, p, in_port, vi, key, None, ports, counters),
        };
        // Its backend went down and the VIP resets such flows (a RST ends
        // the connection by itself: it goes on as usual).
        if self.tables.as_ref().is_some_and(|t| t.reset_pending)
            && flags & 0x04 == 0
            && self.must_reset(id)
        {
            return self.reset_client(buf, len, p, in_port, vi, key, id, ports, counters);
        }
        // An established flow.
        if tcp {
            self.conntrack.update_tcp(id, Dir::Original, flags, now);
        } else {
            self.conntrack.touch(id, now);
        }
        let Some(frame) = buf.get_mut(..len) else {
            return drop(counters, Counter::DropSlowpathUnhandled);
        };
        let e = self.conntrack.get(id);
        if let Err(c) = translate_client(frame, p, &e.value, e.orig(), e.reply()) {
            return drop(counters, c);
        }
        let rec = e.value;
        self.client_sent(buf, len, p, Some(id), &rec, ports, counters)
    }

    /// A client's packet of no established flow: a new flow, or a SYN on
    /// the `closing` entry of its tuple.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn client_miss(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        vi: u32,
        key: &FlowKey,
        closing: Option<EntryId>,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(frame) = buf.get_mut(..len) else {
            return drop(counters, Counter::DropSlowpathUnhandled);
        };
        let tcp = key.proto == ip_proto::TCP;
        let syn_only = tcp && flags_of(p) & 0x12 == 0x02;
        if let Some(id) = closing {
            self.forget(id);
        }
        // Mid-stream packet of a connection this worker never saw
        // (restart, table full earlier): DNAT can forward it where
        // Maglev sends it; full-NAT has no source port to use.
        if tcp && !syn_only {
            let full_nat = self
                .tables
                .as_ref()
                .and_then(|t| t.vips.get(vi as usize))
                .is_some_and(|v| v.mode == Mode::FullNat);
            if full_nat {
                return drop(counters, Counter::DropNoConntrack);
            }
        }
        let picked = match self.new_flow(vi, key, in_port, frame, counters) {
            Ok(picked) => picked,
            Err(v) => return v,
        };
        // The client's packet becomes the reply key reversed: from the
        // local address (full-NAT) or the client (DNAT) to the backend.
        let (rec, id) = match &picked {
            Picked::Tracked(id) => {
                let translate = self
                    .tables
                    .as_ref()
                    .and_then(|t| t.vips.get(vi as usize))
                    .is_some_and(|v| v.translate_timestamps);
                if translate {
                    self.start_timestamps(*id, frame, p);
                }
                let e = self.conntrack.get(*id);
                if let Err(c) = translate_client(frame, p, &e.value, e.orig(), e.reply()) {
                    return drop(counters, c);
                }
                (e.value, Some(*id))
            }
            Picked::Stateless(rec, reply) => {
                if let Err(c) = translate_client(frame, p, rec, key, reply) {
                    return drop(counters, c);
                }
                (*rec, None)
            }
        };
        self.client_sent(buf, len, p, id, &rec, ports, counters)
    }

    /// Accounts for a translated client packet and sends it to the backend.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn client_sent(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        id: Option<EntryId>,
        rec: &FlowRec,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        self.vip_stats.add(rec.vip_slot, FlowStat::Packets, 1);
        self.vip_stats
            .add(rec.vip_slot, FlowStat::Bytes, len as u64);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Packets, 1);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Bytes, len as u64);
        let Some(frame) = buf.get_mut(..len) else {
            return drop(counters, Counter::DropSlowpathUnhandled);
        };
        let v = self.send_to_hop(frame, rec.backend_port as usize, rec.hop, ports, counters);
        match (v, id) {
            (Verdict::Send { port, len }, Some(id)) if rec.pp_on() => {
                self.pp_client(id, buf, len, p, port, counters)
            }
            // A PROXY flow's segment cannot wait: its header and sequence
            // shift are decided as it leaves.
            (Verdict::Park { .. }, _) if rec.pp_on() => {
                drop(counters, Counter::DropNeighborUnresolved)
            }
            _ => v,
        }
    }

    /// PROXY protocol v2 on a client segment about to go to the backend
    /// (see [`ppv2::flow`]); the flow's state is updated in place.
    fn pp_client(
        &mut self,
        id: EntryId,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        port: usize,
        counters: &mut Counters,
    ) -> Verdict {
        let e = self.conntrack.get_mut(id);
        let orig = e.orig();
        let ends = ppv2::Ends {
            client: (orig.src_ip(), orig.sport),
            vip: (orig.dst_ip(), orig.dport),
            conn_id: e.value.conn_id,
        };
        let r = e.value.pp.client_segment(
            &ends,
            buf,
            len,
            p,
            port,
            id,
            self.now_ms,
            &mut self.pp,
            counters,
        );
        match r {
            Ok(len) => Verdict::Send { port, len },
            Err(c) => drop(counters, c),
        }
    }

    fn new_flow(
        &mut self,
        vi: u32,
        orig: &FlowKey,
        in_port: usize,
        frame: &[u8],
        counters: &mut Counters,
    ) -> Result<Picked, Verdict> {
        let Some(tables) = self.tables.as_ref() else {
            return Err(drop(counters, Counter::DropNotLocal));
        };
        let Some(vip) = tables.vips.get(vi as usize) else {
            return Err(drop(counters, Counter::DropNotLocal));
        };
        let Some(b) = tables
            .pick_key(vip, orig)
            .and_then(|bi| vip.backends.get(bi as usize))
        else {
            return Err(drop(counters, Counter::DropNoBackend));
        };
        if b.out_port == usize::MAX {
            return Err(drop(counters, Counter::DropNoRoute));
        }
        let mut client_mac = [0u8; 6];
        if let Some(m) = frame.get(6..12) {
            client_mac.copy_from_slice(m);
        }
        let hop = match b.hop {
            // Tables not adopted through `adopt`: find the slot now.
            Slot::NONE => self.neighbors.slot_for(b.next_hop),
            hop => hop,
        };
        let tcp = orig.proto == ip_proto::TCP;
        let pp = if tcp {
            PpFlow::new(vip.pp, orig.v6)
        } else {
            PpFlow::default()
        };
        let rec = FlowRec {
            vip_slot: vip.stat_slot,
            backend_slot: b.stat_slot,
            hop,
            client_port: in_port as u8,
            backend_port: b.out_port as u8,
            client_mac,
            mode: vip.mode,
            bits: if pp.is_on() { FLOW_PP } else { 0 },
            ts_delta: 0,
            fwd: nat::Deltas::default(),
            rev: nat::Deltas::default(),
            conn_id: (self.worker as u64) << 48 | (self.conn_counter & 0xFFFF_FFFF_FFFF),
            pp,
        };
        self.conn_counter += 1;
        let now = self.now_ms;
        let state = if tcp { State::SynSent } else { State::Udp };
        let (vs, bs) = (self.vip_stats, self.backend_stats);
        let on_free = |e: &crate::conntrack::Entry<FlowRec>| {
            vs.sub(e.value.vip_slot, FlowStat::ActiveConnections, 1);
            bs.sub(e.value.backend_slot, FlowStat::ActiveConnections, 1);
        };
        let b_v6 = b.addr.is_ipv6();
        let mut rec = rec;
        let picked = match vip.mode {
            Mode::Dnat => {
                let reply = FlowKey {
                    src: b.addr16,
                    dst: orig.src,
                    sport: b.port,
                    dport: orig.sport,
                    proto: orig.proto,
                    v6: b_v6 || orig.v6,
                };
                (rec.fwd, rec.rev) = flow_deltas(rec.mode, orig, &reply);
                match self
                    .conntrack
                    .insert(*orig, reply, rec, state, now, on_free)
                {
                    Ok(id) => Picked::Tracked(id),
                    Err(InsertError::Full) => {
                        counters.inc(Counter::ConntrackFullStateless);
                        Picked::Stateless(rec, reply)
                    }
                    Err(_) => {
                        return Err(drop(counters, Counter::DropReplyKeyInUse));
                    }
                }
            }
            Mode::FullNat => {
                let Some(set) = b.local_set else {
                    return Err(drop(counters, Counter::DropNoLocalPort));
                };
                if self.conntrack.is_full() {
                    return Err(drop(counters, Counter::DropConntrackFull));
                }
                let reply = FlowKey {
                    src: b.addr16,
                    dst: [0; 16],
                    sport: b.port,
                    dport: 0,
                    proto: orig.proto,
                    v6: b_v6,
                };
                match self.take_local_tuple(set, orig, reply, &mut rec, state, counters) {
                    Ok(id) => Picked::Tracked(id),
                    Err(c) => return Err(drop(counters, c)),
                }
            }
        };
        if matches!(picked, Picked::Tracked(_)) {
            self.vip_stats
                .add(rec.vip_slot, FlowStat::ActiveConnections, 1);
            self.backend_stats
                .add(rec.backend_slot, FlowStat::ActiveConnections, 1);
        }
        counters.inc(Counter::NewFlows);
        self.vip_stats
            .add(rec.vip_slot, FlowStat::NewConnections, 1);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::NewConnections, 1);
        Ok(picked)
    }

    /// Tracks a new full-NAT flow under a local tuple of `set` (see
    /// [`local_ports`]): the least recently used one that is not resting
    /// and not held by a live connection to the same backend. A tuple
    /// whose connection has ended (both FINs, a RST, or expired) is taken
    /// over once it has rested, its old entry dropped.
    fn take_local_tuple(
        &mut self,
        set: SetId,
        orig: &FlowKey,
        mut reply: FlowKey,
        rec: &mut FlowRec,
        state: State,
        counters: &mut Counters,
    ) -> Result<EntryId, Counter> {
        let now = self.now_ms;
        for _ in 0..LOCAL_PORT_TRIES {
            let Some(t) = self.local_ports.next(set, now, 1) else {
                continue;
            };
            reply.dst = t.addr16;
            reply.dport = t.port;
            if let Some(holder) = self.conntrack.holder(&reply) {
                let e = self.conntrack.get(holder);
                let ended =
                    e.is_expired(now) || matches!(e.state(), State::TimeWait | State::Closed);
                if !ended {
                    continue;
                }
                let ready = self.local_ports.ready_at(
                    e.last_seen(&self.state_timeouts_ms),
                    e.value.rests_briefly(&reply),
                );
                if ready > now {
                    self.local_ports.rest_until(&t, ready);
                    continue;
                }
                counters.inc(Counter::LocalTuplesTakenOver);
                self.forget(holder);
            }
            (rec.fwd, rec.rev) = flow_deltas(rec.mode, orig, &reply);
            let mut release = Release::of(
                self.vip_stats,
                self.backend_stats,
                &mut self.local_ports,
                &self.state_timeouts_ms,
            );
            let inserted = self
                .conntrack
                .insert(*orig, reply, *rec, state, now, |e| release.entry(e));
            match inserted {
                Ok(id) => {
                    self.local_ports.taken(&t);
                    return Ok(id);
                }
                Err(InsertError::ReplyInUse(_)) => continue,
                Err(InsertError::Full) => return Err(Counter::DropConntrackFull),
                Err(InsertError::OrigInUse(_) | InsertError::SameKeys) => {
                    return Err(Counter::DropReplyKeyInUse)
                }
            }
        }
        Err(Counter::DropNoLocalPort)
    }

    /// A new full-NAT TCP flow's SYN carries timestamps: from now on its
    /// TSvals run on this worker's clock (see [`tstamp`]).
    fn start_timestamps(&mut self, id: EntryId, frame: &[u8], p: &Parsed) {
        let now = self.now_ms as u32;
        let e = self.conntrack.get_mut(id);
        if e.value.mode != Mode::FullNat || p.l4_proto != ip_proto::TCP {
            return;
        }
        if let Some(v) = frame.get(p.l4_offset..).and_then(tstamp::tsval) {
            e.value.ts_delta = now.wrapping_sub(v);
            e.value.bits |= FLOW_TS;
        }
    }

    /// Whether the flow of entry `id` goes to a backend whose flows the
    /// adopted generation resets.
    #[inline(never)]
    fn must_reset(&self, id: EntryId) -> bool {
        let Some(t) = self.tables.as_ref() else {
            return false;
        };
        let e = self.conntrack.get(id);
        t.resets(&ResetKey::of_flow(e.orig(), e.reply()))
    }

    /// A client's packet of flow `id`, whose backend went down on a VIP
    /// with `on_down = "reset"`. TCP: answered with a RST from the VIP
    /// (built from the packet itself, so in the client's sequence space)
    /// and the entry removed; a SYN instead starts a new connection. UDP:
    /// the flow is forgotten and the datagram picks a backend again.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    fn reset_client(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        vi: u32,
        key: &FlowKey,
        id: EntryId,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        let syn_only = flags_of(p) & 0x12 == 0x02;
        if key.proto != ip_proto::TCP || syn_only {
            self.forget(id);
            counters.inc(Counter::ForgotBackendDown);
            return self.client_miss(buf, len, p, in_port, vi, key, None, ports, counters);
        }
        let Some(frame) = buf.get_mut(..len) else {
            return drop(counters, Counter::DropSlowpathUnhandled);
        };
        self.send_rst(frame, p, in_port, id, ports, counters)
    }

    /// A backend's packet of flow `id`, whose backend went down on a VIP
    /// with `on_down = "reset"`. TCP: answered with a RST to the backend
    /// from the address it knows (the full-NAT local address, or the
    /// client for DNAT), built from the packet itself (so in the backend's
    /// sequence space, PROXY header included), and the entry removed. UDP:
    /// the flow is forgotten, the datagram dropped.
    #[cold]
    #[inline(never)]
    fn reset_backend(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        in_port: usize,
        id: EntryId,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        if p.l4_proto != ip_proto::TCP {
            self.forget(id);
            counters.inc(Counter::ForgotBackendDown);
            return drop(counters, Counter::DropNoConntrack);
        }
        self.send_rst(frame, p, in_port, id, ports, counters)
    }

    /// Turns `frame` into the RST that answers it, back out of `in_port`,
    /// and removes entry `id`.
    fn send_rst(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        in_port: usize,
        id: EntryId,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        self.forget(id);
        let Some(port) = ports.get(in_port) else {
            return drop(counters, Counter::DropNoRoute);
        };
        match crate::reset::rst_reply(frame, p, port.mac) {
            Ok(len) => {
                counters.inc(Counter::ResetBackendDown);
                Verdict::Send { port: in_port, len }
            }
            Err(_) => drop(counters, Counter::DropSlowpathUnhandled),
        }
    }

    fn forget(&mut self, id: crate::conntrack::EntryId) {
        if let Some(e) = self.conntrack.remove(id) {
            Release::of(
                self.vip_stats,
                self.backend_stats,
                &mut self.local_ports,
                &self.state_timeouts_ms,
            )
            .entry(&e);
        }
    }

    /// A packet from a backend: to a full-NAT local address (`to_local`) or,
    /// for DNAT, to the client.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn backend_packet(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        in_port: usize,
        key: &FlowKey,
        ports: &[PortInfo],
        counters: &mut Counters,
        to_local: bool,
    ) -> Verdict {
        if p.ttl <= 1 {
            return drop(counters, Counter::DropTtlExceeded);
        }
        let now = self.now_ms;
        let id = match self.conntrack.lookup(key, now) {
            Some((id, Dir::Reply)) => {
                // As for the client's packets: the backend's connection
                // to a down backend is reset.
                if self.tables.as_ref().is_some_and(|t| t.reset_pending)
                    && flags_of(p) & 0x04 == 0
                    && self.must_reset(id)
                {
                    return self.reset_backend(frame, p, in_port, id, ports, counters);
                }
                if key.proto == ip_proto::TCP {
                    self.conntrack.update_tcp(id, Dir::Reply, flags_of(p), now);
                } else {
                    self.conntrack.touch(id, now);
                }
                id
            }
            _ if to_local => {
                let owner = self.owner(key.dport);
                if owner != self.worker && owner < self.workers {
                    return Verdict::Handoff { worker: owner };
                }
                return drop(counters, Counter::DropNoConntrack);
            }
            _ => return self.dnat_stateless_reply(frame, p, key, ports, counters),
        };
        let len = frame.len();
        // The backend's packet becomes the original key reversed: from the
        // VIP to the client (full-NAT; DNAT packets already go to the client).
        let e = self.conntrack.get_mut(id);
        let orig = e.orig();
        if orig.v6 != key.v6 {
            return drop(counters, Counter::DropSlowpathUnhandled);
        }
        let dst = to_local.then_some((&orig.src, orig.sport));
        if let Err(err) = nat::forward(frame, p, Some((&orig.dst, orig.dport)), dst) {
            return drop(counters, forward_drop(err));
        }
        let rec = &mut e.value;
        if rec.ts_on() {
            if let Some(seg) = frame.get_mut(p.l4_offset..) {
                if flags_of(p) & 0x12 == 0x12 && tstamp::present(seg) {
                    rec.bits |= FLOW_TS_ECHOED;
                }
                tstamp::unshift_tsecr(seg, rec.ts_delta);
            }
        }
        self.vip_stats.add(rec.vip_slot, FlowStat::Packets, 1);
        self.vip_stats
            .add(rec.vip_slot, FlowStat::Bytes, len as u64);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Packets, 1);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Bytes, len as u64);
        if rec.pp_on() {
            if let Err(c) = rec.pp.backend_segment(frame, p, counters) {
                return drop(counters, c);
            }
        }
        let out = rec.client_port as usize;
        let Some(port) = ports.get(out) else {
            return drop(counters, Counter::DropNoRoute);
        };
        nat::set_macs(frame, port.mac, rec.client_mac);
        Verdict::Send { port: out, len }
    }

    /// A DNAT reply this worker has no entry for (the client's packets
    /// arrive at another worker): translate it by the backend's unique VIP.
    fn dnat_stateless_reply(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        key: &FlowKey,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(tables) = self.tables.as_ref() else {
            return drop(counters, Counter::DropNotLocal);
        };
        let vi = match tables
            .dnat_reverse
            .get(&(key.src_ip(), key.sport, key.proto))
        {
            Some(Some(vi)) => *vi,
            Some(None) => return drop(counters, Counter::DropNoConntrack),
            None => return drop(counters, Counter::DropNotLocal),
        };
        let Some(vip) = tables.vips.get(vi as usize) else {
            return drop(counters, Counter::DropNotLocal);
        };
        let (vaddr, vport, slot) = (to16(vip.addr), vip.port, vip.stat_slot);
        let family_ok = vip.addr.is_ipv6() == key.v6;
        let Some((out, hop)) = tables.routes.route(key.dst_ip()) else {
            return drop(counters, Counter::DropNoRoute);
        };
        let len = frame.len();
        if !family_ok {
            return drop(counters, Counter::DropSlowpathUnhandled);
        }
        if let Err(err) = nat::forward(frame, p, Some((&vaddr, vport)), None) {
            return drop(counters, forward_drop(err));
        }
        counters.inc(Counter::DnatStatelessReplies);
        self.vip_stats.add(slot, FlowStat::Packets, 1);
        self.vip_stats.add(slot, FlowStat::Bytes, len as u64);
        self.send_via(frame, out, hop, ports, counters)
    }

    /// Sends out of data port `out` to next hop `hop`, resolving its MAC.
    fn send_via(
        &mut self,
        frame: &mut [u8],
        out: usize,
        hop: IpAddr,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        if ports.get(out).is_none() {
            return drop(counters, Counter::DropNoRoute);
        }
        let slot = match self.neighbors.slot(hop) {
            Some(slot) => slot,
            // Unknown: a new pending entry with the request due now, or none
            // for a full table.
            None => {
                if self.neighbors.resolve(hop, self.now_ms) == Resolution::Request {
                    let _ = self.requests.try_push(NeighRequest {
                        port: out,
                        target: hop,
                    });
                }
                return drop(counters, Counter::DropNeighborUnresolved);
            }
        };
        self.send_to_hop(frame, out, slot, ports, counters)
    }

    /// Sends out of data port `out` to the next hop in neighbour slot `hop`.
    #[inline(always)]
    fn send_to_hop(
        &mut self,
        frame: &mut [u8],
        out: usize,
        hop: Slot,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(port) = ports.get(out) else {
            return drop(counters, Counter::DropNoRoute);
        };
        let mac = match self.neighbors.resolve_at(hop, self.now_ms) {
            Resolution::Known(m) => m,
            Resolution::KnownRefresh(m) => {
                self.request(out, hop);
                m
            }
            r @ (Resolution::Request | Resolution::Pending) => {
                if r == Resolution::Request {
                    self.request(out, hop);
                }
                nat::set_macs(frame, port.mac, [0; 6]);
                return Verdict::Park {
                    port: out,
                    len: frame.len(),
                    hop,
                };
            }
            Resolution::Full => {
                return drop(counters, Counter::DropNeighborUnresolved);
            }
        };
        nat::set_macs(frame, port.mac, mac);
        Verdict::Send {
            port: out,
            len: frame.len(),
        }
    }

    /// What becomes of a frame that has waited `waited_ms` for next hop
    /// `hop` on `port` ([`Verdict::Park`]): sent once the hop is known,
    /// asked for again while it is not, dropped after
    /// [`neigh_queue::WAIT_MS`].
    pub fn parked_fate(&mut self, port: usize, hop: Slot, waited_ms: u64) -> neigh_queue::Fate {
        match self.neighbors.resolve_at(hop, self.now_ms) {
            Resolution::Known(m) | Resolution::KnownRefresh(m) => neigh_queue::Fate::Send(m),
            Resolution::Full => neigh_queue::Fate::Expire,
            _ if waited_ms >= neigh_queue::WAIT_MS => neigh_queue::Fate::Expire,
            Resolution::Request => {
                self.request(port, hop);
                neigh_queue::Fate::Wait
            }
            Resolution::Pending => {
                if self
                    .neighbors
                    .ask_again(hop, self.now_ms, neigh_queue::ASK_EVERY_MS)
                {
                    self.request(port, hop);
                }
                neigh_queue::Fate::Wait
            }
        }
    }

    #[cold]
    fn request(&mut self, port: usize, hop: Slot) {
        if let Some(target) = self.neighbors.ip_at(hop) {
            let _ = self.requests.try_push(NeighRequest { port, target });
        }
    }

    /// ICMP errors (unreachable, frag-needed, packet-too-big, time exceeded)
    /// about a tracked flow go to the other end of that flow, translated.
    fn icmp_error(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let inner = nat::icmp_error_inner(frame, p)?;
        // The quoted packet is one we sent; its reverse is what we received.
        let key = key_of(inner.dst, inner.src, inner.dport, inner.sport, inner.proto);
        let (id, dir) = self.conntrack.lookup(&key, self.now_ms)?;
        let e = self.conntrack.get(id);
        let rec = e.value;
        let (orig, reply) = (e.orig(), e.reply());
        let client = (orig.src_ip(), orig.sport);
        let vip = (orig.dst_ip(), orig.dport);
        let backend = (reply.src_ip(), reply.sport);
        // Where the backend's packets go: the local address (full-NAT) or the client (DNAT).
        let local = (reply.dst_ip(), reply.dport);
        counters.inc(Counter::IcmpErrorsTranslated);
        match dir {
            // We sent the quoted packet towards the backend: tell the client.
            Dir::Reply => {
                let outer_src = match rec.mode {
                    Mode::FullNat => Some(vip.0),
                    Mode::Dnat => None,
                };
                let ok = nat::rewrite_icmp_error(
                    frame,
                    p,
                    outer_src,
                    Some(client.0),
                    Some(client),
                    Some(vip),
                );
                if ok.is_err() || nat::decrement_ttl(frame, p).is_err() {
                    return Some(drop(counters, Counter::DropSlowpathUnhandled));
                }
                let out = rec.client_port as usize;
                let port = ports.get(out)?;
                nat::set_macs(frame, port.mac, rec.client_mac);
                Some(Verdict::Send {
                    port: out,
                    len: frame.len(),
                })
            }
            // We sent the quoted packet towards the client: tell the backend.
            Dir::Original => {
                let outer_src = match rec.mode {
                    Mode::FullNat => Some(local.0),
                    Mode::Dnat => None,
                };
                let ok = nat::rewrite_icmp_error(
                    frame,
                    p,
                    outer_src,
                    Some(backend.0),
                    Some(backend),
                    Some(local),
                );
                if ok.is_err() || nat::decrement_ttl(frame, p).is_err() {
                    return Some(drop(counters, Counter::DropSlowpathUnhandled));
                }
                Some(self.send_to_hop(frame, rec.backend_port as usize, rec.hop, ports, counters))
            }
        }
    }
}

/// The checksum changes of a flow's rewrites (see [`FlowRec::fwd`]).
fn flow_deltas(mode: Mode, orig: &FlowKey, reply: &FlowKey) -> (nat::Deltas, nat::Deltas) {
    let (v4, src, dst) = (!orig.v6, (&orig.src, orig.sport), (&orig.dst, orig.dport));
    let to_backend = (&reply.src, reply.sport);
    match mode {
        Mode::FullNat => nat::deltas_both(v4, src, dst, (&reply.dst, reply.dport), to_backend),
        // The backend's packets to the client: from the VIP.
        Mode::Dnat => (
            nat::deltas(v4, src, dst, None, Some(to_backend)),
            nat::deltas(v4, to_backend, (&reply.dst, reply.dport), Some(dst), None),
        ),
    }
}

/// Rewrites a client's packet for its backend: the reply key reversed
/// (DNAT keeps the client's source).
#[inline(always)]
fn translate_client(
    frame: &mut [u8],
    p: &Parsed,
    rec: &FlowRec,
    orig: &FlowKey,
    reply: &FlowKey,
) -> Result<(), Counter> {
    if orig.v6 != reply.v6 {
        return Err(Counter::DropSlowpathUnhandled);
    }
    let src = match rec.mode {
        Mode::FullNat => Some((&reply.dst, reply.dport)),
        Mode::Dnat => None,
    };
    nat::forward(frame, p, src, Some((&reply.src, reply.sport))).map_err(forward_drop)?;
    if rec.ts_on() {
        if let Some(seg) = frame.get_mut(p.l4_offset..) {
            tstamp::shift_tsval(seg, rec.ts_delta);
        }
    }
    Ok(())
}

/// The counter of a refused rewrite.
#[cold]
fn forward_drop(e: nat::ForwardError) -> Counter {
    match e {
        nat::ForwardError::TtlExpired => Counter::DropTtlExceeded,
        nat::ForwardError::Nat(_) => Counter::DropSlowpathUnhandled,
    }
}

#[cold]
#[inline(never)]
fn drop(counters: &mut Counters, c: Counter) -> Verdict {
    counters.inc(c);
    Verdict::Drop(c)
}

/// The express lane against the general path: two appliances, one with the
/// lane and one without, get the same packets (handshakes, data both ways,
/// FINs and RSTs, and the same packets damaged); every verdict, every byte
/// sent, every counter, statistic and connection state must agree.
#[cfg(test)]
mod express_tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use conf::state::{FlowStat, FlowStats};
    use conf::Config;
    use etherparse::{PacketBuilder, TcpHeader};

    use super::*;
    use crate::neigh::NeighborSync;
    use crate::pipeline::Pipeline;
    use crate::port::ports_from_config;

    const EXT: usize = 0;
    const INT: usize = 1;
    const EXT_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
    const INT_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
    const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0xc1, 1];
    const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 0xb1, 1];

    const CONFIG: &str = r#"
instance = "express"
[dataplane]
main_lcore = 0
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "net_null0"
addresses = ["10.1.0.1/24", "fd00:1::1/64"]
[[port]]
name = "int"
devargs = "net_null1"
addresses = ["10.2.0.1/16", "fd00:2::1/64"]
local_addresses = ["10.2.0.1", "fd00:2::1"]
local_port_range = [1024, 65535]
[mgmt]
listen = "unix:///run/border/express.sock"

[[vip]]
name = "fnat4"
address = "10.1.0.100"
port = 80
mode = "fullnat"
[[vip.backend]]
address = "10.2.0.10"
port = 8080
[[vip.backend]]
address = "10.2.0.11"
port = 8080

[[vip]]
name = "dnat4"
address = "10.1.0.101"
port = 80
mode = "dnat"
[[vip.backend]]
address = "10.2.0.20"
port = 8080

[[vip]]
name = "fnat6"
address = "fd00:1::100"
port = 80
mode = "fullnat"
[[vip.backend]]
address = "fd00:2::10"
port = 8080

[[vip]]
name = "udp4"
address = "10.1.0.100"
port = 53
protocol = "udp"
mode = "fullnat"
[[vip.backend]]
address = "10.2.0.30"
port = 5353

[[vip]]
name = "pp4"
address = "10.1.0.102"
port = 80
mode = "fullnat"
proxy_protocol = "v2"
[[vip.backend]]
address = "10.2.0.40"
port = 8080

[[vip]]
name = "udpdnat4"
address = "10.1.0.101"
port = 53
protocol = "udp"
mode = "dnat"
[[vip.backend]]
address = "10.2.0.21"
port = 5353

[[vip]]
name = "dnat6"
address = "fd00:1::101"
port = 80
mode = "dnat"
[[vip.backend]]
address = "fd00:2::20"
port = 8080

[[vip]]
name = "pp6"
address = "fd00:1::102"
port = 80
mode = "fullnat"
proxy_protocol = "v2"
[[vip.backend]]
address = "fd00:2::40"
port = 8080
"#;

    fn node(express: bool) -> Pipeline {
        let cfg = Config::from_toml_str(CONFIG, "express.toml").expect("config");
        let mut lb = Lb::new(
            0,
            1,
            256,
            cfg.dataplane.timeouts,
            NeighborSync::new(1),
            FlowStats::detached(64),
            FlowStats::detached(64),
        );
        for v in &cfg.vips {
            for b in &v.backends {
                lb.neighbors.learn(b.address, BACKEND_MAC, 0);
            }
        }
        lb.adopt(crate::standalone::adopted_from_config(&cfg, 1).expect("tables"));
        lb.express_off = !express;
        Pipeline::new(ports_from_config(&cfg, &[EXT_MAC, INT_MAC], false), lb)
    }

    /// One connection of the test: its client end and VIP, and what the
    /// appliance made of them (the backend's view), once known.
    #[derive(Clone, Copy, Debug)]
    struct Conn {
        client: (IpAddr, u16),
        vip: (IpAddr, u16),
        udp: bool,
        /// (backend, local-or-client) as the backend sees the connection.
        seen: Option<((IpAddr, u16), (IpAddr, u16))>,
    }

    #[allow(clippy::too_many_arguments)]
    fn frame(
        smac: [u8; 6],
        dmac: [u8; 6],
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        udp: bool,
        flags: u8,
        ttl: u8,
        payload: &[u8],
    ) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(smac, dmac);
        let mut out = Vec::new();
        let b = match (src.0, dst.0) {
            (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), ttl),
            (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), ttl),
            _ => unreachable!(),
        };
        if udp {
            b.udp(src.1, dst.1).write(&mut out, payload).unwrap();
        } else {
            let mut h = TcpHeader::new(src.1, dst.1, 1000, 4096);
            h.fin = flags & 0x01 != 0;
            h.syn = flags & 0x02 != 0;
            h.rst = flags & 0x04 != 0;
            h.psh = flags & 0x08 != 0;
            h.ack = flags & 0x10 != 0;
            h.acknowledgment_number = 7;
            b.tcp_header(h).write(&mut out, payload).unwrap();
        }
        out
    }

    /// Addresses and ports of a frame the appliance sent: (src, dst).
    fn ends(f: &[u8]) -> ((IpAddr, u16), (IpAddr, u16)) {
        let p = crate::wire::parse_frame(f).expect("sent frames parse");
        let l3 = p.l3_offset;
        let (s, d) = match p.l3 {
            L3Kind::Ipv4 => (
                IpAddr::from(<[u8; 4]>::try_from(&f[l3 + 12..l3 + 16]).unwrap()),
                IpAddr::from(<[u8; 4]>::try_from(&f[l3 + 16..l3 + 20]).unwrap()),
            ),
            _ => (
                IpAddr::from(<[u8; 16]>::try_from(&f[l3 + 8..l3 + 24]).unwrap()),
                IpAddr::from(<[u8; 16]>::try_from(&f[l3 + 24..l3 + 40]).unwrap()),
            ),
        };
        let pt = p.ports.expect("ports");
        ((s, pt.src), (d, pt.dst))
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Runs one frame through both appliances and checks they agree.
    /// Each frame gets room to grow, as in an mbuf (a PROXY header).
    fn both(a: &mut Pipeline, b: &mut Pipeline, port: usize, f: &[u8]) -> Option<Vec<u8>> {
        let mut fa = f.to_vec();
        fa.resize(f.len() + 256, 0);
        let mut fb = fa.clone();
        let va = a.process_buf(port, &mut fa, f.len());
        let vb = b.process_buf(port, &mut fb, f.len());
        assert_eq!(va, vb, "verdicts differ for {f:02x?}");
        assert_eq!(fa, fb, "frames differ for {f:02x?}");
        assert_eq!(
            a.counters.nonzero(),
            b.counters.nonzero(),
            "counters after {f:02x?}"
        );
        match va {
            Verdict::Send { len, .. } => Some(fa[..len].to_vec()),
            _ => None,
        }
    }

    fn tick(a: &mut Pipeline, b: &mut Pipeline, now: u64) {
        let Pipeline { lb, counters, .. } = a;
        lb.tick(now, counters);
        let Pipeline { lb, counters, .. } = b;
        lb.tick(now, counters);
    }

    /// A DNAT backend's packets to the client take the express lane (they
    /// used to go the general path only) and come out the same: from the
    /// VIP, to the client, out of the client's port, checksums right.
    #[test]
    fn dnat_replies_take_the_express_lane() {
        let (mut a, mut b) = (node(true), node(false));
        tick(&mut a, &mut b, 1_000);
        let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
        let client = (v4([10, 1, 0, 50]), 40_000);
        for udp in [false, true] {
            let vip = (v4([10, 1, 0, 101]), if udp { 53 } else { 80 });
            let flags = if udp { 0 } else { 0x02 };
            let syn = frame(CLIENT_MAC, EXT_MAC, client, vip, udp, flags, 64, b"q");
            let out = both(&mut a, &mut b, EXT, &syn).expect("forwarded to a backend");
            let (from, backend) = ends(&out);
            assert_eq!(from, client, "DNAT keeps the client's source");
            let taken = a.lb.express_taken;
            for (flags, payload) in [(0x12, &b""[..]), (0x18, &b"reply"[..])] {
                let reply = frame(
                    BACKEND_MAC,
                    INT_MAC,
                    backend,
                    client,
                    udp,
                    flags,
                    64,
                    payload,
                );
                let out = both(&mut a, &mut b, INT, &reply).expect("reply forwarded");
                assert_eq!(ends(&out), (vip, client), "from the VIP to the client");
                assert_eq!(&out[..12], &[CLIENT_MAC, EXT_MAC].concat()[..]);
                let p = crate::wire::parse_frame(&out).expect("valid frame");
                assert_eq!(p.ttl, 63);
                use crate::wire::checksum;
                assert!(checksum::verify(&out[14..34]), "IPv4 header checksum");
                let at = p.l4_offset + if udp { 6 } else { 16 };
                let mut seg = out[p.l4_offset..].to_vec();
                seg[at - p.l4_offset..at - p.l4_offset + 2].fill(0);
                let (IpAddr::V4(s), IpAddr::V4(d)) = (vip.0, client.0) else {
                    unreachable!()
                };
                let proto = if udp { ip_proto::UDP } else { ip_proto::TCP };
                let mut want = checksum::l4_checksum_v4(s, d, proto, &seg);
                if udp {
                    want = checksum::udp_finish(want);
                }
                assert_eq!(out[at..at + 2], want.to_be_bytes(), "L4 checksum");
            }
            // The SYN-ACK changes the TCP state (the general path); the
            // data segment, and both UDP replies, are the lane's.
            let express = if udp { 2 } else { 1 };
            assert_eq!(a.lb.express_taken - taken, express, "udp {udp}");
            assert_eq!(b.lb.express_taken, 0);
        }
    }

    /// A TCP segment with sequence and acknowledgement numbers and at most
    /// one SACK block (after a NOP, so its edges sit at odd offsets).
    #[allow(clippy::too_many_arguments)]
    fn numbered(
        smac: [u8; 6],
        dmac: [u8; 6],
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        flags: u8,
        (seq, ack): (u32, u32),
        sack: Option<(u32, u32)>,
        payload: &[u8],
    ) -> Vec<u8> {
        use etherparse::TcpOptionElement;
        let b = PacketBuilder::ethernet2(smac, dmac);
        let b = match (src.0, dst.0) {
            (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
            (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
            _ => unreachable!("one family per flow"),
        };
        let mut h = TcpHeader::new(src.1, dst.1, seq, 4096);
        h.fin = flags & 0x01 != 0;
        h.syn = flags & 0x02 != 0;
        h.rst = flags & 0x04 != 0;
        h.psh = flags & 0x08 != 0;
        h.ack = flags & 0x10 != 0;
        h.acknowledgment_number = ack;
        if let Some(block) = sack {
            h.set_options(&[
                TcpOptionElement::Noop,
                TcpOptionElement::SelectiveAcknowledgement(block, [None, None, None]),
            ])
            .unwrap();
        }
        let mut out = Vec::new();
        b.tcp_header(h).write(&mut out, payload).unwrap();
        out
    }

    /// PROXY protocol flows past their header take the express lane both
    /// ways (sequence numbers shifted, acknowledgements and SACK edges
    /// mapped back, values inside the header too), exactly as the general
    /// path translates them; FINs, RSTs and retransmissions of the first
    /// segment included, sequence numbers wrapping.
    #[test]
    fn steady_proxy_flows_take_the_express_lane_as_the_general_path() {
        const ACK: u8 = 0x10;
        const PSH_ACK: u8 = 0x18;
        let (mut a, mut b) = (node(true), node(false));
        tick(&mut a, &mut b, 1_000);
        let mut rng = Rng(0x5EED_0F9E_3779_B9A1);
        let mut conns = Vec::new();
        let mut steady_frames = 0;
        for c in 0..16u16 {
            // IPv4 and IPv6 VIPs in turn.
            let (vip, client, headers) = if c % 2 == 0 {
                let vip = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 102));
                (vip, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 60 + c as u8)), 54)
            } else {
                let vip = IpAddr::V6("fd00:1::102".parse().unwrap());
                (
                    vip,
                    IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x60 + c)),
                    74,
                )
            };
            let (vip, client) = ((vip, 80), (client, 30_000 + c));
            // Some connections start right below the wrap of the sequence space.
            let isn = if c % 3 == 0 {
                u32::MAX - 2 - u32::from(c)
            } else {
                rng.next() as u32
            };
            let bisn = rng.next() as u32;
            let c1 = isn.wrapping_add(1);
            let from_client = |flags, seq: u32, ack: u32, payload: &[u8]| {
                numbered(
                    CLIENT_MAC,
                    EXT_MAC,
                    client,
                    vip,
                    flags,
                    (seq, ack),
                    None,
                    payload,
                )
            };
            let syn = from_client(0x02, isn, 0, &[]);
            let out = both(&mut a, &mut b, EXT, &syn).expect("SYN forwarded");
            let (local, backend) = ends(&out);
            let from_backend = |flags, seq: u32, ack: u32, sack, payload: &[u8]| {
                numbered(
                    BACKEND_MAC,
                    INT_MAC,
                    backend,
                    local,
                    flags,
                    (seq, ack),
                    sack,
                    payload,
                )
            };
            let b1 = bisn.wrapping_add(1);
            both(
                &mut a,
                &mut b,
                INT,
                &from_backend(0x12, bisn, c1, None, &[]),
            )
            .expect("SYN-ACK");
            both(&mut a, &mut b, EXT, &from_client(ACK, c1, b1, &[])).expect("ACK");
            let first = b"GET / HTTP/1.0\r\n\r\n";
            let out = both(&mut a, &mut b, EXT, &from_client(PSH_ACK, c1, b1, first))
                .expect("first data");
            let header = out.len() - headers - first.len();
            assert!(header >= 16, "the header goes into the first data");
            let edge = c1.wrapping_add(header as u32);
            let sent = edge.wrapping_add(first.len() as u32);
            both(&mut a, &mut b, INT, &from_backend(ACK, b1, sent, None, &[])).expect("ACK of it");
            let key = key_of(client.0, vip.0, client.1, vip.1, ip_proto::TCP);
            let (id, _) = a.lb.conntrack.lookup(&key, 1_000).expect("entry");
            assert!(a.lb.conntrack.get(id).value.pp.steady());

            let taken = a.lb.express_taken;
            let mut ours = first.len() as u32;
            for step in 0..60u32 {
                let payload = vec![step as u8; rng.below(30) as usize];
                let frame = match rng.below(9) {
                    // Client data and ACKs, now and then a retransmission
                    // of the first segment.
                    0..=2 => from_client(PSH_ACK, c1.wrapping_add(ours), b1, &payload),
                    3 => from_client(PSH_ACK, c1, b1, first),
                    // Backend data acknowledging something past, inside or
                    // before the header, some with a SACK block.
                    4..=6 => {
                        let ack = match rng.below(4) {
                            0 => c1.wrapping_add(rng.below(u64::from(header as u32)) as u32),
                            1 => isn,
                            _ => sent.wrapping_add(rng.below(u64::from(ours)) as u32),
                        };
                        let sack = (rng.below(3) == 0).then(|| {
                            let l = edge.wrapping_add(rng.below(40) as u32);
                            (l, l.wrapping_add(8))
                        });
                        from_backend(PSH_ACK, b1, ack, sack, &payload)
                    }
                    7 => from_client(ACK, c1.wrapping_add(ours), b1, &[]),
                    _ => from_backend(ACK, b1, sent, Some((c1, edge)), &[]),
                };
                // Some damaged, as on a bad link: a flipped bit in the
                // headers or a cut frame.
                let port = if frame[6..12] == CLIENT_MAC { EXT } else { INT };
                let mut frame = frame;
                match rng.below(12) {
                    0 => {
                        let at = rng.below(frame.len().min(70) as u64) as usize;
                        frame[at] ^= 1 << rng.below(8);
                    }
                    1 => frame.truncate(rng.below(frame.len() as u64) as usize),
                    _ => ours += payload.len() as u32,
                }
                if both(&mut a, &mut b, port, &frame).is_some() {
                    steady_frames += 1;
                }
            }
            // A FIN each way, then an RST from the client.
            both(
                &mut a,
                &mut b,
                EXT,
                &from_client(0x11, c1.wrapping_add(ours), b1, &[]),
            );
            both(
                &mut a,
                &mut b,
                INT,
                &from_backend(0x11, b1, sent, None, &[]),
            );
            if c % 2 == 0 {
                both(
                    &mut a,
                    &mut b,
                    EXT,
                    &from_client(0x14, c1.wrapping_add(ours + 1), b1, &[]),
                );
            }
            assert!(
                a.lb.express_taken - taken >= 40,
                "express lane took {} of connection {c}'s frames",
                a.lb.express_taken - taken
            );
            conns.push(Conn {
                client,
                vip,
                udp: false,
                seen: Some((backend, local)),
            });
        }
        assert!(steady_frames > 800, "{steady_frames} frames sent");
        assert_eq!(b.lb.express_taken, 0);
        same_state(&a, &b, &conns, 1_000);
    }

    #[test]
    fn what_every_packet_reads_is_in_two_cache_lines() {
        use core::mem::{align_of, offset_of, size_of};
        type E = crate::conntrack::Entry<FlowRec>;
        assert_eq!(offset_of!(FlowRec, conn_id), 32, "hot part of FlowRec");
        assert_eq!(size_of::<FlowRec>() - size_of::<PpFlow>(), 40);
        assert_eq!(align_of::<E>(), 64);
        assert!(offset_of!(E, value) + 32 <= 128);
        assert_eq!(size_of::<E>(), 192);
    }

    #[test]
    fn express_lane_is_the_general_path() {
        for seed in [
            0x9E37_79B9_7F4A_7C15,
            0x1234_5678_9ABC_DEF1,
            0x0BAD_CAFE_F00D_D00D,
        ] {
            compare(seed);
        }
    }

    /// The VIPs of `CONFIG` the differential tests send traffic to, with
    /// whether they are UDP: both modes, both families, TCP and UDP, PROXY.
    fn traffic_vips() -> [((IpAddr, u16), bool); 7] {
        let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
        let v6 = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().unwrap());
        [
            ((v4([10, 1, 0, 100]), 80), false),
            ((v4([10, 1, 0, 101]), 80), false),
            ((v6("fd00:1::100"), 80), false),
            ((v4([10, 1, 0, 100]), 53), true),
            ((v4([10, 1, 0, 102]), 80), false),
            ((v4([10, 1, 0, 101]), 53), true),
            ((v6("fd00:1::101"), 80), false),
        ]
    }

    fn compare(seed: u64) {
        let (mut a, mut b) = (node(true), node(false));
        let mut rng = Rng(seed);
        let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
        let vips = traffic_vips();
        let mut conns = Vec::new();
        for i in 0..60u16 {
            let (vip, udp) = vips[usize::from(i) % vips.len()];
            let client = match vip.0 {
                IpAddr::V4(_) => v4([10, 1, 0, 50 + (i % 7) as u8]),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x50 + i)),
            };
            conns.push(Conn {
                client: (client, 20_000 + i),
                vip,
                udp,
                seen: None,
            });
        }
        let mut now = 1_000;
        tick(&mut a, &mut b, now);
        let mut sent = 0;
        for round in 0..4_000u32 {
            let i = rng.below(conns.len() as u64) as usize;
            let c = conns[i];
            let (port, f) = random_frame(&mut rng, &c, round);
            if let Some(out) = both(&mut a, &mut b, port, &f) {
                sent += 1;
                if port == EXT && out.len() > 54 - 20 {
                    if let Ok(p) = crate::wire::parse_frame(&out) {
                        if p.ports.is_some() && (p.l4_proto == ip_proto::UDP) == c.udp {
                            let (src, dst) = ends(&out);
                            if dst.1 == 8080 || dst.1 == 5353 {
                                conns[i].seen = Some((dst, src));
                            }
                        }
                    }
                }
            }
            if rng.below(50) == 0 {
                let span = if rng.below(20) == 0 { 400_000 } else { 2_000 };
                now += rng.below(span);
                tick(&mut a, &mut b, now);
            }
        }
        assert!(sent > 1_000, "only {sent} frames went through");
        assert!(
            a.lb.express_taken > 1_000 && b.lb.express_taken == 0,
            "express lane took {} frames",
            a.lb.express_taken
        );
        same_state(&a, &b, &conns, now);
    }

    /// Same connections in the same states, same statistics.
    fn same_state(a: &Pipeline, b: &Pipeline, conns: &[Conn], now: u64) {
        assert_eq!(a.lb.conntrack.len(), b.lb.conntrack.len());
        for c in conns {
            let proto = if c.udp { ip_proto::UDP } else { ip_proto::TCP };
            let key = key_of(c.client.0, c.vip.0, c.client.1, c.vip.1, proto);
            let sa = a.lb.conntrack.lookup(&key, now).map(|(id, _)| {
                let e = a.lb.conntrack.get(id);
                (e.state(), e.expires_at(), *e.reply(), e.value)
            });
            let sb = b.lb.conntrack.lookup(&key, now).map(|(id, _)| {
                let e = b.lb.conntrack.get(id);
                (e.state(), e.expires_at(), *e.reply(), e.value)
            });
            assert_eq!(sa, sb, "{c:?}");
        }
        for slot in 0..64 {
            for stat in FlowStat::ALL {
                assert_eq!(
                    a.lb.vip_stats.get(slot, stat),
                    b.lb.vip_stats.get(slot, stat)
                );
                assert_eq!(
                    a.lb.backend_stats.get(slot, stat),
                    b.lb.backend_stats.get(slot, stat)
                );
            }
        }
        assert_eq!(a.lb.pp.emits.len(), b.lb.pp.emits.len());
    }

    /// A random frame of the differential tests: a segment of connection
    /// `c` from its client or (once seen) its backend, mostly plain, some
    /// opening or closing, some with a low TTL, some damaged.
    fn random_frame(rng: &mut Rng, c: &Conn, round: u32) -> (usize, Vec<u8>) {
        let flags = match rng.below(40) {
            0 => 0x02,
            1 => 0x11,
            2 => 0x04,
            3 => 0x14,
            4 => 0x12,
            5 => 0x01 | 0x02,
            _ => 0x18,
        };
        let ttl = match rng.below(30) {
            0 => 0,
            1 => 1,
            2 => 2,
            _ => 64,
        };
        let payload = vec![round as u8; rng.below(24) as usize];
        let from_backend = c.seen.is_some() && rng.below(2) == 0;
        let (port, mut f) = match c.seen {
            Some((backend, to)) if from_backend => (
                INT,
                frame(
                    BACKEND_MAC,
                    INT_MAC,
                    backend,
                    to,
                    c.udp,
                    flags,
                    ttl,
                    &payload,
                ),
            ),
            _ => (
                EXT,
                frame(
                    CLIENT_MAC, EXT_MAC, c.client, c.vip, c.udp, flags, ttl, &payload,
                ),
            ),
        };
        match rng.below(12) {
            0 => {
                let at = rng.below(f.len().min(70) as u64) as usize;
                f[at] ^= 1 << rng.below(8);
            }
            1 => {
                let at = rng.below(f.len().min(70) as u64) as usize;
                f[at] = rng.next() as u8;
            }
            2 => f.truncate(rng.below(f.len() as u64) as usize),
            3 => {
                let tag = [0x81, 0x00, 0x00, rng.next() as u8];
                f.splice(12..12, tag);
            }
            4 => f[0] = 0xff, // not to the port's MAC: never prepared
            _ => {}
        }
        (port, f)
    }

    #[derive(Clone)]
    struct TestClock(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl crate::worker::Clock for TestClock {
        fn now_ms(&self) -> u64 {
            self.0.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    type TestWorker =
        crate::worker::Worker<crate::io::MemPorts, TestClock, crate::worker::NoTables>;

    fn worker(express: bool, clock: &TestClock) -> TestWorker {
        crate::worker::Worker::new(
            crate::io::MemPorts::new(2),
            node(express),
            crate::worker::Poll::Busy,
            clock.clone(),
            crate::worker::NoTables,
            crate::worker::Handoff::new(1),
        )
    }

    /// A table generation that shows up at the worker's `at`-th look
    /// between bursts.
    struct ArrivesBetweenBursts {
        looks: std::cell::Cell<usize>,
        at: usize,
        next: Option<Adopted<'static>>,
    }

    impl crate::worker::TableSource for ArrivesBetweenBursts {
        fn poll(&mut self, _current: Option<u64>) -> crate::worker::TablePoll {
            match self.next.take_if(|_| self.looks.get() >= self.at) {
                Some(t) => crate::worker::TablePoll::New(Box::new(t)),
                None => crate::worker::TablePoll::Nothing,
            }
        }
        fn has_news(&self, _current: Option<u64>) -> bool {
            self.looks.set(self.looks.get() + 1);
            self.looks.get() >= self.at && self.next.is_some()
        }
    }

    /// The worker looks for a new generation before every RX burst, not
    /// once per poll iteration, and adopts it right after the burst it
    /// already prepared under the old one; the rest waits for the next
    /// iteration (and runs under the new generation).
    #[test]
    fn a_new_generation_is_seen_between_bursts() {
        let cfg = Config::from_toml_str(CONFIG, "express.toml").expect("config");
        for (at, first) in [(1, 32), (3, 96)] {
            let clock = TestClock(Default::default());
            let source = ArrivesBetweenBursts {
                looks: Default::default(),
                at,
                next: Some(crate::standalone::adopted_from_config(&cfg, 2).expect("tables")),
            };
            let mut w = crate::worker::Worker::new(
                crate::io::MemPorts::new(2),
                node(true),
                crate::worker::Poll::Busy,
                clock.clone(),
                source,
                crate::worker::Handoff::new(1),
            );
            let vip = (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 100)), 80);
            for i in 0..100u16 {
                let client = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)), 30_000 + i);
                w.io.inject(
                    EXT,
                    &frame(CLIENT_MAC, EXT_MAC, client, vip, false, 0x02, 64, &[]),
                );
            }
            let before = w.pipeline.lb.generation();
            assert_eq!(w.poll_once(), first, "at {at}");
            assert_eq!(w.io.take_tx(INT).len(), first, "at {at}: SYNs forwarded");
            assert_eq!(
                w.pipeline.lb.generation(),
                Some(2),
                "at {at}: adopted after burst"
            );
            assert_ne!(before, Some(2));
            assert_eq!(
                w.io.rx[EXT].len(),
                100 - first,
                "at {at}: left for the next round"
            );
            assert_eq!(w.poll_once(), 100 - first);
            assert_eq!(w.io.take_tx(INT).len(), 100 - first);
        }
    }

    /// The worker's burst passes (prepare and prefetch the whole burst,
    /// then each frame) against the general path frame by frame in the
    /// same worker loop: bursts of 1 to 40 frames over both ports, several
    /// frames of one connection in a burst (a RST or FIN ahead of a data
    /// segment, a SYN re-opening a closed tuple), expiry in between.
    #[test]
    fn express_bursts_are_the_general_path() {
        for seed in [0x51ED_2701_F00D_0001_u64, 0x0DDB_A11C_AFE5_7EA7] {
            compare_bursts(seed);
        }
    }

    fn compare_bursts(seed: u64) {
        use std::sync::atomic::Ordering;
        let clock = TestClock(Default::default());
        let (mut a, mut b) = (worker(true, &clock), worker(false, &clock));
        let mut rng = Rng(seed);
        let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
        let vips = traffic_vips();
        // Few connections, so that a burst often holds several frames of one.
        let mut conns: Vec<Conn> = (0..12u16)
            .map(|i| {
                let (vip, udp) = vips[usize::from(i) % vips.len()];
                let client = match vip.0 {
                    IpAddr::V4(_) => v4([10, 1, 0, 50 + (i % 7) as u8]),
                    IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x50 + i)),
                };
                Conn {
                    client: (client, 20_000 + i),
                    vip,
                    udp,
                    seen: None,
                }
            })
            .collect();
        let mut now = 1_000;
        clock.0.store(now, Ordering::Relaxed);
        let mut sent = 0;
        for round in 0..400u32 {
            for _ in 0..=rng.below(40) {
                let i = rng.below(conns.len() as u64) as usize;
                let (port, f) = random_frame(&mut rng, &conns[i], round);
                a.io.inject(port, &f);
                b.io.inject(port, &f);
            }
            while a.io.rx.iter().any(|q| !q.is_empty()) {
                a.poll_once();
                b.poll_once();
            }
            assert!(b.io.rx.iter().all(|q| q.is_empty()));
            for port in [EXT, INT] {
                let (ta, tb) = (a.io.take_tx(port), b.io.take_tx(port));
                assert_eq!(ta, tb, "round {round}: frames sent on port {port}");
                sent += ta.len();
            }
            assert_eq!(
                a.pipeline.counters.nonzero(),
                b.pipeline.counters.nonzero(),
                "round {round}: counters"
            );
            // Learn where the connections went.
            for c in conns.iter_mut() {
                let proto = if c.udp { ip_proto::UDP } else { ip_proto::TCP };
                let key = key_of(c.client.0, c.vip.0, c.client.1, c.vip.1, proto);
                if let Some((id, Dir::Original)) = a.pipeline.lb.conntrack.lookup(&key, now) {
                    let r = *a.pipeline.lb.conntrack.get(id).reply();
                    c.seen = Some(((r.src_ip(), r.sport), (r.dst_ip(), r.dport)));
                }
            }
            if rng.below(10) == 0 {
                let span = if rng.below(20) == 0 { 400_000 } else { 2_000 };
                now += rng.below(span);
                clock.0.store(now, Ordering::Relaxed);
            }
        }
        let (pa, pb) = (&a.pipeline, &b.pipeline);
        assert!(sent > 2_000, "only {sent} frames went through");
        assert!(
            pa.lb.express_taken > 2_000 && pb.lb.express_taken == 0,
            "express lane took {} frames",
            pa.lb.express_taken
        );
        same_state(pa, pb, &conns, now);
    }
}
