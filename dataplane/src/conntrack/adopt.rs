//! Taking over the entries a previous border-dp left in its flows region
//! (`crate::flows_region`): each slot is read as raw bytes and checked
//! before anything in it is trusted, then re-inserted into this table.
//!
//! A slot is read as an [`Entry`] only after every byte that has fewer
//! valid values than its type's size allows (the `bool`s of the keys, the
//! [`State`] discriminant, the value's own enums and `bool`s, see
//! [`RawValue`]) was found to hold one of them; a slot that fails is
//! dropped with a [`Dropped`] reason, never repaired. The index, the free
//! list, the expiry hints and the ring of half-open entries are not read
//! at all: they are rebuilt from the entries kept, which is cheaper than
//! validating them and cannot be fooled by them.
//!
//! Times move on: the previous process's clock and this one's differ (each
//! counts TSC ticks with its own calibration), so each region header keeps
//! the offset from its workers' clock to the wall clock, and an entry's
//! deadline and creation time move by the difference of the two offsets.
//! An entry whose deadline passed during the restart is dropped as
//! [`Dropped::Expired`].

use core::mem::{offset_of, size_of, MaybeUninit};

use super::{seal, Conntrack, Dir, Entry, EntryId, FlowKey, KeyHash, State, LIVE};

/// A value type whose raw bytes can be checked before they are read as
/// one (the connection table's `V`).
///
/// # Safety
/// `bytes_valid` must return `true` only if `bytes` (exactly
/// `size_of::<Self>()` of them) is a valid value of `Self`: every `bool`
/// 0 or 1, every enum discriminant one of its variants', no references.
pub unsafe trait RawValue: Copy {
    fn bytes_valid(bytes: &[u8]) -> bool;
}

// SAFETY: every bit pattern is a valid integer.
unsafe impl RawValue for u32 {
    fn bytes_valid(bytes: &[u8]) -> bool {
        bytes.len() == size_of::<u32>()
    }
}

// SAFETY: every bit pattern is a valid integer.
unsafe impl RawValue for u64 {
    fn bytes_valid(bytes: &[u8]) -> bool {
        bytes.len() == size_of::<u64>()
    }
}

/// Why a slot of a previous table was not adopted. Each has its own
/// counter (`adopt_dropped_*`, see `conf::counters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dropped {
    /// The seal word does not match the keys: an insert cut short (a kill
    /// in the middle of a write) or memory written by something else.
    Torn,
    /// A key's family flag is not a `bool`, an IPv4 key is not
    /// IPv4-mapped, or both keys are the same.
    BadKeys,
    /// The state byte is no [`State`], or it does not fit the protocol.
    BadState,
    /// The value's bytes are not a valid value, or it does not fit the
    /// flow (its VIP, mode, ports or checksum deltas).
    BadValue,
    /// Its deadline passed before this process took over.
    Expired,
    /// A key is tracked already (by an entry adopted before it).
    Duplicate,
    /// Its VIP is not in this process's tables.
    NoVip,
    /// Its backend is not (any more) one of its VIP's.
    NoBackend,
    /// Its full-NAT local tuple is not one this worker owns.
    NotOwned,
    /// The table is full.
    Full,
}

impl Dropped {
    pub const ALL: [Dropped; 10] = [
        Dropped::Torn,
        Dropped::BadKeys,
        Dropped::BadState,
        Dropped::BadValue,
        Dropped::Expired,
        Dropped::Duplicate,
        Dropped::NoVip,
        Dropped::NoBackend,
        Dropped::NotOwned,
        Dropped::Full,
    ];

    /// Its name in logs (and in its counter, after `adopt_dropped_`).
    pub const fn name(self) -> &'static str {
        match self {
            Dropped::Torn => "torn",
            Dropped::BadKeys => "bad_keys",
            Dropped::BadState => "bad_state",
            Dropped::BadValue => "bad_value",
            Dropped::Expired => "expired",
            Dropped::Duplicate => "duplicate",
            Dropped::NoVip => "no_vip",
            Dropped::NoBackend => "no_backend",
            Dropped::NotOwned => "not_owned",
            Dropped::Full => "full",
        }
    }
}

