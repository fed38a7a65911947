//! Maglev consistent-hashing table builder (Eisenbud et al., NSDI'16), with
//! integer weights.
//!
//! A table ("ring") of prime size `M` maps a flow to a backend:
//! `table[slot(flow_hash, M)]` is the index, in the caller's slice, of the
//! backend that gets the flow. The build is a pure function of the *set* of
//! `(id, weight)` pairs and `M`: input order does not matter, and nothing
//! depends on the host, the build or the process, so every appliance behind
//! the same ECMP group computes the same ring from the same config. It is
//! part of the inter-appliance contract just like [`crate::flowhash`], and
//! pinned by known-answer tests.
//!
//! # Algorithm
//!
//! 1. Backends with weight 0 are left out. The rest are ranked by
//!    [`BackendId`] (byte order); two equal ids are an error.
//! 2. Each backend's preference list is the permutation
//!    `offset, offset + skip, offset + 2·skip, … (mod M)` with
//!    `offset = siphash24(K_OFFSET, id) mod M` and
//!    `skip = siphash24(K_SKIP, id) mod (M − 1) + 1` (two fixed keys, see
//!    [`BackendId::offset_skip`]). `M` prime makes every skip coprime with `M`,
//!    so each list visits every slot.
//! 3. Quotas: backend `i` gets `floor(w_i·M / W)` slots, and the
//!    `M − Σ floor` slots left over go to the largest remainders
//!    `w_i·M mod W` (ties: lower rank first). So every backend holds exactly
//!    the floor or the ceiling of its exact share `w_i·M / W`, and the quotas
//!    sum to `M`.
//! 4. Turns: with `R = max quota`, the backend with quota `q` takes its k-th
//!    turn (k = 0..q) in round `floor(k·R / q)`; within a round, turns go by
//!    quota (larger first), then rank. A backend thus takes turns at a rate
//!    proportional to its weight, spread evenly over the build (the idea of
//!    Katran's weighted Maglev v2, with exact quotas). With equal weights
//!    this is exactly the round-robin of the paper (the ceil quotas are the
//!    lowest ranks, so the order is rank order).
//! 5. On its turn, a backend claims the next slot of its preference list that
//!    is still free.
//!
//! Cost: O(N log N + M + T log G) for G distinct quotas and T ≤ M group
//! turns; in practice ~M times the mean walk length (~ln M). Occupancy is a
//! bitmap (M = 65537 → 8 KiB, stays in L1); positions advance by an add and
//! an arithmetic wrap, never by a modulo or a branch per probe; nothing is
//! allocated when the scratch space is reused.

