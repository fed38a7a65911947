//! Direct server return through the worker on byte fixtures: a client's
//! packets of a DSR VIP leave unchanged but for the destination MAC
//! (`encap = "none"`) or inside an IPIP / GUE header, on the general
//! path and the express lane alike; one-way connection state; the MTU.

mod support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use conf::counters::Counter;
use conf::state::FlowStat;
use dataplane::conntrack::{FlowKey, State};
use support::lb::flags::{ACK, FIN, PSH, SYN};
use support::lb::*;

const MAC_VIP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 110);
const IPIP_VIP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 111);
const GUE_VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x111);
const GUE_VIP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 112);
const MAC_BACKEND: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 31);
const TUN_BACKEND: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 41);
const TUN_BACKEND6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0x41);

const DSR_VIPS: &str = r#"[[vip]]
name = "dsr-mac"
address = "10.1.0.110"
port = 80
mode = "dsr"
maglev_table_size = 1021
[[vip.backend]]
address = "10.2.0.31"
port = 80
[[vip]]
name = "dsr-ipip"
address = "10.1.0.111"
port = 80
mode = "dsr"
encap = "ipip"
maglev_table_size = 1021
[[vip.backend]]
address = "10.2.0.41"
port = 80
[[vip]]
name = "dsr-gue6"
address = "fd00:1::111"
port = 80
mode = "dsr"
encap = "gue"
maglev_table_size = 1021
[[vip.backend]]
address = "fd00:2::41"
port = 80
[[vip]]
name = "dsr-gue"
address = "10.1.0.112"
port = 53
protocol = "udp"
mode = "dsr"
encap = "gue"
maglev_table_size = 1021
[[vip.backend]]
address = "10.2.0.41"
port = 53
[mgmt]
"#;

fn dsr_node() -> Node {
    dsr_node_on(Setup {
        edit: Some(("[mgmt]\n", DSR_VIPS)),
        ..Setup::default()
    })
}

/// [`dsr_node`] on `setup`, whose edit adds [`DSR_VIPS`].
fn dsr_node_on(setup: Setup) -> Node {
    let mut n = setup.node();
    for ip in [
        IpAddr::from(MAC_BACKEND),
        TUN_BACKEND.into(),
        TUN_BACKEND6.into(),
    ] {
        n.learn(ip, host_mac(ip));
    }
    // The neighbour requests for the new backends, asked at adoption.
    n.poll();
    n.w.io.take_tx(EXT);
    n.w.io.take_tx(INT);
    n
}

#[test]
fn encap_none_rewrites_only_the_macs_and_tracks_the_client_alone() {
    let mut n = dsr_node();
    let client = sa(CLIENT4, 40000);
    let vip = sa(MAC_VIP, 80);
    let syn = Pkt::tcp(client, vip, SYN).build();
    let out = n.forward(EXT, &syn, INT);
    assert_eq!(
        &out[..6],
        &host_mac(MAC_BACKEND.into()),
        "to the backend's MAC"
    );
    assert_eq!(&out[6..12], &INT_MAC, "from the port's MAC");
    assert_eq!(
        &out[12..],
        &syn[12..],
        "IP packet unchanged: VIP, port, TTL, checksums"
    );
    let key = FlowKey::v4(CLIENT4.octets(), MAC_VIP.octets(), 40000, 80, 6);
    let state = |n: &Node| {
        let ct = n.w.pipeline.lb().conntrack();
        let (id, _) = ct.lookup(&key, 0).expect("an entry");
        ct.get(id).state()
    };
    assert_eq!(state(&n), State::SynSent);
    // The client's ACK establishes the flow: the backend's SYN-ACK never
    // passes border.
    let ack = Pkt::tcp(client, vip, ACK).build();
    let out = n.forward(EXT, &ack, INT);
    assert_eq!(&out[12..], &ack[12..]);
    assert_eq!(state(&n), State::Established);
    // Data then takes the express lane, with the same result.
    let data = Pkt::tcp(client, vip, PSH | ACK)
        .payload(b"GET / HTTP/1.0\r\n\r\n")
        .build();
    let out = n.forward(EXT, &data, INT);
    assert_eq!(&out[..6], &host_mac(MAC_BACKEND.into()));
    assert_eq!(&out[12..], &data[12..]);
    let fin = Pkt::tcp(client, vip, FIN | ACK).build();
    n.forward(EXT, &fin, INT);
    assert_eq!(state(&n), State::FinWait);
    assert_eq!(n.counter(Counter::DsrForwarded), 4);
    // The DSR VIPs come first in the config.
    assert_eq!(n.vip(0, FlowStat::Packets), 4);
    assert_eq!(n.backend(0, MAC_BACKEND.into(), FlowStat::Packets), 4);
    assert_eq!(n.drops(), vec![]);
}