/// The bytes of a valid `T`, to compare a raw byte against (for enums and
/// `bool`s whose representation Rust does not fix).
pub fn byte_of<T: Copy>(v: T) -> u8 {
    assert_eq!(size_of::<T>(), 1, "byte_of takes one-byte values");
    // SAFETY: `v` is a valid, initialised one-byte value (asserted above).
    unsafe { *(&v as *const T).cast::<u8>() }
}

/// A slot of a previous slab: `Ok(None)` when it holds no live entry.
///
/// `shift_ms` moves its times from the previous process's clock to this
/// one's (see the module docs); `now` is this process's clock.
pub fn read_slot<V: RawValue>(
    raw: &[u8],
    shift_ms: i64,
    now: u64,
) -> Result<Option<Entry<V>>, Dropped> {
    let Some(times) = check_slot::<V>(raw, shift_ms, now)? else {
        return Ok(None);
    };
    Ok(Some(times.moved.entry(raw)))
}

/// What [`check_slot`] found in an adoptable slot: its keys, and its
/// times in this process's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    pub keys: [FlowKey; 2],
    pub moved: Moved,
}

/// An adoptable slot's times in this process's clock, for
/// [`Moved::entry`] to write over the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moved {
    expires_at: u64,
    created_at: u64,
}

/// Starts loading the cache lines of `raw` (a slot adoption will check
/// soon: the previous region's pages are 4 KiB, at whose edges the
/// hardware's own prefetch stops). A hint, nothing is read.
#[inline(always)]
pub fn prefetch_slot(raw: &[u8]) {
    let mut line = 0;
    while line < raw.len() {
        super::prefetch(raw.as_ptr().wrapping_add(line));
        line += 64;
    }
}

impl Moved {
    /// The entry of `raw`, the slot [`check_slot`] accepted (and nothing
    /// wrote since), with its times moved.
    ///
    /// # Panics
    /// If `raw` is shorter than an entry (`check_slot` refuses those).
    #[inline(always)]
    pub fn entry<V: RawValue>(self, raw: &[u8]) -> Entry<V> {
        assert!(
            raw.len() >= size_of::<Entry<V>>(),
            "slot shorter than an entry"
        );
        let mut e = MaybeUninit::<Entry<V>>::uninit();
        // SAFETY: `raw` holds at least one `Entry<V>` (asserted), and
        // `check_slot` found every byte with invalid patterns (the keys'
        // `v6`, the state, the value's, per `RawValue`) holding a valid
        // one; the other fields are integers and arrays of them, for which
        // any bytes are valid. A byte copy because a byte slice has no
        // alignment.
        let mut e: Entry<V> = unsafe {
            core::ptr::copy_nonoverlapping(
                raw.as_ptr(),
                e.as_mut_ptr().cast::<u8>(),
                size_of::<Entry<V>>(),
            );
            e.assume_init()
        };
        e.expires_at = self.expires_at;
        e.created_at = self.created_at;
        e
    }
}

