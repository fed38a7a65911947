//! The express lane: packets of established flows in the common shapes
//! take the same steps as the general path ([`Lb::handle`]) without
//! building a `Parsed`, over a whole burst in passes so the connection
//! table's cache misses overlap. Its differential tests against the general
//! path are in `express/tests.rs`.

use conf::counters::Counter;
use conf::Mode;

use super::count_drop;
use super::dsr::{dsr_entry_flow, DsrEnds};
use super::early::EarlyOut;
use super::flow::{client_space, count_forwarded, FlowRec, FLOW_PP, FLOW_SP};
use super::rewrite::{to_backend, to_client, FromBackend, Sums};
use super::{Lb, Out};
use crate::conntrack::window::NO_WSCALE;
use crate::conntrack::{Dir, FlowKey, Hint, KeyHash, State, TcpSeg};
use crate::counters::Counters;
use crate::nat;
use crate::port::PortDesc;
use crate::ppv2;
use crate::verdict::Verdict;
use crate::wire::ethernet::ethertype;
use crate::wire::{self, ip_proto, TcpFlags};

/// What [`express_parse`] reads of a frame the lane may take.
#[derive(Clone, Copy, Debug)]
pub(super) struct ExpressFrame {
    /// Where its IP and transport headers start, and their kinds.
    pub(super) at: nat::Layout,
    pub(super) key: FlowKey,
    /// The TCP flags (0 for UDP).
    pub(super) flags: u8,
    /// The TCP payload's length.
    pub(super) payload: u16,
}

/// Flags that leave a segment to the general path: a SYN may start a
/// connection, a RST is judged against the flow's window, and a FIN
/// changes the flow's state (the general path verifies it first).
const NOT_STEADY: u8 = TcpFlags::SYN.0 | TcpFlags::RST.0 | TcpFlags::FIN.0;

/// The express lane's parse: the layout, the flow key, the TCP flags and
/// the TCP payload length of a frame of the shape [`Lb::express`]
/// takes, or (flags in [`NOT_STEADY`]) of a segment the general path must
/// take but whose lookup the lane may start. It runs the
/// stages of `parse_fast` (so it accepts no frame `parse_frame` would
/// refuse, and finds the same offsets) and stops where the lane has what it
/// needs, adding the lane's own conditions: IPv4 without options and its
/// checksum verified, and the checks `client_packet` and `backend_packet`
/// make before any state changes (TTL above 1, TCP flags valid). The
/// caller refuses a SYN: it may start a connection; a RST: the general
/// path judges it against the flow's window; and a FIN, which closes: the
/// general path verifies the checksum of every segment that changes a
/// flow's state.
#[inline(always)]
pub(super) fn express_parse(f: &[u8]) -> Option<ExpressFrame> {
    let (_, et, l3) = wire::fast_link(f)?;
    let h = f.get(l3..)?;
    let (v4, ip) = match et {
        ethertype::IPV4 => {
            let ip = wire::fast_ipv4(h)?;
            if ip.header_len != 20 || !wire::ipv4_header_ok(h.get(..20)?) {
                return None;
            }
            (true, ip)
        }
        ethertype::IPV6 => (false, wire::fast_ipv6(h)?),
        _ => return None,
    };
    let (proto, hl, total) = (ip.proto, ip.header_len, ip.total_len);
    if ip.ttl <= 1 {
        return None;
    }
    let (ports, tcp_flags, doff) = wire::fast_l4(proto, h.get(hl..total)?)?;
    let flags = tcp_flags.map_or(0, |t| t.0);
    if !tcp_flags.is_none_or(wire::tcp_flags_valid) {
        return None;
    }
    // `fast_l4` checked `doff` against the segment: no underflow.
    let payload = (total - hl - doff) as u16;
    let mut key = if v4 {
        let a: &[u8; 8] = h.get(12..20)?.try_into().ok()?;
        FlowKey::v4(
            [a[0], a[1], a[2], a[3]],
            [a[4], a[5], a[6], a[7]],
            0,
            0,
            proto,
        )
    } else {
        let s: &[u8; 16] = h.get(8..24)?.try_into().ok()?;
        let d: &[u8; 16] = h.get(24..40)?.try_into().ok()?;
        FlowKey::v6(*s, *d, 0, 0, proto)
    };
    key.sport = u16::from_be_bytes([ports[0], ports[1]]);
    key.dport = u16::from_be_bytes([ports[2], ports[3]]);
    let udp = proto == ip_proto::UDP;
    Some(ExpressFrame {
        at: nat::Layout {
            l3,
            l4: l3 + hl,
            v4,
            udp,
        },
        key,
        flags,
        payload,
    })
}

