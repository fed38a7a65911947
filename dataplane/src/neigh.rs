//! Next-hop resolution: a per-worker neighbour table (IP -> MAC), and the
//! ARP requests / neighbour solicitations that fill it.
//!
//! What may write into the table (the policy; [`crate::lb`] applies it to
//! what [`crate::slowpath`] heard):
//! - An entry is made only for a next hop border sends to: a backend's or
//!   a gateway's (made when the tables are adopted, and pinned), or a
//!   destination of a DNAT reply. It starts incomplete and is asked for.
//! - An answer (ARP reply, solicited NA) fills an entry when it answers a
//!   request border sent and is still waiting for ([`NeighborSync`] keeps
//!   what every worker asked, [`ANSWER_WINDOW_MS`]), or refreshes an entry
//!   the table has. Announcements (gratuitous ARP, unsolicited NA) and the
//!   sender of a request for our address (RFC 826's merge) only update an
//!   entry the table has. Nothing heard ever makes an entry.
//! - An entry in use is trusted for [`REACHABLE_MS`]; the next packet after
//!   that sends a probe (unicast to the known MAC, then broadcast) while it
//!   keeps using the MAC; an answer confirms it or moves it to the new MAC,
//!   and an entry no probe got an answer for becomes incomplete again
//!   (`neigh_failed`) and is asked for like a new one.
//! - The table has [`CAPACITY`] entries; a new one takes the place of the
//!   least recently used entry that is not pinned (`neigh_evicted`).
//!   Entries [`Neighbors::learn`] installs (tests, benchmarks) are static.
//!
//! Every worker keeps its own table, so lookups take no locks. What one
//! worker hears is offered to the others through bounded lock-free inboxes
//! ([`NeighborSync`]); they apply it to the entries they have. An inbox that
//! is full drops the update, which the next probe repeats.
//!
//! Callers keep an entry's [`Slot`] (per backend, per flow) and resolve by
//! index without hashing. A slot names one entry's life: once the entry
//! is evicted, its slot resolves to [`Resolution::Gone`], never to the
//! address that took its place.
//!
//! Across a restart ([`Neighbors::use_mirror`], [`Neighbors::carry`]):
//! each worker keeps a [`NeighRecord`] of every entry that has a MAC in
//! its carry region (`crate::carry_region`), written when the entry
//! learns, changes or loses its MAC (never per packet). The next process
//! checks every record ([`read_record`]), moves its reachable time by the
//! wall-clock time the restart took, and an entry it makes for one of
//! those addresses (the same policy as above: only for a next hop it
//! sends to) starts with the MAC: trusted for what is left of its
//! reachable time, or, past it, used while a probe confirms it, as any
//! entry past its reachable time. A binding older than [`CARRY_MAX_AGE_MS`]
//! is not used: the address is asked for as a new one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrayvec::ArrayVec;
use crossbeam_queue::ArrayQueue;
use hashbrown::HashMap;

use crate::doorbell::Doorbell;
use crate::wire::arp::{self, ArpRepr};
use crate::wire::ethernet::{self, ethertype, EthernetRepr, MIN_FRAME_LEN};
use crate::wire::icmpv6::{self, NdiscRepr, ND_HOP_LIMIT};
use crate::wire::ipv6::{self, Ipv6Repr};
use crate::wire::{ip_proto, MacAddr, BROADCAST_MAC};

/// How long an answer is trusted: the first use after this sends a probe.
pub const REACHABLE_MS: u64 = 5_000;
/// Gap between two probes of an entry in use.
pub const PROBE_GAP_MS: u64 = 500;
/// Probes sent to the known MAC before asking by broadcast.
pub const UNICAST_PROBES: u8 = 1;
/// Broadcast probes after those; unanswered, the entry fails.
pub const BROADCAST_PROBES: u8 = 2;
/// Minimum gap between two requests for an incomplete entry.
pub const RETRY_MS: u64 = 1_000;
/// How long after a request an answer to it is accepted.
pub const ANSWER_WINDOW_MS: u64 = 3_000;
/// Entries per worker table.
pub const CAPACITY: usize = 1 << INDEX_BITS;
const INDEX_BITS: u32 = 12;
const INDEX_MASK: u16 = (1 << INDEX_BITS) - 1;
/// Generations a slot index goes through (the 4 bits above the index; the
/// 16th is [`Slot::NONE`]'s).
const GENERATIONS: u8 = 15;
const INBOX: usize = 1024;
/// Entries whose probes the clock follows up (more are followed by their
/// traffic alone).
pub const PROBING: usize = 64;
/// Requests remembered across workers (by hash of the address).
const ASKED: usize = 1024;

/// `Entry::fresh_until` of a static entry.
const STATIC: u64 = u64::MAX;

/// A carried binding whose reachable time ended longer ago than this is
/// not used (Linux's `gc_stale_time` is 60 s too): the address is asked
/// for again.
pub const CARRY_MAX_AGE_MS: u64 = 60_000;

/// What a worker's carry region keeps of one entry of its table (40
/// bytes; all zero: nothing). Written by [`Neighbors`] only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct NeighRecord {
    /// The address (IPv4-mapped for IPv4).
    pub ip: [u8; 16],
    pub mac: [u8; 6],
    /// 4 or 6; 0: no binding.
    pub family: u8,
    pub _pad: u8,
    /// The MAC is trusted until then (the writer's worker milliseconds).
    pub fresh_until: u64,
    /// [`record_seal`] of the fields above, written last.
    pub seal: u64,
}

/// The layout of [`NeighRecord`] (the carry region's geometry checksum).
pub fn record_layout_words() -> Vec<u64> {
    use core::mem::{offset_of, size_of};
    [
        size_of::<NeighRecord>(),
        offset_of!(NeighRecord, ip),
        offset_of!(NeighRecord, mac),
        offset_of!(NeighRecord, family),
        offset_of!(NeighRecord, fresh_until),
        offset_of!(NeighRecord, seal),
    ]
    .iter()
    .map(|&w| w as u64)
    .collect()
}

/// A fixed hash of a record's fields (never 0): a record whose seal does
/// not match was cut short by a kill, or written by something else.
pub fn record_seal(ip: &[u8; 16], mac: &[u8; 6], family: u8, fresh_until: u64) -> u64 {
    let mix = |x: u64| {
        let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    let lo = u64::from_le_bytes(ip[..8].try_into().unwrap_or_default());
    let hi = u64::from_le_bytes(ip[8..].try_into().unwrap_or_default());
    let mut m = [0u8; 8];
    m[..6].copy_from_slice(mac);
    m[6] = family;
    let h = mix(lo ^ mix(hi ^ mix(u64::from_le_bytes(m) ^ mix(fresh_until ^ 0x4e45_4947))));
    h | 1
}

/// Why a carried record was not used. Each has its counter
/// (`neigh_adopt_dropped_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CarryDropped {
    /// Its seal does not match its fields.
    Torn,
    /// No valid family, an address no next hop has (unspecified,
    /// multicast, broadcast, loopback; an IPv4 one not IPv4-mapped), or a
    /// MAC no host has (zero, multicast).
    BadValue,
    /// Its reachable time ended more than [`CARRY_MAX_AGE_MS`] before
    /// this process took over.
    Expired,
}