/// The outer IPv4 header in `out` (after 14 bytes of Ethernet): its
/// source, destination, protocol, TTL, and the bytes after it.
fn outer4(out: &[u8]) -> (Ipv4Addr, Ipv4Addr, u8, u8, Vec<u8>) {
    assert_eq!(&out[12..14], &[0x08, 0x00]);
    let h = &out[14..34];
    assert_eq!(h[0], 0x45);
    assert_eq!(
        usize::from(u16::from_be_bytes([h[2], h[3]])),
        out.len() - 14
    );
    let sum = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    assert_eq!(
        (sum & 0xffff) + (sum >> 16),
        0xffff,
        "outer checksum verifies"
    );
    let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
    let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    (src, dst, h[9], h[8], out[34..].to_vec())
}

#[test]
fn ipip_carries_the_client_packet_to_the_backend() {
    let mut n = dsr_node();
    let mut sources = std::collections::HashSet::new();
    for port in 40000..40016u16 {
        let syn = Pkt::tcp(sa(CLIENT4, port), sa(IPIP_VIP, 80), SYN).build();
        let out = n.forward(EXT, &syn, INT);
        assert_eq!(&out[..6], &host_mac(TUN_BACKEND.into()));
        let (src, dst, proto, ttl, inner) = outer4(&out);
        assert_eq!((dst, proto, ttl), (TUN_BACKEND, 4, 64));
        assert_eq!(
            &src.octets()[..3],
            &[10, 2, 0],
            "a source in the port's subnet"
        );
        assert_eq!(inner, syn[14..].to_vec(), "the client's packet, unchanged");
        sources.insert(src);
        // And the established flow's data on the express lane.
        n.forward(
            EXT,
            &Pkt::tcp(sa(CLIENT4, port), sa(IPIP_VIP, 80), ACK).build(),
            INT,
        );
        let data = Pkt::tcp(sa(CLIENT4, port), sa(IPIP_VIP, 80), PSH | ACK)
            .payload(b"x")
            .build();
        let again = outer4(&n.forward(EXT, &data, INT));
        assert_eq!(again.0, src, "one outer source per flow");
        assert_eq!(again.4, data[14..].to_vec());
    }
    assert!(
        sources.len() >= 8,
        "flows spread over outer sources: {sources:?}"
    );
    assert_eq!(n.drops(), vec![]);
}

#[test]
fn gue_over_ipv6_and_ipv4() {
    let mut n = dsr_node();
    let syn = Pkt::tcp(sa(CLIENT6, 40000), sa(GUE_VIP6, 80), SYN).build();
    let out = n.forward(EXT, &syn, INT);
    assert_eq!(&out[12..14], &[0x86, 0xdd]);
    let h = &out[14..54];
    assert_eq!(h[6], 17, "UDP");
    assert_eq!(h[7], 64, "hop limit");
    assert_eq!(&h[24..40], &TUN_BACKEND6.octets());
    assert_eq!(
        &h[8..16],
        &Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0).octets()[..8]
    );
    assert_eq!(
        usize::from(u16::from_be_bytes([h[4], h[5]])),
        out.len() - 54
    );
    let udp = &out[54..62];
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), conf::GUE_PORT);
    assert_eq!(&out[62..66], &[0, 41, 0, 0], "GUE carrying IPv6");
    assert_eq!(&out[66..], &syn[14..]);
    let dgram = Pkt::udp(sa(CLIENT4, 5000), sa(GUE_VIP, 53), b"query").build();
    let out = n.forward(EXT, &dgram, INT);
    let (_, dst, proto, _, rest) = outer4(&out);
    assert_eq!((dst, proto), (TUN_BACKEND, 17));
    assert_eq!(&rest[8..12], &[0, 4, 0, 0]);
    assert_eq!(&rest[12..], &dgram[14..]);
    assert_eq!(n.drops(), vec![]);
}

