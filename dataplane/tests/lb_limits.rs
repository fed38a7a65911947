//! `[vip.limits]` (docs/config.md) on byte fixtures: allow and deny lists, the
//! open-connection caps of a VIP and of a backend (given back when the
//! connection closes or its entry goes), the new-connection rate, the
//! per-source SYN and UDP rates, limits changed by a new table generation
//! without losing count, and rate-limited ICMP echo answers. Every refusal
//! is dropped before any state and counted.

mod support;

use std::net::{Ipv4Addr, SocketAddr};

use conf::counters::Counter;
use conf::Config;
use dataplane::standalone::adopted_from_config;
use etherparse::PacketBuilder;
use support::lb::flags::{ACK, FIN, SYN};
use support::lb::*;

fn vip() -> SocketAddr {
    sa(VIP4, 80)
}

/// The test config with `limits` as the `[vip.limits]` of the full-NAT TCP
/// VIP `tcp4` (one backend, 10.2.0.11, with `backend` appended to it) and
/// `udp_limits` as that of the UDP VIP `udp4`.
fn text(backend: &str, limits: &str, udp_limits: &str) -> String {
    let t = config_text(&[1]);
    let udp_at = "\n[[vip]]\nname = \"udp4\"";
    let tcp6_at = "\n[[vip]]\nname = \"tcp6\"";
    assert!(t.contains(udp_at) && t.contains(tcp6_at));
    let t = t.replacen(
        udp_at,
        &format!("{backend}\n[vip.limits]\n{limits}\n{udp_at}"),
        1,
    );
    t.replacen(
        tcp6_at,
        &format!("\n[vip.limits]\n{udp_limits}\n{tcp6_at}"),
        1,
    )
}

fn appliance(backend: &str, limits: &str, udp_limits: &str) -> Node {
    // `Setup::edit` makes one replacement: the default text from the end of
    // tcp4's backends to the start of tcp6, by the same part of `text`.
    let (old, new) = (config_text(&[1]), text(backend, limits, udp_limits));
    let from = old.find("\n[[vip]]\nname = \"udp4\"").unwrap();
    let to = old.find("\n[[vip]]\nname = \"tcp6\"").unwrap();
    let new_from = from;
    let new_to = new.find("\n[[vip]]\nname = \"tcp6\"").unwrap();
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    Setup {
        tcp4_weights: vec![1],
        edit: Some((leak(&old[from..to]), leak(&new[new_from..new_to]))),
        ..Setup::default()
    }
    .node()
}

/// Generation `g` of the config `text` (for a change without restart).
fn generation(text: &str, g: u64) -> dataplane::lb::Adopted<'static> {
    let cfg = Config::from_toml_str(text, "lbtest.toml").expect("config");
    adopted_from_config(&cfg, g).expect("tables")
}

/// Sends a client's SYN: whether it reached the backend.
fn syn(n: &mut Node, client: SocketAddr) -> bool {
    let (_, int) = n.exchange(EXT, &Pkt::tcp(client, vip(), SYN).build());
    !int.is_empty()
}

/// A full handshake; returns the local tuple the backend saw.
fn connect(n: &mut Node, client: SocketAddr) -> Option<SocketAddr> {
    let mut s = Pkt::tcp(client, vip(), SYN);
    s.seq = 1000;
    let (_, int) = n.exchange(EXT, &s.build());
    let seen = decode(int.first()?);
    let mut synack = Pkt::tcp(seen.dst, seen.src, SYN | ACK).by_backend();
    synack.seq = 7000;
    synack.ack = 1001;
    n.forward(INT, &synack.build(), EXT);
    let mut ack = Pkt::tcp(client, vip(), ACK);
    ack.seq = 1001;
    ack.ack = 7001;
    n.forward(EXT, &ack.build(), INT);
    Some(seen.src)
}

/// Both FINs of a connection from [`connect`].
fn close(n: &mut Node, client: SocketAddr, local: SocketAddr) {
    let mut fin = Pkt::tcp(client, vip(), FIN | ACK);
    fin.seq = 1001;
    fin.ack = 7001;
    n.forward(EXT, &fin.build(), INT);
    let backend = sa(fnat_backend4(0), 8080);
    let mut fin = Pkt::tcp(backend, local, FIN | ACK).by_backend();
    fin.seq = 7001;
    fin.ack = 1002;
    n.forward(INT, &fin.build(), EXT);
}

fn client(host: u8, port: u16) -> SocketAddr {
    sa(Ipv4Addr::new(10, 1, 0, host), port)
}

#[test]
fn the_lists_refuse_by_longest_prefix_and_count() {
    let mut n = appliance(
        "",
        "allow = [\"10.1.0.0/24\", \"10.1.0.52/32\"]\ndeny = [\"10.1.0.48/29\"]",
        "",
    );
    assert!(syn(&mut n, client(60, 5000)), "allowed");
    assert!(!syn(&mut n, client(50, 5000)), "inside the deny");
    assert!(
        syn(&mut n, client(52, 5000)),
        "a longer allow inside the deny"
    );
    // Outside every prefix while an allow list exists.
    assert!(!syn(&mut n, sa(Ipv4Addr::new(192, 0, 2, 9), 5000)));
    assert_eq!(n.counter(Counter::DropVipAclDenied), 2);
    assert_eq!(
        n.w.pipeline.lb().conntrack().len(),
        2,
        "refusals hold no entry"
    );
    // Other VIPs have no list.
    let (_, int) = n.exchange(EXT, &Pkt::udp(client(50, 5000), sa(VIP4, 53), b"q").build());
    assert_eq!(int.len(), 1);
}

