//! Taking over the flows of the previous border-dp of the instance: each
//! live entry of its flows regions that this worker owns is checked
//! (`conntrack::adopt`), fitted to this process's tables (its VIP and
//! backend, their statistics slots, the backend's neighbour slot, the
//! full-NAT local tuple) and inserted, or dropped and counted with its
//! reason. Runs once, at the first tick after the first tables arrive.
//!
//! Owners: a full-NAT flow belongs to the worker that owns its local port
//! (the backend's replies are steered there), whatever worker held it
//! before; a DNAT flow stays with the worker of the same index, or with
//! `index % workers` when there are fewer workers now (the NIC's RSS then
//! decides where its packets land, as for any flow).
//!
//! Carried with the entry: its records meter (from the region's meters,
//! copied to its new slot), and its `[vip.limits]` places, counted again:
//! each adopted connection that is not over takes its VIP's and its
//! backend's places where they are capped (even past the cap: what is
//! open is open), so new connections are refused until the count is back
//! under the cap, as before the restart.
//!
//! Carried beside the flows (the carry regions, `crate::carry_region`):
//! the neighbour bindings, given to the table before any traffic (an
//! entry made for one of their addresses starts with its MAC, see
//! `crate::neigh`), and the persistence pins, re-inserted before the
//! flows (a pin of worker `w` goes to worker `w % workers`) when their
//! VIP is still persistent and their backend still in its ring; an
//! adopted flow that held its client's pin holds it again when the pin
//! still names the flow's backend. A pin some flow held is kept for the
//! VIP's timeout after the start at least (as if its flows went then).
//!
//! Several sets of regions (a start that crashed while adopting left its
//! own and the ones it adopted from, see `crate::flows_region`) are read
//! newest generation first: an entry an older set holds too is the same
//! flow, already adopted, and is skipped without a count.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use conf::counters::Counter;
use conf::state::FlowStat;
use conf::{Encap, Mode};

use super::flow::{flow_deltas, FlowRec, FLOW_COUNTED, FLOW_PERSIST, FLOW_TUNNEL};
use super::records::METER_BYTES;
use super::Lb;
use crate::carry_region::PreviousCarry;
use crate::conntrack::adopt::{
    byte_of, check_slot, prefetch_slot, AdoptHashes, Ahead, Dropped, Moved, RawValue, ADOPT_AHEAD,
};
use crate::conntrack::{Entry, EntryId, State};
use crate::counters::Counters;
use crate::flows_region::PreviousFlows;
use crate::neigh::CarryDropped;
use crate::persist::{Adopted as PinAdopted, PinTarget};
use crate::ppv2::PpConfig;

/// What a worker adopts from, set before it starts.
pub struct Previous {
    pub flows: Arc<PreviousFlows>,
    /// Wall clock minus this process's worker clock, in ms.
    pub clock_offset_ms: i64,
    /// Counts the workers that have adopted (the start removes the
    /// previous regions once every worker has).
    pub done: Option<Arc<AtomicUsize>>,
    /// Stops adopting once this worker kept this many entries, without
    /// counting as done, and calls the function (a debug build's crash
    /// test kills the process there: [`HALT_ENV`]).
    pub halt_after: Option<(u64, fn())>,
    /// The previous carry regions (neighbours, pins), if any.
    pub carry: Option<Arc<PreviousCarry>>,
}

/// Debug builds: `BORDER_ADOPT_HALT_AFTER=N` kills border-dp (SIGKILL)
/// once a worker has adopted N entries, to test a crash during adoption.
pub const HALT_ENV: &str = "BORDER_ADOPT_HALT_AFTER";

impl Previous {
    pub fn new(flows: Arc<PreviousFlows>, clock_offset_ms: i64) -> Previous {
        Previous {
            flows,
            clock_offset_ms,
            done: None,
            halt_after: None,
            carry: None,
        }
    }
}

