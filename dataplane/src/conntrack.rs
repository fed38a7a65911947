//! The per-worker connection table.
//!
//! One [`Conntrack`] per worker, used through `&mut self` from that worker
//! only: no locks, no atomics, no clock reads, no allocation after
//! construction. Time is a caller-supplied monotonic `now` in milliseconds
//! (the worker derives it from the TSC once per burst).
//!
//! # Layout
//!
//! - A slab of [`Entry`] records, `Vec::with_capacity(capacity)` reserved at
//!   construction and filled by `push` up to that capacity (so it never
//!   reallocates); freed slots are recycled through an intrusive free list.
//!   The memory is reserved up front and faulted in by the kernel on first use.
//! - An index mapping each of an entry's two keys to `slot << 1 | dir`:
//!   buckets of one cache line, each with 15 slots for a key's word (its
//!   reference and, in the bits the reference leaves, a tag of the key's
//!   hash) and a count of the keys that overflowed it into the next bucket;
//!   keys hashed under secret keys (folded multiplies, in-process only).
//!   There are `ceil(2 x capacity / 8)` buckets, so a full table fills
//!   them to 8 keys of 15 on average and about 0.4 % of them overflow. A
//!   lookup reads its home bucket (one line), compares the tags of all its
//!   slots at once and reads only the entries whose tag matches: the entry
//!   it looks for and, rarely, one more. It reads the next bucket only if
//!   the home bucket overflowed. A delete empties its slot and takes the key
//!   off the overflow counts it added, so the table never degrades (no
//!   tombstones) and never needs a rehash. See [`Index`].
//!
//!   Why not `hashbrown`: its deletions leave tombstones under churn, and once
//!   they use up the spare room it rehashes the whole table in place inside
//!   an insert, a stall of milliseconds that grows with the table
//!   (docs/performance.md, "Connection-table index under churn"). A worker
//!   cannot stall that long, so the index is this fixed, tombstone-free
//!   table instead.
//!
//! # Bytes per entry
//!
//! `size_of::<Entry<V>>()` (128 bytes of bookkeeping for a zero-sized `V`,
//! rounded up to whole 64-byte cache lines: 192 bytes with a 40- to 64-byte
//! `V`), a 4-byte expiry hint per entry, an 8-byte record in the ring of
//! half-open entries (up to 16 when `capacity` is not a power of two; see
//! [`half_open`]), plus the index: 64 bytes per 4 entries, 16 bytes per
//! entry (rounded up to whole buckets).
//! [`Conntrack::memory_bytes`] gives the exact figure; 1 Mi entries of a
//! 40-byte `V` take 220 MiB.
//!
//! # Expiry
//!
//! An entry is live while `now < expires_at`. Expired entries are treated as
//! absent by [`Conntrack::lookup`] and reclaimed in two ways, both of which
//! report the freed entry to the caller so it can release what the entry held
//! (a full-NAT local port, an active-connection count):
//! - [`Conntrack::expire`] sweeps a cursor over the slab, examining at most
//!   `budget` slots per call. An entry that has expired is reclaimed within
//!   `ceil(capacity / budget)` calls. The sweep reads a dense array of
//!   per-slot hints (the deadline or an earlier time, in 1.024 s units),
//!   not the entries: refreshing a deadline leaves the hint alone unless the
//!   deadline moves earlier (a FIN or RST shortening it), and a sweep that
//!   finds a passed hint on a live entry moves the hint to its deadline.
//! - [`Conntrack::insert`] reclaims an expired entry that still holds one of
//!   the new entry's keys (a client reusing a 5-tuple after a timeout).
//!
//! # TCP states
//!
//! Driven by [`Conntrack::update_tcp`] with the segment's flags and
//! sequence numbers ([`TcpSeg`]):
//!
//! | from                          | segment                                   | to            | timeout           |
//! |-------------------------------|-------------------------------------------|---------------|-------------------|
//! | any but `Closed`              | RST at the receiver's next expected seq   | `Closed`      | `tcp_closing`     |
//! | any but `Closed`              | any other RST                             | unchanged     | not refreshed     |
//! | `Closed`                      | anything                                  | `Closed`      | not refreshed     |
//! | `SynSent`, `SynRecv`          | SYN-ACK from the reply side               | `SynRecv`     | `tcp_syn`         |
//! | `SynSent`, `SynRecv`          | SYN from the original side (retransmit)   | unchanged     | `tcp_syn`         |
//! | other                         | any other SYN                             | unchanged     | not refreshed     |
//! | `SynRecv`                     | ACK of the reply side's SYN (`ISN + 1`)   | `Established` | `tcp_established` |
//! | `SynRecv`                     | any other non-SYN from the original side  | unchanged, refused | not refreshed |
//! | `SynSent`, `SynRecv`          | non-SYN segments seen from both sides     | `Established` | `tcp_established` |
//! | any but `Closed`              | FIN, the first direction                  | `FinWait`     | `tcp_closing`     |
//! | any but `Closed`              | FIN from both directions                  | `TimeWait`    | `tcp_closing`     |
//! | other                         | any other non-SYN segment                 | unchanged     | of the state      |
//!
//! Whether a RST is at the receiver's next expected sequence number is
//! judged by [`window`] (RFC 5961 §3) from what every other segment of the
//! flow told ([`TcpTrack`], in the entry's cold cache line): a blind RST
//! changes nothing, and [`Conntrack::update_tcp`] says whether it fell in
//! the receiver's window (the pipeline forwards it, so the endpoint can
//! answer with a challenge ACK) or outside (the pipeline drops it).
//!
//! A RST moves the entry to `Closed` with the full `tcp_closing` timeout, not
//! less: retransmitted or late segments of the dead connection still reach
//! the same backend (which answers them with RSTs of its own) rather than
//! being picked afresh, and a new SYN on the tuple is caught by
//! [`Conntrack::is_closing`], so the pipeline removes the entry and picks
//! again. Segments after a RST do not extend the entry's life.
//!
//! `FinWait` and `TimeWait` are refreshed by every segment, so a half-closed
//! connection that keeps sending lives on as long as it is not idle for
//! `tcp_closing`.

use core::fmt;
use core::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ahash::RandomState;
use conf::os::advise_huge_pages;

use crate::wire::TcpFlags;

pub mod adopt;
pub mod slab;
pub mod window;
pub use slab::Slab;
pub use window::{RstFit, TcpSeg, TcpTrack};

/// Why [`Conntrack::update_tcp`] left an entry as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A RST that is not at the receiver's next expected sequence number
    /// ([`RstFit::InWindow`] or [`RstFit::Outside`]).
    Rst(RstFit),
    /// A client segment to a half-open connection that does not
    /// acknowledge the backend's SYN: what a spoofed handshake sends.
    HandshakeAck,
}
mod half_open;
pub use half_open::Eviction;

/// The idle timeouts, in seconds (`[dataplane.timeouts]`).
pub use conf::Timeouts;

