//! Next-hop resolution: a per-worker neighbour table (IP -> MAC), filled from
//! the ARP and NDP traffic the worker sees and from what the other workers
//! learn, and the ARP requests / neighbour solicitations that fill it.
//!
//! Every worker keeps its own table, so lookups take no locks. A binding
//! learnt by one worker is offered to the others through bounded lock-free
//! inboxes ([`NeighborSync`]); an inbox that is full drops the update, which
//! the next ARP exchange repeats.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use hashbrown::HashMap;

use crate::doorbell::Doorbell;

/// How long a binding is trusted before the worker asks again (it keeps
/// using the old MAC meanwhile).
pub const REFRESH_MS: u64 = 30_000;
/// Minimum gap between two requests for the same address.
pub const RETRY_MS: u64 = 1_000;
/// Entries per worker table.
pub const CAPACITY: usize = 4096;
const _: () = assert!(CAPACITY < u16::MAX as usize);
const INBOX: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    ip: IpAddr,
    mac: Option<[u8; 6]>,
    learnt_ms: u64,
    requested_ms: Option<u64>,
}

/// A learnt binding, as passed between workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub ip: IpAddr,
    pub mac: [u8; 6],
}

/// What a lookup tells the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Send to this MAC.
    Known([u8; 6]),
    /// Send to this MAC, and also send a request: the binding is getting old.
    KnownRefresh([u8; 6]),
    /// Unknown: send a request now (and drop the packet).
    Request,
    /// Unknown and a request is already out: drop the packet.
    Pending,
    /// Unknown and the table is full.
    Full,
}

/// An address's place in a [`Neighbors`] table. Entries are never removed,
/// so a slot stays the same address's for the table's life: the fast path
/// keeps slots (per backend, per flow) and resolves by index, without
/// hashing. [`Slot::NONE`] stands for an address the full table could not
/// take (it never will: resolving it gives [`Resolution::Full`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot(u16);

impl Slot {
    /// No entry: the table was full.
    pub const NONE: Slot = Slot(u16::MAX);
}

pub struct Neighbors {
    /// Entry slots, in insertion order; never more than [`CAPACITY`].
    entries: Vec<Entry>,
    index: HashMap<IpAddr, u16, ahash::RandomState>,
}

impl Default for Neighbors {
    fn default() -> Self {
        Self::new()
    }
}

impl Neighbors {
    pub fn new() -> Self {
        Neighbors {
            entries: Vec::with_capacity(CAPACITY),
            index: HashMap::with_capacity_and_hasher(CAPACITY, ahash::RandomState::new()),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn insert(&mut self, e: Entry) -> Option<u16> {
        if self.entries.len() >= CAPACITY {
            return None;
        }
        // CAPACITY < u16::MAX (Slot::NONE), so every index fits.
        let i = self.entries.len() as u16;
        self.entries.push(e);
        self.index.insert(e.ip, i);
        Some(i)
    }

    /// Records a binding. Never grows the table beyond [`CAPACITY`].
    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6], now_ms: u64) -> bool {
        if let Some(e) = self
            .index
            .get(&ip)
            .and_then(|&i| self.entries.get_mut(i as usize))
        {
            let changed = e.mac != Some(mac);
            e.mac = Some(mac);
            e.learnt_ms = now_ms;
            e.requested_ms = None;
            return changed;
        }
        self.insert(Entry {
            ip,
            mac: Some(mac),
            learnt_ms: now_ms,
            requested_ms: None,
        })
        .is_some()
    }

    /// The MAC of `ip`, if known.
    pub fn get(&self, ip: IpAddr) -> Option<[u8; 6]> {
        let i = *self.index.get(&ip)?;
        self.entries.get(i as usize).and_then(|e| e.mac)
    }

    /// The slot of `ip`, if it has one.
    pub fn slot(&self, ip: IpAddr) -> Option<Slot> {
        self.index.get(&ip).map(|&i| Slot(i))
    }

