//! The express lane against the general path: two appliances, one with the
//! lane and one without, get the same packets (handshakes, data both ways,
//! FINs and RSTs, and the same packets damaged); every verdict, every byte
//! sent, every counter, statistic and connection state must agree.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use conf::state::{FlowStat, FlowStats};
use conf::Config;
use etherparse::{PacketBuilder, TcpHeader};

use super::*;
use crate::lb::key::key_of;
use crate::lb::Adopted;
use crate::lb::FlowRec;
use crate::lb::Lb;
use crate::neigh::NeighborSync;
use crate::pipeline::Pipeline;
use crate::port::ports_from_config;
use crate::ppv2::PpFlow;
use crate::wire::L3Kind;

const EXT: usize = 0;
const INT: usize = 1;
const EXT_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
const INT_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0xc1, 1];
const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 0xb1, 1];

const CONFIG: &str = r#"
instance = "express"
[dataplane]
main_lcore = 0
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "net_null0"
addresses = ["10.1.0.1/24", "fd00:1::1/64"]
[[port]]
name = "int"
devargs = "net_null1"
addresses = ["10.2.0.1/16", "fd00:2::1/64"]
local_addresses = ["10.2.0.1", "fd00:2::1"]
local_port_range = [1024, 65535]
[mgmt]
listen = "unix:///run/border/express.sock"

[[vip]]
name = "fnat4"
address = "10.1.0.100"
port = 80
mode = "fullnat"
[[vip.backend]]
address = "10.2.0.10"
port = 8080
[[vip.backend]]
address = "10.2.0.11"
port = 8080

[[vip]]
name = "dnat4"
address = "10.1.0.101"
port = 80
mode = "dnat"
[[vip.backend]]
address = "10.2.0.20"
port = 8080

[[vip]]
name = "fnat6"
address = "fd00:1::100"
port = 80
mode = "fullnat"
[[vip.backend]]
address = "fd00:2::10"
port = 8080

[[vip]]
name = "udp4"
address = "10.1.0.100"
port = 53
protocol = "udp"
mode = "fullnat"
[[vip.backend]]
address = "10.2.0.30"
port = 5353

[[vip]]
name = "pp4"
address = "10.1.0.102"
port = 80
mode = "fullnat"
proxy_protocol = "v2"
[[vip.backend]]
address = "10.2.0.40"
port = 8080

[[vip]]
name = "udpdnat4"
address = "10.1.0.101"
port = 53
protocol = "udp"
mode = "dnat"
[[vip.backend]]
address = "10.2.0.21"
port = 5353

[[vip]]
name = "dnat6"
address = "fd00:1::101"
port = 80
mode = "dnat"
[[vip.backend]]
address = "fd00:2::20"
port = 8080

[[vip]]
name = "pp6"
address = "fd00:1::102"
port = 80
mode = "fullnat"
proxy_protocol = "v2"
[[vip.backend]]
address = "fd00:2::40"
port = 8080
"#;

fn node(express: bool) -> Pipeline {
    let cfg = Config::from_toml_str(CONFIG, "express.toml").expect("config");
    let mut lb = Lb::new(
        0,
        1,
        256,
        cfg.dataplane.timeouts,
        NeighborSync::new(1),
        FlowStats::detached(64),
        FlowStats::detached(64),
    );
    for v in &cfg.vips {
        for b in &v.backends {
            lb.neighbors.learn(b.address, BACKEND_MAC, 0);
        }
    }
    lb.adopt(crate::standalone::adopted_from_config(&cfg, 1).expect("tables"));
    lb.express_off = !express;
    Pipeline::new(ports_from_config(&cfg, &[EXT_MAC, INT_MAC], false), lb)
}

/// One connection of the test: its client end and VIP, and what the
/// appliance made of them (the backend's view), once known.
#[derive(Clone, Copy, Debug)]
struct Conn {
    client: (IpAddr, u16),
    vip: (IpAddr, u16),
    udp: bool,
    /// (backend, local-or-client) as the backend sees the connection.
    seen: Option<((IpAddr, u16), (IpAddr, u16))>,
}

#[allow(clippy::too_many_arguments)]
fn frame(
    smac: [u8; 6],
    dmac: [u8; 6],
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
    udp: bool,
    flags: u8,
    ttl: u8,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(smac, dmac);
    let mut out = Vec::new();
    let b = match (src.0, dst.0) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), ttl),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), ttl),
        _ => unreachable!(),
    };
    if udp {
        b.udp(src.1, dst.1).write(&mut out, payload).unwrap();
    } else {
        let mut h = TcpHeader::new(src.1, dst.1, 1000, 4096);
        h.fin = flags & TcpFlags::FIN.0 != 0;
        h.syn = flags & TcpFlags::SYN.0 != 0;
        h.rst = flags & TcpFlags::RST.0 != 0;
        h.psh = flags & TcpFlags::PSH.0 != 0;
        h.ack = flags & TcpFlags::ACK.0 != 0;
        h.acknowledgment_number = 7;
        b.tcp_header(h).write(&mut out, payload).unwrap();
    }
    out
}