#[test]
fn encapsulation_over_the_mtu_without_df_is_dropped_and_counted() {
    let mut n = dsr_node();
    let client = sa(CLIENT4, 40000);
    n.forward(EXT, &Pkt::tcp(client, sa(IPIP_VIP, 80), SYN).build(), INT);
    // 1480 bytes of IP fit in 1500 with the 20 of the outer header; 1481 do not.
    let fits = Pkt::tcp(client, sa(IPIP_VIP, 80), PSH | ACK)
        .payload(&[7; 1440])
        .build();
    assert_eq!(fits.len() - 14, 1480);
    assert_eq!(n.forward(EXT, &fits, INT).len(), 14 + 1500);
    // Without DF the client's kernel is told nothing (border does not
    // fragment): the packet is dropped and counted.
    let mut big = Pkt::tcp(client, sa(IPIP_VIP, 80), PSH | ACK)
        .payload(&[7; 1441])
        .build();
    big[14 + 6] &= !0x40;
    fix_ipv4_checksum(&mut big);
    n.swallow(EXT, &big);
    assert_eq!(n.drops(), vec![("drop_dsr_too_big", 1)]);
}

#[test]
fn encapsulation_over_the_mtu_tells_the_client_the_mtu_inside_the_tunnel() {
    let mut n = dsr_node();
    let client = sa(CLIENT4, 40001);
    let vip = sa(IPIP_VIP, 80);
    n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT);
    // 1481 bytes of IP with DF: 1501 once encapsulated, one too many for int.
    let big = Pkt::tcp(client, vip, PSH | ACK).payload(&[7; 1441]).build();
    assert_ne!(big[14 + 6] & 0x40, 0, "DF set");
    let out = n.forward(EXT, &big, EXT);
    let icmp = decode_icmp(&out);
    assert_eq!(icmp.kind, (3, 4), "fragmentation needed");
    assert_eq!(
        (icmp.src, icmp.dst),
        (IpAddr::V4(IPIP_VIP), IpAddr::V4(CLIENT4)),
        "from the VIP the client addressed"
    );
    assert_eq!((icmp.smac, icmp.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!((icmp.inner_src, icmp.inner_dst), (client, vip));
    let mtu = u16::from_be_bytes([out[14 + 20 + 6], out[14 + 20 + 7]]);
    assert_eq!(mtu, 1480, "the port's 1500 less the 20 of the outer header");
    assert_eq!(n.counter(Counter::DropDsrTooBig), 1);
    assert_eq!(n.counter(Counter::IcmpTooBigSent), 1);
}

/// An established IPIP flow keeps its tunnel's constants from its first
/// packet: each later packet, whatever its DSCP/ECN and length, still gets
/// an outer header with its own TOS and length and a checksum that
/// verifies, from the flow's one outer source, on the express lane and
/// the general path (a FIN) alike.
#[test]
fn kept_tunnel_follows_each_packets_tos_and_length() {
    let mut n = dsr_node();
    let client = sa(CLIENT4, 41000);
    let vip = sa(IPIP_VIP, 80);
    let (src, ..) = outer4(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
    n.forward(EXT, &Pkt::tcp(client, vip, ACK).build(), INT);
    let sizes = [
        (0u8, 0usize),
        (0x02, 1),
        (0x03, 100),
        (0xb8, 1000),
        (0x2a, 7),
    ];
    for (i, (tos, size)) in sizes.into_iter().enumerate() {
        let flags = if i == sizes.len() - 1 {
            FIN | ACK
        } else {
            PSH | ACK
        };
        let mut data = Pkt::tcp(client, vip, flags).payload(&vec![9; size]).build();
        data[15] = tos;
        fix_ipv4_checksum(&mut data);
        let out = n.forward(EXT, &data, INT);
        assert_eq!(out[15], tos, "the packet's own TOS");
        let got = outer4(&out);
        assert_eq!((got.0, got.1, got.2, got.3), (src, TUN_BACKEND, 4, 64));
        assert_eq!(got.4, data[14..].to_vec());
    }
    assert_eq!(n.counter(Counter::DsrForwarded), 2 + sizes.len() as u64);
    assert_eq!(n.drops(), vec![]);
}

/// An edit of the support config: the `int` port's IPv4 subnet a
/// /`prefix`, and the [`DSR_VIPS`] added.
fn dsr_edit(prefix: u8) -> (&'static str, &'static str) {
    const INT_PORT: &str = "addresses = [\"10.2.0.1/24\", \"fd00:2::1/64\"]\nlocal_addresses = [\"10.2.0.1\", \"fd00:2::1\"]\nlocal_port_range = [1024, 32767]\n\n";
    let from = Box::leak(format!("{INT_PORT}[mgmt]\n").into_boxed_str());
    let int = INT_PORT.replace("/24", &format!("/{prefix}"));
    let to = Box::leak(format!("{int}{DSR_VIPS}").into_boxed_str());
    (from, to)
}

/// A DSR flow adopted by the next border-dp works its tunnel's constants
/// out again for that process's ports: the `int` port's subnet went from
/// a /16 to a /24, and the adopted flows' outer sources, spread over the
/// /16 before, are all in the /24 after.
#[test]
fn an_adopted_flow_folds_its_outer_source_into_the_new_subnet() {
    use conf::os::files::Access;
    use dataplane::conntrack::adopt::{layout_words, slot_bytes};
    use dataplane::flows_region::PreviousFlows;
    use dataplane::lb::FlowRec;
    let dir = std::env::temp_dir().join(format!("lb-dsr-adopt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut old = dsr_node_on(Setup {
        edit: Some(dsr_edit(16)),
        flows: Some((dir.join("old"), None)),
        ..Setup::default()
    });
    let ports = 42000..42016u16;
    let mut before = Vec::new();
    for port in ports.clone() {
        let syn = Pkt::tcp(sa(CLIENT4, port), sa(IPIP_VIP, 80), SYN).build();
        before.push(outer4(&old.forward(EXT, &syn, INT)).0);
        let ack = Pkt::tcp(sa(CLIENT4, port), sa(IPIP_VIP, 80), ACK).build();
        old.forward(EXT, &ack, INT);
    }
    assert!(
        before.iter().any(|s| s.octets()[2] != 0),
        "some sources outside 10.2.0.0/24 in the /16: {before:?}"
    );
    drop(old);
    let words = layout_words::<FlowRec>();
    let (prev, refused) = PreviousFlows::open_paths(
        std::iter::once(dir.join("old-0")),
        Access::PRIVATE,
        slot_bytes::<FlowRec>(),
        &words,
    );
    assert!(refused.is_empty(), "{refused:?}");
    let mut new = dsr_node_on(Setup {
        edit: Some(dsr_edit(24)),
        flows: Some((dir.join("new"), Some(std::sync::Arc::new(prev)))),
        ..Setup::default()
    });
    assert_eq!(new.counter(Counter::FlowsAdopted), 16);
    for port in ports {
        let ack = Pkt::tcp(sa(CLIENT4, port), sa(IPIP_VIP, 80), ACK).build();
        let (src, dst, ..) = outer4(&new.forward(EXT, &ack, INT));
        assert_eq!(dst, TUN_BACKEND);
        assert_eq!(&src.octets()[..3], &[10, 2, 0], "{src} in the new /24");
    }
    assert_eq!(
        new.counter(Counter::NewFlows),
        0,
        "the adopted flows went on"
    );
    assert_eq!(new.drops(), vec![]);
    let _ = std::fs::remove_dir_all(&dir);
}