use crate::flowhash::siphash24;
use core::cmp::Reverse;
use core::fmt;
use std::collections::binary_heap::{BinaryHeap, PeekMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Default ring size (prime; the paper's value).
pub const DEFAULT_M: u32 = 65537;

/// SipHash key for a backend's offset. Fixed forever: changing it re-shuffles
/// every ring of every appliance.
const K_OFFSET: [u8; 16] = *b"border-maglev-of";
/// SipHash key for a backend's skip. Fixed forever, and distinct from
/// [`K_OFFSET`] so offset and skip are independent.
const K_SKIP: [u8; 16] = *b"border-maglev-sk";

/// The slot a flow hash selects in a ring of size `m`:
/// `(flow_hash % m) as usize`. The definition; a packet path that picks
/// often reduces with [`Modulus::slot`], which gives the same slot without
/// a division.
#[inline(always)]
pub fn slot(flow_hash: u64, m: u32) -> usize {
    (flow_hash % u64::from(m)) as usize
}

/// A ring size with its reciprocal, for [`slot`] without a division: a
/// 64-bit divide costs tens of cycles, the multiply-high, multiply and
/// compare here a few.
///
/// Barrett reduction with `r = floor((2^64 - 1) / m)`: since
/// `2^64 / m - 1 <= r <= 2^64 / m`, the estimate `q = floor(x·r / 2^64)`
/// of `floor(x / m)` is short by at most one for every `x < 2^64`, so
/// `x - q·m` lies in `[0, 2m)` and one conditional subtraction makes it
/// exactly `x mod m`, for every `m >= 1` (prime or not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modulus {
    m: u32,
    reciprocal: u64,
}

impl Modulus {
    /// For rings of `m` slots. `m = 0` (an empty ring, where nothing is
    /// picked) gives a modulus whose [`Modulus::slot`] returns its input.
    pub const fn new(m: u32) -> Self {
        let reciprocal = if m == 0 { 0 } else { u64::MAX / m as u64 };
        Modulus { m, reciprocal }
    }

    /// The ring size.
    #[inline(always)]
    pub const fn m(&self) -> u32 {
        self.m
    }

    /// `x mod m` ([`slot`] of `x` for this ring size).
    #[inline(always)]
    pub fn reduce(&self, x: u64) -> u64 {
        let m = u64::from(self.m);
        let q = ((u128::from(x) * u128::from(self.reciprocal)) >> 64) as u64;
        // q <= x / m: no underflow; r < 2m <= 2^33: no overflow.
        let r = x - q * m;
        if r >= m {
            r - m
        } else {
            r
        }
    }

    /// [`slot`]`(flow_hash, m)`, bit for bit.
    #[inline(always)]
    pub fn slot(&self, flow_hash: u64) -> usize {
        self.reduce(flow_hash) as usize
    }
}

/// Stable identity of a backend: its address and port as 18 bytes, the
/// address in IPv6 form (IPv4 as IPv4-mapped `::ffff:a.b.c.d`) followed by the
/// port in network byte order. The order of ids (plain byte order) is the
/// rank order used for tie-breaks.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendId([u8; BackendId::LEN]);

impl BackendId {
    /// Encoded length.
    pub const LEN: usize = 18;

    /// From the raw encoding.
    pub const fn from_bytes(bytes: [u8; Self::LEN]) -> Self {
        BackendId(bytes)
    }

    /// The raw encoding (what the permutation hashes are computed over).
    pub const fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }

    /// An IPv4 backend (stored IPv4-mapped).
    pub const fn v4(addr: [u8; 4], port: u16) -> Self {
        let p = port.to_be_bytes();
        BackendId([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, addr[0], addr[1], addr[2], addr[3], p[0],
            p[1],
        ])
    }

    /// An IPv6 backend.
    pub const fn v6(addr: [u8; 16], port: u16) -> Self {
        let mut b = [0u8; Self::LEN];
        let mut i = 0;
        while i < 16 {
            b[i] = addr[i];
            i += 1;
        }
        let p = port.to_be_bytes();
        b[16] = p[0];
        b[17] = p[1];
        BackendId(b)
    }

    /// From a socket address. An IPv6 scope id / flow info is not part of
    /// the identity.
    pub fn from_socket_addr(sa: SocketAddr) -> Self {
        match sa.ip() {
            IpAddr::V4(a) => Self::v4(a.octets(), sa.port()),
            IpAddr::V6(a) => Self::v6(a.octets(), sa.port()),
        }
    }

    /// Back to a socket address (IPv4-mapped ids come back as IPv4).
    pub fn socket_addr(&self) -> SocketAddr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.0[..16]);
        let a = Ipv6Addr::from(a);
        let port = u16::from_be_bytes([self.0[16], self.0[17]]);
        match a.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), port),
            None => SocketAddr::new(IpAddr::V6(a), port),
        }
    }

    /// This backend's `(offset, skip)` in a ring of size `m` (m ≥ 2):
    /// `offset ∈ [0, m)`, `skip ∈ [1, m)`. For `m < 2` returns `(0, 1)`.
    pub fn offset_skip(&self, m: u32) -> (u32, u32) {
        if m < 2 {
            return (0, 1);
        }
        let m64 = u64::from(m);
        let offset = siphash24(&K_OFFSET, &self.0) % m64;
        let skip = siphash24(&K_SKIP, &self.0) % (m64 - 1) + 1;
        (offset as u32, skip as u32)
    }
}

impl From<SocketAddr> for BackendId {
    fn from(sa: SocketAddr) -> Self {
        Self::from_socket_addr(sa)
    }
}

impl From<(Ipv4Addr, u16)> for BackendId {
    fn from((a, p): (Ipv4Addr, u16)) -> Self {
        Self::v4(a.octets(), p)
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.socket_addr(), f)
    }
}

impl fmt::Debug for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendId({})", self.socket_addr())
    }
}

