//! Admission of new flows per VIP (`[vip.limits]`, docs/config.md): allow and
//! deny lists (longest prefix wins), a token bucket per source prefix, a
//! token bucket per VIP, and open-connection caps per VIP and per backend.
//!
//! Everything a packet touches is built when a table generation is adopted
//! (between bursts) and is fixed in size after that: the lists are a sorted
//! array of address intervals searched in O(log n), the per-source table is
//! a preallocated set-associative array, and the buckets are plain
//! integers. The fast path allocates nothing, takes no lock and makes no
//! system call.
//!
//! The open-connection counts are the only state shared between workers:
//! one atomic counter per limited VIP or backend in [`ConnCounts`], taken
//! with a `fetch_add` when a flow is admitted and given back when the flow
//! closes (both FINs, or a RST) or its entry goes. VIPs and backends without
//! a cap never touch it. A cap counts the connections admitted while it was
//! set: after an apply that introduces one, the connections already open
//! are not counted.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use conf::counters::Counter;
use conf::tables::{LimitsRecord, PrefixRecord};

use super::flow::{FLOW_COUNTED, FLOW_COUNTED_BACKEND, FLOW_COUNTED_VIP};
use crate::conntrack::{FlowKey, State};
use crate::token_bucket::TokenBucket;

/// No counter.
pub const NO_COUNTER: u32 = u32::MAX;

/// What the lists say about a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Rule {
    /// No prefix matches.
    None = 0,
    Allow = 1,
    Deny = 2,
}

/// A source address as a number: IPv4 mapped into IPv6 (`::ffff:a.b.c.d`),
/// as [`FlowKey`] holds it.
#[inline(always)]
fn addr_num(a: &[u8; 16]) -> u128 {
    u128::from_be_bytes(*a)
}

/// The allow and deny lists of a VIP as a longest-prefix-match table: the
/// address space cut into intervals, each with the rule of the longest
/// prefix that covers it. Built once per adoption (O(n log n)); a lookup is
/// a binary search over `starts`.
#[derive(Clone, Debug, Default)]
pub struct Acl {
    /// Start of each interval, ascending; the first is 0.
    starts: Box<[u128]>,
    rules: Box<[Rule]>,
    /// An allow list exists: a source no prefix matches is refused.
    default_deny: bool,
}

impl Acl {
    /// The table of `prefixes` (validated: network addresses, lengths in range).
    pub fn new(prefixes: &[PrefixRecord]) -> Acl {
        if prefixes.is_empty() {
            return Acl::default();
        }
        // (first, last, rule), the widest first among equal starts.
        let mut ranges: Vec<(u128, u128, Rule)> = prefixes
            .iter()
            .map(|p| {
                let (base, len) = if p.family == 4 {
                    let mut m = [0u8; 16];
                    m[10] = 0xff;
                    m[11] = 0xff;
                    m[12..].copy_from_slice(&p.addr[..4]);
                    (u128::from_be_bytes(m), 96 + u32::from(p.len))
                } else {
                    (u128::from_be_bytes(p.addr), u32::from(p.len))
                };
                let host = if len >= 128 {
                    0
                } else {
                    u128::MAX >> len.min(127)
                };
                let first = base & !host;
                let rule = if p.deny == 1 { Rule::Deny } else { Rule::Allow };
                (first, first | host, rule)
            })
            .collect();
        ranges.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut starts: Vec<u128> = vec![0];
        let mut rules: Vec<Rule> = vec![Rule::None];
        let mut put = |at: u128, rule: Rule| {
            if starts.last() == Some(&at) {
                let n = rules.len() - 1;
                rules[n] = rule;
                if n > 0 && rules[n - 1] == rule {
                    starts.pop();
                    rules.pop();
                }
            } else if rules.last() != Some(&rule) {
                starts.push(at);
                rules.push(rule);
            }
        };
        // Prefixes nest or are disjoint: a stack of the open ones.
        let mut open: Vec<(u128, Rule)> = Vec::new();
        let close = |open: &mut Vec<(u128, Rule)>,
                     before: Option<u128>,
                     put: &mut dyn FnMut(u128, Rule)| {
            while let Some(&(last, _)) = open.last() {
                if before.is_some_and(|b| last >= b) {
                    break;
                }
                open.pop();
                if let Some(next) = last.checked_add(1) {
                    put(next, open.last().map_or(Rule::None, |o| o.1));
                }
            }
        };
        for (first, last, rule) in ranges {
            close(&mut open, Some(first), &mut put);
            put(first, rule);
            open.push((last, rule));
        }
        close(&mut open, None, &mut put);
        Acl {
            starts: starts.into_boxed_slice(),
            rules: rules.into_boxed_slice(),
            default_deny: prefixes.iter().any(|p| p.deny == 0),
        }
    }

