//! Load balancing on one worker. A packet meets it in this order, one
//! file a stage:
//!
//! 1. `classify`: what the destination is (a VIP, a full-NAT local
//!    address, a DNAT client); [`Lb::handle`] is the general path's entry.
//! 2. `track`: a tracked flow's connection state: its TCP segments, whether
//!    a packet may change it, forgetting an entry.
//! 3. `select`: a new flow's backend (Maglev), local tuple and owner.
//! 4. `rewrite`: the NAT translation, PROXY protocol v2, ICMP errors about
//!    a flow.
//! 5. `emit`: next hops and neighbour requests: where it leaves.
//! 6. `dsr`: a direct-server-return VIP's client packets, which `rewrite`
//!    leaves alone: the backend's MAC written or the packet encapsulated,
//!    then sent through `emit`.
//!
//! The stages depend one way: each uses only the stages before it and the
//! shared files, which use no stage: `key` (lookup keys), `flow` (the flow
//! record and its bits), `admit` (`[vip.limits]`), `records` (connection
//! records), `release` (what a going entry gives back), `tables` (the
//! adopted table generation) and `flood` (room in a full table). Two paths
//! put the stages together: `path`, the general path of a parsed packet,
//! and `express`, the burst lane that does steps 1-5 for established flows
//! without a parse; `on_down` and `synproxy` are the policies they call
//! (flows to a backend health took down; SYN cookies). `adopt` runs once
//! at start: the previous border-dp's flows fitted to these tables. The test
//! `dataplane/tests/lb_stage_order.rs` keeps the order.
//!
//! Sans-IO like the rest of the pipeline: [`Lb::handle`] takes a parsed
//! frame and returns a verdict, or `None` when the frame is not load-balancer
//! traffic (then the slow path or the kernel twin gets it).

use arrayvec::ArrayVec;
use conf::counters::Counter;
use conf::state::{FlowStats, LocalPoolStats};

use crate::conntrack::{Conntrack, Timeouts};
use crate::counters::Counters;
use crate::local_ports::LocalPorts;
use crate::neigh::{NeighborSync, Neighbors, Slot};
use crate::persist::Persist;
use crate::port::PortDesc;
use crate::ppv2::{self, PpWorker};
use crate::verdict::Verdict;
use crate::wire::Parsed;
use records::FlowRecords;
use release::Release;

mod admit;
mod adopt;
mod classify;
mod conns;
mod dsr;
mod early;
mod emit;
mod express;
mod flood;
mod flow;
mod key;
mod on_down;
mod path;
mod records;
mod release;
mod rewrite;
mod select;
mod synproxy;
mod tables;
mod track;

pub use admit::{Admission, ConnCounts, VipAdmit};
pub use adopt::{Previous, HALT_ENV};
pub use conns::{EXPORT_BUDGET, IDLE_EXPORT_BUDGET};
pub use early::{Early, EarlyOut, NewFlows};
pub(crate) use emit::NeighRequest;
pub use express::Prepared;
pub use flood::HALF_OPEN_MIN_AGE_MS;
pub use flow::{FlowRec, FLOW_COUNTED_BACKEND, FLOW_COUNTED_VIP};
pub(crate) use key::{ResetKey, ResetWhy};
pub use records::{FlowMeter, METER_BYTES};
pub(crate) use select::port_owner;
pub use select::Flow4or6;
pub use tables::{Adopted, BackendRt, VipRt};
pub(crate) use tables::{VipInput, VipSrc};

/// Full-NAT local tuples counted for the pool gauges per poll iteration.
const LOCAL_TUPLE_SCAN_BUDGET: usize = 512;

/// Connection-table entries examined for expiry per poll iteration.
pub const EXPIRE_BUDGET: usize = 64;

