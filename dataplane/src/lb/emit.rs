//! Where a frame leaves: routes to a data port and next hop, the next
//! hop's MAC (or a wait for it), and the ARP requests and neighbour
//! solicitations the worker should send.

use std::net::IpAddr;

use arrayvec::ArrayVec;
use conf::counters::Counter;

use super::count_drop;
use super::flow::{count_forwarded, FlowRec};
use super::Lb;
use super::Out;
use crate::conntrack::{Dir, EntryId};
use crate::counters::Counters;
use crate::io::Frame;
use crate::nat;
use crate::neigh::{self, Binding, Heard, Resolution, Slot, Update};
use crate::neigh_queue;
use crate::port::PortDesc;
use crate::slowpath::{Hearing, Neighbor};
use crate::verdict::Verdict;
use crate::wire::{L3Kind, Parsed};

/// The `mtu` of port `out` when the IP packet `p` describes is longer
/// than it: the packet cannot leave by that port.
#[inline(always)]
pub(super) fn over_mtu(ports: &[PortDesc], out: usize, p: &Parsed) -> Option<u16> {
    let mtu = ports.get(out)?.mtu;
    (p.l3_end.saturating_sub(p.l3_offset) > usize::from(mtu)).then_some(mtu)
}

impl Lb {
    /// A packet received on `in_port` longer than `mtu`, that of the port
    /// it would leave by: dropped (`drop_too_big`), and its frame, still
    /// as the sender sent it, rewritten into the ICMP too-big that tells
    /// the sender `mtu` (at most `icmp_echo_per_second` a second). The
    /// error comes from the port's own address of the packet's family,
    /// else from the packet's destination when that is the appliance's.
    #[cold]
    #[inline(never)]
    pub(super) fn too_big(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        in_port: usize,
        mtu: u16,
        out: Out<'_>,
    ) -> Verdict {
        let Out { ports, counters } = out;
        let Some(port) = ports.get(in_port) else {
            return count_drop(counters, Counter::DropTooBig);
        };
        let frame = buf.get(..len).unwrap_or(&[]);
        let from = match p.l3 {
            L3Kind::Ipv4 => port.addrs_v4.first().copied().map(IpAddr::V4).or_else(|| {
                let d = frame.get(p.l3_offset + 16..p.l3_offset + 20)?;
                let d = std::net::Ipv4Addr::new(d[0], d[1], d[2], d[3]);
                port.vips_v4.contains(&d).then_some(IpAddr::V4(d))
            }),
            L3Kind::Ipv6 => port
                .addrs_v6
                .iter()
                .find(|a| !a.is_unicast_link_local())
                .copied()
                .map(IpAddr::V6)
                .or_else(|| {
                    let d: [u8; 16] = frame
                        .get(p.l3_offset + 24..p.l3_offset + 40)?
                        .try_into()
                        .ok()?;
                    let d = std::net::Ipv6Addr::from(d);
                    port.vips_v6.contains(&d).then_some(IpAddr::V6(d))
                }),
            _ => None,
        };
        let Some(from) = from else {
            return count_drop(counters, Counter::DropTooBig);
        };
        let back = (in_port, port.mac);
        let icmp = (p.l3_offset, mtu, from);
        self.send_too_big(buf, len, icmp, back, Counter::DropTooBig, counters)
    }

    /// The drop `drop` of a packet too big for where it goes, and, within
    /// the rate limit, its frame `buf[..len]` rewritten into the ICMP
    /// too-big (`icmp`: its IP header's offset, the MTU to tell, the
    /// error's source) sent `back` out of the port it came in by (index
    /// and MAC).
    pub(super) fn send_too_big(
        &mut self,
        buf: &mut [u8],
        len: usize,
        (l3, mtu, from): (usize, u16, IpAddr),
        (in_port, mac): (usize, [u8; 6]),
        drop: Counter,
        counters: &mut Counters,
    ) -> Verdict {
        if !self.too_big_limit.answer(self.now_ms) {
            counters.inc(Counter::IcmpTooBigRateLimited);
            return count_drop(counters, drop);
        }
        match crate::too_big::answer_too_big(buf, len, l3, mtu, from, mac) {
            Some(n) => {
                counters.inc(drop);
                counters.inc(Counter::IcmpTooBigSent);
                Verdict::Send {
                    port: in_port,
                    len: n,
                }
            }
            None => count_drop(counters, drop),
        }
    }

