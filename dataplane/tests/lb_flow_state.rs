//! Spoofed packets that must not change a flow (docs/security.md), on
//! byte fixtures through `Worker::poll_once`: a RST is judged against the
//! receiver's window (RFC 5961 §3), an ICMP error must quote a sequence
//! number the flow has in flight (RFC 5927), and a DNAT reply without an
//! entry must come by the port that faces its backend.

mod support;

use std::net::{IpAddr, SocketAddr};

use conf::counters::Counter;
use dataplane::conntrack::{FlowKey, State};
use dataplane::wire::ip_proto;
use support::lb::flags::{ACK, PSH, RST, SYN};
use support::lb::*;

/// The client's initial sequence number in these flows.
const CISN: u32 = 1000;
/// The backend's.
const BISN: u32 = 70_000;
/// Bytes of the client's request.
const REQ: u32 = 100;

fn key(client: SocketAddr, vip: SocketAddr) -> FlowKey {
    let (IpAddr::V4(c), IpAddr::V4(v)) = (client.ip(), vip.ip()) else {
        panic!("IPv4 only")
    };
    FlowKey::v4(
        c.octets(),
        v.octets(),
        client.port(),
        vip.port(),
        ip_proto::TCP,
    )
}

fn state_of(n: &Node, key: &FlowKey) -> Option<State> {
    let ct = n.w.pipeline.lb().conntrack();
    let now = n.clock.0.load(std::sync::atomic::Ordering::Relaxed);
    ct.lookup(key, now).map(|(id, _)| ct.get(id).state())
}

/// A client segment at `seq` acknowledging `ack`.
fn from_client(client: SocketAddr, vip: SocketAddr, flags: u8, seq: u32, ack: u32) -> Pkt {
    Pkt {
        seq,
        ack,
        ..Pkt::tcp(client, vip, flags)
    }
}

/// A backend segment (to the local address for full-NAT, to the client for
/// DNAT) at `seq` acknowledging `ack`.
fn from_backend(backend: SocketAddr, to: SocketAddr, flags: u8, seq: u32, ack: u32) -> Pkt {
    Pkt {
        seq,
        ack,
        ..Pkt::tcp(backend, to, flags).by_backend()
    }
}

/// A full-NAT flow with real sequence numbers: handshake, a 100-byte
/// request and the backend's acknowledgement (both through the express
/// lane). Returns (backend, local).
fn established(n: &mut Node, client: SocketAddr, vip: SocketAddr) -> (SocketAddr, SocketAddr) {
    let syn = from_client(client, vip, SYN, CISN, 0);
    let fwd = decode(&n.forward(EXT, &syn.build(), INT));
    let (backend, local) = (fwd.dst, fwd.src);
    let synack = from_backend(backend, local, SYN | ACK, BISN, CISN + 1);
    n.forward(INT, &synack.build(), EXT);
    let ack = from_client(client, vip, ACK, CISN + 1, BISN + 1);
    n.forward(EXT, &ack.build(), INT);
    let req = from_client(client, vip, ACK | PSH, CISN + 1, BISN + 1).payload(&[7; REQ as usize]);
    n.forward(EXT, &req.build(), INT);
    let ack = from_backend(backend, local, ACK, BISN + 1, CISN + 1 + REQ);
    n.forward(INT, &ack.build(), EXT);
    assert_eq!(state_of(n, &key(client, vip)), Some(State::Established));
    (backend, local)
}

#[test]
fn blind_rst_outside_the_window_is_dropped_and_changes_nothing() {
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 47000), sa(VIP4, 80));
    let (backend, local) = established(&mut n, client, vip);
    let k = key(client, vip);

    // Spoofed from the client side, and from the backend side.
    for seq in [0, CISN, 0x8000_0000, CISN + 1 + REQ + 64_240] {
        n.swallow(EXT, &from_client(client, vip, RST, seq, 0).build());
    }
    n.swallow(
        INT,
        &from_backend(backend, local, RST | ACK, 12_345, 0).build(),
    );
    assert_eq!(n.counter(Counter::DropTcpRstOutOfWindow), 5);
    assert_eq!(state_of(&n, &k), Some(State::Established));
    assert_eq!(n.counter(Counter::TcpRstAccepted), 0);

    // The flow goes on.
    let more = from_client(client, vip, ACK | PSH, CISN + 1 + REQ, BISN + 1).payload(b"more");
    let out = decode(&n.forward(EXT, &more.build(), INT));
    assert_eq!(
        (out.src, out.dst, out.payload.as_slice()),
        (local, backend, &b"more"[..])
    );
}

