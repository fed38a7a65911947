//! The packet's translation: checksum deltas fixed per flow, one entry per
//! direction ([`to_backend`], [`to_client`]) that the general path and the
//! express lane both run, PROXY protocol v2 on the way, and ICMP errors
//! about a flow turned towards its other end.

use conf::counters::Counter;
use conf::Mode;

use super::count_drop;
use super::flow::{client_space, FlowRec, FLOW_TS_ECHOED};
use super::key::key_of;
use super::Lb;
use crate::conntrack::{Dir, Entry, EntryId, FlowKey};
use crate::counters::Counters;
use crate::nat;
use crate::port::PortDesc;
use crate::ppv2::{self};
use crate::tstamp;
use crate::verdict::Verdict;
use crate::wire::{Parsed, TcpFlags};

/// A SYN-ACK's flags.
const SYN_ACK: u8 = TcpFlags::SYN.0 | TcpFlags::ACK.0;

/// Where a tracked flow's rewrite takes its checksum changes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sums {
    /// The flow's, fixed with its keys ([`FlowRec::fwd`], [`FlowRec::rev`]):
    /// the express lane, whose packets are known to carry the flow's keys.
    Flow,
    /// Worked out from the packet's fields as they are replaced: the
    /// general path. (The lane's differential tests compare the two.)
    Packet,
}

impl Sums {
    /// What a rewrite is given of the flow's deltas `flow`.
    #[inline(always)]
    fn of(self, flow: nat::Deltas) -> Option<nat::Deltas> {
        (self == Sums::Flow).then_some(flow)
    }
}

/// The client -> backend translation, the one both the general path and
/// the express lane run: the client's packet becomes the reply key reversed
/// (DNAT keeps the client's source), and its TCP timestamps are shifted
/// into the local tuple's clock.
#[inline(always)]
pub(super) fn to_backend(
    frame: &mut [u8],
    headers: nat::Headers<'_>,
    rec: &FlowRec,
    orig: &FlowKey,
    reply: &FlowKey,
    sums: Sums,
) -> Result<(), Counter> {
    if orig.v6 != reply.v6 {
        return Err(nat::NatError::FamilyMismatch.counter());
    }
    let src = match rec.mode {
        Mode::FullNat => Some((&reply.dst, reply.dport)),
        Mode::Dnat => None,
        // Sent as the client sent it (`dsr.rs` writes the MAC or the tunnel).
        Mode::Dsr(_) => return Ok(()),
    };
    let r = nat::Rewrite {
        headers,
        src,
        dst: Some((&reply.src, reply.sport)),
        deltas: sums.of(rec.fwd),
    };
    nat::forward(frame, r).map_err(forward_drop)?;
    if rec.ts_on() {
        if let Some(seg) = frame.get_mut(headers.l4()..) {
            tstamp::shift_tsval(seg, rec.ts_delta);
        }
    }
    Ok(())
}

/// A backend's packet of a tracked flow, as it arrived: its key, its TCP
/// flags (0 for UDP) and whether it is addressed to a full-NAT local
/// address (else it is a DNAT reply, already addressed to the client).
pub(super) struct FromBackend<'k> {
    pub key: &'k FlowKey,
    pub flags: u8,
    pub to_local: bool,
}

/// The backend -> client translation, the one both the general path and
/// the express lane run: the backend's packet becomes the original key
/// reversed (from the VIP; to the client for full-NAT), and the backend's
/// echoes of the client's TCP timestamps are shifted back (a SYN-ACK that
/// carries timestamps marks the flow [`FLOW_TS_ECHOED`]).
#[inline(always)]
pub(super) fn to_client(
    frame: &mut [u8],
    headers: nat::Headers<'_>,
    e: &mut Entry<FlowRec>,
    from: FromBackend<'_>,
    sums: Sums,
) -> Result<(), Counter> {
    let orig = e.orig();
    if orig.v6 != from.key.v6 {
        return Err(nat::NatError::FamilyMismatch.counter());
    }
    let r = nat::Rewrite {
        headers,
        src: Some((&orig.dst, orig.dport)),
        dst: from.to_local.then_some((&orig.src, orig.sport)),
        deltas: sums.of(e.value.rev),
    };
    nat::forward(frame, r).map_err(forward_drop)?;
    let rec = &mut e.value;
    if rec.ts_on() {
        if let Some(seg) = frame.get_mut(headers.l4()..) {
            if from.flags & SYN_ACK == SYN_ACK && tstamp::present(seg) {
                rec.bits |= FLOW_TS_ECHOED;
            }
            tstamp::unshift_tsecr(seg, rec.ts_delta);
        }
    }
    Ok(())
}

