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
use conf::Mode;
use hashbrown::HashMap;

use crate::conntrack::{Conntrack, Dir, EntryId, FlowKey, InsertError, State, Timeouts};
use crate::counters::Counters;
use crate::nat;
use crate::neigh::{Binding, NeighborSync, Neighbors, Resolution};
use crate::pipeline::{PortInfo, Verdict};
use crate::ppv2::{self, PpConfig, PpFlow, PpWorker};
use crate::wire::{ip_proto, Fragment, Parsed};

/// Local ports tried for one new full-NAT flow before giving up.
const LOCAL_PORT_TRIES: u32 = 64;
/// Connection-table entries examined for expiry per poll iteration.
pub const EXPIRE_BUDGET: usize = 64;

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

    fn pool_of(&self, addr: IpAddr) -> Option<&LocalPool> {
        self.pools.iter().find(|l| l.addr == addr)
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
    /// (backend id, address, port)
    pub backends: Vec<(u32, IpAddr, u16)>,
    /// PROXY protocol v2 settings; `PpConfig::default()` is off.
    pub pp: PpConfig,
}

type VipKey = (IpAddr, u16, u8);

/// A table generation adopted by a worker, with the lookup structures built
/// from it. Built off the fast path (allocation is fine here).
#[derive(Clone)]
pub struct Adopted<'t> {
    pub generation: u64,
    pub vips: Vec<VipRt<'t>>,
    by_key: HashMap<VipKey, u32, ahash::RandomState>,
    vip_addrs: hashbrown::HashSet<IpAddr, ahash::RandomState>,
    /// DNAT backend (addr, port, proto) -> VIP index; None when ambiguous.
    dnat_reverse: HashMap<VipKey, Option<u32>, ahash::RandomState>,
    hasher: FlowHasher,
    pub routes: Routes,
    /// Ring indices that point outside their backend list are refused at build.
    pub refused: usize,
}

impl<'t> Adopted<'t> {
    pub fn new(
        generation: u64,
        flow_hash_key: [u8; 16],
        inputs: Vec<VipInput<'t>>,
        routes: Routes,
    ) -> Self {
        let mut vips = Vec::with_capacity(inputs.len());
        let mut by_key = HashMap::with_hasher(ahash::RandomState::new());
        let mut vip_addrs = hashbrown::HashSet::with_hasher(ahash::RandomState::new());
        let mut dnat_reverse: HashMap<VipKey, Option<u32>, ahash::RandomState> =
            HashMap::with_hasher(ahash::RandomState::new());
        let mut refused = 0;
        for v in inputs {
            let backends: Vec<BackendRt> = v
                .backends
                .iter()
                .map(|&(id, addr, port)| {
                    let (out_port, next_hop) = routes.route(addr).unwrap_or((usize::MAX, addr));
                    let local = match v.mode {
                        Mode::FullNat => routes.pool_for(out_port, addr.is_ipv4()).map(|l| l.addr),
                        Mode::Dnat => None,
                    };
                    BackendRt {
                        id,
                        stat_slot: u32::MAX,
                        addr,
                        port,
                        out_port,
                        next_hop,
                        local,
                    }
                })
                .collect();
            let ring = if v.ring.iter().all(|&i| (i as usize) < backends.len()) {
                v.ring
            } else {
                refused += 1;
                &[]
            };
            let index = vips.len() as u32;
            by_key.insert((v.addr, v.port, v.proto), index);
            vip_addrs.insert(v.addr);
            if v.mode == Mode::Dnat {
                for b in &backends {
                    dnat_reverse
                        .entry((b.addr, b.port, v.proto))
                        .and_modify(|e| {
                            if *e != Some(index) {
                                *e = None
                            }
                        })
                        .or_insert(Some(index));
                }
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
            });
        }
        Adopted {
            generation,
            vips,
            by_key,
            vip_addrs,
            dnat_reverse,
            hasher: FlowHasher::new(flow_hash_key),
            routes,
            refused,
        }
    }

    pub fn vip_index(&self, addr: IpAddr, port: u16, proto: u8) -> Option<u32> {
        self.by_key.get(&(addr, port, proto)).copied()
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

/// What a worker remembers about one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRec {
    /// Statistics slots of the VIP and the backend (see `FlowStats`).
    pub vip_slot: u32,
    pub backend_slot: u32,
    pub mode: Mode,
    pub vip: (IpAddr, u16),
    pub client: (IpAddr, u16),
    pub backend: (IpAddr, u16),
    /// Full-NAT source (local address, port).
    pub local: Option<(IpAddr, u16)>,
    /// Where the client's packets came from: reply out of this port to this MAC.
    pub client_port: u16,
    pub client_mac: [u8; 6],
    /// Where the backend is: out of this port via this next hop.
    pub backend_port: u16,
    pub backend_next_hop: IpAddr,
    /// This connection's id: worker number in the top 16 bits, the
    /// worker's connection counter below (the PPv2 `UNIQUE_ID`).
    pub conn_id: u64,
    /// PROXY protocol v2 state (off unless the VIP has it).
    pub pp: PpFlow,
}

