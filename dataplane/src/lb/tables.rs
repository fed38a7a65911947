//! The table generation a worker adopted (VIPs, their backends and
//! Maglev rings, DNAT reverse map, resets), and its incremental adoption:
//! a VIP read from the same tables-region block as before keeps what the
//! worker derived from it.

use std::net::IpAddr;

use conf::flowhash::FlowHasher;
use conf::maglev::Modulus;
use conf::tables::{BackendRecord, BlockId, LimitsRecord, PrefixRecord};
use conf::{Mode, SynProxy};
use hashbrown::HashMap;

use super::admit::{Admission, VipAdmit};
use super::key::{to16, RawKey, RawMap, ResetKey, ResetWhy};
use crate::local_ports::{self, SetId};
use crate::neigh::Slot;
use crate::ppv2::PpConfig;
use crate::routes::Routes;

/// What a destination address is: a VIP address (of some port and
/// protocol) and/or a full-NAT local address with its pool's port range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct AddrClass {
    pub(super) vip: bool,
    pub(super) pool: Option<(u16, u16)>,
}

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
    pub ring: Ring<'t>,
    pub backends: Vec<BackendRt>,
    /// PROXY protocol v2 settings (off by default).
    pub proxy_protocol: PpConfig,
    /// Full-NAT TCP flows get their timestamps translated ([`tstamp`]).
    pub translate_timestamps: bool,
    /// `hash = "source"` (or `persistence_timeout`): the pick hashes the
    /// flow with source port 0.
    pub hash_source: bool,
    /// `persistence_timeout` in milliseconds (0: off).
    pub persist_ms: u32,
    /// A persistent VIP's backends that its ring can pick (by position in
    /// `backends`): a pin to any other is not followed. Empty unless
    /// `persist_ms` is set; built with the backends.
    pub in_ring: Vec<bool>,
    /// `syn_proxy`: when the worker answers SYNs with cookies.
    pub syn_proxy: SynProxy,
    /// The tables-region block the VIP was read from (`None`: built in
    /// process). [`Lb::adopt`] keeps the runtime of a VIP whose block the
    /// previous generation had too, instead of deriving it again.
    pub src: Option<VipSrc>,
    /// Backend records of a VIP read from a block, not yet turned into
    /// `backends`: [`Lb::adopt`] carries them over from the previous
    /// generation or builds them (then empty).
    records: &'t [BackendRecord],
    /// What the VIP admits (`[vip.limits]`), this worker's buckets and
    /// tables: carried over with the backends, or built by [`Lb::adopt`]
    /// from `admit_src`.
    pub admit: VipAdmit,
    admit_src: AdmitSrc<'t>,
}

/// What a VIP's [`VipAdmit`] is built from.
#[derive(Clone, Debug, Default)]
struct AdmitSrc<'t> {
    limits: LimitsRecord,
    prefixes: &'t [PrefixRecord],
    /// The block's backend records (their caps), or
    records: &'t [BackendRecord],
    /// the caps of an in-process VIP's backends.
    backend_max: Vec<u32>,
}