/// The counter of a refused rewrite.
#[cold]
pub(super) fn forward_drop(e: nat::ForwardError) -> Counter {
    match e {
        nat::ForwardError::TtlExpired => Counter::DropTtlExceeded,
        nat::ForwardError::Nat(e) => e.counter(),
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
        let d = ppv2::Departure {
            ends: &ends,
            out_port: port,
            entry: id,
            now: self.now_ms,
        };
        let r = e
            .value
            .proxy
            .client_segment(&d, buf, len, p, &mut self.proxy_out, counters);
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
        ports: &[PortDesc],
        counters: &mut Counters,
    ) -> Option<Verdict> {
        let inner = nat::icmp_error_inner(frame, p)?;
        // The quoted packet is one we sent; its reverse is what we received.
        let key = key_of(inner.dst, inner.src, inner.dport, inner.sport, inner.proto);
        let (id, dir) = self.conntrack.lookup(&key, self.now_ms)?;
        let e = self.conntrack.get(id);
        let rec = e.value;
        // The quoted segment went out in the other direction: a number it
        // could not have carried means a forged error (RFC 5927).
        if let Some(seq) = nat::icmp_error_quoted_seq(frame, p) {
            let sender = dir.reverse();
            let seq = match sender {
                Dir::Original => client_space(&rec, seq),
                Dir::Reply => seq,
            };
            if !e.tcp().quote_plausible(sender as usize, seq) {
                return Some(count_drop(counters, Counter::DropIcmpErrorOutOfWindow));
            }
        }
        let (orig, reply) = (e.orig(), e.reply());
        let client = (orig.src_ip(), orig.sport);
        let vip = (orig.dst_ip(), orig.dport);
        let backend = (reply.src_ip(), reply.sport);
        // Where the backend's packets go: the local address (full-NAT) or the client (DNAT).
        let local = (reply.dst_ip(), reply.dport);
        // Where the error goes is known before anything is counted or
        // changed: a frame left unsent is left as it came.
        let out = match dir {
            Dir::Reply => rec.client_port,
            Dir::Original => rec.backend_port,
        } as usize;
        let Some(out_mac) = ports.get(out).map(|port| port.mac) else {
            return Some(count_drop(counters, Counter::DropNoRoute));
        };
        // (outer source for full-NAT, the end told, the end it is about)
        let (outer_src, to, about) = match dir {
            // We sent the quoted packet towards the backend: tell the client.
            Dir::Reply => (vip.0, client, vip),
            // We sent the quoted packet towards the client: tell the backend.
            Dir::Original => (local.0, backend, local),
        };
        let outer_src = (rec.mode == Mode::FullNat).then_some(outer_src);
        let ok = nat::rewrite_icmp_error(frame, p, outer_src, Some(to.0), Some(to), Some(about));
        if let Err(e) = ok {
            return Some(count_drop(counters, e.counter()));
        }
        if nat::decrement_ttl(frame, p).is_err() {
            return Some(count_drop(counters, Counter::DropSlowpathUnhandled));
        }
        counters.inc(Counter::IcmpErrorsTranslated);
        Some(match dir {
            Dir::Reply => {
                nat::set_macs(frame, out_mac, rec.client_mac);
                Verdict::Send {
                    port: out,
                    len: frame.len(),
                }
            }
            Dir::Original => self.send_to_hop(frame, out, rec.hop, ports, counters),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use conf::state::FlowStats;
    use conf::Config;
    use etherparse::{Icmpv4Type, PacketBuilder, TcpHeader};

    use super::*;
    use crate::neigh::NeighborSync;
    use crate::port::ports_from_config;
    use crate::wire::parse_frame;

    const INT: usize = 1;
    /// A second client-side port: the one the test's client comes by.
    const EXT2: usize = 2;
    const MACS: [[u8; 6]; 3] = [[2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 2, 1], [2, 0, 0, 0, 3, 1]];
    const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0xc1, 1];
    const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 0xb1, 1];
    const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 50);
    const VIP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 100);
    const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 10);
    const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 1);

    /// Full-NAT VIP 10.1.0.100:80 with one backend behind `int`; clients
    /// on `ext` and `ext2`.
    const CONFIG: &str = r#"
