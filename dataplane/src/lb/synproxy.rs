//! The SYN proxy on a worker (`syn_proxy` per VIP; the sans-IO parts are
//! in [`crate::synproxy`]).
//!
//! 1. A client's SYN to a VIP whose `syn_proxy` is "always" (or "auto"
//!    while the switch is on) is answered with a cookie SYN-ACK out of the
//!    port it came by: no entry, nothing to a backend.
//! 2. A client's ACK with no entry whose acknowledgement proves a cookie
//!    (checksum verified) makes the entry as a SYN would (Maglev pick,
//!    full-NAT local tuple, PROXY state), is held, and turns into the SYN
//!    the backend gets: the client's ISN and the options from the cookie.
//! 3. Client segments before the backend's SYN-ACK are held
//!    ([`crate::synproxy::hold`]). The SYN-ACK is not sent on: it sets the
//!    splice ([`crate::synproxy::splice`]) and releases the held segments,
//!    the first of which (the client's ACK, translated) completes the
//!    backend's handshake. A backend RST instead reaches the client at the
//!    number it expects.
//! 4. From then on every segment of the flow takes the general path (the
//!    express lane leaves [`FLOW_SP`] flows alone) with the splice's
//!    translation on top of NAT, timestamps and PROXY.

use conf::counters::Counter;
use conf::SynProxy;

use super::classify::flags_of;
use super::count_drop;
use super::flow::{client_space, Ending, FLOW_SP, FLOW_TS, FLOW_TS_ECHOED};
use super::rewrite::{to_backend, Sums};
use super::select::Picked;
use super::track::seg_of;
use super::Lb;
use super::{Out, Rx};
use crate::conntrack::{Dir, EntryId, FlowKey};
use crate::counters::Counters;
use crate::nat;
use crate::port::PortDesc;
use crate::ppv2::header::MAX_HEADER_LEN;
use crate::ppv2::seg;
use crate::synproxy::auto::{Auto, Pressure};
use crate::synproxy::cookie::{self, CookieSecret};
use crate::synproxy::hold::{self, Hold};
use crate::synproxy::segment::{self, Announce};
use crate::synproxy::splice::{BackendSynAck, SpFlow, OUR_WSCALE};
use crate::verdict::Verdict;
use crate::wire::{parse_frame, Parsed, TcpFlags};

/// The flags the SYN proxy matches segments on (patterns need constants).
const SYN: u8 = TcpFlags::SYN.0;
const RST: u8 = TcpFlags::RST.0;
const ACK: u8 = TcpFlags::ACK.0;

/// A worker's SYN proxy state.
pub(super) struct SynProxyWorker {
    secret: CookieSecret,
    auto: Auto,
    /// Per connection-table slot, meaningful for entries marked [`FLOW_SP`].
    /// Allocated with [`Hold`] when a generation first has a syn_proxy VIP.
    flows: Box<[SpFlow]>,
    hold: Option<Box<Hold>>,
    /// A held frame on its way out, with room for a PROXY header.
    scratch: Box<[u8]>,
}

impl SynProxyWorker {
    pub(super) fn new() -> Self {
        SynProxyWorker {
            secret: CookieSecret::random(),
            auto: Auto::default(),
            flows: Box::default(),
            hold: None,
            scratch: Box::default(),
        }
    }

    /// Makes the per-slot state and the hold for a table of `capacity`
    /// (on adoption, outside any burst; once).
    #[cold]
    pub(super) fn prepare(&mut self, capacity: usize) {
        if self.hold.is_none() {
            self.flows = vec![SpFlow::default(); capacity].into_boxed_slice();
            self.hold = Some(Box::default());
            self.scratch = vec![0u8; hold::FRAME + MAX_HEADER_LEN].into_boxed_slice();
        }
    }

    #[inline(always)]
    fn flow(&self, id: EntryId) -> Option<&SpFlow> {
        self.flows.get(id.index() as usize)
    }

    /// A backend -> client segment of a spliced [`FLOW_SP`] flow, after
    /// NAT: into the cookie's numbers.
    #[inline(never)]
    pub(super) fn to_client(&self, id: EntryId, frame: &mut [u8], p: &Parsed) {
        if let (Some(sp), Some(s)) = (self.flow(id), seg::locate(frame, p)) {
            sp.to_client(frame, &s);
        }
    }
}