/// Checks one record's raw bytes (exactly `size_of::<NeighRecord>()`):
/// `Ok(None)` for an empty one, else its address, MAC and reachable time
/// moved by `shift_ms` into this process's clock.
pub fn read_record(
    b: &[u8],
    shift_ms: i64,
) -> Result<Option<(IpAddr, [u8; 6], u64)>, CarryDropped> {
    use core::mem::offset_of;
    if b.len() != core::mem::size_of::<NeighRecord>() {
        return Err(CarryDropped::BadValue);
    }
    let family = b[offset_of!(NeighRecord, family)];
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let seal = u64_at(offset_of!(NeighRecord, seal));
    if family == 0 {
        return Ok(None);
    }
    let mut ip = [0u8; 16];
    ip.copy_from_slice(&b[..16]);
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&b[offset_of!(NeighRecord, mac)..offset_of!(NeighRecord, mac) + 6]);
    let fresh_until = u64_at(offset_of!(NeighRecord, fresh_until));
    if family != 4 && family != 6 {
        return Err(CarryDropped::BadValue);
    }
    if seal != record_seal(&ip, &mac, family, fresh_until) {
        return Err(CarryDropped::Torn);
    }
    let v6 = Ipv6Addr::from(ip);
    let addr = match (family, v6.to_ipv4_mapped()) {
        (4, Some(a))
            if !(a.is_unspecified() || a.is_multicast() || a.is_broadcast() || a.is_loopback()) =>
        {
            IpAddr::V4(a)
        }
        (6, None) if !(v6.is_unspecified() || v6.is_multicast() || v6.is_loopback()) => {
            IpAddr::V6(v6)
        }
        _ => return Err(CarryDropped::BadValue),
    };
    if mac == [0; 6] || mac[0] & 1 == 1 {
        return Err(CarryDropped::BadValue);
    }
    let fresh = if shift_ms >= 0 {
        fresh_until.saturating_add(shift_ms as u64)
    } else {
        fresh_until.saturating_sub(shift_ms.unsigned_abs())
    };
    Ok(Some((addr, mac, fresh)))
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The MAC is trusted until then (`0` without one, [`STATIC`] for an
    /// installed entry).
    fresh_until: u64,
    /// The last time a frame was sent (or waited) for this next hop.
    used_ms: u64,
    /// The last request or probe sent.
    asked_ms: Option<u64>,
    ip: IpAddr,
    mac: [u8; 6],
    /// `mac` holds the next hop's MAC (it may be stale).
    known: bool,
    /// Probes sent since the last answer.
    probes: u8,
    /// Bumped when the entry is evicted: the slots of its old life no
    /// longer match.
    generation: u8,
    /// In use (not on the free list).
    live: bool,
    /// The adoption epoch that pinned it ([`Neighbors::begin_pins`]).
    pinned: u32,
}

const DEAD: Entry = Entry {
    fresh_until: 0,
    used_ms: 0,
    asked_ms: None,
    ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    mac: [0; 6],
    known: false,
    probes: 0,
    generation: 0,
    live: false,
    pinned: 0,
};

/// A binding passed between workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub ip: IpAddr,
    pub mac: [u8; 6],
    pub how: Heard,
}

/// How a worker came by a binding it shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// Installed ([`Neighbors::learn`]): every worker installs it.
    Installed,
    /// An answer: confirms the entry's reachability.
    Confirmed,
    /// An announcement or a requester's address: updates the MAC, and the
    /// entry is probed on its next use when it changed.
    Unconfirmed,
}

/// What a binding heard on the wire did to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// No entry for the address: nothing heard makes one.
    NotInTable,
    /// A static entry: left as it is.
    Static,
    /// Same MAC (reachability confirmed when the binding was).
    Same,
    /// The entry had no MAC and now has one.
    Filled,
    /// The entry moved to another MAC.
    Changed,
}

/// What a lookup tells the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Send to this MAC.
    Known([u8; 6]),
    /// Send to this MAC, and also send a probe ([`Neighbors::probe_mac`]
    /// says to where): the binding is past its reachable time.
    KnownRefresh([u8; 6]),
    /// Unknown: send a request now (and let the packet wait or drop it).
    Request,
    /// Unknown and a request is already out.
    Pending,
    /// No entry: the table was full of pinned entries.
    Full,
    /// The slot's entry was evicted (its address left the configuration
    /// and the table filled): the slot is no longer any address's.
    Gone,
}

/// An entry's place in a [`Neighbors`] table, for one life of the entry:
/// the index in the low 12 bits, the entry's generation in the high 4.
/// [`Slot::NONE`] stands for an address the full table could not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot(u16);

impl Slot {
    /// No entry: the table was full.
    pub const NONE: Slot = Slot(u16::MAX);

    fn new(index: usize, generation: u8) -> Slot {
        Slot((index as u16 & INDEX_MASK) | u16::from(generation) << INDEX_BITS)
    }

    #[inline(always)]
    fn index(self) -> usize {
        (self.0 & INDEX_MASK) as usize
    }

    #[inline(always)]
    fn generation(self) -> u8 {
        (self.0 >> INDEX_BITS) as u8
    }
}

/// Running totals of a table, for the worker's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NeighStats {
    /// Entries given up for a new one (least recently used first).
    pub evicted: u64,
    /// Entries in use whose probes all went unanswered.
    pub failed: u64,
    /// Entries that moved to another MAC.
    pub changed: u64,
    /// Entries that started with a binding carried from the previous
    /// process.
    pub adopted: u64,
    /// Carried bindings found too old to use ([`CARRY_MAX_AGE_MS`]).
    pub carried_expired: u64,
}

pub struct Neighbors {
    /// Every entry, live or on the free list; never reallocated.
    entries: Box<[Entry]>,
    /// Indices of dead entries, the lowest last.
    free: Vec<u16>,
    /// Live entries by address; room for twice [`CAPACITY`], so the
    /// tombstones evictions leave are cleared in place, without allocating.
    index: HashMap<IpAddr, u16, ahash::RandomState>,
    /// The current adoption epoch: entries pinned with it are kept.
    epoch: u32,
    stats: NeighStats,
    now_ms: u64,
    /// Entries with a probe out, and the port it left by: probed again
    /// (or failed) on time even when no frame uses them meanwhile.
    probing: ArrayVec<(Slot, usize), PROBING>,
    /// Where each entry's binding is kept for the next process (its
    /// carry region), one record per entry.
    mirror: Option<crate::conntrack::Slab<NeighRecord>>,
    /// Bindings carried from the previous process, by address: MAC and
    /// reachable time (this process's clock).
    carried: HashMap<IpAddr, ([u8; 6], u64), ahash::RandomState>,
}

impl Default for Neighbors {
    fn default() -> Self {
        Self::new()
    }
}

impl Neighbors {
    pub fn new() -> Self {
        Neighbors {
            entries: vec![DEAD; CAPACITY].into_boxed_slice(),
            free: (0..CAPACITY as u16).rev().collect(),
            index: HashMap::with_capacity_and_hasher(2 * CAPACITY, ahash::RandomState::new()),
            epoch: 1,
            stats: NeighStats::default(),
            now_ms: 0,
            probing: ArrayVec::new(),
            mirror: None,
            carried: HashMap::default(),
        }
    }

