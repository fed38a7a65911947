//! Per-worker persistence (`persistence_timeout`, like `ipvsadm -p`): which
//! backend each client address of a persistent VIP was given, so that its
//! next flows go there too even after the backend set changed and Maglev
//! would move it.
//!
//! A fixed table of [`WAYS`]-way buckets keyed by (the VIP's statistics
//! slot, the client address), hashed with a random key (a client cannot
//! aim at one bucket) that the next process of the instance takes over
//! with the pins ([`Persist::take_key`]), so each pin goes back to the
//! bucket it was in and none is lost to a bucket the new key filled. It is allocated when the first
//! persistent VIP is adopted, off the packet path, and never grows:
//! lookups and inserts touch one bucket (six cache lines), no allocation,
//! no lock, no clock read (the caller passes `now` in milliseconds).
//!
//! An entry lives while flows refer to it (`refs`, taken by each tracked
//! flow it placed and given back when the flow's connection-table entry
//! goes) and, after that, until its deadline: the VIP's timeout after the
//! last new flow it placed or the last packet of the last flow that went.
//! A bucket with no free way gives up its entry that ends first, an
//! entry no flow holds before one that some flow holds.
//!
//! Across a restart: the table can live in the worker's carry region
//! (`crate::carry_region`, [`Persist::use_region`]), with the statistics
//! key of each VIP slot beside it ([`Persist::name_vip`]), so the next
//! process reads the pins ([`read_pin`]) and re-inserts those that still
//! fit its tables ([`Persist::adopt`], `lb/adopt.rs`).

/// Entries per bucket.
pub const WAYS: usize = 8;

/// Fewest entries of a worker's table.
pub const MIN_ENTRIES: usize = 1024;

/// Most entries of a worker's table.
pub const MAX_ENTRIES: usize = 1 << 22;

/// Entries a worker with a connection table of `conntrack_capacity` keeps:
/// a quarter of it (a client holds at least one flow while it is pinned
/// for certain, and idle clients wait out their timeout beside the active
/// ones), a power of two in [`MIN_ENTRIES`]..=[`MAX_ENTRIES`].
pub fn entries_for(conntrack_capacity: usize) -> usize {
    (conntrack_capacity / 4)
        .next_power_of_two()
        .clamp(MIN_ENTRIES, MAX_ENTRIES)
}

/// One client's pin (48 bytes; all zero: a free way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Pin {
    /// The client address as a flow key holds it (IPv4-mapped for IPv4).
    client: [u8; 16],
    /// The VIP's statistics slot on this worker (stable while the VIP is
    /// configured: slots follow the VIP's name).
    vip: u32,
    /// The backend: its stable id, its statistics slot (what a flow
    /// record names it by) and its position in the VIP's backends when
    /// pinned (a hint: a new generation may move it).
    backend_id: u32,
    backend_slot: u32,
    hint: u32,
    /// Tracked flows this pin placed that are still in the connection table.
    refs: u32,
    /// The VIP's timeout in milliseconds, for a release that knows no VIP.
    timeout_ms: u32,
    /// When the pin ends if no flow holds it (worker milliseconds); 0: free.
    deadline: u64,
}

/// The layout of [`Pin`] (the carry region's geometry checksum).
pub fn pin_layout_words() -> Vec<u64> {
    use core::mem::{offset_of, size_of};
    [
        size_of::<Pin>(),
        offset_of!(Pin, client),
        offset_of!(Pin, vip),
        offset_of!(Pin, backend_id),
        offset_of!(Pin, backend_slot),
        offset_of!(Pin, hint),
        offset_of!(Pin, refs),
        offset_of!(Pin, timeout_ms),
        offset_of!(Pin, deadline),
    ]
    .iter()
    .map(|&w| w as u64)
    .collect()
}

/// A previous process's pin, as read from its carry region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinView {
    pub client: [u8; 16],
    /// The VIP's statistics slot in the previous process.
    pub vip: u32,
    pub backend_id: u32,
    pub hint: u32,
    /// Flows that held it when the previous process stopped.
    pub refs: u32,
    pub timeout_ms: u32,
    /// The previous process's clock.
    pub deadline: u64,
}