    /// Whether `ip` is on the link of data port `port`: in one of its
    /// subnets (IPv6 link-local addresses are on every link).
    pub(super) fn on_link(&self, port: usize, ip: IpAddr) -> bool {
        if let IpAddr::V6(a) = ip {
            if a.is_unicast_link_local() {
                return true;
            }
        }
        self.tables
            .as_ref()
            .is_some_and(|t| t.routes.on_port(port, ip))
    }
}

/// An ARP request or neighbour solicitation the worker should send:
/// broadcast (multicast), or to the MAC `to`; `probe` when it checks a
/// next hop in use past its reachable time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighRequest {
    pub port: usize,
    pub target: IpAddr,
    pub to: Option<[u8; 6]>,
    pub probe: bool,
}

impl Lb {
    pub(super) fn want_neighbor(&mut self, port: usize, ip: IpAddr) {
        let slot = self.neighbors.slot_for(ip);
        match self.neighbors.resolve_at(slot, self.now_ms) {
            Resolution::Request | Resolution::KnownRefresh(_) => self.request(port, slot),
            _ => {}
        }
    }

    /// The slot of configured next hop `ip` (a backend's, a gateway's)
    /// reached through `port`, kept from eviction until the next
    /// adoption, with a request out if its MAC is not known. `hop` is the
    /// slot it had (kept when it still names `ip`).
    pub(super) fn configured_hop(&mut self, port: usize, ip: IpAddr, hop: Slot) -> Slot {
        let hop = if self.neighbors.ip_at(hop) == Some(ip) {
            hop
        } else {
            self.neighbors.slot_for(ip)
        };
        self.neighbors.pin(hop);
        if self.neighbors.get(ip).is_none() {
            self.want_neighbor(port, ip);
        }
        hop
    }

    /// Installs a static binding (tests and benchmarks without an ARP
    /// exchange) and tells the other workers.
    pub(crate) fn learn(&mut self, ip: IpAddr, mac: [u8; 6]) {
        let how = Heard::Installed;
        if self.neighbors.learn(ip, mac, self.now_ms) && self.workers > 1 {
            self.sync.share(self.worker, Binding { ip, mac, how });
        }
    }

    /// Applies a binding heard on data port `in_port` (see [`crate::neigh`]
    /// for what may write into the table), counting every refusal, and
    /// tells the other workers what it changed.
    pub(crate) fn hear(&mut self, in_port: usize, n: Neighbor<IpAddr>, counters: &mut Counters) {
        if n.heard == Hearing::Overheard {
            counters.inc(Counter::NeighRefusedOverheard);
            return;
        }
        if !self.on_link(in_port, n.ip) {
            counters.inc(Counter::NeighRefusedOffSubnet);
            return;
        }
        let asked = n.heard == Hearing::Answer && self.sync.was_asked(n.ip, self.now_ms);
        let how = if asked {
            Heard::Confirmed
        } else {
            Heard::Unconfirmed
        };
        let update = self.neighbors.heard(n.ip, n.mac, how, self.now_ms);
        self.publish_neighbor_stats(counters);
        match update {
            // Another worker asked: the answer is for its table.
            Update::NotInTable if asked => {}
            Update::NotInTable if n.heard == Hearing::Answer => {
                counters.inc(Counter::NeighRefusedUnsolicited);
                return;
            }
            Update::NotInTable => {
                counters.inc(Counter::NeighRefusedNotInTable);
                return;
            }
            Update::Static => return,
            Update::Same if !asked => return,
            Update::Same | Update::Filled | Update::Changed => {}
        }
        if self.workers > 1 {
            let b = Binding {
                ip: n.ip,
                mac: n.mac,
                how,
            };
            self.sync.share(self.worker, b);
        }
    }

