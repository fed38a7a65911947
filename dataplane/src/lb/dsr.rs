//! Direct server return: a client's packet of a DSR VIP goes to its
//! backend as the client sent it, either with only the destination MAC
//! written (`encap = "none"`, IPVS's gatewaying: the backend shares the
//! port's link and holds the VIP on a loopback) or inside an outer IPIP,
//! IP6IP6 or GUE header to the backend's own address (`crate::encap`).
//! The backend answers the client itself: no reply passes the appliance,
//! so a DSR flow's entry follows the client's packets alone
//! (`Conntrack::mark_one_way`).
//!
//! What a flow's tunnel header takes from the flow and the port (the outer
//! source folded from the client's address and port, the outer IPv4
//! header's checksum sum, the entropy of the GUE source port and IPv6 flow
//! label) is worked out once, at the flow's first packet, and kept in its
//! record ([`dsr_entry`], [`FLOW_TUNNEL`]): an established packet moves up,
//! gets a header assembled from those and its own length and TOS, and goes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use conf::counters::Counter;
use conf::{Encap, Mode, GUE_PORT};

use super::count_drop;
use super::flow::{count_forwarded, FlowRec, FLOW_TUNNEL};
use super::Lb;
use super::Out;
use crate::conntrack::{Dir, Entry, EntryId};
use crate::encap::{self, EncapError, Outer, OuterAddrs, Tunnel, TunnelConsts};
use crate::neigh::Slot;
use crate::port::PortDesc;
use crate::verdict::Verdict;

/// A DSR client packet's ends as its flow's keys hold them: the client's
/// address and port (the tunnel's entropy) and the backend's address.
#[derive(Clone, Copy)]
pub(super) struct DsrEnds<'k> {
    pub client: &'k [u8; 16],
    pub sport: u16,
    pub backend: &'k [u8; 16],
}

/// What sending a DSR flow's client packet takes from its record: a
/// copy of these few bytes, not of the whole record, per packet.
#[derive(Clone, Copy)]
pub(super) struct DsrFlow {
    encap: Encap,
    /// The record holds its tunnel's constants ([`FLOW_TUNNEL`]).
    kept: bool,
    tunnel: TunnelConsts,
    hop: Slot,
    backend_port: u8,
    client_port: u8,
}

impl DsrFlow {
    /// `None`: `rec` is no DSR flow's.
    #[inline(always)]
    pub(super) fn of(rec: &FlowRec) -> Option<DsrFlow> {
        let Mode::Dsr(encap) = rec.mode else {
            return None;
        };
        Some(DsrFlow {
            encap,
            kept: rec.bits & FLOW_TUNNEL != 0,
            tunnel: rec.tunnel(),
            hop: rec.hop,
            backend_port: rec.backend_port,
            client_port: rec.client_port,
        })
    }
}

