//! The per-frame decision: what a worker does with one received frame.
//!
//! Sans-IO: `process` takes the frame's bytes (rewritten in place when the
//! appliance answers) and returns a [`Verdict`]; the worker loop does the I/O,
//! and pulls whatever else the pipeline wants sent through
//! [`Pipeline::poll_transmit`].
//! Every drop names the counter it was counted under.

use std::net::{Ipv4Addr, Ipv6Addr};

use conf::counters::Counter;

use crate::counters::Counters;
use crate::io::Frame;
use crate::lb::{Adopted, Early, EarlyOut, Lb, Prepared};
use crate::neigh::Slot;
use crate::neigh_queue::Fate;
use crate::port::{PortDesc, PortRole};
use crate::slowpath::{self, Outcome, OwnedAddrs};
use crate::verdict::Verdict;
use crate::wire::{self, ip_proto, L3Kind, Malformed, NicChecksum};

/// What the express lane already made of a frame of a burst (see
/// [`Pipeline::express_prepare`]), for [`Pipeline::process_in_lane`].
#[derive(Clone, Copy, Debug)]
pub enum Lane<'p> {
    /// Not asked: the pipeline asks the lane, then takes the general path.
    Unasked,
    /// Prepared in this poll iteration (same tables, frame unchanged
    /// since): the lane with this preparation, else the general path.
    Prepared(&'p Prepared),
    /// Declined in this poll iteration (frame unchanged since): the
    /// general path, without asking the lane again.
    Declined,
    /// A SYN whose new flow's pick the lane's passes started in this poll
    /// iteration (same tables, frame unchanged since): the general path,
    /// with what they found.
    NewFlow(&'p Early),
}

/// One worker's packet path: the ports, the counters, and the
/// load-balancing state, behind the calls a worker loop makes.
/// `dataplane.icmp_echo_per_second` when nobody set it.
const DEFAULT_ICMP_ECHO_PER_SECOND: u32 = 1000;

pub struct Pipeline {
    ports: Vec<PortDesc>,
    counters: Counters,
    lb: Lb,
    last_in_port: usize,
    /// Echo requests this worker still answers.
    echo: slowpath::EchoLimiter,
}

impl Pipeline {
    pub fn new(ports: Vec<PortDesc>, lb: Lb) -> Self {
        Pipeline {
            ports,
            counters: Counters::default(),
            lb,
            last_in_port: 0,
            echo: slowpath::EchoLimiter::new(DEFAULT_ICMP_ECHO_PER_SECOND),
        }
    }

    /// Answers at most `per_second` ICMP echo requests per second
    /// (`dataplane.icmp_echo_per_second`).
    pub fn set_icmp_echo_rate(&mut self, per_second: u32) {
        self.echo = slowpath::EchoLimiter::new(per_second);
        self.lb.set_icmp_error_rate(per_second);
    }

    /// The port of the frame handled last (for frames handed to another worker).
    pub fn last_in_port(&self) -> usize {
        self.last_in_port
    }

    pub fn ports(&self) -> &[PortDesc] {
        &self.ports
    }

    /// This worker's counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Counts what the worker loop saw (a handed-over frame, a full queue).
    #[inline]
    pub fn count(&mut self, c: Counter) {
        self.counters.inc(c);
    }

    /// The load-balancing state, to look at (tests, benchmarks): the
    /// pipeline's calls are the only way to change it.
    pub fn lb(&self) -> &Lb {
        &self.lb
    }

    /// This worker's index.
    pub fn worker(&self) -> usize {
        self.lb.worker()
    }

    /// The `now` of the last [`Pipeline::tick`], in milliseconds.
    pub fn now_ms(&self) -> u64 {
        self.lb.now_ms()
    }

    /// Housekeeping once per poll iteration: the clock, bindings from other
    /// workers, a slice of expiry, PROXY header retransmissions.
    pub fn tick(&mut self, now_ms: u64) {
        self.lb.tick(now_ms, &mut self.counters);
    }

    /// Examines up to `budget` more connection-table entries for expiry.
    pub fn expire(&mut self, budget: usize) {
        self.lb.expire(budget, &mut self.counters);
    }

    /// Copies up to `budget` more entries into a walk of the live
    /// connections, if one runs.
    pub fn export_conns(&mut self, budget: usize) {
        self.lb.export_conns(budget);
    }

    /// The generation of the adopted tables, if any.
    pub fn generation(&self) -> Option<u64> {
        self.lb.generation()
    }

    /// Switches to a new table generation (see [`Lb::adopt`]); the ports
    /// answer ARP/NDP for its VIPs (a VIP added since the start included).
    pub fn adopt(&mut self, t: Adopted<'static>) {
        self.lb.adopt(t);
        if let Some(t) = self.lb.tables() {
            for p in self.ports.iter_mut() {
                p.set_vips(t.vips.iter().map(|v| v.addr));
            }
        }
    }

    /// Installs a static neighbour binding (and tells the other workers):
    /// for tests and benchmarks without an ARP exchange.
    pub fn learn(&mut self, ip: std::net::IpAddr, mac: [u8; 6]) {
        self.lb.learn(ip, mac);
    }

    /// What becomes of a frame that has waited `waited_ms` for next hop
    /// `hop` on `port` ([`Verdict::Park`]).
    pub fn parked_fate(&mut self, port: usize, hop: Slot, waited_ms: u64) -> Fate {
        self.lb.parked_fate(port, hop, waited_ms)
    }

    /// Whether [`Pipeline::poll_transmit`] has a frame that must leave right
    /// behind the frame just handled: cheap, for after every frame (the
    /// worker calls [`Pipeline::poll_transmit`] once more at the end of its
    /// poll iteration for the rest).
    #[inline(always)]
    pub fn wants_transmit(&self) -> bool {
        self.lb.wants_transmit()
    }

    /// The next frame the pipeline wants sent that no received frame
    /// carries (a neighbour request, the rest of a split segment, a PROXY
    /// header on its own), built in a frame `alloc` gives for its length,
    /// and the port it leaves by. `None`: nothing left.
    pub fn poll_transmit<F: Frame>(
        &mut self,
        alloc: impl FnMut(usize) -> Option<F>,
    ) -> Option<(usize, F)> {
        self.lb
            .poll_transmit(&self.ports, &mut self.counters, alloc)
    }

    /// Counts a frame refused before parsing (e.g. a chained mbuf).
    pub fn refuse(&mut self, _port: usize, reason: Counter) -> Verdict {
        self.drop(reason)
    }

    /// Accounts for one TX burst: `sent` frames of `bytes` accepted, `dropped` refused.
    pub fn count_tx(&mut self, port: usize, sent: usize, dropped: usize, bytes: usize) {
        match self.ports.get(port).map(|p| p.role) {
            Some(PortRole::Twin { .. }) => {
                self.counters.add(Counter::DropHostTxFull, dropped as u64);
            }
            _ => {
                self.counters.add(Counter::TxPackets, sent as u64);
                self.counters.add(Counter::TxBytes, bytes as u64);
                self.counters.add(Counter::DropTxFull, dropped as u64);
            }
        }
    }

    #[inline]
    fn drop(&mut self, reason: Counter) -> Verdict {
        self.counters.inc(reason);
        Verdict::Drop(reason)
    }

    /// Decides the fate of the frame in `buf[..len]` received on
    /// `in_port`; the rest of `buf` is room the frame may grow into (a
    /// returned `Send` length may exceed `len`).
    pub fn process(&mut self, in_port: usize, buf: &mut [u8], len: usize) -> Verdict {
        self.process_with(in_port, buf, len, true, NicChecksum::Unknown)
    }

    /// [`Pipeline::process`] for a frame of a burst of data port
    /// `in_port`, addressed to its MAC ([`Pipeline::express_port`]), with
    /// what the express lane made of it in this poll iteration.
    #[inline(always)]
    pub fn process_in_lane(
        &mut self,
        in_port: usize,
        buf: &mut [u8],
        len: usize,
        lane: Lane<'_>,
        nic: NicChecksum,
    ) -> Verdict {
        match lane {
            Lane::Unasked => self.process_with(in_port, buf, len, true, nic),
            Lane::Declined => self.process_with(in_port, buf, len, false, nic),
            Lane::Prepared(prep) => self.process_prepared(in_port, buf, len, prep, nic),
            Lane::NewFlow(early) => {
                self.lb.early_carry(early);
                let v = self.process_with(in_port, buf, len, false, nic);
                self.lb.early_done(early);
                v
            }
        }
    }

    #[inline]
    fn process_with(
        &mut self,
        in_port: usize,
        buf: &mut [u8],
        len: usize,
        express: bool,
        nic: NicChecksum,
    ) -> Verdict {
        self.last_in_port = in_port;
        let Some(frame) = buf.get_mut(..len) else {
            return self.drop(Counter::DropSlowpathUnhandled);
        };
        let Some(port) = self.ports.get(in_port) else {
            return self.drop(Counter::DropNotLocal);
        };
        match port.role {
            PortRole::Twin { data } => {
                self.counters.inc(Counter::FromHost);
                Verdict::Send {
                    port: data,
                    len: frame.len(),
                }
            }
            PortRole::Data { twin } => {
                self.counters.inc(Counter::RxPackets);
                self.counters.add(Counter::RxBytes, len as u64);
                self.data_port_frame(in_port, twin, buf, len, (express, nic))
            }
        }
    }

    /// Whether frames received on `in_port` may go to the express lane's
    /// burst passes, and the MAC they must be addressed to: a data port's
    /// (what `process` checks before the lane).
    #[inline]
    pub fn express_port(&self, in_port: usize) -> Option<[u8; 6]> {
        match self.ports.get(in_port) {
            Some(p) if matches!(p.role, PortRole::Data { .. }) && self.lb.tables().is_some() => {
                Some(p.mac)
            }
            _ => None,
        }
    }

    /// The express lane's first pass over a frame addressed to the MAC of
    /// [`Pipeline::express_port`]; changes nothing. False: the lane
    /// declines it. See [`Lb::express`]. With `early`, a declined SYN to a
    /// VIP may get its new flow's pick started (noted there): its second
    /// pass is [`Pipeline::early_prefetch`], its run [`Lane::NewFlow`].
    #[inline(always)]
    pub fn express_prepare(
        &self,
        frame: &[u8],
        out: &mut Prepared,
        early: Option<EarlyOut<'_>>,
    ) -> bool {
        self.lb.express_prepare(frame, out, early)
    }

    /// The second pass over a SYN whose new flow's pick the first pass
    /// started: starts loading its reply key's index bucket.
    #[inline(always)]
    pub fn early_prefetch(&self, early: &mut Early) {
        self.lb.early_reply(early);
    }

    /// The express lane's second pass over a prepared frame: starts
    /// loading its connection-table entry. Changes nothing else.
    #[inline(always)]
    pub fn express_prefetch(&self, prep: &mut Prepared) {
        self.lb.express_prefetch(prep);
    }

    /// The express lane with the preparation `prep`, else the general path.
    #[inline(always)]
    fn process_prepared(
        &mut self,
        in_port: usize,
        buf: &mut [u8],
        len: usize,
        prep: &Prepared,
        nic: NicChecksum,
    ) -> Verdict {
        let Pipeline {
            lb,
            ports,
            counters,
            ..
        } = self;
        match lb.express(buf, len, prep, in_port, ports, counters) {
            Some(v) => {
                self.last_in_port = in_port;
                self.counters.inc(Counter::RxPackets);
                self.counters.add(Counter::RxBytes, len as u64);
                v
            }
            None => self.process_with(in_port, buf, len, false, nic),
        }
    }

    fn host_bound(&mut self, twin: Option<usize>, len: usize) -> Verdict {
        match twin {
            Some(port) => {
                self.counters.inc(Counter::ToHost);
                Verdict::Send { port, len }
            }
            None => self.drop(Counter::DropNoHostTwin),
        }
    }

    /// A frame that failed parsing: counted under its reason and under
    /// `drop_malformed`, their sum.
    #[cold]
    fn malformed(&mut self, reason: Malformed) -> Verdict {
        self.counters.inc(Counter::DropMalformed);
        self.drop(reason.counter())
    }

    /// Acts on a slow-path outcome for a frame addressed to port `in_port`.
    /// `vip` says the destination is a VIP: what the slow path would pass
    /// to the kernel is not the kernel's business then.
    fn slow<A: Into<std::net::IpAddr> + Copy>(
        &mut self,
        in_port: usize,
        twin: Option<usize>,
        len: usize,
        vip: bool,
        o: Outcome<A>,
        replied: Counter,
    ) -> Verdict {
        if let Some(n) = o.learn() {
            let n = slowpath::Neighbor {
                ip: n.ip.into(),
                mac: n.mac,
                heard: n.heard,
            };
            self.lb.hear(in_port, n, &mut self.counters);
        }
        match o {
            Outcome::Replied { len, .. } => {
                self.counters.inc(replied);
                Verdict::Send { port: in_port, len }
            }
            Outcome::ToHost { .. } if vip => self.drop(Counter::DropVipUnhandled),
            Outcome::ToHost { .. } => self.host_bound(twin, len),
            Outcome::Drop { reason, .. } => self.drop(reason),
        }
    }

    /// The frame is `buf[..len]`; the rest of `buf` is room to grow into.
    /// `express`: it may take the express lane; `nic`: what the port
    /// found of its TCP/UDP checksum.
    #[inline]
    fn data_port_frame(
        &mut self,
        in_port: usize,
        twin: Option<usize>,
        buf: &mut [u8],
        len: usize,
        (express, nic): (bool, NicChecksum),
    ) -> Verdict {
        let port = &self.ports[in_port];
        let mac = port.mac;
        let frame = &mut buf[..len];
        if len < wire::ethernet::HEADER_LEN {
            return self.malformed(Malformed::TruncatedEthernet);
        }
        let group = frame[0] & 1 == 1;
        if !group && frame[..6] != mac {
            return self.drop(Counter::DropNotOurMac);
        }
        let mtu = port.mtu;
        if len > port.max_frame_len() {
            return self.drop(Counter::DropOverMtu);
        }
        if express {
            let mut prep = Prepared::default();
            if self.lb.express_prepare(frame, &mut prep, None) {
                if let Some(v) =
                    self.lb
                        .express(buf, len, &prep, in_port, &self.ports, &mut self.counters)
                {
                    return v;
                }
            }
        }
        let frame = &mut buf[..len];
        // `parse_frame`, its two halves called here so that the common
        // case builds its `Parsed` once, in place.
        let opts = wire::ParseOptions::default();
        let mut parsed = match wire::parse_fast(frame, &opts) {
            Some(p) => p,
            None => match wire::parse_views(frame, &opts) {
                Ok(p) => p,
                Err(m) => return self.malformed(m),
            },
        };
        parsed.nic_l4_checksum = nic;
        if parsed.l3_end.saturating_sub(parsed.l3_offset) > usize::from(mtu) {
            return self.drop(Counter::DropOverMtu);
        }
        match parsed.l3 {
            L3Kind::Arp => {
                let o = slowpath::arp_parsed(frame, &parsed, mac, |ip| port.owns_v4(ip));
                self.slow(in_port, twin, len, false, o, Counter::ArpReplies)
            }
            L3Kind::Ipv4 | L3Kind::Ipv6 if self.lb.tables().is_some() => {
                let Pipeline {
                    lb,
                    ports,
                    counters,
                    ..
                } = self;
                if let Some(v) = lb.handle(buf, len, &parsed, in_port, ports, counters) {
                    return v;
                }
                self.local_ip(in_port, twin, &mut buf[..len], &parsed, group)
            }
            L3Kind::Ipv4 | L3Kind::Ipv6 => self.local_ip(in_port, twin, frame, &parsed, group),
            L3Kind::Other(_) => self.drop(Counter::DropUnknownEthertype),
        }
    }

    /// IP traffic that is not load-balancer traffic: answered here, passed
    /// to the kernel twin, or dropped.
    fn local_ip(
        &mut self,
        in_port: usize,
        twin: Option<usize>,
        frame: &mut [u8],
        parsed: &wire::Parsed,
        group: bool,
    ) -> Verdict {
        let port = &self.ports[in_port];
        let mac = port.mac;
        let len = frame.len();
        match parsed.l3 {
            L3Kind::Ipv4 => {
                let l3 = parsed.l3_offset;
                let dst = Ipv4Addr::new(
                    frame[l3 + 16],
                    frame[l3 + 17],
                    frame[l3 + 18],
                    frame[l3 + 19],
                );
                if port.owns_v4(dst) {
                    let vip = !port.addrs_v4.contains(&dst);
                    if parsed.l4_proto == ip_proto::ICMP {
                        if slowpath::is_echo_request(parsed) && !self.echo.answer(self.lb.now_ms())
                        {
                            return self.drop(Counter::IcmpEchoRateLimited);
                        }
                        let o = slowpath::icmpv4_parsed(frame, parsed, mac, |ip| port.owns_v4(ip));
                        return self.slow(in_port, twin, len, vip, o, Counter::IcmpEchoReplies);
                    }
                    if vip {
                        return self.drop(Counter::DropVipUnhandled);
                    }
                    return self.host_bound(twin, len);
                }
                if dst.is_multicast() || dst.is_broadcast() || group {
                    return self.host_bound(twin, len);
                }
                self.drop(Counter::DropNotLocal)
            }
            L3Kind::Ipv6 => {
                let l3 = parsed.l3_offset;
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&frame[l3 + 24..l3 + 40]);
                let dst = Ipv6Addr::from(octets);
                let vip = port.vips_v6.contains(&dst);
                if parsed.l4_proto == ip_proto::ICMPV6 && (dst.is_multicast() || port.owns_v6(&dst))
                {
                    let replied = match parsed.icmp {
                        Some((135, _)) => Counter::NdpAdvertisements,
                        _ => Counter::Icmpv6EchoReplies,
                    };
                    if slowpath::is_echo_request(parsed)
                        && port.owns_v6(&dst)
                        && !self.echo.answer(self.lb.now_ms())
                    {
                        return self.drop(Counter::IcmpEchoRateLimited);
                    }
                    let o = slowpath::icmpv6_parsed(frame, parsed, mac, |ip| port.owns_v6(ip));
                    return self.slow(in_port, twin, len, vip, o, replied);
                }
                if vip {
                    return self.drop(Counter::DropVipUnhandled);
                }
                if port.owns_v6(&dst) || dst.is_multicast() || group {
                    return self.host_bound(twin, len);
                }
                self.drop(Counter::DropNotLocal)
            }
            _ => self.drop(Counter::DropUnknownEthertype),
        }
    }
}