    /// Accounts for a translated client packet and sends it to the backend.
    #[inline(always)]
    pub(super) fn client_sent(
        &mut self,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        id: Option<EntryId>,
        rec: &FlowRec,
        out: Out<'_>,
    ) -> Verdict {
        let Out { ports, counters } = out;
        count_forwarded(self.vip_stats, self.backend_stats, rec, len);
        if let (Some(r), Some(id)) = (self.records.as_mut(), id) {
            let payload = p.l3_end > p.payload_offset;
            r.count(id, Dir::Original, len.saturating_sub(p.l3_offset), payload);
        }
        let Some(frame) = buf.get_mut(..len) else {
            return count_drop(counters, Counter::DropSlowpathUnhandled);
        };
        let v = self.send_to_hop(frame, rec.backend_port as usize, rec.hop, ports, counters);
        match (v, id) {
            (Verdict::Send { port, len }, Some(id)) if rec.pp_on() => {
                self.pp_client(id, buf, len, p, port, counters)
            }
            // Untracked, it could carry no header (`new_flow` does not
            // make such flows; never let one through).
            (Verdict::Send { .. }, None) if rec.pp_on() => {
                count_drop(counters, Counter::DropPpConntrackFull)
            }
            // A PROXY flow's segment cannot wait: its header and sequence
            // shift are decided as it leaves.
            (Verdict::Park { .. }, _) if rec.pp_on() => {
                count_drop(counters, Counter::DropNeighborUnresolved)
            }
            _ => v,
        }
    }

