//! A backend the operator killed (`borderctl backend disable --kill`,
//! state Killed in the tables) on byte fixtures: out of the ring, and every
//! established flow to it ends on its next packet, from either end,
//! whatever the VIP's `on_down`: TCP answered with a RST back the way the
//! packet came (compared byte for byte with one built here), UDP forgotten
//! so the next datagram picks again; each counted once as `flows_killed`.
//! Flows to the other backends go on unchanged; a generation without the
//! kill resets nothing any more.

mod support;

use std::net::{IpAddr, SocketAddr};

use conf::counters::Counter;
use conf::tables::BackendState;
use conf::Config;
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6Header, TcpHeader};
use support::lb::flags::{ACK, PSH, SYN};
use support::lb::*;

/// Generation `g` of `cfg` with `backend` of VIP `vip` killed.
fn kill(n: &mut Node, cfg: &Config, g: u64, vip: u32, backend: IpAddr) {
    let t = generation_with_states(cfg, g, &|vi, a| {
        (vi == vip as usize && a == backend).then_some((1, BackendState::Killed))
    });
    assert!(t.reset_pending);
    adopt_generation(n, t);
}

/// Handshake of a full-NAT flow: (backend, local address the backend sees).
fn handshake(n: &mut Node, client: SocketAddr, vip: SocketAddr) -> (SocketAddr, SocketAddr) {
    let fwd = decode(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
    let synack = Pkt::tcp(fwd.dst, fwd.src, SYN | ACK).by_backend();
    let back = decode(&n.forward(INT, &synack.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, client));
    decode(&n.forward(EXT, &Pkt::tcp(client, vip, ACK).build(), INT));
    (fwd.dst, fwd.src)
}

/// A data segment of the client (seq 1000, ack 1001).
fn client_data(client: SocketAddr, vip: SocketAddr) -> Vec<u8> {
    Pkt::tcp(client, vip, ACK | PSH).payload(b"GET /").build()
}

/// A data segment of the backend: seq 7000, ack 1234.
fn backend_data(backend: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let mut p = Pkt::tcp(backend, to, ACK | PSH)
        .payload(b"200 OK")
        .by_backend();
    p.seq = 7000;
    p.ack = 1234;
    p.build()
}

/// The RST border must send, built here field by field: Ethernet `smac` ->
/// `dmac`, IP `src` -> `dst` (TTL 64, IPv4 DF and identification 0, no
/// options), TCP `<SEQ=seq><CTL=RST>`, window 0, no options, no data.
fn rst(smac: [u8; 6], dmac: [u8; 6], src: SocketAddr, dst: SocketAddr, seq: u32) -> Vec<u8> {
    let mut tcp = TcpHeader::new(src.port(), dst.port(), seq, 0);
    tcp.rst = true;
    let mut out = Vec::new();
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ethernet2Header {
                source: smac,
                destination: dmac,
                ether_type: EtherType::IPV4,
            }
            .write(&mut out)
            .unwrap();
            let mut ip = Ipv4Header::new(20, 64, IpNumber::TCP, s.octets(), d.octets()).unwrap();
            ip.dont_fragment = true;
            ip.write(&mut out).unwrap();
            tcp.checksum = tcp.calc_checksum_ipv4(&ip, &[]).unwrap();
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ethernet2Header {
                source: smac,
                destination: dmac,
                ether_type: EtherType::IPV6,
            }
            .write(&mut out)
            .unwrap();
            let ip = Ipv6Header {
                traffic_class: 0,
                flow_label: Default::default(),
                payload_length: 20,
                next_header: IpNumber::TCP,
                hop_limit: 64,
                source: s.octets(),
                destination: d.octets(),
            };
            ip.write(&mut out).unwrap();
            tcp.checksum = tcp.calc_checksum_ipv6(&ip, &[]).unwrap();
        }
        _ => panic!("mixed families"),
    }
    tcp.write(&mut out).unwrap();
    out
}

fn client_of(vip: SocketAddr, port: u16) -> SocketAddr {
    match vip.ip() {
        IpAddr::V4(_) => sa(CLIENT4, port),
        IpAddr::V6(_) => sa(CLIENT6, port),
    }
}