/// Addresses and ports of a frame the appliance sent: (src, dst).
fn ends(f: &[u8]) -> ((IpAddr, u16), (IpAddr, u16)) {
    let p = crate::wire::parse_frame(f).expect("sent frames parse");
    let l3 = p.l3_offset;
    let (s, d) = match p.l3 {
        L3Kind::Ipv4 => (
            IpAddr::from(<[u8; 4]>::try_from(&f[l3 + 12..l3 + 16]).unwrap()),
            IpAddr::from(<[u8; 4]>::try_from(&f[l3 + 16..l3 + 20]).unwrap()),
        ),
        _ => (
            IpAddr::from(<[u8; 16]>::try_from(&f[l3 + 8..l3 + 24]).unwrap()),
            IpAddr::from(<[u8; 16]>::try_from(&f[l3 + 24..l3 + 40]).unwrap()),
        ),
    };
    let pt = p.ports.expect("ports");
    ((s, pt.src), (d, pt.dst))
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs one frame through both appliances and checks they agree.
/// Each frame gets room to grow, as in an mbuf (a PROXY header).
fn both(a: &mut Pipeline, b: &mut Pipeline, port: usize, f: &[u8]) -> Option<Vec<u8>> {
    let mut fa = f.to_vec();
    fa.resize(f.len() + 256, 0);
    let mut fb = fa.clone();
    let va = a.process(port, &mut fa, f.len());
    let vb = b.process(port, &mut fb, f.len());
    assert_eq!(va, vb, "verdicts differ for {f:02x?}");
    assert_eq!(fa, fb, "frames differ for {f:02x?}");
    assert_eq!(
        a.counters().nonzero(),
        b.counters().nonzero(),
        "counters after {f:02x?}"
    );
    match va {
        Verdict::Send { len, .. } => Some(fa[..len].to_vec()),
        _ => None,
    }
}

fn tick(a: &mut Pipeline, b: &mut Pipeline, now: u64) {
    a.tick(now);
    b.tick(now);
}

/// A DNAT backend's packets to the client take the express lane (they
/// used to go the general path only) and come out the same: from the
/// VIP, to the client, out of the client's port, checksums right.
#[test]
fn dnat_replies_take_the_express_lane() {
    let (mut a, mut b) = (node(true), node(false));
    tick(&mut a, &mut b, 1_000);
    let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
    let client = (v4([10, 1, 0, 50]), 40_000);
    for udp in [false, true] {
        let vip = (v4([10, 1, 0, 101]), if udp { 53 } else { 80 });
        let flags = if udp { 0 } else { 0x02 };
        let syn = frame(CLIENT_MAC, EXT_MAC, client, vip, udp, flags, 64, b"q");
        let out = both(&mut a, &mut b, EXT, &syn).expect("forwarded to a backend");
        let (from, backend) = ends(&out);
        assert_eq!(from, client, "DNAT keeps the client's source");
        let taken = a.lb().express_taken;
        for (flags, payload) in [(0x12, &b""[..]), (0x18, &b"reply"[..])] {
            let reply = frame(
                BACKEND_MAC,
                INT_MAC,
                backend,
                client,
                udp,
                flags,
                64,
                payload,
            );
            let out = both(&mut a, &mut b, INT, &reply).expect("reply forwarded");
            assert_eq!(ends(&out), (vip, client), "from the VIP to the client");
            assert_eq!(&out[..12], &[CLIENT_MAC, EXT_MAC].concat()[..]);
            let p = crate::wire::parse_frame(&out).expect("valid frame");
            assert_eq!(p.ttl, 63);
            use crate::wire::checksum;
            assert!(checksum::verify(&out[14..34]), "IPv4 header checksum");
            let at = p.l4_offset + if udp { 6 } else { 16 };
            let mut seg = out[p.l4_offset..].to_vec();
            seg[at - p.l4_offset..at - p.l4_offset + 2].fill(0);
            let (IpAddr::V4(s), IpAddr::V4(d)) = (vip.0, client.0) else {
                unreachable!()
            };
            let proto = if udp { ip_proto::UDP } else { ip_proto::TCP };
            let mut want = checksum::l4_checksum_v4(s, d, proto, &seg);
            if udp {
                want = checksum::udp_finish(want);
            }
            assert_eq!(out[at..at + 2], want.to_be_bytes(), "L4 checksum");
            if !udp && flags == 0x12 {
                // The client's ACK of the SYN-ACK (at 1000) completes the
                // handshake: until then the backend's segments change state.
                let ack = numbered(
                    CLIENT_MAC,
                    EXT_MAC,
                    client,
                    vip,
                    0x10,
                    (1002, 1001),
                    None,
                    b"",
                );
                both(&mut a, &mut b, EXT, &ack).expect("the handshake's ACK forwarded");
            }
        }
        // The SYN-ACK and the handshake's ACK change the TCP state (the
        // general path); the data segment, and both UDP replies, are the
        // lane's.
        let express = if udp { 2 } else { 1 };
        assert_eq!(a.lb().express_taken - taken, express, "udp {udp}");
        assert_eq!(b.lb().express_taken, 0);
    }
}

/// A TCP segment with sequence and acknowledgement numbers and at most
/// one SACK block (after a NOP, so its edges sit at odd offsets).
#[allow(clippy::too_many_arguments)]
fn numbered(
    smac: [u8; 6],
    dmac: [u8; 6],
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
    flags: u8,
    (seq, ack): (u32, u32),
    sack: Option<(u32, u32)>,
    payload: &[u8],
) -> Vec<u8> {
    use etherparse::TcpOptionElement;
    let b = PacketBuilder::ethernet2(smac, dmac);
    let b = match (src.0, dst.0) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!("one family per flow"),
    };
    let mut h = TcpHeader::new(src.1, dst.1, seq, 4096);
    h.fin = flags & 0x01 != 0;
    h.syn = flags & 0x02 != 0;
    h.rst = flags & 0x04 != 0;
    h.psh = flags & 0x08 != 0;
    h.ack = flags & 0x10 != 0;
    h.acknowledgment_number = ack;
    if let Some(block) = sack {
        h.set_options(&[
            TcpOptionElement::Noop,
            TcpOptionElement::SelectiveAcknowledgement(block, [None, None, None]),
        ])
        .unwrap();
    }
    let mut out = Vec::new();
    b.tcp_header(h).write(&mut out, payload).unwrap();
    out
}