/// The largest capacity a table accepts (index references are `slot << 1 | dir` in a `u32`).
pub const MAX_CAPACITY: usize = 1 << 30;

/// `Entry::flags` bits.
const LIVE: u8 = 0x01;
/// FIN seen from the original side; `<< 1` for the reply side.
const FIN_ORIG: u8 = 0x02;
/// Non-SYN segment seen from the original side; `<< 1` for the reply side.
const SEEN_ORIG: u8 = 0x08;
/// Only the original side's segments pass the appliance (direct server
/// return): its state follows them alone ([`Conntrack::mark_one_way`]).
const ONE_WAY: u8 = 0x20;

const NIL: u32 = u32::MAX;

/// One direction of a flow: addresses, ports, protocol.
///
/// IPv4 addresses are stored IPv4-mapped (`::ffff:a.b.c.d`) with `v6 = false`;
/// `v6` is part of the key, so an IPv4 flow and an IPv6 flow between the
/// mapped addresses never collide. For protocols without ports, set them to 0.
#[derive(Clone, Copy, Default, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub v6: bool,
}

/// `::ffff:a.b.c.d`, computed on one integer (a byte-by-byte array
/// literal is built byte by byte).
const fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    (0xFFFF_u128 << 32 | u32::from_be_bytes(a) as u128).to_be_bytes()
}

impl FlowKey {
    /// An IPv4 flow.
    pub const fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src: v4_mapped(src),
            dst: v4_mapped(dst),
            sport,
            dport,
            proto,
            v6: false,
        }
    }

    /// An IPv6 flow.
    pub const fn v6(src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src,
            dst,
            sport,
            dport,
            proto,
            v6: true,
        }
    }

    /// The same flow seen from the other end: addresses and ports swapped.
    pub const fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
            v6: self.v6,
        }
    }

    /// The source address.
    pub fn src_ip(&self) -> IpAddr {
        Self::ip(self.src, self.v6)
    }

    /// The destination address.
    pub fn dst_ip(&self) -> IpAddr {
        Self::ip(self.dst, self.v6)
    }

    fn ip(a: [u8; 16], v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
        }
    }
}

impl FlowKey {
    /// Ports, protocol and family as one word.
    #[inline(always)]
    fn rest_word(&self) -> u64 {
        u64::from(self.sport)
            | u64::from(self.dport) << 16
            | u64::from(self.proto) << 32
            | u64::from(self.v6) << 40
    }
}

/// A fixed (not secret, not per process) checksum of an entry's keys,
/// kept in its `next_free` word while it is live: adoption recomputes it
/// to catch an insert a kill cut short. Costs one computation per insert,
/// nothing per packet.
pub(crate) fn seal(keys: &[FlowKey; 2]) -> u32 {
    const K: [u64; 3] = [
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
    ];
    let mut h = K[0];
    for k in keys {
        let (s, d) = (u128::from_ne_bytes(k.src), u128::from_ne_bytes(k.dst));
        h = folded_multiply(h ^ s as u64, (s >> 64) as u64 ^ K[1]);
        h = folded_multiply(h ^ d as u64, (d >> 64) as u64 ^ K[2]);
        h = folded_multiply(h ^ k.rest_word(), K[1]);
    }
    (h ^ h >> 32) as u32
}

/// The 128-bit product of `a` and `b`, its halves xored.
#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

impl PartialEq for FlowKey {
    #[inline(always)]
    fn eq(&self, o: &FlowKey) -> bool {
        u128::from_ne_bytes(self.src) == u128::from_ne_bytes(o.src)
            && u128::from_ne_bytes(self.dst) == u128::from_ne_bytes(o.dst)
            && self.rest_word() == o.rest_word()
    }
}

impl Hash for FlowKey {
    /// Three word writes rather than a byte stream per field.
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u128(u128::from_ne_bytes(self.src));
        h.write_u128(u128::from_ne_bytes(self.dst));
        h.write_u64(self.rest_word());
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.src_ip(), self.dst_ip()) {
            (IpAddr::V6(s), IpAddr::V6(d)) => write!(
                f,
                "proto {} [{s}]:{} -> [{d}]:{}",
                self.proto, self.sport, self.dport
            ),
            (s, d) => write!(
                f,
                "proto {} {s}:{} -> {d}:{}",
                self.proto, self.sport, self.dport
            ),
        }
    }
}

/// Which of an entry's two keys a packet matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dir {
    /// Client -> VIP.
    Original = 0,
    /// Backend -> local address (full-NAT) or backend -> client (DNAT).
    Reply = 1,
}

impl Dir {
    /// The other direction.
    pub const fn reverse(self) -> Dir {
        match self {
            Dir::Original => Dir::Reply,
            Dir::Reply => Dir::Original,
        }
    }

    const fn idx(self) -> usize {
        self as usize
    }
}

/// Protocol state of an entry; picks its idle timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum State {
    /// Client SYN seen (`tcp_syn`).
    SynSent = 0,
    /// SYN-ACK seen (`tcp_syn`).
    SynRecv = 1,
    /// Handshake completed, or segments seen both ways (`tcp_established`).
    Established = 2,
    /// A FIN seen in one direction (`tcp_closing`).
    FinWait = 3,
    /// FINs seen in both directions (`tcp_closing`).
    TimeWait = 4,
    /// RST seen (`tcp_closing`, not refreshed).
    Closed = 5,
    /// UDP, or any other protocol without TCP tracking (`udp`).
    Udp = 6,
}

impl State {
    /// `FinWait`, `TimeWait` or `Closed`: a SYN meeting such an entry starts
    /// a new connection (the pipeline removes the entry and picks afresh).
    pub const fn is_closing(self) -> bool {
        matches!(self, State::FinWait | State::TimeWait | State::Closed)
    }

    /// `SynSent` or `SynRecv`: the handshake has not completed.
    pub const fn is_half_open(self) -> bool {
        matches!(self, State::SynSent | State::SynRecv)
    }
}

/// An entry's slot. Valid until the entry is removed or reclaimed; the slot
/// may then be reused by a later insert, so do not keep ids across bursts
/// without re-looking them up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(u32);

impl EntryId {
    /// The slot number, `0..capacity`.
    pub const fn index(self) -> u32 {
        self.0
    }
}

/// One tracked connection.
///
/// Only `value` is writable by the caller; keys, state and timestamps change
/// through the [`Conntrack`] methods so the index stays consistent.
///
/// Laid out for the packet path, on cache-line boundaries: the two keys,
/// state and deadline fill the first 96 bytes and `value` follows, so a
/// lookup plus the first 32 bytes of `value` touch two cache lines; the
/// creation time and the TCP sequence tracking come last.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Entry<V> {
    keys: [FlowKey; 2],
    state: State,
    flags: u8,
    /// Next free slot while on the free list; while live, the seal of the
    /// keys ([`seal`]), which adoption checks to catch an insert cut short
    /// by a kill.
    next_free: u32,
    expires_at: u64,
    /// The pipeline's per-flow record.
    pub value: V,
    created_at: u64,
    /// TCP sequence tracking (cold: written by every TCP segment, read in
    /// full only by a RST or an ICMP error).
    tcp: TcpTrack,
}