// SAFETY: `bytes_valid` checks every byte of `FlowRec` that has invalid
// patterns: `mode` (an enum) and the `bool`s of the PROXY settings; every
// other field is an integer, an array of integers or a struct of them.
unsafe impl RawValue for FlowRec {
    fn bytes_valid(b: &[u8]) -> bool {
        use core::mem::offset_of;
        if b.len() != core::mem::size_of::<FlowRec>() {
            return false;
        }
        let mode = b[offset_of!(FlowRec, mode)];
        let modes = [
            Mode::FullNat,
            Mode::Dnat,
            Mode::Dsr(Encap::None),
            Mode::Dsr(Encap::Ipip),
            Mode::Dsr(Encap::Gue),
        ];
        if !modes.iter().any(|&m| byte_of(m) == mode) {
            return false;
        }
        let cfg = offset_of!(FlowRec, proxy) + offset_of!(crate::ppv2::PpFlow, cfg);
        [
            offset_of!(PpConfig, enabled),
            offset_of!(PpConfig, send_on_connect),
            offset_of!(PpConfig, unique_id),
            offset_of!(PpConfig, crc32c),
            offset_of!(PpConfig, authority),
        ]
        .iter()
        .all(|&o| b[cfg + o] <= 1)
    }
}

/// Where a slot's bytes hold its flow's mode.
const MODE_AT: usize =
    core::mem::offset_of!(Entry<FlowRec>, value) + core::mem::offset_of!(FlowRec, mode);

/// The counter of each reason.
pub(super) fn dropped_counter(d: Dropped) -> Counter {
    match d {
        Dropped::Torn => Counter::AdoptDroppedTorn,
        Dropped::BadKeys => Counter::AdoptDroppedBadKeys,
        Dropped::BadState => Counter::AdoptDroppedBadState,
        Dropped::BadValue => Counter::AdoptDroppedBadValue,
        Dropped::Expired => Counter::AdoptDroppedExpired,
        Dropped::Duplicate => Counter::AdoptDroppedDuplicate,
        Dropped::NoVip => Counter::AdoptDroppedNoVip,
        Dropped::NoBackend => Counter::AdoptDroppedNoBackend,
        Dropped::NotOwned => Counter::AdoptDroppedNotOwned,
        Dropped::Full => Counter::AdoptDroppedFull,
    }
}

impl Lb {
    /// Flows of the previous process to adopt at the first tick that has
    /// tables (see the module docs).
    /// The neighbour bindings of the carry regions go to the table now,
    /// before any traffic.
    pub fn adopt_from(&mut self, previous: Previous) {
        if let Some(carry) = &previous.carry {
            let mut bindings = Vec::new();
            for region in &carry.regions {
                let shift = region
                    .clock_offset_ms
                    .saturating_sub(previous.clock_offset_ms);
                let counted = region.worker % self.workers == self.worker;
                for raw in region.neigh_records() {
                    match crate::neigh::read_record(raw, shift) {
                        Ok(Some(b)) => bindings.push(b),
                        Ok(None) => {}
                        Err(CarryDropped::Torn) if counted => self.neigh_dropped[0] += 1,
                        Err(CarryDropped::BadValue) if counted => self.neigh_dropped[1] += 1,
                        Err(_) => {}
                    }
                }
            }
            self.neighbors.carry(bindings);
        }
        self.previous = Some(previous);
    }