/// PROXY protocol flows past their header take the express lane both
/// ways (sequence numbers shifted, acknowledgements and SACK edges
/// mapped back, values inside the header too), exactly as the general
/// path translates them; FINs, RSTs and retransmissions of the first
/// segment included, sequence numbers wrapping.
///
/// Over 150 lines because it is one differential scenario, moved here as it
/// was (a test that moves is not rewritten, so it still proves what it
/// proved): both workers must see every step in the same order.
#[test]
fn steady_proxy_flows_take_the_express_lane_as_the_general_path() {
    const ACK: u8 = TcpFlags::ACK.0;
    const PSH_ACK: u8 = TcpFlags::PSH.0 | TcpFlags::ACK.0;
    let (mut a, mut b) = (node(true), node(false));
    tick(&mut a, &mut b, 1_000);
    let mut rng = Rng(0x5EED_0F9E_3779_B9A1);
    let mut conns = Vec::new();
    let mut steady_frames = 0;
    for c in 0..16u16 {
        // IPv4 and IPv6 VIPs in turn.
        let (vip, client, headers) = if c % 2 == 0 {
            let vip = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 102));
            (vip, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 60 + c as u8)), 54)
        } else {
            let vip = IpAddr::V6("fd00:1::102".parse().unwrap());
            (
                vip,
                IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x60 + c)),
                74,
            )
        };
        let (vip, client) = ((vip, 80), (client, 30_000 + c));
        // Some connections start right below the wrap of the sequence space.
        let isn = if c % 3 == 0 {
            u32::MAX - 2 - u32::from(c)
        } else {
            rng.next() as u32
        };
        let bisn = rng.next() as u32;
        let c1 = isn.wrapping_add(1);
        let from_client = |flags, seq: u32, ack: u32, payload: &[u8]| {
            numbered(
                CLIENT_MAC,
                EXT_MAC,
                client,
                vip,
                flags,
                (seq, ack),
                None,
                payload,
            )
        };
        let syn = from_client(0x02, isn, 0, &[]);
        let out = both(&mut a, &mut b, EXT, &syn).expect("SYN forwarded");
        let (local, backend) = ends(&out);
        let from_backend = |flags, seq: u32, ack: u32, sack, payload: &[u8]| {
            numbered(
                BACKEND_MAC,
                INT_MAC,
                backend,
                local,
                flags,
                (seq, ack),
                sack,
                payload,
            )
        };
        let b1 = bisn.wrapping_add(1);
        both(
            &mut a,
            &mut b,
            INT,
            &from_backend(0x12, bisn, c1, None, &[]),
        )
        .expect("SYN-ACK");
        both(&mut a, &mut b, EXT, &from_client(ACK, c1, b1, &[])).expect("ACK");
        let first = b"GET / HTTP/1.0\r\n\r\n";
        let out =
            both(&mut a, &mut b, EXT, &from_client(PSH_ACK, c1, b1, first)).expect("first data");
        let header = out.len() - headers - first.len();
        assert!(header >= 16, "the header goes into the first data");
        let edge = c1.wrapping_add(header as u32);
        let sent = edge.wrapping_add(first.len() as u32);
        both(&mut a, &mut b, INT, &from_backend(ACK, b1, sent, None, &[])).expect("ACK of it");
        let key = key_of(client.0, vip.0, client.1, vip.1, ip_proto::TCP);
        let (id, _) = a.lb().conntrack.lookup(&key, 1_000).expect("entry");
        assert!(a.lb().conntrack.get(id).value.proxy.steady());

        let taken = a.lb().express_taken;
        let mut ours = first.len() as u32;
        for step in 0..60u32 {
            let payload = vec![step as u8; rng.below(30) as usize];
            let frame = match rng.below(9) {
                // Client data and ACKs, now and then a retransmission
                // of the first segment.
                0..=2 => from_client(PSH_ACK, c1.wrapping_add(ours), b1, &payload),
                3 => from_client(PSH_ACK, c1, b1, first),
                // Backend data acknowledging something past, inside or
                // before the header, some with a SACK block.
                4..=6 => {
                    let ack = match rng.below(4) {
                        0 => c1.wrapping_add(rng.below(u64::from(header as u32)) as u32),
                        1 => isn,
                        _ => sent.wrapping_add(rng.below(u64::from(ours)) as u32),
                    };
                    let sack = (rng.below(3) == 0).then(|| {
                        let l = edge.wrapping_add(rng.below(40) as u32);
                        (l, l.wrapping_add(8))
                    });
                    from_backend(PSH_ACK, b1, ack, sack, &payload)
                }
                7 => from_client(ACK, c1.wrapping_add(ours), b1, &[]),
                _ => from_backend(ACK, b1, sent, Some((c1, edge)), &[]),
            };
            // Some damaged, as on a bad link: a flipped bit in the
            // headers or a cut frame.
            let port = if frame[6..12] == CLIENT_MAC { EXT } else { INT };
            let mut frame = frame;
            match rng.below(12) {
                0 => {
                    let at = rng.below(frame.len().min(70) as u64) as usize;
                    frame[at] ^= 1 << rng.below(8);
                }
                1 => frame.truncate(rng.below(frame.len() as u64) as usize),
                _ => ours += payload.len() as u32,
            }
            if both(&mut a, &mut b, port, &frame).is_some() {
                steady_frames += 1;
            }
        }
        // A FIN each way, then an RST from the client.
        both(
            &mut a,
            &mut b,
            EXT,
            &from_client(0x11, c1.wrapping_add(ours), b1, &[]),
        );
        both(
            &mut a,
            &mut b,
            INT,
            &from_backend(0x11, b1, sent, None, &[]),
        );
        if c % 2 == 0 {
            both(
                &mut a,
                &mut b,
                EXT,
                &from_client(0x14, c1.wrapping_add(ours + 1), b1, &[]),
            );
        }
        assert!(
            a.lb().express_taken - taken >= 40,
            "express lane took {} of connection {c}'s frames",
            a.lb().express_taken - taken
        );
        conns.push(Conn {
            client,
            vip,
            udp: false,
            seen: Some((backend, local)),
        });
    }
    assert!(steady_frames > 800, "{steady_frames} frames sent");
    assert_eq!(b.lb().express_taken, 0);
    same_state(&a, &b, &conns, 1_000);
}

