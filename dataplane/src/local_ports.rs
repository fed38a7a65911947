//! Full-NAT local tuples of one worker: which (local address, port) a new
//! connection to a backend takes, and when a tuple may be taken again.
//!
//! A backend that closes first keeps the tuple (local address, local port,
//! backend address, backend port) in TIME_WAIT for 60 s on Linux. A SYN
//! that arrives on it in that time is accepted only when it is newer than
//! the old connection (RFC 6191: a newer timestamp, or a sequence number
//! past the old one); otherwise the backend answers with an ACK and the
//! client waits for its retransmission timeout. So a tuple is not handed
//! out again right after its connection-table entry goes:
//! - a connection that used TCP timestamps had them moved onto the
//!   worker's clock ([`crate::tstamp`]), so the next connection on the tuple
//!   is newer: it rests [`LOCAL_PORT_COOLDOWN_TS_MS`];
//! - any other rests `local_port_cooldown` (default 60 s), counted from
//!   its last packet.
//!
//! Tuples are handed out least recently used first: a cursor walks every
//! tuple of a port's local addresses in a fixed order (address by address
//! for each port number, so the addresses share the load) and takes the
//! first one that is neither resting nor held by a live connection to the
//! same backend. A connection whose both FINs (or a RST) were seen gives
//! its tuple back as soon as it has rested, even while its entry lingers
//! for late segments. When the tuples the cursor looked at are all taken
//! or resting, the new flow is dropped under `drop_no_local_port`: never
//! sent into a collision.
//!
//! Sustainable new connections per second, per worker and local address:
//! owned ports / cooldown (both shared by all backends of the port).
//!
//! Nothing here allocates after [`LocalPorts::build`].

use conf::config::LOCAL_PORT_COOLDOWN_TS_MS;

use crate::routes::{LocalPool, Routes};

/// A set of local addresses a backend's connections take tuples from: the
/// addresses of its data port in its family, or when that port has none,
/// every address of the family.
pub type SetId = u16;

/// The tuple set for backends reached through data port `port` (IPv4 when
/// `v4`), if any address of the family exists.
pub fn set_for(routes: &Routes, port: usize, v4: bool) -> Option<SetId> {
    let fam = usize::from(!v4);
    let family = |l: &&LocalPool| l.addr.is_ipv4() == v4;
    if port < routes.ports.len() && routes.pools.iter().filter(family).any(|l| l.port == port) {
        return Some((port * 2 + fam) as SetId);
    }
    routes
        .pools
        .iter()
        .any(|l| family(&l))
        .then_some((routes.ports.len() * 2 + fam) as SetId)
}

/// The addresses (indices into `routes.pools`) of tuple set `id`.
fn members(routes: &Routes, id: usize) -> Vec<u16> {
    let (port, v4) = (id / 2, id.is_multiple_of(2));
    let fallback = port >= routes.ports.len();
    routes
        .pools
        .iter()
        .enumerate()
        .filter(|(_, l)| l.addr.is_ipv4() == v4 && (fallback || l.port == port))
        .map(|(i, _)| i as u16)
        .collect()
}

/// One local address's ports owned by this worker.
struct AddrPorts {
    addr16: [u8; 16],
    range: (u16, u16),
    /// The first port this worker owns, and the distance between its ports.
    first: u16,
    stride: u16,
    /// Per owned port: no new connection before this time (ms).
    ready_at: Vec<u64>,
    in_use: u32,
    /// Resting tuples counted so far by the scan pass under way, and by
    /// the last complete one.
    scan_resting: u32,
    last_resting: u32,
}

impl AddrPorts {
    fn port(&self, k: usize) -> u16 {
        self.first + (k as u16) * self.stride
    }

    fn index(&self, port: u16) -> Option<usize> {
        if port < self.first
            || port > self.range.1
            || !(port - self.first).is_multiple_of(self.stride)
        {
            return None;
        }
        Some(usize::from((port - self.first) / self.stride))
    }
}

struct Set {
    /// Indices into `LocalPorts::addrs`.
    members: Vec<u16>,
    /// Tuples: members x the largest owned-port count among them.
    span: u32,
    cursor: u32,
}

/// A tuple offered to a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuple {
    pub addr16: [u8; 16],
    pub port: u16,
    addr: u16,
}

/// Every tuple of a worker, as [`LocalPorts::scan`] counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub tuples: u64,
    pub in_use: u64,
    /// Free, or held by an ended connection, and resting.
    pub resting: u64,
}

