//! A new flow: the backend Maglev picks, the full-NAT local tuple it
//! takes, and which worker owns a local port.

use conf::counters::Counter;
use conf::state::FlowStat;
use conf::Mode;

use super::count_drop;
use super::flood::HALF_OPEN_MIN_AGE_MS;
use super::flow::{flow_deltas, Ending, FlowRec, FLOW_PERSIST, FLOW_PP, FLOW_TS};
use super::release::Release;
use super::tables::{Adopted, VipRt};
use super::Lb;
use crate::conntrack::{EntryId, Eviction, FlowKey, InsertError, KeyHash, NewKeys, State};
use crate::counters::Counters;
use crate::local_ports::SetId;
use crate::nat;
use crate::neigh::Slot;
use crate::persist::{Displaced, Found, Persist, PinTarget};
use crate::ppv2::PpFlow;
use crate::tstamp;
use crate::verdict::Verdict;
use crate::wire::{ip_proto, Parsed};

/// A half-open entry old enough to give up its local tuple to a new flow
/// (see [`HALF_OPEN_MIN_AGE_MS`]).
fn stale_half_open(state: State, created_at: u64, now: u64) -> bool {
    matches!(state, State::SynSent | State::SynRecv)
        && now.saturating_sub(created_at) >= HALF_OPEN_MIN_AGE_MS
}

/// Local ports tried for one new full-NAT flow before giving up.
pub(super) const LOCAL_PORT_TRIES: u32 = 64;

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

/// The source port the flow hash of `vip` takes: 0 with `hash = "source"`,
/// so that every connection of a client address hashes alike.
#[inline(always)]
fn hashed_sport(vip: &VipRt<'_>, sport: u16) -> u16 {
    if vip.hash_source {
        0
    } else {
        sport
    }
}

impl<'t> Adopted<'t> {
    /// The backend Maglev picks for the flow of a client's packet.
    #[inline]
    pub(super) fn pick_key(&self, vip: &VipRt<'_>, k: &FlowKey) -> Option<u32> {
        if vip.ring.is_empty() {
            return None;
        }
        vip.ring.pick(self.flow_hash(vip, k))
    }

    /// The Maglev flow hash of a client's key `k` to `vip`.
    #[inline(always)]
    pub(super) fn flow_hash(&self, vip: &VipRt<'_>, k: &FlowKey) -> u64 {
        let sport = hashed_sport(vip, k.sport);
        if k.v6 {
            self.hasher.hash_v6(k.src, k.dst, sport, k.dport, k.proto)
        } else {
            let v4 = |a: &[u8; 16]| [a[12], a[13], a[14], a[15]];
            self.hasher
                .hash_v4(v4(&k.src), v4(&k.dst), sport, k.dport, k.proto)
        }
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
            } => self
                .hasher
                .hash_v4(*src, *dst, hashed_sport(vip, *sport), *dport, *proto),
            Flow4or6::V6 {
                src,
                dst,
                sport,
                dport,
                proto,
            } => self
                .hasher
                .hash_v6(*src, *dst, hashed_sport(vip, *sport), *dport, *proto),
        };
        vip.ring.pick(h)
    }
}