/// What border announces to a VIP's clients on a port of `mtu`: its MSS
/// (what a 1500-byte packet carries, which a held frame has room for, or
/// less on a smaller MTU; less the longest PROXY header), window scale,
/// and a SYN-ACK window the hold can take.
fn announce(v6: bool, pp_clamp: u16, mtu: u16) -> Announce {
    let headers = if v6 { 60 } else { 40 };
    let mss = 1500.min(mtu).saturating_sub(headers) - pp_clamp.min(1000);
    Announce {
        mss,
        wscale: OUR_WSCALE,
        window: (u32::from(mss) * hold::PER_FLOW as u32).min(65535) as u16,
    }
}

impl Lb {
    /// Sets the cookie secret (tests and benchmarks that need a fixed one).
    pub fn set_syn_cookie_secret(&mut self, k: [u8; 16]) {
        self.syn_proxy.secret = CookieSecret::from_bytes(k);
    }

    /// Whether this worker answers SYNs to `syn_proxy = "auto"` VIPs with
    /// cookies now (inspection: tests).
    pub fn syn_proxy_auto_on(&self) -> bool {
        self.syn_proxy.auto.is_on()
    }

    /// Once per poll iteration: the auto switch looks at the table.
    #[inline]
    pub(super) fn syn_proxy_tick(&mut self, counters: &mut Counters) {
        let p = Pressure {
            evicted_total: counters.get(Counter::ConntrackHalfOpenEvicted)
                + counters.get(Counter::DropSynFlood),
            entries: self.conntrack.len(),
            half_open: self.conntrack.half_open_len(),
            capacity: self.conntrack.capacity(),
            syn_timeout_ms: self.conntrack.timeout_ms(crate::conntrack::State::SynSent),
        };
        if let Some(on) = self.syn_proxy.auto.tick(self.now_ms, p) {
            counters.set(Counter::SynProxyAutoOn, u64::from(on));
            if on {
                counters.inc(Counter::SynProxyAutoSwitches);
            }
        }
    }

    /// A client TCP segment of no entry to VIP `vi`: the SYN proxy answers
    /// a SYN or opens a connection on a cookie ACK. `None`: not the SYN
    /// proxy's (then the usual new-flow rules apply).
    #[inline(never)]
    pub(super) fn syn_proxy_miss(
        &mut self,
        rx: Rx<'_>,
        vi: u32,
        key: &FlowKey,
        out: Out<'_>,
    ) -> Option<Verdict> {
        let vip = self.tables.as_ref()?.vips.get(vi as usize)?;
        let mode = vip.syn_proxy;
        if mode == SynProxy::Off {
            return None;
        }
        let active = mode == SynProxy::Always || self.syn_proxy.auto.is_on();
        let pp_clamp = vip.proxy_protocol.clamp_len(key.v6);
        match flags_of(rx.p) & (SYN | ACK | RST) {
            SYN if active => Some(self.answer_syn(rx, key, mode, pp_clamp, out)),
            // A cookie of an auto VIP stays good after the switch went off.
            ACK => self.open_on_cookie(rx, vi, key, mode, active, out),
            _ => None,
        }
    }

    /// The cookie SYN-ACK, back out of the port the SYN came by.
    fn answer_syn(
        &mut self,
        rx: Rx<'_>,
        key: &FlowKey,
        mode: SynProxy,
        pp_clamp: u16,
        out: Out<'_>,
    ) -> Verdict {
        let (buf, len, p, in_port) = rx.parts();
        let Out { ports, counters } = out;
        let Some(s) = buf.get(..len).and_then(|f| seg::locate(f, p)) else {
            return count_drop(counters, Counter::DropSynProxyBadChecksum);
        };
        if !segment::checksum_ok(buf, &s) {
            return count_drop(counters, Counter::DropSynProxyBadChecksum);
        }
        let Some(port) = ports.get(in_port) else {
            return count_drop(counters, Counter::DropNoRoute);
        };
        let ann = announce(key.v6, pp_clamp, port.mtu);
        let sp = &self.syn_proxy;
        match segment::write_syn_ack(buf, &s, port.mac, &sp.secret, self.now_ms, key, &ann) {
            Some(n) => {
                counters.inc(Counter::SynProxyCookiesSent);
                if mode == SynProxy::Auto {
                    self.syn_proxy.auto.cookie_sent();
                }
                Verdict::Send {
                    port: in_port,
                    len: n,
                }
            }
            None => count_drop(counters, Counter::DropSynProxyNoRoom),
        }
    }