/// One backend as the builder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaglevBackend {
    /// Stable identity (decides the permutation and the rank).
    pub id: BackendId,
    /// Relative weight; 0 leaves the backend out of the ring.
    pub weight: u32,
}

/// Why a ring could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaglevError {
    /// The ring size is not a prime.
    NotPrime {
        /// The rejected size.
        m: u32,
    },
    /// No backend with a weight above 0.
    NoBackends,
    /// More backends with a weight above 0 than slots (or more than `u32`
    /// can index).
    TooManyBackends {
        /// Number of backends with a weight above 0.
        backends: usize,
        /// Ring size.
        m: u32,
    },
    /// Two backends with the same identity (both with weight above 0).
    DuplicateBackend {
        /// The repeated identity.
        id: BackendId,
    },
}

impl fmt::Display for MaglevError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaglevError::NotPrime { m } => write!(f, "maglev table size {m} is not a prime"),
            MaglevError::NoBackends => f.write_str("no backend with a weight above 0"),
            MaglevError::TooManyBackends { backends, m } => write!(
                f,
                "{backends} backends do not fit a maglev table of size {m}"
            ),
            MaglevError::DuplicateBackend { id } => write!(f, "backend {id} is listed twice"),
        }
    }
}

impl std::error::Error for MaglevError {}

/// A backend's walk along its preference list.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    /// Next candidate slot.
    pos: u32,
    /// Step.
    skip: u32,
}

impl Cursor {
    /// Claims the first free slot from `pos` on, marks it taken and returns
    /// it. There must be a free slot (the list visits every slot, so the
    /// walk then ends).
    #[inline(always)]
    fn claim(&mut self, taken: &mut [u64], m: u32) -> u32 {
        // In u64, p + skip < 2m cannot overflow. Whether a step wraps is a
        // coin flip (skip / m), so a branch would mispredict on every other
        // probe; LLVM turns a plain select back into that branch here, hence
        // the arithmetic: t - m is negative (as i64; t < 2^33) iff no wrap.
        // Two candidates per iteration halve the p -> p' dependency chain.
        #[inline(always)]
        fn wrap(t: u64, m: u64) -> u64 {
            let d = t.wrapping_sub(m);
            d.wrapping_add(m & (((d as i64) >> 63) as u64))
        }
        let (m, skip) = (u64::from(m), u64::from(self.skip));
        let skip2 = wrap(2 * skip, m);
        let mut p = u64::from(self.pos);
        loop {
            let p1 = wrap(p + skip, m);
            let p2 = wrap(p + skip2, m);
            let (w, bit) = ((p >> 6) as usize, 1u64 << (p & 63));
            if taken[w] & bit == 0 {
                taken[w] |= bit;
                self.pos = p1 as u32;
                return p as u32;
            }
            let (w, bit) = ((p1 >> 6) as usize, 1u64 << (p1 & 63));
            if taken[w] & bit == 0 {
                taken[w] |= bit;
                self.pos = p2 as u32;
                return p1 as u32;
            }
            p = p2;
        }
    }
}

/// Backends with the same quota: they take their turns in the same rounds.
#[derive(Debug, Clone, Copy, Default)]
struct Group {
    /// Members: `by_quota[start..end]`.
    start: u32,
    end: u32,
    /// Their quota (> 0).
    quota: u32,
    /// Round of the next turn: floor(k * R / quota) for the k-th turn.
    next: u32,
    /// Bresenham state: next += whole (+1 when acc reaches quota).
    whole: u32,
    frac: u32,
    acc: u32,
}

/// Working memory of [`build_into`], kept between builds so a rebuild of a
/// ring of the same shape allocates nothing.
#[derive(Debug, Default)]
pub struct MaglevScratch {
    /// rank -> index in the caller's slice.
    ranked: Vec<u32>,
    /// rank -> number of slots.
    quota: Vec<u32>,
    /// (remainder, rank), for the largest-remainder step.
    remainder: Vec<(u64, u32)>,
    /// rank -> walk state.
    cursor: Vec<Cursor>,
    /// Ranks by (quota descending, rank): the turn order within a round.
    by_quota: Vec<u32>,
    /// Runs of equal quota in `by_quota`.
    groups: Vec<Group>,
    /// Groups by (next round, index).
    due: BinaryHeap<Reverse<(u32, u32)>>,
    /// Occupancy bitmap of the table.
    taken: Vec<u64>,
    /// The free slots, once few are left (see [`Fill::claim_endgame`]).
    free: Vec<u32>,
    /// rank -> skip^-1 mod m (0 until needed).
    inverse: Vec<u32>,
}

