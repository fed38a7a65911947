//! The load-balancing pipeline on byte fixtures: frames built with
//! etherparse go into `Worker::poll_once` over in-memory ports (or straight
//! into `Pipeline::process`), and what comes out is checked byte for byte:
//! addresses, ports, TTL, MACs, and every checksum against etherparse's own
//! calculation. Counters and per-VIP / per-backend statistics are asserted
//! along the way.

mod support;

use std::net::{IpAddr, SocketAddr};

use conf::counters::Counter;
use conf::state::FlowStat;
use dataplane::conntrack::{FlowKey, State};
use dataplane::lb::{Adopted, Flow4or6};
use dataplane::verdict::Verdict;
use dataplane::wire::ip_proto;
use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, LinkSlice, NetSlice, SlicedPacket,
};
use support::lb::flags::{ACK, FIN, PSH, RST, SYN};
use support::lb::*;

// ---------------------------------------------------------------------------
// Helpers.

fn client4(port: u16) -> SocketAddr {
    sa(CLIENT4, port)
}

fn client6(port: u16) -> SocketAddr {
    sa(CLIENT6, port)
}

/// Index of a full-NAT IPv4 backend (10.2.0.11 + i) from its address.
fn fnat4_index(ip: IpAddr) -> u8 {
    (0..8u8)
        .find(|&i| IpAddr::from(fnat_backend4(i)) == ip)
        .unwrap_or_else(|| panic!("{ip} is not a full-NAT IPv4 backend"))
}

/// `frame`, an untagged IPv6 TCP packet, with the 8-byte extension header
/// `ext` (whose next header must be TCP) of type `kind` before its TCP header.
fn with_ext_header(frame: &[u8], kind: u8, ext: [u8; 8]) -> Vec<u8> {
    let mut out = frame[..54].to_vec();
    out[20] = kind;
    let plen = u16::from_be_bytes([frame[18], frame[19]]) + 8;
    out[18..20].copy_from_slice(&plen.to_be_bytes());
    out.extend_from_slice(&ext);
    out.extend_from_slice(&frame[54..]);
    out
}

fn assert_no_drops(n: &Node) {
    assert_eq!(n.drops(), vec![], "drop counters");
}

/// The backend Maglev picks in `t` for a TCP flow from `client` to the
/// full-NAT IPv4 VIP.
fn pick4(t: &Adopted<'_>, client: SocketAddr) -> u32 {
    let IpAddr::V4(c) = client.ip() else { panic!() };
    let vip = &t.vips[VIP_TCP4 as usize];
    t.pick(
        vip,
        &Flow4or6::V4 {
            src: c.octets(),
            dst: VIP4.octets(),
            sport: client.port(),
            dport: 80,
            proto: ip_proto::TCP,
        },
    )
    .expect("the VIP has backends")
}

/// Handshake of a full-NAT flow: returns the (backend, local) addresses the
/// flow got, after checking the forwarded SYN and the translated SYN-ACK.
fn handshake(n: &mut Node, client: SocketAddr, vip: SocketAddr) -> (SocketAddr, SocketAddr) {
    let syn = Pkt::tcp(client, vip, SYN);
    let fwd = decode(&n.forward(EXT, &syn.build(), INT));
    let synack = Pkt::tcp(fwd.dst, fwd.src, SYN | ACK).by_backend();
    let back = decode(&n.forward(INT, &synack.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, client));
    let ack = Pkt::tcp(client, vip, ACK);
    let fwd2 = decode(&n.forward(EXT, &ack.build(), INT));
    assert_eq!((fwd2.src, fwd2.dst), (fwd.src, fwd.dst));
    (fwd.dst, fwd.src)
}

fn state_of(n: &Node, key: &FlowKey) -> Option<State> {
    let ct = n.w.pipeline.lb().conntrack();
    let now = n.clock.0.load(std::sync::atomic::Ordering::Relaxed);
    ct.lookup(key, now).map(|(id, _)| ct.get(id).state())
}

fn key4(client: SocketAddr, vip: SocketAddr) -> FlowKey {
    let (IpAddr::V4(c), IpAddr::V4(v)) = (client.ip(), vip.ip()) else {
        panic!()
    };
    FlowKey::v4(
        c.octets(),
        v.octets(),
        client.port(),
        vip.port(),
        ip_proto::TCP,
    )
}

// ---------------------------------------------------------------------------
// Full-NAT and DNAT, forward and reply.

