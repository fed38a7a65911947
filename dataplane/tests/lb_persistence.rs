//! Source persistence on byte fixtures: with `hash = "source"` every
//! connection of one client address reaches the same backend whatever its
//! source port, while other clients still spread over the backends; with
//! the default 5-tuple hash one client's connections spread too.

mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use support::lb::flags::SYN;
use support::lb::*;

/// The full-NAT VIP `tcp4` with `hash` set (`None`: not set), three
/// backends of weight 1.
fn appliance(hash: Option<&'static str>) -> Node {
    Setup {
        edit: hash.map(|h| ("name = \"tcp4\"\n", h)),
        ..Setup::default()
    }
    .node()
}

/// The backend a client's SYN was forwarded to.
fn backend_of(n: &mut Node, client: SocketAddr) -> IpAddr {
    let out = decode(&n.forward(EXT, &Pkt::tcp(client, sa(VIP4, 80), SYN).build(), INT));
    out.dst.ip()
}

/// Clients 10.1.0.60 + i, each on one source port.
fn other_clients() -> impl Iterator<Item = SocketAddr> {
    (0..24u8).map(|i| sa(Ipv4Addr::new(10, 1, 0, 60 + i), 41000 + u16::from(i)))
}

#[test]
fn hash_source_keeps_one_client_on_one_backend_and_spreads_clients() {
    let mut n = appliance(Some("name = \"tcp4\"\nhash = \"source\"\n"));
    let one: BTreeSet<IpAddr> = (0..40u16)
        .map(|i| backend_of(&mut n, sa(CLIENT4, 30000 + 97 * i)))
        .collect();
    assert_eq!(one.len(), 1, "one client's 40 connections went to {one:?}");
    let many: BTreeSet<IpAddr> = other_clients().map(|c| backend_of(&mut n, c)).collect();
    assert_eq!(many.len(), 3, "24 clients reached only {many:?}");
    assert_eq!(n.drops(), vec![], "drop counters");
}

#[test]
fn five_tuple_hash_spreads_one_clients_connections() {
    for hash in [None, Some("name = \"tcp4\"\nhash = \"5-tuple\"\n")] {
        let mut n = appliance(hash);
        let one: BTreeSet<IpAddr> = (0..40u16)
            .map(|i| backend_of(&mut n, sa(CLIENT4, 30000 + 97 * i)))
            .collect();
        assert_eq!(
            one.len(),
            3,
            "{hash:?}: 40 connections reached only {one:?}"
        );
    }
}

/// The pick of a `hash = "source"` VIP is the 5-tuple pick of the same flow
/// with source port 0: what another appliance (or a tool) computes from
/// the documented encoding.
#[test]
fn hash_source_pick_is_the_pick_with_source_port_zero() {
    let five = appliance(None);
    let source = appliance(Some("name = \"tcp4\"\nhash = \"source\"\n"));
    let (t5, ts) = (
        five.w.pipeline.lb().tables().unwrap(),
        source.w.pipeline.lb().tables().unwrap(),
    );
    let flow = |sport| dataplane::lb::Flow4or6::V4 {
        src: CLIENT4.octets(),
        dst: VIP4.octets(),
        sport,
        dport: 80,
        proto: 6,
    };
    let vip = VIP_TCP4 as usize;
    for sport in [1u16, 1024, 40000, 65535] {
        assert_eq!(
            ts.pick(&ts.vips[vip], &flow(sport)),
            t5.pick(&t5.vips[vip], &flow(0)),
            "source port {sport}"
        );
    }
}