/// The TCP fields the connection table tracks, of a segment whose header
/// starts at `l4` in `frame` ([`express_parse`] checked that its 20 bytes
/// are there; a shorter frame gives a segment of flags alone).
#[inline(always)]
fn express_seg(frame: &[u8], l4: usize, flags: u8, payload: u16) -> TcpSeg {
    let Some(h) = frame
        .get(l4..l4 + 16)
        .and_then(|h| <&[u8; 16]>::try_from(h).ok())
    else {
        return TcpSeg::flags(flags);
    };
    TcpSeg {
        flags,
        seq: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
        ack: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
        win: u16::from_be_bytes([h[14], h[15]]),
        len: u32::from(payload),
        wscale: NO_WSCALE,
    }
}

/// A frame [`Lb::express_prepare`] took: its layout, flow key, TCP flags,
/// the direction the key must have in the connection table (original: to
/// a VIP; reply: to a full-NAT local address) and the key's index hash.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prepared {
    key: FlowKey,
    hash: KeyHash,
    /// Set by [`Lb::express_prefetch`] (none without it).
    hint: Hint,
    /// `nat::Layout`'s offsets (at most 18 and 58).
    l3: u8,
    l4: u8,
    flags: u8,
    /// [`PREP_V4`], [`PREP_UDP`], [`PREP_REPLY`].
    bits: u8,
    /// TCP payload bytes.
    payload: u16,
}

pub(super) const PREP_V4: u8 = 1;

pub(super) const PREP_UDP: u8 = 2;

/// The key must be a reply key (else an original key).
pub(super) const PREP_REPLY: u8 = 4;

/// The destination is no VIP or local address: only a DNAT reply (to an
/// address the input port does not own) is the lane's.
pub(super) const PREP_NOT_LOCAL: u8 = 8;

impl Lb {
    /// The express lane's first step, which changes nothing: parses the
    /// frame, finds whether it is addressed to a VIP, to a full-NAT local
    /// address in its pool's port range or to no address of ours (a DNAT
    /// reply on its way to the client), hashes its key and starts loading
    /// the connection table's index bucket for it, into `out` (a worker's
    /// array for the burst). False: not a frame for the lane (the general
    /// path takes it); `out` may have changed, but means nothing. See
    /// [`Lb::express`].
    ///
    /// With `early`, a SYN to a VIP also gets its new flow's pick started
    /// (`early.rs`), noted in `early`; `out` then means nothing.
    #[inline(always)]
    pub(crate) fn express_prepare(
        &self,
        frame: &[u8],
        out: &mut Prepared,
        early: Option<EarlyOut<'_>>,
    ) -> bool {
        self.express_prepare_opt(frame, out, early).is_some()
    }

    #[inline(always)]
    fn express_prepare_opt(
        &self,
        frame: &[u8],
        out: &mut Prepared,
        early: Option<EarlyOut<'_>>,
    ) -> Option<()> {
        #[cfg(test)]
        if self.express_off {
            return None;
        }
        let tables = self.tables.as_ref()?;
        // Some flow may have to be reset: the general path checks each.
        if tables.reset_pending {
            return None;
        }
        let ExpressFrame {
            at,
            key,
            flags,
            payload,
        } = express_parse(frame)?;
        let mut not_local = false;
        let dir = if tables
            .vip_at(&key.dst, key.v6, key.dport, key.proto)
            .is_some()
        {
            Dir::Original
        } else {
            let class = tables.class_of(&key.dst, key.v6);
            match class.pool {
                _ if class.vip => return None,
                Some((lo, hi)) if key.dport < lo || key.dport > hi => return None,
                Some(_) => {}
                // Not a VIP or local address; unless a port owns it (checked
                // once the flow is found), a DNAT reply.
                None => not_local = true,
            }
            Dir::Reply
        };
        let hash = self.conntrack.hash_of(&key);
        self.conntrack.prefetch_bucket(hash);
        // A SYN, FIN or RST takes the general path, whose lookup then
        // finds the bucket loaded: a new flow's first miss overlaps with
        // the rest of the burst's like an established packet's.
        if flags & NOT_STEADY != 0 {
            if let (Some(mut e), Dir::Original) = (early, dir) {
                // The key goes where the established path puts it anyway:
                // taking the address of a local of its own would make every
                // frame's parse copy it there first.
                out.key = key;
                if let Some(slot) = e.slot() {
                    if self.early_pick(tables, (&out.key, hash), flags, slot) {
                        e.started();
                    }
                }
            }
            return None;
        }
        out.key = key;
        out.hash = hash;
        out.hint = Hint::default();
        out.l3 = at.l3 as u8;
        out.l4 = at.l4 as u8;
        out.flags = flags;
        out.payload = payload;
        out.bits = (u8::from(at.v4) * PREP_V4)
            | (u8::from(at.udp) * PREP_UDP)
            | (u8::from(dir == Dir::Reply) * PREP_REPLY)
            | (u8::from(not_local) * PREP_NOT_LOCAL);
        Some(())
    }

