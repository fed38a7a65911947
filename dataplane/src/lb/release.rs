//! What a connection-table entry gives back when it goes, whoever removes
//! it (expiry, eviction, replacement, a reset): its open-connection counts,
//! its client's persistence pin, its full-NAT local tuple and its
//! connection record.

use conf::state::{FlowStat, FlowStats};
use conf::Mode;

use super::admit::Admission;
use super::flow::{Ending, FlowRec, FLOW_COUNTED, FLOW_PERSIST};
use super::records::FlowRecords;
use crate::conntrack::{Entry, EntryId, State};
use crate::local_ports::LocalPorts;
use crate::persist::Persist;

/// Gives back what a connection-table entry held when it goes: its
/// active-connection counts and, for full-NAT, its local tuple, which
/// rests from the entry's last packet on; and writes its connection record.
pub(super) struct Release<'a> {
    vip_stats: FlowStats<'static>,
    backend_stats: FlowStats<'static>,
    local_ports: &'a mut LocalPorts,
    state_timeouts_ms: &'a [u64; 7],
    records: Option<&'a mut FlowRecords>,
    admission: &'a Admission,
    persist: &'a mut Persist,
    ending: Ending,
}

impl<'a> Release<'a> {
    pub(super) fn of(
        vip_stats: FlowStats<'static>,
        backend_stats: FlowStats<'static>,
        local_ports: &'a mut LocalPorts,
        state_timeouts_ms: &'a [u64; 7],
        records: Option<&'a mut FlowRecords>,
        admission: &'a Admission,
        persist: &'a mut Persist,
    ) -> Self {
        Release {
            vip_stats,
            backend_stats,
            local_ports,
            state_timeouts_ms,
            records,
            admission,
            persist,
            ending: Ending::AsItsState,
        }
    }

    /// The entries this releases go for `ending` (default: as their state says).
    pub(super) fn ending(mut self, ending: Ending) -> Self {
        self.ending = ending;
        self
    }

    pub(super) fn entry(&mut self, id: EntryId, e: &Entry<FlowRec>) {
        let v = &e.value;
        if v.bits & FLOW_COUNTED != 0 {
            self.admission.release(v.bits, v.vip_slot, v.backend_slot);
        }
        self.vip_stats
            .sub(v.vip_slot, FlowStat::ActiveConnections, 1);
        self.backend_stats
            .sub(v.backend_slot, FlowStat::ActiveConnections, 1);
        let last_seen = e.last_seen(self.state_timeouts_ms);
        if v.bits & FLOW_PERSIST != 0 {
            self.persist
                .release(v.vip_slot, &e.orig().src, v.backend_slot, last_seen);
        }
        if let Some(r) = self.records.as_deref_mut() {
            r.ended(id, e, self.ending, last_seen);
        }
        if v.mode == Mode::FullNat {
            let r = e.reply();
            // A handshake that never completed left the backend no
            // connection to keep in TIME_WAIT: the tuple rests briefly (a
            // SYN flood's entries give their tuples back at the rate they go).
            let brief = v.rests_briefly(r) || matches!(e.state(), State::SynSent | State::SynRecv);
            let ready = self.local_ports.ready_at(last_seen, brief);
            self.local_ports.released(&r.dst, r.dport, ready);
        }
    }
}