/// Reads a pin's raw bytes (exactly `size_of::<Pin>()`; every bit pattern
/// is one): `None` for a free way.
pub fn read_pin(b: &[u8]) -> Option<PinView> {
    use core::mem::offset_of;
    if b.len() != core::mem::size_of::<Pin>() {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
    let deadline = u64::from_le_bytes(
        b[offset_of!(Pin, deadline)..offset_of!(Pin, deadline) + 8]
            .try_into()
            .unwrap_or_default(),
    );
    if deadline == 0 {
        return None;
    }
    let mut client = [0u8; 16];
    client.copy_from_slice(&b[..16]);
    Some(PinView {
        client,
        vip: u32_at(offset_of!(Pin, vip)),
        backend_id: u32_at(offset_of!(Pin, backend_id)),
        hint: u32_at(offset_of!(Pin, hint)),
        refs: u32_at(offset_of!(Pin, refs)),
        timeout_ms: u32_at(offset_of!(Pin, timeout_ms)),
        deadline,
    })
}

impl Pin {
    #[inline(always)]
    fn is(&self, vip: u32, client: &[u8; 16]) -> bool {
        self.deadline != 0 && self.vip == vip && self.client == *client
    }

    #[inline(always)]
    fn expired(&self, now: u64) -> bool {
        self.refs == 0 && self.deadline <= now
    }
}

/// A live pin found for a client: where it is and the backend it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pinned {
    pub at: usize,
    pub backend_id: u32,
    pub hint: u32,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A live pin.
    Live(Pinned),
    /// No pin.
    Absent,
    /// A pin past its deadline with no flow left, now removed.
    Expired,
}

/// What recording a pin displaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Displaced {
    /// A free way, or the client's own pin.
    Nothing,
    /// Another client's pin past its deadline.
    Expired,
    /// Another client's live pin (the bucket was full).
    Evicted,
}

/// What [`Persist::adopt`] did with a previous process's pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adopted {
    /// It is in the table.
    Inserted,
    /// The client has a pin already (an older copy of this one).
    Present,
    /// Its bucket has no free or expired way (or there is no table).
    Full,
}

/// A backend a pin names: stable id, statistics slot, position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinTarget {
    pub backend_id: u32,
    pub backend_slot: u32,
    pub index: u32,
}

/// One worker's persistence table.
pub struct Persist {
    pins: crate::conntrack::Slab<Pin>,
    /// The table's memory in the carry region, until [`Persist::prepare`].
    region: Option<crate::conntrack::Slab<Pin>>,
    /// The statistics key of each VIP slot, in the carry region.
    names: Option<crate::conntrack::Slab<u32>>,
    /// Buckets - 1 (0 before [`Persist::prepare`]).
    mask: usize,
    entries: usize,
    /// The hash key, and where the carry region keeps it for the next
    /// process.
    key: [u64; 4],
    key_words: Option<crate::conntrack::Slab<u64>>,
    hasher: ahash::RandomState,
}

/// The table's hasher under `key`: the same key places a pin in the same
/// bucket in any process of this build.
fn hasher_of(key: [u64; 4]) -> ahash::RandomState {
    ahash::RandomState::with_seeds(key[0], key[1], key[2], key[3])
}

/// A new random hash key: the hashes of a few integers under ahash's own
/// random per-process state.
fn random_key() -> [u64; 4] {
    let state = ahash::RandomState::new();
    [0u64, 1, 2, 3].map(|i| state.hash_one(i))
}

impl Persist {
    /// A table of `entries` pins (rounded up to whole buckets of a power
    /// of two), allocated by [`Persist::prepare`].
    pub fn new(entries: usize) -> Self {
        let key = random_key();
        Persist {
            pins: crate::conntrack::Slab::heap(0),
            region: None,
            names: None,
            mask: 0,
            entries: entries.next_power_of_two().max(WAYS),
            key,
            key_words: None,
            hasher: hasher_of(key),
        }
    }

    /// The hash key (what [`Persist::take_key`] of the next process takes).
    pub fn key(&self) -> [u64; 4] {
        self.key
    }

    /// Hashes with `key` from now on: a previous process's, whose pins
    /// then land in the buckets they held there. Only before any pin is
    /// recorded or adopted (the buckets of pins already in the table
    /// would move); returns whether the key was taken.
    pub fn take_key(&mut self, key: [u64; 4]) -> bool {
        if self.pins.iter().any(|p| p.deadline != 0) {
            return false;
        }
        self.key = key;
        self.hasher = hasher_of(key);
        self.record_key();
        true
    }

