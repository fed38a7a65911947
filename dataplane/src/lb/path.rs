//! The general path: a packet `parse_frame` parsed, once [`Lb::handle`]
//! (`classify`) knows whose it is, through the stages in their order: a
//! client's ([`Lb::client_packet`], a new flow in [`Lb::client_miss`]) and
//! a backend's ([`Lb::backend_packet`], [`Lb::dnat_stateless_reply`]) are
//! looked up and tracked (`track`), given a backend if new (`select`),
//! translated (`rewrite`) and sent on (`emit`). The express lane
//! (`express.rs`) is the other path, for established flows without a parse.

use conf::counters::Counter;
use conf::state::FlowStat;
use conf::Mode;

use super::classify::{flags_of, syn_only};
use super::count_drop;
use super::dsr::{dsr_entry, DsrEnds};
use super::emit::over_mtu;
use super::flow::{client_space, count_forwarded, Ending, FLOW_SP};
use super::key::to16;
use super::rewrite::{forward_drop, to_backend, to_client, FromBackend, Sums};
use super::select::Picked;
use super::track::seg_of;
use super::Lb;
use super::{Out, Rx};
use crate::conntrack::{Dir, EntryId, FlowKey, KeyHash};
use crate::counters::Counters;
use crate::nat;
use crate::port::PortDesc;
use crate::verdict::Verdict;
use crate::wire::{ip_proto, Parsed, TcpFlags};