    /// Re-inserts the pins of the carry regions this worker takes (see
    /// the module docs), counting what it drops; returns (kept, dropped).
    fn adopt_pins(
        &mut self,
        carry: &PreviousCarry,
        offset_ms: i64,
        counters: &mut Counters,
    ) -> (u64, u64) {
        let (mut kept, mut dropped) = (0u64, 0u64);
        if !self.persist.ready() {
            return (0, 0);
        }
        let Some(tables) = self.tables.as_ref() else {
            return (0, 0);
        };
        let now = self.now_ms;
        // The previous key, when the previous table had this one's place
        // and size: each pin then goes back to the bucket it was in.
        let same_table = carry.regions.iter().find(|r| {
            r.worker == self.worker
                && r.workers == self.workers
                && r.pin_count() == self.persist.capacity()
        });
        if let Some(key) = same_table.and_then(|r| r.pin_key) {
            self.persist.take_key(key);
        }
        for region in &carry.regions {
            if region.worker % self.workers != self.worker {
                continue;
            }
            let shift = region.clock_offset_ms.saturating_sub(offset_ms);
            for raw in region.pins() {
                let Some(p) = crate::persist::read_pin(raw) else {
                    continue;
                };
                let key = region.vip_name(p.vip);
                let vip = (key != 0)
                    .then(|| {
                        tables
                            .vips
                            .iter()
                            .find(|v| v.stat_key == key && v.persist_ms != 0)
                    })
                    .flatten();
                let outcome = match vip {
                    None => Err(Counter::PersistenceAdoptDroppedNoVip),
                    Some(_) if bad_client(&p.client) => {
                        Err(Counter::PersistenceAdoptDroppedBadValue)
                    }
                    Some(vip) => match vip.pinned_backend(p.backend_id, p.hint) {
                        None => Err(Counter::PersistenceAdoptDroppedNoBackend),
                        Some(bi) => {
                            let deadline = shifted(p.deadline, shift);
                            let timeout = vip.persist_ms;
                            // Held: its flows go (or come back) now.
                            let deadline = if p.refs > 0 {
                                deadline.max(now + u64::from(timeout))
                            } else {
                                deadline
                            }
                            .min(now + u64::from(timeout));
                            if deadline <= now {
                                Err(Counter::PersistenceAdoptDroppedExpired)
                            } else {
                                let b = &vip.backends[bi as usize];
                                let to = PinTarget {
                                    backend_id: b.id,
                                    backend_slot: b.stat_slot,
                                    index: bi,
                                };
                                match self.persist.adopt(
                                    vip.stat_slot,
                                    &p.client,
                                    to,
                                    (deadline, timeout),
                                    now,
                                ) {
                                    PinAdopted::Inserted => Ok(true),
                                    PinAdopted::Present => Ok(false),
                                    PinAdopted::Full => Err(Counter::PersistenceAdoptDroppedFull),
                                }
                            }
                        }
                    },
                };
                match outcome {
                    Ok(true) => {
                        kept += 1;
                        counters.inc(Counter::PersistenceAdopted);
                    }
                    Ok(false) => {}
                    Err(c) => {
                        dropped += 1;
                        counters.inc(c);
                    }
                }
            }
        }
        (kept, dropped)
    }