#[test]
fn rst_in_the_window_but_not_exact_is_forwarded_and_changes_nothing() {
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 47001), sa(VIP4, 80));
    let (backend, local) = established(&mut n, client, vip);

    let rst = from_client(client, vip, RST, CISN + 1 + REQ + 500, 0);
    let out = decode(&n.forward(EXT, &rst.build(), INT));
    assert_eq!(
        (out.dst, out.tcp),
        (backend, Some(RST)),
        "the backend judges it too"
    );
    let rst = from_backend(backend, local, RST, BISN + 2, 0);
    let out = decode(&n.forward(INT, &rst.build(), EXT));
    assert_eq!((out.dst, out.tcp), (client, Some(RST)));
    assert_eq!(n.counter(Counter::TcpRstNotExact), 2);
    assert_eq!(state_of(&n, &key(client, vip)), Some(State::Established));
    assert_eq!(n.drops(), vec![]);
}

#[test]
fn rst_at_the_next_expected_number_closes() {
    for from_backend_side in [false, true] {
        let mut n = node();
        let (client, vip) = (sa(CLIENT4, 47002), sa(VIP4, 80));
        let (backend, local) = established(&mut n, client, vip);
        if from_backend_side {
            let rst = from_backend(backend, local, RST | ACK, BISN + 1, CISN + 1 + REQ);
            n.forward(INT, &rst.build(), EXT);
        } else {
            let rst = from_client(client, vip, RST | ACK, CISN + 1 + REQ, BISN + 1);
            n.forward(EXT, &rst.build(), INT);
        }
        assert_eq!(n.counter(Counter::TcpRstAccepted), 1);
        assert_eq!(state_of(&n, &key(client, vip)), Some(State::Closed));
        assert_eq!(n.drops(), vec![]);
    }
}

#[test]
fn rst_inside_unacknowledged_data_closes() {
    // The client sent 300 bytes more and resets before the backend
    // acknowledged them: the backend expects anything in between.
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 47003), sa(VIP4, 80));
    established(&mut n, client, vip);
    let seq = CISN + 1 + REQ;
    let more = from_client(client, vip, ACK | PSH, seq, BISN + 1).payload(&[1; 300]);
    n.forward(EXT, &more.build(), INT);
    n.forward(
        EXT,
        &from_client(client, vip, RST, seq + 300, 0).build(),
        INT,
    );
    assert_eq!(n.counter(Counter::TcpRstAccepted), 1);
    assert_eq!(state_of(&n, &key(client, vip)), Some(State::Closed));
}

#[test]
fn refused_connection_closes_and_a_stray_answer_to_a_syn_does_not() {
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 47004), sa(VIP4, 80));
    let fwd = decode(&n.forward(EXT, &from_client(client, vip, SYN, CISN, 0).build(), INT));
    let (backend, local) = (fwd.dst, fwd.src);
    // Not acknowledging the SYN: not from the backend's stack.
    let stray = from_backend(backend, local, RST | ACK, 0, CISN + 7);
    n.swallow(INT, &stray.build());
    assert_eq!(state_of(&n, &key(client, vip)), Some(State::SynSent));
    assert_eq!(n.counter(Counter::DropTcpRstOutOfWindow), 1);
    // Port closed on the backend: RST+ACK of the SYN.
    let refused = from_backend(backend, local, RST | ACK, 0, CISN + 1);
    let out = decode(&n.forward(INT, &refused.build(), EXT));
    assert_eq!((out.dst, out.tcp), (client, Some(RST | ACK)));
    assert_eq!(state_of(&n, &key(client, vip)), Some(State::Closed));
    assert_eq!(n.counter(Counter::TcpRstAccepted), 1);
}