    /// The slot of `ip`, made for it (unresolved, a request due) if it has
    /// none; [`Slot::NONE`] when the table is full.
    pub fn slot_for(&mut self, ip: IpAddr) -> Slot {
        if let Some(s) = self.slot(ip) {
            return s;
        }
        let pending = Entry {
            ip,
            mac: None,
            learnt_ms: 0,
            requested_ms: None,
        };
        self.insert(pending).map_or(Slot::NONE, Slot)
    }

    /// The address a slot holds (`None` for [`Slot::NONE`]).
    pub fn ip_at(&self, slot: Slot) -> Option<IpAddr> {
        self.entries.get(slot.0 as usize).map(|e| e.ip)
    }

    /// Looks `ip` up for sending at `now_ms`, deciding whether a request is due.
    /// A `Request`/`KnownRefresh` answer records that the caller sends one.
    pub fn resolve(&mut self, ip: IpAddr, now_ms: u64) -> Resolution {
        match self.index.get(&ip) {
            Some(&i) => self.resolve_at(Slot(i), now_ms),
            None => {
                let pending = Entry {
                    ip,
                    mac: None,
                    learnt_ms: 0,
                    requested_ms: Some(now_ms),
                };
                match self.insert(pending) {
                    Some(_) => Resolution::Request,
                    None => Resolution::Full,
                }
            }
        }
    }

    /// [`Neighbors::resolve`] for the address in `slot`, without hashing.
    #[inline(always)]
    /// For an unresolved slot whose last request is at least `gap_ms`
    /// old: records a new request at `now_ms` and returns true (frames
    /// wait for it, so they ask more often than [`RETRY_MS`]).
    pub fn ask_again(&mut self, slot: Slot, now_ms: u64, gap_ms: u64) -> bool {
        let Some(e) = self.entries.get_mut(slot.0 as usize) else {
            return false;
        };
        let due = e.mac.is_none()
            && e.requested_ms
                .is_none_or(|t| now_ms.saturating_sub(t) >= gap_ms);
        if due {
            e.requested_ms = Some(now_ms);
        }
        due
    }

    pub fn resolve_at(&mut self, slot: Slot, now_ms: u64) -> Resolution {
        let Some(e) = self.entries.get_mut(slot.0 as usize) else {
            return Resolution::Full;
        };
        // The common case first: a fresh binding.
        if let Some(mac) = e
            .mac
            .filter(|_| now_ms.saturating_sub(e.learnt_ms) < REFRESH_MS)
        {
            return Resolution::Known(mac);
        }
        let due = e
            .requested_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= RETRY_MS);
        match e.mac {
            Some(mac) if now_ms.saturating_sub(e.learnt_ms) < REFRESH_MS || !due => {
                Resolution::Known(mac)
            }
            Some(mac) => {
                e.requested_ms = Some(now_ms);
                Resolution::KnownRefresh(mac)
            }
            None if due => {
                e.requested_ms = Some(now_ms);
                Resolution::Request
            }
            None => Resolution::Pending,
        }
    }
}

/// The inboxes through which workers share what they learn, and (with
/// [`NeighborSync::with_doorbells`]) the doorbells that wake a sleeping
/// worker for it: frames it parked for that next hop leave at once.
#[derive(Clone)]
pub struct NeighborSync {
    inboxes: Arc<Vec<ArrayQueue<Binding>>>,
    doorbells: Option<Arc<Vec<Doorbell>>>,
}

impl NeighborSync {
    pub fn new(workers: usize) -> Self {
        NeighborSync {
            inboxes: Arc::new((0..workers).map(|_| ArrayQueue::new(INBOX)).collect()),
            doorbells: None,
        }
    }

    /// Rings worker `i`'s doorbell `doorbells[i]` after offering it a binding.
    pub fn with_doorbells(mut self, doorbells: Arc<Vec<Doorbell>>) -> Self {
        self.doorbells = Some(doorbells);
        self
    }

