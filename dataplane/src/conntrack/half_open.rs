//! Half-open entries, oldest first: what a full table gives up for a new
//! flow under a SYN flood.
//!
//! A spoofed SYN creates an entry that never completes its handshake and
//! would hold its slot (and, for full-NAT, its local tuple) for `tcp_syn`.
//! When the table is full, [`Conntrack::evict_half_open`] removes the
//! oldest entry still in `SynSent` or `SynRecv` instead, provided it is at
//! least `min_age_ms` old: a real client's handshake takes one round trip,
//! so the entries evicted are the ones whose handshake is not coming. Under
//! a flood of `R` SYN/s a half-open entry therefore lives about
//! `capacity / R` rather than `tcp_syn`, and an established flow is never
//! evicted.
//!
//! The order is kept in a ring of (slot, creation time) records, one per
//! insert of a half-open entry: a record goes stale when its entry
//! completes its handshake or goes, and is skipped (at most
//! [`STALE_SKIPS`] per call) when it comes up. The ring holds as many
//! records as the table has slots, rounded up to a power of two; when it is
//! full the oldest record is overwritten (its entry, if still half-open,
//! then only expires). 8 bytes per slot, reserved at construction; nothing
//! allocates afterwards.

use super::{Conntrack, Entry, EntryId, State};

/// Records examined by one [`Conntrack::evict_half_open`] call: stale ones
/// (entries that completed their handshake since) cost one look each.
pub const STALE_SKIPS: usize = 64;

/// What [`Conntrack::evict_half_open`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// The oldest half-open entry was removed (and passed to `on_free`).
    Evicted,
    /// The oldest half-open entry is younger than the minimum age: kept.
    TooYoung,
    /// No half-open entry among the records looked at.
    NoneHalfOpen,
}

/// The ring of half-open inserts, oldest at `head`.
pub(super) struct HalfOpenRing {
    /// (slot, `created_at` truncated to 32 bits).
    records: Box<[(u32, u32)]>,
    mask: usize,
    /// Positions only grow; `tail - head` records are queued.
    head: usize,
    tail: usize,
}

impl HalfOpenRing {
    pub(super) fn new(capacity: usize) -> HalfOpenRing {
        let n = capacity.max(1).next_power_of_two();
        HalfOpenRing {
            records: vec![(0, 0); n].into_boxed_slice(),
            mask: n - 1,
            head: 0,
            tail: 0,
        }
    }

    /// Queues a half-open entry created at `now` in `slot`.
    #[inline]
    pub(super) fn push(&mut self, slot: usize, now: u64) {
        if self.tail - self.head > self.mask {
            self.head += 1;
        }
        if let Some(r) = self.records.get_mut(self.tail & self.mask) {
            *r = (slot as u32, now as u32);
        }
        self.tail += 1;
    }

    fn front(&self) -> Option<(u32, u32)> {
        (self.head != self.tail)
            .then(|| self.records.get(self.head & self.mask).copied())
            .flatten()
    }

    pub(super) fn bytes(&self) -> usize {
        core::mem::size_of_val(&*self.records)
    }
}

/// Whether `e` is the half-open entry a record of (creation time `born`) named.
fn still_half_open<V>(e: &Entry<V>, born: u32) -> bool {
    e.is_live() && matches!(e.state, State::SynSent | State::SynRecv) && e.created_at as u32 == born
}

impl<V: Copy> Conntrack<V> {
    /// Removes the oldest half-open entry if it is at least `min_age_ms`
    /// old at `now`, passing it to `on_free`. See the [module docs](self).
    pub fn evict_half_open(
        &mut self,
        now: u64,
        min_age_ms: u64,
        mut on_free: impl FnMut(EntryId, &Entry<V>),
    ) -> Eviction {
        for _ in 0..STALE_SKIPS {
            let Some((slot, born)) = self.half_open.front() else {
                break;
            };
            let s = slot as usize;
            let e = match self.slots.get(s) {
                Some(e) if still_half_open(e, born) => e,
                _ => {
                    self.half_open.head += 1;
                    continue;
                }
            };
            if now.saturating_sub(e.created_at) < min_age_ms {
                return Eviction::TooYoung;
            }
            self.half_open.head += 1;
            self.release(s);
            on_free(EntryId(s as u32), &self.slots[s]);
            return Eviction::Evicted;
        }
        Eviction::NoneHalfOpen
    }
}

#[cfg(test)]
mod tests {
    use ahash::RandomState;

    use super::super::{Dir, FlowKey, InsertError, TcpSeg, Timeouts};
    use super::*;

    use crate::wire::TcpFlags;

    const SYN: u8 = TcpFlags::SYN.0;
    const ACK: u8 = TcpFlags::ACK.0;