    /// Keeps a record of every entry's binding in `records` (one per
    /// entry, [`CAPACITY`] of them, all empty) from now on, before any
    /// entry is made.
    pub fn use_mirror(&mut self, records: crate::conntrack::Slab<NeighRecord>) {
        if records.len() == CAPACITY {
            self.mirror = Some(records);
        }
    }

    /// Bindings carried from the previous process (address, MAC,
    /// reachable time in this process's clock; see the module docs): an
    /// entry made for one of the addresses from now on starts with it.
    /// The later of two bindings of an address is kept.
    pub fn carry(&mut self, bindings: impl IntoIterator<Item = (IpAddr, [u8; 6], u64)>) {
        for (ip, mac, fresh) in bindings {
            match self.carried.get(&ip) {
                Some(&(_, f)) if f >= fresh => {}
                _ => {
                    self.carried.insert(ip, (mac, fresh));
                }
            }
        }
    }

    /// Forgets the carried bindings too old to use at `now_ms`, counting
    /// them (the first tick with tables).
    pub fn expire_carried(&mut self, now_ms: u64) {
        let before = self.carried.len();
        self.carried
            .retain(|_, (_, fresh)| fresh.saturating_add(CARRY_MAX_AGE_MS) > now_ms);
        self.stats.carried_expired += (before - self.carried.len()) as u64;
    }

    /// Carried bindings not used yet (tests, inspection).
    pub fn carried(&self) -> usize {
        self.carried.len()
    }

    /// Writes entry `i`'s binding to its record (or empties the record):
    /// the seal is cleared first and written last, so a kill in between
    /// leaves a record whose seal does not match.
    #[cold]
    fn mirror(&mut self, i: usize) {
        let Some(records) = self.mirror.as_mut() else {
            return;
        };
        let (Some(e), Some(r)) = (self.entries.get(i), records.get_mut(i)) else {
            return;
        };
        let keep = e.live && e.known && e.fresh_until != STATIC;
        if !keep && r.family == 0 {
            return;
        }
        r.seal = 0;
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        if keep {
            let (ip, family) = match e.ip {
                IpAddr::V4(a) => (a.to_ipv6_mapped().octets(), 4),
                IpAddr::V6(a) => (a.octets(), 6),
            };
            r.ip = ip;
            r.mac = e.mac;
            r.family = family;
            r.fresh_until = e.fresh_until;
            core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
            r.seal = record_seal(&ip, &e.mac, family, e.fresh_until);
        } else {
            r.family = 0;
        }
    }

    pub fn len(&self) -> usize {
        CAPACITY - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> NeighStats {
        self.stats
    }

    /// The slot of the live entry at `i`.
    fn slot_of(&self, i: u16) -> Slot {
        Slot::new(i as usize, self.entries[i as usize].generation)
    }

    /// A new entry for `ip` (at `now_ms`): a free one, else the least
    /// recently used one that is neither pinned nor static. `None`: none.
    fn insert(&mut self, ip: IpAddr, now_ms: u64) -> Option<u16> {
        let i = match self.free.pop() {
            Some(i) => i,
            None => self.evict()?,
        };
        let e = &mut self.entries[i as usize];
        *e = Entry {
            ip,
            used_ms: now_ms,
            live: true,
            generation: e.generation,
            ..DEAD
        };
        self.index.insert(ip, i);
        if !self.carried.is_empty() {
            self.fill_carried(i as usize, now_ms);
        }
        Some(i)
    }

    /// Gives the new entry at `i` its carried binding, if it has one
    /// young enough: trusted for what is left of its reachable time, or
    /// (past it) used while the next use sends a probe.
    #[cold]
    fn fill_carried(&mut self, i: usize, now_ms: u64) {
        let ip = self.entries[i].ip;
        let Some(&(mac, fresh)) = self.carried.get(&ip) else {
            return;
        };
        if fresh.saturating_add(CARRY_MAX_AGE_MS) <= now_ms {
            return;
        }
        let e = &mut self.entries[i];
        e.mac = mac;
        e.known = true;
        e.fresh_until = fresh.min(now_ms.saturating_add(REACHABLE_MS));
        self.stats.adopted += 1;
        self.mirror(i);
    }

    /// Frees the least recently used evictable entry and returns its index.
    #[cold]
    fn evict(&mut self) -> Option<u16> {
        let epoch = self.epoch;
        let (i, _) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live && e.pinned != epoch && e.fresh_until != STATIC)
            .min_by_key(|(_, e)| e.used_ms)?;
        let e = &mut self.entries[i];
        self.index.remove(&e.ip);
        e.live = false;
        e.fresh_until = 0;
        e.generation = (e.generation + 1) % GENERATIONS;
        self.stats.evicted += 1;
        self.mirror(i);
        Some(i as u16)
    }