    /// A client's ACK with no entry: if it proves a cookie, the connection
    /// to the backend starts (the ACK held, the frame turned into the SYN).
    fn open_on_cookie(
        &mut self,
        rx: Rx<'_>,
        vi: u32,
        key: &FlowKey,
        mode: SynProxy,
        active: bool,
        out: Out<'_>,
    ) -> Option<Verdict> {
        let (buf, len, p, in_port) = rx.parts();
        let Out { ports, counters } = out;
        let s = buf.get(..len).and_then(|f| seg::locate(f, p))?;
        let tsecr = segment::timestamps(&buf[s.l4..s.end]).map(|(_, e)| e);
        let (seq, ack) = (s.seq(buf), s.ack(buf));
        let sp = &self.syn_proxy;
        let Some(opts) = cookie::verify(&sp.secret, self.now_ms, key, seq, ack, tsecr) else {
            return active.then(|| count_drop(counters, Counter::DropSynProxyCookieBad));
        };
        if !segment::checksum_ok(buf, &s) {
            return Some(count_drop(counters, Counter::DropSynProxyBadChecksum));
        }
        let hold_full = self
            .syn_proxy
            .hold
            .as_ref()
            .is_none_or(|h| h.len() >= hold::SLOTS);
        if hold_full && self.expire_held() == 0 {
            return Some(count_drop(counters, Counter::DropSynProxyHoldFull));
        }
        let frame = buf.get(..len)?;
        let hash = self.conntrack.hash_of(key);
        let id = match self.new_flow(vi, (key, hash), in_port, frame, counters) {
            Ok(Picked::Tracked(id)) => id,
            Ok(Picked::Stateless) => {
                return Some(count_drop(counters, Counter::DropConntrackFull));
            }
            Err(v) => return Some(v),
        };
        counters.inc(Counter::SynProxyCookiesAccepted);
        if mode == SynProxy::Auto {
            self.syn_proxy.auto.cookie_accepted();
        }
        let conn_id = {
            let rec = &mut self.conntrack.get_mut(id).value;
            rec.bits |= FLOW_SP;
            rec.conn_id
        };
        let mut sp = SpFlow::new(ack.wrapping_sub(1), seq.wrapping_sub(1), tsecr, opts.wscale);
        sp.opts = Some(opts);
        sp.syn_at_ms = self.now_ms;
        if let Some(f) = self.syn_proxy.flows.get_mut(id.index() as usize) {
            *f = sp;
        }
        self.hold_frame(id, conn_id, frame, counters);
        let Some(n) = segment::ack_into_syn(buf, &s, &opts, seq.wrapping_sub(1)) else {
            self.forget(id, Ending::AsItsState);
            return Some(count_drop(counters, Counter::DropSynProxyNoRoom));
        };
        let Ok(p) = parse_frame(&buf[..n]) else {
            self.forget(id, Ending::AsItsState);
            return Some(count_drop(counters, Counter::DropSynProxyNoRoom));
        };
        Some(self.send_backend_syn(id, vi, buf, n, &p, true, Out { ports, counters }))
    }

    /// The backend's SYN in `buf[..len]` goes out as a client's first SYN
    /// of a tracked flow does in `client_miss` (`first`: its timestamps
    /// start the flow's translation; a retransmission keeps it).
    #[allow(clippy::too_many_arguments)]
    fn send_backend_syn(
        &mut self,
        id: EntryId,
        vi: u32,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        first: bool,
        out: Out<'_>,
    ) -> Verdict {
        let Out { ports, counters } = out;
        let seg = seg_of(&buf[..len], p);
        let _ = self
            .conntrack
            .update_tcp(id, Dir::Original, &seg, self.now_ms);
        let translate = self
            .tables
            .as_ref()
            .and_then(|t| t.vips.get(vi as usize))
            .is_some_and(|v| v.translate_timestamps);
        if translate && first {
            self.start_timestamps(id, &buf[..len], p);
        }
        let e = self.conntrack.get(id);
        let at = nat::Headers::Parsed(p);
        if let Err(c) = to_backend(
            &mut buf[..len],
            at,
            &e.value,
            e.orig(),
            e.reply(),
            Sums::Packet,
        ) {
            return count_drop(counters, c);
        }
        let rec = e.value;
        self.client_sent(buf, len, p, Some(id), &rec, Out { ports, counters })
    }

