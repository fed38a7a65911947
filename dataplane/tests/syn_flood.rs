//! A spoofed SYN flood against a full-NAT VIP, on byte fixtures: once the
//! connection table is full, a new connection takes the place of the
//! oldest half-open entry (one at least `HALF_OPEN_MIN_AGE_MS` old), so
//! real clients still get in, established flows keep their entries and
//! the table never grows past its capacity. The local tuple of an evicted
//! entry rests only briefly: the backend never had a connection on it.

mod support;

use std::net::{Ipv4Addr, SocketAddr};

use conf::counters::Counter;
use dataplane::lb::HALF_OPEN_MIN_AGE_MS;
use support::lb::flags::{ACK, SYN};
use support::lb::*;

const TABLE: usize = 64;

fn vip() -> SocketAddr {
    sa(VIP4, 80)
}

/// One worker, one full-NAT backend, a table of `TABLE` entries and a
/// pool of `ports` local ports.
fn appliance(ports: u16) -> Node {
    Setup {
        tcp4_weights: vec![1],
        conntrack: TABLE,
        pool: (2000, 2000 + ports - 1),
        ..Setup::default()
    }
    .node()
}

fn table_len(n: &Node) -> usize {
    n.w.pipeline.lb().conntrack().len()
}

/// The `i`-th spoofed source: addresses no one answers from.
fn spoofed(i: usize) -> SocketAddr {
    sa(
        Ipv4Addr::new(198, 51, 100, (i % 250) as u8 + 1),
        1024 + i as u16,
    )
}

/// Sends `count` spoofed SYNs; returns how many reached the backend.
fn flood(n: &mut Node, from: usize, count: usize) -> usize {
    (from..from + count)
        .filter(|&i| {
            let (_, int) = n.exchange(EXT, &Pkt::tcp(spoofed(i), vip(), SYN).build());
            !int.is_empty()
        })
        .count()
}

/// A real client's handshake through the appliance: SYN, the backend's
/// SYN-ACK, the client's ACK. Returns the local address and port the
/// backend saw, or None when the SYN did not get through.
fn connect(n: &mut Node, client: SocketAddr) -> Option<SocketAddr> {
    let (_, int) = n.exchange(EXT, &Pkt::tcp(client, vip(), SYN).build());
    let s = decode(int.first()?);
    let synack = Pkt::tcp(s.dst, s.src, SYN | ACK).by_backend().build();
    n.forward(INT, &synack, EXT);
    n.forward(EXT, &Pkt::tcp(client, vip(), ACK).build(), INT);
    Some(s.src)
}

#[test]
fn a_full_table_of_half_open_entries_makes_room_for_real_clients() {
    let mut n = appliance(1024);
    let real = sa(CLIENT4, 40_000);
    let local = connect(&mut n, real).expect("established before the flood");
    assert_eq!(flood(&mut n, 0, TABLE - 1), TABLE - 1, "fills the table");
    assert_eq!(table_len(&n), TABLE);

    // Younger than the minimum age: refused, nothing evicted.
    n.advance_ms(HALF_OPEN_MIN_AGE_MS - 1);
    assert_eq!(connect(&mut n, sa(CLIENT4, 40_001)), None);
    assert_eq!(n.counter(Counter::DropSynFlood), 1);
    assert_eq!(n.counter(Counter::ConntrackHalfOpenEvicted), 0);

    // Old enough: every real client gets in, each in the place of one
    // half-open entry, oldest first; the table stays at its capacity.
    n.advance_ms(1);
    for i in 0..10u16 {
        assert!(
            connect(&mut n, sa(CLIENT4, 41_000 + i)).is_some(),
            "client {i}"
        );
    }
    assert_eq!(n.counter(Counter::ConntrackHalfOpenEvicted), 10);
    assert_eq!(table_len(&n), TABLE);

    // The established flow kept its entry: data passes both ways.
    let data = Pkt::tcp(real, vip(), ACK).payload(b"still here").build();
    n.forward(EXT, &data, INT);
    let backend = sa(fnat_backend4(0), 8080);
    let back = Pkt::tcp(backend, local, ACK).by_backend().payload(b"ok");
    n.forward(INT, &back.build(), EXT);
    assert_eq!(n.counter(Counter::DropNoConntrack), 0);

    // A table full of connections that completed their handshake evicts
    // nothing: new flows are refused as before.
    let mut m = appliance(1024);
    for i in 0..TABLE as u16 {
        connect(&mut m, sa(CLIENT4, 42_000 + i)).unwrap();
    }
    m.advance_ms(HALF_OPEN_MIN_AGE_MS * 10);
    assert_eq!(connect(&mut m, sa(CLIENT4, 43_000)), None);
    assert_eq!(m.counter(Counter::DropConntrackFull), 1);
    assert_eq!(m.counter(Counter::ConntrackHalfOpenEvicted), 0);
}

#[test]
fn an_evicted_half_open_entry_gives_its_local_port_back_soon() {
    // As many ports as entries: the flood holds every port too.
    let mut n = appliance(TABLE as u16);
    assert_eq!(flood(&mut n, 0, TABLE), TABLE);
    n.advance_ms(HALF_OPEN_MIN_AGE_MS);
    // The oldest entry goes, and its tuple serves the real client at once
    // (not after the 60 s `local_port_cooldown` of an ended connection).
    let local = connect(&mut n, sa(CLIENT4, 40_000)).expect("gets the evicted tuple");
    assert_eq!(local.port(), 2000);
    assert_eq!(n.counter(Counter::DropNoLocalPort), 0);
    // A flood that goes on keeps cycling through the tuples it frees.
    n.advance_ms(HALF_OPEN_MIN_AGE_MS);
    assert_eq!(flood(&mut n, TABLE, TABLE - 1), TABLE - 1);
    assert_eq!(n.counter(Counter::DropNoLocalPort), 0);
    assert_eq!(table_len(&n), TABLE);
}

#[test]
fn a_flood_that_holds_every_local_port_gives_the_oldest_back() {
    // Fewer ports than entries: the ports run out before the table fills.
    let mut n = appliance(16);
    assert_eq!(flood(&mut n, 0, 16), 16);
    assert_eq!(table_len(&n), 16);
    n.advance_ms(HALF_OPEN_MIN_AGE_MS - 1);
    assert_eq!(connect(&mut n, sa(CLIENT4, 40_000)), None);
    assert_eq!(n.counter(Counter::DropNoLocalPort), 1);
    // Old enough: the tuple of the oldest half-open entry serves the client.
    n.advance_ms(1);
    let local = connect(&mut n, sa(CLIENT4, 40_001)).expect("takes a flood's tuple");
    assert_eq!(local.port(), 2000);
    assert_eq!(n.counter(Counter::ConntrackHalfOpenEvicted), 1);
    assert_eq!(table_len(&n), 16);
    // An established connection's tuple is never taken: once every other
    // tuple went to real clients, the next one is refused.
    for i in 0..15u16 {
        assert!(
            connect(&mut n, sa(CLIENT4, 41_000 + i)).is_some(),
            "client {i}"
        );
    }
    n.advance_ms(HALF_OPEN_MIN_AGE_MS * 10);
    assert_eq!(connect(&mut n, sa(CLIENT4, 42_000)), None);
    assert_eq!(n.counter(Counter::ConntrackHalfOpenEvicted), 16);
}
