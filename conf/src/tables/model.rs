//! The generation model: plain Rust values that the publisher builds from
//! config + health and hands to [`super::TablesWriter::publish`].

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use crate::config::{
    Config, FlowHashFields, Mode, PpTlv, Protocol, ProxyProtocol, SynProxy, Vip, VipLimits,
};
use crate::flowhash::siphash24;
use crate::maglev::{build_into, BackendId, MaglevBackend, MaglevScratch};

use super::TablesError;

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// The IP protocol number of a config protocol.
pub const fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => PROTO_TCP,
        Protocol::Udp => PROTO_UDP,
    }
}

/// One complete table generation: everything workers need, nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Generation {
    /// Key of the stable flow hash ([`crate::flowhash::FlowHasher`]).
    pub flow_hash_key: [u8; 16],
    /// The VIPs, in config order. Each is behind an [`Arc`] so that a VIP
    /// that did not change is *the same allocation* in consecutive
    /// generations: the publisher then recognises it with a pointer
    /// comparison and reuses its block without looking at its ring (see
    /// [`super::TablesWriter::publish`]). Change one with
    /// [`Arc::make_mut`].
    pub vips: Vec<Arc<VipTable>>,
}

/// One VIP of a generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipTable {
    /// Stable id: the VIP's position in the config. Unique in a generation.
    pub id: u32,
    /// The config name (at most [`super::MAX_NAME_LEN`] bytes).
    pub name: String,
    /// VIP address.
    pub addr: IpAddr,
    /// VIP port.
    pub port: u16,
    /// IP protocol number: [`PROTO_TCP`] or [`PROTO_UDP`].
    pub proto: u8,
    /// Forwarding mode.
    pub mode: Mode,
    /// PROXY protocol options and state bits.
    pub flags: VipFlags,
    /// Upper bound of the PPv2 header in bytes.
    pub pp_max_len: u16,
    /// Every configured backend, eligible or not (drained and down ones stay
    /// listed so existing flows and counters still find them).
    pub backends: Vec<BackendEntry>,
    /// The Maglev ring: indices into `backends`. Empty for a VIP without
    /// backends.
    pub ring: Vec<u32>,
    /// `[vip.limits]`: what the VIP admits.
    pub limits: VipLimits,
    /// `persistence_timeout` in seconds (0: off).
    pub persistence_s: u32,
}

/// One backend of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BackendEntry {
    /// Stable per (VIP name, address, port); see [`backend_ids`].
    pub id: u32,
    /// Backend address.
    pub addr: IpAddr,
    /// Backend port.
    pub port: u16,
    /// Effective weight.
    pub weight: u32,
    /// Health / operator state.
    pub state: BackendState,
    /// Open connections at most (0: no limit).
    pub max_connections: u32,
}

/// Whether a backend takes new flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BackendState {
    /// Healthy: in the ring if its weight is above 0.
    Up = 0,
    /// Unhealthy: out of the ring (unless the VIP fails open).
    Down = 1,
    /// Operator drain: out of the ring, existing flows finish.
    Draining = 2,
    /// Operator kill: out of the ring, and every established flow to it is
    /// reset on its next packet (whatever the VIP's `on_down`).
    Killed = 3,
}

impl BackendState {
    /// The byte stored in [`super::BackendRecord::state`].
    pub const fn to_u8(self) -> u8 {
        self as u8
    }

    /// From the stored byte; `None` for an unknown value.
    pub const fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(BackendState::Up),
            1 => Some(BackendState::Down),
            2 => Some(BackendState::Draining),
            3 => Some(BackendState::Killed),
            _ => None,
        }
    }
}

/// Bits of a VIP's flags word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VipFlags(u32);