    /// Adopts the previous flows if they are waiting and tables are here.
    #[cold]
    pub(super) fn adopt_previous(&mut self, counters: &mut Counters) {
        if self.tables.is_none() {
            return;
        }
        let Some(prev) = self.previous.take() else {
            return;
        };
        let started = std::time::Instant::now();
        let now = self.now_ms;
        self.neighbors.expire_carried(now);
        counters.add(Counter::NeighAdoptDroppedTorn, self.neigh_dropped[0]);
        counters.add(Counter::NeighAdoptDroppedBadValue, self.neigh_dropped[1]);
        self.publish_neighbor_stats(counters);
        let pins = match prev.carry.as_deref() {
            Some(carry) => self.adopt_pins(carry, prev.clock_offset_ms, counters),
            None => (0, 0),
        };
        let (mut kept, mut dropped, mut older) = (0u64, [0u64; Dropped::ALL.len()], 0u64);
        let newest = prev.flows.newest_generation().unwrap_or(0);
        for region in &prev.flows.regions {
            let shift = region.clock_offset_ms.saturating_sub(prev.clock_offset_ms);
            let dnat_here = region.worker % self.workers == self.worker;
            let is_older = region.generation < newest;
            let meters = self.records.is_some() && region.has_meters(METER_BYTES);
            let full_nat = byte_of(Mode::FullNat);
            let mut ahead = Ahead::<(usize, Moved, AdoptHashes)>::default();
            let mut at = 0;
            loop {
                // Checks slot `at` where it lies and, if this worker takes
                // it, prefetches its buckets and inserts the entry checked
                // `ADOPT_AHEAD` before it (then the rest, at the end).
                let due = if at < region.slots() {
                    let raw = region.slot(at);
                    prefetch_slot(region.slot(at + ADOPT_AHEAD / 2));
                    at += 1;
                    let c = match check_slot::<FlowRec>(raw, shift, now) {
                        Ok(Some(c)) => c,
                        Ok(None) => continue,
                        // Counted by the worker that had it, once.
                        Err(d) => {
                            if dnat_here && !is_older {
                                counters.inc(dropped_counter(d));
                                dropped[d as usize] += 1;
                            }
                            continue;
                        }
                    };
                    let mine = if raw[MODE_AT] == full_nat {
                        self.owner(c.keys[1].dport) == self.worker
                    } else {
                        dnat_here
                    };
                    if !mine {
                        continue;
                    }
                    let h = self.conntrack.prefetch_keys(&c.keys);
                    match ahead.push((at - 1, c.moved, h)) {
                        Some(due) => due,
                        None => continue,
                    }
                } else {
                    match ahead.pop() {
                        Some(due) => due,
                        None => break,
                    }
                };
                let (slot, moved, h) = due;
                let e = moved.entry::<FlowRec>(region.slot(slot));
                self.conntrack.prefetch_slot_ahead(ADOPT_AHEAD / 2);
                // A flow a newer set held too was adopted from there.
                if is_older && self.conntrack.tracks(&e, h) {
                    older += 1;
                    continue;
                }
                match self.adopt_one(e, h, now) {
                    Ok(id) => {
                        kept += 1;
                        counters.inc(Counter::FlowsAdopted);
                        if meters {
                            if let (Some(r), Some(m)) =
                                (self.records.as_mut(), region.meter(slot, METER_BYTES))
                            {
                                r.adopt_meter(id, m);
                            }
                        }
                        if let Some((n, halt)) = prev.halt_after {
                            if kept >= n {
                                tracing::warn!(
                                    worker = self.worker,
                                    adopted = kept,
                                    "adoption halted ({HALT_ENV})"
                                );
                                halt();
                                return;
                            }
                        }
                    }
                    Err(d) => {
                        counters.inc(dropped_counter(d));
                        dropped[d as usize] += 1;
                    }
                }
            }
        }
        if let Some(done) = &prev.done {
            done.fetch_add(1, Ordering::AcqRel);
        }
        let reasons: Vec<String> = Dropped::ALL
            .iter()
            .filter(|d| dropped[**d as usize] > 0)
            .map(|d| format!("{} {}", d.name(), dropped[*d as usize]))
            .collect();
        tracing::info!(
            worker = self.worker,
            adopted = kept,
            dropped = %reasons.join(", "),
            older_copies = older,
            pins_adopted = pins.0,
            pins_dropped = pins.1,
            neighbours_carried = self.neighbors.carried(),
            took_ms = started.elapsed().as_millis() as u64,
            "flows of the previous border-dp adopted"
        );
    }