#[test]
fn max_connections_holds_and_is_given_back_on_close_and_expiry() {
    let mut n = appliance("", "max_connections = 2", "");
    let (a, b, c) = (client(60, 5001), client(60, 5002), client(60, 5003));
    let la = connect(&mut n, a).expect("first");
    assert!(connect(&mut n, b).is_some(), "second");
    assert!(connect(&mut n, c).is_none(), "third refused");
    assert_eq!(n.counter(Counter::DropVipMaxConnections), 1);
    // Both FINs: the connection is over (its entry lingers for
    // tcp_closing), and its place is free.
    close(&mut n, a, la);
    assert!(connect(&mut n, c).is_some(), "after a close");
    assert!(!syn(&mut n, client(61, 5004)), "full again");
    assert_eq!(n.counter(Counter::DropVipMaxConnections), 2);
    // Entries that expire give their places back too (a half-open one
    // here: the SYN of d, 30 s tcp_syn).
    n.advance_ms(3_600_000);
    for _ in 0..40 {
        n.poll();
    }
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 0);
    assert!(connect(&mut n, client(62, 1)).is_some());
    assert!(connect(&mut n, client(62, 2)).is_some());
    assert!(!syn(&mut n, client(62, 3)));
}

#[test]
fn a_backend_cap_refuses_its_flows_and_counts_them_apart() {
    let mut n = appliance("max_connections = 1", "", "");
    assert!(syn(&mut n, client(60, 6001)));
    assert!(!syn(&mut n, client(60, 6002)));
    assert_eq!(n.counter(Counter::DropBackendMaxConnections), 1);
    assert_eq!(n.counter(Counter::DropVipMaxConnections), 0);
}

#[test]
fn new_connection_and_per_source_rates() {
    // 10 per second, 3 deep; per /24: 1 per second, 2 deep.
    let mut n = appliance(
        "",
        "new_connections_per_second = 10\nnew_connections_burst = 3\nsyn_per_source_per_second = 1\nper_source_burst = 2",
        "udp_flows_per_source_per_second = 1",
    );
    // One /24: two pass, then its bucket is empty.
    assert!(syn(&mut n, client(60, 1)));
    assert!(syn(&mut n, client(61, 1)));
    assert!(!syn(&mut n, client(62, 1)));
    assert_eq!(n.counter(Counter::DropSourceRateLimited), 1);
    // Another /24 passes once: the VIP's bucket of 3 is empty after it.
    let other = |i: u16| sa(Ipv4Addr::new(10, 1, 7, 1), i);
    assert!(syn(&mut n, other(1)));
    assert!(!syn(&mut n, sa(Ipv4Addr::new(10, 1, 8, 1), 1)));
    assert_eq!(n.counter(Counter::DropVipRateLimited), 1);
    // 100 ms refill one VIP token; the first /24 has none yet.
    n.advance_ms(100);
    n.poll();
    assert!(!syn(&mut n, client(63, 1)));
    assert_eq!(n.counter(Counter::DropSourceRateLimited), 2);
    n.advance_ms(1000);
    n.poll();
    assert!(syn(&mut n, client(63, 2)));

    // UDP: new flows per source prefix; a flow once admitted goes on.
    let udp = |p: u16| Pkt::udp(client(70, p), sa(VIP4, 53), b"q").build();
    assert_eq!(n.exchange(EXT, &udp(1)).1.len(), 1);
    assert_eq!(n.exchange(EXT, &udp(2)).1.len(), 0);
    assert_eq!(n.exchange(EXT, &udp(1)).1.len(), 1, "an admitted flow");
    assert_eq!(n.counter(Counter::DropUdpSourceRateLimited), 1);
}

#[test]
fn a_new_generation_changes_the_limits_and_keeps_the_count() {
    let mut n = appliance("", "max_connections = 1", "");
    assert!(syn(&mut n, client(60, 1)));
    assert!(!syn(&mut n, client(60, 2)));
    // Raised to 2 without a restart: the open connection still counts.
    n.publish(generation(&text("", "max_connections = 2", ""), 2));
    n.poll();
    assert!(syn(&mut n, client(60, 3)));
    assert!(!syn(&mut n, client(60, 4)));
    assert_eq!(n.counter(Counter::DropVipMaxConnections), 2);
    // A deny list instead of the cap.
    n.publish(generation(&text("", "deny = [\"10.1.0.0/24\"]", ""), 3));
    n.poll();
    assert!(!syn(&mut n, client(60, 5)));
    assert_eq!(n.counter(Counter::DropVipAclDenied), 1);
    assert!(syn(&mut n, sa(Ipv4Addr::new(10, 1, 9, 9), 5)));
}

/// An ICMP echo request from the client to the ext port's address.
fn ping(seq: u16) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT_MAC, EXT_MAC)
        .ipv4(CLIENT4.octets(), [10, 1, 0, 1], 64)
        .icmpv4_echo_request(7, seq);
    let mut out = Vec::new();
    b.write(&mut out, b"ping").unwrap();
    out
}

#[test]
fn echo_answers_are_rate_limited_per_worker() {
    let mut n = node();
    n.w.pipeline.set_icmp_echo_rate(5);
    let answered = (0..20)
        .filter(|&i| !n.exchange(EXT, &ping(i)).0.is_empty())
        .count();
    assert_eq!(answered, 5);
    assert_eq!(n.counter(Counter::IcmpEchoReplies), 5);
    assert_eq!(n.counter(Counter::IcmpEchoRateLimited), 15);
    n.advance_ms(1000);
    n.poll();
    assert!(!n.exchange(EXT, &ping(99)).0.is_empty(), "refilled");
}