impl VipRt<'_> {
    /// Builds `in_ring` for a persistent VIP whose backends and ring were
    /// just built: one pass over the ring, off the packet path.
    pub(super) fn build_in_ring(&mut self) {
        self.in_ring.clear();
        if self.persist_ms == 0 {
            return;
        }
        self.in_ring.resize(self.backends.len(), false);
        for &i in self.ring.slots() {
            if let Some(e) = self.in_ring.get_mut(i as usize) {
                *e = true;
            }
        }
    }

    /// The backend a pin names, by its stable id (`hint`: where it was),
    /// if the ring can still pick it: its position.
    #[inline]
    pub(super) fn pinned_backend(&self, id: u32, hint: u32) -> Option<u32> {
        let at = match self.backends.get(hint as usize) {
            Some(b) if b.id == id => hint as usize,
            _ => self.backends.iter().position(|b| b.id == id)?,
        };
        self.in_ring
            .get(at)
            .copied()
            .unwrap_or(false)
            .then_some(at as u32)
    }

    /// Builds the VIP's admission state (a VIP whose backends were just
    /// built) and binds its caps to the shared counts.
    pub(super) fn build_admit(&mut self, admission: &mut Admission, seed: u64, now_ms: u64) {
        let src = &self.admit_src;
        let maxes: Vec<u32> = if src.records.is_empty() {
            src.backend_max.clone()
        } else {
            src.records.iter().map(|r| r.max_connections).collect()
        };
        self.admit = VipAdmit::new(src.limits, src.prefixes, maxes.into_iter(), seed, now_ms);
        if self.admit.active {
            let backends = self.backends.iter().map(|b| (b.id, b.stat_slot));
            admission.bind(&mut self.admit, (self.stat_key, self.stat_slot), backends);
        }
    }
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
    pub proxy_protocol: PpConfig,
    pub translate_timestamps: bool,
    /// `hash = "source"`.
    pub hash_source: bool,
    /// `persistence_timeout` in seconds (0: off).
    pub persistence_s: u32,
    /// `[vip.limits]`: the values, the allow/deny prefixes, and (in-process
    /// VIPs; empty for a block's, whose records carry them) the caps of
    /// the backends, in `backends` order.
    pub limits: LimitsRecord,
    pub prefixes: &'t [PrefixRecord],
    pub backend_max: Vec<u32>,
    pub syn_proxy: SynProxy,
    /// A VIP read in place from a validated tables-region block: its source
    /// and its backend records. Its backends are built (or carried over from
    /// the previous generation) by [`Lb::adopt`], not by [`Adopted::new`].
    pub block: Option<(VipSrc, &'t [BackendRecord])>,
}

/// A backend's runtime (statistics and neighbour slots unset), reached
/// through `routes`.
pub(super) fn backend_rt(
    routes: &Routes,
    mode: Mode,
    id: u32,
    addr: IpAddr,
    port: u16,
) -> BackendRt {
    let (out_port, next_hop) = routes.route(addr).unwrap_or((usize::MAX, addr));
    let local = match mode {
        Mode::FullNat => routes.pool_for(out_port, addr.is_ipv4()).map(|l| l.addr),
        Mode::Dnat | Mode::Dsr(_) => None,
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
pub(super) fn note_dnat(
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

/// A VIP's Maglev ring (indices into its backends) with its size's
/// reciprocal, so that a new flow's pick reduces its hash by a multiply
/// instead of a 64-bit divide ([`conf::maglev::Modulus`]: the same slot).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ring<'t> {
    slots: &'t [u32],
    modulus: Modulus,
}

impl<'t> Ring<'t> {
    pub fn new(slots: &'t [u32]) -> Self {
        // A ring is at most `MAX_MAGLEV_TABLE_SIZE` slots; a longer slice
        // (none is built) would pick among its first 2^32 - 1 only.
        let m = u32::try_from(slots.len()).unwrap_or(u32::MAX);
        Ring {
            slots,
            modulus: Modulus::new(m),
        }
    }

    /// The ring, slot by slot.
    #[inline(always)]
    pub fn slots(&self) -> &'t [u32] {
        self.slots
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The slot of flow hash `h`: `conf::maglev::slot(h, len)`.
    #[inline(always)]
    pub fn slot(&self, h: u64) -> usize {
        self.modulus.slot(h)
    }

    /// The backend (index into the VIP's backends) flow hash `h` picks,
    /// `None` for an empty ring.
    #[inline(always)]
    pub fn pick(&self, h: u64) -> Option<u32> {
        self.slots.get(self.slot(h)).copied()
    }

    /// Starts loading the slot flow hash `h` picks. A hint only.
    #[inline(always)]
    pub fn prefetch(&self, h: u64) {
        crate::conntrack::prefetch(self.slots.as_ptr().wrapping_add(self.slot(h)));
    }
}

/// `ring` if every entry indexes one of `n` backends, else empty (the VIP
/// then takes no new flows) and `refused` counts it.
pub(super) fn checked_ring<'t>(ring: &'t [u32], n: usize, refused: &mut usize) -> Ring<'t> {
    // One branch-free pass (vectorises).
    let max = ring.iter().fold(0u32, |m, &e| m.max(e));
    if ring.is_empty() || (max as usize) < n {
        Ring::new(ring)
    } else {
        *refused += 1;
        Ring::default()
    }
}

pub(super) type VipKey = (IpAddr, u16, u8);