impl<V> Entry<V> {
    /// The key of one direction.
    pub fn key(&self, dir: Dir) -> &FlowKey {
        &self.keys[dir.idx()]
    }

    /// Client -> VIP.
    pub fn orig(&self) -> &FlowKey {
        &self.keys[0]
    }

    /// Backend -> local address (full-NAT) or backend -> client (DNAT).
    pub fn reply(&self) -> &FlowKey {
        &self.keys[1]
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// See [`State::is_closing`].
    pub fn is_closing(&self) -> bool {
        self.state.is_closing()
    }

    /// `now` of the insert, in milliseconds.
    pub fn created_at(&self) -> u64 {
        self.created_at
    }

    /// The entry is absent from `expires_at` on, in milliseconds.
    pub fn expires_at(&self) -> u64 {
        self.expires_at
    }

    /// When the entry's deadline was last refreshed (its last segment,
    /// or for `Closed` the RST), given the table of [`timeout_table`].
    pub fn last_seen(&self, timeouts_ms: &[u64; 7]) -> u64 {
        self.expires_at
            .saturating_sub(timeouts_ms[self.state as usize])
    }

    pub fn is_expired(&self, now: u64) -> bool {
        now >= self.expires_at
    }

    /// What the flow's TCP segments told of its sequence spaces.
    pub fn tcp(&self) -> &TcpTrack {
        &self.tcp
    }

    /// Whether a FIN was seen from this direction.
    pub fn fin_seen(&self, dir: Dir) -> bool {
        self.flags & (FIN_ORIG << dir.idx()) != 0
    }

    fn is_live(&self) -> bool {
        self.flags & LIVE != 0
    }
}

/// The two keys of a new entry with their hashes, for
/// [`Conntrack::insert_keys`].
#[derive(Clone, Copy, Debug)]
pub struct NewKeys {
    pub orig: FlowKey,
    /// [`Conntrack::hash_of`] `orig`, in this table.
    pub orig_hash: KeyHash,
    pub reply: FlowKey,
    /// [`Conntrack::hash_of`] `reply`, in this table.
    pub reply_hash: KeyHash,
    /// The caller just found that no entry holds `reply` (or removed the
    /// one that did), and the table has not changed since.
    pub reply_unheld: bool,
}

/// Why an insert did not happen. An error never changes the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    /// The table holds `capacity` entries (expired ones not yet reclaimed
    /// count); nothing is evicted for a new flow.
    #[error("connection table full")]
    Full,
    /// A live entry already holds the original key (in either of its directions).
    #[error("original key already tracked by entry {0:?}")]
    OrigInUse(EntryId),
    /// A live entry already holds the reply key (e.g. a full-NAT local port
    /// still in use): pick another port and retry.
    #[error("reply key already tracked by entry {0:?}")]
    ReplyInUse(EntryId),
    /// The original and the reply key are the same key.
    #[error("original and reply keys are equal")]
    SameKeys,
}

/// The per-worker connection table. See the [module docs](self).
pub struct Conntrack<V> {
    slots: Slab<Entry<V>>,
    /// Per slot, the entry's deadline or an earlier time, in [`coarse`]
    /// units ([`FREE`] for a free slot): [`Conntrack::expire`] sweeps these
    /// 4-byte words instead of the entries. Refreshing a deadline does not
    /// touch the hint unless the deadline moves earlier, so packets of live
    /// flows never write here.
    hints: Vec<i32>,
    index: Index,
    /// Secret keys of the index hash, drawn from the `RandomState`.
    keys: [u64; 4],
    free: u32,
    len: usize,
    /// Live entries in `SynSent` or `SynRecv`.
    half_open_now: usize,
    capacity: usize,
    cursor: usize,
    timeouts: Timeouts,
    /// Timeout per [`State`], in milliseconds.
    timeout_ms: [u64; 7],
    /// Half-open inserts, oldest first (see [`half_open`]).
    half_open: half_open::HalfOpenRing,
}

impl<V> fmt::Debug for Conntrack<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conntrack")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// The idle timeout of each [`State`] (indexed by `state as usize`), in ms.
pub fn timeout_table(t: &Timeouts) -> [u64; 7] {
    let ms = |s: u32| u64::from(s) * 1000;
    [
        ms(t.tcp_syn),
        ms(t.tcp_syn),
        ms(t.tcp_established),
        ms(t.tcp_closing),
        ms(t.tcp_closing),
        ms(t.tcp_closing),
        ms(t.udp),
    ]
}

const fn slot_of(r: u32) -> usize {
    (r >> 1) as usize
}

const fn dir_of(r: u32) -> Dir {
    if r & 1 == 0 {
        Dir::Original
    } else {
        Dir::Reply
    }
}

const fn index_ref(slot: usize, dir: Dir) -> u32 {
    (slot as u32) << 1 | dir as u32
}

