//! Direct server return: a client's packet of a DSR VIP goes to its
//! backend as the client sent it, either with only the destination MAC
//! written (`encap = "none"`, IPVS's gatewaying: the backend shares the
//! port's link and holds the VIP on a loopback) or inside an outer IPIP,
//! IP6IP6 or GUE header to the backend's own address (`crate::encap`).
//! The backend answers the client itself: no reply passes the appliance,
//! so a DSR flow's entry follows the client's packets alone
//! (`Conntrack::mark_one_way`).

use conf::counters::Counter;
use conf::{Encap, Mode, GUE_PORT};

use super::count_drop;
use super::flow::{count_forwarded, FlowRec};
use super::Lb;
use super::Out;
use crate::conntrack::{Dir, EntryId};
use crate::counters::Counters;
use crate::encap::{self, EncapError, OuterAddrs, Tunnel};
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
        self.dsr_forward(buf, len, l3, rec, ends, out)
    }

    /// Sends a client packet of DSR flow `rec` to its backend, its MAC
    /// written or the packet encapsulated (counted and statistics already
    /// taken: the express lane calls this directly).
    #[inline(always)]
    pub(super) fn dsr_forward(
        &mut self,
        buf: &mut [u8],
        len: usize,
        l3: usize,
        rec: &FlowRec,
        ends: DsrEnds<'_>,
        out: Out<'_>,
    ) -> Verdict {
        let Out { ports, counters } = out;
        let Mode::Dsr(encap) = rec.mode else {
            return count_drop(counters, Counter::DropSlowpathUnhandled);
        };
        let egress = rec.backend_port as usize;
        let Some(port) = ports.get(egress) else {
            return count_drop(counters, Counter::DropNoRoute);
        };
        let len = if encap == Encap::None {
            len
        } else {
            match tunnel_to(port, encap, &ends) {
                Some(t) => match encap::encapsulate(buf, len, l3, &t, port.mtu) {
                    Ok(n) => n,
                    Err(EncapError::TooBig) => return answer_too_big(counters),
                    Err(EncapError::NoRoom) => return count_drop(counters, Counter::DropDsrNoRoom),
                    Err(EncapError::NotIp) => return count_drop(counters, Counter::DropMalformed),
                },
                None => return count_drop(counters, Counter::DropDsrNoSource),
            }
        };
        let Some(frame) = buf.get_mut(..len) else {
            return count_drop(counters, Counter::DropDsrNoRoom);
        };
        counters.inc(Counter::DsrForwarded);
        self.send_to_hop(frame, egress, rec.hop, ports, counters)
    }
}

/// The tunnel of a flow to `ends.backend` out of `port`: the outer
/// source folded into the port's subnet of the backend's family (`None`:
/// the port has none).
#[inline(always)]
fn tunnel_to(port: &PortDesc, encap: Encap, ends: &DsrEnds<'_>) -> Option<Tunnel> {
    let entropy = encap::flow_entropy(ends.client, ends.sport);
    let b = ends.backend;
    let v4 = b[..10] == [0; 10] && b[10..12] == [0xff, 0xff];
    let addrs = if v4 {
        let dst = std::net::Ipv4Addr::new(b[12], b[13], b[14], b[15]);
        let (net, prefix) = port.subnet_v4?;
        let src = encap::outer_source_v4(net, prefix, entropy, dst);
        OuterAddrs::V4 { src, dst }
    } else {
        let dst = std::net::Ipv6Addr::from(*b);
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

/// A client packet that would exceed the backend port's MTU once
/// encapsulated. This is the one place the ICMP "fragmentation needed"
/// (IPv4) or "packet too big" (IPv6) answer to the client is to be sent
/// from, with the MTU less the tunnel's overhead, once the jumbo-frames
/// work's builder (`too_big.rs`) is here; until then the packet is
/// dropped and counted.
#[cold]
#[inline(never)]
fn answer_too_big(counters: &mut Counters) -> Verdict {
    count_drop(counters, Counter::DropDsrTooBig)
}
