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
    let mut n = Setup {
        edit: Some(("[mgmt]\n", DSR_VIPS)),
        ..Setup::default()
    }
    .node();
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
