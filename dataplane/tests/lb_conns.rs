//! Walks of the live connections (`borderctl conns`) on byte fixtures
//! through `Worker::poll_once`: a reader asks through a real connections
//! region, the worker copies its entries between polls, and what the
//! reader gets is what the flows are.

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use conf::conns::{ConnsRegion, LiveConn, LIVE_FULL_NAT, LIVE_METERED};
use conf::os::files::Access;
use conf::records::RecordsRegion;
use support::lb::flags::{ACK, PSH, SYN};
use support::lb::*;

fn dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("border-lb-conns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A connections region of `slots` per ring for one worker (leaked with it).
fn conns(name: &str, slots: u32) -> &'static ConnsRegion {
    let r = ConnsRegion::create(&dir().join(name), 1, slots, Access::PRIVATE).unwrap();
    Box::leak(Box::new(r))
}

/// A whole walk of the node's table, the node polled between takes;
/// `meanwhile` runs after each poll.
fn walk(
    n: &mut Node,
    r: &ConnsRegion,
    id: u64,
    mut meanwhile: impl FnMut(&mut Node, usize),
) -> Vec<LiveConn> {
    r.request(0, id);
    let mut got = Vec::new();
    for round in 0..10_000 {
        n.poll();
        meanwhile(n, round);
        let t = r.take(0, id, usize::MAX, |c| got.push(c.expect("a whole record")));
        assert_eq!(t.torn, 0);
        if t.done {
            return got;
        }
    }
    panic!("the walk never ended ({} records)", got.len());
}

#[test]
fn a_walk_lists_each_connection_as_its_packets_made_it() {
    let r = conns("one", 64);
    let records = RecordsRegion::create(&dir().join("one-rec"), 1, 64, Access::PRIVATE).unwrap();
    let records: &'static RecordsRegion = Box::leak(Box::new(records));
    let mut n = Setup {
        conns: Some(r),
        records: Some((records, false)),
        ..Setup::default()
    }
    .node();
    n.advance_ms(5_000);
    let (client, vip) = (sa(CLIENT4, 47000), sa(VIP4, 80));
    let syn = Pkt {
        seq: 1000,
        ..Pkt::tcp(client, vip, SYN)
    };
    let fwd = decode(&n.forward(EXT, &syn.build(), INT));
    let (backend, local) = (fwd.dst, fwd.src);
    let synack = Pkt {
        seq: 7000,
        ack: 1001,
        ..Pkt::tcp(backend, local, SYN | ACK).by_backend()
    };
    n.forward(INT, &synack.build(), EXT);
    n.advance_ms(40);
    let data = Pkt {
        seq: 1001,
        ack: 7001,
        ..Pkt::tcp(client, vip, ACK | PSH).payload(&[1; 200])
    };
    n.forward(EXT, &data.build(), INT);
    // A UDP flow to its VIP, and a DNAT one.
    let q = Pkt::udp(sa(CLIENT4, 20_000), sa(VIP4, 53), b"query");
    let udp = decode(&n.forward(EXT, &q.build(), INT));
    let dsyn = Pkt {
        seq: 5,
        ..Pkt::tcp(sa(CLIENT4, 47001), sa(DNAT4, 80), SYN)
    };
    let dnat = decode(&n.forward(EXT, &dsyn.build(), INT));
    n.advance_ms(10);

    let got = walk(&mut n, r, 1, |_, _| {});
    assert_eq!(got.len(), 3, "{got:?}");
    let by_port: BTreeMap<u16, LiveConn> = got.iter().map(|c| (c.client_port, *c)).collect();
    let tcp = by_port[&47000];
    assert_eq!(tcp.client_ip(), IpAddr::from(CLIENT4));
    assert_eq!((tcp.vip_ip(), tcp.vip_port), (IpAddr::from(VIP4), 80));
    assert_eq!(SocketAddr::new(tcp.backend_ip(), tcp.backend_port), backend);
    assert_eq!(SocketAddr::new(tcp.local_ip(), tcp.local_port), local);
    assert_eq!(
        tcp.state_name(),
        "established",
        "the data acknowledged the SYN-ACK"
    );
    assert_eq!(tcp.flags, LIVE_FULL_NAT | LIVE_METERED);
    assert_eq!(tcp.proxy_status(), "off");
    assert_eq!(tcp.packets, [2, 1]);
    let ip_len = |p: &Pkt| p.ip_bytes().len() as u64;
    assert_eq!(tcp.octets, [ip_len(&syn) + ip_len(&data), ip_len(&synack)]);
    assert_eq!((tcp.created_ms, tcp.last_seen_ms), (5_000, 5_040));
    assert_eq!(tcp.now_ms, 5_050);
    assert_eq!(tcp.worker, 0);

    let u = by_port[&20_000];
    assert_eq!(u.state_name(), "udp");
    assert_eq!(u.proto, 17);
    assert_eq!(SocketAddr::new(u.backend_ip(), u.backend_port), udp.dst);
    assert_eq!(u.packets, [1, 0]);

    let d = by_port[&47001];
    assert_eq!(d.flags & LIVE_FULL_NAT, 0, "DNAT");
    assert_eq!(SocketAddr::new(d.backend_ip(), d.backend_port), dnat.dst);
    assert_eq!(
        SocketAddr::new(d.local_ip(), d.local_port),
        sa(CLIENT4, 47001),
        "DNAT's local tuple is the client's"
    );
    assert_eq!(d.state_name(), "syn_sent");
}

#[test]
fn without_records_a_walk_lists_connections_unmetered() {
    let r = conns("plain", 16);
    let mut n = Setup {
        conns: Some(r),
        ..Setup::default()
    }
    .node();
    let q = Pkt::udp(sa(CLIENT4, 20_000), sa(VIP4, 53), b"query");
    n.forward(EXT, &q.build(), INT);
    let got = walk(&mut n, r, 1, |_, _| {});
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].flags & LIVE_METERED, 0);
    assert_eq!((got[0].packets, got[0].octets), ([0; 2], [0; 2]));
}

#[test]
fn connections_that_live_through_a_walk_are_listed_once_while_others_come_and_go() {
    // A ring of 8 slots and 16 entries per poll: the walk of 600 entries
    // takes dozens of polls, and flows start and end between them.
    let r = conns("churn", 8);
    let mut n = Setup {
        conns: Some(r),
        conntrack: 4096,
        ..Setup::default()
    }
    .node();
    let vip = sa(VIP4, 53);
    let open = |n: &mut Node, port: u16| {
        let q = Pkt::udp(sa(CLIENT4, port), vip, b"q");
        n.forward(EXT, &q.build(), INT);
    };
    for port in 10_000..10_600 {
        open(&mut n, port);
    }
    let mut next = 30_000;
    let got = walk(&mut n, r, 7, |n, _| {
        for _ in 0..5 {
            open(n, next);
            next += 1;
        }
    });
    let mut seen: BTreeMap<u16, usize> = BTreeMap::new();
    for c in &got {
        *seen.entry(c.client_port).or_default() += 1;
    }
    for port in 10_000..10_600 {
        assert_eq!(seen.get(&port), Some(&1), "flow from port {port}");
    }
    assert!(seen.values().all(|&k| k == 1), "no flow twice");
    assert!(next > 30_050, "flows were added during the walk");
}