    fn record_key(&mut self) {
        if let Some(words) = self.key_words.as_mut() {
            for (i, k) in self.key.iter().enumerate() {
                if let Some(w) = words.get_mut(i) {
                    *w = *k;
                }
            }
        }
    }

    /// Allocates the table the first time a persistent VIP needs it (off
    /// the packet path).
    pub fn prepare(&mut self) {
        if self.pins.is_empty() {
            self.pins = match self.region.take() {
                Some(region) => region,
                None => {
                    let mut pins = crate::conntrack::Slab::heap(self.entries);
                    while pins.push(Pin::default()).is_ok() {}
                    pins
                }
            };
            self.mask = self.entries / WAYS - 1;
        }
    }

    /// Keeps the table in `pins` (a carry region's, all free, so the pins
    /// outlive the process), the VIP slots' keys in `names` and the hash
    /// key in `key_words` (four words), before [`Persist::prepare`]. Pins
    /// of another size than this table's are not used.
    pub fn use_region(
        &mut self,
        pins: crate::conntrack::Slab<Pin>,
        names: crate::conntrack::Slab<u32>,
        key_words: crate::conntrack::Slab<u64>,
    ) {
        if pins.len() == self.entries && self.pins.is_empty() {
            self.region = Some(pins);
        }
        self.names = Some(names);
        self.key_words = Some(key_words);
        self.record_key();
    }

    /// Records that VIP statistics slot `slot` is the VIP of statistics
    /// key `key` (tables adoption), for the next process.
    pub fn name_vip(&mut self, slot: u32, key: u32) {
        if let Some(w) = self.names.as_mut().and_then(|n| n.get_mut(slot as usize)) {
            *w = key;
        }
    }

    /// Whether the pins live in a carry region (tests, inspection).
    pub fn is_carried(&self) -> bool {
        self.pins.is_mapped() || self.region.is_some()
    }

    /// Puts a previous process's pin of `client` at `vip` to `to` into
    /// the table, ending at `deadline` unless flows hold it, without
    /// displacing any live pin.
    pub fn adopt(
        &mut self,
        vip: u32,
        client: &[u8; 16],
        to: PinTarget,
        (deadline, timeout_ms): (u64, u32),
        now: u64,
    ) -> Adopted {
        if !self.ready() {
            return Adopted::Full;
        }
        let b = self.bucket(vip, client);
        let mut free = None;
        for i in b..b + WAYS {
            let p = &self.pins[i];
            if p.is(vip, client) {
                return Adopted::Present;
            }
            if free.is_none() && (p.deadline == 0 || p.expired(now)) {
                free = Some(i);
            }
        }
        let Some(at) = free else {
            return Adopted::Full;
        };
        self.pins[at] = Pin {
            client: *client,
            vip,
            backend_id: to.backend_id,
            backend_slot: to.backend_slot,
            hint: to.index,
            refs: 0,
            timeout_ms,
            deadline: deadline.max(1),
        };
        Adopted::Inserted
    }

    /// The live pin of `client` at `vip` without touching it (adoption
    /// of the flows that hold it).
    pub fn find(&self, vip: u32, client: &[u8; 16], now: u64) -> Option<Pinned> {
        if !self.ready() {
            return None;
        }
        let b = self.bucket(vip, client);
        (b..b + WAYS).find_map(|at| {
            let p = &self.pins[at];
            (p.is(vip, client) && !p.expired(now)).then_some(Pinned {
                at,
                backend_id: p.backend_id,
                hint: p.hint,
            })
        })
    }

    /// Whether the table is allocated.
    #[inline(always)]
    pub fn ready(&self) -> bool {
        !self.pins.is_empty()
    }

    /// Pins the table holds at most.
    pub fn capacity(&self) -> usize {
        self.entries
    }

    /// Bytes the table takes once prepared.
    pub fn memory_bytes(&self) -> usize {
        self.entries * std::mem::size_of::<Pin>()
    }