impl<V: Copy> Conntrack<V> {
    /// A table for `capacity` entries, all memory reserved now.
    ///
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_CAPACITY`].
    pub fn new(capacity: usize, timeouts: Timeouts) -> Self {
        Self::with_hasher(capacity, timeouts, RandomState::new())
    }

    /// [`Conntrack::new`] with given hash keys (tests, reproducible benchmarks).
    ///
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_CAPACITY`].
    pub fn with_hasher(capacity: usize, timeouts: Timeouts, hasher: RandomState) -> Self {
        Self::on_slab(Slab::heap(capacity), timeouts, hasher)
    }

    /// A table whose entries live in `slots` (an empty slab of a flows
    /// region, so they outlive the process), of the slab's capacity.
    ///
    /// # Panics
    /// If the capacity is 0 or above [`MAX_CAPACITY`], or the slab is not empty.
    pub fn on_slab(slots: Slab<Entry<V>>, timeouts: Timeouts, hasher: RandomState) -> Self {
        let capacity = slots.capacity();
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "conntrack capacity {capacity} out of range 1..={MAX_CAPACITY}"
        );
        assert!(slots.is_empty(), "a new table starts on an empty slab");
        let index = Index::new(capacity);
        let hints: Vec<i32> = Vec::with_capacity(capacity);
        advise_huge_pages(
            slots.as_ptr().cast(),
            capacity * core::mem::size_of::<Entry<V>>(),
        );
        advise_huge_pages(
            hints.as_ptr().cast(),
            capacity * core::mem::size_of::<i32>(),
        );
        advise_huge_pages(index.buckets.as_ptr().cast(), index.bytes());
        Conntrack {
            slots,
            hints,
            index,
            keys: [0u64, 1, 2, 3].map(|i| hasher.hash_one(i)),
            free: NIL,
            len: 0,
            half_open_now: 0,
            capacity,
            cursor: 0,
            timeouts,
            timeout_ms: timeout_table(&timeouts),
            half_open: half_open::HalfOpenRing::new(capacity),
        }
    }

    /// Live entries, expired ones not yet reclaimed included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Live entries whose handshake has not completed (`SynSent`, `SynRecv`).
    pub fn half_open_len(&self) -> usize {
        self.half_open_now
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `len() == capacity()`: the next insert fails with [`InsertError::Full`]
    /// unless it reclaims an expired holder of one of its keys.
    pub fn is_full(&self) -> bool {
        self.len == self.capacity
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// New timeouts apply to entries as they are next refreshed; existing
    /// deadlines stay.
    pub fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.timeouts = timeouts;
        self.timeout_ms = timeout_table(&timeouts);
    }

    /// The idle timeout of a state, in milliseconds.
    pub fn timeout_ms(&self, state: State) -> u64 {
        self.timeout_ms[state as usize]
    }

    /// Heap bytes reserved by this table (slab plus index).
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Entry<V>>()
            + self.hints.capacity() * core::mem::size_of::<i32>()
            + self.index.bytes()
            + self.half_open.bytes()
    }

    #[inline(always)]
    fn hash(&self, key: &FlowKey) -> u32 {
        // Folded multiplies (as in ahash's fallback) under secret keys: the
        // keys are what a sender controls, so the index must not be
        // predictable; written out so that it inlines into the lookup.
        let [k0, k1, k2, k3] = self.keys;
        let (s, d) = (u128::from_ne_bytes(key.src), u128::from_ne_bytes(key.dst));
        let a = folded_multiply(s as u64 ^ k0, (s >> 64) as u64 ^ k1);
        let b = folded_multiply(d as u64 ^ k2, (d >> 64) as u64 ^ k3);
        let h = folded_multiply(a ^ key.rest_word(), b ^ k0.rotate_left(23));
        (h ^ h >> 32) as u32
    }

    /// The index reference (`slot << 1 | dir`) holding `key`, expired or not.
    #[inline(always)]
    fn find(&self, hash: u32, key: &FlowKey) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash, |r| {
                slots
                    .get(slot_of(r))
                    .is_some_and(|e| e.keys[r as usize & 1] == *key)
            })
            .map(|(_, r)| r)
    }

    /// The live entry `key` belongs to and which of its directions it is.
    /// An expired entry is absent.
    #[inline(always)]
    pub fn lookup(&self, key: &FlowKey, now: u64) -> Option<(EntryId, Dir)> {
        self.lookup_hashed(key, KeyHash(self.hash(key)), now)
    }

    /// The index hash of a key: what [`Conntrack::lookup_hashed`] and the
    /// prefetches take (the same key always has the same hash in one table).
    #[inline(always)]
    pub fn hash_of(&self, key: &FlowKey) -> KeyHash {
        KeyHash(self.hash(key))
    }

    /// Starts loading the index bucket a lookup of `hash` reads first.
    /// A hint only: nothing is read, nothing changes.
    #[inline(always)]
    pub fn prefetch_bucket(&self, hash: KeyHash) {
        prefetch(
            self.index
                .buckets
                .as_ptr()
                .wrapping_add(self.index.home(hash.0)),
        );
    }

    /// Starts loading the entry a lookup of `hash` will most likely compare
    /// (the first in its home bucket whose tag matches): the cache lines a
    /// packet reads (keys, state, deadline and the hot part of the value;
    /// the TCP tracking).
    /// Reads the index (best done after [`Conntrack::prefetch_bucket`] had
    /// time to complete); changes nothing.
    ///
    /// Returns the entry it found as a hint for [`Conntrack::lookup_hinted`].
    #[inline(always)]
    pub fn prefetch_entry(&self, hash: KeyHash) -> Hint {
        let index = &self.index;
        let Some(b) = index.buckets.get(index.home(hash.0)) else {
            return Hint(0);
        };
        // The home bucket only: a hit is there but for the few keys that
        // overflowed; a miss gets no prefetch.
        let m = index.matches(b, index.tag(hash.0));
        if m == 0 {
            return Hint(0);
        }
        let r = (b.words[m.trailing_zeros() as usize] & index.ref_mask).wrapping_sub(1);
        let e = self.slots.as_ptr().wrapping_add(slot_of(r)).cast::<u8>();
        prefetch(e);
        prefetch(e.wrapping_add(64));
        // The TCP tracking every segment reads and writes.
        prefetch(e.wrapping_add(core::mem::offset_of!(Entry<V>, tcp)));
        Hint(r.wrapping_add(1))
    }

    /// Starts loading the slot the next [`Conntrack::insert`] fills (the
    /// head of the free list, else the next unused slot): the whole entry
    /// and its expiry hint, so that a new flow's entry is written in the
    /// cache instead of waiting for memory (and the free list's next link
    /// is read from it). A hint only: nothing changes.
    #[inline(always)]
    pub fn prefetch_next_slot(&self) {
        let slot = if self.free != NIL {
            self.free as usize
        } else {
            self.slots.len()
        };
        if slot >= self.capacity {
            return;
        }
        let e = self.slots.as_ptr().wrapping_add(slot).cast::<u8>();
        for line in (0..core::mem::size_of::<Entry<V>>()).step_by(64) {
            prefetch(e.wrapping_add(line));
        }
        prefetch(self.hints.as_ptr().wrapping_add(slot));
    }

    /// [`Conntrack::lookup_hashed`], trying first the entry `hint` names
    /// (from [`Conntrack::prefetch_entry`] of the same hash, possibly
    /// stale): if that slot holds a live entry with `key` in the hinted
    /// direction, that is the lookup's answer, because the index holds
    /// every key of every live entry exactly once; else the full lookup.
    #[inline(always)]
    pub fn lookup_hinted(
        &self,
        key: &FlowKey,
        hash: KeyHash,
        hint: Hint,
        now: u64,
    ) -> Option<(EntryId, Dir)> {
        if hint.0 != 0 {
            let r = hint.0 - 1;
            if let Some(e) = self.slots.get(slot_of(r)) {
                if e.is_live() && e.keys[r as usize & 1] == *key {
                    if e.is_expired(now) {
                        return None;
                    }
                    return Some((EntryId(r >> 1), dir_of(r)));
                }
            }
        }
        self.lookup_hashed(key, hash, now)
    }

    /// [`Conntrack::lookup`] with the key's hash already known (from
    /// [`Conntrack::hash_of`] of this table and this key).
    #[inline(always)]
    pub fn lookup_hashed(&self, key: &FlowKey, hash: KeyHash, now: u64) -> Option<(EntryId, Dir)> {
        let r = self.find(hash.0, key)?;
        let e = self.slots.get(slot_of(r))?;
        if e.is_expired(now) {
            return None;
        }
        Some((EntryId(r >> 1), dir_of(r)))
    }

    /// Tracks a new flow under both keys, in `state` with that state's
    /// timeout from `now`.
    ///
    /// An expired entry still holding `orig` or `reply` is reclaimed first
    /// and passed to `on_free` (as [`Conntrack::expire`] would have). Errors
    /// are checked in the order `SameKeys`, `OrigInUse`, `ReplyInUse`, `Full`,
    /// and leave the table unchanged.
    pub fn insert(
        &mut self,
        orig: FlowKey,
        reply: FlowKey,
        value: V,
        state: State,
        now: u64,
        on_free: impl FnMut(EntryId, &Entry<V>),
    ) -> Result<EntryId, InsertError> {
        let keys = NewKeys {
            orig_hash: self.hash_of(&orig),
            reply_hash: self.hash_of(&reply),
            orig,
            reply,
            reply_unheld: false,
        };
        self.insert_keys(&keys, value, state, now, on_free)
    }

    /// [`Conntrack::insert`] of keys whose hashes the caller has (from
    /// the lookup that missed, from the check of a local tuple), and which
    /// may know that no entry holds the reply key: then its probe is not
    /// repeated.
    #[inline]
    pub fn insert_keys(
        &mut self,
        keys: &NewKeys,
        value: V,
        state: State,
        now: u64,
        mut on_free: impl FnMut(EntryId, &Entry<V>),
    ) -> Result<EntryId, InsertError> {
        let (orig, reply) = (&keys.orig, &keys.reply);
        let (h_orig, h_reply) = (keys.orig_hash.0, keys.reply_hash.0);
        debug_assert_eq!(h_orig, self.hash(orig), "hash of another key");
        debug_assert_eq!(h_reply, self.hash(reply), "hash of another key");
        if orig == reply {
            return Err(InsertError::SameKeys);
        }
        let held_orig = self.find(h_orig, orig).map(slot_of);
        let held_reply = if keys.reply_unheld {
            debug_assert!(self.find(h_reply, reply).is_none(), "reply key held");
            None
        } else {
            self.find(h_reply, reply).map(slot_of)
        };
        if let Some(s) = held_orig {
            if !self.slots[s].is_expired(now) {
                return Err(InsertError::OrigInUse(EntryId(s as u32)));
            }
        }
        if let Some(s) = held_reply {
            if !self.slots[s].is_expired(now) {
                return Err(InsertError::ReplyInUse(EntryId(s as u32)));
            }
        }
        // Any holder is expired now, and reclaiming it makes room.
        if held_orig.is_none() && held_reply.is_none() && self.len == self.capacity {
            return Err(InsertError::Full);
        }
        if let Some(s) = held_orig {
            self.release(s);
            on_free(EntryId(s as u32), &self.slots[s]);
        }
        if let Some(s) = held_reply.filter(|&s| Some(s) != held_orig) {
            self.release(s);
            on_free(EntryId(s as u32), &self.slots[s]);
        }

        let slot = if self.free != NIL {
            self.place_free(orig, reply, value, state, now)
        } else {
            let entry = Entry {
                value,
                keys: [*orig, *reply],
                created_at: now,
                expires_at: now.saturating_add(self.timeout_ms[state as usize]),
                tcp: TcpTrack::NEW,
                next_free: NIL,
                state,
                flags: 0,
            };
            self.place(entry).ok_or(InsertError::Full)?
        };
        if state.is_half_open() {
            self.half_open.push(slot, now);
        }
        self.index.insert(h_orig, index_ref(slot, Dir::Original));
        self.index.insert(h_reply, index_ref(slot, Dir::Reply));
        Ok(EntryId(slot as u32))
    }

    /// Writes `entry` into a free slot and makes it live (the index is the
    /// caller's): the slot, or `None` when the slab is full.
    ///
    /// The entry is written whole first, its keys sealed, and only then
    /// marked live: in a flows region, a process killed in the middle
    /// leaves a slot that adoption ignores (not live) or rejects (the seal
    /// does not match the keys), never a half-written live entry.
    fn place(&mut self, mut entry: Entry<V>) -> Option<usize> {
        entry.flags = 0;
        entry.next_free = seal(&entry.keys);
        self.place_sealed(&entry)
    }

    /// The rest of [`Conntrack::place`] (and of an adoption's), for an
    /// entry already sealed with its flags clear: the whole entry into a
    /// free slot, then the live flag.
    #[inline(always)]
    fn place_sealed(&mut self, entry: &Entry<V>) -> Option<usize> {
        let hint = coarse(entry.expires_at);
        let slot = if self.free != NIL {
            let s = self.free as usize;
            self.free = self.slots[s].next_free;
            self.slots[s] = *entry;
            self.hints[s] = hint;
            s
        } else {
            // len < capacity and every slot below slots.len() is live, so
            // these pushes stay within the reserved capacity.
            self.slots.push(*entry).ok()?;
            self.hints.push(hint);
            self.slots.len() - 1
        };
        // Program order is store order on x86-64 (and the only reader is a
        // later process): the fence keeps the compiler from moving the
        // flag's store before the entry's.
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        self.slots[slot].flags = LIVE;
        self.len += 1;
        if entry.state.is_half_open() {
            self.half_open_now += 1;
        }
        Some(slot)
    }

    /// [`Conntrack::place`] of a new entry into the head of the free list
    /// (there is one), written where it lies field by field instead of
    /// built and copied in; in the same order: the whole entry, its seal,
    /// then the live flag (a free slot's flags are clear).
    #[inline(always)]
    fn place_free(
        &mut self,
        orig: &FlowKey,
        reply: &FlowKey,
        value: V,
        state: State,
        now: u64,
    ) -> usize {
        let s = self.free as usize;
        let expires_at = now.saturating_add(self.timeout_ms[state as usize]);
        let e = &mut self.slots[s];
        debug_assert!(!e.is_live(), "free slot {s} is live");
        self.free = e.next_free;
        e.flags = 0;
        e.keys = [*orig, *reply];
        e.state = state;
        e.expires_at = expires_at;
        e.value = value;
        e.created_at = now;
        e.tcp = TcpTrack::NEW;
        e.next_free = seal(&e.keys);
        self.hints[s] = coarse(expires_at);
        // As in `place`: the flag's store comes after the entry's.
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        self.slots[s].flags = LIVE;
        self.len += 1;
        if state.is_half_open() {
            self.half_open_now += 1;
        }
        s
    }

    /// Unindexes a live slot and puts it on the free list; its contents stay
    /// readable until the slot is reused.
    fn release(&mut self, slot: usize) {
        debug_assert!(self.slots[slot].is_live());
        for dir in [Dir::Original, Dir::Reply] {
            let h = self.hash(&self.slots[slot].keys[dir.idx()]);
            let r = index_ref(slot, dir);
            let found = self.index.find(h, |x| x == r);
            debug_assert!(found.is_some(), "conntrack index lost slot {slot} {dir:?}");
            if let Some((at, _)) = found {
                self.index.remove_at(h, at);
            }
        }
        let e = &mut self.slots[slot];
        if e.state.is_half_open() {
            self.half_open_now -= 1;
        }
        e.flags = 0;
        e.next_free = self.free;
        self.free = slot as u32;
        self.len -= 1;
        self.hints[slot] = FREE;
    }

    /// The entry holding `key`, expired or not: an expired entry stays
    /// until [`Conntrack::expire`] or [`Conntrack::insert`] reclaims it.
    pub fn holder(&self, key: &FlowKey) -> Option<EntryId> {
        self.holder_hashed(key, KeyHash(self.hash(key)))
    }

    /// [`Conntrack::holder`] with the key's [`Conntrack::hash_of`].
    #[inline]
    pub fn holder_hashed(&self, key: &FlowKey, hash: KeyHash) -> Option<EntryId> {
        debug_assert_eq!(hash.0, self.hash(key), "hash of another key");
        self.find(hash.0, key).map(|r| EntryId(slot_of(r) as u32))
    }

    /// Removes an entry (expired or not) and returns it so the caller can
    /// release what it held. `None` if the slot holds no entry.
    pub fn remove(&mut self, id: EntryId) -> Option<Entry<V>> {
        let slot = id.0 as usize;
        if !self.slots.get(slot)?.is_live() {
            return None;
        }
        self.release(slot);
        Some(self.slots[slot])
    }

    /// The entry in a slot.
    ///
    /// # Panics
    /// If `id` did not come from this table.
    #[inline]
    pub fn get(&self, id: EntryId) -> &Entry<V> {
        &self.slots[id.0 as usize]
    }

    /// The entry in a slot; only `value` is writable.
    ///
    /// # Panics
    /// If `id` did not come from this table.
    #[inline]
    pub fn get_mut(&mut self, id: EntryId) -> &mut Entry<V> {
        &mut self.slots[id.0 as usize]
    }

    /// Slots ever filled: every entry's slot is below this (a walk over
    /// the table, `lb::conns`, goes up to it).
    pub fn slots_used(&self) -> usize {
        self.slots.len()
    }

    /// The entry in slot `slot`, if the slot holds one (possibly expired,
    /// not yet reclaimed).
    #[inline]
    pub fn entry_at(&self, slot: usize) -> Option<(EntryId, &Entry<V>)> {
        self.slots
            .get(slot)
            .filter(|e| e.is_live())
            .map(|e| (EntryId(slot as u32), e))
    }

    /// Whether the slot holds an entry (possibly expired, not yet reclaimed).
    pub fn is_live(&self, id: EntryId) -> bool {
        self.slots.get(id.0 as usize).is_some_and(Entry::is_live)
    }

    /// See [`State::is_closing`].
    #[inline]
    pub fn is_closing(&self, id: EntryId) -> bool {
        self.get(id).is_closing()
    }

    /// Advances the TCP state with a segment seen in direction `dir` at
    /// `now`, refreshing the deadline per the table in the
    /// [module docs](self), and takes in its sequence numbers
    /// ([`window`]). Returns the new state. A RST changes the entry only
    /// when it is [`RstFit::Exact`], and a client segment in `SynRecv` only
    /// when it acknowledges the backend's SYN exactly; otherwise nothing
    /// changes and the error says why. On a `Udp` entry this is
    /// [`Conntrack::touch`].
    #[inline(always)]
    pub fn update_tcp(
        &mut self,
        id: EntryId,
        dir: Dir,
        seg: &TcpSeg,
        now: u64,
    ) -> Result<State, Refused> {
        let slot = id.0 as usize;
        let e = &mut self.slots[slot];
        // The common case, short: a segment of an established connection
        // that opens or closes nothing (what `tcp_step` does with it).
        if e.state == State::Established
            && seg.flags & (TcpFlags::SYN.0 | TcpFlags::FIN.0 | TcpFlags::RST.0) == 0
            && e.tcp.steady()
        {
            e.flags |= SEEN_ORIG << dir.idx();
            e.tcp.note_steady(dir.idx(), seg);
            let at = now.saturating_add(self.timeout_ms[State::Established as usize]);
            self.set_deadline(slot, at);
            return Ok(State::Established);
        }
        // A one-way (DSR) flow is never steady both ways: its common
        // segment, as short (what `update_tcp_step` does with it).
        if e.state == State::Established
            && seg.flags & (TcpFlags::SYN.0 | TcpFlags::FIN.0 | TcpFlags::RST.0) == 0
            && e.tcp.one_way_steady(dir.idx())
        {
            e.flags |= SEEN_ORIG << dir.idx();
            e.tcp.note_one_way(dir.idx(), seg);
            let at = now.saturating_add(self.timeout_ms[State::Established as usize]);
            self.set_deadline(slot, at);
            return Ok(State::Established);
        }
        self.update_tcp_step(slot, dir, seg, now)
    }

    #[inline(never)]
    fn update_tcp_step(
        &mut self,
        slot: usize,
        dir: Dir,
        seg: &TcpSeg,
        now: u64,
    ) -> Result<State, Refused> {
        let e = &mut self.slots[slot];
        let was_half_open = e.state.is_half_open();
        let (state, refresh) = match e.state {
            State::Udp => (State::Udp, true),
            State::Closed => (State::Closed, false),
            _ if seg.flags & TcpFlags::RST.0 != 0 => match e.tcp.judge_rst(dir.idx(), seg) {
                RstFit::Exact => {
                    e.state = State::Closed;
                    (State::Closed, true)
                }
                miss => return Err(Refused::Rst(miss)),
            },
            State::SynRecv
                if dir == Dir::Original
                    && seg.flags & TcpFlags::SYN.0 == 0
                    && !(seg.flags & TcpFlags::ACK.0 != 0
                        && e.tcp.acks_syn(dir.idx(), seg.ack)) =>
            {
                return Err(Refused::HandshakeAck);
            }
            _ => {
                e.tcp.note(dir.idx(), seg);
                let (state, bits, refresh) = tcp_step(e.state, e.flags, dir, seg.flags);
                e.state = state;
                e.flags = bits;
                (state, refresh)
            }
        };
        if was_half_open && !state.is_half_open() {
            self.half_open_now -= 1;
        }
        if refresh {
            let at = now.saturating_add(self.timeout_ms[state as usize]);
            self.set_deadline(slot, at);
        }
        Ok(state)
    }

    /// [`Conntrack::update_tcp`] for the first segment of the entry
    /// [`Conntrack::insert`] just made at `now`, in `SynSent`: a client's
    /// SYN (without ACK or RST) only has its sequence numbers taken in,
    /// since the state stays and the deadline it would set is the one the
    /// insert set. Anything else takes `update_tcp`.
    #[inline]
    pub fn open_tcp(&mut self, id: EntryId, seg: &TcpSeg, now: u64) -> Result<State, Refused> {
        let syn_ms = self.timeout_ms[State::SynSent as usize];
        let e = &mut self.slots[id.0 as usize];
        let syn_only =
            seg.flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0 | TcpFlags::RST.0) == TcpFlags::SYN.0;
        if syn_only && e.state == State::SynSent && e.expires_at == now.saturating_add(syn_ms) {
            e.tcp.note(Dir::Original.idx(), seg);
            return Ok(State::SynSent);
        }
        self.update_tcp(id, Dir::Original, seg, now)
    }

    /// Marks live entry `id` as one whose reply side never passes the
    /// appliance (direct server return): the client's ACK that follows its
    /// SYN establishes it, since the backend's SYN-ACK is never seen (and
    /// the check that this ACK acknowledges it cannot apply); a client FIN
    /// takes it to `FinWait`, a client RST at its next sequence number
    /// closes it, and otherwise it ends by idling out.
    pub fn mark_one_way(&mut self, id: EntryId) {
        if let Some(e) = self.slots.get_mut(id.0 as usize) {
            e.flags |= ONE_WAY;
        }
    }

    /// Refreshes the deadline to `now` plus the timeout of the entry's state
    /// (a UDP packet). `Closed` entries are not refreshed.
    #[inline]
    pub fn touch(&mut self, id: EntryId, now: u64) {
        let slot = id.0 as usize;
        let state = self.slots[slot].state;
        if state != State::Closed {
            let at = now.saturating_add(self.timeout_ms[state as usize]);
            self.set_deadline(slot, at);
        }
    }

    /// Moves a live entry's deadline; the sweep's hint follows when it
    /// comes earlier (a later one is found when the hint is reached).
    #[inline(always)]
    fn set_deadline(&mut self, slot: usize, at: u64) {
        let e = &mut self.slots[slot];
        if at < e.expires_at {
            if let Some(h) = self.hints.get_mut(slot) {
                *h = coarse(at);
            }
        }
        e.expires_at = at;
    }

    /// Examines at most `budget` slots, continuing where the previous call
    /// stopped, and reclaims those that expired at or before `now`, passing
    /// each to `on_free`. Returns how many were reclaimed.
    ///
    /// A slot is examined at most once per call; an expired entry is
    /// reclaimed within `ceil(capacity / budget)` calls.
    pub fn expire(
        &mut self,
        now: u64,
        budget: usize,
        mut on_free: impl FnMut(EntryId, &Entry<V>),
    ) -> usize {
        let n = self.slots.len();
        let mut freed = 0;
        let mut left = budget.min(n);
        while left > 0 {
            // Examine `cursor..end`, then wrap.
            let start = self.cursor.min(n);
            let end = (start + left).min(n);
            left -= end - start;
            self.cursor = if end >= n { 0 } else { end };
            // The hint is never later than the entry's deadline, so only
            // slots whose hint has passed need a look at the entry. Usually
            // none has: one count over the range (vectorised) says so.
            let c = coarse(now);
            let Some(range) = self.hints.get(start..end) else {
                break;
            };
            if range.iter().filter(|&&h| h <= c).count() == 0 {
                continue;
            }
            for s in start..end {
                if self.hints[s] > c {
                    continue;
                }
                let e = &self.slots[s];
                if e.is_live() && e.is_expired(now) {
                    self.release(s);
                    on_free(EntryId(s as u32), &self.slots[s]);
                    freed += 1;
                } else {
                    self.hints[s] = if e.is_live() {
                        coarse(e.expires_at)
                    } else {
                        FREE
                    };
                }
            }
        }
        freed
    }
}