impl VipFlags {
    /// No flags.
    pub const EMPTY: VipFlags = VipFlags(0);
    /// Insert a PROXY protocol v2 header.
    pub const PROXY_V2: VipFlags = VipFlags(1 << 0);
    /// Send the PPv2 header as its own segment right after the handshake.
    pub const PP_SEND_ON_CONNECT: VipFlags = VipFlags(1 << 1);
    /// PPv2 TLV PP2_TYPE_UNIQUE_ID.
    pub const PP_TLV_UNIQUE_ID: VipFlags = VipFlags(1 << 2);
    /// PPv2 TLV PP2_TYPE_CRC32C.
    pub const PP_TLV_CRC32C: VipFlags = VipFlags(1 << 3);
    /// PPv2 TLV PP2_TYPE_AUTHORITY.
    pub const PP_TLV_AUTHORITY: VipFlags = VipFlags(1 << 4);
    /// No backend was eligible: the ring covers every backend (docs/design.md §5,
    /// "never leave a VIP empty"). Workers count and report it.
    pub const FAIL_OPEN: VipFlags = VipFlags(1 << 5);
    /// The VIP has `zone_affinity = true`.
    pub const ZONE_AFFINITY: VipFlags = VipFlags(1 << 6);
    /// The ring holds only backends of this appliance's zone.
    pub const ZONE_LOCAL: VipFlags = VipFlags(1 << 7);
    /// `[vip.health] on_down = "reset"`: workers reset established
    /// connections to backends in state Down (not while the VIP fails open).
    pub const RESET_ON_DOWN: VipFlags = VipFlags(1 << 8);
    /// Full-NAT TCP timestamps pass through untranslated
    /// (`translate_timestamps = false`).
    pub const TIMESTAMPS_PASS: VipFlags = VipFlags(1 << 9);
    /// `syn_proxy = "auto"`: SYN cookies while the worker's half-open
    /// connections are under pressure.
    pub const SYN_PROXY_AUTO: VipFlags = VipFlags(1 << 10);
    /// `syn_proxy = "always"`: SYN cookies for every SYN.
    pub const SYN_PROXY_ALWAYS: VipFlags = VipFlags(1 << 11);
    /// `hash = "source"`: the Maglev pick hashes the flow with its source
    /// port as 0.
    pub const HASH_SOURCE: VipFlags = VipFlags(1 << 12);
    /// Every defined bit.
    pub const ALL: VipFlags = VipFlags((1 << 13) - 1);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// From raw bits; `None` if an undefined bit is set.
    pub const fn from_bits(bits: u32) -> Option<Self> {
        if bits & !Self::ALL.0 == 0 {
            Some(VipFlags(bits))
        } else {
            None
        }
    }

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: VipFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Sets the bits of `other` (if `on`) or clears them.
    pub fn set(&mut self, other: VipFlags, on: bool) {
        if on {
            self.0 |= other.0;
        } else {
            self.0 &= !other.0;
        }
    }
}