impl Lb {
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
        let opening = tcp && syn_only(flags);
        let now = self.now_ms;
        // Hashed in the lane's first pass if it took the frame as a new flow.
        let hash = match self.carry.as_ref().and_then(|c| c.hash_of(key)) {
            Some(h) => h,
            None => self.conntrack.hash_of(key),
        };
        let id = match self.conntrack.lookup_hashed(key, hash, now) {
            Some((id, Dir::Original)) => {
                if opening && self.conntrack.is_closing(id) {
                    // A new connection on the tuple of a closing one.
                    let closing = Some(id);
                    let rx = Rx {
                        buf,
                        len,
                        p,
                        in_port,
                    };
                    let out = Out { ports, counters };
                    return self.client_miss(rx, vi, (key, hash), closing, out);
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
                return self.client_miss(rx, vi, (key, hash), None, Out { ports, counters });
            }
        };
        let out = usize::from(self.conntrack.get(id).value.backend_port);
        if let Some(mtu) = over_mtu(ports, out, p) {
            return self.too_big(buf, len, p, in_port, mtu, Out { ports, counters });
        }
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
        // Its backend went down and the VIP resets such flows, or it was
        // killed (a RST ends the connection by itself: it goes on as usual).
        if verified
            && self.tables.as_ref().is_some_and(|t| t.reset_pending)
            && flags & TcpFlags::RST.0 == 0
        {
            if let Some(why) = self.reset_why(id) {
                let rx = Rx {
                    buf,
                    len,
                    p,
                    in_port,
                };
                return self.reset_client(rx, vi, key, (id, why), Out { ports, counters });
            }
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
        if self.conntrack.get(id).value.mode.is_dsr() {
            let (rec, backend) = dsr_entry(self.conntrack.get_mut(id), ports);
            let ends = DsrEnds {
                client: &key.src,
                sport: key.sport,
                backend: &backend,
            };
            let payload = p.l3_end > p.payload_offset;
            let out = Out { ports, counters };
            return self.dsr_sent(buf, len, p.l3_offset, (Some(id), payload), &rec, ends, out);
        }
        let e = self.conntrack.get(id);
        let at = nat::Headers::Parsed(p);
        if let Err(c) = to_backend(frame, at, &e.value, e.orig(), e.reply(), Sums::Packet) {
            return count_drop(counters, c);
        }
        let rec = e.value;
        self.client_sent(buf, len, p, Some(id), &rec, Out { ports, counters })
    }

    /// A client's packet of no established flow: a new flow, or a SYN on
    /// the `closing` entry of its tuple. `hash`: the key's
    /// [`crate::conntrack::Conntrack::hash_of`].
    #[inline(never)]
    pub(super) fn client_miss(
        &mut self,
        rx: Rx<'_>,
        vi: u32,
        (key, hash): (&FlowKey, KeyHash),
        closing: Option<EntryId>,
        out: Out<'_>,
    ) -> Verdict {
        let (buf, len, p, in_port) = rx.parts();
        let Out { ports, counters } = out;
        let tcp = key.proto == ip_proto::TCP;
        let flags = flags_of(p);
        let opening = tcp && syn_only(flags);
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
        // What of the VIP a new flow needs here, looked up once.
        let (syn_proxy, translate) = self
            .tables
            .as_ref()
            .and_then(|t| t.vips.get(vi as usize))
            .map_or((false, false), |v| {
                (v.syn_proxy != conf::SynProxy::Off, v.translate_timestamps)
            });
        // SYN proxy: a SYN answered with a cookie, a cookie ACK opening.
        if tcp && syn_proxy {
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
        if tcp && !opening {
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
        let picked = match self.new_flow(vi, (key, hash), in_port, frame, counters) {
            Ok(picked) => picked,
            Err(v) => return v,
        };
        // The client's packet becomes the reply key reversed: from the
        // local address (full-NAT) or the client (DNAT) to the backend.
        let (rec, id, backend) = match &picked {
            Picked::Tracked(id) => {
                // The next new flow's slot loads while this one is sent.
                self.conntrack.prefetch_next_slot();
                if tcp {
                    // Its first segment: where its sequence space starts
                    // (no RST gets here: it starts nothing).
                    let seg = seg_of(frame, p);
                    let _ = self.conntrack.open_tcp(*id, &seg, self.now_ms);
                }
                if translate {
                    self.start_timestamps(*id, frame, p);
                }
                let e = self.conntrack.get_mut(*id);
                if e.value.mode.is_dsr() {
                    let (rec, backend) = dsr_entry(e, ports);
                    (rec, Some(*id), backend)
                } else {
                    let at = nat::Headers::Parsed(p);
                    if let Err(c) =
                        to_backend(frame, at, &e.value, e.orig(), e.reply(), Sums::Packet)
                    {
                        return count_drop(counters, c);
                    }
                    (e.value, Some(*id), e.reply().src)
                }
            }
            Picked::Stateless => {
                let (rec, reply) = self.stateless;
                let at = nat::Headers::Parsed(p);
                if let Err(c) = to_backend(frame, at, &rec, key, &reply, Sums::Packet) {
                    return count_drop(counters, c);
                }
                (rec, None, reply.src)
            }
        };
        if rec.mode.is_dsr() {
            let ends = DsrEnds {
                client: &key.src,
                sport: key.sport,
                backend: &backend,
            };
            let payload = p.l3_end > p.payload_offset;
            let out = Out { ports, counters };
            return self.dsr_sent(buf, len, p.l3_offset, (id, payload), &rec, ends, out);
        }
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
                let out = usize::from(self.conntrack.get(id).value.client_port);
                if let Some(mtu) = over_mtu(ports, out, p) {
                    let len = frame.len();
                    return self.too_big(frame, len, p, in_port, mtu, Out { ports, counters });
                }
                let verified = match self.verified(id, frame, p, counters) {
                    Ok(v) => v,
                    Err(v) => return v,
                };
                // As for the client's packets: the backend's connection
                // to a down or killed backend is reset.
                if verified
                    && self.tables.as_ref().is_some_and(|t| t.reset_pending)
                    && flags_of(p) & TcpFlags::RST.0 == 0
                {
                    if let Some(why) = self.reset_why(id) {
                        let flow = (id, why);
                        return self.reset_backend(frame, p, in_port, flow, ports, counters);
                    }
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
            return count_drop(counters, nat::NatError::FamilyMismatch.counter());
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
}