impl Lb {
    /// Accounts for a client packet of DSR flow `rec` (entry `id` if
    /// tracked; its IP header at `l3` of `buf[..len]`) and sends it to the
    /// backend: the general path's [`Lb::client_sent`] for DSR VIPs.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dsr_sent(
        &mut self,
        buf: &mut [u8],
        len: usize,
        l3: usize,
        (id, payload): (Option<EntryId>, bool),
        rec: &FlowRec,
        ends: DsrEnds<'_>,
        out: Out<'_>,
    ) -> Verdict {
        count_forwarded(self.vip_stats, self.backend_stats, rec, len);
        if let (Some(r), Some(id)) = (self.records.as_mut(), id) {
            r.count(id, Dir::Original, len.saturating_sub(l3), payload);
        }
        let Some(flow) = DsrFlow::of(rec) else {
            return count_drop(out.counters, Counter::DropSlowpathUnhandled);
        };
        self.dsr_forward(buf, len, (l3, None), &flow, ends, out)
    }

    /// Sends a client packet of DSR flow `rec` to its backend, its MAC
    /// written or the packet encapsulated (counted and statistics already
    /// taken: the express lane calls this directly). `inner_v4`: whether
    /// the packet at `l3` is IPv4, when the caller knows (else its version
    /// is read).
    #[inline(always)]
    pub(super) fn dsr_forward(
        &mut self,
        buf: &mut [u8],
        len: usize,
        (l3, inner_v4): (usize, Option<bool>),
        rec: &DsrFlow,
        ends: DsrEnds<'_>,
        out: Out<'_>,
    ) -> Verdict {
        let Out { ports, counters } = out;
        let encap = rec.encap;
        let egress = rec.backend_port as usize;
        let Some(port) = ports.get(egress) else {
            return count_drop(counters, Counter::DropNoRoute);
        };
        let len = if encap == Encap::None {
            len
        } else {
            let gue = (encap == Encap::Gue).then_some(GUE_PORT);
            let b = ends.backend;
            let v6 = !is_v4_mapped(b);
            // A flow without an entry (the table was full) works them out
            // for each of its packets.
            let consts = if rec.kept {
                rec.tunnel
            } else {
                match tunnel_to(port, encap, &ends) {
                    Some(t) => t.consts(),
                    None => return count_drop(counters, Counter::DropDsrNoSource),
                }
            };
            let outer = if v6 {
                if port.subnet_v6.is_none() {
                    return count_drop(counters, Counter::DropDsrNoSource);
                }
                Outer::V6 {
                    high: port.source_high_v6,
                    dst: b,
                }
            } else {
                Outer::V4 {
                    dst: [b[12], b[13], b[14], b[15]],
                }
            };
            let put = match inner_v4 {
                Some(v4) => {
                    encap::encapsulate_known(buf, len, l3, v4, outer, &consts, gue, port.mtu)
                }
                None => encap::encapsulate_flow(buf, len, l3, outer, &consts, gue, port.mtu),
            };
            match put {
                Ok(n) => n,
                Err(EncapError::TooBig) => {
                    let overhead = encap::overhead(v6, gue.is_some());
                    let inner_mtu = usize::from(port.mtu).saturating_sub(overhead);
                    let at = (rec.client_port as usize, inner_mtu as u16);
                    return self.dsr_too_big(buf, len, l3, at, Out { ports, counters });
                }
                Err(EncapError::NoRoom) => return count_drop(counters, Counter::DropDsrNoRoom),
                Err(EncapError::NotIp) => return count_drop(counters, Counter::DropMalformed),
            }
        };
        let Some(frame) = buf.get_mut(..len) else {
            return count_drop(counters, Counter::DropDsrNoRoom);
        };
        counters.inc(Counter::DsrForwarded);
        self.send_to_hop(frame, egress, rec.hop, ports, counters)
    }
}

/// The record of tracked DSR flow `e` and its backend's address (its
/// reply key's source), the record's tunnel constants kept first if they
/// are not yet (its first packet, or the first since it was adopted).
#[inline(always)]
pub(super) fn dsr_entry(e: &mut Entry<FlowRec>, ports: &[PortDesc]) -> (FlowRec, [u8; 16]) {
    let backend = e.reply().src;
    if e.value.bits & FLOW_TUNNEL == 0 {
        let orig = e.orig();
        let (client, sport) = (orig.src, orig.sport);
        keep_tunnel(&mut e.value, &client, sport, &backend, ports);
    }
    (e.value, backend)
}

/// [`dsr_entry`] for the express lane: what sending takes of the record
/// (`None`: no DSR flow's), not the whole record.
#[inline(always)]
pub(super) fn dsr_entry_flow(
    e: &mut Entry<FlowRec>,
    ports: &[PortDesc],
) -> (Option<DsrFlow>, [u8; 16]) {
    let backend = e.reply().src;
    if e.value.bits & FLOW_TUNNEL == 0 {
        let orig = e.orig();
        let (client, sport) = (orig.src, orig.sport);
        keep_tunnel(&mut e.value, &client, sport, &backend, ports);
    }
    (DsrFlow::of(&e.value), backend)
}