/// Where [`Conntrack::prefetch_entry`] found an entry of a hash (index
/// reference + 1; 0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hint(u32);

impl Hint {
    /// The slot of the entry it names, if any.
    #[inline(always)]
    pub fn slot(self) -> Option<u32> {
        self.0.checked_sub(1).map(|r| r >> 1)
    }
}

/// A key's index hash, from [`Conntrack::hash_of`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyHash(u32);

/// Asks the CPU to start loading the cache line at `p` into all cache
/// levels. A hint: `p` need not point into anything (the prefetch of an
/// invalid address is dropped, never faults), and nothing is read.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 neither faults nor has any architectural effect
    // whatever the address (x86-64 SDM: prefetches of invalid addresses are
    // ignored); SSE is part of the x86_64 baseline, so the instruction exists.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A time in milliseconds, rounded down to 1.024 s units as an `i32` (so
/// that a sweep compares four hints per SSE2 instruction). Monotone, so the
/// hint of a deadline is never later than the deadline.
#[inline(always)]
fn coarse(ms: u64) -> i32 {
    (ms >> 10).min(i32::MAX as u64) as i32
}

/// The hint of a free slot: after every time.
const FREE: i32 = i32::MAX;

/// Reference slots per index bucket: 15 words and the overflow count fill
/// one 64-byte cache line.
const WAYS: usize = 15;

