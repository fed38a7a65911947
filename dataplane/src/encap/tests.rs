//! The outer headers on byte fixtures: lengths, checksums, TTL and hop
//! limit, the GUE header, the inner packet moved unchanged.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;
use crate::wire::checksum;

const MAC: [u8; 12] = [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];

/// An Ethernet frame carrying an IPv4 TCP SYN (client 10.142.0.5:40000 ->
/// VIP 10.143.0.100:80, TTL 63, DSCP 0x28), with `room` spare bytes.
fn v4_frame(room: usize) -> (Vec<u8>, usize) {
    let mut f = MAC.to_vec();
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![
        0x45, 0x28, 0, 40, 0x12, 0x34, 0x40, 0, 63, 6, 0, 0, 10, 142, 0, 5, 10, 143, 0, 100,
    ];
    let sum = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    let len = f.len();
    f.resize(len + room, 0xee);
    (f, len)
}

/// An Ethernet frame carrying an IPv6 UDP datagram (traffic class 0xb8,
/// hop limit 50), with `room` spare bytes.
fn v6_frame(room: usize) -> (Vec<u8>, usize) {
    let mut f = MAC.to_vec();
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x6b, 0x80, 0, 0, 0, 12, 17, 50]);
    f.extend_from_slice(&"fd00:142::5".parse::<Ipv6Addr>().unwrap().octets());
    f.extend_from_slice(&"fd00:143::100".parse::<Ipv6Addr>().unwrap().octets());
    f.extend_from_slice(&[0x9c, 0x40, 0, 53, 0, 12, 0, 0, b'p', b'i', b'n', b'g']);
    let len = f.len();
    f.resize(len + room, 0xee);
    (f, len)
}

fn v4_tunnel(gue: Option<u16>) -> Tunnel {
    Tunnel {
        addrs: OuterAddrs::V4 {
            src: Ipv4Addr::new(10, 144, 0, 77),
            dst: Ipv4Addr::new(10, 144, 0, 11),
        },
        entropy: 0x1234_5678,
        gue,
    }
}

fn v6_tunnel(gue: Option<u16>) -> Tunnel {
    Tunnel {
        addrs: OuterAddrs::V6 {
            src: "fd00:144::77".parse().unwrap(),
            dst: "fd00:144::11".parse().unwrap(),
        },
        entropy: 0xabcd_e123,
        gue,
    }
}

#[test]
fn ipip_v4_outer_header() {
    let (mut f, len) = v4_frame(64);
    let inner = f[14..len].to_vec();
    let n = encapsulate(&mut f, len, 14, &v4_tunnel(None), 1500).unwrap();
    assert_eq!(n, len + 20);
    assert_eq!(&f[..12], &MAC);
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    let o = &f[14..34];
    assert_eq!(o[0], 0x45);
    assert_eq!(o[1], 0x28, "the inner DSCP/ECN");
    assert_eq!(u16::from_be_bytes([o[2], o[3]]) as usize, 20 + inner.len());
    assert_eq!(&o[6..8], &[0x40, 0], "DF, no fragment");
    assert_eq!(o[8], OUTER_TTL);
    assert_eq!(o[9], 4, "IPIP");
    assert_eq!(&o[12..16], &[10, 144, 0, 77]);
    assert_eq!(&o[16..20], &[10, 144, 0, 11]);
    assert!(checksum::verify(o), "outer header checksum");
    assert_eq!(&f[34..n], &inner[..], "inner packet unchanged, TTL 63 kept");
}

#[test]
fn gue_v4_outer_headers() {
    let (mut f, len) = v4_frame(64);
    let inner = f[14..len].to_vec();
    let n = encapsulate(&mut f, len, 14, &v4_tunnel(Some(6080)), 1500).unwrap();
    assert_eq!(n, len + 32);
    let o = &f[14..34];
    assert_eq!(o[9], 17, "UDP");
    assert_eq!(u16::from_be_bytes([o[2], o[3]]) as usize, 32 + inner.len());
    assert!(checksum::verify(o));
    let udp = &f[34..42];
    assert_eq!(
        u16::from_be_bytes([udp[0], udp[1]]),
        gue_source_port(0x1234_5678)
    );
    assert!(u16::from_be_bytes([udp[0], udp[1]]) >= 49152);
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 6080);
    assert_eq!(
        u16::from_be_bytes([udp[4], udp[5]]) as usize,
        12 + inner.len()
    );
    assert_eq!(&udp[6..8], &[0, 0], "no UDP checksum");
    assert_eq!(
        &f[42..46],
        &[0, 4, 0, 0],
        "GUE v0, hlen 0, proto IPv4, no flags"
    );
    assert_eq!(&f[46..n], &inner[..]);
}