#[test]
fn icmp_error_quoting_a_sequence_number_not_in_flight_is_dropped() {
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 47005), sa(VIP4, 80));
    let (backend, local) = established(&mut n, client, vip);
    let seq = CISN + 1 + REQ;
    let data = from_client(client, vip, ACK | PSH, seq, BISN + 1).payload(&[0x55; 1000]);
    let sent = n.forward(EXT, &data.build(), INT);

    // Forged: the same segment quoted with a number far from the flow's.
    let mut forged = sent.clone();
    forged[14 + 20 + 4..14 + 20 + 8].copy_from_slice(&0x5EED_0000u32.to_be_bytes());
    let err = |quoted: &[u8]| {
        icmp4_frag_needed(
            host_mac(ROUTER4.into()),
            INT_MAC,
            ROUTER4,
            LOCAL4,
            576,
            quoted,
        )
    };
    n.swallow(INT, &err(&forged[14..]));
    assert_eq!(n.counter(Counter::DropIcmpErrorOutOfWindow), 1);
    assert_eq!(n.counter(Counter::IcmpErrorsTranslated), 0);

    // The real one reaches the client.
    let out = decode_icmp(&n.forward(INT, &err(&sent[14..]), EXT));
    assert_eq!((out.inner_src, out.inner_dst), (client, vip));
    assert_eq!(n.counter(Counter::IcmpErrorsTranslated), 1);
    let _ = (backend, local);
}

#[test]
fn dnat_reply_without_an_entry_from_the_client_side_is_dropped() {
    let mut nodes = two_workers();
    let client = sa(CLIENT4, 47006);
    let vip = sa(DNAT4, 80);
    let out = decode(&nodes[0].forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
    let n1 = &mut nodes[1];
    n1.learn(CLIENT4.into(), CLIENT_MAC);
    // Someone on the client side claims to be the backend: the reply would
    // leave from the VIP on their behalf.
    let spoofed = Pkt {
        smac: CLIENT_MAC,
        dmac: EXT_MAC,
        ..Pkt::tcp(out.dst, client, ACK | PSH).payload(b"from the VIP?")
    };
    n1.swallow(EXT, &spoofed.build());
    assert_eq!(n1.counter(Counter::DropDnatReplyWrongPort), 1);
    assert_eq!(n1.counter(Counter::DnatStatelessReplies), 0);
    // The backend's own, by the port that reaches it, goes through.
    let real = Pkt::tcp(out.dst, client, SYN | ACK).by_backend();
    let back = decode(&n1.forward(INT, &real.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, client));
    assert_eq!(n1.counter(Counter::DnatStatelessReplies), 1);
}

/// `frame` (an IPv4 TCP segment without options) with its TCP checksum off
/// by one: what a spoofer sends so the backend's kernel stays silent.
fn bad_checksum(mut frame: Vec<u8>) -> Vec<u8> {
    frame[14 + 20 + 17] ^= 1;
    frame
}

/// A node whose half-open entries last 3 s (`tcp_syn`).
fn short_syn_node() -> Node {
    Setup {
        timeouts: dataplane::conntrack::Timeouts {
            tcp_syn: 3,
            ..Default::default()
        },
        ..Setup::default()
    }
    .node()
}

#[test]
fn spoofed_handshakes_leave_no_entry_and_no_tuple_past_tcp_syn() {
    let mut n = short_syn_node();
    let vip = sa(VIP4, 80);
    for i in 0..40u16 {
        let client = sa(CLIENT4, 41_000 + i);
        let syn = from_client(client, vip, SYN, CISN, 0);
        let fwd = decode(&n.forward(EXT, &syn.build(), INT));
        let (backend, local) = (fwd.dst, fwd.src);
        // The backend answers the spoofed address.
        let synack = from_backend(backend, local, SYN | ACK, BISN, CISN + 1);
        n.forward(INT, &synack.build(), EXT);
        // A guessed acknowledgement, valid checksum: forwarded (the backend
        // answers it with a RST), the entry stays half-open.
        let guess = from_client(client, vip, ACK, CISN + 1, BISN + 7);
        n.forward(EXT, &guess.build(), INT);
        // Even the right number changes nothing under a bad checksum.
        let right = from_client(client, vip, ACK, CISN + 1, BISN + 1);
        n.forward(EXT, &bad_checksum(right.build()), INT);
        assert_eq!(state_of(&n, &key(client, vip)), Some(State::SynRecv));
    }
    assert_eq!(n.counter(Counter::TcpHandshakeAckWrong), 40);
    assert_eq!(n.counter(Counter::BadL4ChecksumIgnored), 40);
    n.poll();
    assert!(n.counter(Counter::LocalTuplesInUse) > 0);
    // Past tcp_syn every entry and every tuple is gone (the tuple gauges
    // follow with the next scan of the pool, once a second).
    n.advance_ms(3_001);
    for _ in 0..8 {
        n.poll();
    }
    n.advance_ms(1_001);
    // 512 tuples a poll over 2 x 31,744.
    for _ in 0..200 {
        n.poll();
    }
    assert_eq!(n.counter(Counter::ConntrackEntries), 0);
    assert_eq!(n.counter(Counter::LocalTuplesInUse), 0);
}

#[test]
fn the_ack_of_the_backends_syn_establishes() {
    let mut n = short_syn_node();
    let (client, vip) = (sa(CLIENT4, 42_000), sa(VIP4, 80));
    established(&mut n, client, vip);
    n.advance_ms(3_001);
    for _ in 0..8 {
        n.poll();
    }
    assert_eq!(state_of(&n, &key(client, vip)), Some(State::Established));
    assert_eq!(n.counter(Counter::TcpHandshakeAckWrong), 0);
}

#[test]
fn a_syn_with_a_bad_checksum_creates_nothing() {
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 42_100), sa(VIP4, 80));
    let syn = from_client(client, vip, SYN, CISN, 0);
    n.swallow(EXT, &bad_checksum(syn.build()));
    assert_eq!(n.counter(Counter::DropBadL4Checksum), 1);
    assert_eq!(n.counter(Counter::ConntrackEntries), 0);
    assert_eq!(n.counter(Counter::NewFlows), 0);
    assert_eq!(state_of(&n, &key(client, vip)), None);
}