/// Keys per bucket when the table is full: the index has
/// `ceil(2 x capacity / FILL)` buckets, so at most 8 of a bucket's 15
/// slots are in use on average and few buckets overflow (a bucket's keys
/// are about Poisson-distributed with mean <= 8: P(> 15) ~ 0.4 %).
const FILL: usize = 8;

const _: () = assert!(core::mem::size_of::<Bucket>() == 64 && WAYS == 15);

/// One cache line of the index: up to [`WAYS`] keys' words, each
/// `tag | (reference + 1)` (0: empty; see [`Index`]), and how many keys
/// were stored past it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Bucket {
    words: [u32; WAYS],
    /// Keys whose probe passed this bucket, full when they were inserted,
    /// and which are stored in a later bucket: while it is 0, a lookup
    /// that does not find its key here stops here.
    overflow: u32,
}

/// The bits of an index word that `reference + 1` takes in a table of
/// `capacity` entries: up to `2 x capacity`.
const fn ref_bits(capacity: usize) -> u32 {
    let bits = u64::BITS - (2 * capacity as u64).leading_zeros();
    if bits < u32::BITS {
        bits
    } else {
        u32::BITS
    }
}

/// Where a key's word is in the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct At {
    bucket: usize,
    way: usize,
}

/// The key index: buckets of one cache line ([`Bucket`]), a key's home
/// bucket picked by the high bits of its hash (`hash * n >> 32`, so `n`
/// need not be a power of two); a full bucket sends further keys to the
/// next one (wrapping), counting them in its `overflow`, which a delete
/// decrements again: no tombstones, nothing to rebuild.
///
/// A word holds the reference (`slot << 1 | dir`) plus one in its low
/// `ref_bits`, enough for `2 x capacity`, and in the bits above it a tag:
/// as many low bits of the key's hash as fit (11 at a million entries, 14
/// at 100k). A lookup compares its tag with all of a bucket's words at
/// once and reads only the entries whose tag matches: almost always the
/// one it looks for, so a probe reads one line of the index and one entry.
struct Index {
    buckets: Box<[Bucket]>,
    /// The bits of a word that hold `reference + 1`; the tag is above.
    ref_mask: u32,
    ref_bits: u32,
}