/// A table generation adopted by a worker, with the lookup structures built
/// from it. Built off the fast path (allocation is fine here).
#[derive(Clone)]
pub struct Adopted<'t> {
    pub generation: u64,
    pub vips: Vec<VipRt<'t>>,
    /// (address, port, protocol) -> VIP index, on raw addresses.
    pub(super) by_key: RawMap<u32>,
    /// What a destination address is to this appliance, on raw addresses.
    pub(super) by_addr: RawMap<AddrClass>,
    /// DNAT backend (addr, port, proto) -> VIP index; None when ambiguous.
    pub(super) dnat_reverse: HashMap<VipKey, Option<u32>, ahash::RandomState>,
    /// `dnat_reverse` lacks the VIPs read from blocks: [`Lb::adopt`]
    /// completes it (patching the previous generation's where it can).
    dnat_stale: bool,
    /// [`Lb::adopt`] patched the previous generation's DNAT reverse map
    /// instead of building one.
    pub dnat_patched: bool,
    pub(super) hasher: FlowHasher,
    flow_hash_key: [u8; 16],
    pub routes: Routes,
    /// VIPs whose ring points outside their backend list: refused (empty
    /// ring) when their backends are built.
    pub refused: usize,
    /// VIPs [`Lb::adopt`] carried over from the previous generation, and
    /// VIPs whose backends it built (from block records or in
    /// [`Adopted::new`]).
    pub carried: usize,
    pub built: usize,
    /// Backends whose established flows are reset, and why (`on_down =
    /// "reset"`, health-down, VIP not failing open; or killed by the
    /// operator): see [`Adopted::with_resets`].
    resets: HashMap<ResetKey, ResetWhy, ahash::RandomState>,
    /// `resets` is not empty: the express lane leaves every packet to the
    /// general path, which checks each flow's backend.
    pub reset_pending: bool,
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
                Some((_, records)) => (Vec::new(), Ring::new(v.ring), records),
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
                proxy_protocol: v.proxy_protocol,
                translate_timestamps: v.translate_timestamps,
                hash_source: v.hash_source,
                persist_ms: v.persistence_s.saturating_mul(1000),
                in_ring: Vec::new(),
                syn_proxy: v.syn_proxy,
                src: v.block.map(|(src, _)| src),
                records,
                admit: VipAdmit::default(),
                admit_src: AdmitSrc {
                    limits: v.limits,
                    prefixes: v.prefixes,
                    records,
                    backend_max: v.backend_max,
                },
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
            flow_hash_key,
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
    /// picks a backend again (see `tables_source::resets_from_view`). A
    /// backend listed twice keeps the last reason.
    pub fn with_resets(mut self, keys: impl IntoIterator<Item = (ResetKey, ResetWhy)>) -> Self {
        self.resets.extend(keys);
        self.reset_pending = !self.resets.is_empty();
        self
    }

    /// Whether flows to this backend are reset, and why.
    pub fn resets(&self, k: &ResetKey) -> Option<ResetWhy> {
        if !self.reset_pending {
            return None;
        }
        self.resets.get(k).copied()
    }

    /// Gives VIP `i` its backends if it has only block records: those of the
    /// previous generation's VIP with the same source (taken out of `old`,
    /// with their statistics and neighbour slots), else built from the
    /// records (ring checked). Returns the old VIP's position if they were
    /// carried over.
    pub(super) fn resolve_vip(
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
                    v.admit = std::mem::take(&mut ov.admit);
                    v.in_ring = std::mem::take(&mut ov.in_ring);
                    v.stat_slot = ov.stat_slot;
                    v.records = &[];
                    if ov.ring.is_empty() && !v.ring.is_empty() {
                        // Refused before: the same bytes still are.
                        v.ring = Ring::default();
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
        v.ring = checked_ring(v.ring.slots(), v.backends.len(), &mut self.refused);
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
    pub(super) fn finish_dnat(&mut self, old: Option<&mut Adopted<'t>>, built: &[usize]) {
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
    pub(super) fn patch_dnat(
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

    /// The key of the flow hash (seeds per-source tables).
    pub(super) fn flow_hash_key(&self) -> [u8; 16] {
        self.flow_hash_key
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
}
