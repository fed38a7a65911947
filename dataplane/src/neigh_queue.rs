//! Frames waiting for their next hop's MAC address.
//!
//! The first packet to a backend border-dp has never talked to (a SYN,
//! mostly) finds its next hop unresolved. Dropping it costs the client a
//! retransmission timeout (1 s for a SYN); like the kernel's
//! `unres_qlen`, the worker keeps a few such frames per next hop and sends
//! them once the ARP or NDP answer arrives. The queue is bounded per next
//! hop ([`PER_HOP`]) and in total ([`TOTAL`]), so a flood towards
//! unresolvable addresses cannot fill memory, and a frame waits at most
//! [`WAIT_MS`]: overflows and timeouts are dropped under named counters.
//!
//! The queue holds the worker's own frame type and knows nothing of DPDK;
//! what a next hop's state means for its frames is the load balancer's
//! call ([`crate::lb::Lb::parked_fate`]).

use crate::neigh::Slot;

/// Frames kept per next hop (the kernel's default `unres_qlen_bytes`
/// holds about as many full frames).
pub const PER_HOP: usize = 3;
/// Frames kept in all.
pub const TOTAL: usize = 256;
/// How long a frame waits for its next hop.
pub const WAIT_MS: u64 = 3_000;
/// While frames wait, the next hop is asked for again this often (a
/// request sent before they came, e.g. when the tables were adopted and
/// the backend was not up yet, may have gone unanswered).
pub const ASK_EVERY_MS: u64 = 200;

/// What becomes of a parked frame now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The next hop is known: send with this destination MAC.
    Send([u8; 6]),
    /// Still resolving.
    Wait,
    /// Waited [`WAIT_MS`] or the next hop cannot be resolved: drop.
    Expire,
}

struct Parked<F> {
    frame: F,
    port: usize,
    hop: Slot,
    since_ms: u64,
}

/// One worker's waiting frames, oldest first.
pub struct NeighQueue<F> {
    parked: Vec<Parked<F>>,
}

impl<F> Default for NeighQueue<F> {
    fn default() -> Self {
        NeighQueue {
            parked: Vec::with_capacity(TOTAL),
        }
    }
}

impl<F> NeighQueue<F> {
    pub fn is_empty(&self) -> bool {
        self.parked.is_empty()
    }

    /// Frames waiting (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.parked.len()
    }

    /// Keeps `frame` (to leave on `port` once `hop` is known), or gives it
    /// back when the queue is full for that hop or in total.
    pub fn park(&mut self, frame: F, port: usize, hop: Slot, now_ms: u64) -> Result<(), F> {
        let for_hop = self.parked.iter().filter(|p| p.hop == hop).count();
        if for_hop >= PER_HOP || self.parked.len() >= TOTAL {
            return Err(frame);
        }
        // Within the capacity reserved at construction: no allocation.
        self.parked.push(Parked {
            frame,
            port,
            hop,
            since_ms: now_ms,
        });
        Ok(())
    }

    /// Asks `fate` about every waiting frame (next hop, how long it has
    /// waited) and hands those to send or drop to `out`, in the order
    /// they were parked; the rest keep waiting.
    pub fn settle(
        &mut self,
        now_ms: u64,
        mut fate: impl FnMut(Slot, usize, u64) -> Fate,
        mut out: impl FnMut(F, usize, Fate),
    ) {
        let mut i = 0;
        while i < self.parked.len() {
            let p = &self.parked[i];
            match fate(p.hop, p.port, now_ms.saturating_sub(p.since_ms)) {
                Fate::Wait => i += 1,
                f => {
                    let p = self.parked.remove(i);
                    out(p.frame, p.port, f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: &mut crate::neigh::Neighbors, last: u8) -> Slot {
        n.slot_for(std::net::IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn bounded_per_hop_and_in_total() {
        let mut n = crate::neigh::Neighbors::new();
        let mut q = NeighQueue::default();
        let a = slot(&mut n, 1);
        for i in 0..PER_HOP {
            assert!(q.park(i, 0, a, 0).is_ok());
        }
        assert_eq!(q.park(99, 0, a, 0), Err(99));
        let mut k = PER_HOP;
        for last in 2..=255u8 {
            let s = slot(&mut n, last);
            while q.len() < TOTAL && q.park(k, 1, s, 0).is_ok() {
                k += 1;
                if q.parked.iter().filter(|p| p.hop == s).count() == PER_HOP {
                    break;
                }
            }
        }
        assert_eq!(q.len(), TOTAL);
        let b = slot(&mut n, 0);
        assert_eq!(q.park(7, 0, b, 0), Err(7), "total bound");
    }

    #[test]
    fn settle_sends_in_order_and_keeps_the_waiting() {
        let mut n = crate::neigh::Neighbors::new();
        let (a, b) = (slot(&mut n, 1), slot(&mut n, 2));
        let mut q = NeighQueue::default();
        q.park("a1", 1, a, 0).unwrap();
        q.park("b1", 1, b, 10).unwrap();
        q.park("a2", 1, a, 20).unwrap();
        let mut got = Vec::new();
        q.settle(
            100,
            |hop, _port, waited| {
                assert!(waited >= 80);
                if hop == a {
                    Fate::Send([2; 6])
                } else {
                    Fate::Wait
                }
            },
            |f, port, fate| got.push((f, port, fate)),
        );
        assert_eq!(
            got,
            [("a1", 1, Fate::Send([2; 6])), ("a2", 1, Fate::Send([2; 6]))]
        );
        assert_eq!(q.len(), 1);
        got.clear();
        q.settle(
            200,
            |_, _, _| Fate::Expire,
            |f, p, fate| got.push((f, p, fate)),
        );
        assert_eq!(got, [("b1", 1, Fate::Expire)]);
        assert!(q.is_empty());
    }
}