#[test]
fn ip6ip6_outer_header() {
    let (mut f, len) = v6_frame(64);
    let inner = f[14..len].to_vec();
    let n = encapsulate(&mut f, len, 14, &v6_tunnel(None), 1500).unwrap();
    assert_eq!(n, len + 40);
    assert_eq!(&f[12..14], &[0x86, 0xdd]);
    let o = &f[14..54];
    let word = u32::from_be_bytes([o[0], o[1], o[2], o[3]]);
    assert_eq!(word >> 28, 6);
    assert_eq!((word >> 20) & 0xff, 0xb8, "the inner traffic class");
    assert_eq!(word & 0xfffff, 0xde123, "flow label from the entropy");
    assert_eq!(u16::from_be_bytes([o[4], o[5]]) as usize, inner.len());
    assert_eq!(o[6], 41, "IPv6 in IPv6");
    assert_eq!(o[7], OUTER_TTL);
    assert_eq!(
        &o[8..24],
        &"fd00:144::77".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(
        &o[24..40],
        &"fd00:144::11".parse::<Ipv6Addr>().unwrap().octets()
    );
    assert_eq!(&f[54..n], &inner[..], "inner hop limit 50 kept");
}

#[test]
fn gue_v6_and_4in6() {
    let (mut f, len) = v4_frame(64);
    let inner = f[14..len].to_vec();
    let n = encapsulate(&mut f, len, 14, &v6_tunnel(Some(6080)), 1500).unwrap();
    assert_eq!(n, len + 52);
    assert_eq!(&f[12..14], &[0x86, 0xdd]);
    assert_eq!(f[14 + 6], 17);
    assert_eq!(
        u16::from_be_bytes([f[18], f[19]]) as usize,
        12 + inner.len()
    );
    assert_eq!(
        (u32::from_be_bytes([f[14], f[15], f[16], f[17]]) >> 20) & 0xff,
        0x28
    );
    assert_eq!(&f[54 + 8..54 + 12], &[0, 4, 0, 0], "GUE carries IPv4");
    assert_eq!(&f[66..n], &inner[..]);
}

#[test]
fn vlan_tag_kept() {
    let (plain, len) = v4_frame(64);
    let mut f = plain[..12].to_vec();
    f.extend_from_slice(&[0x81, 0x00, 0, 7]);
    f.extend_from_slice(&plain[12..]);
    let n = encapsulate(&mut f, len + 4, 18, &v4_tunnel(None), 1500).unwrap();
    assert_eq!(&f[12..18], &[0x81, 0x00, 0, 7, 0x08, 0x00]);
    assert_eq!(&f[18 + 20..n], &plain[14..len]);
}

#[test]
fn mtu_and_room_are_refused_untouched() {
    let (mut f, len) = v4_frame(64);
    let before = f.clone();
    // 40 inner bytes + 20 = 60: an MTU of 59 is one short.
    assert_eq!(
        encapsulate(&mut f, len, 14, &v4_tunnel(None), 59),
        Err(EncapError::TooBig)
    );
    assert_eq!(
        encapsulate(&mut f, len, 14, &v4_tunnel(None), 60),
        Ok(len + 20)
    );
    let (mut g, len) = v4_frame(19);
    assert_eq!(
        encapsulate(&mut g, len, 14, &v4_tunnel(None), 1500),
        Err(EncapError::NoRoom)
    );
    let mut h = before.clone();
    h[14] = 0x55;
    assert_eq!(
        encapsulate(&mut h, len, 14, &v4_tunnel(None), 1500),
        Err(EncapError::NotIp)
    );
    assert_eq!(h[15..], before[15..], "a refused frame is unchanged");
}

#[test]
fn outer_sources_stay_in_the_subnet() {
    let net = Ipv4Addr::new(10, 144, 0, 0);
    let backend = Ipv4Addr::new(10, 144, 0, 11);
    let mut seen = std::collections::HashSet::new();
    for port in 1000..1400u16 {
        let mut client = [0u8; 16];
        client[10..12].copy_from_slice(&[0xff, 0xff]);
        client[12..].copy_from_slice(&[10, 142, 0, 5]);
        let a = outer_source_v4(net, 24, flow_entropy(&client, port), backend);
        let o = a.octets();
        assert_eq!(&o[..3], &[10, 144, 0]);
        assert!(o[3] != 0 && o[3] != 255 && a != backend, "{a}");
        seen.insert(a);
    }
    assert!(
        seen.len() > 150,
        "flows spread over the subnet: {}",
        seen.len()
    );
    assert_eq!(
        outer_source_v4(net, 24, 11, backend),
        Ipv4Addr::new(10, 144, 0, 10)
    );
    assert_eq!(
        outer_source_v4(Ipv4Addr::new(10, 144, 0, 1), 32, 7, backend),
        Ipv4Addr::new(10, 144, 0, 1)
    );
    let net6: Ipv6Addr = "fd00:144::".parse().unwrap();
    let a = outer_source_v6(net6, 64, 0xdead_beef, "fd00:144::11".parse().unwrap());
    assert_eq!(a, "fd00:144::dead:beef".parse::<Ipv6Addr>().unwrap());
    assert_eq!(flow_entropy(&[1; 16], 5), flow_entropy(&[1; 16], 5));
    assert_ne!(flow_entropy(&[1; 16], 5), flow_entropy(&[1; 16], 6));
}