impl Default for FlowRec {
    fn default() -> Self {
        let any = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        FlowRec {
            vip_slot: u32::MAX,
            backend_slot: u32::MAX,
            mode: Mode::FullNat,
            vip: (any, 0),
            client: (any, 0),
            backend: (any, 0),
            local: None,
            client_port: 0,
            client_mac: [0; 6],
            backend_port: 0,
            backend_next_hop: any,
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
    port_cursor: u32,
    pub requests: ArrayVec<NeighRequest, 32>,
    pub now_ms: u64,
    /// Connections created by this worker (the low bits of `FlowRec::conn_id`).
    conn_counter: u64,
    /// Extra frames to send and PROXY header retransmission timers.
    pub pp: PpWorker,
}

/// Which worker owns full-NAT local port `port` among `workers`.
pub fn port_owner(port: u16, workers: usize) -> usize {
    let mask = (workers.next_power_of_two() - 1) as u16;
    (port & mask) as usize
}

fn ip_of(b: &[u8], v6: bool) -> IpAddr {
    if v6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        IpAddr::from(a)
    } else {
        IpAddr::from([b[0], b[1], b[2], b[3]])
    }
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

/// Addresses and ports of an IP packet with a TCP/UDP header.
#[derive(Clone, Copy, Debug)]
struct Tuple {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    proto: u8,
}

impl Tuple {
    fn key(&self) -> FlowKey {
        key_of(self.src, self.dst, self.sport, self.dport, self.proto)
    }
    fn hash_input(&self) -> Flow4or6 {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Flow4or6::V4 {
                src: s.octets(),
                dst: d.octets(),
                sport: self.sport,
                dport: self.dport,
                proto: self.proto,
            },
            (s, d) => Flow4or6::V6 {
                src: to16(s),
                dst: to16(d),
                sport: self.sport,
                dport: self.dport,
                proto: self.proto,
            },
        }
    }
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
            port_cursor: worker as u32,
            requests: ArrayVec::new(),
            now_ms: 0,
            conn_counter: 0,
            pp: PpWorker::default(),
        }
    }

    /// Switches to a new table generation. Flows keep the backend they have.
    pub fn adopt(&mut self, mut t: Adopted<'static>) {
        for v in &mut t.vips {
            v.stat_slot = self.vip_stats.slot_for(v.stat_key).unwrap_or(u32::MAX);
            for b in &mut v.backends {
                b.stat_slot = self.backend_stats.slot_for(b.id).unwrap_or(u32::MAX);
            }
        }
        // Make sure the next hops of every backend get resolved before the
        // first packet needs them.
        for v in &t.vips {
            for b in &v.backends {
                if b.out_port != usize::MAX && self.neighbors.get(b.next_hop).is_none() {
                    self.want_neighbor(b.out_port, b.next_hop);
                }
            }
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
        let (vs, bs) = (self.vip_stats, self.backend_stats);
        let freed = self.conntrack.expire(now_ms, EXPIRE_BUDGET, |e| {
            vs.sub(e.value.vip_slot, FlowStat::ActiveConnections, 1);
            bs.sub(e.value.backend_slot, FlowStat::ActiveConnections, 1);
        });
        counters.add(Counter::ConntrackExpired, freed as u64);
        let (ct, pp) = (&self.conntrack, &mut self.pp);
        pp.timers.tick(
            now_ms,
            |id, conn_id| {
                let live = ct.is_live(id) && !ct.get(id).is_expired(now_ms) && !ct.is_closing(id);
                match ct.get(id).value {
                    v if live && v.conn_id == conn_id => v.pp.pending(),
                    _ => ppv2::queue::Pending::Done,
                }
            },
            &mut pp.emits,
            counters,
        );
    }

    fn owner(&self, local_port: u16) -> usize {
        (local_port & self.owner_mask) as usize
    }

    /// Handles load-balancer traffic. `None`: not ours, let the slow path decide.
    ///
    /// The frame is `buf[..len]`; the rest of `buf` is room it may grow into
    /// (a PROXY header), so a `Send` may carry a larger length.
    pub fn handle(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let frame = buf.get_mut(..len)?;
        let tables = self.tables.as_ref()?;
        let v6 = p.l3 == crate::wire::L3Kind::Ipv6;
        let l3 = p.l3_offset;
        let (src, dst) = if v6 {
            (
                ip_of(&frame[l3 + 8..], true),
                ip_of(&frame[l3 + 24..], true),
            )
        } else {
            (
                ip_of(&frame[l3 + 12..], false),
                ip_of(&frame[l3 + 16..], false),
            )
        };
        let proto = p.l4_proto;
        if proto == ip_proto::ICMP || proto == ip_proto::ICMPV6 {
            return self.icmp_error(frame, p, dst, ports, counters);
        }
        if proto != ip_proto::TCP && proto != ip_proto::UDP {
            return None;
        }
        let is_vip_addr = tables.vip_addrs.contains(&dst);
        let to_pool = tables.routes.pool_of(dst).copied();
        if p.fragment != Fragment::None {
            if is_vip_addr || to_pool.is_some() {
                return Some(drop(counters, Counter::DropFragment));
            }
            return None;
        }
        let ports_of = p.ports?;
        let t = Tuple {
            src,
            dst,
            sport: ports_of.src,
            dport: ports_of.dst,
            proto,
        };
        if let Some(vi) = tables.vip_index(dst, t.dport, proto) {
            return Some(self.client_packet(buf, len, p, in_port, vi, t, ports, counters));
        }
        if is_vip_addr {
            return Some(drop(counters, Counter::DropVipUnhandled));
        }
        if let Some(pool) = to_pool {
            if t.dport < pool.range.0 || t.dport > pool.range.1 {
                return None; // the kernel twin's own connection
            }
            return Some(self.backend_packet(frame, p, t, ports, counters, true));
        }
        // DNAT replies are addressed to the client, not to us.
        if ports[in_port].owns_any(dst) {
            return None;
        }
        Some(self.backend_packet(frame, p, t, ports, counters, false))
    }

    // The packet, its parse, where it came from and what it matched travel
    // together; bundling them would only rename the list.
    #[allow(clippy::too_many_arguments)]
    fn client_packet(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        vi: u32,
        t: Tuple,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(frame) = buf.get_mut(..len) else {
            return drop(counters, Counter::DropSlowpathUnhandled);
        };
        if !p.tcp_flags_valid {
            return drop(counters, Counter::DropBadTcpFlags);
        }
        // Before any state: a packet that cannot be forwarded creates no
        // entry, takes no local port and counts no connection.
        if p.ttl <= 1 {
            return drop(counters, Counter::DropTtlExceeded);
        }
        let flags = p.tcp_flags.map_or(0, |f| f.0);
        let syn_only = t.proto == ip_proto::TCP && flags & 0x12 == 0x02;
        let now = self.now_ms;
        let key = t.key();
        let mut found = self
            .conntrack
            .lookup(&key, now)
            .filter(|(_, d)| *d == Dir::Original);
        if let Some((id, _)) = found {
            if syn_only && self.conntrack.is_closing(id) {
                self.forget(id);
                found = None;
            }
        }
        let (rec, id) = match found {
            Some((id, _)) => {
                if t.proto == ip_proto::TCP {
                    self.conntrack.update_tcp(id, Dir::Original, flags, now);
                } else {
                    self.conntrack.touch(id, now);
                }
                (self.conntrack.get(id).value, Some(id))
            }
            None => {
                if t.proto == ip_proto::TCP && !syn_only {
                    // Mid-stream packet of a connection this worker never saw
                    // (restart, table full earlier): DNAT can forward it where
                    // Maglev sends it; full-NAT has no source port to use.
                    let tables = self.tables.as_ref().expect("handle checked tables");
                    let vip = &tables.vips[vi as usize];
                    if vip.mode == Mode::FullNat {
                        return drop(counters, Counter::DropNoConntrack);
                    }
                    match self.new_flow(vi, t, in_port, frame, counters) {
                        Ok(r) => r,
                        Err(v) => return v,
                    }
                } else {
                    match self.new_flow(vi, t, in_port, frame, counters) {
                        Ok(r) => r,
                        Err(v) => return v,
                    }
                }
            }
        };
        let len = frame.len();
        if nat::decrement_ttl(frame, p).is_err() {
            return drop(counters, Counter::DropTtlExceeded);
        }
        let new_src = rec.local;
        if nat::rewrite_addrs(frame, p, new_src, Some(rec.backend)).is_err() {
            return drop(counters, Counter::DropSlowpathUnhandled);
        }
        self.vip_stats.add(rec.vip_slot, FlowStat::Packets, 1);
        self.vip_stats
            .add(rec.vip_slot, FlowStat::Bytes, len as u64);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Packets, 1);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Bytes, len as u64);
        let v = self.send_via(
            frame,
            rec.backend_port as usize,
            rec.backend_next_hop,
            ports,
            counters,
        );
        match (v, id) {
            (Verdict::Send { port, len }, Some(id)) if rec.pp.is_on() => {
                self.pp_client(id, &rec, buf, len, p, port, counters)
            }
            _ => v,
        }
    }

    /// PROXY protocol v2 on a client segment about to go to the backend
    /// (see [`ppv2::flow`]); the flow's state is written back.
    #[allow(clippy::too_many_arguments)]
    fn pp_client(
        &mut self,
        id: EntryId,
        rec: &FlowRec,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        port: usize,
        counters: &mut Counters,
    ) -> Verdict {
        let mut pp = rec.pp;
        let ends = ppv2::Ends {
            client: rec.client,
            vip: rec.vip,
            conn_id: rec.conn_id,
        };
        let r = pp.client_segment(
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
        self.conntrack.get_mut(id).value.pp = pp;
        match r {
            Ok(len) => Verdict::Send { port, len },
            Err(c) => drop(counters, c),
        }
    }

    fn new_flow(
        &mut self,
        vi: u32,
        t: Tuple,
        in_port: usize,
        frame: &[u8],
        counters: &mut Counters,
    ) -> Result<(FlowRec, Option<EntryId>), Verdict> {
        let tables = self.tables.as_ref().expect("handle checked tables");
        let vip = &tables.vips[vi as usize];
        let Some(bi) = tables.pick(vip, &t.hash_input()) else {
            return Err(drop(counters, Counter::DropNoBackend));
        };
        let b = &vip.backends[bi as usize];
        if b.out_port == usize::MAX {
            return Err(drop(counters, Counter::DropNoRoute));
        }
        let mut client_mac = [0u8; 6];
        client_mac.copy_from_slice(&frame[6..12]);
        let mut rec = FlowRec {
            vip_slot: vip.stat_slot,
            backend_slot: b.stat_slot,
            mode: vip.mode,
            vip: (vip.addr, vip.port),
            client: (t.src, t.sport),
            backend: (b.addr, b.port),
            local: None,
            client_port: in_port as u16,
            client_mac,
            backend_port: b.out_port as u16,
            backend_next_hop: b.next_hop,
            conn_id: (self.worker as u64) << 48 | (self.conn_counter & 0xFFFF_FFFF_FFFF),
            pp: if t.proto == ip_proto::TCP {
                PpFlow::new(vip.pp, t.src.is_ipv6())
            } else {
                PpFlow::default()
            },
        };
        self.conn_counter += 1;
        let orig = t.key();
        let now = self.now_ms;
        let state = if t.proto == ip_proto::TCP {
            State::SynSent
        } else {
            State::Udp
        };
        let (vs, bs) = (self.vip_stats, self.backend_stats);
        let on_free = |e: &crate::conntrack::Entry<FlowRec>| {
            vs.sub(e.value.vip_slot, FlowStat::ActiveConnections, 1);
            bs.sub(e.value.backend_slot, FlowStat::ActiveConnections, 1);
        };
        let id = match vip.mode {
            Mode::Dnat => {
                let reply = key_of(b.addr, t.src, b.port, t.sport, t.proto);
                match self.conntrack.insert(orig, reply, rec, state, now, on_free) {
                    Ok(id) => Some(id),
                    Err(InsertError::Full) => {
                        counters.inc(Counter::ConntrackFullStateless);
                        None
                    }
                    Err(_) => {
                        return Err(drop(counters, Counter::DropReplyKeyInUse));
                    }
                }
            }
            Mode::FullNat => {
                let Some(local) = b.local else {
                    return Err(drop(counters, Counter::DropNoLocalPort));
                };
                let Some(pool) = tables.routes.pool_of(local).copied() else {
                    return Err(drop(counters, Counter::DropNoLocalPort));
                };
                if self.conntrack.is_full() {
                    return Err(drop(counters, Counter::DropConntrackFull));
                }
                let (lo, hi) = pool.range;
                let span = u32::from(hi - lo) + 1;
                let mut inserted = None;
                for _ in 0..LOCAL_PORT_TRIES {
                    self.port_cursor = self.port_cursor.wrapping_add(1);
                    let lport = (u32::from(lo) + self.port_cursor % span) as u16;
                    if self.owner(lport) != self.worker {
                        continue;
                    }
                    rec.local = Some((local, lport));
                    let reply = key_of(b.addr, local, b.port, lport, t.proto);
                    match self.conntrack.insert(orig, reply, rec, state, now, on_free) {
                        Ok(id) => {
                            inserted = Some(id);
                            break;
                        }
                        Err(InsertError::ReplyInUse(_)) => continue,
                        Err(InsertError::Full) => {
                            return Err(drop(counters, Counter::DropConntrackFull))
                        }
                        Err(InsertError::OrigInUse(_) | InsertError::SameKeys) => {
                            return Err(drop(counters, Counter::DropReplyKeyInUse))
                        }
                    }
                }
                match inserted {
                    Some(id) => Some(id),
                    None => return Err(drop(counters, Counter::DropNoLocalPort)),
                }
            }
        };
        if id.is_some() {
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
        Ok((rec, id))
    }

    fn forget(&mut self, id: crate::conntrack::EntryId) {
        let v = self.conntrack.get(id).value;
        self.vip_stats
            .sub(v.vip_slot, FlowStat::ActiveConnections, 1);
        self.backend_stats
            .sub(v.backend_slot, FlowStat::ActiveConnections, 1);
        self.conntrack.remove(id);
    }

    /// A packet from a backend: to a full-NAT local address (`to_local`) or,
    /// for DNAT, to the client.
    fn backend_packet(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        t: Tuple,
        ports: &[PortInfo],
        counters: &mut Counters,
        to_local: bool,
    ) -> Verdict {
        if p.ttl <= 1 {
            return drop(counters, Counter::DropTtlExceeded);
        }
        let now = self.now_ms;
        let key = t.key();
        let found = self
            .conntrack
            .lookup(&key, now)
            .filter(|(_, d)| *d == Dir::Reply);
        let (rec, id) = match found {
            Some((id, _)) => {
                if t.proto == ip_proto::TCP {
                    let flags = p.tcp_flags.map_or(0, |f| f.0);
                    self.conntrack.update_tcp(id, Dir::Reply, flags, now);
                } else {
                    self.conntrack.touch(id, now);
                }
                (self.conntrack.get(id).value, id)
            }
            None if to_local => {
                let owner = self.owner(t.dport);
                if owner != self.worker && owner < self.workers {
                    return Verdict::Handoff { worker: owner };
                }
                return drop(counters, Counter::DropNoConntrack);
            }
            None => return self.dnat_stateless_reply(frame, p, t, ports, counters),
        };
        let len = frame.len();
        if nat::decrement_ttl(frame, p).is_err() {
            return drop(counters, Counter::DropTtlExceeded);
        }
        let new_dst = if to_local { Some(rec.client) } else { None };
        if nat::rewrite_addrs(frame, p, Some(rec.vip), new_dst).is_err() {
            return drop(counters, Counter::DropSlowpathUnhandled);
        }
        self.vip_stats.add(rec.vip_slot, FlowStat::Packets, 1);
        self.vip_stats
            .add(rec.vip_slot, FlowStat::Bytes, len as u64);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Packets, 1);
        self.backend_stats
            .add(rec.backend_slot, FlowStat::Bytes, len as u64);
        if rec.pp.is_on() {
            let mut pp = rec.pp;
            let r = pp.backend_segment(frame, p, counters);
            self.conntrack.get_mut(id).value.pp = pp;
            if let Err(c) = r {
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
        t: Tuple,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(tables) = self.tables.as_ref() else {
            return drop(counters, Counter::DropNotLocal);
        };
        let vi = match tables.dnat_reverse.get(&(t.src, t.sport, t.proto)) {
            Some(Some(vi)) => *vi,
            Some(None) => return drop(counters, Counter::DropNoConntrack),
            None => return drop(counters, Counter::DropNotLocal),
        };
        let vip = &tables.vips[vi as usize];
        let (vaddr, vport, slot) = (vip.addr, vip.port, vip.stat_slot);
        let Some((out, hop)) = tables.routes.route(t.dst) else {
            return drop(counters, Counter::DropNoRoute);
        };
        let len = frame.len();
        if nat::decrement_ttl(frame, p).is_err() {
            return drop(counters, Counter::DropTtlExceeded);
        }
        if nat::rewrite_addrs(frame, p, Some((vaddr, vport)), None).is_err() {
            return drop(counters, Counter::DropSlowpathUnhandled);
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
        let Some(port) = ports.get(out) else {
            return drop(counters, Counter::DropNoRoute);
        };
        let mac = match self.neighbors.resolve(hop, self.now_ms) {
            Resolution::Known(m) => m,
            Resolution::KnownRefresh(m) => {
                let _ = self.requests.try_push(NeighRequest {
                    port: out,
                    target: hop,
                });
                m
            }
            Resolution::Request => {
                let _ = self.requests.try_push(NeighRequest {
                    port: out,
                    target: hop,
                });
                return drop(counters, Counter::DropNeighborUnresolved);
            }
            Resolution::Pending | Resolution::Full => {
                return drop(counters, Counter::DropNeighborUnresolved);
            }
        };
        nat::set_macs(frame, port.mac, mac);
        Verdict::Send {
            port: out,
            len: frame.len(),
        }
    }

    /// ICMP errors (unreachable, frag-needed, packet-too-big, time exceeded)
    /// about a tracked flow go to the other end of that flow, translated.
    fn icmp_error(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        dst: IpAddr,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let inner = nat::icmp_error_inner(frame, p)?;
        // The quoted packet is one we sent; its reverse is what we received.
        let key = key_of(inner.dst, inner.src, inner.dport, inner.sport, inner.proto);
        let (id, dir) = self.conntrack.lookup(&key, self.now_ms)?;
        let rec = self.conntrack.get(id).value;
        counters.inc(Counter::IcmpErrorsTranslated);
        match dir {
            // We sent the quoted packet towards the backend: tell the client.
            Dir::Reply => {
                let outer_src = match rec.mode {
                    Mode::FullNat => Some(rec.vip.0),
                    Mode::Dnat => None,
                };
                let ok = nat::rewrite_icmp_error(
                    frame,
                    p,
                    outer_src,
                    Some(rec.client.0),
                    Some(rec.client),
                    Some(rec.vip),
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
                let _ = dst;
                let (outer_src, inner_dst) = match rec.local {
                    Some(local) => (Some(local.0), local),
                    None => (None, rec.client),
                };
                let ok = nat::rewrite_icmp_error(
                    frame,
                    p,
                    outer_src,
                    Some(rec.backend.0),
                    Some(rec.backend),
                    Some(inner_dst),
                );
                if ok.is_err() || nat::decrement_ttl(frame, p).is_err() {
                    return Some(drop(counters, Counter::DropSlowpathUnhandled));
                }
                Some(self.send_via(
                    frame,
                    rec.backend_port as usize,
                    rec.backend_next_hop,
                    ports,
                    counters,
                ))
            }
        }
    }
}

fn drop(counters: &mut Counters, c: Counter) -> Verdict {
    counters.inc(c);
    Verdict::Drop(c)
}