    /// Whether the lists let `src` open a flow.
    #[inline]
    pub fn allows(&self, src: &[u8; 16]) -> bool {
        if self.starts.is_empty() {
            return true;
        }
        let a = addr_num(src);
        let i = self.starts.partition_point(|&s| s <= a).saturating_sub(1);
        match self.rules.get(i) {
            Some(Rule::Deny) => false,
            Some(Rule::Allow) => true,
            _ => !self.default_deny,
        }
    }
}

/// Ways of a set of the per-source table.
const WAYS: usize = 4;

#[derive(Clone, Copy, Debug, Default)]
struct SourceSlot {
    /// The source prefix (host bits cleared); meaningful when `used`.
    prefix: u128,
    bucket: TokenBucket,
    used: bool,
}

/// Token buckets per source prefix: a fixed, preallocated set-associative
/// table (4 ways). A prefix takes a free way of its set, or one whose
/// bucket has refilled completely (it would start full anyway). When every
/// way holds a prefix that is still being limited, the newcomer is charged
/// to the table's one overflow bucket (same rate and depth), counted as
/// `source_table_full`: a flood of many prefixes is limited as one source
/// and cannot push the ones being limited out.
#[derive(Clone, Debug, Default)]
pub struct SourceTable {
    slots: Box<[SourceSlot]>,
    sets_mask: usize,
    overflow: TokenBucket,
    /// Keys the set index, so which prefixes share a set is not known
    /// outside.
    seed: u64,
    mask_v4: u128,
    mask_v6: u128,
}

/// The outcome of charging a source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceVerdict {
    Pass,
    /// Passed on the overflow bucket.
    PassOverflow,
    Limited,
    /// Refused by the overflow bucket.
    LimitedOverflow,
}

fn prefix_mask(len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len.min(128))
    }
}

impl SourceTable {
    /// `size` slots (a power of two, at least [`WAYS`]) for prefixes of
    /// `v4`/`v6` bits.
    pub fn new(size: u32, v4: u8, v6: u8, seed: u64) -> SourceTable {
        let size = (size as usize).max(WAYS).next_power_of_two();
        SourceTable {
            slots: vec![SourceSlot::default(); size].into_boxed_slice(),
            sets_mask: size / WAYS - 1,
            overflow: TokenBucket::default(),
            seed,
            mask_v4: prefix_mask(96 + u32::from(v4)),
            mask_v6: prefix_mask(u32::from(v6)),
        }
    }