#[test]
fn what_every_packet_reads_is_in_two_cache_lines() {
    use core::mem::{align_of, offset_of, size_of};
    type E = crate::conntrack::Entry<FlowRec>;
    assert_eq!(offset_of!(FlowRec, conn_id), 32, "hot part of FlowRec");
    assert_eq!(size_of::<FlowRec>() - size_of::<PpFlow>(), 40);
    assert_eq!(align_of::<E>(), 64);
    assert!(offset_of!(E, value) + 32 <= 128);
    assert_eq!(size_of::<E>(), 192);
}

#[test]
fn express_lane_is_the_general_path() {
    for seed in [
        0x9E37_79B9_7F4A_7C15,
        0x1234_5678_9ABC_DEF1,
        0x0BAD_CAFE_F00D_D00D,
    ] {
        compare(seed);
    }
}

/// The VIPs of `CONFIG` the differential tests send traffic to, with
/// whether they are UDP: both modes, both families, TCP and UDP, PROXY.
fn traffic_vips() -> [((IpAddr, u16), bool); 7] {
    let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
    let v6 = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().unwrap());
    [
        ((v4([10, 1, 0, 100]), 80), false),
        ((v4([10, 1, 0, 101]), 80), false),
        ((v6("fd00:1::100"), 80), false),
        ((v4([10, 1, 0, 100]), 53), true),
        ((v4([10, 1, 0, 102]), 80), false),
        ((v4([10, 1, 0, 101]), 53), true),
        ((v6("fd00:1::101"), 80), false),
    ]
}

