//! The packet's translation: checksum deltas fixed per flow, the client's
//! packet rewritten for its backend, PROXY protocol v2 on the way, and ICMP
//! errors about a flow turned towards its other end.

use conf::counters::Counter;
use conf::Mode;

use super::classify::key_of;
use super::count_drop;
use super::FlowRec;
use super::Lb;
use crate::conntrack::{Dir, EntryId, FlowKey};
use crate::counters::Counters;
use crate::nat;
use crate::port::PortInfo;
use crate::ppv2::{self};
use crate::tstamp;
use crate::verdict::Verdict;
use crate::wire::Parsed;

/// The checksum changes of a flow's rewrites (see [`FlowRec::fwd`]).
pub(super) fn flow_deltas(
    mode: Mode,
    orig: &FlowKey,
    reply: &FlowKey,
) -> (nat::Deltas, nat::Deltas) {
    let (v4, src, dst) = (!orig.v6, (&orig.src, orig.sport), (&orig.dst, orig.dport));
    let to_backend = (&reply.src, reply.sport);
    match mode {
        Mode::FullNat => nat::deltas_both(v4, src, dst, (&reply.dst, reply.dport), to_backend),
        // The backend's packets to the client: from the VIP.
        Mode::Dnat => (
            nat::deltas(v4, src, dst, None, Some(to_backend)),
            nat::deltas(v4, to_backend, (&reply.dst, reply.dport), Some(dst), None),
        ),
    }
}

/// Rewrites a client's packet for its backend: the reply key reversed
/// (DNAT keeps the client's source).
#[inline(always)]
pub(super) fn translate_client(
    frame: &mut [u8],
    p: &Parsed,
    rec: &FlowRec,
    orig: &FlowKey,
    reply: &FlowKey,
) -> Result<(), Counter> {
    if orig.v6 != reply.v6 {
        return Err(Counter::DropSlowpathUnhandled);
    }
    let src = match rec.mode {
        Mode::FullNat => Some((&reply.dst, reply.dport)),
        Mode::Dnat => None,
    };
    nat::forward(frame, p, src, Some((&reply.src, reply.sport))).map_err(forward_drop)?;
    if rec.ts_on() {
        if let Some(seg) = frame.get_mut(p.l4_offset..) {
            tstamp::shift_tsval(seg, rec.ts_delta);
        }
    }
    Ok(())
}

/// The counter of a refused rewrite.
#[cold]
pub(super) fn forward_drop(e: nat::ForwardError) -> Counter {
    match e {
        nat::ForwardError::TtlExpired => Counter::DropTtlExceeded,
        nat::ForwardError::Nat(_) => Counter::DropSlowpathUnhandled,
    }
}

impl Lb {
    /// PROXY protocol v2 on a client segment about to go to the backend
    /// (see [`ppv2::flow`]); the flow's state is updated in place.
    pub(super) fn pp_client(
        &mut self,
        id: EntryId,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        port: usize,
        counters: &mut Counters,
    ) -> Verdict {
        let e = self.conntrack.get_mut(id);
        let orig = e.orig();
        let ends = ppv2::Ends {
            client: (orig.src_ip(), orig.sport),
            vip: (orig.dst_ip(), orig.dport),
            conn_id: e.value.conn_id,
        };
        let r = e.value.pp.client_segment(
            &ends,
            buf,
            len,
            p,
            port,
            id,
            self.now_ms,
            &mut self.pp,
            counters,
        );
        match r {
            Ok(len) => Verdict::Send { port, len },
            Err(c) => count_drop(counters, c),
        }
    }

    /// ICMP errors (unreachable, frag-needed, packet-too-big, time exceeded)
    /// about a tracked flow go to the other end of that flow, translated.
    pub(super) fn icmp_error(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        ports: &[PortInfo],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let inner = nat::icmp_error_inner(frame, p)?;
        // The quoted packet is one we sent; its reverse is what we received.
        let key = key_of(inner.dst, inner.src, inner.dport, inner.sport, inner.proto);
        let (id, dir) = self.conntrack.lookup(&key, self.now_ms)?;
        let e = self.conntrack.get(id);
        let rec = e.value;
        let (orig, reply) = (e.orig(), e.reply());
        let client = (orig.src_ip(), orig.sport);
        let vip = (orig.dst_ip(), orig.dport);
        let backend = (reply.src_ip(), reply.sport);
        // Where the backend's packets go: the local address (full-NAT) or the client (DNAT).
        let local = (reply.dst_ip(), reply.dport);
        counters.inc(Counter::IcmpErrorsTranslated);
        match dir {
            // We sent the quoted packet towards the backend: tell the client.
            Dir::Reply => {
                let outer_src = match rec.mode {
                    Mode::FullNat => Some(vip.0),
                    Mode::Dnat => None,
                };
                let ok = nat::rewrite_icmp_error(
                    frame,
                    p,
                    outer_src,
                    Some(client.0),
                    Some(client),
                    Some(vip),
                );
                if ok.is_err() || nat::decrement_ttl(frame, p).is_err() {
                    return Some(count_drop(counters, Counter::DropSlowpathUnhandled));
                }
                let out = rec.client_port as usize;
                let port = ports.get(out)?;
                nat::set_macs(frame, port.mac, rec.client_mac);
                Some(Verdict::Send {
                    port: out,
                    len: frame.len(),
                })
            }
            // We sent the quoted packet towards the client: tell the backend.
            Dir::Original => {
                let outer_src = match rec.mode {
                    Mode::FullNat => Some(local.0),
                    Mode::Dnat => None,
                };
                let ok = nat::rewrite_icmp_error(
                    frame,
                    p,
                    outer_src,
                    Some(backend.0),
                    Some(backend),
                    Some(local),
                );
                if ok.is_err() || nat::decrement_ttl(frame, p).is_err() {
                    return Some(count_drop(counters, Counter::DropSlowpathUnhandled));
                }
                Some(self.send_to_hop(frame, rec.backend_port as usize, rec.hop, ports, counters))
            }
        }
    }
}