/// [`read_slot`]'s checks on the slot's bytes where they lie, without
/// copying the entry out: its times in this process's clock when it is
/// adoptable, `Ok(None)` when it holds no live entry.
#[inline]
pub fn check_slot<V: RawValue>(
    raw: &[u8],
    shift_ms: i64,
    now: u64,
) -> Result<Option<Checked>, Dropped> {
    if raw.len() < size_of::<Entry<V>>() {
        return Err(Dropped::BadValue);
    }
    let raw = &raw[..size_of::<Entry<V>>()];
    if raw[offset_of!(Entry<V>, flags)] & LIVE == 0 {
        return Ok(None);
    }
    let keys_at = offset_of!(Entry<V>, keys);
    for k in 0..2 {
        if raw[keys_at + k * size_of::<FlowKey>() + offset_of!(FlowKey, v6)] > 1 {
            return Err(Dropped::BadKeys);
        }
    }
    let state_byte = raw[offset_of!(Entry<V>, state)];
    let Some(state) = STATES.iter().copied().find(|&s| byte_of(s) == state_byte) else {
        return Err(Dropped::BadState);
    };
    let value = offset_of!(Entry<V>, value);
    if !V::bytes_valid(&raw[value..value + size_of::<V>()]) {
        return Err(Dropped::BadValue);
    }
    // SAFETY: the keys lie inside `raw` (one whole entry, checked above),
    // both `v6` bytes are `bool`s (checked above) and every other field of
    // a `FlowKey` is an integer or an array of them. Unaligned: a byte
    // slice has no alignment.
    let keys: [FlowKey; 2] =
        unsafe { core::ptr::read_unaligned(raw.as_ptr().add(keys_at).cast::<[FlowKey; 2]>()) };
    let word = |o: usize, n: usize| {
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(&raw[o..o + n]);
        u64::from_ne_bytes(b)
    };
    let next_free = word(offset_of!(Entry<V>, next_free), size_of::<u32>()) as u32;
    if next_free != seal(&keys) {
        return Err(Dropped::Torn);
    }
    let mapped = |k: &FlowKey| {
        let prefix = u128::from_be_bytes(k.src) >> 32 == 0xFFFF
            && u128::from_be_bytes(k.dst) >> 32 == 0xFFFF;
        k.v6 || prefix
    };
    if keys[0] == keys[1] || !keys.iter().all(mapped) {
        return Err(Dropped::BadKeys);
    }
    let tcp = keys[0].proto == crate::wire::ip_proto::TCP;
    if tcp == (state == State::Udp) || keys[0].proto != keys[1].proto {
        return Err(Dropped::BadState);
    }
    let moved = |t: u64| (t as i64).saturating_add(shift_ms).max(0) as u64;
    let expires_at = moved(word(offset_of!(Entry<V>, expires_at), 8));
    let created_at = moved(word(offset_of!(Entry<V>, created_at), 8)).min(now);
    if expires_at <= now {
        return Err(Dropped::Expired);
    }
    Ok(Some(Checked {
        keys,
        moved: Moved {
            expires_at,
            created_at,
        },
    }))
}

/// Every [`State`], to match a raw state byte against.
const STATES: [State; 7] = [
    State::SynSent,
    State::SynRecv,
    State::Established,
    State::FinWait,
    State::TimeWait,
    State::Closed,
    State::Udp,
];

/// Entries adoption checks ahead of the one it inserts: each entry's
/// index buckets are prefetched when it is checked and probed this many
/// entries later, so the bucket misses overlap without waiting in bursts
/// (random buckets of an index far bigger than the cache are a large part
/// of an adoption's cost). With the prefetches of the slots ahead, 8 did
/// best (`border-perf adopt --ahead`): 32 or more keep more misses in
/// flight than a core has fill buffers for, and the prefetches stall.
pub const ADOPT_AHEAD: usize = 8;

/// The window of entries checked and not yet inserted, oldest first, `N`
/// of them (see [`ADOPT_AHEAD`]).
pub struct Ahead<P: Copy, const N: usize = ADOPT_AHEAD> {
    ring: [Option<P>; N],
    next: usize,
}

impl<P: Copy, const N: usize> Default for Ahead<P, N> {
    fn default() -> Self {
        Ahead {
            ring: [None; N],
            next: 0,
        }
    }
}

impl<P: Copy, const N: usize> Ahead<P, N> {
    /// Queues `p`; returns the entry queued `N` pushes before, if any:
    /// the one to insert now.
    #[inline(always)]
    pub fn push(&mut self, p: P) -> Option<P> {
        let old = self.ring[self.next].replace(p);
        self.next = (self.next + 1) % N;
        old
    }

    /// Takes the oldest queued entry (at the end, to empty the window).
    pub fn pop(&mut self) -> Option<P> {
        (0..N).find_map(|i| self.ring[(self.next + i) % N].take())
    }
}

/// The index hashes of an entry's two keys in one table, worked out once
/// per adopted entry by [`Conntrack::prefetch_for_adopt`] and used again
/// by the duplicate check and the insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdoptHashes([u32; 2]);

impl<V: Copy> Conntrack<V> {
    /// Starts loading the index buckets [`Conntrack::adopt_hashed`] of `e`
    /// will probe (a hint, nothing changes), and returns the keys' hashes
    /// for it.
    #[inline]
    pub fn prefetch_for_adopt(&self, e: &Entry<V>) -> AdoptHashes {
        self.prefetch_keys(&e.keys)
    }

