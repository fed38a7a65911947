//! The connection table's side of a packet: what a worker remembers per
//! flow ([`FlowRec`]), the lookup of a client's or a backend's packet,
//! and forgetting an entry (giving back its counts and local tuple).

use conf::counters::Counter;
use conf::state::{FlowStat, FlowStats};
use conf::Mode;

use super::admit::{Admission, FLOW_COUNTED};
use super::classify::{flags_of, to16};
use super::count_drop;
use super::records::{Ending, FlowRecords};
use super::rewrite::{forward_drop, to_backend, to_client, FromBackend, Sums};
use super::select::Picked;
use super::Lb;
use super::{Out, Rx};
use crate::conntrack::{Dir, EntryId, FlowKey, Refused, RstFit, State, TcpSeg};
use crate::counters::Counters;
use crate::local_ports::LocalPorts;
use crate::nat;
use crate::neigh::Slot;
use crate::port::PortDesc;
use crate::ppv2::PpFlow;
use crate::verdict::Verdict;
use crate::wire::{ip_proto, NicChecksum, Parsed, TcpFlags};

/// What a worker remembers about one connection, next to the entry's two
/// keys: the original key is the client's packets as they arrive (client ->
/// VIP), the reply key the backend's (backend -> local address for full-NAT,
/// backend -> client for DNAT). The addresses and ports a packet is
/// translated to are those of the other direction's key, so they are not
/// stored twice.
///
/// What every packet needs comes first (32 bytes, in the entry's second
/// cache line with the deadline and the end of the keys); the PROXY
/// protocol state and the connection id, which only PROXY flows read,
/// come after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct FlowRec {
    /// Statistics slots of the VIP and the backend (see `FlowStats`).
    pub vip_slot: u32,
    pub backend_slot: u32,
    /// What full-NAT adds to the client's TCP timestamps (TSval) on the
    /// way to the backend, and takes off the backend's echoes (TSecr), when
    /// [`FLOW_TS`] is set: see [`crate::local_ports`].
    pub ts_delta: u32,
    /// The backend's next hop in the worker's neighbour table.
    pub hop: Slot,
    /// Checksum changes of the client's packets' rewrite (to the reply key
    /// reversed) and of the backend's (to the original key reversed, for
    /// full-NAT), fixed with the keys.
    pub fwd: nat::Deltas,
    pub rev: nat::Deltas,
    pub client_mac: [u8; 6],
    /// Where the client's packets came from: reply out of this port to this MAC.
    pub client_port: u8,
    /// The data port the backend is reached through.
    pub backend_port: u8,
    pub mode: Mode,
    /// [`FLOW_PP`], [`FLOW_TS`], [`FLOW_TS_ECHOED`].
    pub bits: u8,
    /// This connection's id: worker number in the top 16 bits, the
    /// worker's connection counter below (the PPv2 `UNIQUE_ID`).
    pub conn_id: u64,
    /// PROXY protocol v2 state (off unless the VIP has it).
    pub proxy: PpFlow,
}

/// `FlowRec::bits`: `proxy.is_on()`, fixed when the connection starts.
pub const FLOW_PP: u8 = 1;

/// The client's SYN carried timestamps and `ts_delta` translates them.
pub const FLOW_TS: u8 = 2;

/// The backend's SYN-ACK carried timestamps too: the connection uses them,
/// so its local tuple may be reused soon after it closes (RFC 6191).
pub const FLOW_TS_ECHOED: u8 = 4;

/// A SYN proxy connection: the client's handshake was with border's
/// cookie, the backend's numbers are spliced (`lb/synproxy.rs`).
pub const FLOW_SP: u8 = 8;

impl FlowRec {
    #[inline(always)]
    pub fn pp_on(&self) -> bool {
        self.bits & FLOW_PP != 0
    }

    #[inline(always)]
    pub fn ts_on(&self) -> bool {
        self.bits & FLOW_TS != 0
    }

    /// Whether the local tuple of this connection (its `reply` key) may be
    /// reused soon after it ends: it used timestamps both ways, or it is
    /// UDP (no TIME_WAIT).
    pub fn rests_briefly(&self, reply: &FlowKey) -> bool {
        reply.proto != ip_proto::TCP
            || self.bits & (FLOW_TS | FLOW_TS_ECHOED) == FLOW_TS | FLOW_TS_ECHOED
    }
}