/// How often the pool gauges are counted afresh.
pub const SCAN_EVERY_MS: u64 = 1_000;

/// What [`LocalPorts::usage`] reports for one local address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub addr16: [u8; 16],
    /// Ports of the address this worker owns.
    pub tuples: u32,
    /// Held by a connection-table entry.
    pub in_use: u32,
    /// Free but resting.
    pub resting: u32,
}

/// The worker's tuples, built from the routes' pools.
#[derive(Default)]
pub struct LocalPorts {
    /// The usage scan: next address and port index, resting tuples so
    /// far, and when the next pass may start.
    scan_at: (usize, usize),
    next_scan_ms: u64,
    scan_resting: u64,
    built_from: Vec<LocalPool>,
    ports: usize,
    addrs: Vec<AddrPorts>,
    sets: Vec<Set>,
    cooldown_ms: u64,
}

impl LocalPorts {
    /// Tuples of `routes`' pools owned by `worker` of `workers` (a port is
    /// owned by `port & (workers.next_power_of_two() - 1)`), resting
    /// `cooldown_s` after connections without timestamps.
    pub fn build(routes: &Routes, worker: usize, workers: usize, cooldown_s: u32) -> LocalPorts {
        let stride = workers.max(1).next_power_of_two() as u16;
        let mask = stride - 1;
        let mut addrs = Vec::new();
        for pool in &routes.pools {
            let (lo, hi) = pool.range;
            // The first port at or above `lo` whose low bits are `worker`.
            let base = (lo & !mask) | (worker as u16 & mask);
            let first = if base >= lo {
                Some(base)
            } else {
                base.checked_add(stride)
            };
            let count = first
                .filter(|&f| f <= hi)
                .map_or(0, |f| usize::from((hi - f) / stride) + 1);
            addrs.push(AddrPorts {
                addr16: to16(pool.addr),
                range: pool.range,
                first: first.unwrap_or(lo),
                stride,
                ready_at: vec![0; count],
                in_use: 0,
                scan_resting: 0,
                last_resting: 0,
            });
        }
        let sets = (0..(routes.ports.len() + 1) * 2)
            .map(|id| {
                let members = members(routes, id);
                let most = members
                    .iter()
                    .map(|&m| addrs[usize::from(m)].ready_at.len())
                    .max()
                    .unwrap_or(0);
                Set {
                    span: (most * members.len()) as u32,
                    members,
                    cursor: 0,
                }
            })
            .collect();
        LocalPorts {
            scan_at: (0, 0),
            next_scan_ms: 0,
            scan_resting: 0,
            built_from: routes.pools.clone(),
            ports: routes.ports.len(),
            addrs,
            sets,
            cooldown_ms: u64::from(cooldown_s) * 1000,
        }
    }

    /// Whether these tuples were built from `routes`' pools.
    pub fn built_for(&self, routes: &Routes) -> bool {
        self.built_from == routes.pools && self.ports == routes.ports.len()
    }

    /// The next tuple of `set` in least-recently-used order that is not
    /// resting at `now`. The cursor moves past every tuple looked at; at
    /// most `tries` are looked at.
    #[inline]
    pub fn next(&mut self, set: SetId, now: u64, tries: u32) -> Option<Tuple> {
        let s = self.sets.get_mut(usize::from(set))?;
        let n = s.members.len() as u32;
        if s.span == 0 {
            return None;
        }
        for _ in 0..tries {
            let i = s.cursor;
            s.cursor = if i + 1 >= s.span { 0 } else { i + 1 };
            // One local address is the common set: no division then.
            let (m, k) = if n == 1 { (0, i) } else { (i % n, i / n) };
            let addr = s.members[m as usize];
            let a = &self.addrs[usize::from(addr)];
            let k = k as usize;
            match a.ready_at.get(k) {
                Some(&t) if t <= now => {
                    return Some(Tuple {
                        addr16: a.addr16,
                        port: a.port(k),
                        addr,
                    })
                }
                _ => continue,
            }
        }
        None
    }