fn compare(seed: u64) {
    let (mut a, mut b) = (node(true), node(false));
    let mut rng = Rng(seed);
    let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
    let vips = traffic_vips();
    let mut conns = Vec::new();
    for i in 0..60u16 {
        let (vip, udp) = vips[usize::from(i) % vips.len()];
        let client = match vip.0 {
            IpAddr::V4(_) => v4([10, 1, 0, 50 + (i % 7) as u8]),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x50 + i)),
        };
        conns.push(Conn {
            client: (client, 20_000 + i),
            vip,
            udp,
            seen: None,
        });
    }
    let mut now = 1_000;
    tick(&mut a, &mut b, now);
    let mut sent = 0;
    for round in 0..4_000u32 {
        let i = rng.below(conns.len() as u64) as usize;
        let c = conns[i];
        let (port, f) = random_frame(&mut rng, &c, round);
        if let Some(out) = both(&mut a, &mut b, port, &f) {
            sent += 1;
            if port == EXT && out.len() > 54 - 20 {
                if let Ok(p) = crate::wire::parse_frame(&out) {
                    if p.ports.is_some() && (p.l4_proto == ip_proto::UDP) == c.udp {
                        let (src, dst) = ends(&out);
                        if dst.1 == 8080 || dst.1 == 5353 {
                            conns[i].seen = Some((dst, src));
                        }
                    }
                }
            }
        }
        if rng.below(50) == 0 {
            let span = if rng.below(20) == 0 { 400_000 } else { 2_000 };
            now += rng.below(span);
            tick(&mut a, &mut b, now);
        }
    }
    assert!(sent > 1_000, "only {sent} frames went through");
    assert!(
        a.lb().express_taken > 1_000 && b.lb().express_taken == 0,
        "express lane took {} frames",
        a.lb().express_taken
    );
    same_state(&a, &b, &conns, now);
}

/// Same connections in the same states, same statistics.
fn same_state(a: &Pipeline, b: &Pipeline, conns: &[Conn], now: u64) {
    assert_eq!(a.lb().conntrack.len(), b.lb().conntrack.len());
    for c in conns {
        let proto = if c.udp { ip_proto::UDP } else { ip_proto::TCP };
        let key = key_of(c.client.0, c.vip.0, c.client.1, c.vip.1, proto);
        let sa = a.lb().conntrack.lookup(&key, now).map(|(id, _)| {
            let e = a.lb().conntrack.get(id);
            (e.state(), e.expires_at(), *e.reply(), e.value)
        });
        let sb = b.lb().conntrack.lookup(&key, now).map(|(id, _)| {
            let e = b.lb().conntrack.get(id);
            (e.state(), e.expires_at(), *e.reply(), e.value)
        });
        assert_eq!(sa, sb, "{c:?}");
    }
    for slot in 0..64 {
        for stat in FlowStat::ALL {
            assert_eq!(
                a.lb().vip_stats.get(slot, stat),
                b.lb().vip_stats.get(slot, stat)
            );
            assert_eq!(
                a.lb().backend_stats.get(slot, stat),
                b.lb().backend_stats.get(slot, stat)
            );
        }
    }
    assert_eq!(a.lb().proxy_out.emits.len(), b.lb().proxy_out.emits.len());
}

