//! The neighbour table on byte fixtures (docs/reliability.md): what ARP and NDP
//! frames may write into it, its bound, and how a next hop in use is
//! probed and followed to a new MAC. Frames built with etherparse go into
//! `Worker::poll_once` over in-memory ports; what comes out is decoded.

mod support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use conf::counters::Counter;
use dataplane::neigh::{CAPACITY, PROBE_GAP_MS, REACHABLE_MS};
use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, LinkSlice, NetSlice, PacketBuilder,
    SlicedPacket,
};
use support::lb::flags::ACK;
use support::lb::*;

const NEW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xee, 0x01];
const BCAST: [u8; 6] = [0xff; 6];

/// An ARP frame from `sha` to Ethernet `dst`.
fn arp(op: ArpOperation, dst: [u8; 6], sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    let tha = if op == ArpOperation::REPLY {
        dst
    } else {
        [0; 6]
    };
    let mut f = Vec::new();
    PacketBuilder::ethernet2(sha, dst)
        .arp(
            ArpPacket::new(
                ArpHardwareId::ETHERNET,
                EtherType::IPV4,
                op,
                &sha,
                &spa.octets(),
                &tha,
                &tpa.octets(),
            )
            .unwrap(),
        )
        .write(&mut f)
        .unwrap();
    f
}

/// `ip`'s ARP reply to the int port's address.
fn answer(ip: Ipv4Addr, mac: [u8; 6]) -> Vec<u8> {
    arp(ArpOperation::REPLY, INT_MAC, mac, ip, LOCAL4)
}

/// (Ethernet destination, target) of an ARP request frame.
fn arp_request(frame: &[u8]) -> Option<([u8; 6], IpAddr)> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let (Some(NetSlice::Arp(a)), Some(LinkSlice::Ethernet2(e))) = (&p.net, &p.link) else {
        return None;
    };
    assert_eq!(a.operation(), ArpOperation::REQUEST);
    let t: [u8; 4] = a.target_protocol_addr().try_into().unwrap();
    Some((e.destination(), IpAddr::from(t)))
}

/// One worker that knows no next hop's MAC, its tables adopted (it asked
/// for every backend then).
fn unresolved() -> Node {
    let mut n = Setup {
        learn_backends: false,
        ..Setup::default()
    }
    .node();
    n.w.io.take_tx(INT);
    n
}

/// A UDP datagram of the client at `port` to the full-NAT VIP 10.1.0.100:53.
fn datagram(port: u16) -> Vec<u8> {
    Pkt::udp(sa(CLIENT4, port), sa(VIP4, 53), b"q").build()
}

fn entries(n: &mut Node) -> u64 {
    n.poll();
    n.counter(Counter::NeighEntries)
}