impl MaglevScratch {
    /// Empty scratch space.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Builds a ring of size `m`; entries are indices into `backends`.
///
/// See the module documentation for the algorithm. Errors instead of
/// panicking on a bad `m`, an empty set or duplicate ids.
pub fn build(backends: &[MaglevBackend], m: u32) -> Result<Vec<u32>, MaglevError> {
    let mut table = Vec::new();
    build_into(&mut table, &mut MaglevScratch::new(), backends, m)?;
    Ok(table)
}

/// [`build`] into caller-owned memory: `table` is overwritten (length `m`),
/// `scratch` is reused. On error `table` is left empty.
pub fn build_into(
    table: &mut Vec<u32>,
    scratch: &mut MaglevScratch,
    backends: &[MaglevBackend],
    m: u32,
) -> Result<(), MaglevError> {
    build_impl(table, scratch, backends, m, 8, endgame_at(m))
}

/// How many free slots are left when walking a permutation to the next free
/// slot (m / free probes on average, ~4.5 cycles each) starts to cost more
/// than scoring every free slot (one multiplication modulo m, ~10 cycles):
/// free² = 0.45 m. Over half of all probes are spent on the last few hundred
/// slots of a 65537-slot ring.
fn endgame_at(m: u32) -> u32 {
    (m / 20 * 9).isqrt()
}

/// [`build_into`]; `scan_factor` picks the turn-order strategy and
/// `endgame` the number of free slots from which claims score the free slots
/// instead of walking (tests force each one; the result depends on neither).
fn build_impl(
    table: &mut Vec<u32>,
    scratch: &mut MaglevScratch,
    backends: &[MaglevBackend],
    m: u32,
    scan_factor: u64,
    endgame: u32,
) -> Result<(), MaglevError> {
    table.clear();
    if !is_prime(m) {
        return Err(MaglevError::NotPrime { m });
    }
    let s = scratch;
    let n = rank_active(s, backends, m)?;
    assign_quotas(s, backends, m);
    let rounds = turn_groups(s, n);

    // 4. Permutations.
    s.cursor.clear();
    s.cursor.extend(s.ranked.iter().map(|&i| {
        let (pos, skip) = backends[i as usize].id.offset_skip(m);
        Cursor { pos, skip }
    }));

    // 5. Fill, round by round: a group with quota q takes its k-th turn in
    //    round floor(k * R / q) (its last in round < R, so every group gets
    //    exactly q turns, M in all); on its turn each member claims its next
    //    free slot. A free slot exists on every turn since the turns number M.
    s.taken.clear();
    s.taken.resize((m as usize).div_ceil(64), 0);
    table.resize(m as usize, 0);
    s.free.clear();
    s.inverse.clear();
    s.inverse.resize(n, 0);
    let mut fill = Fill {
        members: &s.by_quota,
        cursor: &mut s.cursor,
        taken: &mut s.taken,
        ranked: &s.ranked,
        table,
        m,
        free_left: m,
        endgame,
        free: &mut s.free,
        inverse: &mut s.inverse,
        modulus: Modulus::new(m),
    };
    if m <= endgame {
        fill.enter_endgame();
    }
    // Turns go in (round, group index) order. Scanning every group each
    // round costs R·G; a min-heap of (next round, group) costs log G per
    // group turn (T of them). Same order either way: take the cheaper.
    let group_turns: u64 = s.groups.iter().map(|g| u64::from(g.quota)).sum();
    let scan = u64::from(rounds) * s.groups.len() as u64;
    if scan <= scan_factor.saturating_mul(group_turns) {
        for round in 0..rounds {
            for g in s.groups.iter_mut().filter(|g| g.next == round) {
                fill.turn(g);
            }
        }
    } else {
        s.due.clear();
        s.due
            .extend((0..s.groups.len() as u32).map(|g| Reverse((0u32, g))));
        while let Some(mut top) = s.due.peek_mut() {
            let Reverse((_, gi)) = *top;
            let g = &mut s.groups[gi as usize];
            fill.turn(g);
            if g.next < rounds {
                *top = Reverse((g.next, gi));
            } else {
                PeekMut::pop(top);
            }
        }
    }
    Ok(())
}

/// Step 1 of [`build_impl`]: the active backends (weight above 0) into
/// `s.ranked`, ranked by identity. Returns how many.
fn rank_active(
    s: &mut MaglevScratch,
    backends: &[MaglevBackend],
    m: u32,
) -> Result<usize, MaglevError> {
    s.ranked.clear();
    let Ok(len) = u32::try_from(backends.len()) else {
        return Err(MaglevError::TooManyBackends {
            backends: backends.iter().filter(|b| b.weight > 0).count(),
            m,
        });
    };
    s.ranked
        .extend((0..len).filter(|&i| backends[i as usize].weight > 0));
    let n = s.ranked.len();
    if n == 0 {
        return Err(MaglevError::NoBackends);
    }
    if n > m as usize {
        return Err(MaglevError::TooManyBackends { backends: n, m });
    }
    s.ranked
        .sort_unstable_by(|&a, &b| backends[a as usize].id.cmp(&backends[b as usize].id));
    if let Some(w) = s
        .ranked
        .windows(2)
        .find(|w| backends[w[0] as usize].id == backends[w[1] as usize].id)
    {
        return Err(MaglevError::DuplicateBackend {
            id: backends[w[0] as usize].id,
        });
    }
    Ok(n)
}

/// Step 2 of [`build_impl`]: each ranked backend's quota of the `m` slots,
/// the floor of its exact share, remainders to the largest ones.
fn assign_quotas(s: &mut MaglevScratch, backends: &[MaglevBackend], m: u32) {
    let total: u64 = s
        .ranked
        .iter()
        .map(|&i| u64::from(backends[i as usize].weight))
        .sum();
    let m64 = u64::from(m);
    s.quota.clear();
    s.remainder.clear();
    let mut assigned: u64 = 0;
    for (rank, &i) in s.ranked.iter().enumerate() {
        // weight < 2^32 and m < 2^32: no overflow.
        let p = u64::from(backends[i as usize].weight) * m64;
        let q = p / total;
        assigned += q;
        s.quota.push(q as u32);
        s.remainder.push((p % total, rank as u32));
    }
    // Fewer than n slots are left over, and at least that many backends have a
    // non-zero remainder, so every backend ends at floor or ceil.
    let left = (m64 - assigned) as usize;
    if left > 0 {
        s.remainder
            .sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, rank) in &s.remainder[..left] {
            s.quota[rank as usize] += 1;
        }
    }
}