/// A random frame of the differential tests: a segment of connection
/// `c` from its client or (once seen) its backend, mostly plain, some
/// opening or closing, some with a low TTL, some damaged.
fn random_frame(rng: &mut Rng, c: &Conn, round: u32) -> (usize, Vec<u8>) {
    let flags = match rng.below(40) {
        0 => 0x02,
        1 => 0x11,
        2 => 0x04,
        3 => 0x14,
        4 => 0x12,
        5 => 0x01 | 0x02,
        _ => 0x18,
    };
    let ttl = match rng.below(30) {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 64,
    };
    let payload = vec![round as u8; rng.below(24) as usize];
    let from_backend = c.seen.is_some() && rng.below(2) == 0;
    let (port, mut f) = match c.seen {
        Some((backend, to)) if from_backend => (
            INT,
            frame(
                BACKEND_MAC,
                INT_MAC,
                backend,
                to,
                c.udp,
                flags,
                ttl,
                &payload,
            ),
        ),
        _ => (
            EXT,
            frame(
                CLIENT_MAC, EXT_MAC, c.client, c.vip, c.udp, flags, ttl, &payload,
            ),
        ),
    };
    match rng.below(12) {
        0 => {
            let at = rng.below(f.len().min(70) as u64) as usize;
            f[at] ^= 1 << rng.below(8);
        }
        1 => {
            let at = rng.below(f.len().min(70) as u64) as usize;
            f[at] = rng.next() as u8;
        }
        2 => f.truncate(rng.below(f.len() as u64) as usize),
        3 => {
            let tag = [0x81, 0x00, 0x00, rng.next() as u8];
            f.splice(12..12, tag);
        }
        4 => f[0] = 0xff, // not to the port's MAC: never prepared
        _ => {}
    }
    (port, f)
}

#[derive(Clone)]
struct TestClock(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl crate::worker::Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

type TestWorker = crate::worker::Worker<crate::io::MemPorts, TestClock, crate::worker::NoTables>;

fn worker(express: bool, clock: &TestClock) -> TestWorker {
    crate::worker::Worker::new(
        crate::io::MemPorts::new(2),
        node(express),
        crate::worker::Poll::Busy,
        clock.clone(),
        crate::worker::NoTables,
        crate::worker::Handoff::new(1),
    )
}

/// A table generation that shows up at the worker's `at`-th look
/// between bursts.
struct ArrivesBetweenBursts {
    looks: std::cell::Cell<usize>,
    at: usize,
    next: Option<Adopted<'static>>,
}

impl crate::worker::TableSource for ArrivesBetweenBursts {
    fn poll(&mut self, _current: Option<u64>) -> crate::worker::TablePoll {
        match self.next.take_if(|_| self.looks.get() >= self.at) {
            Some(t) => crate::worker::TablePoll::New(Box::new(t)),
            None => crate::worker::TablePoll::Nothing,
        }
    }
    fn has_news(&self, _current: Option<u64>) -> bool {
        self.looks.set(self.looks.get() + 1);
        self.looks.get() >= self.at && self.next.is_some()
    }
}

/// The worker looks for a new generation before every RX burst, not
/// once per poll iteration, and adopts it right after the burst it
/// already prepared under the old one; the rest waits for the next
/// iteration (and runs under the new generation).
#[test]
fn a_new_generation_is_seen_between_bursts() {
    let cfg = Config::from_toml_str(CONFIG, "express.toml").expect("config");
    for (at, first) in [(1, 32), (3, 96)] {
        let clock = TestClock(Default::default());
        let source = ArrivesBetweenBursts {
            looks: Default::default(),
            at,
            next: Some(crate::standalone::adopted_from_config(&cfg, 2).expect("tables")),
        };
        let mut w = crate::worker::Worker::new(
            crate::io::MemPorts::new(2),
            node(true),
            crate::worker::Poll::Busy,
            clock.clone(),
            source,
            crate::worker::Handoff::new(1),
        );
        let vip = (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 100)), 80);
        for i in 0..100u16 {
            let client = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)), 30_000 + i);
            w.io.inject(
                EXT,
                &frame(CLIENT_MAC, EXT_MAC, client, vip, false, 0x02, 64, &[]),
            );
        }
        let before = w.pipeline.lb().generation();
        assert_eq!(w.poll_once(), first, "at {at}");
        assert_eq!(w.io.take_tx(INT).len(), first, "at {at}: SYNs forwarded");
        assert_eq!(
            w.pipeline.lb().generation(),
            Some(2),
            "at {at}: adopted after burst"
        );
        assert_ne!(before, Some(2));
        assert_eq!(
            w.io.rx[EXT].len(),
            100 - first,
            "at {at}: left for the next round"
        );
        assert_eq!(w.poll_once(), 100 - first);
        assert_eq!(w.io.take_tx(INT).len(), 100 - first);
    }
}

/// The worker's burst passes (prepare and prefetch the whole burst,
/// then each frame) against the general path frame by frame in the
/// same worker loop: bursts of 1 to 40 frames over both ports, several
/// frames of one connection in a burst (a RST or FIN ahead of a data
/// segment, a SYN re-opening a closed tuple), expiry in between.
#[test]
fn express_bursts_are_the_general_path() {
    for seed in [0x51ED_2701_F00D_0001_u64, 0x0DDB_A11C_AFE5_7EA7] {
        compare_bursts(seed);
    }
}