/// A persistent VIP's pick for a new flow (docs/design.md §2,
/// "Persistence"): the backend its client is pinned to on this worker, if
/// the ring can still pick it; else Maglev's pick (by the client address,
/// so every worker makes the same first choice), pinned. With the pin's
/// place, which a tracked flow then holds.
#[inline(never)]
fn pick_persistent(
    persist: &mut Persist,
    tables: &Adopted<'_>,
    vip: &VipRt<'_>,
    orig: &FlowKey,
    now: u64,
    counters: &mut Counters,
) -> (Option<u32>, Option<usize>) {
    if vip.ring.is_empty() {
        return (None, None);
    }
    match persist.lookup(vip.stat_slot, &orig.src, now) {
        Found::Live(p) => match vip.pinned_backend(p.backend_id, p.hint) {
            Some(bi) => {
                counters.inc(Counter::PersistenceHits);
                persist.touch(p.at, now, vip.persist_ms);
                return (Some(bi), Some(p.at));
            }
            None => counters.inc(Counter::PersistenceBackendGone),
        },
        Found::Expired => counters.inc(Counter::PersistenceExpired),
        Found::Absent => {}
    }
    counters.inc(Counter::PersistenceMisses);
    let Some((bi, b)) = tables
        .pick_key(vip, orig)
        .and_then(|bi| Some((bi, vip.backends.get(bi as usize)?)))
    else {
        return (None, None);
    };
    let to = PinTarget {
        backend_id: b.id,
        backend_slot: b.stat_slot,
        index: bi,
    };
    let at = persist
        .record(vip.stat_slot, &orig.src, to, now, vip.persist_ms)
        .map(|(at, displaced)| {
            match displaced {
                Displaced::Nothing => {}
                Displaced::Expired => counters.inc(Counter::PersistenceExpired),
                Displaced::Evicted => counters.inc(Counter::PersistenceEvictions),
            }
            at
        });
    (Some(bi), at)
}

/// What a new flow's pick produced.
pub(super) enum Picked {
    /// Tracked under this entry.
    Tracked(EntryId),
    /// Not tracked (table full, DNAT): forwarded by the pick alone, as
    /// [`Lb::stateless`] says (kept there: a new flow's result stays
    /// small and is not copied around).
    Stateless,
}

/// Where a new flow goes: the backend's mode, address, port and local set.
#[derive(Clone, Copy)]
struct Target {
    mode: Mode,
    addr16: [u8; 16],
    port: u16,
    v6: bool,
    local_set: Option<SetId>,
}

/// Which worker owns full-NAT local port `port` among `workers`.
pub fn port_owner(port: u16, workers: usize) -> usize {
    let mask = (workers.next_power_of_two() - 1) as u16;
    (port & mask) as usize
}

impl Lb {
    pub(super) fn owner(&self, local_port: u16) -> usize {
        (local_port & self.owner_mask) as usize
    }