    /// Offers a binding learnt by worker `from` to every other worker.
    pub fn share(&self, from: usize, b: Binding) {
        for (i, q) in self.inboxes.iter().enumerate() {
            if i != from && q.push(b).is_ok() {
                if let Some(bell) = self.doorbells.as_ref().and_then(|d| d.get(i)) {
                    bell.ring();
                }
            }
        }
    }

    /// Applies what other workers learnt to worker `me`'s table.
    pub fn drain_into(&self, me: usize, table: &mut Neighbors, now_ms: u64) {
        if let Some(q) = self.inboxes.get(me) {
            while let Some(b) = q.pop() {
                table.learn(b.ip, b.mac, now_ms);
            }
        }
    }
}

/// Writes an ARP request for `target` from (`mac`, `sender`) into `buf`
/// (at least 60 bytes, padded to the Ethernet minimum). Returns the length.
pub fn write_arp_request(
    buf: &mut [u8],
    mac: [u8; 6],
    sender: Ipv4Addr,
    target: Ipv4Addr,
) -> Option<usize> {
    const LEN: usize = 60;
    let b = buf.get_mut(..LEN)?;
    b.fill(0);
    b[0..6].copy_from_slice(&[0xff; 6]);
    b[6..12].copy_from_slice(&mac);
    b[12..14].copy_from_slice(&[0x08, 0x06]);
    b[14..22].copy_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    b[22..28].copy_from_slice(&mac);
    b[28..32].copy_from_slice(&sender.octets());
    b[38..42].copy_from_slice(&target.octets());
    Some(LEN)
}