#[test]
fn fullnat_v4_forward_and_reply_are_translated_with_valid_checksums() {
    let mut n = node();
    let client = client4(40000);
    let vip = sa(VIP4, 80);

    let syn = Pkt::tcp(client, vip, SYN);
    let syn_bytes = syn.build();
    let out = decode(&n.forward(EXT, &syn_bytes, INT));
    let bi = fnat4_index(out.dst.ip());
    assert_eq!(out.dst, sa(fnat_backend4(bi), 8080));
    assert_eq!(out.src.ip(), IpAddr::from(LOCAL4));
    let lport = out.src.port();
    assert!((POOL.0..=POOL.1).contains(&lport), "local port {lport}");
    assert_eq!(out.ttl, 63);
    assert_eq!((out.smac, out.dmac), (INT_MAC, host_mac(out.dst.ip())));
    assert_eq!((out.tcp, out.seq, out.ack), (Some(SYN), syn.seq, 0));

    let synack = Pkt::tcp(out.dst, out.src, SYN | ACK).by_backend();
    let back = decode(&n.forward(INT, &synack.build(), EXT));
    assert_eq!(back.src, vip);
    assert_eq!(back.dst, client);
    assert_eq!(back.ttl, 63);
    assert_eq!((back.smac, back.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!(
        (back.tcp, back.seq, back.ack),
        (Some(SYN | ACK), synack.seq, synack.ack)
    );

    let data = Pkt::tcp(client, vip, ACK | PSH).payload(b"GET / HTTP/1.0\r\n\r\n");
    let data_bytes = data.build();
    let out2 = decode(&n.forward(EXT, &data_bytes, INT));
    assert_eq!(
        (out2.src, out2.dst),
        (out.src, out.dst),
        "same flow, same backend and local port"
    );
    assert_eq!(out2.payload, data.payload);
    assert_eq!(state_of(&n, &key4(client, vip)), Some(State::Established));

    assert_no_drops(&n);
    assert_eq!(n.counter(Counter::RxPackets), 3);
    assert_eq!(n.counter(Counter::TxPackets), 3);
    assert_eq!(n.counter(Counter::NewFlows), 1);
    let bytes = (syn_bytes.len() + synack.build().len() + data_bytes.len()) as u64;
    assert_eq!(n.counter(Counter::RxBytes), bytes);
    assert_eq!(n.counter(Counter::TxBytes), bytes);
    assert_eq!(n.vip(VIP_TCP4, FlowStat::Packets), 3);
    assert_eq!(n.vip(VIP_TCP4, FlowStat::Bytes), bytes);
    assert_eq!(n.vip(VIP_TCP4, FlowStat::NewConnections), 1);
    assert_eq!(n.vip(VIP_TCP4, FlowStat::ActiveConnections), 1);
    let b = IpAddr::from(fnat_backend4(bi));
    assert_eq!(n.backend(VIP_TCP4, b, FlowStat::Packets), 3);
    assert_eq!(n.backend(VIP_TCP4, b, FlowStat::Bytes), bytes);
    assert_eq!(n.backend(VIP_TCP4, b, FlowStat::NewConnections), 1);
    assert_eq!(n.backend(VIP_TCP4, b, FlowStat::ActiveConnections), 1);
}

#[test]
fn fullnat_v6_forward_and_reply_are_translated_with_valid_checksums() {
    let mut n = node();
    let client = client6(40000);
    let vip = sa(VIP6, 80);

    let syn = Pkt::tcp(client, vip, SYN).ttl(2);
    let out = decode(&n.forward(EXT, &syn.build(), INT));
    assert!(
        (0..3).any(|i| out.dst == sa(fnat_backend6(i), 8080)),
        "{:?} is a backend",
        out.dst
    );
    assert_eq!(out.src.ip(), IpAddr::from(LOCAL6));
    assert!((POOL.0..=POOL.1).contains(&out.src.port()));
    assert_eq!(out.ttl, 1, "hop limit decremented");
    assert_eq!((out.smac, out.dmac), (INT_MAC, host_mac(out.dst.ip())));
    assert_eq!(out.tcp, Some(SYN));

    let synack = Pkt::tcp(out.dst, out.src, SYN | ACK)
        .by_backend()
        .payload(b"x");
    let back = decode(&n.forward(INT, &synack.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, client));
    assert_eq!(back.ttl, 63);
    assert_eq!((back.smac, back.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!(back.payload, b"x");

    assert_no_drops(&n);
    assert_eq!(n.counter(Counter::NewFlows), 1);
    assert_eq!(n.vip(VIP_TCP6, FlowStat::Packets), 2);
    assert_eq!(n.vip(VIP_TCP6, FlowStat::ActiveConnections), 1);
}

#[test]
fn fullnat_udp_request_and_response() {
    let mut n = node();
    let client = client4(5000);
    let vip = sa(VIP4, 53);
    let q = Pkt::udp(client, vip, b"query");
    let out = decode(&n.forward(EXT, &q.build(), INT));
    assert_eq!(out.tcp, None);
    assert_eq!(out.src.ip(), IpAddr::from(LOCAL4));
    assert_eq!(out.dst.port(), 5353);
    assert_eq!(out.payload, b"query");
    assert_eq!(out.ttl, 63);

    let r = Pkt::udp(out.dst, out.src, b"answer").by_backend();
    let back = decode(&n.forward(INT, &r.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, client));
    assert_eq!((back.smac, back.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!(back.payload, b"answer");

    // The next datagram of the same flow takes the same path.
    let out2 = decode(&n.forward(EXT, &q.build(), INT));
    assert_eq!((out2.src, out2.dst), (out.src, out.dst));
    let key = FlowKey::v4(CLIENT4.octets(), VIP4.octets(), 5000, 53, ip_proto::UDP);
    assert_eq!(state_of(&n, &key), Some(State::Udp));

    assert_no_drops(&n);
    assert_eq!(n.counter(Counter::NewFlows), 1);
    assert_eq!(n.vip(VIP_UDP4, FlowStat::Packets), 3);
    assert_eq!(n.vip(VIP_UDP4, FlowStat::NewConnections), 1);
}

#[test]
fn dnat_v4_and_v6_forward_and_reply() {
    for (client, vip, backends) in [
        (
            client4(41000),
            sa(DNAT4, 80),
            (0..3)
                .map(|i| IpAddr::from(dnat_backend4(i)))
                .collect::<Vec<_>>(),
        ),
        (
            client6(41000),
            sa(DNAT6, 80),
            (0..3).map(|i| IpAddr::from(dnat_backend6(i))).collect(),
        ),
    ] {
        let mut n = node();
        let syn = Pkt::tcp(client, vip, SYN);
        let out = decode(&n.forward(EXT, &syn.build(), INT));
        assert_eq!(out.src, client, "DNAT keeps the client address");
        assert!(backends.contains(&out.dst.ip()), "{:?}", out.dst);
        assert_eq!(out.dst.port(), 8080);
        assert_eq!(out.ttl, 63);
        assert_eq!((out.smac, out.dmac), (INT_MAC, host_mac(out.dst.ip())));

        // The backend answers the client directly, routed through us.
        let synack = Pkt::tcp(out.dst, client, SYN | ACK).by_backend();
        let back = decode(&n.forward(INT, &synack.build(), EXT));
        assert_eq!((back.src, back.dst), (vip, client));
        assert_eq!(back.ttl, 63);
        assert_eq!((back.smac, back.dmac), (EXT_MAC, CLIENT_MAC));

        let ack = Pkt::tcp(client, vip, ACK).payload(b"hi");
        let out2 = decode(&n.forward(EXT, &ack.build(), INT));
        assert_eq!(
            (out2.src, out2.dst, out2.payload.as_slice()),
            (client, out.dst, &b"hi"[..])
        );

        assert_no_drops(&n);
        assert_eq!(n.counter(Counter::NewFlows), 1);
        assert_eq!(n.counter(Counter::DnatStatelessReplies), 0);
        let id = if client.is_ipv4() {
            VIP_DNAT4
        } else {
            VIP_DNAT6
        };
        assert_eq!(n.vip(id, FlowStat::Packets), 3);
        assert_eq!(n.vip(id, FlowStat::ActiveConnections), 1);
    }
}

#[test]
fn dnat_reply_on_a_worker_without_the_entry_is_translated_statelessly() {
    let mut nodes = two_workers();
    let client = client4(42000);
    let vip = sa(DNAT4, 80);
    let out = decode(&nodes[0].forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));

    // Worker 1 never saw the flow; it needs the client's MAC to send.
    let n1 = &mut nodes[1];
    n1.learn(CLIENT4.into(), CLIENT_MAC);
    let synack = Pkt::tcp(out.dst, client, SYN | ACK).by_backend();
    let back = decode(&n1.forward(INT, &synack.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, client));
    assert_eq!((back.smac, back.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!(back.ttl, 63);
    assert_eq!(n1.counter(Counter::DnatStatelessReplies), 1);
    assert_eq!(n1.w.pipeline.lb().conntrack().len(), 0);
    assert_eq!(n1.vip(VIP_DNAT4, FlowStat::Packets), 1);
    assert_no_drops(n1);
}

#[test]
fn fullnat_reply_on_a_non_owner_worker_is_handed_to_the_owner() {
    let mut nodes = two_workers();
    let vip = sa(VIP4, 80);
    // Each worker takes local ports it owns: port & 1 == worker.
    let mut flows = Vec::new();
    for (w, port) in [(0usize, 43000u16), (1, 43001)] {
        let out = decode(&nodes[w].forward(EXT, &Pkt::tcp(client4(port), vip, SYN).build(), INT));
        assert_eq!(
            usize::from(out.src.port() & 1),
            w,
            "worker {w} owns its local port"
        );
        flows.push((w, client4(port), out));
    }

    for (owner, client, out) in flows {
        let other = 1 - owner;
        let synack = Pkt::tcp(out.dst, out.src, SYN | ACK).by_backend();

        // The pipeline alone says where it belongs, and leaves it untouched.
        let mut bytes = synack.build();
        let len = bytes.len();
        let v = nodes[other].w.pipeline.process(INT, &mut bytes, len);
        assert_eq!(v, Verdict::Handoff { worker: owner });
        assert_eq!(bytes, synack.build());

        // Through the workers: the non-owner queues it, the owner sends it.
        let (ext, int) = nodes[other].exchange(INT, &synack.build());
        assert!(ext.is_empty() && int.is_empty());
        assert_eq!(nodes[other].counter(Counter::HandoffSent), 1);
        nodes[owner].poll();
        assert_eq!(nodes[owner].counter(Counter::HandoffReceived), 1);
        let sent = nodes[owner].w.io.take_tx(EXT);
        assert_eq!(sent.len(), 1);
        let back = decode(&sent[0]);
        assert_eq!((back.src, back.dst), (vip, client));
        assert_eq!((back.smac, back.dmac), (EXT_MAC, CLIENT_MAC));
        assert_eq!(back.tcp, Some(SYN | ACK));
        assert_eq!(
            state_of(&nodes[owner], &key4(client, vip)),
            Some(State::SynRecv),
            "the owner's entry saw the SYN-ACK"
        );
    }
    for n in &nodes {
        assert_no_drops(n);
    }
}

#[test]
fn fullnat_reply_without_entry_on_its_owner_is_dropped() {
    let mut n = node();
    // A single worker owns every port: no handoff, no entry.
    let stray = Pkt::tcp(sa(fnat_backend4(0), 8080), sa(LOCAL4, 2000), SYN | ACK).by_backend();
    n.swallow(INT, &stray.build());
    assert_eq!(n.counter(Counter::DropNoConntrack), 1);
    // A backend port outside the pool is the kernel's: to the twin (none here).
    let kernel = Pkt::tcp(sa(fnat_backend4(0), 8080), sa(LOCAL4, 40000), ACK).by_backend();
    n.swallow(INT, &kernel.build());
    assert_eq!(n.counter(Counter::DropNoHostTwin), 1);
}

// ---------------------------------------------------------------------------
// Connection tracking.

#[test]
fn syn_creates_an_entry_and_mid_stream_without_entry_is_mode_dependent() {
    let mut n = node();
    let client = client4(44000);
    n.forward(EXT, &Pkt::tcp(client, sa(VIP4, 80), SYN).build(), INT);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 1);
    assert_eq!(
        state_of(&n, &key4(client, sa(VIP4, 80))),
        Some(State::SynSent)
    );

    // Full-NAT cannot continue a connection it never saw (no local port).
    n.swallow(EXT, &Pkt::tcp(client4(44001), sa(VIP4, 80), ACK).build());
    assert_eq!(n.counter(Counter::DropNoConntrack), 1);
    // DNAT forwards it where Maglev sends it, and tracks it from there.
    let out = decode(&n.forward(
        EXT,
        &Pkt::tcp(client4(44002), sa(DNAT4, 80), ACK).build(),
        INT,
    ));
    assert_eq!(out.src, client4(44002));
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 2);
    assert_eq!(n.counter(Counter::NewFlows), 2);
}

#[test]
fn established_flow_keeps_its_backend_when_a_new_generation_adds_one() {
    let mut n = node();
    let vip = sa(VIP4, 80);
    let g1 = tables(&[1, 1, 1], 1);
    let g2 = tables(&[1, 1, 1, 1], 2);
    // A client port whose flow the new table sends elsewhere, and one it
    // sends to the new backend.
    let moved = (20000..30000)
        .map(client4)
        .find(|c| pick4(&g1, *c) != pick4(&g2, *c))
        .expect("some flow moves");
    let fresh = (30000..40000)
        .map(client4)
        .find(|c| pick4(&g2, *c) == 3)
        .expect("some flow goes to the new backend");

    let (backend, local) = handshake(&mut n, moved, vip);
    assert_eq!(fnat4_index(backend.ip()), pick4(&g1, moved) as u8);

    let new = IpAddr::from(fnat_backend4(3));
    n.learn(new, host_mac(new));
    n.publish(g2);
    n.poll();
    assert_eq!(n.w.pipeline.generation(), Some(2));

    let data = Pkt::tcp(moved, vip, ACK | PSH).payload(b"more");
    let out = decode(&n.forward(EXT, &data.build(), INT));
    assert_eq!(
        (out.src, out.dst),
        (local, backend),
        "established flow stays put"
    );
    let reply = Pkt::tcp(backend, local, ACK).by_backend();
    let back = decode(&n.forward(INT, &reply.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, moved));

    let out = decode(&n.forward(EXT, &Pkt::tcp(fresh, vip, SYN).build(), INT));
    assert_eq!(
        out.dst,
        sa(fnat_backend4(3), 8080),
        "new flows use the new generation"
    );
    assert_no_drops(&n);
}

#[test]
fn syn_on_a_closing_entry_picks_afresh() {
    // The flow's backend is drained by a new generation; while the flow is
    // open it stays, once it is closing a new SYN on the same tuple is a new
    // connection and goes elsewhere.
    for closer in [FIN | ACK, RST] {
        let mut n = node();
        let vip = sa(VIP4, 80);
        let client = client4(45000);
        let (backend, local) = handshake(&mut n, client, vip);
        let bi = fnat4_index(backend.ip());
        let mut weights = vec![1, 1, 1];
        weights[usize::from(bi)] = 0;
        n.publish(tables(&weights, 2));
        n.poll();

        let out = decode(&n.forward(EXT, &Pkt::tcp(client, vip, ACK).build(), INT));
        assert_eq!(
            (out.src, out.dst),
            (local, backend),
            "drained backend keeps its flow"
        );
        // A SYN retransmission on an open entry does not re-pick either.
        let out = decode(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
        assert_eq!(out.dst, backend);

        // At the client's next sequence number (its SYN took 1000): a RST
        // elsewhere would change nothing.
        let close = Pkt {
            seq: 1001,
            ..Pkt::tcp(client, vip, closer)
        };
        let out = decode(&n.forward(EXT, &close.build(), INT));
        assert_eq!(out.dst, backend);
        let st = state_of(&n, &key4(client, vip)).unwrap();
        assert!(st.is_closing(), "{st:?}");

        let out = decode(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
        assert_ne!(out.dst, backend, "re-picked after {closer:#x}");
        assert_eq!(state_of(&n, &key4(client, vip)), Some(State::SynSent));
        assert_eq!(n.counter(Counter::NewFlows), 2);
        assert_eq!(n.w.pipeline.lb().conntrack().len(), 1);
        assert_eq!(n.vip(VIP_TCP4, FlowStat::ActiveConnections), 1);
        assert_eq!(n.vip(VIP_TCP4, FlowStat::NewConnections), 2);
        assert_eq!(
            n.backend(VIP_TCP4, backend.ip(), FlowStat::ActiveConnections),
            0
        );
        assert_no_drops(&n);
    }
}

#[test]
fn idle_entries_expire_and_release_their_counts() {
    let mut n = node();
    let out = decode(&n.forward(
        EXT,
        &Pkt::udp(client4(6000), sa(VIP4, 53), b"q").build(),
        INT,
    ));
    assert_eq!(n.vip(VIP_UDP4, FlowStat::ActiveConnections), 1);
    n.advance_ms(299_000);
    n.poll();
    assert_eq!(
        n.w.pipeline.lb().conntrack().len(),
        1,
        "not idle long enough"
    );
    n.advance_ms(1_000);
    n.poll();
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 0);
    assert_eq!(n.counter(Counter::ConntrackExpired), 1);
    assert_eq!(n.vip(VIP_UDP4, FlowStat::ActiveConnections), 0);
    assert_eq!(
        n.backend(VIP_UDP4, out.dst.ip(), FlowStat::ActiveConnections),
        0
    );
    // The reply of the expired flow has nothing to go to.
    n.swallow(
        INT,
        &Pkt::udp(out.dst, out.src, b"late").by_backend().build(),
    );
    assert_eq!(n.counter(Counter::DropNoConntrack), 1);
}

#[test]
fn conntrack_full_dnat_goes_stateless_fullnat_drops_established_stay() {
    let mut n = Setup {
        conntrack: 2,
        ..Setup::default()
    }
    .node();
    n.learn(CLIENT4.into(), CLIENT_MAC);
    let vip = sa(VIP4, 80);
    let a = handshake(&mut n, client4(46000), vip);
    let b = handshake(&mut n, client4(46001), vip);
    assert!(n.w.pipeline.lb().conntrack().is_full());

    // New full-NAT flows: dropped, nothing evicted.
    for port in 0..50 {
        n.swallow(EXT, &Pkt::tcp(client4(47000 + port), vip, SYN).build());
    }
    assert_eq!(n.counter(Counter::DropConntrackFull), 50);

    // New DNAT flows: forwarded by Maglev alone, and their replies translated
    // without an entry.
    let dnat = sa(DNAT4, 80);
    for port in 0..50 {
        let client = client4(48000 + port);
        let out = decode(&n.forward(EXT, &Pkt::tcp(client, dnat, SYN).build(), INT));
        assert_eq!(out.src, client);
        let back = decode(&n.forward(
            INT,
            &Pkt::tcp(out.dst, client, SYN | ACK).by_backend().build(),
            EXT,
        ));
        assert_eq!((back.src, back.dst), (dnat, client));
    }
    assert_eq!(n.counter(Counter::ConntrackFullStateless), 50);
    assert_eq!(n.counter(Counter::DnatStatelessReplies), 50);
    assert_eq!(n.counter(Counter::NewFlows), 2 + 50);

    // The established flows are still there, on their backends and ports.
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 2);
    for (port, (backend, local)) in [(46000, a), (46001, b)] {
        let client = client4(port);
        assert_eq!(state_of(&n, &key4(client, vip)), Some(State::Established));
        let out = decode(&n.forward(EXT, &Pkt::tcp(client, vip, ACK).build(), INT));
        assert_eq!((out.src, out.dst), (local, backend));
        let back = decode(&n.forward(
            INT,
            &Pkt::tcp(backend, local, ACK).by_backend().build(),
            EXT,
        ));
        assert_eq!((back.src, back.dst), (vip, client));
    }
    assert_eq!(n.vip(VIP_TCP4, FlowStat::ActiveConnections), 2);
    assert_eq!(
        n.drops(),
        vec![("drop_conntrack_full", 50)],
        "nothing else dropped"
    );
}

// ---------------------------------------------------------------------------
// Drops with named counters.

#[test]
fn ttl_one_is_dropped_before_any_state_is_created() {
    let mut n = node();
    for (client, vip) in [
        (client4(49000), sa(VIP4, 80)),
        (client6(49000), sa(VIP6, 80)),
    ] {
        n.swallow(EXT, &Pkt::tcp(client, vip, SYN).ttl(1).build());
    }
    n.swallow(
        EXT,
        &Pkt::tcp(client4(49001), sa(DNAT4, 80), SYN).ttl(0).build(),
    );
    assert_eq!(n.counter(Counter::DropTtlExceeded), 3);
    assert_eq!(
        n.w.pipeline.lb().conntrack().len(),
        0,
        "no entry for a packet that goes nowhere"
    );
    assert_eq!(n.counter(Counter::NewFlows), 0);
    assert_eq!(n.vip(VIP_TCP4, FlowStat::NewConnections), 0);

    // A reply with TTL 1 is dropped too, and does not advance the flow.
    let (backend, local) = handshake(&mut n, client4(49002), sa(VIP4, 80));
    let fin = Pkt::tcp(backend, local, FIN | ACK).by_backend().ttl(1);
    n.swallow(INT, &fin.build());
    assert_eq!(n.counter(Counter::DropTtlExceeded), 4);
    assert_eq!(
        state_of(&n, &key4(client4(49002), sa(VIP4, 80))),
        Some(State::Established)
    );
    // TTL 2 leaves with 1.
    let out = decode(&n.forward(
        EXT,
        &Pkt::tcp(client4(49002), sa(VIP4, 80), ACK).ttl(2).build(),
        INT,
    ));
    assert_eq!(out.ttl, 1);
}

#[test]
fn fragments_to_a_vip_or_the_pool_are_dropped() {
    let mut n = node();
    // Non-last fragments carry a multiple of 8 bytes: 20 of TCP header + 4.
    let syn = Pkt::tcp(client4(50000), sa(VIP4, 80), SYN)
        .payload(b"abcd")
        .build();
    // First fragment: MF set, offset 0.
    let mut first = syn.clone();
    first[20] |= 0x20;
    fix_ipv4_checksum(&mut first);
    n.swallow(EXT, &first);
    // Later fragment: offset 8 x 8 bytes.
    let mut later = syn.clone();
    later[21] = 8;
    fix_ipv4_checksum(&mut later);
    n.swallow(EXT, &later);
    // IPv6 first fragment: a fragment header (M set) before TCP.
    let syn6 = Pkt::tcp(client6(50000), sa(VIP6, 80), SYN)
        .payload(b"abcd")
        .build();
    let frag6 = with_ext_header(&syn6, 44, [6, 0, 0, 1, 0, 0, 0, 7]);
    n.swallow(EXT, &frag6);
    // A fragmented reply to a full-NAT local address.
    let mut reply = Pkt::udp(sa(fnat_backend4(0), 5353), sa(LOCAL4, 2000), b"x")
        .by_backend()
        .build();
    reply[20] |= 0x20;
    fix_ipv4_checksum(&mut reply);
    n.swallow(INT, &reply);

    assert_eq!(n.drops(), vec![("drop_fragment", 4)]);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 0);
}

#[test]
fn impossible_tcp_flags_are_dropped() {
    let mut n = node();
    for (i, f) in [SYN | FIN, SYN | RST, 0, SYN | FIN | ACK]
        .into_iter()
        .enumerate()
    {
        n.swallow(
            EXT,
            &Pkt::tcp(client4(51000 + i as u16), sa(VIP4, 80), f).build(),
        );
        n.swallow(
            EXT,
            &Pkt::tcp(client4(51000 + i as u16), sa(DNAT4, 80), f).build(),
        );
    }
    assert_eq!(n.counter(Counter::DropBadTcpFlags), 8);
    assert_eq!(n.drops(), vec![("drop_bad_tcp_flags", 8)]);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 0);
}

#[test]
fn unknown_port_or_protocol_on_a_vip_address_is_dropped() {
    let mut n = node();
    n.swallow(EXT, &Pkt::tcp(client4(52000), sa(VIP4, 81), SYN).build());
    n.swallow(EXT, &Pkt::udp(client4(52000), sa(VIP4, 80), b"x").build());
    n.swallow(EXT, &Pkt::tcp(client4(52000), sa(VIP4, 53), SYN).build());
    n.swallow(EXT, &Pkt::tcp(client6(52000), sa(VIP6, 443), SYN).build());
    n.swallow(EXT, &Pkt::tcp(client4(52000), sa(DNAT4, 8080), SYN).build());
    assert_eq!(n.counter(Counter::DropVipUnhandled), 5);
    assert_eq!(n.drops(), vec![("drop_vip_unhandled", 5)]);
}

#[test]
fn vip_without_backends_drops_with_no_backend() {
    // (A VIP whose backends all have weight 0 fails open instead: every
    // backend gets weight 1, see conf::tables. Only an empty VIP has none.)
    let mut n = node();
    n.swallow(EXT, &Pkt::tcp(client4(53000), sa(EMPTY4, 80), SYN).build());
    n.swallow(EXT, &Pkt::tcp(client4(53001), sa(EMPTY4, 80), SYN).build());
    assert_eq!(n.drops(), vec![("drop_no_backend", 2)]);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 0);
    assert_eq!(n.counter(Counter::NewFlows), 0);
}

#[test]
fn a_refused_nat_rewrite_is_counted_under_its_reason() {
    // An IPv6 SYN to the VIP with a routing header that has a segment left:
    // its TCP checksum covers a final destination the header does not show,
    // so the rewrite refuses it (`NatError::Ipv6RoutingHeader`).
    let mut n = node();
    let syn6 = Pkt::tcp(client6(53500), sa(VIP6, 80), SYN).build();
    let mut routed = with_ext_header(&syn6, 43, [6, 0, 0, 1, 0, 0, 0, 0]);
    n.swallow(EXT, &routed);
    assert_eq!(n.drops(), vec![("drop_nat_ipv6_routing_header", 1)]);
    assert_eq!(n.counter(Counter::DropNatIpv6RoutingHeader), 1);
    assert_eq!(n.counter(Counter::DropSlowpathUnhandled), 0);
    // Without a segment left the destination is the final one: translated.
    routed[57] = 0;
    let out = decode(&n.forward(EXT, &routed, INT));
    assert_eq!(out.tcp, Some(SYN));
    assert_eq!(n.drops(), vec![("drop_nat_ipv6_routing_header", 1)]);
}

// ---------------------------------------------------------------------------
// Next-hop resolution.

/// (sender MAC, sender IP, target IP) of an ARP request frame.
fn arp_request(frame: &[u8]) -> Option<([u8; 6], IpAddr, IpAddr)> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let Some(NetSlice::Arp(a)) = &p.net else {
        return None;
    };
    let Some(LinkSlice::Ethernet2(e)) = &p.link else {
        return None;
    };
    assert_eq!(e.destination(), [0xff; 6], "ARP requests are broadcast");
    assert_eq!(a.operation(), ArpOperation::REQUEST);
    let ip = |b: &[u8]| IpAddr::from(<[u8; 4]>::try_from(b).unwrap());
    Some((
        a.sender_hw_addr().try_into().unwrap(),
        ip(a.sender_protocol_addr()),
        ip(a.target_protocol_addr()),
    ))
}

/// Target of a neighbour solicitation frame.
fn ns_target(frame: &[u8]) -> Option<IpAddr> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    match &p.transport {
        Some(etherparse::TransportSlice::Icmpv6(m)) if m.type_u8() == 135 => {
            let t: [u8; 16] = m.payload()[..16].try_into().unwrap();
            Some(IpAddr::from(t))
        }
        _ => None,
    }
}