    #[inline(always)]
    fn bucket(&self, vip: u32, client: &[u8; 16]) -> usize {
        let h = self.hasher.hash_one((vip, client));
        ((h as usize) & self.mask) * WAYS
    }

    /// The live pin of `client` at `vip`, if any; a pin found past its
    /// deadline is removed and reported.
    #[inline]
    pub fn lookup(&mut self, vip: u32, client: &[u8; 16], now: u64) -> Found {
        if !self.ready() {
            return Found::Absent;
        }
        let b = self.bucket(vip, client);
        for at in b..b + WAYS {
            let p = &mut self.pins[at];
            if p.is(vip, client) {
                if p.expired(now) {
                    *p = Pin::default();
                    return Found::Expired;
                }
                return Found::Live(Pinned {
                    at,
                    backend_id: p.backend_id,
                    hint: p.hint,
                });
            }
        }
        Found::Absent
    }

    /// A new flow used the pin at `at`: its deadline moves to `timeout_ms`
    /// from now (the VIP's timeout as it is now).
    #[inline]
    pub fn touch(&mut self, at: usize, now: u64, timeout_ms: u32) {
        if let Some(p) = self.pins.get_mut(at) {
            p.deadline = p.deadline.max(now + u64::from(timeout_ms));
            p.timeout_ms = timeout_ms;
        }
    }

    /// A tracked flow placed by the pin at `at` holds it until its
    /// connection-table entry goes ([`Persist::release`]).
    #[inline]
    pub fn hold(&mut self, at: usize) {
        if let Some(p) = self.pins.get_mut(at) {
            p.refs = p.refs.saturating_add(1);
        }
    }

    /// Pins `client` at `vip` to `to` for `timeout_ms` from now (replacing
    /// the client's pin, or taking a free or expired way, or evicting the
    /// way that ends first): where the pin is and what it displaced. The
    /// flows the old pin placed no longer count on the new one.
    pub fn record(
        &mut self,
        vip: u32,
        client: &[u8; 16],
        to: PinTarget,
        now: u64,
        timeout_ms: u32,
    ) -> Option<(usize, Displaced)> {
        if !self.ready() {
            return None;
        }
        let b = self.bucket(vip, client);
        let mut at = b;
        // Rank of the way to take: own pin, free, expired, then the
        // earliest deadline among unheld pins, then among held ones.
        let mut best = (u8::MAX, u64::MAX);
        for i in b..b + WAYS {
            let p = &self.pins[i];
            let rank = if p.is(vip, client) {
                (0, 0)
            } else if p.deadline == 0 {
                (1, 0)
            } else if p.expired(now) {
                (2, 0)
            } else {
                (3 + u8::from(p.refs > 0), p.deadline)
            };
            if rank < best {
                best = rank;
                at = i;
            }
        }
        let displaced = match best.0 {
            0 | 1 => Displaced::Nothing,
            2 => Displaced::Expired,
            _ => Displaced::Evicted,
        };
        self.pins[at] = Pin {
            client: *client,
            vip,
            backend_id: to.backend_id,
            backend_slot: to.backend_slot,
            hint: to.index,
            refs: 0,
            timeout_ms,
            deadline: now + u64::from(timeout_ms),
        };
        Some((at, displaced))
    }

    /// A tracked flow that a pin placed went, its last packet at
    /// `last_seen`: it no longer holds the pin, whose deadline is then at
    /// least the timeout after that packet. A pin since given to another
    /// backend (or client) is left alone.
    #[inline]
    pub fn release(&mut self, vip: u32, client: &[u8; 16], backend_slot: u32, last_seen: u64) {
        if !self.ready() {
            return;
        }
        let b = self.bucket(vip, client);
        for p in &mut self.pins[b..b + WAYS] {
            if p.is(vip, client) {
                if p.backend_slot == backend_slot && p.refs > 0 {
                    p.refs -= 1;
                    p.deadline = p.deadline.max(last_seen + u64::from(p.timeout_ms));
                }
                return;
            }
        }
    }

    /// Flows holding the pin of `client` at `vip` (tests, inspection).
    pub fn holders(&self, vip: u32, client: &[u8; 16]) -> Option<u32> {
        if !self.ready() {
            return None;
        }
        let b = self.bucket(vip, client);
        self.pins[b..b + WAYS]
            .iter()
            .find(|p| p.is(vip, client))
            .map(|p| p.refs)
    }