fn compare_bursts(seed: u64) {
    use std::sync::atomic::Ordering;
    let clock = TestClock(Default::default());
    let (mut a, mut b) = (worker(true, &clock), worker(false, &clock));
    let mut rng = Rng(seed);
    let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
    let vips = traffic_vips();
    // Few connections, so that a burst often holds several frames of one.
    let mut conns: Vec<Conn> = (0..12u16)
        .map(|i| {
            let (vip, udp) = vips[usize::from(i) % vips.len()];
            let client = match vip.0 {
                IpAddr::V4(_) => v4([10, 1, 0, 50 + (i % 7) as u8]),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x50 + i)),
            };
            Conn {
                client: (client, 20_000 + i),
                vip,
                udp,
                seen: None,
            }
        })
        .collect();
    let mut now = 1_000;
    clock.0.store(now, Ordering::Relaxed);
    let mut sent = 0;
    for round in 0..400u32 {
        for _ in 0..=rng.below(40) {
            let i = rng.below(conns.len() as u64) as usize;
            let (port, f) = random_frame(&mut rng, &conns[i], round);
            a.io.inject(port, &f);
            b.io.inject(port, &f);
        }
        while a.io.rx.iter().any(|q| !q.is_empty()) {
            a.poll_once();
            b.poll_once();
        }
        assert!(b.io.rx.iter().all(|q| q.is_empty()));
        for port in [EXT, INT] {
            let (ta, tb) = (a.io.take_tx(port), b.io.take_tx(port));
            assert_eq!(ta, tb, "round {round}: frames sent on port {port}");
            sent += ta.len();
        }
        assert_eq!(
            a.pipeline.counters().nonzero(),
            b.pipeline.counters().nonzero(),
            "round {round}: counters"
        );
        // Learn where the connections went.
        for c in conns.iter_mut() {
            let proto = if c.udp { ip_proto::UDP } else { ip_proto::TCP };
            let key = key_of(c.client.0, c.vip.0, c.client.1, c.vip.1, proto);
            if let Some((id, Dir::Original)) = a.pipeline.lb().conntrack.lookup(&key, now) {
                let r = *a.pipeline.lb().conntrack.get(id).reply();
                c.seen = Some(((r.src_ip(), r.sport), (r.dst_ip(), r.dport)));
            }
        }
        if rng.below(10) == 0 {
            let span = if rng.below(20) == 0 { 400_000 } else { 2_000 };
            now += rng.below(span);
            clock.0.store(now, Ordering::Relaxed);
        }
    }
    let (pa, pb) = (&a.pipeline, &b.pipeline);
    assert!(sent > 2_000, "only {sent} frames went through");
    assert!(
        pa.lb().express_taken > 2_000 && pb.lb().express_taken == 0,
        "express lane took {} frames",
        pa.lb().express_taken
    );
    same_state(pa, pb, &conns, now);
}

/// New flows in the burst passes: the lane starts the lookup of every
/// SYN, FIN and RST it leaves to the general path (their index buckets
/// load with the burst's other misses). A burst of SYNs, one of them
/// repeated, with the ACK, FIN or RST of some of those flows behind
/// their SYN in the same burst, comes out as frame by frame through the
/// general path: same frames, counters and entries.
#[test]
fn new_flows_in_one_burst_are_the_general_path() {
    use std::sync::atomic::Ordering;
    let clock = TestClock(Default::default());
    clock.0.store(1_000, Ordering::Relaxed);
    let (mut a, mut b) = (worker(true, &clock), worker(false, &clock));
    let vip = (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 100)), 80);
    let client = |i: u16| (IpAddr::V4(Ipv4Addr::new(10, 1, 0, 50)), 30_000 + i);
    let seg = |i: u16, flags: u8| frame(CLIENT_MAC, EXT_MAC, client(i), vip, false, flags, 64, &[]);
    let mut burst: Vec<Vec<u8>> = (0..24).map(|i| seg(i, 0x02)).collect();
    burst.insert(5, seg(0, 0x02)); // the same SYN twice
    burst.push(seg(1, 0x10)); // behind its SYN: an ACK,
    burst.push(seg(2, 0x11)); // a FIN,
    burst.push(seg(3, 0x04)); // a RST
    burst.push(seg(4, 0x18)); // and data
    assert!(burst.len() <= crate::io::BURST);
    for w in [&mut a, &mut b] {
        for f in &burst {
            w.io.inject(EXT, f);
        }
        assert_eq!(w.poll_once(), burst.len());
    }
    let (ta, tb) = (a.io.take_tx(INT), b.io.take_tx(INT));
    assert_eq!(ta, tb, "frames sent to the backends");
    assert!(ta.len() >= 25, "only {} frames forwarded", ta.len());
    let (pa, pb) = (&a.pipeline, &b.pipeline);
    assert_eq!(pa.counters().nonzero(), pb.counters().nonzero());
    assert_eq!(pa.counters().get(Counter::NewFlows), 24);
    assert_eq!(pa.lb().conntrack.len(), 24);
    let conns: Vec<Conn> = (0..24)
        .map(|i| Conn {
            client: client(i),
            vip,
            udp: false,
            seen: None,
        })
        .collect();
    same_state(pa, pb, &conns, 1_000);
}