    /// [`Conntrack::prefetch_for_adopt`] of the entry whose keys are
    /// `keys` (from [`check_slot`], before the entry is copied out).
    #[inline]
    pub fn prefetch_keys(&self, keys: &[FlowKey; 2]) -> AdoptHashes {
        let h = [self.hash(&keys[0]), self.hash(&keys[1])];
        for k in h {
            self.prefetch_bucket(KeyHash(k));
        }
        AdoptHashes(h)
    }

    /// Starts loading the slab slot the insert `ahead` inserts from now
    /// will most likely take (and its sweep hint): the slab is written in
    /// order while adopting into an empty table, and its 4 KiB pages stop
    /// the hardware's prefetch. A hint, nothing changes.
    #[inline(always)]
    pub fn prefetch_slot_ahead(&self, ahead: usize) {
        if self.free != super::NIL {
            return;
        }
        let slot = self.slots.len() + ahead;
        if slot >= self.capacity {
            return;
        }
        let e = self.slots.as_ptr().wrapping_add(slot).cast::<u8>();
        let mut line = 0;
        while line < size_of::<Entry<V>>() {
            super::prefetch(e.wrapping_add(line));
            line += 64;
        }
        super::prefetch(self.hints.as_ptr().wrapping_add(slot));
    }

    /// Whether either key of `e` is tracked already; `h` from
    /// [`Conntrack::prefetch_for_adopt`] of `e` in this table.
    #[inline]
    pub fn tracks(&self, e: &Entry<V>, h: AdoptHashes) -> bool {
        debug_assert_eq!(h, self.hashes(e), "hashes of another entry or table");
        self.find(h.0[0], &e.keys[0]).is_some() || self.find(h.0[1], &e.keys[1]).is_some()
    }

    fn hashes(&self, e: &Entry<V>) -> AdoptHashes {
        AdoptHashes([self.hash(&e.keys[0]), self.hash(&e.keys[1])])
    }

    /// Inserts an entry read from a previous table ([`read_slot`]) as it
    /// is: its state, deadline, TCP tracking and value. The deadline is
    /// capped at `now` plus the state's timeout (a previous process may
    /// have had longer timeouts).
    pub fn adopt_entry(&mut self, mut e: Entry<V>, now: u64) -> Result<EntryId, Dropped> {
        let h = self.hashes(&e);
        self.adopt_hashed(&mut e, h, now)
    }

    /// [`Conntrack::adopt_entry`] with the hashes
    /// [`Conntrack::prefetch_for_adopt`] returned for `e` (its keys
    /// unchanged since). Taken by reference, so that the entry is copied
    /// once, into its slot; `e` is left as it was written there.
    #[inline]
    pub fn adopt_hashed(
        &mut self,
        e: &mut Entry<V>,
        h: AdoptHashes,
        now: u64,
    ) -> Result<EntryId, Dropped> {
        if self.tracks(e, h) {
            return Err(Dropped::Duplicate);
        }
        if self.len == self.capacity {
            return Err(Dropped::Full);
        }
        let cap = now.saturating_add(self.timeout_ms[e.state as usize]);
        e.expires_at = e.expires_at.min(cap);
        let slot = self.place_adopted(e).ok_or(Dropped::Full)?;
        if e.state.is_half_open() {
            self.half_open.push(slot, e.created_at);
        }
        let [h_orig, h_reply] = h.0;
        self.index
            .insert(h_orig, super::index_ref(slot, Dir::Original));
        self.index
            .insert(h_reply, super::index_ref(slot, Dir::Reply));
        Ok(EntryId(slot as u32))
    }

    /// `Conntrack::place` of an adopted entry, copied from where it lies
    /// (a 192-byte entry moved by value costs a copy per move). Its seal
    /// is the one [`check_slot`] verified (its keys are unchanged since):
    /// not worked out again. The same order as `place`: the whole entry
    /// with its flags clear, then the live flag.
    #[inline(always)]
    fn place_adopted(&mut self, e: &mut Entry<V>) -> Option<usize> {
        debug_assert_eq!(e.next_free, seal(&e.keys), "adopting an unsealed entry");
        e.flags = 0;
        self.place_sealed(e)
    }
}