fn entries(n: &Node) -> usize {
    n.w.pipeline.lb().conntrack().len()
}

/// Connections from `first_port` on until three go to `victim`'s backend
/// and one elsewhere: (client, backend, local) of each, victims first.
struct Flows {
    victim: Vec<(SocketAddr, SocketAddr, SocketAddr)>,
    other: (SocketAddr, SocketAddr, SocketAddr),
}

fn open_flows(n: &mut Node, vip: SocketAddr, first_port: u16) -> Flows {
    let c = client_of(vip, first_port);
    let first = handshake(n, c, vip);
    let b1 = first.0;
    let mut victim = vec![(c, first.0, first.1)];
    let mut other = None;
    for port in first_port + 1..first_port + 200 {
        if victim.len() == 3 && other.is_some() {
            break;
        }
        let c = client_of(vip, port);
        let (b, local) = handshake(n, c, vip);
        if b == b1 {
            victim.push((c, b, local));
        } else if other.is_none() {
            other = Some((c, b, local));
        }
    }
    assert_eq!(victim.len(), 3, "three flows on one backend");
    Flows {
        victim,
        other: other.expect("a flow on another backend"),
    }
}

/// Full-NAT over IPv4 and IPv6, on a VIP without a health check (so
/// `on_down` is the default `keep`): the killed backend's flows get a RST
/// from either end, byte for byte; the others are forwarded as before.
#[test]
fn flows_to_a_killed_backend_are_reset_from_either_end_and_counted() {
    let cfg = config(&[1, 1, 1]);
    for (vi, vip, local_ip, what) in [
        (VIP_TCP4, sa(VIP4, 80), IpAddr::from(LOCAL4), "fullnat v4"),
        (VIP_TCP6, sa(VIP6, 80), IpAddr::from(LOCAL6), "fullnat v6"),
    ] {
        let mut n = node();
        let Flows { victim, other } = open_flows(&mut n, vip, 40000);
        let (c2, b2, l2) = other;
        let b1 = victim[0].1;
        let before = entries(&n);
        kill(&mut n, &cfg, 2, vi, b1.ip());

        // The client's next segment: a RST from the VIP, in the client's
        // sequence space (SEG.ACK 1001), the entry gone.
        let (c, _, _) = victim[0];
        let out = n.forward(EXT, &client_data(c, vip), EXT);
        assert_eq!(out, rst(EXT_MAC, CLIENT_MAC, vip, c, 1001), "{what}");
        assert_eq!(n.counter(Counter::FlowsKilled), 1, "{what}");
        assert_eq!(entries(&n), before - 1, "{what}");

        // The backend's next segment of another flow: a RST from the local
        // address it knows, in its sequence space (SEG.ACK 1234).
        let (_, b, local) = victim[1];
        assert_eq!(local.ip(), local_ip, "{what}");
        let out = n.forward(INT, &backend_data(b, local), INT);
        assert_eq!(
            out,
            rst(INT_MAC, host_mac(b.ip()), local, b, 1234),
            "{what}"
        );
        assert_eq!(n.counter(Counter::FlowsKilled), 2, "{what}");
        assert_eq!(entries(&n), before - 2, "{what}");

        // The flow on the other backend: forwarded both ways, unchanged.
        for _ in 0..3 {
            let fwd = decode(&n.forward(EXT, &client_data(c2, vip), INT));
            assert_eq!(
                (fwd.src, fwd.dst, &fwd.payload[..]),
                (l2, b2, &b"GET /"[..])
            );
            let back = decode(&n.forward(INT, &backend_data(b2, l2), EXT));
            assert_eq!((back.src, back.dst), (vip, c2), "{what}");
            assert_eq!(back.payload, b"200 OK", "{what}");
        }
        // Counted as a kill, not as health's on_down.
        assert_eq!(n.counter(Counter::FlowsKilled), 2, "{what}");
        assert_eq!(n.counter(Counter::ResetBackendDown), 0, "{what}");
        assert_eq!(n.drops(), vec![], "{what}");

        // New connections never reach the killed backend.
        for port in 41000..41020 {
            let (b, _) = handshake(&mut n, client_of(vip, port), vip);
            assert_ne!(b, b1, "{what}: a new connection went to the killed backend");
        }

        // Enabled again (a generation without the kill) before the third
        // flow sent anything: it is kept, byte for byte.
        let up = generation_with_states(&cfg, 3, &|_, _| None);
        assert!(!up.reset_pending, "{what}");
        adopt_generation(&mut n, up);
        let (c, b, local) = victim[2];
        let fwd = decode(&n.forward(EXT, &client_data(c, vip), INT));
        assert_eq!(
            (fwd.src, fwd.dst, &fwd.payload[..]),
            (local, b, &b"GET /"[..])
        );
        assert_eq!(n.counter(Counter::FlowsKilled), 2, "{what}");
    }
}

