//! Jumbo frames on byte fixtures: frames longer than one buffer arrive
//! chained (as a port with scattered Rx delivers them) and leave whole,
//! translated, with valid checksums; a chain that does not fit one buffer
//! and a frame over the port's `mtu` are dropped under their own counters,
//! never truncated.

mod support;

use std::net::{IpAddr, SocketAddr};

use conf::counters::Counter;
use dataplane::io::VEC_FRAME_JUMBO_ROOM;
use support::lb::flags::{ACK, PSH, SYN};
use support::lb::*;

/// Segment size of the chains: an mbuf of the default 2048-byte room.
const SEG: usize = 2048 - 128;

fn jumbo_node() -> Node {
    Setup {
        mtu: Some((9000, 9000)),
        ..Setup::default()
    }
    .node()
}

/// A payload whose bytes differ from one position to the next, so a
/// segment lost, doubled or reordered in the copy shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Receives `frame` on `port` cut into `SEG`-byte segments and returns
/// what left by `out` (asserting nothing left by the other port).
fn forward_chained(n: &mut Node, port: usize, frame: &[u8], out: usize) -> Vec<Vec<u8>> {
    n.w.io.inject_chained(port, frame, SEG);
    n.poll();
    let (ext, int) = (n.w.io.take_tx(EXT), n.w.io.take_tx(INT));
    let (mine, other) = if out == EXT { (ext, int) } else { (int, ext) };
    assert!(other.is_empty(), "frames on the other port");
    mine
}

/// Full-NAT handshake; returns (backend, local) as the backend sees them.
fn handshake(n: &mut Node, client: SocketAddr, vip: SocketAddr) -> (SocketAddr, SocketAddr) {
    let fwd = decode(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
    let synack = Pkt::tcp(fwd.dst, fwd.src, SYN | ACK).by_backend();
    n.forward(INT, &synack.build(), EXT);
    n.forward(EXT, &Pkt::tcp(client, vip, ACK).build(), INT);
    (fwd.dst, fwd.src)
}

#[test]
fn a_chained_jumbo_segment_crosses_full_nat_both_ways_whole() {
    let mut n = jumbo_node();
    let client = sa(CLIENT4, 40001);
    let vip = sa(VIP4, 80);
    let (backend, local) = handshake(&mut n, client, vip);

    // 8960 bytes of payload: a full MTU-9000 IPv4 TCP segment, 5 segments.
    let data = Pkt::tcp(client, vip, ACK | PSH).payload(&pattern(8960));
    let bytes = data.build();
    assert_eq!(bytes.len(), 14 + 9000);
    let out = forward_chained(&mut n, EXT, &bytes, INT);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].len(), bytes.len(), "no byte lost or added");
    let seen = decode(&out[0]);
    assert_eq!((seen.src, seen.dst), (local, backend));
    assert_eq!(seen.payload, data.payload, "payload byte for byte");

    let reply = Pkt::tcp(backend, local, ACK | PSH)
        .by_backend()
        .payload(&pattern(8000));
    let out = forward_chained(&mut n, INT, &reply.build(), EXT);
    assert_eq!(out.len(), 1);
    let seen = decode(&out[0]);
    assert_eq!((seen.src, seen.dst), (vip, client));
    assert_eq!(seen.payload, reply.payload);

    assert_eq!(n.drops(), vec![]);
    assert_eq!(n.counter(Counter::TxPackets), 5);
}

