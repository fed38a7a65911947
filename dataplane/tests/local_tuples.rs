//! Full-NAT local tuples on byte fixtures: a tuple is not handed out again
//! while the backend may still hold its last connection in TIME_WAIT
//! (cooldown), tuples go round least recently used first, and TCP
//! timestamps run on the worker's clock so that a backend accepts a reused
//! tuple (RFC 6191).

mod support;

use std::net::SocketAddr;

use conf::counters::Counter;
use dataplane::conntrack::Timeouts;
use support::lb::flags::{ACK, FIN, SYN};
use support::lb::*;

const VIP: (std::net::Ipv4Addr, u16) = (VIP4, 80);

fn vip() -> SocketAddr {
    sa(VIP.0, VIP.1)
}

/// One worker, one backend, a pool of `ports` ports.
fn appliance(ports: u16) -> Node {
    Setup {
        tcp4_weights: vec![1],
        pool: (2000, 2000 + ports - 1),
        ..Setup::default()
    }
    .node()
}

/// Opens a connection from `client`, the backend answering, both with
/// timestamps when `ts`; returns the local port it got (None: dropped).
fn open(n: &mut Node, client: SocketAddr, ts: Option<u32>) -> Option<u16> {
    let mut syn = Pkt::tcp(client, vip(), SYN);
    if let Some(v) = ts {
        syn = syn.timestamps(v, 0);
    }
    let (_, int) = n.exchange(EXT, &syn.build());
    let out = int.first()?;
    let s = decode(out);
    let backend = s.dst;
    let local = s.src;
    let mut synack = Pkt::tcp(backend, local, SYN | ACK).by_backend();
    if ts.is_some() {
        synack = synack.timestamps(7_000, timestamps_of(out).unwrap().0);
    }
    n.forward(INT, &synack.build(), EXT);
    Some(local.port())
}

/// Closes the connection both ways (backend first, as nginx does).
fn close(n: &mut Node, client: SocketAddr, local_port: u16) {
    let backend = sa(fnat_backend4(0), 8080);
    let local = sa(LOCAL4, local_port);
    n.forward(
        INT,
        &Pkt::tcp(backend, local, FIN | ACK).by_backend().build(),
        EXT,
    );
    n.forward(EXT, &Pkt::tcp(client, vip(), FIN | ACK).build(), INT);
    n.forward(EXT, &Pkt::tcp(client, vip(), ACK).build(), INT);
}

#[test]
fn full_nat_timestamps_run_on_the_worker_clock_both_ways() {
    let mut n = appliance(16);
    n.advance_ms(5_000);
    let client = sa(CLIENT4, 40_000);
    let syn = Pkt::tcp(client, vip(), SYN).timestamps(111, 0);
    let out = n.forward(EXT, &syn.build(), INT);
    decode(&out); // checksums verify after the change
    assert_eq!(
        timestamps_of(&out),
        Some((5_000, 0)),
        "SYN's TSval is the clock"
    );
    let s = decode(&out);
    let synack = Pkt::tcp(s.dst, s.src, SYN | ACK)
        .by_backend()
        .timestamps(90_000, 5_000);
    let back = n.forward(INT, &synack.build(), EXT);
    decode(&back);
    assert_eq!(
        timestamps_of(&back),
        Some((90_000, 111)),
        "TSecr back on the client's clock"
    );
    // Later segments keep the same offset, also through the express lane.
    for i in 1..4u32 {
        let data = Pkt::tcp(client, vip(), ACK)
            .timestamps(111 + i, 90_000 + i)
            .payload(b"x");
        let out = n.forward(EXT, &data.build(), INT);
        decode(&out);
        assert_eq!(timestamps_of(&out), Some((5_000 + i, 90_000 + i)));
        let ack = Pkt::tcp(s.dst, s.src, ACK)
            .by_backend()
            .timestamps(90_100, 5_000 + i);
        let back = n.forward(INT, &ack.build(), EXT);
        decode(&back);
        assert_eq!(timestamps_of(&back), Some((90_100, 111 + i)));
    }
    // A segment without the option passes untouched.
    let plain = n.forward(EXT, &Pkt::tcp(client, vip(), ACK).build(), INT);
    assert_eq!(timestamps_of(&plain), None);
}

#[test]
fn a_tuple_rests_its_cooldown_after_a_connection_without_timestamps() {
    let mut n = appliance(2);
    let (a, b, c) = (
        sa(CLIENT4, 40_001),
        sa(CLIENT4, 40_002),
        sa(CLIENT4, 40_003),
    );
    let pa = open(&mut n, a, None).unwrap();
    let pb = open(&mut n, b, None).unwrap();
    assert_ne!(pa, pb);
    close(&mut n, a, pa);
    close(&mut n, b, pb);
    // Both tuples are resting: a third client is refused, not collided.
    n.advance_ms(59_000);
    assert_eq!(open(&mut n, c, None), None);
    assert_eq!(n.counter(Counter::DropNoLocalPort), 1);
    // Past the 60 s cooldown the least recently used tuple is taken over,
    // although its old entry may still linger.
    n.advance_ms(1_001);
    n.poll();
    assert_eq!(open(&mut n, c, None), Some(pa));
    assert_eq!(n.counter(Counter::DropNoLocalPort), 1);
}