impl core::ops::BitOr for VipFlags {
    type Output = VipFlags;
    fn bitor(self, rhs: VipFlags) -> VipFlags {
        VipFlags(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for VipFlags {
    fn bitor_assign(&mut self, rhs: VipFlags) {
        self.0 |= rhs.0;
    }
}

/// Health/operator input to the builder: for `(vip index, backend index)`
/// in config order, `Some((weight, state))` replaces the configured weight
/// and the default state [`BackendState::Up`]; `None` keeps both.
pub type Overrides<'a> = &'a dyn Fn(usize, usize) -> Option<(u32, BackendState)>;

/// No overrides: configured weights, every backend up.
pub fn no_overrides(_vip: usize, _backend: usize) -> Option<(u32, BackendState)> {
    None
}

/// SipHash key of backend ids. Fixed: changing it renumbers every backend's
/// counters.
const K_BACKEND_ID: [u8; 16] = *b"border-backendid";

/// Stable ids for the backends `(addr, port)` of the VIP called `vip_name`:
/// the low 32 bits of SipHash-2-4 over `name ‖ 0xff ‖ BackendId`. A
/// collision inside the VIP (probability ~n²/2³³) is resolved by taking the
/// next free value, in [`BackendId`] order, so the ids depend only on the
/// set, not on the list order.
pub fn backend_ids(vip_name: &str, backends: &[(IpAddr, u16)]) -> Vec<u32> {
    let mut msg = Vec::with_capacity(vip_name.len() + 1 + BackendId::LEN);
    let mut order: Vec<(BackendId, usize)> = backends
        .iter()
        .enumerate()
        .map(|(i, &(a, p))| (BackendId::from(std::net::SocketAddr::new(a, p)), i))
        .collect();
    order.sort_unstable();
    let mut ids = vec![0u32; backends.len()];
    let mut used = HashSet::with_capacity(backends.len());
    for (bid, i) in order {
        msg.clear();
        msg.extend_from_slice(vip_name.as_bytes());
        msg.push(0xff);
        msg.extend_from_slice(bid.as_bytes());
        let mut id = siphash24(&K_BACKEND_ID, &msg) as u32;
        while !used.insert(id) {
            id = id.wrapping_add(1);
        }
        ids[i] = id;
    }
    ids
}

/// The flags a config VIP implies (without [`VipFlags::FAIL_OPEN`] /
/// [`VipFlags::ZONE_LOCAL`], which depend on health).
pub fn config_flags(v: &Vip) -> VipFlags {
    let mut f = VipFlags::EMPTY;
    if v.proxy_protocol == ProxyProtocol::V2 {
        f |= VipFlags::PROXY_V2;
        f.set(
            VipFlags::PP_SEND_ON_CONNECT,
            v.proxy_protocol_send_on_connect,
        );
        for t in &v.proxy_protocol_tlvs {
            f |= match t {
                PpTlv::UniqueId => VipFlags::PP_TLV_UNIQUE_ID,
                PpTlv::Crc32c => VipFlags::PP_TLV_CRC32C,
                PpTlv::Authority => VipFlags::PP_TLV_AUTHORITY,
            };
        }
    }
    f.set(VipFlags::ZONE_AFFINITY, v.zone_affinity);
    f.set(VipFlags::TIMESTAMPS_PASS, !v.translate_timestamps);
    f.set(VipFlags::SYN_PROXY_AUTO, v.syn_proxy == SynProxy::Auto);
    f.set(VipFlags::SYN_PROXY_ALWAYS, v.syn_proxy == SynProxy::Always);
    f.set(VipFlags::HASH_SOURCE, v.hash == FlowHashFields::Source);
    f.set(
        VipFlags::RESET_ON_DOWN,
        v.health
            .as_ref()
            .is_some_and(|h| h.on_down == crate::config::OnDown::Reset),
    );
    f
}

/// Builds a generation from a validated config and health/operator
/// overrides. See [`GenerationBuilder::build`] for the rules.
pub fn build_generation(cfg: &Config, overrides: Overrides<'_>) -> Result<Generation, TablesError> {
    GenerationBuilder::new().build(cfg, overrides)
}

/// What a VIP's ring was built from: reuse the ring if it is the same.
#[derive(Debug, PartialEq, Eq)]
struct RingInput {
    m: u32,
    /// (index in backends, id, weight) of the ring's members.
    members: Vec<(u32, BackendId, u32)>,
}

#[derive(Debug)]
struct Cached {
    input: RingInput,
    vip: Arc<VipTable>,
}

/// Builds generations, keeping what it needs between builds so a rebuild
/// after a small change is cheap: the Maglev scratch space is shared by all
/// VIPs, and a VIP whose table comes out identical to the previous build is
/// returned as the *same* [`Arc`] (so [`super::TablesWriter::publish`]
/// recognises it in O(1)); a VIP whose ring inputs did not change keeps its
/// ring without running Maglev.
///
/// [`GenerationBuilder::build_changed`] goes further: told which VIPs'
/// inputs changed, it looks at those only and takes every other VIP from
/// the previous build as is, so a change to one backend costs one VIP
/// whatever the number of VIPs ([`BuildStats`] says what a build did).
#[derive(Debug, Default)]
pub struct GenerationBuilder {
    scratch: MaglevScratch,
    /// By VIP position.
    cache: Vec<Option<Cached>>,
    members: Vec<MaglevBackend>,
    member_idx: Vec<u32>,
    /// The `zone` of the last build (`None`: nothing built yet): an input
    /// of every VIP.
    zone: Option<Option<String>>,
    stats: BuildStats,
}

/// What one build did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BuildStats {
    /// VIPs whose inputs (config entry and overrides) were looked at; the
    /// others were taken from the previous build without a look.
    pub vips_examined: u32,
    /// VIPs that came out different from the previous build (a new
    /// [`Arc`]; a new block for the publisher to write).
    pub vips_changed: u32,
    /// Maglev rings computed.
    pub rings_built: u32,
    /// The whole config was looked at ([`GenerationBuilder::build`], or a
    /// [`GenerationBuilder::build_changed`] that could not take VIPs from
    /// the previous build: the first build, or `zone` changed).
    pub full: bool,
}

impl GenerationBuilder {
    /// A builder with nothing cached.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a generation from a validated config and overrides.
    ///
    /// Per VIP (id = position in `cfg.vips`):
    /// - every configured backend is listed, in config order, with its
    ///   effective weight and state ([`Overrides`]);
    /// - *eligible* backends are those [`BackendState::Up`] with weight > 0;
    /// - zone affinity: if the VIP has `zone_affinity = true`, the config
    ///   names this appliance's `zone`, and some eligible backend is in that
    ///   zone, only those are eligible ([`VipFlags::ZONE_LOCAL`]). (Which
    ///   zone an appliance serves, and whether mgmt may override it at run
    ///   time, is mgmt's business: it can pass a config with another `zone`.)
    /// - the ring is Maglev (size `maglev_table_size`) over the eligible
    ///   backends;
    /// - FAIL-OPEN: with no eligible backend, the ring covers every backend
    ///   health took down (state Down, effective weight > 0) and
    ///   [`VipFlags::FAIL_OPEN`] is set; drained backends (state Draining,
    ///   Killed or weight 0) never return that way, so a VIP whose backends are all
    ///   drained, or that has none, gets an empty ring.
    pub fn build(
        &mut self,
        cfg: &Config,
        overrides: Overrides<'_>,
    ) -> Result<Generation, TablesError> {
        self.stats = BuildStats {
            full: true,
            ..BuildStats::default()
        };
        self.zone = None;
        self.cache.resize_with(cfg.vips.len(), || None);
        self.cache.truncate(cfg.vips.len());
        let mut vips = Vec::with_capacity(cfg.vips.len());
        for (vi, v) in cfg.vips.iter().enumerate() {
            vips.push(self.build_vip(cfg, vi, v, overrides)?);
        }
        self.zone = Some(cfg.zone.clone());
        Ok(Generation {
            flow_hash_key: cfg.dataplane.flow_hash_key,
            vips,
        })
    }

    /// Like [`GenerationBuilder::build`], when the caller knows which VIPs'
    /// inputs may have changed since the previous build: `changed` holds
    /// their positions in `cfg.vips` (a VIP's inputs are its config entry,
    /// its position, and the overrides of its backends). Only those are
    /// looked at; every other VIP is the previous build's [`Arc`], untouched.
    /// VIPs past the previous build's count are built too, and a shorter
    /// config drops the last ones. Falls back to a full
    /// [`GenerationBuilder::build`] for the first build and when `zone`
    /// changed (an input of every VIP).
    ///
    /// The result equals a full build's as long as `changed` lists every VIP
    /// whose inputs changed; a VIP left out keeps its previous table.
    pub fn build_changed(
        &mut self,
        cfg: &Config,
        overrides: Overrides<'_>,
        changed: &[usize],
    ) -> Result<Generation, TablesError> {
        if self.zone.as_ref() != Some(&cfg.zone) {
            return self.build(cfg, overrides);
        }
        self.stats = BuildStats::default();
        let n = cfg.vips.len();
        self.cache.resize_with(n, || None);
        self.cache.truncate(n);
        for &vi in changed {
            if let Some(v) = cfg.vips.get(vi) {
                self.build_vip(cfg, vi, v, overrides)?;
            }
        }
        let mut vips = Vec::with_capacity(n);
        for (vi, v) in cfg.vips.iter().enumerate() {
            match &self.cache[vi] {
                Some(c) => vips.push(Arc::clone(&c.vip)),
                None => vips.push(self.build_vip(cfg, vi, v, overrides)?),
            }
        }
        Ok(Generation {
            flow_hash_key: cfg.dataplane.flow_hash_key,
            vips,
        })
    }

    /// What the last build did.
    pub fn last_build(&self) -> BuildStats {
        self.stats
    }

    /// Forgets which VIPs are up to date: the next
    /// [`GenerationBuilder::build_changed`] looks at every VIP (rings whose
    /// inputs did not change are still reused). For a caller that built a
    /// generation it then did not keep.
    pub fn invalidate(&mut self) {
        self.zone = None;
    }

    fn build_vip(
        &mut self,
        cfg: &Config,
        vi: usize,
        v: &Vip,
        overrides: Overrides<'_>,
    ) -> Result<Arc<VipTable>, TablesError> {
        let id = u32::try_from(vi)
            .map_err(|_| TablesError::InvalidGeneration(format!("{vi} VIPs are too many")))?;
        self.stats.vips_examined += 1;
        let addrs: Vec<(IpAddr, u16)> = v.backends.iter().map(|b| (b.address, b.port)).collect();
        let ids = backend_ids(&v.name, &addrs);
        let backends: Vec<BackendEntry> = v
            .backends
            .iter()
            .enumerate()
            .map(|(bi, b)| {
                let (weight, state) = overrides(vi, bi).unwrap_or((b.weight, BackendState::Up));
                BackendEntry {
                    id: ids[bi],
                    addr: b.address,
                    port: b.port,
                    weight,
                    state,
                    max_connections: b.max_connections,
                }
            })
            .collect();

        let mut flags = config_flags(v);
        let eligible = |b: &BackendEntry| b.state == BackendState::Up && b.weight > 0;
        let local_zone = cfg.zone.as_deref().filter(|_| v.zone_affinity);
        let in_zone =
            |bi: usize| local_zone.is_some_and(|z| v.backends[bi].zone.as_deref() == Some(z));
        let collect = |keep: &dyn Fn(usize, &BackendEntry) -> Option<u32>| {
            backends
                .iter()
                .enumerate()
                .filter_map(|(bi, b)| {
                    let id = BackendId::from(std::net::SocketAddr::new(b.addr, b.port));
                    keep(bi, b).map(|w| (bi as u32, id, w))
                })
                .collect::<Vec<_>>()
        };
        let mut members = Vec::new();
        if local_zone.is_some() {
            members = collect(&|bi, b| (eligible(b) && in_zone(bi)).then_some(b.weight));
            flags.set(VipFlags::ZONE_LOCAL, !members.is_empty());
        }
        if members.is_empty() {
            members = collect(&|_, b| eligible(b).then_some(b.weight));
        }
        if members.is_empty() {
            // Fail open over the backends health took out; drained ones (state
            // Draining or weight 0) stay out: an operator who drains every
            // backend means it.
            members = collect(&|_, b| {
                (b.state == BackendState::Down && b.weight > 0).then_some(b.weight)
            });
            if !members.is_empty() {
                flags |= VipFlags::FAIL_OPEN;
            }
        }
        let input = RingInput {
            m: v.maglev_table_size,
            members,
        };

        let mut table = VipTable {
            id,
            name: v.name.clone(),
            addr: v.address,
            port: v.port,
            proto: proto_number(v.protocol),
            mode: v.mode,
            flags,
            pp_max_len: v.proxy_protocol_max_len,
            backends,
            ring: Vec::new(),
            limits: v.limits.clone(),
            persistence_s: v.persistence_timeout,
        };

        // Same ring inputs as last time: reuse (the whole VIP if nothing else
        // changed either).
        if let Some(c) = &self.cache[vi] {
            if c.input == input {
                let old = &*c.vip;
                let same_rest = old.id == table.id
                    && old.name == table.name
                    && old.addr == table.addr
                    && old.port == table.port
                    && old.proto == table.proto
                    && old.mode == table.mode
                    && old.flags == table.flags
                    && old.pp_max_len == table.pp_max_len
                    && old.backends == table.backends
                    && old.limits == table.limits
                    && old.persistence_s == table.persistence_s;
                if same_rest {
                    return Ok(Arc::clone(&c.vip));
                }
                self.stats.vips_changed += 1;
                table.ring = old.ring.clone();
                let vip = Arc::new(table);
                self.cache[vi] = Some(Cached {
                    input,
                    vip: Arc::clone(&vip),
                });
                return Ok(vip);
            }
        }

        self.stats.vips_changed += 1;
        if !input.members.is_empty() {
            self.stats.rings_built += 1;
            self.members.clear();
            self.member_idx.clear();
            for &(bi, bid, w) in &input.members {
                self.members.push(MaglevBackend { id: bid, weight: w });
                self.member_idx.push(bi);
            }
            build_into(&mut table.ring, &mut self.scratch, &self.members, input.m).map_err(
                |source| TablesError::Maglev {
                    vip: v.name.clone(),
                    source,
                },
            )?;
            // Maglev indexes its input slice; map to indices into backends.
            for e in &mut table.ring {
                *e = self.member_idx[*e as usize];
            }
        }
        let vip = Arc::new(table);
        self.cache[vi] = Some(Cached {
            input,
            vip: Arc::clone(&vip),
        });
        Ok(vip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    /// `n` VIPs of 3 backends (zones a, a, b; VIP 0 with zone affinity).
    fn config(n: usize, zone: &str) -> Config {
        let mut c = format!(
            "instance = \"t\"\nzone = \"{zone}\"\n[dataplane]\nworker_lcores = [1]\nflow_hash_key = \"000102030405060708090a0b0c0d0e0f\"\n[[port]]\nname = \"p\"\ndevargs = \"net_null0\"\naddresses = [\"10.0.0.1/16\"]\nlocal_addresses = [\"10.0.0.1\"]\n"
        );
        for v in 0..n {
            let _ = write!(
                c,
                "[[vip]]\nname = \"v{v}\"\naddress = \"10.0.100.{v}\"\nport = 80\nmaglev_table_size = 307\nzone_affinity = {}\n",
                v == 0
            );
            for (b, z) in ["a", "a", "b"].iter().enumerate() {
                let _ = write!(
                    c,
                    "[[vip.backend]]\naddress = \"10.0.{}.{}\"\nport = 80\nzone = \"{z}\"\n",
                    b + 1,
                    v + 1
                );
            }
        }
        Config::from_toml_str(&c, "t.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn build_changed_looks_at_the_listed_vips_only() {
        let cfg = config(10, "a");
        let mut b = GenerationBuilder::new();
        // The first build is a full one, whatever the list says.
        let g1 = b.build_changed(&cfg, &no_overrides, &[]).unwrap();
        assert_eq!(g1, build_generation(&cfg, &no_overrides).unwrap());
        assert!(b.last_build().full);
        assert_eq!(b.last_build().rings_built, 10);

        // Backend 1 of VIP 4 down: listed, VIP 4 is built, the rest shared.
        let down = |vi: usize, bi: usize| (vi == 4 && bi == 1).then_some((1, BackendState::Down));
        let g2 = b.build_changed(&cfg, &down, &[4]).unwrap();
        let s = b.last_build();
        assert_eq!(
            (s.full, s.vips_examined, s.vips_changed, s.rings_built),
            (false, 1, 1, 1)
        );
        assert_eq!(g2, build_generation(&cfg, &down).unwrap());
        for (i, (x, y)) in g1.vips.iter().zip(&g2.vips).enumerate() {
            assert_eq!(Arc::ptr_eq(x, y), i != 4, "vip {i}");
        }

        // Not listed: not looked at (the caller's contract), VIP 4 stays.
        let g3 = b.build_changed(&cfg, &no_overrides, &[]).unwrap();
        assert_eq!(b.last_build().vips_examined, 0);
        assert!(Arc::ptr_eq(&g3.vips[4], &g2.vips[4]));
        // After invalidate every VIP is looked at again: VIP 4 is back up,
        // without running Maglev for the nine others.
        b.invalidate();
        let g4 = b.build_changed(&cfg, &no_overrides, &[]).unwrap();
        let s = b.last_build();
        assert_eq!((s.full, s.vips_examined, s.rings_built), (true, 10, 1));
        assert_eq!(g4, g1);

        // A zone change reaches VIP 0 (zone affinity) without being listed.
        let cfg_b = config(10, "b");
        let g5 = b.build_changed(&cfg_b, &no_overrides, &[]).unwrap();
        assert!(b.last_build().full);
        assert_eq!(g5, build_generation(&cfg_b, &no_overrides).unwrap());
        assert_ne!(g5.vips[0], g4.vips[0]);

        // More VIPs, then fewer: the new ones are built, the others shared.
        let cfg12 = config(12, "b");
        let g6 = b.build_changed(&cfg12, &no_overrides, &[]).unwrap();
        assert_eq!(b.last_build().vips_examined, 2);
        assert_eq!(g6, build_generation(&cfg12, &no_overrides).unwrap());
        let g7 = b.build_changed(&cfg_b, &no_overrides, &[]).unwrap();
        assert_eq!(b.last_build().vips_examined, 0);
        assert_eq!(g7, g5);
    }
}