/// The byte size of one slot of a slab of `Entry<V>`.
pub const fn slot_bytes<V>() -> usize {
    size_of::<Entry<V>>()
}

/// Offsets and sizes that fix where adoption reads what, for the flows
/// region's geometry checksum: a build whose entry layout differs has a
/// different checksum even under the same layout version.
pub fn layout_words<V>() -> [u64; 10] {
    [
        size_of::<Entry<V>>() as u64,
        core::mem::align_of::<Entry<V>>() as u64,
        size_of::<V>() as u64,
        size_of::<FlowKey>() as u64,
        offset_of!(Entry<V>, state) as u64,
        offset_of!(Entry<V>, flags) as u64,
        offset_of!(Entry<V>, next_free) as u64,
        offset_of!(Entry<V>, expires_at) as u64,
        offset_of!(Entry<V>, value) as u64,
        (offset_of!(Entry<V>, created_at) as u64) << 16 | offset_of!(Entry<V>, tcp) as u64,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::Timeouts;
    use ahash::RandomState;

    const T: Timeouts = Timeouts {
        tcp_syn: 30,
        tcp_established: 900,
        tcp_closing: 10,
        udp: 300,
        local_port_cooldown: 60,
    };

    fn table(capacity: usize) -> Conntrack<u32> {
        Conntrack::with_hasher(capacity, T, RandomState::with_seeds(1, 2, 3, 4))
    }

    fn key(port: u16, proto: u8) -> (FlowKey, FlowKey) {
        (
            FlowKey::v4([192, 0, 2, 1], [10, 140, 0, 100], port, 80, proto),
            FlowKey::v4([10, 141, 0, 11], [10, 141, 0, 1], 8080, port, proto),
        )
    }

    /// The raw bytes of slot `id` of `ct`: what a previous process left.
    fn raw(ct: &Conntrack<u32>, id: EntryId) -> Vec<u8> {
        let e = ct.get(id);
        // SAFETY: reading the bytes of a live, initialised entry (padding
        // included, which is only compared and copied).
        unsafe {
            core::slice::from_raw_parts(
                (e as *const Entry<u32>).cast::<u8>(),
                size_of::<Entry<u32>>(),
            )
        }
        .to_vec()
    }

    fn established(ct: &mut Conntrack<u32>, port: u16, now: u64) -> EntryId {
        let (o, r) = key(port, 6);
        let id = ct.insert(o, r, 7, State::SynSent, now, |_, _| {}).unwrap();
        ct.update_tcp(id, Dir::Reply, &crate::conntrack::TcpSeg::flags(0x12), now)
            .unwrap();
        ct.update_tcp(
            id,
            Dir::Original,
            &crate::conntrack::TcpSeg {
                ack: 1,
                ..crate::conntrack::TcpSeg::flags(0x10)
            },
            now,
        )
        .unwrap();
        assert_eq!(ct.get(id).state(), State::Established);
        id
    }

    #[test]
    fn a_valid_entry_is_adopted_as_it_was() {
        let mut old = table(16);
        let id = established(&mut old, 1000, 5_000);
        let bytes = raw(&old, id);
        let e = read_slot::<u32>(&bytes, 0, 6_000).unwrap().unwrap();
        let mut new = table(16);
        let nid = new.adopt_entry(e, 6_000).unwrap();
        let (o, r) = key(1000, 6);
        assert_eq!(new.lookup(&o, 6_000), Some((nid, Dir::Original)));
        assert_eq!(new.lookup(&r, 6_000), Some((nid, Dir::Reply)));
        let got = new.get(nid);
        assert_eq!(
            (got.state(), got.value, got.expires_at()),
            (State::Established, 7, 5_000 + 900_000)
        );
        assert_eq!(got.tcp(), old.get(id).tcp());
        new.check();
    }

    #[test]
    fn a_free_slot_is_nothing() {
        let mut old = table(16);
        let id = established(&mut old, 1000, 0);
        old.remove(id);
        assert!(read_slot::<u32>(&raw(&old, id), 0, 1).unwrap().is_none());
        assert!(read_slot::<u32>(&vec![0u8; size_of::<Entry<u32>>()], 0, 1)
            .unwrap()
            .is_none());
    }

    #[test]
    fn each_bad_byte_is_dropped_with_its_reason() {
        let mut old = table(16);
        let id = established(&mut old, 1000, 0);
        let good = raw(&old, id);
        let at = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            read_slot::<u32>(&b, 0, 1).map(|_| ())
        };
        let keys = offset_of!(Entry<u32>, keys);
        // A key byte changed after the seal: a torn insert.
        assert_eq!(at(&|b| b[keys + 3] ^= 1), Err(Dropped::Torn));
        // The seal word itself torn.
        assert_eq!(
            at(&|b| b[offset_of!(Entry<u32>, next_free)] ^= 0x80),
            Err(Dropped::Torn)
        );
        // `v6` is no bool.
        assert_eq!(
            at(&|b| b[keys + offset_of!(FlowKey, v6)] = 7),
            Err(Dropped::BadKeys)
        );
        // No such state.
        assert_eq!(
            at(&|b| b[offset_of!(Entry<u32>, state)] = 9),
            Err(Dropped::BadState)
        );
        // A UDP state on a TCP flow.
        assert_eq!(
            at(&|b| b[offset_of!(Entry<u32>, state)] = byte_of(State::Udp)),
            Err(Dropped::BadState)
        );
        // Too short.
        assert_eq!(
            read_slot::<u32>(&good[..64], 0, 1).map(|_| ()),
            Err(Dropped::BadValue)
        );
    }

    #[test]
    fn a_value_whose_bytes_are_invalid_is_dropped() {
        #[derive(Clone, Copy)]
        #[allow(dead_code)]
        struct Flag(bool);
        // SAFETY: checks the one byte, a bool.
        unsafe impl RawValue for Flag {
            fn bytes_valid(b: &[u8]) -> bool {
                b.len() == 1 && b[0] <= 1
            }
        }
        let mut old: Conntrack<Flag> =
            Conntrack::with_hasher(4, T, RandomState::with_seeds(1, 2, 3, 4));
        let (o, r) = key(9, 17);
        let id = old
            .insert(o, r, Flag(true), State::Udp, 0, |_, _| {})
            .unwrap();
        let e = old.get(id);
        // SAFETY: the bytes of a live entry, as in `raw`.
        let mut b = unsafe {
            core::slice::from_raw_parts(
                (e as *const Entry<Flag>).cast::<u8>(),
                size_of::<Entry<Flag>>(),
            )
        }
        .to_vec();
        assert!(read_slot::<Flag>(&b, 0, 1).unwrap().is_some());
        b[offset_of!(Entry<Flag>, value)] = 2;
        assert_eq!(
            read_slot::<Flag>(&b, 0, 1).map(|_| ()),
            Err(Dropped::BadValue)
        );
    }

    #[test]
    fn entries_age_by_the_time_between_the_processes() {
        let mut old = table(16);
        let id = established(&mut old, 1000, 10_000);
        let bytes = raw(&old, id);
        // The previous clock's 10 s is this clock's 2 s (shift -8 s); 899 s
        // of the 900 s timeout passed in between: one second left.
        let e = read_slot::<u32>(&bytes, -8_000, 2_000 + 899_000)
            .unwrap()
            .unwrap();
        assert_eq!(e.expires_at(), 2_000 + 900_000);
        assert_eq!(e.created_at(), 2_000);
        // One more second: expired during the restart.
        assert_eq!(
            read_slot::<u32>(&bytes, -8_000, 2_000 + 900_000).map(|_| ()),
            Err(Dropped::Expired)
        );
    }

    #[test]
    fn a_deadline_beyond_this_process_s_timeout_is_capped() {
        let mut old = table(16);
        let id = established(&mut old, 1000, 0);
        let e = read_slot::<u32>(&raw(&old, id), 0, 1).unwrap().unwrap();
        let mut new = Conntrack::<u32>::with_hasher(
            16,
            Timeouts {
                tcp_established: 60,
                ..T
            },
            RandomState::new(),
        );
        let nid = new.adopt_entry(e, 1).unwrap();
        assert_eq!(new.get(nid).expires_at(), 1 + 60_000);
    }

    #[test]
    fn duplicates_and_a_full_table_are_dropped() {
        let mut old = table(16);
        let a = established(&mut old, 1000, 0);
        let b = established(&mut old, 1001, 0);
        let (ea, eb) = (
            read_slot::<u32>(&raw(&old, a), 0, 1).unwrap().unwrap(),
            read_slot::<u32>(&raw(&old, b), 0, 1).unwrap().unwrap(),
        );
        let mut new = table(1);
        new.adopt_entry(ea, 1).unwrap();
        assert_eq!(new.adopt_entry(ea, 1).map(|_| ()), Err(Dropped::Duplicate));
        assert_eq!(new.adopt_entry(eb, 1).map(|_| ()), Err(Dropped::Full));
        new.check();
    }

    #[test]
    fn the_prefetch_s_hashes_index_the_entry_and_catch_duplicates() {
        let mut old = table(16);
        let id = established(&mut old, 1000, 0);
        let mut e = read_slot::<u32>(&raw(&old, id), 0, 1).unwrap().unwrap();
        let mut new = table(16);
        let h = new.prefetch_for_adopt(&e);
        assert!(!new.tracks(&e, h));
        let nid = new.adopt_hashed(&mut e, h, 1).unwrap();
        let (o, r) = key(1000, 6);
        assert_eq!(new.lookup(&o, 1), Some((nid, Dir::Original)));
        assert_eq!(new.lookup(&r, 1), Some((nid, Dir::Reply)));
        assert!(new.tracks(&e, h));
        assert_eq!(
            new.adopt_hashed(&mut e, h, 1).map(|_| ()),
            Err(Dropped::Duplicate)
        );
        assert_eq!(new.len(), 1);
        new.check();
    }

    #[test]
    fn the_window_gives_back_each_entry_once_in_order() {
        let mut w = Ahead::<usize, 4>::default();
        let mut out = Vec::new();
        for i in 0..10 {
            match w.push(i) {
                Some(due) => out.push(due),
                None => assert!(i < 4, "entry {i} held back"),
            }
        }
        assert_eq!(out, (0..6).collect::<Vec<_>>());
        while let Some(due) = w.pop() {
            out.push(due);
        }
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        assert_eq!(w.pop(), None);
    }

    #[test]
    fn a_checked_slot_gives_its_keys_and_the_entry_read_slot_gives() {
        let mut old = table(16);
        let id = established(&mut old, 1000, 10_000);
        let bytes = raw(&old, id);
        let c = check_slot::<u32>(&bytes, -8_000, 20_000).unwrap().unwrap();
        assert_eq!(c.keys, [key(1000, 6).0, key(1000, 6).1]);
        let e = read_slot::<u32>(&bytes, -8_000, 20_000).unwrap().unwrap();
        let from_check = c.moved.entry::<u32>(&bytes);
        assert_eq!(
            (
                from_check.keys,
                from_check.value,
                from_check.expires_at(),
                from_check.created_at()
            ),
            (e.keys, e.value, e.expires_at(), e.created_at())
        );
        assert_eq!(from_check.expires_at(), 2_000 + 900_000);
        // Adopted by reference: the entry lands sealed, live and indexed.
        let mut new = table(16);
        let mut e = from_check;
        let h = new.prefetch_keys(&c.keys);
        let nid = new.adopt_hashed(&mut e, h, 20_000).unwrap();
        assert_eq!(new.lookup(&key(1000, 6).1, 20_000), Some((nid, Dir::Reply)));
        assert_eq!(
            read_slot::<u32>(&raw(&new, nid), 0, 20_000)
                .unwrap()
                .map(|e| e.value),
            Some(7)
        );
        new.check();
    }

    #[test]
    fn half_open_entries_are_evictable_after_adoption() {
        let mut old = table(4);
        let (o, r) = key(5, 6);
        let id = old.insert(o, r, 1, State::SynSent, 100, |_, _| {}).unwrap();
        let e = read_slot::<u32>(&raw(&old, id), 0, 200).unwrap().unwrap();
        let mut new = table(4);
        new.adopt_entry(e, 200).unwrap();
        assert_eq!(new.half_open_len(), 1);
        new.check();
    }
}