#[test]
fn a_tuple_that_used_timestamps_is_reused_after_a_second() {
    let mut n = appliance(2);
    let (a, b, c) = (
        sa(CLIENT4, 40_011),
        sa(CLIENT4, 40_012),
        sa(CLIENT4, 40_013),
    );
    let pa = open(&mut n, a, Some(1)).unwrap();
    let pb = open(&mut n, b, Some(1)).unwrap();
    close(&mut n, a, pa);
    close(&mut n, b, pb);
    n.advance_ms(500);
    assert_eq!(open(&mut n, c, Some(2)), None, "resting");
    n.advance_ms(600);
    assert_eq!(open(&mut n, c, Some(2)), Some(pa));
    assert_eq!(n.counter(Counter::LocalTuplesTakenOver), 1);
    // The SYN on the reused tuple is newer than anything the old
    // connection sent, whatever the new client's own clock says.
    let d = sa(CLIENT4, 40_014);
    close(&mut n, c, pa);
    n.advance_ms(1_100);
    let syn = Pkt::tcp(d, vip(), SYN).timestamps(1, 0);
    let out = n.forward(EXT, &syn.build(), INT);
    assert_eq!(decode(&out).src.port(), pb);
    assert!(timestamps_of(&out).unwrap().0 > 1_100);
}

#[test]
fn one_sided_timestamps_rest_the_full_cooldown() {
    // The client offered timestamps, the backend did not take them.
    let mut n = appliance(1);
    let a = sa(CLIENT4, 40_021);
    let syn = Pkt::tcp(a, vip(), SYN).timestamps(5, 0);
    let out = n.forward(EXT, &syn.build(), INT);
    let s = decode(&out);
    n.forward(
        INT,
        &Pkt::tcp(s.dst, s.src, SYN | ACK).by_backend().build(),
        EXT,
    );
    close(&mut n, a, s.src.port());
    n.advance_ms(30_000);
    assert_eq!(open(&mut n, sa(CLIENT4, 40_022), Some(9)), None);
    n.advance_ms(30_001);
    assert_eq!(
        open(&mut n, sa(CLIENT4, 40_022), Some(9)),
        Some(s.src.port())
    );
}

#[test]
fn a_live_connection_keeps_its_tuple_and_the_gauges_say_so() {
    let mut n = appliance(4);
    let live = open(&mut n, sa(CLIENT4, 40_031), None).unwrap();
    // The client's ACK completes the handshake (a half-open entry's tuple
    // would go to a new flow after a second: tests/syn_flood.rs).
    n.forward(EXT, &Pkt::tcp(sa(CLIENT4, 40_031), vip(), ACK).build(), INT);
    let ended = open(&mut n, sa(CLIENT4, 40_032), None).unwrap();
    close(&mut n, sa(CLIENT4, 40_032), ended);
    n.advance_ms(10_001); // the closed entry expires and its tuple rests
    for _ in 0..4 {
        n.poll();
    }
    assert_eq!(
        n.counter(Counter::LocalTuples),
        8,
        "4 ports of an IPv4 and an IPv6 address"
    );
    assert_eq!(n.counter(Counter::LocalTuplesInUse), 1);
    assert_eq!(n.counter(Counter::LocalTuplesResting), 1);
    // The two untouched tuples, then nothing: the live one is never taken.
    let p3 = open(&mut n, sa(CLIENT4, 40_033), None).unwrap();
    let p4 = open(&mut n, sa(CLIENT4, 40_034), None).unwrap();
    assert!(![live, ended].contains(&p3) && ![live, ended].contains(&p4));
    assert_eq!(open(&mut n, sa(CLIENT4, 40_035), None), None);
}

#[test]
fn the_cooldown_is_configurable() {
    let mut n = Setup {
        tcp4_weights: vec![1],
        pool: (2000, 2000),
        timeouts: Timeouts {
            local_port_cooldown: 5,
            ..Timeouts::default()
        },
        ..Setup::default()
    }
    .node();
    let a = sa(CLIENT4, 40_041);
    let p = open(&mut n, a, None).unwrap();
    close(&mut n, a, p);
    n.advance_ms(4_999);
    assert_eq!(open(&mut n, sa(CLIENT4, 40_042), None), None);
    n.advance_ms(2);
    assert_eq!(open(&mut n, sa(CLIENT4, 40_042), None), Some(p));
}

#[test]
fn a_vip_can_pass_timestamps_through_and_then_rests_its_tuples_fully() {
    let mut n = Setup {
        tcp4_weights: vec![1],
        pool: (2000, 2000),
        edit: Some((
            "name = \"tcp4\"\n",
            "name = \"tcp4\"\ntranslate_timestamps = false\n",
        )),
        ..Setup::default()
    }
    .node();
    n.advance_ms(5_000);
    let a = sa(CLIENT4, 40_051);
    let out = n.forward(
        EXT,
        &Pkt::tcp(a, vip(), SYN).timestamps(111, 0).build(),
        INT,
    );
    assert_eq!(timestamps_of(&out), Some((111, 0)), "untouched");
    let s = decode(&out);
    let synack = Pkt::tcp(s.dst, s.src, SYN | ACK)
        .by_backend()
        .timestamps(9, 111);
    let back = n.forward(INT, &synack.build(), EXT);
    assert_eq!(timestamps_of(&back), Some((9, 111)));
    close(&mut n, a, s.src.port());
    n.advance_ms(2_000);
    assert_eq!(
        open(&mut n, sa(CLIENT4, 40_052), Some(5)),
        None,
        "60 s, not 1 s"
    );
}