/// Keeps the constants of flow `rec`'s tunnel in it and sets
/// [`FLOW_TUNNEL`] (`encap = "none"`: nothing to keep). Nothing when the
/// backend's port has no subnet of the backend's family: each packet then
/// tries again, and is dropped (`drop_dsr_no_source`).
#[cold]
#[inline(never)]
fn keep_tunnel(
    rec: &mut FlowRec,
    client: &[u8; 16],
    sport: u16,
    backend: &[u8; 16],
    ports: &[PortDesc],
) {
    let Mode::Dsr(encap) = rec.mode else {
        return;
    };
    if encap != Encap::None {
        let ends = DsrEnds {
            client,
            sport,
            backend,
        };
        let Some(t) = ports
            .get(usize::from(rec.backend_port))
            .and_then(|port| tunnel_to(port, encap, &ends))
        else {
            return;
        };
        rec.set_tunnel(t.consts());
    }
    rec.bits |= FLOW_TUNNEL;
}

/// Whether `a` (as a flow key holds an address) is an IPv4 one.
#[inline(always)]
fn is_v4_mapped(a: &[u8; 16]) -> bool {
    // Two word compares, not a byte-slice compare: this runs per packet.
    let head = u64::from_ne_bytes([a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]]);
    let mid = u32::from_ne_bytes([a[8], a[9], a[10], a[11]]);
    head == 0 && mid == u32::from_ne_bytes([0, 0, 0xff, 0xff])
}

/// The tunnel of a flow to `ends.backend` out of `port`: the outer
/// source folded into the port's subnet of the backend's family (`None`:
/// the port has none).
fn tunnel_to(port: &PortDesc, encap: Encap, ends: &DsrEnds<'_>) -> Option<Tunnel> {
    let entropy = encap::flow_entropy(ends.client, ends.sport);
    let b = ends.backend;
    let addrs = if is_v4_mapped(b) {
        let dst = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
        let (net, prefix) = port.subnet_v4?;
        let src = encap::outer_source_v4(net, prefix, entropy, dst);
        OuterAddrs::V4 { src, dst }
    } else {
        let dst = Ipv6Addr::from(*b);
        let (net, prefix) = port.subnet_v6?;
        let src = encap::outer_source_v6(net, prefix, entropy, dst);
        OuterAddrs::V6 { src, dst }
    };
    Some(Tunnel {
        addrs,
        entropy,
        gue: (encap == Encap::Gue).then_some(GUE_PORT),
    })
}

impl Lb {
    /// A client packet that would exceed the backend port's MTU once
    /// encapsulated: dropped (`drop_dsr_too_big`), and its frame, still as
    /// the client sent it, rewritten into the ICMP "fragmentation needed"
    /// (IPv4) or "packet too big" (IPv6) that tells the client the MTU
    /// left inside the tunnel (`at`: the port the client's packet came in
    /// by, and that MTU). It comes from the VIP the client addressed, at
    /// most `icmp_echo_per_second` a second.
    #[cold]
    #[inline(never)]
    fn dsr_too_big(
        &mut self,
        buf: &mut [u8],
        len: usize,
        l3: usize,
        (in_port, inner_mtu): (usize, u16),
        out: Out<'_>,
    ) -> Verdict {
        let Out { ports, counters } = out;
        let Some(port) = ports.get(in_port) else {
            return count_drop(counters, Counter::DropDsrTooBig);
        };
        let frame = buf.get(..len).unwrap_or(&[]);
        let vip = match frame.get(l3).map(|b| b >> 4) {
            Some(4) => frame
                .get(l3 + 16..l3 + 20)
                .map(|d| IpAddr::V4(Ipv4Addr::new(d[0], d[1], d[2], d[3]))),
            Some(6) => frame
                .get(l3 + 24..l3 + 40)
                .and_then(|d| <[u8; 16]>::try_from(d).ok())
                .map(|d| IpAddr::V6(Ipv6Addr::from(d))),
            _ => None,
        };
        let Some(vip) = vip else {
            return count_drop(counters, Counter::DropDsrTooBig);
        };
        let back = (in_port, port.mac);
        let icmp = (l3, inner_mtu, vip);
        self.send_too_big(buf, len, icmp, back, Counter::DropDsrTooBig, counters)
    }
}
