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