    /// A new flow of the client's key `orig` (`orig_hash`: its
    /// [`crate::conntrack::Conntrack::hash_of`]) to VIP `vi`: its backend,
    /// and its entry unless it goes stateless.
    pub(super) fn new_flow(
        &mut self,
        vi: u32,
        (orig, orig_hash): (&FlowKey, KeyHash),
        in_port: usize,
        frame: &[u8],
        counters: &mut Counters,
    ) -> Result<Picked, Verdict> {
        // `[vip.limits]` first: a refused flow evicts nothing.
        if let Some(v) = self
            .tables
            .as_mut()
            .and_then(|t| t.vips.get_mut(vi as usize))
        {
            if v.admit.active {
                let counts = &self.admission.counts;
                if let Err(c) = v.admit.before_pick(orig, self.now_ms, counts, counters) {
                    return Err(count_drop(counters, c));
                }
            }
        }
        let room = if self.conntrack.is_full() {
            self.make_room(counters)
        } else {
            Eviction::Evicted
        };
        let Some(tables) = self.tables.as_ref() else {
            return Err(count_drop(counters, Counter::DropNotLocal));
        };
        let Some(vip) = tables.vips.get(vi as usize) else {
            return Err(count_drop(counters, Counter::DropNotLocal));
        };
        let (pick, pin) = if vip.persist_ms == 0 {
            // Picked in the lane's passes (`early.rs`) if they took it.
            let early = self.carry.as_ref().and_then(|c| c.picked(vi, orig));
            #[cfg(test)]
            if early.is_some() {
                let (p, r) = self.early_used.get();
                self.early_used.set((p + 1, r));
            }
            (early.or_else(|| tables.pick_key(vip, orig)), None)
        } else {
            pick_persistent(&mut self.persist, tables, vip, orig, self.now_ms, counters)
        };
        let Some((bi, b)) = pick.and_then(|bi| Some((bi, vip.backends.get(bi as usize)?))) else {
            return Err(count_drop(counters, Counter::DropNoBackend));
        };
        if b.out_port == usize::MAX {
            return Err(count_drop(counters, Counter::DropNoRoute));
        }
        let held = if vip.admit.active {
            match vip.admit.take(bi, &self.admission.counts) {
                Ok(held) => held,
                Err(c) => return Err(count_drop(counters, c)),
            }
        } else {
            0
        };
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
        let proxy = if tcp {
            PpFlow::new(vip.proxy_protocol, orig.v6)
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
            bits: if proxy.is_on() { FLOW_PP | held } else { held }
                | if pin.is_some() { FLOW_PERSIST } else { 0 },
            ts_delta: 0,
            fwd: nat::Deltas::default(),
            rev: nat::Deltas::default(),
            conn_id: (self.worker as u64) << 48 | (self.conn_counter & 0xFFFF_FFFF_FFFF),
            proxy,
        };
        self.conn_counter += 1;
        let state = if tcp { State::SynSent } else { State::Udp };
        let mut rec = rec;
        let to = Target {
            mode: vip.mode,
            addr16: b.addr16,
            port: b.port,
            v6: b.addr.is_ipv6(),
            local_set: b.local_set,
        };
        let placed = self.place(to, (orig, orig_hash), &mut rec, (state, room), counters);
        let picked = match placed {
            Ok(Picked::Stateless) if held != 0 => {
                // Nothing tracks it: nothing could give its places back later.
                let r = &mut self.stateless.0;
                self.admission.release(held, r.vip_slot, r.backend_slot);
                r.bits &= !held;
                Picked::Stateless
            }
            Ok(p) => p,
            Err(c) => {
                self.admission.release(held, rec.vip_slot, rec.backend_slot);
                return Err(count_drop(counters, c));
            }
        };
        if let (Picked::Tracked(_), Some(at)) = (&picked, pin) {
            self.persist.hold(at);
        }
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

    /// Tracks a new flow to the backend `to` (DNAT: its entry, or stateless
    /// when the table is full; full-NAT: a local tuple): what the pick
    /// produced, or why it failed.
    fn place(
        &mut self,
        to: Target,
        (orig, orig_hash): (&FlowKey, KeyHash),
        rec: &mut FlowRec,
        (state, room): (State, Eviction),
        counters: &mut Counters,
    ) -> Result<Picked, Counter> {
        let now = self.now_ms;
        let picked = match to.mode {
            // DSR: keyed as DNAT (the backend's replies would be backend ->
            // client), though none passes here: the entry is one-way.
            Mode::Dnat | Mode::Dsr(_) => {
                let reply = FlowKey {
                    src: to.addr16,
                    dst: orig.src,
                    sport: to.port,
                    dport: orig.sport,
                    proto: orig.proto,
                    v6: to.v6 || orig.v6,
                };
                (rec.fwd, rec.rev) = flow_deltas(rec.mode, orig, &reply);
                let reply_hash = self.reply_hash_of(&reply);
                let keys = NewKeys {
                    orig: *orig,
                    orig_hash,
                    reply,
                    reply_hash,
                    reply_unheld: false,
                };
                let mut release = Release::of(
                    self.vip_stats,
                    self.backend_stats,
                    &mut self.local_ports,
                    &self.state_timeouts_ms,
                    self.records.as_mut(),
                    &self.admission,
                    &mut self.persist,
                );
                let inserted = self
                    .conntrack
                    .insert_keys(&keys, *rec, state, now, |id, e| release.entry(id, e));
                match inserted {
                    Ok(id) => {
                        if to.mode.is_dsr() {
                            self.conntrack.mark_one_way(id);
                        }
                        Picked::Tracked(id)
                    }
                    // A stateless PROXY flow could carry no header.
                    Err(InsertError::Full) if rec.pp_on() => {
                        return Err(Counter::DropPpConntrackFull);
                    }
                    Err(InsertError::Full) => {
                        counters.inc(Counter::ConntrackFullStateless);
                        self.stateless = (*rec, reply);
                        Picked::Stateless
                    }
                    Err(_) => {
                        return Err(Counter::DropReplyKeyInUse);
                    }
                }
            }
            Mode::FullNat => {
                let Some(set) = to.local_set else {
                    return Err(Counter::DropNoLocalPort);
                };
                if self.conntrack.is_full() {
                    let why = match room {
                        Eviction::TooYoung => Counter::DropSynFlood,
                        _ => Counter::DropConntrackFull,
                    };
                    return Err(why);
                }
                let reply = FlowKey {
                    src: to.addr16,
                    dst: [0; 16],
                    sport: to.port,
                    dport: 0,
                    proto: orig.proto,
                    v6: to.v6,
                };
                let keys = NewKeys {
                    orig: *orig,
                    orig_hash,
                    reply,
                    reply_hash: KeyHash::default(),
                    reply_unheld: false,
                };
                match self.take_local_tuple(set, keys, rec, state, counters) {
                    Ok(id) => Picked::Tracked(id),
                    Err(c) => return Err(c),
                }
            }
        };
        Ok(picked)
    }

    /// Tracks a new full-NAT flow under a local tuple of `set` (see
    /// [`local_ports`]): the least recently used one that is not resting
    /// and not held by a live connection to the same backend. A tuple
    /// whose connection has ended (both FINs, a RST, or expired) is taken
    /// over once it has rested, its old entry dropped. `keys`: the
    /// original key and its hash, and the reply key but for its
    /// destination (the local tuple).
    pub(super) fn take_local_tuple(
        &mut self,
        set: SetId,
        mut keys: NewKeys,
        rec: &mut FlowRec,
        state: State,
        counters: &mut Counters,
    ) -> Result<EntryId, Counter> {
        let now = self.now_ms;
        for _ in 0..LOCAL_PORT_TRIES {
            let Some(t) = self.local_ports.next(set, now, 1) else {
                continue;
            };
            keys.reply.dst = t.addr16;
            keys.reply.dport = t.port;
            // Hashed in the lane's passes if they guessed this tuple.
            keys.reply_hash = self.reply_hash_of(&keys.reply);
            // The reply key's bucket loads while the checksum changes of
            // the translation are worked out.
            self.conntrack.prefetch_bucket(keys.reply_hash);
            (rec.fwd, rec.rev) = flow_deltas(rec.mode, &keys.orig, &keys.reply);
            let reply = keys.reply;
            if let Some(holder) = self.conntrack.holder_hashed(&reply, keys.reply_hash) {
                let e = self.conntrack.get(holder);
                let ended =
                    e.is_expired(now) || matches!(e.state(), State::TimeWait | State::Closed);
                if !ended && !stale_half_open(e.state(), e.created_at(), now) {
                    continue;
                }
                if ended {
                    let ready = self.local_ports.ready_at(
                        e.last_seen(&self.state_timeouts_ms),
                        e.value.rests_briefly(&reply),
                    );
                    if ready > now {
                        self.local_ports.rest_until(&t, ready);
                        continue;
                    }
                    counters.inc(Counter::LocalTuplesTakenOver);
                } else {
                    // A SYN flood holds every tuple: the oldest go first
                    // (the cursor hands tuples out in the order it took them).
                    counters.inc(Counter::ConntrackHalfOpenEvicted);
                }
                let ending = if ended {
                    Ending::AsItsState
                } else {
                    Ending::Evicted
                };
                self.forget(holder, ending);
            }
            // No entry holds the tuple now: the insert need not look again.
            keys.reply_unheld = true;
            let mut release = Release::of(
                self.vip_stats,
                self.backend_stats,
                &mut self.local_ports,
                &self.state_timeouts_ms,
                self.records.as_mut(),
                &self.admission,
                &mut self.persist,
            );
            let inserted = self
                .conntrack
                .insert_keys(&keys, *rec, state, now, |id, e| release.entry(id, e));
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
    pub(super) fn start_timestamps(&mut self, id: EntryId, frame: &[u8], p: &Parsed) {
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
}
