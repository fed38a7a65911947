//! The connection table's side of a packet of a tracked flow: the TCP
//! segment taken into the entry's state ([`Lb::track_tcp`]), whether a
//! packet may change that state at all ([`Lb::verified`]), and forgetting
//! an entry ([`Lb::forget`], which gives back what it held).

use conf::counters::Counter;

use super::classify::flags_of;
use super::count_drop;
use super::flow::{Ending, FLOW_PP, FLOW_SP};
use super::release::Release;
use super::Lb;
use crate::conntrack::{Dir, EntryId, Refused, RstFit, State, TcpSeg};
use crate::counters::Counters;
use crate::verdict::Verdict;
use crate::wire::{NicChecksum, Parsed, TcpFlags};

/// The TCP fields of a parsed segment the connection table tracks.
#[inline(always)]
pub(super) fn seg_of(frame: &[u8], p: &Parsed) -> TcpSeg {
    let payload = p.l3_end.saturating_sub(p.payload_offset);
    frame
        .get(p.l4_offset..)
        .and_then(|tcp| TcpSeg::parse(tcp, payload))
        .unwrap_or(TcpSeg::flags(flags_of(p)))
}

impl Lb {
    /// Takes a TCP segment of a tracked flow into its entry's state. A RST
    /// that misses the receiver's next expected number changes nothing: in
    /// its window it goes on to the endpoint (counted), outside it is
    /// dropped (the verdict returned).
    #[inline(always)]
    pub(super) fn track_tcp(
        &mut self,
        id: EntryId,
        dir: Dir,
        seg: &TcpSeg,
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let was_open =
            seg.flags & TcpFlags::RST.0 != 0 && self.conntrack.get(id).state() != State::Closed;
        match self.conntrack.update_tcp(id, dir, seg, self.now_ms) {
            Ok(State::Closed) if was_open => {
                counters.inc(Counter::TcpRstAccepted);
                self.note_closed(id);
            }
            Ok(_) if seg.flags & TcpFlags::FIN.0 != 0 => self.note_closed(id),
            Ok(_) => {}
            Err(Refused::Rst(RstFit::InWindow)) => counters.inc(Counter::TcpRstNotExact),
            Err(Refused::Rst(_)) => {
                return Some(count_drop(counters, Counter::DropTcpRstOutOfWindow))
            }
            // Forwarded as it is: the backend answers a guess with a RST.
            Err(Refused::HandshakeAck) => counters.inc(Counter::TcpHandshakeAckWrong),
        }
        None
    }

    /// Whether a packet of tracked flow `id` may change its state: only
    /// once its TCP or UDP checksum verifies (the NIC's word, else
    /// computed). One that fails is counted; it goes on as it would have
    /// (the endpoint discards it), changing nothing, except on a PROXY
    /// or SYN-proxied flow, whose header, hold or sequence shift a segment
    /// may move: there it
    /// is dropped (`Err`, the verdict).
    ///
    /// A steady segment (an established flow's, without SYN, FIN or RST,
    /// PROXY flows past their header) only refreshes the deadline and moves
    /// the window edges within what the window allows, as any in-window
    /// segment would: it is trusted unless the NIC found it bad, as the
    /// express lane, which takes exactly these, does. So the software
    /// check costs only the segments that open, close or shift a flow.
    #[inline]
    pub(super) fn verified(
        &self,
        id: EntryId,
        frame: &[u8],
        p: &Parsed,
        counters: &mut Counters,
    ) -> Result<bool, Verdict> {
        let e = self.conntrack.get(id);
        let steady = match e.state() {
            State::Established => {
                flags_of(p) & (TcpFlags::FIN.0 | TcpFlags::SYN.0 | TcpFlags::RST.0) == 0
            }
            State::Udp => true,
            _ => false,
        } && (!e.value.pp_on() || e.value.proxy.steady());
        if (steady && p.nic_l4_checksum != NicChecksum::Bad) || p.l4_checksum_ok(frame) {
            return Ok(true);
        }
        if self.conntrack.get(id).value.bits & (FLOW_PP | FLOW_SP) != 0 {
            return Err(count_drop(counters, Counter::DropBadL4Checksum));
        }
        counters.inc(Counter::BadL4ChecksumIgnored);
        Ok(false)
    }

    /// Removes entry `id` for `ending`, releasing what it held.
    pub(super) fn forget(&mut self, id: EntryId, ending: Ending) {
        if let Some(e) = self.conntrack.remove(id) {
            Release::of(
                self.vip_stats,
                self.backend_stats,
                &mut self.local_ports,
                &self.state_timeouts_ms,
                self.records.as_mut(),
                &self.admission,
                &mut self.persist,
            )
            .ending(ending)
            .entry(id, &e);
        }
    }
}