    /// The address and port [`LocalPorts::next`] would hand out `ahead`
    /// calls from now if every tuple on the way were ready: a guess for
    /// loading the reply key's index bucket early (a tuple that is resting
    /// makes it wrong, and only costs that load). Changes nothing.
    #[inline]
    pub fn peek(&self, set: SetId, ahead: u32) -> Option<([u8; 16], u16)> {
        let s = self.sets.get(usize::from(set))?;
        let n = s.members.len() as u32;
        if s.span == 0 || n == 0 {
            return None;
        }
        let mut i = u64::from(s.cursor) + u64::from(ahead);
        if i >= u64::from(s.span) {
            i %= u64::from(s.span);
        }
        let i = i as u32;
        let (m, k) = if n == 1 { (0, i) } else { (i % n, i / n) };
        let a = self.addrs.get(usize::from(*s.members.get(m as usize)?))?;
        a.ready_at.get(k as usize)?;
        Some((a.addr16, a.port(k as usize)))
    }

    /// `t` was taken by a new connection-table entry.
    pub fn taken(&mut self, t: &Tuple) {
        if let Some(a) = self.addrs.get_mut(usize::from(t.addr)) {
            a.in_use += 1;
        }
    }

    /// An entry adopted from the previous process holds `port` of
    /// `addr16`: counted as taken if the tuple is one of this worker's.
    pub fn adopted(&mut self, addr16: &[u8; 16], port: u16) -> bool {
        match self.find(addr16, port) {
            Some((a, _)) => {
                a.in_use += 1;
                true
            }
            None => false,
        }
    }

    /// The entry holding `port` of `addr16` is gone; the tuple rests until
    /// `ready_at` (see [`LocalPorts::ready_at`]).
    pub fn released(&mut self, addr16: &[u8; 16], port: u16, ready_at: u64) {
        if let Some((a, k)) = self.find(addr16, port) {
            a.in_use = a.in_use.saturating_sub(1);
            a.ready_at[k] = a.ready_at[k].max(ready_at);
        }
    }

    /// The tuple's connection is still in the table but must not be
    /// replaced before `ready_at`: remember it so the cursor skips it.
    pub fn rest_until(&mut self, t: &Tuple, ready_at: u64) {
        if let Some(a) = self.addrs.get_mut(usize::from(t.addr)) {
            if let Some(k) = a.index(t.port) {
                a.ready_at[k] = a.ready_at[k].max(ready_at);
            }
        }
    }

    /// When a tuple whose connection saw its last packet at `last_ms` may
    /// be taken again: soon when the connection used timestamps (or was
    /// UDP), after the configured cooldown otherwise.
    pub fn ready_at(&self, last_ms: u64, timestamps: bool) -> u64 {
        last_ms.saturating_add(if timestamps {
            LOCAL_PORT_COOLDOWN_TS_MS
        } else {
            self.cooldown_ms
        })
    }

    /// Looks at up to `budget` more tuples for [`Totals`]; returns them
    /// when a pass over every tuple ends (for the worker's gauges, a
    /// little at a time so no poll iteration stalls). A pass starts at
    /// most every [`SCAN_EVERY_MS`].
    pub fn scan(&mut self, now: u64, budget: usize) -> Option<Totals> {
        if self.scan_at == (0, 0) && now < self.next_scan_ms {
            return None;
        }
        if self.scan_at == (0, 0) {
            self.next_scan_ms = now.saturating_add(SCAN_EVERY_MS);
        }
        let mut left = budget;
        while left > 0 {
            let (ai, k) = self.scan_at;
            let Some(a) = self.addrs.get_mut(ai) else {
                let totals = Totals {
                    tuples: self.addrs.iter().map(|a| a.ready_at.len() as u64).sum(),
                    in_use: self.addrs.iter().map(|a| u64::from(a.in_use)).sum(),
                    resting: self.scan_resting,
                };
                self.scan_at = (0, 0);
                self.scan_resting = 0;
                return Some(totals);
            };
            let end = a.ready_at.len().min(k + left);
            let part = &a.ready_at[k.min(end)..end];
            let resting = part.iter().filter(|&&t| t > now).count();
            self.scan_resting += resting as u64;
            a.scan_resting += resting as u32;
            left -= part.len();
            self.scan_at = if end >= a.ready_at.len() {
                a.last_resting = core::mem::take(&mut a.scan_resting);
                (ai + 1, 0)
            } else {
                (ai, end)
            };
        }
        None
    }