/// One worker that knows no backend's MAC, its tables not yet adopted
/// (the first poll adopts them and asks for every next hop).
fn unresolved_node() -> Node {
    Setup {
        learn_backends: false,
        ..Setup::default()
    }
    .build()
    .pop()
    .unwrap()
}

#[test]
fn neighbour_miss_waits_asks_on_the_right_port_and_leaves_with_the_answer() {
    let mut n = unresolved_node();
    // Adopting the tables asks for every backend's next hop, on int only.
    n.poll();
    assert!(n.w.io.take_tx(EXT).is_empty());
    let asked = n.w.io.take_tx(INT);
    let mut v4: Vec<IpAddr> = asked
        .iter()
        .filter_map(|f| arp_request(f))
        .map(|(mac, sender, target)| {
            assert_eq!((mac, sender), (INT_MAC, IpAddr::from(LOCAL4)));
            target
        })
        .collect();
    let mut v6: Vec<IpAddr> = asked.iter().filter_map(|f| ns_target(f)).collect();
    v4.sort();
    v6.sort();
    let want4: Vec<IpAddr> = (0..3)
        .map(|i| fnat_backend4(i).into())
        .chain((0..3).map(|i| dnat_backend4(i).into()))
        .collect();
    let want6: Vec<IpAddr> = (0..3)
        .map(|i| fnat_backend6(i).into())
        .chain((0..3).map(|i| dnat_backend6(i).into()))
        .collect();
    assert_eq!(v4, want4);
    assert_eq!(v6, want6);
    assert_eq!(asked.len(), 12);

    // A SYN meanwhile waits for the answer; the request is already out.
    let client = client4(54000);
    let syn = Pkt::tcp(client, sa(VIP4, 80), SYN).build();
    let (ext, int) = n.exchange(EXT, &syn);
    assert!(ext.is_empty() && int.is_empty());
    assert_eq!(n.counter(Counter::NeighborQueued), 1);
    assert_eq!(n.counter(Counter::DropNeighborUnresolved), 0);

    // After the retry interval the waiting SYN's next hop is asked again.
    n.advance_ms(1_000);
    n.poll();
    let (ext, int) = (n.w.io.take_tx(EXT), n.w.io.take_tx(INT));
    assert!(ext.is_empty());
    assert_eq!(int.len(), 1);
    let (_, _, target) = arp_request(&int[0]).expect("an ARP request");
    assert_eq!(n.counter(Counter::NeighborRequests), 13);
    let IpAddr::V4(backend) = target else {
        panic!()
    };

    // The backend answers: the waiting SYN leaves in the same poll, to its MAC.
    let mut reply = Vec::new();
    etherparse::PacketBuilder::ethernet2(host_mac(target), INT_MAC)
        .arp(
            ArpPacket::new(
                ArpHardwareId::ETHERNET,
                EtherType::IPV4,
                ArpOperation::REPLY,
                &host_mac(target),
                &backend.octets(),
                &INT_MAC,
                &LOCAL4.octets(),
            )
            .unwrap(),
        )
        .write(&mut reply)
        .unwrap();
    let (ext, int) = n.exchange(INT, &reply);
    assert!(ext.is_empty());
    assert_eq!(int.len(), 1, "the parked SYN");
    let out = decode(&int[0]);
    assert_eq!(out.dst, sa(backend, 8080));
    assert_eq!((out.smac, out.dmac), (INT_MAC, host_mac(target)));
    assert_eq!(out.tcp, Some(SYN));
    let out = decode(&n.forward(EXT, &syn, INT));
    assert_eq!(out.dmac, host_mac(target));
    assert_eq!(n.counter(Counter::DropNeighborQueueTimeout), 0);
}

