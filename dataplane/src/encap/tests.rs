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

/// An outer IPv4 header worked out in full, field by field.
fn full_v4_header(tos: u8, total: u16, proto: u8, src: [u8; 4], dst: [u8; 4]) -> [u8; 20] {
    let t = total.to_be_bytes();
    let mut h = [
        0x45, tos, t[0], t[1], 0, 0, 0x40, 0, OUTER_TTL, proto, 0, 0, src[0], src[1], src[2],
        src[3], dst[0], dst[1], dst[2], dst[3],
    ];
    let sum = checksum::checksum(&h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    h
}

/// What a flow keeps ([`Tunnel::consts`]) gives, for each of its packets
/// whatever their TOS and length, the header worked out in full; packets
/// around the size moved without `memmove`, and a buffer with no byte to
/// spare past the outer headers, arrive unchanged behind it.
#[test]
fn kept_constants_give_the_full_header_for_every_tos_and_length() {
    for gue in [None, Some(6080)] {
        let t = v4_tunnel(gue);
        let c = t.consts();
        let extra = t.overhead();
        let proto = if gue.is_some() { 17 } else { 4 };
        for tos in [0u8, 0x01, 0x03, 0x28, 0xb8, 0xfc, 0xff] {
            for inner_len in (40..=70).chain([1400, 1480 - extra]) {
                for room in [extra, 200] {
                    let (mut f, _) = v4_frame(2000);
                    f[15] = tos;
                    let len = 14 + inner_len;
                    f.truncate(len + room);
                    for (i, b) in f[54..len].iter_mut().enumerate() {
                        *b = i as u8;
                    }
                    let inner = f[14..len].to_vec();
                    let outer = Outer::V4 {
                        dst: [10, 144, 0, 11],
                    };
                    let n = encapsulate_flow(&mut f, len, 14, outer, &c, gue, 1500).unwrap();
                    assert_eq!(n, len + extra);
                    let total = (inner_len + extra) as u16;
                    let want =
                        full_v4_header(tos, total, proto, [10, 144, 0, 77], [10, 144, 0, 11]);
                    assert_eq!(
                        f[14..34],
                        want,
                        "tos {tos:#x}, {inner_len} bytes, gue {gue:?}"
                    );
                    assert_eq!(
                        &f[14 + extra..n],
                        &inner[..],
                        "{inner_len} bytes, room {room}"
                    );
                    if gue.is_some() {
                        let sport = u16::from_be_bytes([f[34], f[35]]);
                        assert_eq!(sport, gue_source_port(t.entropy));
                    }
                }
            }
        }
    }
}

/// Over IPv6 a flow keeps the low 32 bits of its outer source: with the
/// subnet's upper 96 they are the source [`outer_source_v6`] folds, for
/// every prefix length; the flow label is the entropy's, as in full.
#[test]
fn kept_ipv6_source_bits_complete_the_folded_source() {
    let backend: Ipv6Addr = "fd00:144::11".parse().unwrap();
    for (net, prefix) in [
        ("fd00:144::", 64),
        ("fd00:144::", 96),
        ("fd00:144::1:0", 112),
        ("fd00:144::ab00", 120),
        ("fd00:144::7", 127),
        ("fd00:144::7", 128),
    ] {
        let net: Ipv6Addr = net.parse().unwrap();
        for entropy in [0u32, 1, 0x11, 0xdead_beef, u32::MAX] {
            let src = outer_source_v6(net, prefix, entropy, backend);
            let t = Tunnel {
                addrs: OuterAddrs::V6 { src, dst: backend },
                entropy,
                gue: None,
            };
            let c = t.consts();
            let mut whole = [0u8; 16];
            whole[..12].copy_from_slice(&v6_source_high(net, prefix));
            whole[12..].copy_from_slice(&c.src.to_be_bytes());
            assert_eq!(Ipv6Addr::from(whole), src, "{net}/{prefix}, {entropy:#x}");
            let (mut f, len) = v6_frame(64);
            let high = v6_source_high(net, prefix);
            let dst = backend.octets();
            let outer = Outer::V6 { high, dst: &dst };
            encapsulate_flow(&mut f, len, 14, outer, &c, None, 1500).unwrap();
            assert_eq!(&f[22..38], &src.octets());
            let label = u32::from_be_bytes([0, f[15] & 0x0f, f[16], f[17]]);
            assert_eq!(label, entropy & 0xf_ffff);
        }
    }
}

/// The frame `encapsulate` must give, built with etherparse: the
/// Ethernet header with the outer family's ethertype, the outer IPv4 or
/// IPv6 header (TOS or traffic class copied from the inner packet, DF, TTL
/// or hop limit 64, the flow label from the entropy over IPv6), UDP from
/// the GUE source port with no checksum and GUE variant 0 for GUE, and the
/// inner packet as it was.
fn reference(inner: &[u8], t: &Tunnel) -> Vec<u8> {
    use etherparse::{IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, UdpHeader};
    let inner_v4 = inner[0] >> 4 == 4;
    let tos = if inner_v4 {
        inner[1]
    } else {
        (inner[0] << 4) | (inner[1] >> 4)
    };
    let inner_proto = if inner_v4 { 4 } else { 41 };
    let gue_len = if t.gue.is_some() { GUE_HEADERS } else { 0 };
    let next = if t.gue.is_some() { 17 } else { inner_proto };
    let mut f = MAC.to_vec();
    match t.addrs {
        OuterAddrs::V4 { src, dst } => {
            f.extend_from_slice(&[0x08, 0x00]);
            let payload = (gue_len + inner.len()) as u16;
            let mut h =
                Ipv4Header::new(payload, 64, IpNumber(next), src.octets(), dst.octets()).unwrap();
            h.dscp = IpDscp::try_new(tos >> 2).unwrap();
            h.ecn = IpEcn::try_new(tos & 3).unwrap();
            h.dont_fragment = true;
            h.identification = 0;
            h.header_checksum = h.calc_header_checksum();
            f.extend_from_slice(&h.to_bytes());
        }
        OuterAddrs::V6 { src, dst } => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let h = Ipv6Header {
                traffic_class: tos,
                flow_label: Ipv6FlowLabel::try_new(t.entropy & 0xf_ffff).unwrap(),
                payload_length: (gue_len + inner.len()) as u16,
                next_header: IpNumber(next),
                hop_limit: 64,
                source: src.octets(),
                destination: dst.octets(),
            };
            f.extend_from_slice(&h.to_bytes());
        }
    }
    if let Some(port) = t.gue {
        let udp = UdpHeader {
            source_port: 0xc000 | (t.entropy as u16 & 0x3fff),
            destination_port: port,
            length: (GUE_HEADERS + inner.len()) as u16,
            checksum: 0,
        };
        f.extend_from_slice(&udp.to_bytes());
        f.extend_from_slice(&[0, inner_proto, 0, 0]);
    }
    f.extend_from_slice(inner);
    f
}

