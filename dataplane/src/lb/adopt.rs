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
//! Several sets of regions (a start that crashed while adopting left its
//! own and the ones it adopted from, see `crate::flows_region`) are read
//! newest generation first: an entry an older set holds too is the same
//! flow, already adopted, and is skipped without a count.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrayvec::ArrayVec;

use conf::counters::Counter;
use conf::state::FlowStat;
use conf::{Encap, Mode};

use super::flow::{flow_deltas, FlowRec, FLOW_COUNTED, FLOW_PERSIST, FLOW_TUNNEL};
use super::records::METER_BYTES;
use super::Lb;
use crate::conntrack::adopt::{byte_of, read_slot, Dropped, RawValue, ADOPT_BATCH};
use crate::conntrack::{Entry, EntryId, State};
use crate::counters::Counters;
use crate::flows_region::PreviousFlows;
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
    pub fn adopt_from(&mut self, previous: Previous) {
        self.previous = Some(previous);
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
        let (mut kept, mut dropped, mut older) = (0u64, [0u64; Dropped::ALL.len()], 0u64);
        let newest = prev.flows.newest_generation().unwrap_or(0);
        for region in &prev.flows.regions {
            let shift = region.clock_offset_ms.saturating_sub(prev.clock_offset_ms);
            let dnat_here = region.worker % self.workers == self.worker;
            let is_older = region.generation < newest;
            let meters = self.records.is_some() && region.has_meters(METER_BYTES);
            let mut batch: ArrayVec<(Entry<FlowRec>, usize), ADOPT_BATCH> = ArrayVec::new();
            let mut next = 0;
            while next < region.slots() {
                // A batch of this worker's entries, their buckets prefetched.
                batch.clear();
                while next < region.slots() && !batch.is_full() {
                    let at = next;
                    next += 1;
                    let e = match read_slot::<FlowRec>(region.slot(at), shift, now) {
                        Ok(Some(e)) => e,
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
                    let mine = match e.value.mode {
                        Mode::FullNat => self.owner(e.reply().dport) == self.worker,
                        Mode::Dnat | Mode::Dsr(_) => dnat_here,
                    };
                    if mine {
                        self.conntrack.prefetch_for_adopt(&e);
                        batch.push((e, at));
                    }
                }
                for (e, at) in batch.drain(..) {
                    // A flow a newer set held too was adopted from there.
                    if is_older && self.conntrack.tracks(&e) {
                        older += 1;
                        continue;
                    }
                    match self.adopt_one(e, now) {
                        Ok(id) => {
                            kept += 1;
                            counters.inc(Counter::FlowsAdopted);
                            if meters {
                                if let (Some(r), Some(m)) =
                                    (self.records.as_mut(), region.meter(at, METER_BYTES))
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
            took_ms = started.elapsed().as_millis() as u64,
            "flows of the previous border-dp adopted"
        );
    }

    /// Fits one checked entry to this process's tables and inserts it.
    fn adopt_one(&mut self, mut e: Entry<FlowRec>, now: u64) -> Result<EntryId, Dropped> {
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
        // This process has no pins yet: nothing for the flow to give back.
        // Its tunnel's constants are worked out again for this process's ports.
        rec.bits &= !(FLOW_COUNTED | FLOW_PERSIST | FLOW_TUNNEL);
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
        match self.conntrack.adopt_entry(e, now) {
            Ok(id) => {
                // New connections' ids (the PPv2 UNIQUE_ID) go on after the
                // adopted ones'.
                self.conn_counter = self.conn_counter.max(counter);
                self.vip_stats.add(vs, FlowStat::ActiveConnections, 1);
                self.backend_stats.add(bs, FlowStat::ActiveConnections, 1);
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

fn rec_is_fullnat(e: &Entry<FlowRec>) -> bool {
    e.value.mode == Mode::FullNat
}