    /// Installs a static binding (tests, benchmarks: no ARP exchange):
    /// never probed, evicted or changed by what is heard. True when it
    /// is new or another MAC than before.
    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6], now_ms: u64) -> bool {
        let i = match self.index.get(&ip) {
            Some(&i) => i,
            None => match self.insert(ip, now_ms) {
                Some(i) => i,
                None => return false,
            },
        };
        let e = &mut self.entries[i as usize];
        let changed = !e.known || e.mac != mac;
        e.mac = mac;
        e.known = true;
        e.fresh_until = STATIC;
        e.asked_ms = None;
        e.probes = 0;
        self.mirror(i as usize);
        changed
    }

    /// Applies a binding heard on the wire (or from another worker) to the
    /// entry the table has for `ip`; makes none.
    pub fn heard(&mut self, ip: IpAddr, mac: [u8; 6], how: Heard, now_ms: u64) -> Update {
        if how == Heard::Installed {
            self.learn(ip, mac, now_ms);
            return Update::Same;
        }
        let Some(&i) = self.index.get(&ip) else {
            return Update::NotInTable;
        };
        let e = &mut self.entries[i as usize];
        if e.fresh_until == STATIC {
            return Update::Static;
        }
        let update = match (e.known, e.mac == mac) {
            (true, true) => Update::Same,
            (false, _) => Update::Filled,
            (true, false) => Update::Changed,
        };
        e.mac = mac;
        e.known = true;
        if how == Heard::Confirmed {
            e.fresh_until = now_ms.saturating_add(REACHABLE_MS);
            e.probes = 0;
        } else if update != Update::Same {
            // Trusted to send to now, confirmed by a probe on next use.
            e.fresh_until = now_ms;
            e.probes = 0;
            e.asked_ms = None;
        }
        if update == Update::Changed {
            self.stats.changed += 1;
        }
        self.mirror(i as usize);
        update
    }

    /// The MAC of `ip`, if known.
    pub fn get(&self, ip: IpAddr) -> Option<[u8; 6]> {
        let e = &self.entries[*self.index.get(&ip)? as usize];
        e.known.then_some(e.mac)
    }

    /// The slot of `ip`, if it has one.
    pub fn slot(&self, ip: IpAddr) -> Option<Slot> {
        self.index.get(&ip).map(|&i| self.slot_of(i))
    }

    /// The time [`Neighbors::slot_for`] makes entries at (the worker's
    /// clock, set once per poll iteration).
    pub fn set_now(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// [`Neighbors::slot_for_at`] at the time of the last
    /// [`Neighbors::set_now`].
    pub fn slot_for(&mut self, ip: IpAddr) -> Slot {
        self.slot_for_at(ip, self.now_ms)
    }

    /// The slot of `ip`, made for it at `now_ms` (incomplete, a request
    /// due) if it has none; [`Slot::NONE`] when the table is full of
    /// pinned entries.
    pub fn slot_for_at(&mut self, ip: IpAddr, now_ms: u64) -> Slot {
        if let Some(s) = self.slot(ip) {
            return s;
        }
        self.insert(ip, now_ms)
            .map_or(Slot::NONE, |i| self.slot_of(i))
    }

    /// The address a slot holds (`None` for [`Slot::NONE`] and a slot
    /// whose entry was evicted).
    pub fn ip_at(&self, slot: Slot) -> Option<IpAddr> {
        self.entries
            .get(slot.index())
            .filter(|e| e.live && e.generation == slot.generation())
            .map(|e| e.ip)
    }

    /// Where the probe just decided on ([`Resolution::KnownRefresh`])
    /// goes: the known MAC for the first [`UNICAST_PROBES`], else
    /// broadcast (`None`).
    pub fn probe_mac(&self, slot: Slot) -> Option<[u8; 6]> {
        self.entries
            .get(slot.index())
            .filter(|e| e.live && e.generation == slot.generation())
            .filter(|e| e.known && (1..=UNICAST_PROBES).contains(&e.probes))
            .map(|e| e.mac)
    }

    /// Starts an adoption: the entries [`Neighbors::pin`] marks from now on
    /// are the pinned ones; the others pinned before no longer are.
    pub fn begin_pins(&mut self) {
        self.epoch = self.epoch.wrapping_add(1).max(1);
    }

    /// Keeps the entry of `slot` from eviction until the next
    /// [`Neighbors::begin_pins`] (a configured next hop).
    pub fn pin(&mut self, slot: Slot) {
        let epoch = self.epoch;
        if let Some(e) = self
            .entries
            .get_mut(slot.index())
            .filter(|e| e.live && e.generation == slot.generation())
        {
            e.pinned = epoch;
        }
    }

    /// Looks `ip` up for sending at `now_ms`, making an entry (a request
    /// due) when it has none. A `Request`/`KnownRefresh` answer records
    /// that the caller sends one.
    pub fn resolve(&mut self, ip: IpAddr, now_ms: u64) -> Resolution {
        let slot = self.slot_for_at(ip, now_ms);
        self.resolve_at(slot, now_ms)
    }

    /// For an incomplete slot whose last request is at least `gap_ms`
    /// old: records a new request at `now_ms` and returns true (frames
    /// wait for it, so they ask more often than [`RETRY_MS`]).
    pub fn ask_again(&mut self, slot: Slot, now_ms: u64, gap_ms: u64) -> bool {
        let Some(e) = self
            .entries
            .get_mut(slot.index())
            .filter(|e| e.live && e.generation == slot.generation())
        else {
            return false;
        };
        let due = !e.known
            && e.asked_ms
                .is_none_or(|t| now_ms.saturating_sub(t) >= gap_ms);
        if due {
            e.asked_ms = Some(now_ms);
        }
        due
    }

    /// [`Neighbors::resolve`] for the address in `slot`, without hashing.
    #[inline(always)]
    pub fn resolve_at(&mut self, slot: Slot, now_ms: u64) -> Resolution {
        let Some(e) = self.entries.get_mut(slot.index()) else {
            return Resolution::Full;
        };
        // The common case first: a fresh binding of this slot's entry.
        if e.generation == slot.generation() && now_ms < e.fresh_until {
            e.used_ms = now_ms;
            return Resolution::Known(e.mac);
        }
        self.resolve_stale(slot, now_ms)
    }

    #[cold]
    fn resolve_stale(&mut self, slot: Slot, now_ms: u64) -> Resolution {
        if slot == Slot::NONE {
            return Resolution::Full;
        }
        let Some(e) = self
            .entries
            .get_mut(slot.index())
            .filter(|e| e.live && e.generation == slot.generation())
        else {
            return Resolution::Gone;
        };
        e.used_ms = now_ms;
        self.ask_if_due(slot, now_ms)
    }

    /// What an entry past its reachable time (or without a MAC) needs
    /// now: a probe, a request, nothing yet, or to fail.
    fn ask_if_due(&mut self, slot: Slot, now_ms: u64) -> Resolution {
        let Some(e) = self.entries.get_mut(slot.index()) else {
            return Resolution::Full;
        };
        let since_asked = e.asked_ms.map_or(u64::MAX, |t| now_ms.saturating_sub(t));
        if e.known {
            if since_asked < PROBE_GAP_MS {
                return Resolution::Known(e.mac);
            }
            if e.probes < UNICAST_PROBES + BROADCAST_PROBES {
                e.probes += 1;
                e.asked_ms = Some(now_ms);
                return Resolution::KnownRefresh(e.mac);
            }
            // Every probe went unanswered: ask as for a new next hop.
            e.known = false;
            e.fresh_until = 0;
            e.probes = 0;
            self.stats.failed += 1;
            e.asked_ms = Some(now_ms);
            self.mirror(slot.index());
            return Resolution::Request;
        }
        if since_asked >= RETRY_MS {
            e.asked_ms = Some(now_ms);
            Resolution::Request
        } else {
            Resolution::Pending
        }
    }

    /// Has the clock follow up the probe just sent for `slot` out of
    /// `port` ([`Neighbors::follow_probes`]).
    pub fn probe_sent(&mut self, slot: Slot, port: usize) {
        if !self.probing.iter().any(|&(s, _)| s == slot) {
            let _ = self.probing.try_push((slot, port));
        }
    }

    /// Sends (through `send`: slot and port) the probes due at `now_ms`
    /// for entries still unanswered, and the broadcast request of an
    /// entry that answered none; forgets the entries that answered.
    pub fn follow_probes(&mut self, now_ms: u64, mut send: impl FnMut(Slot, usize)) {
        let mut i = 0;
        while i < self.probing.len() {
            let (slot, port) = self.probing[i];
            let probing = self
                .entries
                .get(slot.index())
                .filter(|e| e.live && e.generation == slot.generation())
                .is_some_and(|e| e.known && now_ms >= e.fresh_until);
            let keep = probing
                && match self.ask_if_due(slot, now_ms) {
                    Resolution::KnownRefresh(_) => {
                        send(slot, port);
                        true
                    }
                    Resolution::Request => {
                        send(slot, port);
                        false
                    }
                    _ => true,
                };
            if keep {
                i += 1;
            } else {
                self.probing.swap_remove(i);
            }
        }
    }

    /// Whether probes wait for [`Neighbors::follow_probes`].
    #[inline(always)]
    pub fn probing(&self) -> bool {
        !self.probing.is_empty()
    }
}