    /// Charges one new flow of `src` (`v6`: an IPv6 source).
    #[inline]
    pub fn charge(
        &mut self,
        src: &[u8; 16],
        v6: bool,
        now_ms: u64,
        rate: u32,
        burst: u32,
    ) -> SourceVerdict {
        let prefix = addr_num(src) & if v6 { self.mask_v6 } else { self.mask_v4 };
        let h = ((prefix as u64) ^ ((prefix >> 64) as u64).rotate_left(31) ^ self.seed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let set = ((h >> 32) as usize & self.sets_mask) * WAYS;
        let Some(ways) = self.slots.get_mut(set..set + WAYS) else {
            return SourceVerdict::Pass;
        };
        let mut spare = None;
        for (i, w) in ways.iter().enumerate() {
            if w.used && w.prefix == prefix {
                let b = &mut ways[i].bucket;
                return if b.take(now_ms, rate, burst) {
                    SourceVerdict::Pass
                } else {
                    SourceVerdict::Limited
                };
            }
            if spare.is_none() && (!w.used || w.bucket.idle(now_ms, rate, burst)) {
                spare = Some(i);
            }
        }
        match spare {
            Some(i) => {
                let mut bucket = TokenBucket::full(burst, now_ms);
                let ok = bucket.take(now_ms, rate, burst);
                ways[i] = SourceSlot {
                    prefix,
                    bucket,
                    used: true,
                };
                if ok {
                    SourceVerdict::Pass
                } else {
                    SourceVerdict::Limited
                }
            }
            None if self.overflow.take(now_ms, rate, burst) => SourceVerdict::PassOverflow,
            None => SourceVerdict::LimitedOverflow,
        }
    }
}

/// Open-connection counts shared by every worker of the process: a fixed
/// open-addressing table from a key (a VIP's statistics key or a backend's
/// id, tagged by kind) to an atomic count. Slots are claimed when a worker
/// adopts a VIP with a cap (never on the fast path) and never freed, so a
/// VIP or backend keeps its count across generations.
#[derive(Debug)]
pub struct ConnCounts {
    keys: Box<[AtomicU64]>,
    counts: Box<[AtomicI64]>,
}

/// Slots of a [`ConnCounts`] of the default size.
pub const CONN_COUNT_SLOTS: usize = 1 << 16;

impl Default for ConnCounts {
    fn default() -> Self {
        ConnCounts::new(CONN_COUNT_SLOTS)
    }
}

/// Kinds of counted things, the key's high half.
const KIND_VIP: u64 = 1 << 32;
const KIND_BACKEND: u64 = 2 << 32;

impl ConnCounts {
    /// A table of `slots` counters (a power of two).
    pub fn new(slots: usize) -> ConnCounts {
        let n = slots.max(2).next_power_of_two();
        ConnCounts {
            keys: (0..n).map(|_| AtomicU64::new(0)).collect(),
            counts: (0..n).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    /// The slot of `key` (not 0), claimed if new; [`NO_COUNTER`] when the
    /// table is full.
    fn claim(&self, key: u64) -> u32 {
        let n = self.keys.len();
        let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (n - 1);
        for i in 0..n {
            let s = (start + i) & (n - 1);
            match self.keys[s].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return s as u32,
                Err(k) if k == key => return s as u32,
                Err(_) => {}
            }
        }
        NO_COUNTER
    }

    /// The slot of a VIP's count (by its statistics key).
    pub fn vip(&self, stat_key: u32) -> u32 {
        self.claim(KIND_VIP | u64::from(stat_key))
    }

    /// The slot of a backend's count (by its id).
    pub fn backend(&self, id: u32) -> u32 {
        self.claim(KIND_BACKEND | u64::from(id))
    }

    /// Takes one of `slot`'s `max` places; false (nothing taken) when all
    /// are in use.
    #[inline]
    pub fn take(&self, slot: u32, max: u32) -> bool {
        let Some(c) = self.counts.get(slot as usize) else {
            return true;
        };
        let before = c.fetch_add(1, Ordering::Relaxed);
        if before >= i64::from(max) {
            c.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Gives one place of `slot` back.
    #[inline]
    pub fn give(&self, slot: u32) {
        if let Some(c) = self.counts.get(slot as usize) {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Counts one more at `slot`, past its cap if need be (a connection
    /// that is open already, adopted from a previous process).
    pub fn add(&self, slot: u32) {
        if let Some(c) = self.counts.get(slot as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Open connections counted at `slot` (tests, inspection).
    pub fn open(&self, slot: u32) -> i64 {
        self.counts
            .get(slot as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// One VIP's admission state on one worker.
#[derive(Clone, Debug, Default)]
pub struct VipAdmit {
    pub limits: LimitsRecord,
    pub acl: Acl,
    /// Present when the VIP has a per-source rate.
    sources: Option<SourceTable>,
    bucket: TokenBucket,
    /// The VIP's count in [`ConnCounts`] ([`NO_COUNTER`]: no cap).
    pub vip_counter: u32,
    /// Per backend (by index): its cap and its count ([`NO_COUNTER`]: none).
    pub backends: Box<[(u32, u32)]>,
    /// Anything to check at all.
    pub active: bool,
}

impl VipAdmit {
    /// The state for `limits` and `prefixes`, with backend caps
    /// `backend_max` (counters unset: [`Admission::bind`] sets them).
    pub fn new(
        limits: LimitsRecord,
        prefixes: &[PrefixRecord],
        backend_max: impl Iterator<Item = u32>,
        seed: u64,
        now_ms: u64,
    ) -> VipAdmit {
        let sources = (limits.source_per_second > 0).then(|| {
            SourceTable::new(
                limits.source_table,
                limits.source_prefix_v4,
                limits.source_prefix_v6,
                seed,
            )
        });
        let backends: Box<[(u32, u32)]> = backend_max.map(|m| (m, NO_COUNTER)).collect();
        let active = limits.max_connections > 0
            || limits.new_per_second > 0
            || sources.is_some()
            || !prefixes.is_empty()
            || backends.iter().any(|&(m, _)| m > 0);
        VipAdmit {
            limits,
            acl: Acl::new(prefixes),
            sources,
            bucket: TokenBucket::full(limits.new_burst, now_ms),
            vip_counter: NO_COUNTER,
            backends,
            active,
        }
    }

    /// The checks before a backend is picked: lists, the source's bucket,
    /// the VIP's bucket, the VIP's cap (looked at, not taken).
    #[inline]
    pub fn before_pick(
        &mut self,
        key: &FlowKey,
        now_ms: u64,
        counts: &ConnCounts,
        counters: &mut crate::counters::Counters,
    ) -> Result<(), Counter> {
        if !self.acl.allows(&key.src) {
            return Err(Counter::DropVipAclDenied);
        }
        let l = self.limits;
        if let Some(t) = self.sources.as_mut() {
            let v = t.charge(
                &key.src,
                key.v6,
                now_ms,
                l.source_per_second,
                l.source_burst,
            );
            if matches!(
                v,
                SourceVerdict::PassOverflow | SourceVerdict::LimitedOverflow
            ) {
                counters.inc(Counter::SourceTableFull);
            }
            if matches!(v, SourceVerdict::Limited | SourceVerdict::LimitedOverflow) {
                return Err(if key.proto == crate::wire::ip_proto::UDP {
                    Counter::DropUdpSourceRateLimited
                } else {
                    Counter::DropSourceRateLimited
                });
            }
        }
        if l.new_per_second > 0 && !self.bucket.take(now_ms, l.new_per_second, l.new_burst) {
            return Err(Counter::DropVipRateLimited);
        }
        if l.max_connections > 0 && counts.open(self.vip_counter) >= i64::from(l.max_connections) {
            return Err(Counter::DropVipMaxConnections);
        }
        Ok(())
    }

    /// Takes the places of a flow to backend `bi`: the VIP's and the
    /// backend's, where capped. The bits of [`FlowRec::bits`] it holds.
    #[inline]
    pub fn take(&self, bi: u32, counts: &ConnCounts) -> Result<u8, Counter> {
        let mut held = 0;
        let l = self.limits;
        if l.max_connections > 0 && self.vip_counter != NO_COUNTER {
            if !counts.take(self.vip_counter, l.max_connections) {
                return Err(Counter::DropVipMaxConnections);
            }
            held |= FLOW_COUNTED_VIP;
        }
        if let Some(&(max, slot)) = self.backends.get(bi as usize) {
            if max > 0 && slot != NO_COUNTER {
                if !counts.take(slot, max) {
                    if held != 0 {
                        counts.give(self.vip_counter);
                    }
                    return Err(Counter::DropBackendMaxConnections);
                }
                held |= FLOW_COUNTED_BACKEND;
            }
        }
        Ok(held)
    }
}

impl VipAdmit {
    /// Counts an open connection to backend `bi` adopted from a previous
    /// process where the VIP or the backend is capped, even past the cap;
    /// the bits of [`FlowRec::bits`] it then holds.
    pub fn recount(&self, bi: u32, counts: &ConnCounts) -> u8 {
        let mut held = 0;
        if self.limits.max_connections > 0 && self.vip_counter != NO_COUNTER {
            counts.add(self.vip_counter);
            held |= FLOW_COUNTED_VIP;
        }
        if let Some(&(max, slot)) = self.backends.get(bi as usize) {
            if max > 0 && slot != NO_COUNTER {
                counts.add(slot);
                held |= FLOW_COUNTED_BACKEND;
            }
        }
        held
    }
}

/// A worker's side of the open-connection counts: the shared table, and
/// which count a flow's statistics slots stand for (a flow record names
/// its VIP and backend by statistics slot).
#[derive(Clone, Debug)]
pub struct Admission {
    pub counts: Arc<ConnCounts>,
    /// By VIP statistics slot: its count.
    vip_by_stat: Vec<u32>,
    /// By backend statistics slot: its count.
    backend_by_stat: Vec<u32>,
}

/// Slots of the counts a worker keeps alone, until
/// [`super::Lb::share_conn_counts`] gives it the process's (tests and
/// benchmarks build many workers: they get a small table).
const ALONE_SLOTS: usize = 1024;

impl Default for Admission {
    fn default() -> Self {
        Admission::new(Arc::new(ConnCounts::new(ALONE_SLOTS)))
    }
}

fn set_at(v: &mut Vec<u32>, i: u32, value: u32) {
    if i == u32::MAX {
        return;
    }
    let i = i as usize;
    if v.len() <= i {
        v.resize(i + 1, NO_COUNTER);
    }
    v[i] = value;
}

impl Admission {
    pub fn new(counts: Arc<ConnCounts>) -> Self {
        Admission {
            counts,
            vip_by_stat: Vec::new(),
            backend_by_stat: Vec::new(),
        }
    }

    /// Gives a VIP's admission its counts (on adoption): claims the slots
    /// of its cap and its backends' caps and remembers them by statistics
    /// slot for [`Admission::release`].
    pub fn bind(
        &mut self,
        admit: &mut VipAdmit,
        vip: (u32, u32),
        backends: impl Iterator<Item = (u32, u32)>,
    ) {
        let (stat_key, stat_slot) = vip;
        if admit.limits.max_connections > 0 {
            admit.vip_counter = self.counts.vip(stat_key);
            set_at(&mut self.vip_by_stat, stat_slot, admit.vip_counter);
        }
        for (b, (id, slot)) in admit.backends.iter_mut().zip(backends) {
            if b.0 > 0 {
                b.1 = self.counts.backend(id);
                set_at(&mut self.backend_by_stat, slot, b.1);
            }
        }
    }

    /// Gives back what a flow holds (`bits`), by its statistics slots.
    #[cold]
    pub fn release(&self, bits: u8, vip_slot: u32, backend_slot: u32) {
        if bits & FLOW_COUNTED_VIP != 0 {
            if let Some(&c) = self.vip_by_stat.get(vip_slot as usize) {
                self.counts.give(c);
            }
        }
        if bits & FLOW_COUNTED_BACKEND != 0 {
            if let Some(&c) = self.backend_by_stat.get(backend_slot as usize) {
                self.counts.give(c);
            }
        }
    }

    /// Gives back what an entry holds once its state says the connection
    /// is over (both FINs or a RST): the entry may linger for
    /// `tcp_closing`, the connection no longer counts.
    #[inline]
    pub fn closed(&self, state: State, bits: &mut u8, vip_slot: u32, backend_slot: u32) {
        if *bits & FLOW_COUNTED != 0 && matches!(state, State::TimeWait | State::Closed) {
            self.release(*bits, vip_slot, backend_slot);
            *bits &= !FLOW_COUNTED;
        }
    }
}

impl super::Lb {
    /// A FIN or RST moved a tracked flow: once its connection is over, it
    /// gives back the open-connection places it holds.
    #[inline]
    pub(super) fn note_closed(&mut self, id: crate::conntrack::EntryId) {
        let e = self.conntrack.get_mut(id);
        if e.value.bits & FLOW_COUNTED != 0 {
            let state = e.state();
            let (vs, bs) = (e.value.vip_slot, e.value.backend_slot);
            self.admission.closed(state, &mut e.value.bits, vs, bs);
        }
    }
}

/// A seed for a worker's per-source tables, different per worker and VIP.
pub fn source_seed(flow_hash_key: &[u8; 16], worker: usize, vip: u32) -> u64 {
    let mut k = [0u8; 8];
    k.copy_from_slice(&flow_hash_key[..8]);
    u64::from_le_bytes(k) ^ (worker as u64).rotate_left(17) ^ u64::from(vip).rotate_left(41)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pfx(s: &str, deny: bool) -> PrefixRecord {
        let net: conf::IpNet = s.parse().unwrap();
        let (family, addr) = match net.network() {
            std::net::IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (4, b)
            }
            std::net::IpAddr::V6(a) => (6, a.octets()),
        };
        PrefixRecord {
            addr,
            len: net.prefix_len,
            family,
            deny: u8::from(deny),
            reserved: [0; 5],
        }
    }

    fn src(s: &str) -> [u8; 16] {
        match s.parse::<std::net::IpAddr>().unwrap() {
            std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            std::net::IpAddr::V6(a) => a.octets(),
        }
    }

    #[test]
    fn longest_prefix_decides() {
        let acl = Acl::new(&[
            pfx("10.0.0.0/8", false),
            pfx("10.1.0.0/16", true),
            pfx("10.1.2.0/24", false),
            pfx("10.1.2.128/25", true),
            pfx("192.168.0.0/16", false),
        ]);
        for (a, ok) in [
            ("10.0.0.1", true),
            ("10.1.0.1", false),
            ("10.1.2.1", true),
            ("10.1.2.127", true),
            ("10.1.2.128", false),
            ("10.1.2.255", false),
            ("10.1.3.0", false),
            ("10.255.255.255", true),
            ("11.0.0.0", false), // an allow list exists: unmatched is refused
            ("9.255.255.255", false),
            ("192.168.7.7", true),
        ] {
            assert_eq!(acl.allows(&src(a)), ok, "{a}");
        }
        let deny_only = Acl::new(&[pfx("2001:db8::/32", true), pfx("2001:db8:1::/48", true)]);
        assert!(!deny_only.allows(&src("2001:db8:1::5")));
        assert!(!deny_only.allows(&src("2001:db8::5")));
        assert!(deny_only.allows(&src("2001:db9::5")));
        assert!(deny_only.allows(&src("::")));
        let all = Acl::new(&[pfx("::/1", true), pfx("8000::/1", false)]);
        assert!(!all.allows(&src("::1")));
        assert!(all.allows(&src("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(Acl::new(&[]).allows(&src("10.0.0.1")));
    }

    /// Against a linear longest-match over random nested prefixes.
    #[test]
    fn interval_table_matches_a_linear_search() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..50 {
            let mut list: Vec<PrefixRecord> = Vec::new();
            for _ in 0..(rnd() % 30 + 1) {
                let len = (rnd() % 12 + 4) as u8;
                let a = ((rnd() as u32) & (u32::MAX << (32 - len)) & 0x0fff_ffff) | 0x0a00_0000;
                let a = a & (u32::MAX << (32 - len));
                let p = pfx(
                    &format!("{}/{len}", std::net::Ipv4Addr::from(a)),
                    rnd() % 2 == 0,
                );
                if !list.iter().any(|q| q.addr == p.addr && q.len == p.len) {
                    list.push(p);
                }
            }
            let acl = Acl::new(&list);
            let allow_exists = list.iter().any(|p| p.deny == 0);
            for _ in 0..500 {
                let a = (rnd() as u32 & 0x0fff_ffff) | 0x0a00_0000;
                let best = list
                    .iter()
                    .filter(|p| {
                        let net = u32::from_be_bytes([p.addr[0], p.addr[1], p.addr[2], p.addr[3]]);
                        let m = u32::MAX << (32 - p.len);
                        a & m == net
                    })
                    .max_by_key(|p| p.len);
                let want = match best {
                    Some(p) => p.deny == 0,
                    None => !allow_exists,
                };
                let s = std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
                assert_eq!(acl.allows(&s), want, "{}", std::net::Ipv4Addr::from(a));
            }
        }
    }

    #[test]
    fn source_table_limits_each_prefix_and_overflows_when_full() {
        // 8 slots: 2 sets of 4 ways.
        let mut t = SourceTable::new(8, 24, 64, 7);
        let (rate, burst) = (1, 2);
        let s1 = src("10.0.0.1");
        let s1b = src("10.0.0.200"); // same /24
        assert_eq!(t.charge(&s1, false, 0, rate, burst), SourceVerdict::Pass);
        assert_eq!(t.charge(&s1b, false, 0, rate, burst), SourceVerdict::Pass);
        assert_eq!(t.charge(&s1, false, 0, rate, burst), SourceVerdict::Limited);
        assert_eq!(t.charge(&s1, false, 1000, rate, burst), SourceVerdict::Pass);
        // Many other prefixes, each limited (burst spent): the table fills,
        // then newcomers share the overflow bucket.
        let mut overflowed = 0;
        for i in 1..200u32 {
            let s = src(&format!("10.{}.{}.1", i >> 8, i & 0xff));
            for _ in 0..2 {
                match t.charge(&s, false, 1000, rate, burst) {
                    SourceVerdict::PassOverflow | SourceVerdict::LimitedOverflow => overflowed += 1,
                    _ => {}
                }
            }
        }
        assert!(overflowed > 300, "{overflowed}");
        // The prefix already tracked keeps its own (empty) bucket.
        assert_eq!(
            t.charge(&s1, false, 1000, rate, burst),
            SourceVerdict::Limited
        );
        // Later, idle ways are taken over again.
        assert_eq!(
            t.charge(&src("172.16.0.1"), false, 100_000, rate, burst),
            SourceVerdict::Pass
        );
    }

    #[test]
    fn counts_are_shared_and_capped() {
        let c = ConnCounts::new(16);
        let v = c.vip(5);
        assert_eq!(c.vip(5), v);
        assert_ne!(c.backend(5), v);
        assert!(c.take(v, 2));
        assert!(c.take(v, 2));
        assert!(!c.take(v, 2));
        assert_eq!(c.open(v), 2);
        c.give(v);
        assert!(c.take(v, 2));
        // A full table claims nothing.
        let small = ConnCounts::new(2);
        assert_ne!(small.vip(1), NO_COUNTER);
        assert_ne!(small.vip(2), NO_COUNTER);
        assert_eq!(small.vip(3), NO_COUNTER);
        assert!(small.take(NO_COUNTER, 1));
    }
}