    fn table(capacity: usize) -> Conntrack<u32> {
        Conntrack::with_hasher(
            capacity,
            Timeouts::default(),
            RandomState::with_seeds(1, 2, 3, 4),
        )
    }

    fn orig(n: u16) -> FlowKey {
        FlowKey::v4([192, 0, 2, 1], [10, 10, 0, 100], n, 80, 6)
    }

    fn reply(n: u16) -> FlowKey {
        FlowKey::v4([10, 20, 0, 11], [10, 20, 0, 1], 8080, n, 6)
    }

    fn syn(
        ct: &mut Conntrack<u32>,
        n: u16,
        now: u64,
    ) -> Result<super::super::EntryId, InsertError> {
        ct.insert(
            orig(n),
            reply(n),
            u32::from(n),
            State::SynSent,
            now,
            |_, _| {},
        )
    }

    /// SYN-ACK from the backend, ACK from the client.
    fn handshake(ct: &mut Conntrack<u32>, n: u16, now: u64) {
        let (id, _) = ct.lookup(&orig(n), now).unwrap();
        ct.update_tcp(id, Dir::Reply, &TcpSeg::flags(SYN | ACK), now)
            .unwrap();
        assert_eq!(
            ct.update_tcp(
                id,
                Dir::Original,
                &TcpSeg {
                    ack: 1,
                    ..TcpSeg::flags(ACK)
                },
                now
            ),
            Ok(State::Established)
        );
    }

    fn evict(ct: &mut Conntrack<u32>, now: u64) -> (Eviction, Vec<u32>) {
        let mut freed = Vec::new();
        let r = ct.evict_half_open(now, 1_000, |_, e| freed.push(e.value));
        (r, freed)
    }

    #[test]
    fn the_oldest_half_open_entry_makes_room_once_old_enough() {
        let mut ct = table(4);
        for n in 0..4 {
            syn(&mut ct, n, 100 * u64::from(n)).unwrap();
        }
        assert_eq!(syn(&mut ct, 9, 500), Err(InsertError::Full));
        assert_eq!(evict(&mut ct, 999), (Eviction::TooYoung, vec![]));
        assert_eq!(ct.len(), 4, "nothing changed");
        assert_eq!(evict(&mut ct, 1_000), (Eviction::Evicted, vec![0]));
        assert!(ct.lookup(&orig(0), 1_000).is_none());
        assert!(ct.holder(&reply(0)).is_none(), "both keys gone");
        syn(&mut ct, 9, 1_000).unwrap();
        assert_eq!(evict(&mut ct, 1_100), (Eviction::Evicted, vec![1]));
        assert_eq!(evict(&mut ct, 1_150), (Eviction::TooYoung, vec![]));
        ct.check();
    }

    #[test]
    fn established_entries_are_never_evicted() {
        let mut ct = table(4);
        for n in 0..4 {
            syn(&mut ct, n, 0).unwrap();
        }
        handshake(&mut ct, 0, 10);
        handshake(&mut ct, 2, 10);
        assert_eq!(evict(&mut ct, 5_000), (Eviction::Evicted, vec![1]));
        assert_eq!(evict(&mut ct, 5_000), (Eviction::Evicted, vec![3]));
        assert_eq!(evict(&mut ct, 5_000), (Eviction::NoneHalfOpen, vec![]));
        assert_eq!(ct.len(), 2);
        ct.check();
    }

    #[test]
    fn a_reused_slot_is_not_taken_for_its_previous_entry() {
        let mut ct = table(2);
        let a = syn(&mut ct, 0, 0).unwrap();
        syn(&mut ct, 1, 0).unwrap();
        ct.remove(a).unwrap();
        // Slot of `a` now holds a younger half-open entry: its old record
        // is stale, and the entry of port 1 is the oldest.
        assert_eq!(syn(&mut ct, 2, 800).unwrap(), a);
        assert_eq!(evict(&mut ct, 1_000), (Eviction::Evicted, vec![1]));
        assert_eq!(evict(&mut ct, 1_000), (Eviction::TooYoung, vec![]));
        assert_eq!(evict(&mut ct, 1_800), (Eviction::Evicted, vec![2]));
        ct.check();
    }

    #[test]
    fn a_full_ring_forgets_its_oldest_records() {
        let mut ct = table(2);
        // Churn: each pair completes its handshake and goes, leaving stale
        // records; the ring never holds more than its size.
        for n in 0..100u16 {
            let id = syn(&mut ct, n, u64::from(n)).unwrap();
            handshake(&mut ct, n, u64::from(n));
            ct.remove(id).unwrap();
        }
        assert!(ct.half_open.tail - ct.half_open.head <= ct.half_open.mask + 1);
        syn(&mut ct, 500, 200).unwrap();
        assert_eq!(evict(&mut ct, 5_000), (Eviction::Evicted, vec![500]));
        ct.check();
    }
}