/// The inboxes through which workers share what they hear, the requests
/// they sent (an answer may reach another worker than the one that
/// asked), and (with [`NeighborSync::with_doorbells`]) the doorbells that
/// wake a sleeping worker for it: frames it parked for that next hop
/// leave at once.
#[derive(Clone)]
pub struct NeighborSync {
    inboxes: Arc<Vec<ArrayQueue<Binding>>>,
    doorbells: Option<Arc<Vec<Doorbell>>>,
    /// Per hash bucket: the asked address's tag (never 0) and the low 32
    /// bits of the time the request left (0 altogether: none).
    asked: Arc<[AtomicU64]>,
}

impl NeighborSync {
    pub fn new(workers: usize) -> Self {
        NeighborSync {
            inboxes: Arc::new((0..workers).map(|_| ArrayQueue::new(INBOX)).collect()),
            doorbells: None,
            asked: (0..ASKED).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Rings worker `i`'s doorbell `doorbells[i]` after offering it a binding.
    pub fn with_doorbells(mut self, doorbells: Arc<Vec<Doorbell>>) -> Self {
        self.doorbells = Some(doorbells);
        self
    }

    /// Offers a binding heard by worker `from` to every other worker.
    pub fn share(&self, from: usize, b: Binding) {
        for (i, q) in self.inboxes.iter().enumerate() {
            if i != from && q.push(b).is_ok() {
                if let Some(bell) = self.doorbells.as_ref().and_then(|d| d.get(i)) {
                    bell.ring();
                }
            }
        }
    }

    /// Applies what other workers heard to worker `me`'s table (to the
    /// entries it has; installed bindings everywhere).
    pub fn drain_into(&self, me: usize, table: &mut Neighbors, now_ms: u64) {
        if let Some(q) = self.inboxes.get(me) {
            while let Some(b) = q.pop() {
                table.heard(b.ip, b.mac, b.how, now_ms);
            }
        }
    }

    /// Records that a request for `ip` left at `now_ms`.
    pub fn asking(&self, ip: IpAddr, now_ms: u64) {
        let (bucket, tag) = asked_key(ip);
        let v = u64::from(tag) << 32 | u64::from(now_ms as u32);
        self.asked[bucket].store(v, Ordering::Relaxed);
    }

    /// Whether some worker sent a request for `ip` less than
    /// [`ANSWER_WINDOW_MS`] before `now_ms`.
    pub fn was_asked(&self, ip: IpAddr, now_ms: u64) -> bool {
        let (bucket, tag) = asked_key(ip);
        let v = self.asked[bucket].load(Ordering::Relaxed);
        let sent = v as u32;
        (v >> 32) as u32 == tag && u64::from((now_ms as u32).wrapping_sub(sent)) < ANSWER_WINDOW_MS
    }
}

/// The bucket and tag of `ip` in [`NeighborSync`]'s record of requests:
/// the same on every worker (a fixed mix of the address's bytes).
fn asked_key(ip: IpAddr) -> (usize, u32) {
    let b = match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    };
    let lo = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
    let hi = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
    let mix = |x: u64| {
        let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    };
    let h = mix(lo ^ mix(hi ^ u64::from(ip.is_ipv6())));
    ((h as usize) % ASKED, (h >> 32) as u32 | 1)
}

/// Writes an ARP request for `target` from (`mac`, `sender`) into `buf`
/// (at least 60 bytes, padded to the Ethernet minimum), broadcast or (a
/// probe) to `to`. Returns the length.
pub fn write_arp_request(
    buf: &mut [u8],
    mac: MacAddr,
    sender: Ipv4Addr,
    target: Ipv4Addr,
    to: Option<MacAddr>,
) -> Option<usize> {
    let b = buf.get_mut(..MIN_FRAME_LEN)?;
    b.fill(0);
    let eth = EthernetRepr {
        src_addr: mac,
        dst_addr: to.unwrap_or(BROADCAST_MAC),
        ethertype: ethertype::ARP,
    };
    let request = ArpRepr {
        operation: arp::OP_REQUEST,
        sender_hw: mac,
        sender_ip: sender,
        target_hw: [0; 6],
        target_ip: target,
    };
    request.emit(eth.emit(b).ok()?.payload_mut()).ok()?;
    Some(MIN_FRAME_LEN)
}

/// Writes a neighbour solicitation for `target` from (`mac`, `sender`)
/// into `buf`: to the target's solicited-node multicast group, or (a
/// probe) to the target itself at MAC `to`. Returns the length.
pub fn write_neighbor_solicitation(
    buf: &mut [u8],
    mac: MacAddr,
    sender: Ipv6Addr,
    target: Ipv6Addr,
    to: Option<MacAddr>,
) -> Option<usize> {
    let ns = NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr: Some(mac),
    };
    let len = ethernet::HEADER_LEN + ipv6::HEADER_LEN + ns.buffer_len();
    let b = buf.get_mut(..len)?;
    b.fill(0);
    let (dst, dst_mac) = match to {
        Some(m) => (target, m),
        None => {
            let group = icmpv6::solicited_node(&target);
            (group, icmpv6::multicast_mac(&group))
        }
    };
    let eth = EthernetRepr {
        src_addr: mac,
        dst_addr: dst_mac,
        ethertype: ethertype::IPV6,
    };
    let ip = Ipv6Repr {
        src_addr: sender,
        dst_addr: dst,
        next_header: ip_proto::ICMPV6,
        hop_limit: ND_HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
        payload_len: ns.buffer_len(),
    };
    let mut eth = eth.emit(b).ok()?;
    let mut ip = ip.emit(eth.payload_mut()).ok()?;
    ns.emit(ip.payload_mut(), &sender, &dst).ok()?;
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const MAC2: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(n))
    }

    fn mirrored() -> Neighbors {
        let mut n = Neighbors::new();
        let mut records = crate::conntrack::Slab::heap(CAPACITY);
        while records.push(NeighRecord::default()).is_ok() {}
        n.use_mirror(records);
        n
    }

    fn record_bytes(n: &Neighbors, i: usize) -> Vec<u8> {
        let r = &n.mirror.as_ref().unwrap()[i];
        // SAFETY: a `repr(C)` struct of integers and byte arrays without
        // padding (40 bytes), read as bytes.
        unsafe { core::slice::from_raw_parts((r as *const NeighRecord).cast::<u8>(), 40).to_vec() }
    }

    /// The record a confirmed answer writes, byte for byte, and what the
    /// next process reads back from it.
    #[test]
    fn an_answer_writes_its_record_and_the_next_process_reads_it() {
        assert_eq!(core::mem::size_of::<NeighRecord>(), 40);
        let mut n = mirrored();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let s = n.slot_for_at(ip, 0);
        assert_eq!(record_bytes(&n, s.index()), [0u8; 40], "no MAC: empty");
        n.heard(ip, MAC, Heard::Confirmed, 1_000);
        let b = record_bytes(&n, s.index());
        let mut want = vec![0u8; 10];
        want.extend_from_slice(&[0xff, 0xff, 10, 0, 0, 9]);
        want.extend_from_slice(&MAC);
        want.extend_from_slice(&[4, 0]);
        want.extend_from_slice(&6_000u64.to_le_bytes());
        let ip16: [u8; 16] = want[..16].try_into().unwrap();
        want.extend_from_slice(&record_seal(&ip16, &MAC, 4, 6_000).to_le_bytes());
        assert_eq!(b, want);
        // Read by a process whose clock is 250 ms behind this one's.
        assert_eq!(read_record(&b, -250), Ok(Some((ip, MAC, 5_750))));
        // A write cut short: the seal no longer matches.
        let mut torn = b.clone();
        torn[16] ^= 1;
        assert_eq!(read_record(&torn, 0), Err(CarryDropped::Torn));
        // Values no next hop has, even sealed.
        let sealed = |ip: [u8; 16], mac: [u8; 6], family: u8| {
            let mut r = Vec::new();
            r.extend_from_slice(&ip);
            r.extend_from_slice(&mac);
            r.extend_from_slice(&[family, 0]);
            r.extend_from_slice(&9u64.to_le_bytes());
            r.extend_from_slice(&record_seal(&ip, &mac, family, 9).to_le_bytes());
            r
        };
        for (ip, mac, family) in [
            (ip16, [0x01, 0, 0, 0, 0, 1], 4),
            (ip16, [0; 6], 4),
            (ip16, MAC, 6),
            (ip16, MAC, 5),
            ([0; 16], MAC, 6),
            (Ipv4Addr::BROADCAST.to_ipv6_mapped().octets(), MAC, 4),
        ] {
            assert_eq!(
                read_record(&sealed(ip, mac, family), 0),
                Err(CarryDropped::BadValue),
                "{ip:?} {mac:?} {family}"
            );
        }
        // A failed entry, an evicted one: their records are emptied.
        assert_eq!(n.resolve_at(s, 6_000), Resolution::KnownRefresh(MAC));
        n.resolve_at(s, 6_500);
        n.resolve_at(s, 7_000);
        assert_eq!(n.resolve_at(s, 7_500), Resolution::Request);
        assert_eq!(read_record(&record_bytes(&n, s.index()), 0), Ok(None));
    }

    /// Carried bindings fill the entries made for their addresses:
    /// trusted for what is left of their reachable time, probed past it,
    /// asked for anew once too old; nothing else gets an entry from them.
    #[test]
    fn carried_bindings_fill_new_entries_by_their_age() {
        let mut n = mirrored();
        let fresh: IpAddr = "10.0.0.1".parse().unwrap();
        let stale: IpAddr = "10.0.0.2".parse().unwrap();
        let old: IpAddr = "fd00::3".parse().unwrap();
        let now = 100_000;
        n.carry([
            (fresh, MAC, now + 2_000),
            (stale, MAC2, now - 10_000),
            (old, MAC, now - CARRY_MAX_AGE_MS),
            // An older copy of the same address loses to the newer.
            (fresh, MAC2, now + 1_000),
        ]);
        assert!(n.is_empty(), "carrying makes no entry");
        n.expire_carried(now);
        assert_eq!(n.stats().carried_expired, 1);
        let s = n.slot_for_at(fresh, now);
        assert_eq!(n.resolve_at(s, now), Resolution::Known(MAC));
        assert_eq!(n.resolve_at(s, now + 1_999), Resolution::Known(MAC));
        assert_eq!(n.resolve_at(s, now + 2_000), Resolution::KnownRefresh(MAC));
        assert_eq!(
            read_record(&record_bytes(&n, s.index()), 0),
            Ok(Some((fresh, MAC, now + 2_000))),
            "its record is kept for the next process"
        );
        let s = n.slot_for_at(stale, now);
        assert_eq!(n.resolve_at(s, now), Resolution::KnownRefresh(MAC2));
        assert_eq!(n.probe_mac(s), Some(MAC2), "a unicast probe, frames go");
        let s = n.slot_for_at(old, now);
        assert_eq!(n.resolve_at(s, now), Resolution::Request);
        assert_eq!(n.stats().adopted, 2);
    }

    #[test]
    fn resolve_requests_once_per_retry_interval_then_uses_the_answer() {
        let mut n = Neighbors::new();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        assert_eq!(n.resolve(ip, 0), Resolution::Request);
        assert_eq!(n.resolve(ip, 10), Resolution::Pending);
        assert_eq!(n.resolve(ip, RETRY_MS), Resolution::Request);
        assert_eq!(n.heard(ip, MAC, Heard::Confirmed, 1_500), Update::Filled);
        assert_eq!(n.resolve(ip, 1_600), Resolution::Known(MAC));
        assert_eq!(n.resolve(ip, 1_499 + REACHABLE_MS), Resolution::Known(MAC));
    }

    #[test]
    fn an_entry_in_use_is_probed_unicast_then_broadcast_then_fails() {
        let mut n = Neighbors::new();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let s = n.slot_for_at(ip, 0);
        n.heard(ip, MAC, Heard::Confirmed, 0);
        let t = REACHABLE_MS;
        assert_eq!(n.resolve_at(s, t), Resolution::KnownRefresh(MAC));
        assert_eq!(n.probe_mac(s), Some(MAC), "the first probe is unicast");
        assert_eq!(n.resolve_at(s, t + 1), Resolution::Known(MAC));
        assert_eq!(
            n.resolve_at(s, t + PROBE_GAP_MS),
            Resolution::KnownRefresh(MAC)
        );
        assert_eq!(n.probe_mac(s), None, "then broadcast");
        assert_eq!(
            n.resolve_at(s, t + 2 * PROBE_GAP_MS),
            Resolution::KnownRefresh(MAC)
        );
        assert_eq!(n.probe_mac(s), None);
        assert_eq!(n.stats().failed, 0);
        // No answer to any: the entry is incomplete again, asked for anew.
        assert_eq!(n.resolve_at(s, t + 3 * PROBE_GAP_MS), Resolution::Request);
        assert_eq!(n.stats().failed, 1);
        assert_eq!(n.get(ip), None);
        assert_eq!(
            n.resolve_at(s, t + 3 * PROBE_GAP_MS + 1),
            Resolution::Pending
        );
        // An answer brings it back.
        assert_eq!(
            n.heard(ip, MAC2, Heard::Confirmed, t + 2_000),
            Update::Filled
        );
        assert_eq!(n.resolve_at(s, t + 2_001), Resolution::Known(MAC2));
    }

    #[test]
    fn the_clock_follows_up_probes_no_frame_asks_for() {
        let mut n = Neighbors::new();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let s = n.slot_for_at(ip, 0);
        n.heard(ip, MAC, Heard::Confirmed, 0);
        assert!(!n.probing());
        assert_eq!(n.resolve_at(s, REACHABLE_MS), Resolution::KnownRefresh(MAC));
        n.probe_sent(s, 3);
        let follow = |n: &mut Neighbors, t: u64| {
            let mut sent = Vec::new();
            n.follow_probes(t, |slot, port| sent.push((slot, port)));
            sent
        };
        assert_eq!(follow(&mut n, REACHABLE_MS + PROBE_GAP_MS - 1), []);
        assert_eq!(follow(&mut n, REACHABLE_MS + PROBE_GAP_MS), [(s, 3)]);
        assert_eq!(n.probe_mac(s), None, "the second probe is broadcast");
        assert_eq!(follow(&mut n, REACHABLE_MS + 2 * PROBE_GAP_MS), [(s, 3)]);
        assert_eq!(n.stats().failed, 0);
        // Unanswered: the entry fails, its request goes out, and the clock
        // lets it be.
        assert_eq!(follow(&mut n, REACHABLE_MS + 3 * PROBE_GAP_MS), [(s, 3)]);
        assert_eq!(n.stats().failed, 1);
        assert_eq!(n.get(ip), None);
        assert!(!n.probing());
        // An answer ends the follow-up.
        n.heard(ip, MAC, Heard::Confirmed, 10_000);
        assert_eq!(
            n.resolve_at(s, 10_000 + REACHABLE_MS),
            Resolution::KnownRefresh(MAC)
        );
        n.probe_sent(s, 3);
        n.heard(ip, MAC, Heard::Confirmed, 10_001 + REACHABLE_MS);
        assert_eq!(follow(&mut n, 11_000 + REACHABLE_MS), []);
        assert!(!n.probing());
    }

    #[test]
    fn an_answer_to_a_probe_confirms_or_moves_the_entry() {
        let mut n = Neighbors::new();
        let ip: IpAddr = "fd00::9".parse().unwrap();
        let s = n.slot_for_at(ip, 0);
        n.heard(ip, MAC, Heard::Confirmed, 0);
        assert_eq!(n.resolve_at(s, REACHABLE_MS), Resolution::KnownRefresh(MAC));
        // The next hop moved (a replaced server): its answer moves the entry.
        let t = REACHABLE_MS + 700;
        assert_eq!(n.heard(ip, MAC2, Heard::Confirmed, t), Update::Changed);
        assert_eq!(n.stats().changed, 1);
        assert_eq!(n.resolve_at(s, t + 1), Resolution::Known(MAC2));
        assert_eq!(
            n.resolve_at(s, t + REACHABLE_MS - 1),
            Resolution::Known(MAC2)
        );
        assert_eq!(
            n.resolve_at(s, t + REACHABLE_MS),
            Resolution::KnownRefresh(MAC2)
        );
        assert_eq!(n.probe_mac(s), Some(MAC2));
    }

    #[test]
    fn an_announcement_moves_an_entry_and_has_it_probed_on_its_next_use() {
        let mut n = Neighbors::new();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let s = n.slot_for_at(ip, 0);
        n.heard(ip, MAC, Heard::Confirmed, 0);
        assert_eq!(n.heard(ip, MAC, Heard::Unconfirmed, 10), Update::Same);
        assert_eq!(n.resolve_at(s, 11), Resolution::Known(MAC), "still fresh");
        // A VRRP failover's gratuitous ARP.
        assert_eq!(n.heard(ip, MAC2, Heard::Unconfirmed, 20), Update::Changed);
        assert_eq!(n.resolve_at(s, 21), Resolution::KnownRefresh(MAC2));
        assert_eq!(n.probe_mac(s), Some(MAC2));
        assert_eq!(n.heard(ip, MAC2, Heard::Confirmed, 22), Update::Same);
        assert_eq!(n.resolve_at(s, 23), Resolution::Known(MAC2));
    }

    #[test]
    fn nothing_heard_makes_an_entry_or_changes_a_static_one() {
        let mut n = Neighbors::new();
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        for how in [Heard::Confirmed, Heard::Unconfirmed] {
            assert_eq!(n.heard(ip, MAC, how, 0), Update::NotInTable);
        }
        assert!(n.is_empty());
        assert!(n.learn(ip, MAC, 0));
        assert_eq!(n.heard(ip, MAC2, Heard::Confirmed, 1), Update::Static);
        assert_eq!(n.get(ip), Some(MAC));
        let s = n.slot(ip).unwrap();
        assert_eq!(n.resolve_at(s, u64::MAX - 1), Resolution::Known(MAC));
    }

    #[test]
    fn a_full_table_gives_up_its_least_recently_used_entry() {
        let mut n = Neighbors::new();
        let slots: Vec<Slot> = (0..CAPACITY as u32)
            .map(|i| n.slot_for_at(v4(i), u64::from(i)))
            .collect();
        assert_eq!(n.len(), CAPACITY);
        // Entry 0 was made first but is in use; entry 1 is the least
        // recently used now.
        n.resolve_at(slots[0], 10_000);
        let new = v4(u32::MAX);
        let s = n.slot_for_at(new, 10_001);
        assert_ne!(s, Slot::NONE);
        assert_eq!(n.len(), CAPACITY, "bounded");
        assert_eq!(n.stats().evicted, 1);
        assert_eq!(n.slot(v4(1)), None);
        assert!(n.slot(v4(0)).is_some());
        assert_eq!(n.ip_at(s), Some(new));
        // The evicted entry's old slot names nothing, not its successor.
        assert_eq!(s.index(), slots[1].index());
        assert_eq!(n.ip_at(slots[1]), None);
        assert_eq!(n.resolve_at(slots[1], 10_002), Resolution::Gone);
        assert_eq!(n.probe_mac(slots[1]), None);
        assert!(!n.ask_again(slots[1], 10_002, 0));
    }

    #[test]
    fn pinned_and_static_entries_are_never_evicted() {
        let mut n = Neighbors::new();
        n.begin_pins();
        let pinned = n.slot_for_at(v4(7), 0);
        n.pin(pinned);
        n.learn(v4(8), MAC, 0);
        for i in 0..3 * CAPACITY as u32 {
            assert_ne!(n.slot_for_at(v4(1_000 + i), u64::from(i) + 1), Slot::NONE);
        }
        assert_eq!(n.len(), CAPACITY);
        assert_eq!(n.ip_at(pinned), Some(v4(7)));
        assert_eq!(n.get(v4(8)), Some(MAC));
        assert_eq!(
            n.stats().evicted,
            3 * CAPACITY as u64 - (CAPACITY as u64 - 2)
        );
        // The next adoption no longer configures it: it may go.
        n.begin_pins();
        for i in 0..CAPACITY as u32 {
            n.slot_for_at(v4(100_000 + i), 1_000_000);
        }
        assert_eq!(n.ip_at(pinned), None);
        assert_eq!(n.get(v4(8)), Some(MAC));
    }

    #[test]
    fn a_table_of_pinned_entries_takes_no_more() {
        let mut n = Neighbors::new();
        n.begin_pins();
        for i in 0..CAPACITY as u32 {
            let s = n.slot_for_at(v4(i), 0);
            n.pin(s);
        }
        let extra = v4(u32::MAX);
        assert_eq!(n.slot_for_at(extra, 1), Slot::NONE);
        assert_eq!(n.resolve(extra, 1), Resolution::Full);
        assert_eq!(n.resolve_at(Slot::NONE, 1), Resolution::Full);
        assert_eq!(n.ip_at(Slot::NONE), None);
        assert_eq!(n.len(), CAPACITY);
    }

    #[test]
    fn a_slot_reused_many_times_never_becomes_none_or_an_old_slot() {
        let mut n = Neighbors::new();
        // Fill all but the last index with pinned entries, so every new
        // address reuses that one.
        n.begin_pins();
        for i in 0..CAPACITY as u32 - 1 {
            let s = n.slot_for_at(v4(i), 0);
            n.pin(s);
        }
        let mut seen = Vec::new();
        for k in 0..40u32 {
            let s = n.slot_for_at(v4(1_000_000 + k), u64::from(k));
            assert_ne!(s, Slot::NONE);
            assert_eq!(s.index(), CAPACITY - 1);
            seen.push(s);
        }
        let last = *seen.last().unwrap();
        for old in &seen[..seen.len() - 1] {
            if *old != last {
                assert_eq!(n.ip_at(*old), None);
            }
        }
        assert_eq!(n.ip_at(last), Some(v4(1_000_039)));
    }

    #[test]
    fn shared_bindings_update_only_the_entries_a_worker_has() {
        let sync = NeighborSync::new(3);
        let ip: IpAddr = "fd00::5".parse().unwrap();
        let other: IpAddr = "fd00::6".parse().unwrap();
        let mut t0 = Neighbors::new();
        let mut t1 = Neighbors::new();
        let mut t2 = Neighbors::new();
        let s0 = t0.slot_for_at(ip, 0);
        sync.share(
            1,
            Binding {
                ip,
                mac: MAC,
                how: Heard::Confirmed,
            },
        );
        sync.share(
            1,
            Binding {
                ip: other,
                mac: MAC,
                how: Heard::Unconfirmed,
            },
        );
        sync.drain_into(0, &mut t0, 5);
        sync.drain_into(1, &mut t1, 5);
        sync.drain_into(2, &mut t2, 5);
        assert_eq!(t0.resolve_at(s0, 6), Resolution::Known(MAC));
        assert_eq!(t0.slot(other), None, "heard bindings make no entry");
        assert!(t1.is_empty(), "the sender is not told its own binding");
        assert!(t2.is_empty());
        // Installed bindings reach every worker.
        sync.share(
            0,
            Binding {
                ip: other,
                mac: MAC2,
                how: Heard::Installed,
            },
        );
        sync.drain_into(2, &mut t2, 7);
        assert_eq!(t2.get(other), Some(MAC2));
    }

    #[test]
    fn a_shared_binding_wakes_a_sleeping_worker() {
        let bells: Arc<Vec<Doorbell>> = Arc::new((0..2).map(|_| Doorbell::new()).collect());
        let sync = NeighborSync::new(2).with_doorbells(bells.clone());
        bells[0].going_to_sleep();
        bells[1].going_to_sleep();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        sync.share(
            1,
            Binding {
                ip,
                mac: MAC,
                how: Heard::Confirmed,
            },
        );
        assert!(!bells[0].is_sleeping(), "worker 0 was not woken");
        assert!(bells[1].is_sleeping(), "the sender rang itself");
    }

    #[test]
    fn requests_are_remembered_for_the_answer_window_across_workers() {
        let sync = NeighborSync::new(2);
        let other = sync.clone();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        assert!(!other.was_asked(ip, 0));
        sync.asking(ip, 0);
        assert!(other.was_asked(ip, 0), "at time 0 too");
        sync.asking(ip, 1_000);
        assert!(other.was_asked(ip, 1_000));
        assert!(other.was_asked(ip, 999 + ANSWER_WINDOW_MS));
        assert!(!other.was_asked(ip, 1_000 + ANSWER_WINDOW_MS));
        assert!(!other.was_asked("10.0.0.10".parse().unwrap(), 1_001));
        assert!(!other.was_asked("::ffff:10.0.0.9".parse().unwrap(), 1_001));
        // Across the 32-bit wrap of the clock.
        let t = u64::from(u32::MAX) - 10;
        sync.asking(ip, t);
        assert!(other.was_asked(ip, t + 20));
    }

    #[test]
    fn requests_parse_as_what_they_claim() {
        let mut buf = [0u8; 128];
        for to in [None, Some(MAC2)] {
            let len = write_arp_request(
                &mut buf,
                MAC,
                "10.0.0.1".parse().unwrap(),
                "10.0.0.9".parse().unwrap(),
                to,
            )
            .unwrap();
            let p = crate::wire::parse_frame(&buf[..len]).unwrap();
            assert_eq!(p.l3, crate::wire::L3Kind::Arp);
            assert_eq!(buf[..6], to.unwrap_or([0xff; 6]));
        }

        let target: Ipv6Addr = "fd00::1:2:3".parse().unwrap();
        for (to, dst) in [
            (None, "ff02::1:ff02:3".parse::<Ipv6Addr>().unwrap()),
            (Some(MAC2), target),
        ] {
            let len =
                write_neighbor_solicitation(&mut buf, MAC, "fd00::1".parse().unwrap(), target, to)
                    .unwrap();
            let frame = &buf[..len];
            let parsed = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
            match parsed.link {
                Some(etherparse::LinkSlice::Ethernet2(ref e)) => {
                    assert_eq!(e.destination(), to.unwrap_or([0x33, 0x33, 0xff, 2, 0, 3]))
                }
                ref other => panic!("not Ethernet: {other:?}"),
            }
            match parsed.net {
                Some(etherparse::NetSlice::Ipv6(ref ip)) => {
                    assert_eq!(ip.header().destination_addr(), dst);
                    assert_eq!(ip.header().hop_limit(), 255);
                }
                ref other => panic!("not IPv6: {other:?}"),
            }
            match parsed.transport {
                Some(etherparse::TransportSlice::Icmpv6(icmp)) => {
                    assert_eq!(icmp.type_u8(), 135);
                    let ip = etherparse::Ipv6HeaderSlice::from_slice(&frame[14..]).unwrap();
                    assert_eq!(
                        icmp.checksum(),
                        icmp.icmp_type()
                            .calc_checksum(ip.source(), ip.destination(), icmp.payload())
                            .unwrap()
                    );
                }
                other => panic!("not ICMPv6: {other:?}"),
            }
        }
    }

    /// The requests' bytes, as they were when written by byte offset.
    #[test]
    fn requests_are_the_fixture_bytes() {
        let mut buf = [0xAAu8; 128];
        let n = write_arp_request(
            &mut buf,
            MAC,
            "10.0.0.1".parse().unwrap(),
            "10.0.0.9".parse().unwrap(),
            Some(MAC2),
        )
        .unwrap();
        let mut arp = vec![
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 6, 0, 1, 8, 0, 6, 4, 0, 1,
        ];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 9]);
        arp.resize(60, 0);
        assert_eq!(buf[..n], arp[..]);

        let mut buf = [0xAAu8; 128];
        let n = write_neighbor_solicitation(
            &mut buf,
            MAC,
            "fd00::1".parse().unwrap(),
            "fd00::1:2:3".parse().unwrap(),
            None,
        )
        .unwrap();
        let ns: [u8; 86] = [
            51, 51, 255, 2, 0, 3, 2, 0, 0, 0, 0, 1, 134, 221, 96, 0, 0, 0, 0, 32, 58, 255, 253, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 255, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 255, 2,
            0, 3, 135, 0, 125, 144, 0, 0, 0, 0, 253, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3,
            1, 1, 2, 0, 0, 0, 0, 1,
        ];
        assert_eq!(buf[..n], ns);
    }
}