    /// Holds a copy of a client frame of flow `id` until the backend's
    /// handshake completes (counted either way).
    fn hold_frame(
        &mut self,
        id: EntryId,
        conn_id: u64,
        frame: &[u8],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(h) = self.syn_proxy.hold.as_mut() else {
            return count_drop(counters, Counter::DropSynProxyHoldFull);
        };
        let (r, expired) = h.put(id.index(), conn_id, frame, self.now_ms);
        counters.add(Counter::DropSynProxyHoldExpired, expired as u64);
        match r {
            Ok(()) => {
                counters.inc(Counter::SynProxyHeld);
                Verdict::Drop(Counter::SynProxyHeld)
            }
            Err(_) => count_drop(counters, Counter::DropSynProxyHoldFull),
        }
    }

    /// Border's SYN once more, made from a client segment (already held):
    /// the backend lost the first or its SYN-ACK was lost.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn resend_syn(
        &mut self,
        id: EntryId,
        vi: u32,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        opts: cookie::SynOptions,
        out: Out<'_>,
    ) -> Verdict {
        let Out { ports, counters } = out;
        let now = self.now_ms;
        let Some(f) = self.syn_proxy.flows.get_mut(id.index() as usize) else {
            return count_drop(counters, Counter::DropSynProxyNoRoom);
        };
        f.syn_at_ms = now;
        let isn = f.client_isn;
        let Some(s) = buf.get(..len).and_then(|f| seg::locate(f, p)) else {
            return count_drop(counters, Counter::DropSynProxyNoRoom);
        };
        let Some(n) = segment::ack_into_syn(buf, &s, &opts, isn) else {
            return count_drop(counters, Counter::DropSynProxyNoRoom);
        };
        let Ok(p) = parse_frame(&buf[..n]) else {
            return count_drop(counters, Counter::DropSynProxyNoRoom);
        };
        counters.inc(Counter::SynProxySynsResent);
        self.send_backend_syn(id, vi, buf, n, &p, false, Out { ports, counters })
    }

    #[cold]
    fn expire_held(&mut self) -> usize {
        let now = self.now_ms;
        self.syn_proxy.hold.as_mut().map_or(0, |h| h.expire(now))
    }

    /// A client segment of a tracked [`FLOW_SP`] flow, before anything
    /// else looks at it: held until the splice (and, when the backend has
    /// been silent for [`crate::synproxy::splice::SYN_RETRY_MS`], turned
    /// into border's SYN once more), then moved into the backend's numbers
    /// (`None`: go on as usual).
    #[inline(never)]
    pub(super) fn syn_proxy_client(
        &mut self,
        id: EntryId,
        vi: u32,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        out: Out<'_>,
    ) -> Option<Verdict> {
        let Out { ports, counters } = out;
        let sp = *self.syn_proxy.flow(id)?;
        if !sp.spliced() {
            let conn_id = self.conntrack.get(id).value.conn_id;
            let held = self.hold_frame(id, conn_id, buf.get(..len)?, counters);
            let (Some(opts), true) = (sp.opts, sp.syn_due(self.now_ms)) else {
                return Some(held);
            };
            return Some(self.resend_syn(id, vi, buf, len, p, opts, Out { ports, counters }));
        }
        let frame = buf.get_mut(..len)?;
        if let Some(s) = seg::locate(frame, p) {
            sp.to_backend(frame, &s);
        }
        None
    }

    /// A backend segment of a tracked [`FLOW_SP`] flow whose SYN-ACK has
    /// not been seen: the SYN-ACK splices and releases the held segments
    /// (and goes no further), a RST goes on to the client; anything else
    /// is dropped. `None`: spliced already, go on as usual.
    #[inline(never)]
    pub(super) fn syn_proxy_backend(
        &mut self,
        id: EntryId,
        frame: &mut [u8],
        p: &Parsed,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let sp = *self.syn_proxy.flow(id)?;
        if sp.spliced() {
            return None;
        }
        let flags = flags_of(p);
        let Some(s) = seg::locate(frame, p) else {
            return Some(count_drop(counters, Counter::DropSynProxyBadSynAck));
        };
        if !segment::checksum_ok(frame, &s) {
            return Some(count_drop(counters, Counter::DropSynProxyBadChecksum));
        }
        let conn_id = self.conntrack.get(id).value.conn_id;
        if flags & RST != 0 {
            if let Some(f) = self.syn_proxy.flows.get_mut(id.index() as usize) {
                f.refuse(s.seq(frame));
            }
            if let Some(h) = self.syn_proxy.hold.as_mut() {
                h.drop_flow(id.index(), conn_id);
            }
            counters.inc(Counter::SynProxyBackendResets);
            return None;
        }
        if flags & (SYN | ACK) != SYN | ACK || s.ack(frame) != sp.client_isn.wrapping_add(1) {
            return Some(count_drop(counters, Counter::DropSynProxyBadSynAck));
        }
        let mut tseg = seg_of(frame, p);
        tseg.ack = client_space(&self.conntrack.get(id).value, tseg.ack);
        if let Some(v) = self.track_tcp(id, Dir::Reply, &tseg, counters) {
            return Some(v);
        }
        let tcp = &frame[s.l4..s.end];
        let said = segment::syn_options(tcp);
        let b = BackendSynAck {
            isn: s.seq(frame),
            tsval: segment::timestamps(tcp).map(|(v, _)| v),
            wscale: said.opts.wscale,
        };
        if let Some(f) = self.syn_proxy.flows.get_mut(id.index() as usize) {
            f.splice(&b);
        }
        let e = self.conntrack.get_mut(id);
        if tcp_has_ts(tcp) && e.value.bits & FLOW_TS != 0 {
            e.value.bits |= FLOW_TS_ECHOED;
        }
        if e.value.pp_on() {
            // Its ISN and MSS; the frame goes no further.
            let _ = e.value.proxy.backend_segment(frame, p, counters);
        }
        counters.inc(Counter::SynProxyBackendSynAcks);
        self.release_held(id, conn_id, ports, counters);
        Some(Verdict::Drop(Counter::SynProxyBackendSynAcks))
    }

    /// Sends the segments held for flow `id` through the client path, in
    /// the order they came, as extra frames of this burst.
    fn release_held(
        &mut self,
        id: EntryId,
        conn_id: u64,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) {
        let e = self.conntrack.get(id);
        let orig = *e.orig();
        let in_port = usize::from(e.value.client_port);
        let Some(vi) = self
            .tables
            .as_ref()
            .and_then(|t| t.vip_at(&orig.dst, orig.v6, orig.dport, orig.proto))
        else {
            return;
        };
        let mut scratch = std::mem::take(&mut self.syn_proxy.scratch);
        while let Some(n) = self
            .syn_proxy
            .hold
            .as_mut()
            .and_then(|h| h.take_next(id.index(), conn_id, &mut scratch))
        {
            let Ok(p) = parse_frame(&scratch[..n]) else {
                counters.inc(Counter::DropSynProxyHoldExpired);
                continue;
            };
            let rx = Rx {
                buf: &mut scratch,
                len: n,
                p: &p,
                in_port,
            };
            match self.client_packet(rx, vi, &orig, Out { ports, counters }) {
                Verdict::Send { port, len } => {
                    let frame = &scratch[..len];
                    let queued = self.proxy_out.emits.push_with(port, |out| {
                        let dst = out.get_mut(..frame.len())?;
                        dst.copy_from_slice(frame);
                        Some(frame.len())
                    });
                    counters.inc(if queued {
                        Counter::SynProxyReleased
                    } else {
                        Counter::DropSynProxyHoldFull
                    });
                }
                Verdict::Park { .. } => counters.inc(Counter::DropNeighborUnresolved),
                Verdict::Drop(_) | Verdict::Handoff { .. } => {}
            }
        }
        self.syn_proxy.scratch = scratch;
    }
}

fn tcp_has_ts(tcp: &[u8]) -> bool {
    crate::tstamp::present(tcp)
}