#[test]
fn only_answers_to_our_requests_and_entries_in_use_are_learnt() {
    let mut n = unresolved();
    let configured = entries(&mut n);
    assert_eq!(configured, 12, "the twelve backends, pinned");
    let b0 = fnat_backend4(0);

    // The answer to border's request: learnt.
    n.exchange(INT, &answer(b0, host_mac(b0.into())));
    assert_eq!(
        n.w.pipeline.lb().neighbor(b0.into()),
        Some(host_mac(b0.into()))
    );

    // A reply nobody asked for, from a host on the segment: refused.
    let stranger = Ipv4Addr::new(10, 2, 0, 77);
    n.exchange(INT, &answer(stranger, NEW_MAC));
    assert_eq!(n.counter(Counter::NeighRefusedUnsolicited), 1);
    assert_eq!(n.w.pipeline.lb().neighbor(stranger.into()), None);

    // From outside the port's subnets (even with a request of ours for it
    // out: the client side's address asked on the backend side).
    n.exchange(INT, &answer(Ipv4Addr::new(192, 0, 2, 5), NEW_MAC));
    assert_eq!(n.counter(Counter::NeighRefusedOffSubnet), 1);
    n.exchange(INT, &answer(CLIENT4, NEW_MAC));
    assert_eq!(
        n.counter(Counter::NeighRefusedOffSubnet),
        2,
        "{:?}",
        n.drops()
    );

    // A request for our address: answered, its sender not learnt.
    let (_, int) = n.exchange(
        INT,
        &arp(ArpOperation::REQUEST, BCAST, NEW_MAC, stranger, LOCAL4),
    );
    assert_eq!(int.len(), 1, "the ARP reply");
    assert_eq!(n.counter(Counter::ArpReplies), 1);
    // A request for another host, and a gratuitous ARP of an address the
    // table has no entry for.
    let other = Ipv4Addr::new(10, 2, 0, 78);
    n.swallow(
        INT,
        &arp(ArpOperation::REQUEST, BCAST, NEW_MAC, stranger, other),
    );
    n.exchange(
        INT,
        &arp(ArpOperation::REQUEST, BCAST, NEW_MAC, stranger, stranger),
    );
    assert_eq!(n.counter(Counter::NeighRefusedOverheard), 1);
    assert_eq!(n.counter(Counter::NeighRefusedNotInTable), 2);
    assert_eq!(n.w.pipeline.lb().neighbor(stranger.into()), None);

    // The same for a backend in the table: a requester's binding and a
    // gratuitous ARP move it; a request for another host does not.
    let b1 = fnat_backend4(1);
    n.exchange(INT, &answer(b1, host_mac(b1.into())));
    n.swallow(INT, &arp(ArpOperation::REQUEST, BCAST, NEW_MAC, b1, other));
    assert_eq!(
        n.w.pipeline.lb().neighbor(b1.into()),
        Some(host_mac(b1.into()))
    );
    n.exchange(INT, &arp(ArpOperation::REQUEST, BCAST, NEW_MAC, b1, b1));
    assert_eq!(n.w.pipeline.lb().neighbor(b1.into()), Some(NEW_MAC));
    n.exchange(INT, &arp(ArpOperation::REQUEST, BCAST, NEW_MAC, b0, LOCAL4));
    assert_eq!(n.w.pipeline.lb().neighbor(b0.into()), Some(NEW_MAC));
    assert_eq!(n.counter(Counter::NeighMacChanged), 2);
    assert_eq!(entries(&mut n), configured);
}