/// Step 3 of [`build_impl`]: the turn order, ranks by (quota desc, rank)
/// in groups of equal quota, and each group's turn spacing. Returns the
/// number of rounds R.
fn turn_groups(s: &mut MaglevScratch, n: usize) -> u32 {
    s.by_quota.clear();
    s.by_quota.extend(0..n as u32);
    let quota = &s.quota;
    s.by_quota
        .sort_unstable_by(|&a, &b| quota[b as usize].cmp(&quota[a as usize]).then(a.cmp(&b)));
    s.groups.clear();
    let mut i = 0;
    while i < n {
        let q = s.quota[s.by_quota[i] as usize];
        let start = i;
        while i < n && s.quota[s.by_quota[i] as usize] == q {
            i += 1;
        }
        if q > 0 {
            s.groups.push(Group {
                start: start as u32,
                end: i as u32,
                quota: q,
                ..Group::default()
            });
        }
    }
    // R = the largest quota: that group takes a turn every round.
    let rounds = s.groups.first().map_or(0, |g| g.quota);
    for g in &mut s.groups {
        g.whole = rounds / g.quota;
        g.frac = rounds % g.quota;
    }
    rounds
}

/// What a group's turn touches.
struct Fill<'a> {
    members: &'a [u32],
    cursor: &'a mut [Cursor],
    taken: &'a mut [u64],
    ranked: &'a [u32],
    table: &'a mut [u32],
    m: u32,
    /// Slots not claimed yet.
    free_left: u32,
    /// At this many free slots, claims switch to scoring `free`.
    endgame: u32,
    /// The free slots, in the endgame (empty before).
    free: &'a mut Vec<u32>,
    inverse: &'a mut [u32],
    /// For reductions modulo m.
    modulus: Modulus,
}