impl Default for FlowRec {
    fn default() -> Self {
        FlowRec {
            vip_slot: u32::MAX,
            backend_slot: u32::MAX,
            ts_delta: 0,
            hop: Slot::NONE,
            fwd: nat::Deltas::default(),
            rev: nat::Deltas::default(),
            client_mac: [0; 6],
            client_port: 0,
            backend_port: 0,
            mode: Mode::FullNat,
            bits: 0,
            conn_id: 0,
            proxy: PpFlow::default(),
        }
    }
}

/// A sequence or acknowledgement number of the client's sequence space as
/// the backend sees it (shifted by a PROXY header) taken back to the
/// client's numbering, as `PpFlow::map_backend` does: numbers past the
/// header move back by its length, numbers inside it map to the client's
/// first data byte. Unchanged for flows without a header sent.
#[inline(always)]
pub(super) fn client_space(rec: &FlowRec, n: u32) -> u32 {
    let pp = &rec.proxy;
    if !rec.pp_on() || !pp.committed() || !pp.sent() {
        return n;
    }
    let l = u32::from(pp.hdr_len);
    let c1 = pp.client_isn.wrapping_add(1);
    let into = n.wrapping_sub(c1) as i32;
    if into <= 0 {
        n
    } else if into as u32 <= l {
        c1
    } else {
        n.wrapping_sub(l)
    }
}

/// The TCP fields of a parsed segment the connection table tracks.
#[inline(always)]
pub(super) fn seg_of(frame: &[u8], p: &Parsed) -> TcpSeg {
    let payload = p.l3_end.saturating_sub(p.payload_offset);
    frame
        .get(p.l4_offset..)
        .and_then(|tcp| TcpSeg::parse(tcp, payload))
        .unwrap_or(TcpSeg::flags(flags_of(p)))
}