#[test]
fn an_unsolicited_neighbour_advertisement_makes_no_entry() {
    let mut n = unresolved();
    let stranger: Ipv6Addr = "fd00:2::77".parse().unwrap();
    let mut na = Vec::new();
    let mut body = stranger.octets().to_vec();
    body.extend_from_slice(&[2, 1]);
    body.extend_from_slice(&NEW_MAC);
    PacketBuilder::ethernet2(NEW_MAC, [0x33, 0x33, 0, 0, 0, 1])
        .ipv6(
            stranger.octets(),
            [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            255,
        )
        .icmpv6(etherparse::Icmpv6Type::NeighborAdvertisement(
            etherparse::icmpv6::NeighborAdvertisementHeader {
                router: false,
                solicited: false,
                r#override: true,
            },
        ))
        .write(&mut na, &body)
        .unwrap();
    n.exchange(INT, &na);
    assert_eq!(n.counter(Counter::NeighRefusedNotInTable), 1);
    assert_eq!(n.w.pipeline.lb().neighbor(stranger.into()), None);
    assert_eq!(entries(&mut n), 12);
}

#[test]
fn thirty_thousand_spoofed_arp_frames_leave_the_table_as_configured() {
    let mut n = unresolved();
    for b in 0..3 {
        let ip = fnat_backend4(b);
        n.exchange(INT, &answer(ip, host_mac(ip.into())));
    }
    for i in 0..30_000u32 {
        // (Not the backends: what a next hop in the table says of itself
        // does move its entry.)
        let sender = match i % 3 {
            0 => Ipv4Addr::new(10, 2, (i >> 8) as u8 | 1, i as u8), // on the segment and beyond
            1 => Ipv4Addr::from(0xc000_0000 | i),                   // off every subnet
            _ => Ipv4Addr::new(10, 2, 0, (i % 150) as u8 + 100),
        };
        let mac = [0x02, 0xaa, (i >> 16) as u8, (i >> 8) as u8, i as u8, 1];
        let target = match i % 4 {
            0 => LOCAL4,
            1 => sender,
            _ => Ipv4Addr::new(10, 2, 0, 250),
        };
        let op = if i % 5 == 0 {
            ArpOperation::REPLY
        } else {
            ArpOperation::REQUEST
        };
        let dst = if op == ArpOperation::REPLY {
            INT_MAC
        } else {
            BCAST
        };
        n.w.io.inject(INT, &arp(op, dst, mac, sender, target));
        if i % 32 == 31 {
            n.poll();
            n.w.io.take_tx(INT);
        }
    }
    assert_eq!(entries(&mut n), 12);
    n.w.io.take_tx(INT);
    let refused = [
        Counter::NeighRefusedOverheard,
        Counter::NeighRefusedOffSubnet,
        Counter::NeighRefusedUnsolicited,
        Counter::NeighRefusedNotInTable,
    ]
    .map(|c| n.counter(c));
    assert!(refused.iter().all(|&r| r > 0), "{refused:?}");
    assert_eq!(n.counter(Counter::NeighEvicted), 0);
    // The backends still have their MACs: datagrams leave at once.
    for port in 0..20 {
        let out = decode(&n.forward(EXT, &datagram(40_000 + port), INT));
        assert_eq!(out.dmac, host_mac(out.dst.ip()));
    }
}

#[test]
fn a_next_hop_in_use_is_probed_then_followed_to_its_new_mac() {
    let mut n = unresolved();
    for b in 0..3 {
        let ip = fnat_backend4(b);
        n.exchange(INT, &answer(ip, host_mac(ip.into())));
    }
    let out = decode(&n.forward(EXT, &datagram(41_000), INT));
    let backend = out.dst.ip();
    let IpAddr::V4(b4) = backend else { panic!() };
    assert_eq!(out.dmac, host_mac(backend));

    // Past its reachable time the next datagram still leaves to the known
    // MAC, and a probe goes to that MAC.
    n.advance_ms(REACHABLE_MS);
    let (_, int) = n.exchange(EXT, &datagram(41_000));
    assert_eq!(int.len(), 2, "{int:02x?}");
    assert_eq!(decode(&int[0]).dmac, host_mac(backend));
    assert_eq!(arp_request(&int[1]), Some((host_mac(backend), backend)));
    assert_eq!(n.counter(Counter::NeighProbes), 1);

    // The server was replaced: the old MAC is silent, so the next probe
    // is broadcast, and the new server's answer moves the entry.
    n.advance_ms(PROBE_GAP_MS);
    let (_, int) = n.exchange(EXT, &datagram(41_000));
    assert_eq!(int.len(), 2);
    assert_eq!(arp_request(&int[1]), Some((BCAST, backend)));
    n.exchange(INT, &answer(b4, NEW_MAC));
    assert_eq!(n.counter(Counter::NeighMacChanged), 1);
    let out = decode(&n.forward(EXT, &datagram(41_000), INT));
    assert_eq!(out.dmac, NEW_MAC);
    assert_eq!(out.dst.ip(), backend);

    // A next hop that answers no probe is forgotten and asked for again;
    // its frames wait for it.
    n.advance_ms(REACHABLE_MS);
    for _ in 0..3 {
        let (_, int) = n.exchange(EXT, &datagram(41_000));
        assert!(int.iter().any(|f| arp_request(f).is_some()));
        n.advance_ms(PROBE_GAP_MS);
    }
    assert_eq!(n.counter(Counter::NeighFailed), 0);
    let (_, int) = n.exchange(EXT, &datagram(41_000));
    assert_eq!(int.len(), 1, "parked, asked by broadcast");
    assert_eq!(arp_request(&int[0]), Some((BCAST, backend)));
    n.poll(); // (the totals are shown once per poll iteration)
    assert_eq!(n.counter(Counter::NeighFailed), 1);
    assert_eq!(n.w.pipeline.lb().neighbor(backend), None);
    let (_, int) = n.exchange(INT, &answer(b4, NEW_MAC));
    assert_eq!(int.len(), 1, "the parked datagram");
    assert_eq!(decode(&int[0]).dmac, NEW_MAC);
}

#[test]
fn probes_go_on_time_without_traffic() {
    let mut n = unresolved();
    for b in 0..3 {
        let ip = fnat_backend4(b);
        n.exchange(INT, &answer(ip, host_mac(ip.into())));
    }
    let out = decode(&n.forward(EXT, &datagram(44_000), INT));
    let backend = out.dst.ip();
    n.advance_ms(REACHABLE_MS);
    let (_, int) = n.exchange(EXT, &datagram(44_000));
    assert_eq!(arp_request(&int[1]), Some((host_mac(backend), backend)));
    // No more datagrams: the clock sends the broadcast probes, then the
    // request of a next hop that answered none.
    for _ in 0..3 {
        n.advance_ms(PROBE_GAP_MS);
        n.poll();
        let int = n.w.io.take_tx(INT);
        assert_eq!(int.len(), 1, "{int:02x?}");
        assert_eq!(arp_request(&int[0]), Some((BCAST, backend)));
    }
    n.poll();
    assert_eq!(n.counter(Counter::NeighFailed), 1);
    n.advance_ms(PROBE_GAP_MS);
    n.poll();
    assert!(
        n.w.io.take_tx(INT).is_empty(),
        "nothing more without traffic"
    );
}

#[test]
fn a_gratuitous_arp_moves_a_next_hop_at_once() {
    let mut n = unresolved();
    for b in 0..3 {
        let ip = fnat_backend4(b);
        n.exchange(INT, &answer(ip, host_mac(ip.into())));
    }
    let out = decode(&n.forward(EXT, &datagram(42_000), INT));
    let backend = out.dst.ip();
    let IpAddr::V4(b4) = backend else { panic!() };
    // VRRP failover: the new master announces the address.
    n.exchange(INT, &arp(ArpOperation::REQUEST, BCAST, NEW_MAC, b4, b4));
    let (_, int) = n.exchange(EXT, &datagram(42_000));
    assert_eq!(decode(&int[0]).dmac, NEW_MAC);
    // ... and is probed (unicast) on its first use.
    assert_eq!(arp_request(&int[1]), Some((NEW_MAC, backend)));
}

#[test]
fn an_answer_reaching_another_worker_fills_the_asking_workers_entry() {
    let mut nodes = Setup {
        workers: 2,
        learn_backends: false,
        ..Setup::default()
    }
    .build_polled();
    for n in &mut nodes {
        n.w.io.take_tx(EXT);
        n.w.io.take_tx(INT);
    }
    // Worker 1 translates a DNAT reply to an on-link client it has never
    // sent to: the frame waits, worker 1 asks on ext.
    let client = Ipv4Addr::new(10, 1, 0, 77);
    let backend = dnat_backend4(0);
    let reply = Pkt::tcp(sa(backend, 8080), sa(client, 40_000), ACK)
        .by_backend()
        .build();
    let (ext, int) = nodes[1].exchange(INT, &reply);
    assert!(int.is_empty());
    assert_eq!(ext.len(), 1);
    assert_eq!(arp_request(&ext[0]), Some((BCAST, client.into())));
    // The answer reaches worker 0, which has no entry for the client.
    let ans = arp(
        ArpOperation::REPLY,
        EXT_MAC,
        NEW_MAC,
        client,
        Ipv4Addr::new(10, 1, 0, 1),
    );
    nodes[0].exchange(EXT, &ans);
    assert_eq!(nodes[0].counter(Counter::NeighRefusedUnsolicited), 0);
    assert_eq!(nodes[0].w.pipeline.lb().neighbor(client.into()), None);
    // Worker 1 hears of it and sends the waiting frame.
    nodes[1].poll();
    let ext = nodes[1].w.io.take_tx(EXT);
    assert_eq!(ext.len(), 1);
    let out = decode(&ext[0]);
    assert_eq!((out.dst, out.dmac), (sa(client, 40_000), NEW_MAC));
}

#[test]
fn the_table_is_bounded_and_keeps_the_configured_next_hops() {
    let mut n = unresolved();
    for b in 0..3 {
        let ip = fnat_backend4(b);
        n.exchange(INT, &answer(ip, host_mac(ip.into())));
    }
    // DNAT replies to more on-link clients than the table holds.
    let backend = dnat_backend6(0);
    for i in 0..(CAPACITY as u16 + 500) {
        let client = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 1, i);
        let reply = Pkt::tcp(
            sa(backend, 8080),
            SocketAddr::new(client.into(), 40_000),
            ACK,
        )
        .by_backend()
        .build();
        n.w.io.inject(INT, &reply);
        n.advance_ms(1);
        if i % 16 == 15 {
            n.poll();
            n.w.io.take_tx(EXT);
        }
    }
    assert_eq!(entries(&mut n), CAPACITY as u64);
    n.w.io.take_tx(EXT);
    assert!(n.counter(Counter::NeighEvicted) >= 500);
    for b in 0..3 {
        let ip = IpAddr::from(fnat_backend4(b));
        assert_eq!(n.w.pipeline.lb().neighbor(ip), Some(host_mac(ip)));
    }
    let out = decode(&n.forward(EXT, &datagram(43_000), INT));
    assert_eq!(out.dmac, host_mac(out.dst.ip()));
}

