//! A new flow meeting a full connection table: the SYN flood defence.
//!
//! The oldest half-open entry at least [`HALF_OPEN_MIN_AGE_MS`] old makes
//! room ([`crate::conntrack::Conntrack::evict_half_open`]); its counts and
//! local tuple are given back as for any entry that goes. Why eviction and
//! not a SYN proxy: docs/reliability.md.

use conf::counters::Counter;

use super::flow::Ending;
use super::release::Release;
use super::Lb;
use crate::conntrack::Eviction;
use crate::counters::Counters;

/// A half-open entry younger than this is never evicted: a real client's
/// handshake (one round trip client <-> appliance <-> backend, or a
/// retransmitted SYN-ACK after the backend's 1 s timer) completes within it.
/// A flood of more than `conntrack_per_worker / 1 s` SYNs per second per
/// worker meets a table whose half-open entries are all younger: new flows
/// are then refused under `drop_syn_flood` (DNAT: forwarded statelessly).
pub const HALF_OPEN_MIN_AGE_MS: u64 = 1_000;

impl Lb {
    /// The table is full and a new flow wants an entry: evicts the oldest
    /// half-open entry if it is old enough. Only on the new-flow path, and
    /// only when full; constant work (a few ring records at most).
    #[cold]
    #[inline(never)]
    pub(super) fn make_room(&mut self, counters: &mut Counters) -> Eviction {
        let mut release = Release::of(
            self.vip_stats,
            self.backend_stats,
            &mut self.local_ports,
            &self.state_timeouts_ms,
            self.records.as_mut(),
            &self.admission,
            &mut self.persist,
        )
        .ending(Ending::Evicted);
        let r = self
            .conntrack
            .evict_half_open(self.now_ms, HALF_OPEN_MIN_AGE_MS, |id, e| {
                release.entry(id, e)
            });
        if r == Eviction::Evicted {
            counters.inc(Counter::ConntrackHalfOpenEvicted);
        }
        r
    }
}