/// The reset machinery of `on_down`, without its conditions: a VIP with
/// `on_down = "reset"` whose other backends are all down fails open (their
/// flows are kept), yet the killed backend's flows are still reset.
#[test]
fn a_kill_resets_on_a_failing_open_vip_too() {
    let text = config_text(&[1, 1, 1]).replacen(
        "maglev_table_size = 1021\n",
        "maglev_table_size = 1021\n[vip.health]\nkind = \"tcp\"\non_down = \"reset\"\n",
        1,
    );
    let cfg = Config::from_toml_str(&text, "kill.toml").unwrap_or_else(|e| panic!("{e}"));
    let vip = sa(VIP4, 80);
    let mut n = node();
    let Flows { victim, other } = open_flows(&mut n, vip, 40000);
    let (c1, b1, _) = victim[0];
    let t = generation_with_states(&cfg, 2, &|vi, a| {
        (vi == VIP_TCP4 as usize).then_some(if a == b1.ip() {
            (1, BackendState::Killed)
        } else {
            (1, BackendState::Down)
        })
    });
    adopt_generation(&mut n, t);
    let out = n.forward(EXT, &client_data(c1, vip), EXT);
    assert_eq!(out, rst(EXT_MAC, CLIENT_MAC, vip, c1, 1001));
    let (c2, b2, l2) = other;
    let fwd = decode(&n.forward(EXT, &client_data(c2, vip), INT));
    assert_eq!((fwd.src, fwd.dst), (l2, b2), "failing open: kept");
    assert_eq!(n.counter(Counter::FlowsKilled), 1);
    assert_eq!(n.counter(Counter::ResetBackendDown), 0);
}

/// UDP: the killed backend's late datagram finds its flow forgotten
/// (dropped, counted once); the client's next datagram picks a live
/// backend.
#[test]
fn udp_flows_to_a_killed_backend_are_forgotten_and_pick_again() {
    let cfg = config(&[1, 1, 1]);
    let vip = sa(VIP4, 53);
    let client = client_of(vip, 5000);

    let mut n = node();
    let first = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q1").build(), INT));
    kill(&mut n, &cfg, 2, VIP_UDP4, first.dst.ip());
    let late = Pkt::udp(first.dst, first.src, b"a1").by_backend();
    n.swallow(INT, &late.build());
    assert_eq!(n.counter(Counter::FlowsKilled), 1);
    assert_eq!(entries(&n), 0);
    let second = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q2").build(), INT));
    assert_ne!(second.dst, first.dst);
    assert_eq!(second.payload, b"q2");
    assert_eq!(n.counter(Counter::FlowsKilled), 1);

    // The client's side first.
    let mut n = node();
    let first = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q1").build(), INT));
    kill(&mut n, &cfg, 2, VIP_UDP4, first.dst.ip());
    let second = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q2").build(), INT));
    assert_ne!(second.dst, first.dst);
    assert_eq!(second.payload, b"q2");
    assert_eq!(n.counter(Counter::FlowsKilled), 1);
    assert_eq!(n.counter(Counter::ForgotBackendDown), 0);
    assert_eq!(entries(&n), 1);
}