/// Writes a neighbour solicitation for `target` from (`mac`, `sender`) to the
/// target's solicited-node multicast group into `buf`. Returns the length.
pub fn write_neighbor_solicitation(
    buf: &mut [u8],
    mac: [u8; 6],
    sender: Ipv6Addr,
    target: Ipv6Addr,
) -> Option<usize> {
    const LEN: usize = 14 + 40 + 32;
    let b = buf.get_mut(..LEN)?;
    b.fill(0);
    let t = target.octets();
    let group = Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, t[13], t[14], t[15],
    ]);
    b[0..6].copy_from_slice(&[0x33, 0x33, 0xff, t[13], t[14], t[15]]);
    b[6..12].copy_from_slice(&mac);
    b[12..14].copy_from_slice(&[0x86, 0xdd]);
    let ip = &mut b[14..54];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&32u16.to_be_bytes());
    ip[6] = 58;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&sender.octets());
    ip[24..40].copy_from_slice(&group.octets());
    let icmp = &mut b[54..86];
    icmp[0] = 135;
    icmp[8..24].copy_from_slice(&t);
    icmp[24] = 1; // source link-layer address option
    icmp[25] = 1;
    icmp[26..32].copy_from_slice(&mac);
    let csum = crate::wire::checksum::l4_checksum_v6(&sender, &group, 58, icmp);
    b[56..58].copy_from_slice(&csum.to_be_bytes());
    Some(LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    #[test]
    fn resolve_requests_once_per_retry_interval_then_uses_the_answer() {
        let mut n = Neighbors::new();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        assert_eq!(n.resolve(ip, 0), Resolution::Request);
        assert_eq!(n.resolve(ip, 10), Resolution::Pending);
        assert_eq!(n.resolve(ip, RETRY_MS), Resolution::Request);
        n.learn(ip, MAC, 1_500);
        assert_eq!(n.resolve(ip, 1_600), Resolution::Known(MAC));
        assert_eq!(
            n.resolve(ip, 1_500 + REFRESH_MS),
            Resolution::KnownRefresh(MAC)
        );
        assert_eq!(n.resolve(ip, 1_501 + REFRESH_MS), Resolution::Known(MAC));
    }

    #[test]
    fn table_never_grows_past_capacity() {
        let mut n = Neighbors::new();
        for i in 0..CAPACITY as u32 {
            assert!(n.learn(IpAddr::V4(Ipv4Addr::from(i)), MAC, 0));
        }
        let extra = IpAddr::V4(Ipv4Addr::from(u32::MAX));
        assert!(!n.learn(extra, MAC, 0));
        assert_eq!(n.resolve(extra, 0), Resolution::Full);
        assert_eq!(n.len(), CAPACITY);
    }

    #[test]
    fn slots_resolve_like_addresses_and_never_move() {
        let mut n = Neighbors::new();
        let a: IpAddr = "10.0.0.9".parse().unwrap();
        let b: IpAddr = "fd00::9".parse().unwrap();
        assert_eq!(n.slot(a), None);
        assert_eq!(n.resolve(a, 0), Resolution::Request);
        n.learn(b, MAC, 0);
        let (sa, sb) = (n.slot(a).unwrap(), n.slot(b).unwrap());
        assert_ne!(sa, sb);
        assert_eq!((n.ip_at(sa), n.ip_at(sb)), (Some(a), Some(b)));
        assert_eq!(n.resolve_at(sa, 10), Resolution::Pending);
        assert_eq!(n.resolve_at(sa, RETRY_MS), Resolution::Request);
        n.learn(a, MAC, 1_500);
        assert_eq!(n.slot(a), Some(sa));
        assert_eq!(n.resolve_at(sa, 1_600), Resolution::Known(MAC));
        assert_eq!(
            n.resolve_at(sa, 1_500 + REFRESH_MS),
            Resolution::KnownRefresh(MAC)
        );
        assert_eq!(n.resolve(a, 1_501 + REFRESH_MS), Resolution::Known(MAC));
        assert_eq!(n.resolve_at(Slot::NONE, 0), Resolution::Full);
        assert_eq!(n.ip_at(Slot::NONE), None);
    }

    #[test]
    fn bindings_reach_the_other_workers() {
        let sync = NeighborSync::new(3);
        let ip: IpAddr = "fd00::5".parse().unwrap();
        sync.share(1, Binding { ip, mac: MAC });
        let mut t0 = Neighbors::new();
        let mut t1 = Neighbors::new();
        sync.drain_into(0, &mut t0, 5);
        sync.drain_into(1, &mut t1, 5);
        assert_eq!(t0.get(ip), Some(MAC));
        assert_eq!(t1.get(ip), None, "the sender is not told its own binding");
    }

    #[test]
    fn a_shared_binding_wakes_a_sleeping_worker() {
        let bells: Arc<Vec<Doorbell>> = Arc::new((0..2).map(|_| Doorbell::new()).collect());
        let sync = NeighborSync::new(2).with_doorbells(bells.clone());
        bells[0].going_to_sleep();
        bells[1].going_to_sleep();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        sync.share(1, Binding { ip, mac: MAC });
        assert!(!bells[0].is_sleeping(), "worker 0 was not woken");
        assert!(bells[1].is_sleeping(), "the sender rang itself");
    }

    #[test]
    fn requests_parse_as_what_they_claim() {
        let mut buf = [0u8; 128];
        let len = write_arp_request(
            &mut buf,
            MAC,
            "10.0.0.1".parse().unwrap(),
            "10.0.0.9".parse().unwrap(),
        )
        .unwrap();
        let p = crate::wire::parse_frame(&buf[..len]).unwrap();
        assert_eq!(p.l3, crate::wire::L3Kind::Arp);

        let len = write_neighbor_solicitation(
            &mut buf,
            MAC,
            "fd00::1".parse().unwrap(),
            "fd00::1:2:3".parse().unwrap(),
        )
        .unwrap();
        let frame = &buf[..len];
        let parsed = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
        match parsed.net {
            Some(etherparse::NetSlice::Ipv6(ref ip)) => {
                assert_eq!(
                    ip.header().destination_addr(),
                    "ff02::1:ff02:3".parse::<Ipv6Addr>().unwrap()
                );
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