    /// Per local address, as the last complete [`LocalPorts::scan`] pass
    /// counted it (the figures behind the pool gauges, per address):
    /// owned tuples, in use now, resting then.
    pub fn scanned_usage(&self) -> impl Iterator<Item = Usage> + '_ {
        self.addrs.iter().map(|a| Usage {
            addr16: a.addr16,
            tuples: a.ready_at.len() as u32,
            in_use: a.in_use,
            resting: a.last_resting,
        })
    }

    fn find(&mut self, addr16: &[u8; 16], port: u16) -> Option<(&mut AddrPorts, usize)> {
        let a = self
            .addrs
            .iter_mut()
            .find(|a| &a.addr16 == addr16 && a.range.0 <= port && port <= a.range.1)?;
        let k = a.index(port)?;
        Some((a, k))
    }

    /// Per local address: owned tuples, in use, and resting at `now`
    /// (a scan of every tuple: tests; the gauges use [`LocalPorts::scan`]).
    #[cfg(test)]
    pub fn usage(&self, now: u64) -> impl Iterator<Item = Usage> + '_ {
        self.addrs.iter().map(move |a| {
            let waiting = a.ready_at.iter().filter(|&&t| t > now).count() as u32;
            Usage {
                addr16: a.addr16,
                tuples: a.ready_at.len() as u32,
                in_use: a.in_use,
                resting: waiting
                    .saturating_sub(a.in_use)
                    .min(a.ready_at.len() as u32),
            }
        })
    }
}

