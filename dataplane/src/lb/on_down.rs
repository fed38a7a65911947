//! Flows to a backend health took down, on a VIP with `on_down = "reset"`,
//! or to a backend the operator killed: TCP answered with a RST, UDP
//! forgotten.

use conf::counters::Counter;

use super::classify::{flags_of, syn_only};
use super::count_drop;
use super::flow::Ending;
use super::key::{ResetKey, ResetWhy};
use super::Lb;
use super::{Out, Rx};
use crate::conntrack::{EntryId, FlowKey};
use crate::counters::Counters;
use crate::port::PortDesc;
use crate::verdict::Verdict;
use crate::wire::{ip_proto, Parsed, TcpFlags};

impl Lb {
    /// Why the flow of entry `id` is reset, if the adopted generation
    /// resets the flows of its backend.
    #[inline(never)]
    pub(super) fn reset_why(&self, id: EntryId) -> Option<ResetWhy> {
        let t = self.tables.as_ref()?;
        let e = self.conntrack.get(id);
        t.resets(&ResetKey::of_flow(e.orig(), e.reply()))
    }

    /// A client's packet of flow `id`, whose backend went down on a VIP
    /// with `on_down = "reset"` or was killed. TCP: answered with a RST
    /// from the VIP (built from the packet itself, so in the client's
    /// sequence space) and the entry removed; a SYN instead starts a new
    /// connection. UDP: the flow is forgotten and the datagram picks a
    /// backend again (a killed backend's client loses no datagram).
    #[cold]
    #[inline(never)]
    pub(super) fn reset_client(
        &mut self,
        rx: Rx<'_>,
        vi: u32,
        key: &FlowKey,
        (id, why): (EntryId, ResetWhy),
        out: Out<'_>,
    ) -> Verdict {
        if key.proto != ip_proto::TCP || syn_only(flags_of(rx.p)) {
            self.forget(id, Ending::Reset);
            out.counters.inc(forgot_counter(why));
            let hash = self.conntrack.hash_of(key);
            return self.client_miss(rx, vi, (key, hash), None, out);
        }
        let (buf, len, p, in_port) = rx.parts();
        let Out { ports, counters } = out;
        let Some(frame) = buf.get_mut(..len) else {
            return count_drop(counters, Counter::DropSlowpathUnhandled);
        };
        self.send_rst(frame, p, in_port, (id, why), ports, counters)
    }

    /// A backend's packet of flow `id`, whose backend went down on a VIP
    /// with `on_down = "reset"` or was killed. TCP: answered with a RST to
    /// the backend from the address it knows (the full-NAT local address,
    /// or the client for DNAT), built from the packet itself (so in the
    /// backend's sequence space, PROXY header included), and the entry
    /// removed. UDP: the flow is forgotten, the datagram dropped.
    #[cold]
    #[inline(never)]
    pub(super) fn reset_backend(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        in_port: usize,
        (id, why): (EntryId, ResetWhy),
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Verdict {
        if p.l4_proto != ip_proto::TCP {
            self.forget(id, Ending::Reset);
            counters.inc(forgot_counter(why));
            return count_drop(counters, Counter::DropNoConntrack);
        }
        self.send_rst(frame, p, in_port, (id, why), ports, counters)
    }

    /// A client's segment to a PROXY VIP of a connection with no entry
    /// begun by a SYN here (picked up mid-stream after a restart or an
    /// ECMP move, or its entry gone): our header cannot go first any more,
    /// so the segment is dropped and, unless it is a RST, answered with one
    /// from the VIP (built from the segment, so in the client's sequence
    /// space): the connection cannot go on, and the client learns it now
    /// rather than after its retransmissions.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse_mid_stream(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        in_port: usize,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Verdict {
        let c = Counter::DropPpMidStream;
        counters.inc(c);
        if flags_of(p) & TcpFlags::RST.0 != 0 {
            return Verdict::Drop(c);
        }
        let Some(port) = ports.get(in_port) else {
            return Verdict::Drop(c);
        };
        match crate::reset::rst_reply(frame, p, port.mac) {
            Ok(len) => Verdict::Send { port: in_port, len },
            Err(_) => Verdict::Drop(c),
        }
    }

    /// Turns `frame` into the RST that answers it, back out of `in_port`,
    /// and removes entry `id`.
    pub(super) fn send_rst(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        in_port: usize,
        (id, why): (EntryId, ResetWhy),
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Verdict {
        self.forget(id, Ending::Reset);
        // A killed flow is counted once it is gone, RST sent or not: the
        // count is of connections, not of RSTs.
        if why == ResetWhy::Killed {
            counters.inc(Counter::FlowsKilled);
        }
        let Some(port) = ports.get(in_port) else {
            return count_drop(counters, Counter::DropNoRoute);
        };
        match crate::reset::rst_reply(frame, p, port.mac) {
            Ok(len) => {
                if why == ResetWhy::Down {
                    counters.inc(Counter::ResetBackendDown);
                }
                Verdict::Send { port: in_port, len }
            }
            Err(_) => count_drop(counters, Counter::DropSlowpathUnhandled),
        }
    }
}

/// The counter of a UDP flow (or a TCP tuple opened again by a SYN)
/// forgotten because its backend's flows are reset.
fn forgot_counter(why: ResetWhy) -> Counter {
    match why {
        ResetWhy::Down => Counter::ForgotBackendDown,
        ResetWhy::Killed => Counter::FlowsKilled,
    }
}