impl Index {
    /// An index for the keys of `capacity` entries (two each).
    fn new(capacity: usize) -> Index {
        let n = (2 * capacity).div_ceil(FILL).max(1);
        Index::with_buckets(n, ref_bits(capacity))
    }

    fn with_buckets(n: usize, ref_bits: u32) -> Index {
        Index {
            buckets: vec![Bucket::default(); n].into_boxed_slice(),
            ref_mask: ((1u64 << ref_bits) - 1) as u32,
            ref_bits,
        }
    }

    #[inline(always)]
    fn home(&self, hash: u32) -> usize {
        ((u64::from(hash) * self.buckets.len() as u64) >> 32) as usize
    }

    #[inline(always)]
    fn next(&self, b: usize) -> usize {
        if b + 1 == self.buckets.len() {
            0
        } else {
            b + 1
        }
    }

    /// The tag bits of a word for `hash`: its low bits, above the reference.
    #[inline(always)]
    fn tag(&self, hash: u32) -> u32 {
        (u64::from(hash) << self.ref_bits) as u32
    }

    /// The ways of bucket `b` whose word carries `tag`, as a bit mask.
    #[inline(always)]
    fn matches(&self, b: &Bucket, tag: u32) -> u32 {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::*;
            // SAFETY: SSE2 is part of the x86_64 baseline. A `Bucket` is
            // 64 bytes aligned to 64, so the four aligned 16-byte loads
            // read exactly its words and its overflow count, inside `*b`.
            unsafe {
                let p = (b as *const Bucket).cast::<__m128i>();
                let not_ref = _mm_set1_epi32(!self.ref_mask as i32);
                let tag = _mm_set1_epi32(tag as i32);
                let zero = _mm_setzero_si128();
                let hit = |k: usize| {
                    let w = _mm_load_si128(p.add(k));
                    let same = _mm_cmpeq_epi32(_mm_and_si128(w, not_ref), tag);
                    _mm_andnot_si128(_mm_cmpeq_epi32(w, zero), same)
                };
                let lo = _mm_packs_epi32(hit(0), hit(1));
                let hi = _mm_packs_epi32(hit(2), hit(3));
                let bits = _mm_movemask_epi8(_mm_packs_epi16(lo, hi)) as u32;
                // The 16th word is the overflow count.
                bits & ((1 << WAYS) - 1)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut m = 0u32;
            for (i, &w) in b.words.iter().enumerate() {
                m |= u32::from((w & !self.ref_mask) == tag && w != 0) << i;
            }
            m
        }
    }