    /// Fits one checked entry to this process's tables and inserts it.
    fn adopt_one(
        &mut self,
        mut e: Entry<FlowRec>,
        h: AdoptHashes,
        now: u64,
    ) -> Result<EntryId, Dropped> {
        let (orig, reply) = (*e.orig(), *e.reply());
        let Some(tables) = self.tables.as_ref() else {
            return Err(Dropped::NoVip);
        };
        let vip_ip = orig.dst_ip();
        let Some(vip) = tables
            .vips
            .iter()
            .find(|v| v.addr == vip_ip && v.port == orig.dport && v.proto == orig.proto)
        else {
            return Err(Dropped::NoVip);
        };
        let rec = &mut e.value;
        if rec.mode != vip.mode || usize::from(rec.client_port) >= tables.routes.ports.len() {
            return Err(Dropped::BadValue);
        }
        let backend = IpAddr::from(reply.src);
        let backend = match backend {
            IpAddr::V6(a) if !reply.v6 => a.to_ipv4_mapped().map_or(backend, IpAddr::V4),
            b => b,
        };
        let Some((bi, b)) =
            vip.backends.iter().enumerate().find(|(_, b)| {
                b.addr == backend && b.port == reply.sport && b.out_port != usize::MAX
            })
        else {
            return Err(Dropped::NoBackend);
        };
        (rec.vip_slot, rec.backend_slot) = (vip.stat_slot, b.stat_slot);
        rec.backend_port = b.out_port as u8;
        // The flow holds its client's adopted pin again if the pin still
        // sends the client to this backend; else it holds none.
        let held_pin = rec.bits & FLOW_PERSIST != 0 && vip.persist_ms != 0;
        let pin = held_pin
            .then(|| self.persist.find(vip.stat_slot, &orig.src, now))
            .flatten()
            .filter(|p| p.backend_id == b.id);
        // Its tunnel's constants are worked out again for this process's ports.
        rec.bits &= !(FLOW_COUNTED | FLOW_PERSIST | FLOW_TUNNEL);
        if pin.is_some() {
            rec.bits |= FLOW_PERSIST;
        }
        (rec.fwd, rec.rev) = flow_deltas(rec.mode, &orig, &reply);
        let (hop, next_hop) = (b.hop, b.next_hop);
        rec.hop = match hop {
            crate::neigh::Slot::NONE => self.neighbors.slot_for(next_hop),
            hop => hop,
        };
        if rec.mode == Mode::FullNat && !self.local_ports.adopted(&reply.dst, reply.dport) {
            return Err(Dropped::NotOwned);
        }
        let (vs, bs) = (rec.vip_slot, rec.backend_slot);
        let counter = (rec.conn_id & 0xFFFF_FFFF_FFFF) + 1;
        let open = !matches!(e.state(), State::TimeWait | State::Closed);
        match self.conntrack.adopt_hashed(&mut e, h, now) {
            Ok(id) => {
                // New connections' ids (the PPv2 UNIQUE_ID) go on after the
                // adopted ones'.
                self.conn_counter = self.conn_counter.max(counter);
                self.vip_stats.add(vs, FlowStat::ActiveConnections, 1);
                self.backend_stats.add(bs, FlowStat::ActiveConnections, 1);
                if let Some(p) = pin {
                    self.persist.hold(p.at);
                }
                if open && vip.admit.active {
                    let held = vip.admit.recount(bi as u32, &self.admission.counts);
                    self.conntrack.get_mut(id).value.bits |= held;
                }
                Ok(id)
            }
            Err(d) => {
                if rec_is_fullnat(&e) {
                    self.local_ports.released(&reply.dst, reply.dport, 0);
                }
                Err(d)
            }
        }
    }
}

/// A time of the previous process's clock in this one's.
fn shifted(t: u64, shift: i64) -> u64 {
    if shift >= 0 {
        t.saturating_add(shift as u64)
    } else {
        t.saturating_sub(shift.unsigned_abs())
    }
}

/// A client address no client has: unspecified or multicast.
fn bad_client(c: &[u8; 16]) -> bool {
    let a = std::net::Ipv6Addr::from(*c);
    match a.to_ipv4_mapped() {
        Some(v4) => v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast(),
        None => a.is_unspecified() || a.is_multicast(),
    }
}

fn rec_is_fullnat(e: &Entry<FlowRec>) -> bool {
    e.value.mode == Mode::FullNat
}