    /// Live pins at `now` (tests, inspection; walks the whole table).
    pub fn live(&self, now: u64) -> usize {
        self.pins
            .iter()
            .filter(|p| p.deadline != 0 && !p.expired(now))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(i: u32) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[10] = 0xff;
        a[11] = 0xff;
        a[12..].copy_from_slice(&i.to_be_bytes());
        a
    }

    fn to(id: u32) -> PinTarget {
        PinTarget {
            backend_id: id,
            backend_slot: id + 100,
            index: id,
        }
    }

    #[test]
    fn pin_lives_while_held_and_for_its_timeout_after() {
        let mut p = Persist::new(MIN_ENTRIES);
        assert_eq!(p.lookup(1, &client(1), 0), Found::Absent);
        p.prepare();
        let (at, d) = p.record(1, &client(1), to(7), 1_000, 5_000).unwrap();
        assert_eq!(d, Displaced::Nothing);
        p.hold(at);
        // Held: never expires, whatever the clock says.
        assert!(matches!(p.lookup(1, &client(1), 100_000), Found::Live(x) if x.backend_id == 7));
        // The flow goes at 100 s: 5 s more.
        p.release(1, &client(1), 107, 100_000);
        assert_eq!(p.holders(1, &client(1)), Some(0));
        assert!(matches!(p.lookup(1, &client(1), 104_999), Found::Live(_)));
        assert_eq!(p.lookup(1, &client(1), 105_000), Found::Expired);
        assert_eq!(p.lookup(1, &client(1), 105_000), Found::Absent);
        // Another VIP's pin of the same client is another pin.
        assert_eq!(p.lookup(2, &client(1), 0), Found::Absent);
    }

    #[test]
    fn release_of_a_flow_to_a_replaced_backend_leaves_the_pin() {
        let mut p = Persist::new(MIN_ENTRIES);
        p.prepare();
        let (at, _) = p.record(1, &client(1), to(7), 0, 1_000).unwrap();
        p.hold(at);
        let (at2, _) = p.record(1, &client(1), to(8), 10, 1_000).unwrap();
        assert_eq!(at, at2, "the client's pin is replaced in place");
        p.hold(at2);
        p.release(1, &client(1), 107, 20);
        assert_eq!(p.holders(1, &client(1)), Some(1));
        p.release(1, &client(1), 108, 20);
        assert_eq!(p.holders(1, &client(1)), Some(0));
    }

    #[test]
    fn a_full_bucket_evicts_the_unheld_pin_that_ends_first() {
        let mut p = Persist::new(MIN_ENTRIES);
        p.prepare();
        // Clients that share client 0's bucket.
        let b0 = p.bucket(1, &client(0));
        let same: Vec<u32> = (0..)
            .filter(|&i| p.bucket(1, &client(i)) == b0)
            .take(WAYS + 1)
            .collect();
        for (k, &c) in same[..WAYS].iter().enumerate() {
            let (at, d) = p.record(1, &client(c), to(1), k as u64, 10_000).unwrap();
            assert_eq!(d, Displaced::Nothing);
            // All held but the third, which would end later than the first.
            if k != 2 {
                p.hold(at);
            }
        }
        let (_, d) = p.record(1, &client(same[WAYS]), to(2), 50, 10_000).unwrap();
        assert_eq!(d, Displaced::Evicted);
        assert_eq!(p.lookup(1, &client(same[2]), 50), Found::Absent);
        assert!(matches!(p.lookup(1, &client(same[0]), 50), Found::Live(_)));
        // Past every deadline with nothing held, a way is taken as expired.
        for &c in &same {
            p.release(1, &client(c), 101, 0);
        }
        let (_, d) = p
            .record(1, &client(same[2]), to(3), 1_000_000, 10_000)
            .unwrap();
        assert_eq!(d, Displaced::Expired);
    }

    #[test]
    fn entries_follow_the_connection_table() {
        assert_eq!(entries_for(256), MIN_ENTRIES);
        assert_eq!(entries_for(1 << 20), 1 << 18);
        assert_eq!(entries_for(1 << 27), MAX_ENTRIES);
        assert_eq!(std::mem::size_of::<Pin>(), 48);
    }
}