/// New flows picked in the burst passes (`early.rs`): the first pass
/// takes each SYN's Maglev hash, the second its backend and the reply key
/// it will most likely get (a guessed local tuple), and the general path
/// takes both when they hold. Full bursts of SYNs to full-NAT, DNAT and
/// PROXY VIPs of both families (the worker prepares a burst before the
/// previous one has run), then a burst where one SYN's checksum is bad and
/// one client sends its SYN twice (the guesses behind them are off by
/// one): same frames, counters and entries as the general path alone,
/// and every pick and every reply key but the mis-guessed ones from the
/// passes.
#[test]
fn new_flows_picked_in_the_passes_are_the_general_path() {
    use std::sync::atomic::Ordering;
    let clock = TestClock(Default::default());
    clock.0.store(1_000, Ordering::Relaxed);
    let (mut a, mut b) = (worker(true, &clock), worker(false, &clock));
    let v4 = |x: [u8; 4]| IpAddr::V4(Ipv4Addr::from(x));
    let v6 = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().unwrap());
    let vips = [
        (v4([10, 1, 0, 100]), 80),
        (v4([10, 1, 0, 101]), 80),
        (v6("fd00:1::100"), 80),
        (v6("fd00:1::101"), 80),
        (v4([10, 1, 0, 102]), 80),
    ];
    let mut conns = Vec::new();
    let mut syn = |i: u16| {
        let vip = vips[usize::from(i) % vips.len()];
        let client = match vip.0 {
            IpAddr::V4(_) => v4([10, 1, 0, 50 + (i % 3) as u8]),
            IpAddr::V6(_) => v6("fd00:1::50"),
        };
        let c = Conn {
            client: (client, 20_000 + i),
            vip,
            udp: false,
            seen: None,
        };
        let f = frame(CLIENT_MAC, EXT_MAC, c.client, vip, false, 0x02, 64, &[]);
        conns.push(c);
        f
    };
    let clean: Vec<Vec<u8>> = (0..96).map(&mut syn).collect();
    let mut rough: Vec<Vec<u8>> = (96..128).map(&mut syn).collect();
    rough[3][50] ^= 0x40; // the TCP checksum of a full-NAT IPv4 SYN
    rough[9] = rough[8].clone(); // a SYN twice
    let news = |w: &TestWorker| w.pipeline.counters().get(Counter::NewFlows);
    for (round, frames) in [clean, rough].iter().enumerate() {
        let (picks0, hits0) = a.pipeline.lb().early_used.get();
        let new0 = news(&a);
        for w in [&mut a, &mut b] {
            for f in frames {
                w.io.inject(EXT, f);
            }
            while w.io.rx.iter().any(|q| !q.is_empty()) {
                w.poll_once();
            }
        }
        let (ta, tb) = (a.io.take_tx(INT), b.io.take_tx(INT));
        assert_eq!(ta, tb, "round {round}: frames sent to the backends");
        let (pa, pb) = (&a.pipeline, &b.pipeline);
        assert_eq!(
            pa.counters().nonzero(),
            pb.counters().nonzero(),
            "round {round}"
        );
        same_state(pa, pb, &conns, 1_000);
        let (picks, hits) = pa.lb().early_used.get();
        let new = news(&a) - new0;
        let (picks, hits) = (picks - picks0, hits - hits0);
        assert_eq!(pb.lb().early_used.get(), (0, 0), "the general path alone");
        if round == 0 {
            assert_eq!(new, 96);
            assert_eq!((picks, hits), (96, 96), "round {round}");
        } else {
            assert_eq!(new, 30, "a bad checksum, a SYN retransmitted");
            assert_eq!(pa.counters().get(Counter::DropBadL4Checksum), 1);
            // The bad SYN's guess and the repeated SYN's second one were
            // taken by no flow: the full-NAT IPv4 guesses after them miss.
            assert_eq!(picks, 30, "round {round}");
            assert!(
                (20..30).contains(&hits),
                "round {round}: {hits} reply hashes"
            );
        }
    }
}