/// Counts a forwarded packet of `len` bytes of the flow `rec` in its VIP's
/// and its backend's statistics (the one place a packet is counted there).
#[inline(always)]
pub(super) fn count_forwarded(
    vip_stats: FlowStats<'static>,
    backend_stats: FlowStats<'static>,
    rec: &FlowRec,
    len: usize,
) {
    vip_stats.add(rec.vip_slot, FlowStat::Packets, 1);
    vip_stats.add(rec.vip_slot, FlowStat::Bytes, len as u64);
    backend_stats.add(rec.backend_slot, FlowStat::Packets, 1);
    backend_stats.add(rec.backend_slot, FlowStat::Bytes, len as u64);
}

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
    ) -> Self {
        Release {
            vip_stats,
            backend_stats,
            local_ports,
            state_timeouts_ms,
            records,
            admission,
            ending: Ending::AsItsState,
        }
    }

    /// The entries this releases go for `ending` (default: as their state says).
    pub(super) fn ending(mut self, ending: Ending) -> Self {
        self.ending = ending;
        self
    }

    pub(super) fn entry(&mut self, id: EntryId, e: &crate::conntrack::Entry<FlowRec>) {
        let v = &e.value;
        if v.bits & FLOW_COUNTED != 0 {
            self.admission.release(v.bits, v.vip_slot, v.backend_slot);
        }
        self.vip_stats
            .sub(v.vip_slot, FlowStat::ActiveConnections, 1);
        self.backend_stats
            .sub(v.backend_slot, FlowStat::ActiveConnections, 1);
        let last_seen = e.last_seen(self.state_timeouts_ms);
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
        const RST: u8 = 0x04;
        let was_open = seg.flags & RST != 0 && self.conntrack.get(id).state() != State::Closed;
        match self.conntrack.update_tcp(id, dir, seg, self.now_ms) {
            Ok(State::Closed) if was_open => {
                counters.inc(Counter::TcpRstAccepted);
                self.note_closed(id);
            }
            Ok(_) if seg.flags & 0x01 != 0 => self.note_closed(id),
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
    fn verified(
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

    /// A client's packet to VIP `vi`, of the flow `key`.
    #[inline(always)]
    pub(super) fn client_packet(
        &mut self,
        rx: Rx<'_>,
        vi: u32,
        key: &FlowKey,
        out: Out<'_>,
    ) -> Verdict {
        let (buf, len, p, in_port) = rx.parts();
        let Out { ports, counters } = out;
        if !p.tcp_flags_valid {
            return count_drop(counters, Counter::DropBadTcpFlags);
        }
        // Before any state: a packet that cannot be forwarded creates no
        // entry, takes no local port and counts no connection.
        if p.ttl <= 1 {
            return count_drop(counters, Counter::DropTtlExceeded);
        }
        let flags = flags_of(p);
        let tcp = key.proto == ip_proto::TCP;
        let syn_only = tcp && flags & 0x12 == 0x02;
        let now = self.now_ms;
        let id = match self.conntrack.lookup(key, now) {
            Some((id, Dir::Original)) => {
                if syn_only && self.conntrack.is_closing(id) {
                    // A new connection on the tuple of a closing one.
                    let closing = Some(id);
                    let rx = Rx {
                        buf,
                        len,
                        p,
                        in_port,
                    };
                    return self.client_miss(rx, vi, key, closing, Out { ports, counters });
                }
                id
            }
            _ => {
                let rx = Rx {
                    buf,
                    len,
                    p,
                    in_port,
                };
                return self.client_miss(rx, vi, key, None, Out { ports, counters });
            }
        };
        let verified = match self.verified(id, buf.get(..len).unwrap_or(&[]), p, counters) {
            Ok(v) => v,
            Err(v) => return v,
        };
        // SYN proxy: held until the backend's handshake, then spliced.
        if verified && self.conntrack.get(id).value.bits & FLOW_SP != 0 {
            let out = Out {
                ports,
                counters: &mut *counters,
            };
            if let Some(v) = self.syn_proxy_client(id, vi, buf, len, p, out) {
                return v;
            }
        }
        // Its backend went down and the VIP resets such flows (a RST ends
        // the connection by itself: it goes on as usual).
        if verified
            && self.tables.as_ref().is_some_and(|t| t.reset_pending)
            && flags & 0x04 == 0
            && self.must_reset(id)
        {
            let rx = Rx {
                buf,
                len,
                p,
                in_port,
            };
            return self.reset_client(rx, vi, key, id, Out { ports, counters });
        }
        // An established flow.
        if verified && tcp {
            let seg = seg_of(buf, p);
            if let Some(v) = self.track_tcp(id, Dir::Original, &seg, counters) {
                return v;
            }
        } else if verified {
            self.conntrack.touch(id, now);
        }
        let Some(frame) = buf.get_mut(..len) else {
            return count_drop(counters, Counter::DropSlowpathUnhandled);
        };
        let e = self.conntrack.get(id);
        let at = nat::Headers::Parsed(p);
        if let Err(c) = to_backend(frame, at, &e.value, e.orig(), e.reply(), Sums::Packet) {
            return count_drop(counters, c);
        }
        let rec = e.value;
        self.client_sent(buf, len, p, Some(id), &rec, Out { ports, counters })
    }

    /// A client's packet of no established flow: a new flow, or a SYN on
    /// the `closing` entry of its tuple.
    #[inline(never)]
    pub(super) fn client_miss(
        &mut self,
        rx: Rx<'_>,
        vi: u32,
        key: &FlowKey,
        closing: Option<EntryId>,
        out: Out<'_>,
    ) -> Verdict {
        let (buf, len, p, in_port) = rx.parts();
        let Out { ports, counters } = out;
        let tcp = key.proto == ip_proto::TCP;
        let flags = flags_of(p);
        let syn_only = tcp && flags & 0x12 == 0x02;
        // A RST of no connection we know ends nothing: no flow for it, and
        // no backend pays for a RST flood.
        if tcp && flags & TcpFlags::RST.0 != 0 {
            return count_drop(counters, Counter::DropTcpRstNoConntrack);
        }
        // Nothing is created, replaced or taken for a packet the endpoint
        // would discard (a spoofed handshake's cheapest trick). A SYN
        // proxy VIP checks its SYNs and cookie ACKs itself (below).
        let checksum_ok = |buf: &[u8]| p.l4_checksum_ok(buf.get(..len).unwrap_or(&[]));
        if let Some(id) = closing {
            if !checksum_ok(buf) {
                return count_drop(counters, Counter::DropBadL4Checksum);
            }
            self.forget(id, Ending::AsItsState);
        }
        // SYN proxy: a SYN answered with a cookie, a cookie ACK opening.
        if tcp {
            let rx = Rx {
                buf: &mut *buf,
                len,
                p,
                in_port,
            };
            let out = Out {
                ports,
                counters: &mut *counters,
            };
            if let Some(v) = self.syn_proxy_miss(rx, vi, key, out) {
                return v;
            }
        }
        if !checksum_ok(buf) {
            return count_drop(counters, Counter::DropBadL4Checksum);
        }
        let Some(frame) = buf.get_mut(..len) else {
            return count_drop(counters, Counter::DropSlowpathUnhandled);
        };
        // Mid-stream packet of a connection this worker never saw
        // (restart, table full earlier): DNAT can forward it where
        // Maglev sends it; full-NAT has no source port to use. On a PROXY
        // VIP nothing may pass: our header can no longer go first.
        if tcp && !syn_only {
            let (full_nat, proxy) = self
                .tables
                .as_ref()
                .and_then(|t| t.vips.get(vi as usize))
                .map_or((false, false), |v| {
                    (v.mode == Mode::FullNat, v.proxy_protocol.enabled)
                });
            if proxy {
                return self.refuse_mid_stream(frame, p, in_port, ports, counters);
            }
            if full_nat {
                return count_drop(counters, Counter::DropNoConntrack);
            }
        }
        let picked = match self.new_flow(vi, key, in_port, frame, counters) {
            Ok(picked) => picked,
            Err(v) => return v,
        };
        // The client's packet becomes the reply key reversed: from the
        // local address (full-NAT) or the client (DNAT) to the backend.
        let (rec, id) = match &picked {
            Picked::Tracked(id) => {
                if tcp {
                    // Its first segment: where its sequence space starts
                    // (no RST gets here: it starts nothing).
                    let seg = seg_of(frame, p);
                    let _ = self
                        .conntrack
                        .update_tcp(*id, Dir::Original, &seg, self.now_ms);
                }
                let translate = self
                    .tables
                    .as_ref()
                    .and_then(|t| t.vips.get(vi as usize))
                    .is_some_and(|v| v.translate_timestamps);
                if translate {
                    self.start_timestamps(*id, frame, p);
                }
                let e = self.conntrack.get(*id);
                let at = nat::Headers::Parsed(p);
                if let Err(c) = to_backend(frame, at, &e.value, e.orig(), e.reply(), Sums::Packet) {
                    return count_drop(counters, c);
                }
                (e.value, Some(*id))
            }
            Picked::Stateless(rec, reply) => {
                let at = nat::Headers::Parsed(p);
                if let Err(c) = to_backend(frame, at, rec, key, reply, Sums::Packet) {
                    return count_drop(counters, c);
                }
                (*rec, None)
            }
        };
        self.client_sent(buf, len, p, id, &rec, Out { ports, counters })
    }

    /// A packet from a backend: to a full-NAT local address (`to_local`) or,
    /// for DNAT, to the client.
    /// `rx.buf` is the frame, without room to grow.
    #[inline(always)]
    pub(super) fn backend_packet(
        &mut self,
        rx: Rx<'_>,
        key: &FlowKey,
        out: Out<'_>,
        to_local: bool,
    ) -> Verdict {
        let Rx {
            buf: frame,
            p,
            in_port,
            ..
        } = rx;
        let Out { ports, counters } = out;
        if p.ttl <= 1 {
            return count_drop(counters, Counter::DropTtlExceeded);
        }
        let now = self.now_ms;
        let id = match self.conntrack.lookup(key, now) {
            Some((id, Dir::Reply)) => {
                // Only the backend sends its side of the flow, and it is
                // reached by one port: the same packet from elsewhere is
                // a spoofer's (it could acknowledge a PROXY header).
                if usize::from(self.conntrack.get(id).value.backend_port) != in_port {
                    return count_drop(counters, Counter::DropReplyWrongPort);
                }
                let verified = match self.verified(id, frame, p, counters) {
                    Ok(v) => v,
                    Err(v) => return v,
                };
                // As for the client's packets: the backend's connection
                // to a down backend is reset.
                if verified
                    && self.tables.as_ref().is_some_and(|t| t.reset_pending)
                    && flags_of(p) & 0x04 == 0
                    && self.must_reset(id)
                {
                    return self.reset_backend(frame, p, in_port, id, ports, counters);
                }
                // SYN proxy: the backend's SYN-ACK splices, unsent.
                if verified && self.conntrack.get(id).value.bits & FLOW_SP != 0 {
                    if let Some(v) = self.syn_proxy_backend(id, frame, p, ports, counters) {
                        return v;
                    }
                }
                if !verified {
                    // Forwarded as it is, the entry untouched.
                } else if key.proto == ip_proto::TCP {
                    let mut seg = seg_of(frame, p);
                    seg.ack = client_space(&self.conntrack.get(id).value, seg.ack);
                    if let Some(v) = self.track_tcp(id, Dir::Reply, &seg, counters) {
                        return v;
                    }
                } else {
                    self.conntrack.touch(id, now);
                }
                id
            }
            _ if to_local => {
                let owner = self.owner(key.dport);
                if owner != self.worker && owner < self.workers {
                    return Verdict::Handoff { worker: owner };
                }
                return count_drop(counters, Counter::DropNoConntrack);
            }
            _ => return self.dnat_stateless_reply(frame, p, key, in_port, ports, counters),
        };
        let len = frame.len();
        // The backend's packet becomes the original key reversed: from the
        // VIP to the client (full-NAT; DNAT packets already go to the client).
        let e = self.conntrack.get_mut(id);
        let from = FromBackend {
            key,
            flags: flags_of(p),
            to_local,
        };
        let at = nat::Headers::Parsed(p);
        if let Err(c) = to_client(frame, at, e, from, Sums::Packet) {
            return count_drop(counters, c);
        }
        let rec = &mut e.value;
        count_forwarded(self.vip_stats, self.backend_stats, rec, len);
        if let Some(r) = self.records.as_mut() {
            let payload = p.l3_end > p.payload_offset;
            r.count(id, Dir::Reply, len.saturating_sub(p.l3_offset), payload);
        }
        if rec.pp_on() {
            if let Err(c) = rec.proxy.backend_segment(frame, p, counters) {
                return count_drop(counters, c);
            }
        }
        if rec.bits & FLOW_SP != 0 {
            self.syn_proxy.to_client(id, frame, p);
        }
        let out = rec.client_port as usize;
        let Some(port) = ports.get(out) else {
            return count_drop(counters, Counter::DropNoRoute);
        };
        nat::set_macs(frame, port.mac, rec.client_mac);
        Verdict::Send { port: out, len }
    }

    /// A DNAT reply this worker has no entry for (the client's packets
    /// arrive at another worker): translate it by the backend's unique VIP.
    pub(super) fn dnat_stateless_reply(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        key: &FlowKey,
        in_port: usize,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(tables) = self.tables.as_ref() else {
            return count_drop(counters, Counter::DropNotLocal);
        };
        let vi = match tables
            .dnat_reverse
            .get(&(key.src_ip(), key.sport, key.proto))
        {
            Some(Some(vi)) => *vi,
            Some(None) => return count_drop(counters, Counter::DropNoConntrack),
            None => return count_drop(counters, Counter::DropNotLocal),
        };
        let Some(vip) = tables.vips.get(vi as usize) else {
            return count_drop(counters, Counter::DropNotLocal);
        };
        // Only the backend can send its replies: they come by the port
        // that reaches it. The same packet from elsewhere would leave
        // from the VIP's address on a spoofer's behalf.
        if tables.routes.route(key.src_ip()).map(|(port, _)| port) != Some(in_port) {
            return count_drop(counters, Counter::DropDnatReplyWrongPort);
        }
        let (vaddr, vport, slot) = (to16(vip.addr), vip.port, vip.stat_slot);
        let family_ok = vip.addr.is_ipv6() == key.v6;
        let Some((out, hop)) = tables.routes.route(key.dst_ip()) else {
            return count_drop(counters, Counter::DropNoRoute);
        };
        let len = frame.len();
        if !family_ok {
            return count_drop(counters, Counter::DropSlowpathUnhandled);
        }
        let r = nat::Rewrite {
            headers: nat::Headers::Parsed(p),
            src: Some((&vaddr, vport)),
            dst: None,
            deltas: None,
        };
        if let Err(err) = nat::forward(frame, r) {
            return count_drop(counters, forward_drop(err));
        }
        counters.inc(Counter::DnatStatelessReplies);
        self.vip_stats.add(slot, FlowStat::Packets, 1);
        self.vip_stats.add(slot, FlowStat::Bytes, len as u64);
        self.send_via(frame, out, hop, ports, counters)
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
            )
            .ending(ending)
            .entry(id, &e);
        }
    }
}