/// Entries examined per wake-up of a worker sleeping on Rx interrupts,
/// which polls ~100 times a second instead of millions: with this, a
/// table of a million entries is swept in ~10 s while idle (64 per
/// wake-up would take ~3 minutes), for a few microseconds per wake-up.
pub(crate) const IDLE_EXPIRE_BUDGET: usize = 1024;

/// A received frame on the general path, as the stages pass it on.
struct Rx<'a> {
    /// The frame is `buf[..len]`; the rest of `buf` is room it may grow
    /// into (a PROXY header).
    buf: &'a mut [u8],
    len: usize,
    /// What `parse_frame` found in the frame.
    p: &'a Parsed,
    /// The port it came by.
    in_port: usize,
}

impl<'a> Rx<'a> {
    /// The buffer, the frame's length, its parse and its port.
    #[inline(always)]
    fn parts(self) -> (&'a mut [u8], usize, &'a Parsed, usize) {
        (self.buf, self.len, self.p, self.in_port)
    }
}

/// Where a stage's verdict goes: the port table it may name and the
/// counters it counts in.
struct Out<'a> {
    ports: &'a [PortDesc],
    counters: &'a mut Counters,
}

/// Per-worker load-balancing state.
pub struct Lb {
    worker: usize,
    workers: usize,
    owner_mask: u16,
    tables: Option<Adopted<'static>>,
    conntrack: Conntrack<FlowRec>,
    neighbors: Neighbors,
    sync: NeighborSync,
    vip_stats: FlowStats<'static>,
    backend_stats: FlowStats<'static>,
    /// Full-NAT local tuples (rebuilt when adopted routes change pools).
    local_ports: LocalPorts,
    /// Where the use of each local address is shown (the state region).
    local_pool_stats: Option<LocalPoolStats<'static>>,
    local_port_cooldown: u32,
    /// `conntrack::timeout_table` of the table's timeouts.
    state_timeouts_ms: [u64; 7],
    /// Neighbour requests to send ([`Lb::poll_transmit`]).
    requests: ArrayVec<NeighRequest, 32>,
    now_ms: u64,
    /// Connections created by this worker (the low bits of `FlowRec::conn_id`).
    conn_counter: u64,
    /// Extra frames to send and PROXY header retransmission timers.
    proxy_out: PpWorker,
    /// Connection meters and records (`[records]`; none: off).
    records: Option<FlowRecords>,
    /// The flows region's meters, until [`Lb::enable_records`] takes them.
    region_meters: Option<crate::conntrack::Slab<FlowMeter>>,
    /// This worker's end of the connections region (`borderctl conns`).
    conns: Option<conf::conns::ConnsExport<'static>>,
    /// Open-connection counts of capped VIPs and backends (`[vip.limits]`).
    admission: admit::Admission,
    /// SYN cookies and the splice of cookie connections (`syn_proxy`).
    syn_proxy: synproxy::SynProxyWorker,
    /// Client pins of persistent VIPs (`persistence_timeout`).
    persist: Persist,
    /// The previous process's flows, until adopted (`adopt.rs`).
    previous: Option<Previous>,
    /// Carried neighbour records dropped (torn, bad value) that this
    /// worker counts at its first tick with tables.
    neigh_dropped: [u64; 2],
    /// ICMP too-big answers this worker still sends this second.
    too_big_limit: crate::slowpath::EchoLimiter,
    /// The record and reply key of the last new flow forwarded without
    /// an entry (`select::Picked::Stateless`).
    stateless: (FlowRec, crate::conntrack::FlowKey),
    /// What the lane's passes found of the frame the general path runs
    /// now, if they took it as a new flow (`early.rs`).
    carry: Option<early::Early>,
    /// Local tuples the lane's passes guessed and the general path has
    /// not yet taken, by tuple set (`early.rs`).
    early_ahead: early::Ahead,
    /// Tests compare the express lane with the general path.
    #[cfg(test)]
    express_off: bool,
    /// Frames the express lane took (tests).
    #[cfg(test)]
    express_taken: u64,
    /// New flows that took their pick and their reply key's hash from the
    /// lane's passes (tests).
    #[cfg(test)]
    early_used: std::cell::Cell<(u64, u64)>,
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
            local_pool_stats: None,
            local_port_cooldown: timeouts.local_port_cooldown,
            state_timeouts_ms: crate::conntrack::timeout_table(&timeouts),
            requests: ArrayVec::new(),
            now_ms: 0,
            conn_counter: 0,
            proxy_out: PpWorker::default(),
            records: None,
            region_meters: None,
            conns: None,
            admission: admit::Admission::default(),
            syn_proxy: synproxy::SynProxyWorker::new(),
            persist: Persist::new(crate::persist::entries_for(conntrack_capacity)),
            previous: None,
            neigh_dropped: [0; 2],
            too_big_limit: crate::slowpath::EchoLimiter::new(1000),
            stateless: Default::default(),
            carry: None,
            early_ahead: Default::default(),
            #[cfg(test)]
            express_off: false,
            #[cfg(test)]
            express_taken: 0,
            #[cfg(test)]
            early_used: Default::default(),
        }
    }

    /// Sends at most `per_second` ICMP too-big answers a second (the
    /// slow path's `icmp_echo_per_second`).
    pub fn set_icmp_error_rate(&mut self, per_second: u32) {
        self.too_big_limit = crate::slowpath::EchoLimiter::new(per_second);
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
        let key = t.flow_hash_key();
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
            }
            let seed = admit::source_seed(&key, self.worker, v.id);
            v.build_admit(&mut self.admission, seed, self.now_ms);
            v.build_in_ring();
        }
        for v in &t.vips {
            self.persist.name_vip(v.stat_slot, v.stat_key);
        }
        self.pin_next_hops(&mut t);
        t.finish_dnat(old.as_mut().filter(|_| in_place), &built);
        // SYN proxy: its per-slot state, the first time a VIP wants it.
        if t.vips.iter().any(|v| v.syn_proxy != conf::SynProxy::Off) {
            self.syn_proxy.prepare(self.conntrack.capacity());
        }
        // Persistence: its table, the first time a VIP wants it.
        if t.vips.iter().any(|v| v.persist_ms != 0) {
            self.persist.prepare();
        }
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

    /// Pins the configured next hops of `t` (every backend's, every
    /// port's gateway) in the neighbour table, asking for those not known
    /// yet, before the first packet needs them: junk cannot push them out.
    /// Next hops the previous tables had and `t` has not are no longer
    /// pinned. Keeps each backend's neighbour slot (a carried VIP's
    /// without hashing).
    fn pin_next_hops(&mut self, t: &mut Adopted<'static>) {
        self.neighbors.begin_pins();
        for v in &mut t.vips {
            for b in &mut v.backends {
                if b.out_port != usize::MAX {
                    b.hop = self.configured_hop(b.out_port, b.next_hop, b.hop);
                }
            }
        }
        for i in 0..t.routes.ports.len() {
            let route = &t.routes.ports[i];
            if let Some(gw) = route.gateway {
                self.configured_hop(route.port, gw, Slot::NONE);
            }
        }
    }

    /// Keeps the connection table's entries in `slots` (a flows region's
    /// slab, so they outlive the process), before any traffic: the table
    /// starts over, empty, with the same timeouts.
    pub fn use_slab(&mut self, slots: crate::conntrack::Slab<crate::conntrack::Entry<FlowRec>>) {
        let timeouts = self.conntrack.timeouts();
        self.conntrack = Conntrack::on_slab(slots, timeouts, ahash::RandomState::new());
    }

    /// Keeps what the next process adopts besides the flows in `parts` (a
    /// carry region's, `crate::carry_region`): a record of each neighbour
    /// binding, and the persistence pins with their VIPs' keys. Before
    /// any traffic.
    pub fn use_carry(&mut self, parts: crate::carry_region::CarryParts) {
        self.neighbors.use_mirror(parts.neigh);
        self.persist
            .use_region(parts.pins, parts.names, parts.pin_key);
    }

    /// Keeps the connection meters in `meters` (a flows region's, so
    /// they outlive the process with their flows) once records are on.
    pub fn use_meters(&mut self, meters: crate::conntrack::Slab<FlowMeter>) {
        self.region_meters = Some(meters);
    }

    /// Counts open connections of capped VIPs and backends in `counts`,
    /// shared with the other workers of the process (before the first
    /// adoption; alone, a worker counts only its own connections).
    pub fn share_conn_counts(&mut self, counts: std::sync::Arc<ConnCounts>) {
        self.admission = admit::Admission::new(counts);
    }

    /// The open-connection counts (tests, inspection).
    pub fn conn_counts(&self) -> &ConnCounts {
        &self.admission.counts
    }

    /// Shows the use of each full-NAT local address there from now on
    /// (refreshed with the pool gauges, about once a second).
    pub fn set_local_pool_stats(&mut self, stats: LocalPoolStats<'static>) {
        stats.clear_from(0);
        self.local_pool_stats = Some(stats);
    }

    /// Meters every flow and writes a record into `ring` when a
    /// connection ends (`[records]`); without payload only when `log_empty`.
    pub fn enable_records(&mut self, ring: conf::records::RecordWriter<'static>, log_empty: bool) {
        let capacity = self.conntrack.capacity();
        let mapped = self.region_meters.take();
        self.records = Some(FlowRecords::new(
            ring,
            capacity,
            log_empty,
            self.worker,
            mapped,
        ));
    }

    /// Serves walks of the live connections asked for through `export`.
    pub fn enable_conns(&mut self, export: conf::conns::ConnsExport<'static>) {
        self.conns = Some(export);
    }

    /// Copies up to `budget` more entries into the walk of the live
    /// connections, if one runs (at the `now` of the last [`Lb::tick`]).
    #[inline]
    pub(crate) fn export_conns(&mut self, budget: usize) {
        if let Some(x) = self.conns.as_mut() {
            conns::step(
                x,
                &self.conntrack,
                self.records.as_ref(),
                &self.state_timeouts_ms,
                self.now_ms,
                self.worker,
                budget,
            );
        }
    }

    pub fn generation(&self) -> Option<u64> {
        self.tables.as_ref().map(|t| t.generation)
    }

    /// The adopted table generation, if any (inspection: tests, benchmarks).
    pub fn tables(&self) -> Option<&Adopted<'static>> {
        self.tables.as_ref()
    }

    /// Takes the adopted tables out (tests that adopt them elsewhere).
    #[cfg(test)]
    pub(crate) fn take_tables(&mut self) -> Option<Adopted<'static>> {
        self.tables.take()
    }

    /// The connection table (inspection: tests, benchmarks).
    pub fn conntrack(&self) -> &Conntrack<FlowRec> {
        &self.conntrack
    }

    /// The persistence table (inspection: tests).
    pub fn persistence(&self) -> &Persist {
        &self.persist
    }

    /// PROXY protocol frames waiting to be sent and their retransmission
    /// timers (inspection: tests).
    pub fn proxy_out(&self) -> &PpWorker {
        &self.proxy_out
    }

    /// This worker's index.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The `now` of the last [`Lb::tick`], in milliseconds.
    pub(crate) fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// A static neighbour binding known before any traffic (tests and
    /// benchmarks that have no ARP exchange), not shared with the other
    /// workers.
    pub fn seed_neighbor(&mut self, ip: std::net::IpAddr, mac: [u8; 6]) {
        self.neighbors.learn(ip, mac, self.now_ms);
    }

    /// The MAC the neighbour table has for `ip` (inspection: tests).
    pub fn neighbor(&self, ip: std::net::IpAddr) -> Option<[u8; 6]> {
        self.neighbors.get(ip)
    }

    /// Housekeeping once per poll iteration: bindings from other workers, expiry.
    pub(crate) fn tick(&mut self, now_ms: u64, counters: &mut Counters) {
        self.now_ms = now_ms;
        self.neighbors.set_now(now_ms);
        if self.previous.is_some() {
            self.adopt_previous(counters);
        }
        self.sync
            .drain_into(self.worker, &mut self.neighbors, now_ms);
        if self.neighbors.probing() {
            self.follow_probes();
        }
        self.expire(EXPIRE_BUDGET, counters);
        self.export_conns(EXPORT_BUDGET);
        self.publish_neighbor_stats(counters);
        self.syn_proxy_tick(counters);
        counters.set(Counter::ConntrackEntries, self.conntrack.len() as u64);
        counters.set(Counter::ConntrackCapacity, self.conntrack.capacity() as u64);
        if let Some(r) = &self.records {
            let (written, empty, ring_full) = r.totals();
            counters.set(Counter::ConnRecords, written);
            counters.set(Counter::ConnRecordsEmpty, empty);
            counters.set(Counter::ConnRecordsRingFull, ring_full);
        }
        if let Some(t) = self.local_ports.scan(now_ms, LOCAL_TUPLE_SCAN_BUDGET) {
            counters.set(Counter::LocalTuples, t.tuples);
            counters.set(Counter::LocalTuplesInUse, t.in_use);
            counters.set(Counter::LocalTuplesResting, t.resting);
            self.publish_local_pools();
        }
        let (ct, out) = (&self.conntrack, &mut self.proxy_out);
        out.timers.tick(
            now_ms,
            |id, conn_id| {
                let live = ct.is_live(id) && !ct.get(id).is_expired(now_ms) && !ct.is_closing(id);
                match &ct.get(id).value {
                    v if live && v.conn_id == conn_id => v.proxy.pending(),
                    _ => ppv2::queue::Pending::Done,
                }
            },
            &mut out.emits,
            counters,
        );
    }

    /// Shows the neighbour table's size and running totals.
    pub(super) fn publish_neighbor_stats(&self, counters: &mut Counters) {
        let neigh = self.neighbors.stats();
        counters.set(Counter::NeighEntries, self.neighbors.len() as u64);
        counters.set(Counter::NeighEvicted, neigh.evicted);
        counters.set(Counter::NeighFailed, neigh.failed);
        counters.set(Counter::NeighMacChanged, neigh.changed);
        counters.set(Counter::NeighAdopted, neigh.adopted);
        counters.set(Counter::NeighAdoptDroppedExpired, neigh.carried_expired);
    }

    /// Writes the last scan's figures per local address (once a second).
    #[cold]
    fn publish_local_pools(&self) {
        let Some(stats) = self.local_pool_stats else {
            return;
        };
        let mut n = 0;
        for (i, u) in self.local_ports.scanned_usage().enumerate() {
            let (t, used, rest) = (u.tuples.into(), u.in_use.into(), u.resting.into());
            stats.set(i, u.addr16, t, used, rest);
            n = i + 1;
        }
        stats.clear_from(n);
    }

    /// Examines up to `budget` more connection-table entries for expiry
    /// (at the `now` of the last [`Lb::tick`]).
    pub(crate) fn expire(&mut self, budget: usize, counters: &mut Counters) {
        let mut release = Release::of(
            self.vip_stats,
            self.backend_stats,
            &mut self.local_ports,
            &self.state_timeouts_ms,
            self.records.as_mut(),
            &self.admission,
            &mut self.persist,
        );
        let freed = self
            .conntrack
            .expire(self.now_ms, budget, |id, e| release.entry(id, e));
        counters.add(Counter::ConntrackExpired, freed as u64);
    }
}

#[cold]
#[inline(never)]
fn count_drop(counters: &mut Counters, c: Counter) -> Verdict {
    counters.inc(c);
    Verdict::Drop(c)
}