#[test]
fn a_chained_jumbo_segment_crosses_dnat_v6_whole() {
    let mut n = jumbo_node();
    let client = sa(CLIENT6, 40002);
    let vip = sa(DNAT6, 80);
    let fwd = decode(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
    let backend = fwd.dst;
    assert_eq!(fwd.src, client, "DNAT keeps the client's address");
    let synack = Pkt::tcp(backend, client, SYN | ACK).by_backend();
    n.forward(INT, &synack.build(), EXT);
    n.forward(EXT, &Pkt::tcp(client, vip, ACK).build(), INT);

    // 8940 bytes: a full MTU-9000 IPv6 TCP segment.
    let data = Pkt::tcp(client, vip, ACK | PSH).payload(&pattern(8940));
    let bytes = data.build();
    assert_eq!(bytes.len(), 14 + 9000);
    let out = forward_chained(&mut n, EXT, &bytes, INT);
    assert_eq!(out.len(), 1);
    let seen = decode(&out[0]);
    assert_eq!((seen.src, seen.dst), (client, backend));
    assert_eq!(seen.payload, data.payload);
    assert_eq!(n.drops(), vec![]);
}

#[test]
fn a_new_flow_whose_chained_payload_fails_its_checksum_is_dropped() {
    // The checksum check before a flow is created covers every segment:
    // one byte changed in the last one is enough.
    let mut n = jumbo_node();
    let dgram = Pkt::udp(sa(CLIENT4, 40003), sa(VIP4, 53), &pattern(6000));
    let mut bytes = dgram.build();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x5a;
    let out = forward_chained(&mut n, EXT, &bytes, INT);
    assert!(out.is_empty());
    assert_eq!(n.counter(Counter::DropBadL4Checksum), 1);
    assert_eq!(n.counter(Counter::NewFlows), 0);

    // The same datagram intact starts the flow.
    let out = forward_chained(&mut n, EXT, &dgram.build(), INT);
    assert_eq!(out.len(), 1);
    assert_eq!(decode(&out[0]).payload, dgram.payload);
    assert_eq!(n.counter(Counter::NewFlows), 1);
}

#[test]
fn a_chain_longer_than_one_buffer_is_dropped_whole() {
    let mut n = jumbo_node();
    let client = sa(CLIENT4, 40004);
    let vip = sa(VIP4, 80);
    handshake(&mut n, client, vip);
    let sent_before = n.counter(Counter::TxPackets);
    let data = Pkt::tcp(client, vip, ACK | PSH).payload(&pattern(VEC_FRAME_JUMBO_ROOM));
    let out = forward_chained(&mut n, EXT, &data.build(), INT);
    assert!(out.is_empty(), "nothing sent, not even a truncated frame");
    assert_eq!(n.counter(Counter::DropChainTooLong), 1);
    assert_eq!(n.counter(Counter::TxPackets), sent_before);
}

#[test]
fn a_frame_over_the_ports_mtu_is_dropped() {
    // ext takes 9000, int the default 1500.
    let mut n = Setup {
        mtu: Some((9000, 1500)),
        ..Setup::default()
    }
    .node();
    // 9001 bytes of IP on ext: one over.
    let over = Pkt::udp(sa(CLIENT4, 40005), sa(VIP4, 53), &pattern(9001 - 28));
    n.w.io.inject_chained(EXT, &over.build(), SEG);
    n.poll();
    assert_eq!(n.counter(Counter::DropOverMtu), 1);
    // 1501 bytes of IP on int (a backend's reply of no flow, dropped on
    // length before anything else looks at it).
    let b: IpAddr = fnat_backend4(0).into();
    let reply = Pkt::udp(sa(b, 5353), sa(LOCAL4, 2000), &pattern(1501 - 28)).by_backend();
    n.w.io.inject(INT, &reply.build());
    n.poll();
    assert_eq!(n.counter(Counter::DropOverMtu), 2);
    assert!(n.w.io.take_tx(EXT).is_empty() && n.w.io.take_tx(INT).is_empty());
    // Exactly the MTU passes the check (and starts a flow).
    let at = Pkt::udp(sa(CLIENT4, 40006), sa(VIP4, 53), &pattern(1500 - 28));
    n.w.io.inject(EXT, &at.build());
    n.poll();
    assert_eq!(n.counter(Counter::DropOverMtu), 2);
    assert_eq!(n.counter(Counter::NewFlows), 1);
}

/// `frame` (untagged IPv4) with DF set, its header checksum fixed.
fn with_df(mut frame: Vec<u8>) -> Vec<u8> {
    frame[20] |= 0x40;
    fix_ipv4_checksum(frame)
}

/// `frame` (untagged IPv4) with DF clear, its header checksum fixed.
fn without_df(mut frame: Vec<u8>) -> Vec<u8> {
    frame[20] &= !0x40;
    fix_ipv4_checksum(frame)
}

fn fix_ipv4_checksum(mut frame: Vec<u8>) -> Vec<u8> {
    support::lb::fix_ipv4_checksum(&mut frame);
    frame
}

#[test]
fn a_segment_too_big_for_the_backends_port_is_answered_with_frag_needed() {
    let mut n = Setup {
        mtu: Some((9000, 1500)),
        ..Setup::default()
    }
    .node();
    let client = sa(CLIENT4, 40010);
    let vip = sa(VIP4, 80);
    handshake(&mut n, client, vip);
    let sent = n.counter(Counter::TxPackets);
    // 1501 bytes of IP: one too many for int.
    let big = with_df(
        Pkt::tcp(client, vip, ACK | PSH)
            .payload(&pattern(1461))
            .build(),
    );
    let out = forward_chained(&mut n, EXT, &big, EXT);
    assert_eq!(
        out.len(),
        1,
        "the error goes back out of ext, nothing to int"
    );
    let icmp = decode_icmp(&out[0]);
    assert_eq!(icmp.kind, (3, 4), "fragmentation needed");
    assert_eq!(
        (icmp.src, icmp.dst),
        (
            IpAddr::from(std::net::Ipv4Addr::new(10, 1, 0, 1)),
            IpAddr::from(CLIENT4)
        )
    );
    assert_eq!((icmp.smac, icmp.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!(
        (icmp.inner_src, icmp.inner_dst),
        (client, vip),
        "the packet as the client sent it"
    );
    let mtu = u16::from_be_bytes([out[0][14 + 20 + 6], out[0][14 + 20 + 7]]);
    assert_eq!(mtu, 1500);
    assert_eq!(n.counter(Counter::DropTooBig), 1);
    assert_eq!(n.counter(Counter::IcmpTooBigSent), 1);
    assert_eq!(n.counter(Counter::TxPackets), sent + 1);

    // Exactly 1500 bytes of IP leave for the backend.
    let fits = Pkt::tcp(client, vip, ACK | PSH).payload(&pattern(1460));
    let seen = decode(&n.forward(EXT, &with_df(fits.build()), INT));
    assert_eq!(seen.payload, fits.payload);

    // Without DF, the packet is dropped unanswered (border does not fragment).
    let plain = without_df(
        Pkt::tcp(client, vip, ACK | PSH)
            .payload(&pattern(3000))
            .build(),
    );
    n.swallow(EXT, &plain);
    assert_eq!(n.counter(Counter::DropTooBig), 2);
    assert_eq!(n.counter(Counter::IcmpTooBigSent), 1);
}

#[test]
fn a_reply_too_big_for_the_clients_port_is_answered_with_packet_too_big() {
    let mut n = Setup {
        mtu: Some((1500, 9000)),
        ..Setup::default()
    }
    .node();
    let client = sa(CLIENT6, 40011);
    let vip = sa(VIP6, 80);
    let (backend, local) = handshake(&mut n, client, vip);
    let reply = Pkt::tcp(backend, local, ACK | PSH)
        .by_backend()
        .payload(&pattern(4000));
    let out = forward_chained(&mut n, INT, &reply.build(), INT);
    assert_eq!(out.len(), 1);
    let icmp = decode_icmp(&out[0]);
    assert_eq!(icmp.kind, (2, 0), "packet too big");
    assert_eq!((icmp.src, icmp.dst), (IpAddr::from(LOCAL6), backend.ip()));
    assert_eq!((icmp.inner_src, icmp.inner_dst), (backend, local));
    let mtu = u32::from_be_bytes(out[0][14 + 44..14 + 48].try_into().unwrap());
    assert_eq!(mtu, 1500);
    assert_eq!(n.counter(Counter::IcmpTooBigSent), 1);
}

#[test]
fn too_big_answers_are_rate_limited() {
    let mut n = Setup {
        mtu: Some((9000, 1500)),
        ..Setup::default()
    }
    .node();
    n.w.pipeline.set_icmp_echo_rate(2);
    let client = sa(CLIENT4, 40012);
    let vip = sa(VIP4, 80);
    handshake(&mut n, client, vip);
    let big = with_df(
        Pkt::tcp(client, vip, ACK | PSH)
            .payload(&pattern(4000))
            .build(),
    );
    for _ in 0..5 {
        n.w.io.inject(EXT, &big);
    }
    n.poll();
    assert_eq!(n.w.io.take_tx(EXT).len(), 2, "a bucket of two");
    assert_eq!(n.counter(Counter::IcmpTooBigSent), 2);
    assert_eq!(n.counter(Counter::IcmpTooBigRateLimited), 3);
    assert_eq!(n.counter(Counter::DropTooBig), 5);
    assert!(n.w.io.take_tx(INT).is_empty());
}

#[test]
fn the_syn_proxy_announces_an_mss_within_the_ports_mtu() {
    let mss_of = |mtu: Option<(u16, u16)>| {
        let mut n = Setup {
            syn_proxy: Some("always"),
            mtu,
            ..Setup::default()
        }
        .node();
        let syn = Pkt::tcp(sa(CLIENT4, 40020), sa(VIP4, 80), SYN).build();
        let out = n.forward(EXT, &syn, EXT);
        let p = etherparse::SlicedPacket::from_ethernet(&out).expect("SYN-ACK");
        let Some(etherparse::TransportSlice::Tcp(t)) = &p.transport else {
            panic!("not TCP")
        };
        assert!(t.syn() && t.ack());
        t.options_iterator()
            .find_map(|o| match o {
                Ok(etherparse::TcpOptionElement::MaximumSegmentSize(m)) => Some(m),
                _ => None,
            })
            .expect("an MSS option")
    };
    assert_eq!(mss_of(None), 1460);
    assert_eq!(mss_of(Some((1280, 1500))), 1240);
    // A held frame is 2048 bytes: jumbo ports still announce 1460.
    assert_eq!(mss_of(Some((9000, 9000))), 1460);
}