/// Every encapsulation (IPIP, 6in4, 4in6, IP6IP6, and GUE over IPv4 and
/// IPv6 carrying either family) gives, byte for byte, the frame etherparse
/// builds, for packets moved in one fixed copy and by `memmove`, with
/// spare bytes past the outer headers or none, whatever the TOS.
#[test]
fn every_encapsulation_is_the_reference_frame() {
    let mut cases = 0;
    for inner_v4 in [true, false] {
        for outer_v6 in [false, true] {
            for gue in [None, Some(6080)] {
                let t = if outer_v6 {
                    v6_tunnel(gue)
                } else {
                    v4_tunnel(gue)
                };
                let extra = t.overhead();
                let min = if inner_v4 { 40 } else { 52 };
                for inner_len in [min, 63, 64, 65, 100, 1400] {
                    for tos in [0u8, 0x03, 0xb8, 0xff] {
                        for room in [extra, extra + 100] {
                            let (mut f, _) = if inner_v4 {
                                v4_frame(2000)
                            } else {
                                v6_frame(2000)
                            };
                            if inner_v4 {
                                f[15] = tos;
                            } else {
                                f[14] = 0x60 | (tos >> 4);
                                f[15] = (tos << 4) | (f[15] & 0x0f);
                            }
                            let len = 14 + inner_len;
                            for (i, b) in f[14 + min..len].iter_mut().enumerate() {
                                *b = (i * 7) as u8;
                            }
                            f.truncate(len + room);
                            let want = reference(&f[14..len], &t);
                            let n = encapsulate(&mut f, len, 14, &t, 1500).unwrap();
                            assert_eq!(n, len + extra);
                            assert_eq!(
                                f[..n],
                                want[..],
                                "inner v4 {inner_v4}, outer v6 {outer_v6}, gue {gue:?}, \
                                 {inner_len} bytes, tos {tos:#x}, room {room}"
                            );
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(cases, 2 * 2 * 2 * 6 * 4 * 2);
}