/// A VIP a later table generation adds (a `vip add`, an applied config)
/// is answered for ARP from the generation on, on the port whose subnet
/// holds it only; one the generation removes is no longer.
#[test]
fn a_vip_added_at_run_time_is_answered_for_arp() {
    let mut n = node();
    let new_vip = Ipv4Addr::new(10, 1, 0, 150);
    let ask = arp(ArpOperation::REQUEST, BCAST, CLIENT_MAC, CLIENT4, new_vip);
    n.swallow(EXT, &ask);
    assert_eq!(n.counter(Counter::ArpReplies), 0);

    let with_vip = config_text(&[1, 1, 1])
        + "\n[[vip]]\nname = \"late\"\naddress = \"10.1.0.150\"\nport = 80\nmaglev_table_size = 1021\n[[vip.backend]]\naddress = \"10.2.0.11\"\nport = 8080\n";
    let cfg = conf::Config::from_toml_str(&with_vip, "lbtest.toml").unwrap();
    n.publish(dataplane::standalone::adopted_from_config(&cfg, 2).unwrap());
    n.poll();
    let (ext, int) = n.exchange(EXT, &ask);
    assert!(int.is_empty());
    assert_eq!(ext.len(), 1, "the ARP reply");
    let SlicedPacket {
        net: Some(NetSlice::Arp(reply)),
        ..
    } = SlicedPacket::from_ethernet(&ext[0]).unwrap()
    else {
        panic!("not ARP: {:02x?}", ext[0])
    };
    assert_eq!(reply.operation(), ArpOperation::REPLY);
    assert_eq!(reply.sender_hw_addr(), EXT_MAC);
    assert_eq!(reply.sender_protocol_addr(), new_vip.octets());
    // Not on the backend side, whose subnet does not hold it.
    let from_backend = arp(
        ArpOperation::REQUEST,
        BCAST,
        NEW_MAC,
        Ipv4Addr::new(10, 2, 0, 77),
        new_vip,
    );
    n.swallow(INT, &from_backend);

    n.publish(tables(&[1, 1, 1], 3));
    n.poll();
    n.swallow(EXT, &ask);
    assert_eq!(n.counter(Counter::ArpReplies), 1);
}