#[test]
fn frames_wait_for_a_silent_next_hop_three_at_a_time_and_three_seconds() {
    let mut n = unresolved_node();
    n.poll();
    n.w.io.take_tx(INT);
    // Clients whose flows all land on backends nobody answers for.
    for port in 0..40u16 {
        let syn = Pkt::tcp(client4(50_000 + port), sa(VIP4, 80), SYN).build();
        let (ext, int) = n.exchange(EXT, &syn);
        assert!(ext.is_empty() && int.iter().all(|f| arp_request(f).is_some()));
    }
    // Three backends, three frames each.
    assert_eq!(n.counter(Counter::NeighborQueued), 9);
    assert_eq!(n.counter(Counter::DropNeighborQueueFull), 31);
    n.advance_ms(2_999);
    n.poll();
    assert_eq!(n.counter(Counter::DropNeighborQueueTimeout), 0);
    n.advance_ms(1);
    n.poll();
    assert_eq!(n.counter(Counter::DropNeighborQueueTimeout), 9);
    // Room again.
    let syn = Pkt::tcp(client4(50_000), sa(VIP4, 80), SYN).build();
    n.exchange(EXT, &syn);
    assert_eq!(n.counter(Counter::NeighborQueued), 10);
}

// ---------------------------------------------------------------------------
// ICMP errors about flows.