impl Fill<'_> {
    /// Every member of `g` claims its next free slot; `g` moves on to the
    /// round of its next turn (exactly R after its q-th).
    #[inline(always)]
    fn turn(&mut self, g: &mut Group) {
        for &rank in &self.members[g.start as usize..g.end as usize] {
            let slot = if self.free_left > self.endgame {
                let slot = self.cursor[rank as usize].claim(self.taken, self.m);
                self.free_left -= 1;
                if self.free_left == self.endgame {
                    self.enter_endgame();
                }
                slot
            } else {
                self.free_left -= 1;
                self.claim_endgame(rank as usize)
            };
            self.table[slot as usize] = self.ranked[rank as usize];
        }
        g.next += g.whole;
        g.acc += g.frac;
        if g.acc >= g.quota {
            g.acc -= g.quota;
            g.next += 1;
        }
    }
}

impl Fill<'_> {
    /// Lists the free slots.
    #[cold]
    fn enter_endgame(&mut self) {
        self.free.clear();
        for (w, &word) in self.taken.iter().enumerate() {
            let mut open = !word;
            while open != 0 {
                let slot = w as u32 * 64 + open.trailing_zeros();
                if slot >= self.m {
                    break;
                }
                self.free.push(slot);
                open &= open - 1;
            }
        }
    }

    /// The claim [`Cursor::claim`] would make, found from the free slots:
    /// slot `f` comes `(f - pos) / skip (mod m)` steps after `pos` on the
    /// walk, and every slot the walk passed is taken, so the walk stops at
    /// the free slot with the fewest steps.
    fn claim_endgame(&mut self, rank: usize) -> u32 {
        let m = u64::from(self.m);
        let c = self.cursor[rank];
        if self.inverse[rank] == 0 {
            // m is prime and 0 < skip < m: Fermat's inverse.
            self.inverse[rank] = pow_mod(u64::from(c.skip), m - 2, m) as u32;
        }
        let inverse = u64::from(self.inverse[rank]);
        let pos = u64::from(c.pos);
        let (mut best, mut best_steps) = (0, u64::MAX);
        for (i, &f) in self.free.iter().enumerate() {
            let f = u64::from(f);
            let ahead = if f >= pos { f - pos } else { f + m - pos };
            let steps = self.modulus.reduce(ahead * inverse);
            if steps < best_steps {
                (best, best_steps) = (i, steps);
            }
        }
        // Every turn has a free slot (the turns number m).
        let slot = self.free.swap_remove(best);
        self.taken[slot as usize / 64] |= 1 << (slot % 64);
        let next = u64::from(slot) + u64::from(c.skip);
        self.cursor[rank].pos = if next >= m { next - m } else { next } as u32;
        slot
    }
}

/// Whether `n` is prime (deterministic Miller–Rabin, exact for every `u32`).
/// The config validator uses it for ring sizes.
pub const fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    const SMALL: [u32; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    let mut i = 0;
    while i < SMALL.len() {
        if n == SMALL[i] {
            return true;
        }
        let rem = n % SMALL[i];
        if rem == 0 {
            return false;
        }
        i += 1;
    }
    if n < 41 * 41 {
        return true;
    }
    // Bases 2, 7, 61 decide every n < 4_759_123_141 > u32::MAX (Jaeschke).
    let n64 = n as u64;
    // n - 1 = d * 2^s with d odd.
    let s = (n64 - 1).trailing_zeros();
    let d = (n64 - 1) >> s;
    let bases = [2u64, 7, 61];
    let mut b = 0;
    'witness: while b < bases.len() {
        let a = bases[b] % n64;
        b += 1;
        if a == 0 {
            continue;
        }
        let mut x = pow_mod(a, d, n64);
        if x == 1 || x == n64 - 1 {
            continue;
        }
        let mut r = 1;
        while r < s {
            x = x * x % n64;
            if x == n64 - 1 {
                continue 'witness;
            }
            r += 1;
        }
        return false;
    }
    true
}