fn to16(a: std::net::IpAddr) -> [u8; 16] {
    match a {
        std::net::IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v) => v.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::PortRoute;
    use std::net::IpAddr;

    fn routes(pools: &[(&str, usize, (u16, u16))]) -> Routes {
        let mut r = Routes::default();
        for p in 0..2 {
            r.ports.push(PortRoute {
                port: p,
                nets: Vec::new(),
                gateway: None,
            });
        }
        for &(a, port, range) in pools {
            r.pools.push(LocalPool {
                addr: a.parse().unwrap(),
                port,
                range,
            });
        }
        r
    }

    fn ip(t: &Tuple) -> IpAddr {
        let a = std::net::Ipv6Addr::from(t.addr16);
        a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
    }

    #[test]
    fn tuples_go_round_the_addresses_then_wrap_in_lru_order() {
        let r = routes(&[("10.0.0.1", 1, (100, 103)), ("10.0.0.2", 1, (100, 103))]);
        let mut lp = LocalPorts::build(&r, 0, 1, 60);
        let set = set_for(&r, 1, true).unwrap();
        let got: Vec<(IpAddr, u16)> = (0..9)
            .map(|_| {
                let t = lp.next(set, 0, 1).unwrap();
                (ip(&t), t.port)
            })
            .collect();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(
            got,
            [
                (a, 100),
                (b, 100),
                (a, 101),
                (b, 101),
                (a, 102),
                (b, 102),
                (a, 103),
                (b, 103),
                (a, 100)
            ]
        );
    }

    /// `peek(set, k)` is the tuple the k-th `next` from now hands out
    /// while every tuple is ready, wrapping included; it changes nothing.
    #[test]
    fn peek_ahead_is_the_tuples_next_hands_out() {
        let r = routes(&[("10.0.0.1", 1, (100, 103)), ("10.0.0.2", 1, (100, 103))]);
        let mut lp = LocalPorts::build(&r, 0, 1, 60);
        let set = set_for(&r, 1, true).unwrap();
        lp.next(set, 0, 1).unwrap(); // the cursor off its start
        let peeked: Vec<_> = (0..20).map(|k| lp.peek(set, k).unwrap()).collect();
        assert_eq!(peeked[0], lp.peek(set, 0).unwrap(), "nothing moved");
        let taken: Vec<_> = (0..20)
            .map(|_| {
                let t = lp.next(set, 0, 1).unwrap();
                (t.addr16, t.port)
            })
            .collect();
        assert_eq!(peeked, taken);
        assert_eq!(lp.peek(set + 7, 0), None, "no such set");
        assert_eq!(lp.peek(set, u32::MAX).map(|t| t.1 >= 100), Some(true));
    }

    #[test]
    fn a_released_tuple_rests_for_its_cooldown() {
        let r = routes(&[("10.0.0.1", 1, (100, 101))]);
        let mut lp = LocalPorts::build(&r, 0, 1, 60);
        let set = set_for(&r, 1, true).unwrap();
        let t100 = lp.next(set, 0, 1).unwrap();
        lp.taken(&t100);
        let t101 = lp.next(set, 0, 1).unwrap();
        lp.taken(&t101);
        assert_eq!(lp.usage(0).next().unwrap().in_use, 2);
        // 100 ended without timestamps at 5 s, 101 with them at 5 s.
        let (slow, quick) = (lp.ready_at(5_000, false), lp.ready_at(5_000, true));
        assert_eq!((slow, quick), (65_000, 5_000 + LOCAL_PORT_COOLDOWN_TS_MS));
        lp.released(&t100.addr16, 100, slow);
        lp.released(&t101.addr16, 101, quick);
        let u = lp.usage(6_000).next().unwrap();
        assert_eq!((u.tuples, u.in_use, u.resting), (2, 0, 1));
        assert_eq!(lp.next(set, 5_500, 4), None, "both resting");
        assert_eq!(lp.next(set, 6_000, 4).map(|t| t.port), Some(101));
        assert_eq!(lp.next(set, 64_999, 1), None, "100 still resting");
        // 101 was offered but not taken: it comes round again, then 100.
        assert_eq!(lp.next(set, 65_000, 1).map(|t| t.port), Some(101));
        assert_eq!(lp.next(set, 65_000, 1).map(|t| t.port), Some(100));
    }

    #[test]
    fn workers_own_disjoint_ports_and_families_have_their_own_sets() {
        let r = routes(&[
            ("10.0.0.1", 1, (1024, 1031)),
            ("fd00::1", 1, (1024, 1031)),
            ("10.0.0.9", 0, (2000, 2001)),
        ]);
        let mut seen = Vec::new();
        for w in 0..3 {
            let mut lp = LocalPorts::build(&r, w, 3, 60);
            let set = set_for(&r, 1, true).unwrap();
            for _ in 0..2 {
                let t = lp.next(set, 0, 1).unwrap();
                assert_eq!(usize::from(t.port & 3), w, "owner of {}", t.port);
                assert_eq!(ip(&t), "10.0.0.1".parse::<IpAddr>().unwrap());
                seen.push(t.port);
            }
        }
        seen.sort();
        assert_eq!(seen, [1024, 1025, 1026, 1028, 1029, 1030]);
        let mut lp = LocalPorts::build(&r, 0, 1, 60);
        let v6 = set_for(&r, 1, false).unwrap();
        assert_eq!(
            ip(&lp.next(v6, 0, 1).unwrap()),
            "fd00::1".parse::<IpAddr>().unwrap()
        );
        // Port 0 has no IPv6 address: the family's addresses anywhere.
        let any6 = set_for(&r, 0, false).unwrap();
        assert_eq!(
            ip(&lp.next(any6, 0, 1).unwrap()),
            "fd00::1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(set_for(&routes(&[]), 0, true), None);
    }

    #[test]
    fn a_scan_pass_counts_resting_tuples_per_address() {
        let r = routes(&[("10.0.0.1", 1, (100, 103)), ("10.0.0.2", 1, (100, 101))]);
        let mut lp = LocalPorts::build(&r, 0, 1, 60);
        let set = set_for(&r, 1, true).unwrap();
        let ts: Vec<Tuple> = (0..3).map(|_| lp.next(set, 0, 1).unwrap()).collect();
        for t in &ts {
            lp.taken(t);
        }
        // 10.0.0.1:100 ended without timestamps: it rests until 60 s.
        lp.released(&ts[0].addr16, ts[0].port, lp.ready_at(0, false));
        let totals = lp
            .scan(1_000, 2)
            .into_iter()
            .chain(lp.scan(1_000, 64))
            .last();
        assert_eq!(
            totals.map(|t| (t.tuples, t.in_use, t.resting)),
            Some((6, 2, 1))
        );
        let per: Vec<(IpAddr, u32, u32, u32)> = lp
            .scanned_usage()
            .map(|u| {
                let a = std::net::Ipv6Addr::from(u.addr16).to_ipv4_mapped().unwrap();
                (IpAddr::V4(a), u.tuples, u.in_use, u.resting)
            })
            .collect();
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert_eq!(per, [(a, 4, 1, 1), (b, 2, 1, 0)]);
    }

    #[test]
    fn a_range_this_worker_owns_nothing_of_offers_nothing() {
        let r = routes(&[("10.0.0.1", 1, (1025, 1025))]);
        let mut lp = LocalPorts::build(&r, 0, 2, 60);
        let set = set_for(&r, 1, true).unwrap();
        assert_eq!(lp.next(set, 0, 8), None);
        assert_eq!(lp.usage(0).next().unwrap().tuples, 0);
        // Releasing a port that is not ours changes nothing.
        lp.released(&to16("10.0.0.1".parse().unwrap()), 1025, 10);
        let mut other = LocalPorts::build(&r, 1, 2, 60);
        assert_eq!(other.next(set, 0, 1).map(|t| t.port), Some(1025));
    }
}