#[test]
fn frag_needed_about_a_fullnat_flow_reaches_the_client_translated() {
    let mut n = node();
    let client = client4(55000);
    let vip = sa(VIP4, 80);
    let (backend, local) = handshake(&mut n, client, vip);
    // The client's first data byte follows its SYN (at 1000).
    let data = Pkt {
        seq: 1001,
        ..Pkt::tcp(client, vip, ACK | PSH).payload(&[0x55; 100])
    };
    let sent = n.forward(EXT, &data.build(), INT);

    // A router between us and the backend cannot forward it.
    let err = icmp4_frag_needed(
        host_mac(ROUTER4.into()),
        INT_MAC,
        ROUTER4,
        LOCAL4,
        1400,
        &sent[14..],
    );
    let out = decode_icmp(&n.forward(INT, &err, EXT));
    assert_eq!(out.kind, (3, 4));
    assert_eq!(
        (out.src, out.dst),
        (IpAddr::from(VIP4), IpAddr::from(CLIENT4))
    );
    assert_eq!((out.smac, out.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!(out.ttl, 63);
    assert_eq!((out.inner_src, out.inner_dst), (client, vip));
    assert_eq!(n.counter(Counter::IcmpErrorsTranslated), 1);

    // A router on the client side about a reply we sent: to the backend.
    let reply = n.forward(
        INT,
        &Pkt {
            seq: 1001,
            ..Pkt::tcp(backend, local, ACK).by_backend().payload(&[1; 64])
        }
        .build(),
        EXT,
    );
    let router = std::net::Ipv4Addr::new(10, 1, 0, 254);
    let err = icmp4_frag_needed(ROUTER_MAC, EXT_MAC, router, VIP4, 1280, &reply[14..]);
    let out = decode_icmp(&n.forward(EXT, &err, INT));
    assert_eq!((out.src, out.dst), (IpAddr::from(LOCAL4), backend.ip()));
    assert_eq!((out.smac, out.dmac), (INT_MAC, host_mac(backend.ip())));
    assert_eq!((out.inner_src, out.inner_dst), (backend, local));
    assert_eq!(n.counter(Counter::IcmpErrorsTranslated), 2);
    assert_no_drops(&n);
}

#[test]
fn packet_too_big_about_a_fullnat_v6_flow_reaches_the_client_translated() {
    let mut n = node();
    let client = client6(55000);
    let vip = sa(VIP6, 80);
    handshake(&mut n, client, vip);
    let sent = n.forward(
        EXT,
        &Pkt {
            seq: 1001,
            ..Pkt::tcp(client, vip, ACK).payload(&[7; 200])
        }
        .build(),
        INT,
    );
    let err = icmp6_too_big(
        host_mac(ROUTER6.into()),
        INT_MAC,
        ROUTER6,
        LOCAL6,
        1280,
        &sent[14..],
    );
    let out = decode_icmp(&n.forward(INT, &err, EXT));
    assert_eq!(out.kind, (2, 0));
    assert_eq!(
        (out.src, out.dst),
        (IpAddr::from(VIP6), IpAddr::from(CLIENT6))
    );
    assert_eq!((out.smac, out.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!((out.inner_src, out.inner_dst), (client, vip));
    assert_eq!(n.counter(Counter::IcmpErrorsTranslated), 1);
    assert_no_drops(&n);
}

#[test]
fn frag_needed_about_a_dnat_flow_reaches_the_client() {
    let mut n = node();
    let client = client4(56000);
    let vip = sa(DNAT4, 80);
    let sent = n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT);
    let backend = decode(&sent).dst;
    // The router addresses the error to the client (the quoted source).
    let err = icmp4_frag_needed(
        host_mac(ROUTER4.into()),
        INT_MAC,
        ROUTER4,
        CLIENT4,
        1400,
        &sent[14..],
    );
    let out = decode_icmp(&n.forward(INT, &err, EXT));
    assert_eq!(
        (out.src, out.dst),
        (IpAddr::from(ROUTER4), IpAddr::from(CLIENT4))
    );
    assert_eq!((out.inner_src, out.inner_dst), (client, vip));
    assert_eq!((out.smac, out.dmac), (EXT_MAC, CLIENT_MAC));
    assert_ne!(out.inner_dst, backend);
    assert_no_drops(&n);
}

#[test]
fn waiting_frames_ask_for_their_next_hop_again_sooner_than_the_retry() {
    let mut n = unresolved_node();
    // Adoption asks for every next hop once (12 requests); nobody answers.
    n.poll();
    assert_eq!(n.w.io.take_tx(INT).len(), 12);
    n.advance_ms(50);
    let syn = Pkt::tcp(client4(54100), sa(VIP4, 80), SYN).build();
    let (_, int) = n.exchange(EXT, &syn);
    assert!(int.is_empty(), "parked, the request is recent");
    n.advance_ms(100);
    n.poll();
    assert!(
        n.w.io.take_tx(INT).is_empty(),
        "150 ms after the first request"
    );
    n.advance_ms(100);
    n.poll();
    let asked: Vec<_> =
        n.w.io
            .take_tx(INT)
            .iter()
            .filter_map(|f| arp_request(f))
            .collect();
    assert_eq!(asked.len(), 1, "asked again at 250 ms, not at 1 s");
    assert_eq!(n.counter(Counter::NeighborRequests), 13);
}