    /// Sends out of data port `out` to next hop `hop`, resolving its MAC.
    pub(super) fn send_via(
        &mut self,
        frame: &mut [u8],
        out: usize,
        hop: IpAddr,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Verdict {
        if ports.get(out).is_none() {
            return count_drop(counters, Counter::DropNoRoute);
        }
        let slot = match self.neighbors.slot(hop) {
            Some(slot) => slot,
            // Unknown: a new incomplete entry with the request due now
            // (the frame waits for it), or none for a full table.
            None => self.neighbors.slot_for(hop),
        };
        self.send_to_hop(frame, out, slot, ports, counters)
    }

    /// Sends out of data port `out` to the next hop in neighbour slot `hop`.
    #[inline(always)]
    pub(super) fn send_to_hop(
        &mut self,
        frame: &mut [u8],
        out: usize,
        hop: Slot,
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Verdict {
        let Some(port) = ports.get(out) else {
            return count_drop(counters, Counter::DropNoRoute);
        };
        let mac = match self.neighbors.resolve_at(hop, self.now_ms) {
            Resolution::Known(m) => m,
            Resolution::KnownRefresh(m) => {
                self.request(out, hop);
                m
            }
            r @ (Resolution::Request | Resolution::Pending) => {
                if r == Resolution::Request {
                    self.request(out, hop);
                }
                nat::set_macs(frame, port.mac, [0; 6]);
                return Verdict::Park {
                    port: out,
                    len: frame.len(),
                    hop,
                };
            }
            Resolution::Full => {
                return count_drop(counters, Counter::DropNeighborUnresolved);
            }
            Resolution::Gone => return count_drop(counters, Counter::DropNeighborGone),
        };
        nat::set_macs(frame, port.mac, mac);
        Verdict::Send {
            port: out,
            len: frame.len(),
        }
    }

    /// What becomes of a frame that has waited `waited_ms` for next hop
    /// `hop` on `port` ([`Verdict::Park`]): sent once the hop is known,
    /// asked for again while it is not, dropped after
    /// [`neigh_queue::WAIT_MS`].
    pub(crate) fn parked_fate(
        &mut self,
        port: usize,
        hop: Slot,
        waited_ms: u64,
    ) -> neigh_queue::Fate {
        match self.neighbors.resolve_at(hop, self.now_ms) {
            Resolution::Known(m) => neigh_queue::Fate::Send(m),
            Resolution::KnownRefresh(m) => {
                self.request(port, hop);
                neigh_queue::Fate::Send(m)
            }
            Resolution::Full | Resolution::Gone => neigh_queue::Fate::Expire,
            _ if waited_ms >= neigh_queue::WAIT_MS => neigh_queue::Fate::Expire,
            Resolution::Request => {
                self.request(port, hop);
                neigh_queue::Fate::Wait
            }
            Resolution::Pending => {
                if self
                    .neighbors
                    .ask_again(hop, self.now_ms, neigh_queue::ASK_EVERY_MS)
                {
                    self.request(port, hop);
                }
                neigh_queue::Fate::Wait
            }
        }
    }

    /// Queues the request or probe just decided on for the next hop in
    /// `hop` (to the MAC [`neigh::Neighbors::probe_mac`] says, or broadcast).
    #[cold]
    pub(super) fn request(&mut self, port: usize, hop: Slot) {
        if let Some(target) = self.neighbors.ip_at(hop) {
            let to = self.neighbors.probe_mac(hop);
            let probe = self.neighbors.get(target).is_some();
            if probe {
                self.neighbors.probe_sent(hop, port);
            }
            let req = NeighRequest {
                port,
                target,
                to,
                probe,
            };
            let _ = self.requests.try_push(req);
        }
    }

    /// Sends the probes due for next hops no frame used since their last
    /// probe: a next hop that moved or died is found on time.
    #[cold]
    pub(super) fn follow_probes(&mut self) {
        let mut due = ArrayVec::<(Slot, usize), { neigh::PROBING }>::new();
        self.neighbors.follow_probes(self.now_ms, |slot, port| {
            let _ = due.try_push((slot, port));
        });
        for (slot, port) in due {
            self.request(port, slot);
        }
    }
}

/// Room for a generated ARP request or neighbour solicitation.
const REQUEST_FRAME_LEN: usize = 86;

impl Lb {
    /// Whether [`Lb::poll_transmit`] has a frame that must leave right
    /// behind the one just handled (the rest of a split segment): one load,
    /// for after every received frame. Neighbour requests wait for the end
    /// of the poll iteration.
    #[inline(always)]
    pub(crate) fn wants_transmit(&self) -> bool {
        !self.proxy_out.emits.is_empty()
    }

    /// The next frame this worker wants sent that no received frame
    /// carries, and the port it leaves by: a neighbour request (written
    /// here, from the port's own address), then the PROXY protocol's extra
    /// frames (the rest of a split segment, a header sent on its own or
    /// again) in the order they were made. `alloc` gives a frame of the
    /// length asked for. A frame that cannot be made (no buffer) is counted
    /// and skipped; `None`: nothing left.
    pub(crate) fn poll_transmit<F: Frame>(
        &mut self,
        ports: &[PortDesc],
        counters: &mut Counters,
        mut alloc: impl FnMut(usize) -> Option<F>,
    ) -> Option<(usize, F)> {
        while let Some(req) = self.requests.pop() {
            let Some(info) = ports.get(req.port) else {
                continue;
            };
            let Some(mut frame) = alloc(REQUEST_FRAME_LEN) else {
                counters.inc(Counter::DropNoAllocation);
                continue;
            };
            let Some(len) = write_request(frame.data_mut(), info, req.target, req.to) else {
                continue;
            };
            frame.set_len(len);
            counters.inc(Counter::NeighborRequests);
            if req.probe {
                counters.inc(Counter::NeighProbes);
            }
            // Its answer may reach another worker: they all know it is due.
            self.sync.asking(req.target, self.now_ms);
            return Some((req.port, frame));
        }
        while let Some((port, bytes)) = self.proxy_out.emits.front() {
            if port >= ports.len() {
                self.proxy_out.emits.pop();
                continue;
            }
            let n = bytes.len();
            let Some(mut frame) = alloc(n) else {
                self.proxy_out.emits.pop();
                counters.inc(Counter::DropNoAllocation);
                continue;
            };
            let Some(d) = frame.data_mut().get_mut(..n) else {
                self.proxy_out.emits.pop();
                counters.inc(Counter::DropNoAllocation);
                continue;
            };
            d.copy_from_slice(bytes);
            frame.set_len(n);
            self.proxy_out.emits.pop();
            return Some((port, frame));
        }
        None
    }
}

/// Writes the ARP request or neighbour solicitation for `target` out of
/// port `info` into `buf` (broadcast, or a probe to `to`): its length, or
/// `None` when the port has no address of the family to ask from.
fn write_request(
    buf: &mut [u8],
    info: &PortDesc,
    target: IpAddr,
    to: Option<[u8; 6]>,
) -> Option<usize> {
    let mac = info.mac;
    match target {
        IpAddr::V4(t) => info
            .addrs_v4
            .first()
            .and_then(|s| neigh::write_arp_request(buf, mac, *s, t, to)),
        IpAddr::V6(t) => info
            .addrs_v6
            .iter()
            .find(|a| !a.is_unicast_link_local())
            .or(info.addrs_v6.first())
            .and_then(|s| neigh::write_neighbor_solicitation(buf, mac, *s, t, to)),
    }
}