    /// The first key word, along the probe of `hash`, with `hash`'s tag
    /// and a reference for which `eq` holds.
    #[inline(always)]
    fn find(&self, hash: u32, mut eq: impl FnMut(u32) -> bool) -> Option<(At, u32)> {
        let tag = self.tag(hash);
        let mut i = self.home(hash);
        // Ends at a bucket whose overflow is 0, which comes before the
        // probe wraps (at most `2 x capacity` keys, fewer than the slots).
        for _ in 0..self.buckets.len() {
            let b = self.buckets.get(i)?;
            let mut m = self.matches(b, tag);
            while m != 0 {
                let way = m.trailing_zeros() as usize;
                m &= m - 1;
                let r = (b.words[way] & self.ref_mask).wrapping_sub(1);
                if eq(r) {
                    return Some((At { bucket: i, way }, r));
                }
            }
            if b.overflow == 0 {
                return None;
            }
            i = self.next(i);
        }
        None
    }

    /// Adds a reference whose key is known to be absent.
    fn insert(&mut self, hash: u32, r: u32) {
        let word = self.tag(hash) | ((r + 1) & self.ref_mask);
        let mut i = self.home(hash);
        for _ in 0..self.buckets.len() {
            let Some(b) = self.buckets.get_mut(i) else {
                break;
            };
            if let Some(w) = b.words.iter_mut().find(|w| **w == 0) {
                *w = word;
                return;
            }
            b.overflow += 1;
            i = self.next(i);
        }
        // Unreachable: the slots outnumber the keys (`FILL < WAYS`).
        debug_assert!(false, "conntrack index full");
    }

    /// Empties the word at `at`, of a key of `hash`, and takes the key off
    /// the overflow counts of the buckets its probe passed.
    fn remove_at(&mut self, hash: u32, at: At) {
        if let Some(b) = self.buckets.get_mut(at.bucket) {
            b.words[at.way] = 0;
        }
        let mut i = self.home(hash);
        while i != at.bucket {
            if let Some(b) = self.buckets.get_mut(i) {
                debug_assert!(b.overflow > 0, "overflow count of bucket {i} below 0");
                b.overflow = b.overflow.saturating_sub(1);
            }
            i = self.next(i);
        }
    }

    /// Bytes of the buckets.
    fn bytes(&self) -> usize {
        core::mem::size_of_val(&*self.buckets)
    }
}

/// One TCP segment's effect: (new state, new flag bits, refresh deadline?).
/// `bits` other than the FIN/SEEN bits (i.e. `LIVE`) pass through.
fn tcp_step(state: State, bits: u8, dir: Dir, tcp: u8) -> (State, u8, bool) {
    if state == State::Closed {
        return (state, bits, false);
    }
    if tcp & TcpFlags::RST.0 != 0 {
        return (State::Closed, bits, true);
    }
    let handshaking = matches!(state, State::SynSent | State::SynRecv);
    if tcp & TcpFlags::SYN.0 != 0 {
        return match (dir, tcp & TcpFlags::ACK.0 != 0) {
            (Dir::Reply, true) if handshaking => (State::SynRecv, bits, true),
            (Dir::Original, false) if handshaking => (state, bits, true),
            _ => (state, bits, false),
        };
    }
    let shift = dir.idx();
    let mut bits = bits | SEEN_ORIG << shift;
    if tcp & TcpFlags::FIN.0 != 0 {
        bits |= FIN_ORIG << shift;
    }
    const FINS: u8 = FIN_ORIG | FIN_ORIG << 1;
    const SEEN: u8 = SEEN_ORIG | SEEN_ORIG << 1;
    let next = if bits & FINS == FINS {
        State::TimeWait
    } else if bits & FINS != 0 {
        State::FinWait
    } else if handshaking
        && ((dir == Dir::Original
            && tcp & TcpFlags::ACK.0 != 0
            && (state == State::SynRecv || bits & ONE_WAY != 0))
            || bits & SEEN == SEEN)
    {
        State::Established
    } else {
        state
    };
    (next, bits, true)
}

#[cfg(test)]
mod tests;