/// `base^exp mod m` for m < 2^32 (products fit u64).
const fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut acc = 1u64;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc * base % m;
        }
        base = base * base % m;
        exp >>= 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sieve(limit: usize) -> Vec<bool> {
        let mut p = vec![true; limit];
        p[0] = false;
        p[1] = false;
        let mut i = 2;
        while i * i < limit {
            if p[i] {
                let mut j = i * i;
                while j < limit {
                    p[j] = false;
                    j += i;
                }
            }
            i += 1;
        }
        p
    }

    #[test]
    fn is_prime_matches_sieve() {
        let p = sieve(200_000);
        for (n, &want) in p.iter().enumerate() {
            assert_eq!(is_prime(n as u32), want, "{n}");
        }
    }

    /// Hashes that stress a reduction: around multiples of `m`, the
    /// extremes of a `u64`, and a spread of xorshift values.
    fn hard_hashes(m: u32, x: &mut u64, spread: usize) -> Vec<u64> {
        let m = u64::from(m);
        let mut v = vec![
            0,
            1,
            m - 1,
            m,
            m + 1,
            2 * m - 1,
            2 * m,
            u64::MAX,
            u64::MAX - 1,
        ];
        let top = u64::MAX / m;
        for q in [1, 2, 3, top / 2, top - 1, top] {
            for d in [0, 1, m - 1] {
                v.push((q * m).saturating_add(d));
                v.push((q * m).saturating_sub(1 + d));
            }
        }
        for _ in 0..spread {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            v.push(*x);
            v.push(*x >> (*x % 64)); // small hashes too
        }
        v
    }

    /// The multiply-shift pick is the modulo pick, bit for bit, for every
    /// ring size a config can set (primes, the default, the largest) and
    /// sizes that are not prime: every appliance must pick alike.
    #[test]
    fn modulus_slot_is_the_modulo_slot() {
        let max = crate::config::MAX_MAGLEV_TABLE_SIZE;
        let mut sizes: Vec<u32> = (1..=2_000).collect();
        sizes.extend([DEFAULT_M, 65_519, 131_071, 655_373, 1_000_003, 16_777_213]);
        sizes.extend([max, max - 1, max + 1, 1 << 31, u32::MAX, u32::MAX - 4]);
        // Every prime between 2,000 and 200,000, and around the maximum.
        let p = sieve(200_000);
        sizes.extend((2_000..200_000u32).filter(|&n| p[n as usize]));
        sizes.extend((max - 2_000..max + 2_000).filter(|&n| is_prime(n)));
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for &m in &sizes {
            let md = Modulus::new(m);
            assert_eq!(md.m(), m);
            let spread = if m == DEFAULT_M { 1_000_000 } else { 40 };
            for h in hard_hashes(m, &mut x, spread) {
                assert_eq!(md.slot(h), slot(h, m), "hash {h:#x}, m {m}");
            }
        }
    }

    #[test]
    fn modulus_of_an_empty_ring_does_not_panic() {
        let md = Modulus::new(0);
        assert_eq!(md.slot(7), 7);
        assert_eq!(md.slot(u64::MAX), u64::MAX as usize);
    }

    #[test]
    fn is_prime_large_and_pseudoprimes() {
        for n in [65_537u32, 655_373, 4_294_967_291, 2_147_483_647, 1_000_003] {
            assert!(is_prime(n), "{n}");
        }
        // Carmichael numbers, strong pseudoprimes to several bases, and
        // composites near u32::MAX.
        for n in [
            561u32,
            1105,
            2047,
            3_215_031_751,
            25_326_001,
            4_294_967_295,
            4_294_967_293,
            65_535,
            65_539 * 3,
            46_337 * 46_337,
        ] {
            assert!(!is_prime(n), "{n}");
        }
    }

    #[test]
    fn backend_id_round_trip() {
        for s in [
            "10.0.0.1:80",
            "[2001:db8::1]:443",
            "[::1]:0",
            "0.0.0.0:65535",
        ] {
            let sa: SocketAddr = s.parse().unwrap();
            let id = BackendId::from(sa);
            assert_eq!(id.socket_addr(), sa);
            assert_eq!(id.to_string(), s);
        }
        assert_eq!(
            BackendId::v4([10, 0, 0, 1], 80).as_bytes(),
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1, 0, 80]
        );
    }

    #[test]
    fn errors() {
        let b = |a: u8, w| MaglevBackend {
            id: BackendId::v4([10, 0, 0, a], 80),
            weight: w,
        };
        assert_eq!(
            build(&[b(1, 1)], 65_536),
            Err(MaglevError::NotPrime { m: 65_536 })
        );
        assert_eq!(build(&[b(1, 1)], 1), Err(MaglevError::NotPrime { m: 1 }));
        assert_eq!(build(&[], 7), Err(MaglevError::NoBackends));
        assert_eq!(build(&[b(1, 0), b(2, 0)], 7), Err(MaglevError::NoBackends));
        let many: Vec<_> = (1..=8).map(|a| b(a, 1)).collect();
        assert_eq!(
            build(&many, 7),
            Err(MaglevError::TooManyBackends { backends: 8, m: 7 })
        );
        assert_eq!(
            build(&[b(1, 1), b(2, 3), b(1, 2)], 7),
            Err(MaglevError::DuplicateBackend { id: b(1, 1).id })
        );
        // A duplicate with weight 0 is not in the ring, so not a conflict.
        assert!(build(&[b(1, 1), b(1, 0)], 7).is_ok());
    }

    #[test]
    fn tiny_rings() {
        let one = [MaglevBackend {
            id: BackendId::v4([10, 0, 0, 1], 80),
            weight: 5,
        }];
        assert_eq!(build(&one, 2).unwrap(), vec![0, 0]);
        assert_eq!(build(&one, 3).unwrap(), vec![0, 0, 0]);
        let two = [
            MaglevBackend {
                id: BackendId::v4([10, 0, 0, 2], 80),
                weight: 1,
            },
            one[0],
        ];
        // Shares 1/3 and 5/3 of two slots: floor/ceil gives 0 and 2.
        assert_eq!(build(&two, 2).unwrap(), vec![1, 1]);
        let even = [
            MaglevBackend {
                weight: 5,
                ..two[0]
            },
            one[0],
        ];
        let mut t = build(&even, 2).unwrap();
        t.sort();
        assert_eq!(t, vec![0, 1]);
    }

    #[test]
    fn scan_and_heap_orders_agree() {
        let mut x: u64 = 0x853c_49e6_748f_ea9b;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut scratch = MaglevScratch::new();
        for case in 0..40u32 {
            let n = 1 + (next() % 60) as u32;
            let backends: Vec<_> = (0..n)
                .map(|i| MaglevBackend {
                    id: BackendId::v4([10, 2, (i >> 8) as u8, i as u8], 80),
                    weight: match case % 4 {
                        0 => 1,
                        1 => 1 + (next() % 10) as u32,
                        2 => 1 + (next() % 1000) as u32,
                        _ => {
                            if i == 0 {
                                5000
                            } else {
                                1 + i
                            }
                        }
                    },
                })
                .collect();
            for m in [251, 4099] {
                build_impl(&mut a, &mut scratch, &backends, m, u64::MAX, 0).unwrap();
                build_impl(&mut b, &mut scratch, &backends, m, 0, 0).unwrap();
                assert_eq!(a, b, "case {case} m {m}");
                // Claims by scoring the free slots, from the start, from the
                // default point, or never: the same ring.
                for endgame in [m, endgame_at(m), 1] {
                    build_impl(&mut b, &mut scratch, &backends, m, 8, endgame).unwrap();
                    assert_eq!(a, b, "case {case} m {m} endgame {endgame}");
                }
            }
        }
    }

    #[test]
    fn build_into_reuses_memory() {
        let backends: Vec<_> = (0..50u16)
            .map(|i| MaglevBackend {
                id: BackendId::v4([10, 1, (i >> 8) as u8, i as u8], 443),
                weight: 1 + u32::from(i % 3),
            })
            .collect();
        let mut table = Vec::new();
        let mut scratch = MaglevScratch::new();
        build_into(&mut table, &mut scratch, &backends, 4099).unwrap();
        let first = table.clone();
        let ptr = table.as_ptr();
        build_into(&mut table, &mut scratch, &backends, 4099).unwrap();
        assert_eq!(table, first);
        assert_eq!(table.as_ptr(), ptr);
        assert_eq!(first, build(&backends, 4099).unwrap());
    }
}