#[test]
fn a_fin_or_rst_with_a_bad_checksum_does_not_close() {
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 42_200), sa(VIP4, 80));
    let (backend, local) = established(&mut n, client, vip);
    let fin = from_client(client, vip, ACK | 0x01, CISN + 1 + REQ, BISN + 1);
    n.forward(EXT, &bad_checksum(fin.build()), INT);
    let rst = from_backend(backend, local, RST, BISN + 1, 0);
    n.forward(INT, &bad_checksum(rst.build()), EXT);
    assert_eq!(state_of(&n, &key(client, vip)), Some(State::Established));
    assert_eq!(n.counter(Counter::BadL4ChecksumIgnored), 2);
    assert_eq!(n.counter(Counter::TcpRstAccepted), 0);
}

#[test]
fn a_tracked_reply_from_the_client_side_port_is_dropped() {
    let mut n = node();
    let (client, vip) = (sa(CLIENT4, 42_300), sa(VIP4, 80));
    let (backend, local) = established(&mut n, client, vip);
    // The backend's own segment, spoofed from the client side: it could
    // acknowledge anything (a PROXY header) or close the flow.
    let spoof = from_backend(backend, local, RST, BISN + 1, 0).macs(CLIENT_MAC, EXT_MAC);
    n.swallow(EXT, &spoof.build());
    let spoof =
        from_backend(backend, local, ACK, BISN + 1, CISN + 1 + REQ).macs(CLIENT_MAC, EXT_MAC);
    n.swallow(EXT, &spoof.build());
    assert_eq!(n.counter(Counter::DropReplyWrongPort), 2);
    assert_eq!(state_of(&n, &key(client, vip)), Some(State::Established));
}

#[test]
fn a_rst_of_no_tracked_connection_is_dropped_in_both_modes() {
    let mut n = node();
    for (i, vip) in [sa(VIP4, 80), sa(DNAT4, 80)].into_iter().enumerate() {
        let client = sa(CLIENT4, 42_400 + i as u16);
        let rst = from_client(client, vip, RST, CISN, 0);
        n.swallow(EXT, &rst.build());
        assert_eq!(state_of(&n, &key(client, vip)), None);
    }
    assert_eq!(n.counter(Counter::DropTcpRstNoConntrack), 2);
    assert_eq!(n.counter(Counter::NewFlows), 0);
}