    /// The express lane's second step, a hint that changes nothing: starts
    /// loading the connection-table entry of a prepared frame (its index
    /// bucket should have arrived since [`Lb::express_prepare`]).
    #[inline(always)]
    pub(crate) fn express_prefetch(&self, prep: &mut Prepared) {
        prep.hint = self.conntrack.prefetch_entry(prep.hash);
        if let (Some(r), Some(slot)) = (&self.records, prep.hint.slot()) {
            r.prefetch(slot);
        }
    }

    /// The express lane: a packet of an established flow, client -> VIP,
    /// backend -> full-NAT local address or backend -> client (DNAT), in
    /// the frame's most common shape
    /// (Ethernet with at most one VLAN tag; IPv4 without options and not a
    /// fragment, or IPv6 without extension headers; TCP without SYN, or
    /// UDP), of a flow without PROXY protocol or past its header. Everything
    /// else, and every packet this lane is unsure about, gets `None` before
    /// anything was changed, and takes the general path (`parse_frame`,
    /// then [`Lb::handle`]).
    ///
    /// For the packets it takes, the lane does what the general path does,
    /// step for step and with the same functions (connection state, the
    /// translation of its direction, statistics, next hop), without building
    /// a `Parsed`: its header checks are those of `parse_frame` (IPv4
    /// header checksum included) restricted to that shape.
    ///
    /// It takes three steps: [`Lb::express_prepare`], [`Lb::express_prefetch`]
    /// and this one, the last; a worker runs each over a whole burst before
    /// the next, so the connection table's cache misses overlap. Here: the
    /// frame in `buf[..len]`, which [`Lb::express_prepare`] prepared as
    /// `prep` in this poll iteration (same tables; the frame unchanged
    /// since). `None`, with nothing changed: the general path takes the
    /// frame.
    #[inline(always)]
    pub(crate) fn express(
        &mut self,
        buf: &mut [u8],
        len: usize,
        prep: &Prepared,
        in_port: usize,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let frame = buf.get_mut(..len)?;
        let Prepared {
            ref key,
            hash,
            hint,
            l3,
            l4,
            flags,
            bits,
            payload,
        } = *prep;
        let at = nat::Layout {
            l3: usize::from(l3),
            l4: usize::from(l4),
            v4: bits & PREP_V4 != 0,
            udp: bits & PREP_UDP != 0,
        };
        let dir = if bits & PREP_REPLY != 0 {
            Dir::Reply
        } else {
            Dir::Original
        };
        let now = self.now_ms;
        let (id, found) = self.conntrack.lookup_hinted(key, hash, hint, now)?;
        if found != dir {
            return None;
        }
        let e = self.conntrack.get(id);
        // Only steady segments: an established TCP flow (a handshake's
        // last ACK, which must acknowledge the backend's SYN and verify,
        // takes the general path) whose backend side comes by the port
        // facing the backend (else a spoofer's: the general path drops it).
        if (!at.udp && e.state() != State::Established)
            || (dir == Dir::Reply && usize::from(e.value.backend_port) != in_port)
        {
            return None;
        }
        // Too long for the port it would leave by: the general path
        // answers it.
        let out = match dir {
            Dir::Original => e.value.backend_port,
            Dir::Reply => e.value.client_port,
        };
        if ports
            .get(usize::from(out))
            .is_none_or(|p| len - usize::from(l3) > usize::from(p.mtu))
        {
            return None;
        }
        // PROXY and SYN proxy flows: one test of `bits` for every flow,
        // the rest out of line.
        if e.value.bits & (FLOW_PP | FLOW_SP) != 0 && declines_special(&e.value, at.udp, flags, dir)
        {
            return None;
        }
        // As `handle`: a packet to an address the port owns is not a DNAT
        // reply (the local stack takes it).
        if bits & PREP_NOT_LOCAL != 0
            && (e.value.mode != Mode::Dnat
                || ports
                    .get(in_port)
                    .is_none_or(|port| port.owns_any(key.dst_ip())))
        {
            return None;
        }
        #[cfg(test)]
        {
            self.express_taken += 1;
        }
        // As `client_packet` (original) or `backend_packet` (reply) from here on.
        if at.udp {
            self.conntrack.touch(id, now);
        } else {
            let mut seg = express_seg(frame, at.l4, flags, payload);
            if dir == Dir::Reply {
                seg.ack = client_space(&e.value, seg.ack);
            }
            // No RST comes here: nothing is refused.
            let _ = self.conntrack.update_tcp(id, dir, &seg, now);
            if flags & TcpFlags::FIN.0 != 0 {
                self.note_closed(id); // a FIN may end the connection: [vip.limits]
            }
        }
        let e = self.conntrack.get_mut(id);
        if dir == Dir::Original && e.value.mode.is_dsr() {
            let (flow, backend) = dsr_entry_flow(e, ports);
            count_forwarded(self.vip_stats, self.backend_stats, &e.value, len);
            if let Some(r) = self.records.as_mut() {
                r.count(id, dir, len - at.l3, payload != 0);
            }
            let Some(rec) = flow else {
                return Some(count_drop(counters, Counter::DropSlowpathUnhandled));
            };
            let ends = DsrEnds {
                client: &key.src,
                sport: key.sport,
                backend: &backend,
            };
            let out = Out { ports, counters };
            return Some(self.dsr_forward(buf, len, (at.l3, Some(at.v4)), &rec, ends, out));
        }
        let headers = nat::Headers::Layout(at);
        let translated = match dir {
            Dir::Original => to_backend(frame, headers, &e.value, e.orig(), e.reply(), Sums::Flow),
            Dir::Reply => {
                // A DNAT reply is already addressed to the client.
                let to_local = bits & PREP_NOT_LOCAL == 0;
                let from = FromBackend {
                    key,
                    flags,
                    to_local,
                };
                to_client(frame, headers, e, from, Sums::Flow)
            }
        };
        if let Err(c) = translated {
            return Some(count_drop(counters, c));
        }
        let rec = e.value;
        count_forwarded(self.vip_stats, self.backend_stats, &rec, len);
        if let Some(r) = self.records.as_mut() {
            r.count(id, dir, len - at.l3, payload != 0);
        }
        // PROXY protocol: as `pp_client` / `PpFlow::backend_segment` do for
        // a steady flow, at the same points.
        let segment = |frame: &[u8]| ppv2::seg::locate_at(frame, !at.v4, at.l3, at.l4);
        if dir == Dir::Original {
            let v = self.send_to_hop(frame, rec.backend_port as usize, rec.hop, ports, counters);
            if rec.pp_on() && matches!(v, Verdict::Park { .. }) {
                return Some(count_drop(counters, Counter::DropNeighborUnresolved));
            }
            if rec.pp_on() && matches!(v, Verdict::Send { .. }) {
                let Some(s) = segment(frame) else {
                    return Some(count_drop(counters, Counter::DropPpBadSegment));
                };
                rec.proxy.shift_client(frame, &s);
            }
            return Some(v);
        }
        if rec.pp_on() {
            let Some(s) = segment(frame) else {
                return Some(count_drop(counters, Counter::DropPpBadSegment));
            };
            rec.proxy.map_backend(frame, &s);
        }
        let out = rec.client_port as usize;
        let Some(port) = ports.get(out) else {
            return Some(count_drop(counters, Counter::DropNoRoute));
        };
        nat::set_macs(frame, port.mac, rec.client_mac);
        Some(Verdict::Send { port: out, len })
    }
}

/// Whether the lane leaves a PROXY or SYN proxy flow's packet to the
/// general path. PROXY protocol flows once past their header take the
/// lane: only sequence or acknowledgement numbers move (no SYN: the
/// SYN-ACK's MSS is clamped on the general path; replies need the ACK
/// they translate). SYN proxy flows (`FLOW_SP`) never do.
#[cold]
#[inline(never)]
fn declines_special(rec: &FlowRec, udp: bool, flags: u8, dir: Dir) -> bool {
    rec.bits & FLOW_SP != 0
        || !(rec.proxy.steady()
            && !udp
            && flags & TcpFlags::SYN.0 == 0
            && (dir == Dir::Original || flags & TcpFlags::ACK.0 != 0))
}

#[cfg(test)]
mod tests;