instance = "rewrite"
mgmt = { listen = "unix:///run/border/rewrite.sock" }
dataplane = { main_lcore = 0, worker_lcores = [1], flow_hash_key = "00112233445566778899aabbccddeeff" }
port = [
  { name = "ext", devargs = "net_null0", addresses = ["10.1.0.1/24"] },
  { name = "int", devargs = "net_null1", addresses = ["10.2.0.1/16"], local_addresses = ["10.2.0.1"], local_port_range = [1024, 65535] },
  { name = "ext2", devargs = "net_null2", addresses = ["10.3.0.1/24"] },
]
vip = [
  { name = "fnat4", address = "10.1.0.100", port = 80, mode = "fullnat", backend = [{ address = "10.2.0.10", port = 8080 }] },
]
"#;

    /// An ICMP error about a tracked flow, to go to a client whose port
    /// the port table the frame is handled with does not hold: dropped as
    /// unroutable before anything is counted or rewritten. (It used to be
    /// counted as translated and rewritten, and then handed back as not
    /// load-balancer traffic, so the pipeline passed the rewritten frame
    /// on to the local path.)
    #[test]
    fn icmp_error_towards_a_port_not_in_the_table_is_dropped_unchanged() {
        let cfg = Config::from_toml_str(CONFIG, "rewrite.toml").expect("config");
        let stats = || FlowStats::detached(64);
        let timeouts = cfg.dataplane.timeouts;
        let mut lb = Lb::new(0, 1, 256, timeouts, NeighborSync::new(1), stats(), stats());
        lb.learn(BACKEND.into(), BACKEND_MAC);
        lb.adopt(crate::standalone::adopted_from_config(&cfg, 1).expect("tables"));
        let ports = ports_from_config(&cfg, &MACS, false);
        let mut counters = Counters::default();

        let mut syn = Vec::new();
        let mut tcp = TcpHeader::new(40_000, 80, 1000, 4096);
        tcp.syn = true;
        PacketBuilder::ethernet2(CLIENT_MAC, MACS[EXT2])
            .ipv4(CLIENT.octets(), VIP.octets(), 64)
            .tcp_header(tcp)
            .write(&mut syn, &[])
            .unwrap();
        let len = syn.len();
        let p = parse_frame(&syn).expect("parses");
        let v = lb.handle(&mut syn, len, &p, EXT2, &ports, &mut counters);
        assert_eq!(v, Some(Verdict::Send { port: INT, len }));

        // A router towards the backend cannot forward what we sent.
        let mut err = Vec::new();
        PacketBuilder::ethernet2(BACKEND_MAC, MACS[INT])
            .ipv4(BACKEND.octets(), LOCAL.octets(), 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: 1400,
                },
            ))
            .write(&mut err, &syn[14..len])
            .unwrap();
        let before = err.clone();
        let len = err.len();
        let p = parse_frame(&err).expect("parses");
        let known = &ports[..=INT];
        let v = lb.handle(&mut err, len, &p, INT, known, &mut counters);
        assert_eq!(v, Some(Verdict::Drop(Counter::DropNoRoute)));
        assert_eq!(err, before, "the frame is not rewritten");
        assert_eq!(counters.get(Counter::IcmpErrorsTranslated), 0);
        assert_eq!(counters.get(Counter::DropNoRoute), 1);
    }
}
