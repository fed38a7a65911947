//! Slow-path responders: every reply compared byte for byte with a frame
//! built independently by etherparse, every refusal mapped to its named
//! reason, and a no-panic property over random and mutated frames.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use conf::counters::Counter;

use dataplane::slowpath::{
    self, arp, icmpv4, icmpv6, respond, Hearing, Neighbor, Outcome, OwnedFn,
};
use dataplane::wire::checksum;
use dataplane::wire::icmpv6::solicited_node;
use dataplane::wire::{parse_frame, Icmpv4Packet, Icmpv6Packet, Ipv6Packet, L3Kind, Malformed};
use etherparse::icmpv6::NeighborAdvertisementHeader;
use etherparse::{
    ArpEthIpv4Packet, ArpOperation, Icmpv6Type, IpDscp, IpEcn, IpHeaders, IpNumber, Ipv4Header,
    Ipv4Options, PacketBuilder, VlanId,
};
use proptest::prelude::*;

const PORT_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
const BCAST: [u8; 6] = [0xff; 6];
const PORT_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const VIP_V4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);
const PORT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
const VIP_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xfeed, 0, 0, 0, 0, 5);
const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99);

fn owned4(ip: Ipv4Addr) -> bool {
    ip == PORT_V4 || ip == VIP_V4
}

fn owned6(ip: &Ipv6Addr) -> bool {
    *ip == PORT_V6 || *ip == VIP_V6
}

fn client4(heard: Hearing) -> Option<Neighbor<Ipv4Addr>> {
    Some(Neighbor {
        ip: CLIENT_V4,
        mac: CLIENT_MAC,
        heard,
    })
}

fn drop_reason<A>(o: &Outcome<A>) -> Option<&'static str> {
    match o {
        // The reason is the counter it is counted under: `drop_<name>`.
        Outcome::Drop { reason, .. } => reason.name().strip_prefix("drop_"),
        _ => None,
    }
}

/// Pad like a NIC: zeros up to `min` (the expected output of a responder).
fn padded(mut f: Vec<u8>, min: usize) -> Vec<u8> {
    if f.len() < min {
        f.resize(min, 0);
    }
    f
}

/// Pad like a sender that leaks junk into the padding.
fn junk_padded(mut f: Vec<u8>, min: usize) -> Vec<u8> {
    if f.len() < min {
        f.resize(min, 0xa5);
    }
    f
}

// ---- ARP ------------------------------------------------------------------

/// `f` (an untagged Ethernet frame) with an 802.1Q tag of VLAN `vlan`, as
/// etherparse's `single_vlan` writes it, or `f` itself for no VLAN.
fn tagged(vlan: Option<u16>, mut f: Vec<u8>) -> Vec<u8> {
    if let Some(v) = vlan {
        let tci = VlanId::try_new(v).unwrap().value().to_be_bytes();
        f.splice(12..12, [0x81, 0x00, tci[0], tci[1]]);
    }
    f
}

fn arp_frame(
    vlan: Option<u16>,
    dst: [u8; 6],
    op: ArpOperation,
    sha: [u8; 6],
    spa: Ipv4Addr,
    tha: [u8; 6],
    tpa: Ipv4Addr,
) -> Vec<u8> {
    let pkt = ArpEthIpv4Packet {
        operation: op,
        sender_mac: sha,
        sender_ipv4: spa.octets(),
        target_mac: tha,
        target_ipv4: tpa.octets(),
    };
    let mut f = Vec::new();
    PacketBuilder::ethernet2(sha, dst)
        .arp(pkt.into())
        .write(&mut f)
        .unwrap();
    tagged(vlan, f)
}

/// A broadcast ARP message of operation `op` from `sha`/`spa` about the
/// port's address.
fn arp_to_port(op: ArpOperation, sha: [u8; 6], spa: Ipv4Addr) -> Vec<u8> {
    arp_frame(None, BCAST, op, sha, spa, [0; 6], PORT_V4)
}

fn arp_request(vlan: Option<u16>, tpa: Ipv4Addr) -> Vec<u8> {
    arp_frame(
        vlan,
        BCAST,
        ArpOperation::REQUEST,
        CLIENT_MAC,
        CLIENT_V4,
        [0; 6],
        tpa,
    )
}

fn arp_reply_expected(vlan: Option<u16>, spa: Ipv4Addr) -> Vec<u8> {
    // Built from scratch: Ethernet to the requester, op 2.
    arp_frame(
        vlan,
        CLIENT_MAC,
        ArpOperation::REPLY,
        PORT_MAC,
        spa,
        CLIENT_MAC,
        CLIENT_V4,
    )
}

#[test]
fn arp_request_for_owned_addresses_is_answered() {
    for (vlan, min) in [(None, 60), (Some(42), 64)] {
        for ip in [PORT_V4, VIP_V4] {
            let mut buf = junk_padded(arp_request(vlan, ip), min);
            let out = arp(&mut buf, PORT_MAC, owned4);
            assert_eq!(
                out,
                Outcome::Replied {
                    len: min,
                    learn: client4(Hearing::Requester)
                }
            );
            assert_eq!(
                buf,
                padded(arp_reply_expected(vlan, ip), min),
                "vlan {vlan:?} ip {ip}"
            );
        }
    }
    // Unpadded input: the reply is no longer than the request.
    let mut buf = arp_request(None, PORT_V4);
    assert_eq!(buf.len(), 42);
    assert_eq!(
        arp(&mut buf, PORT_MAC, owned4),
        Outcome::Replied {
            len: 42,
            learn: client4(Hearing::Requester)
        }
    );
    assert_eq!(buf, arp_reply_expected(None, PORT_V4));
}

#[test]
fn arp_classification() {
    // Not ours: dropped, sender still reported, buffer untouched.
    let mut buf = junk_padded(arp_request(None, Ipv4Addr::new(192, 0, 2, 1)), 60);
    let orig = buf.clone();
    let out = arp(&mut buf, PORT_MAC, owned4);
    assert_eq!(
        out,
        Outcome::Drop {
            reason: Counter::DropArpNotOurs,
            learn: client4(Hearing::Overheard)
        }
    );
    assert_eq!(drop_reason(&out), Some("arp_not_ours"));
    assert_eq!(buf, orig);

    // Gratuitous announcement and replies: to the kernel twin.
    let mut buf = arp_frame(
        None,
        BCAST,
        ArpOperation::REQUEST,
        CLIENT_MAC,
        CLIENT_V4,
        [0; 6],
        CLIENT_V4,
    );
    assert_eq!(
        arp(&mut buf, PORT_MAC, owned4),
        Outcome::ToHost {
            learn: client4(Hearing::Announcement)
        }
    );
    let mut buf = arp_frame(
        None,
        PORT_MAC,
        ArpOperation::REPLY,
        CLIENT_MAC,
        CLIENT_V4,
        PORT_MAC,
        PORT_V4,
    );
    assert_eq!(
        arp(&mut buf, PORT_MAC, owned4),
        Outcome::ToHost {
            learn: client4(Hearing::Answer)
        }
    );

    // Probe (RFC 5227) for our address: answered, nothing learned.
    let mut buf = arp_to_port(ArpOperation::REQUEST, CLIENT_MAC, Ipv4Addr::UNSPECIFIED);
    let out = arp(&mut buf, PORT_MAC, owned4);
    assert_eq!(
        out,
        Outcome::Replied {
            len: 42,
            learn: None
        }
    );
    assert_eq!(&buf[38..42], &[0, 0, 0, 0]);

    let mut buf = arp_to_port(ArpOperation(3), CLIENT_MAC, CLIENT_V4);
    assert_eq!(
        drop_reason(&arp(&mut buf, PORT_MAC, owned4)),
        Some("arp_bad_op")
    );
    let mut buf = arp_to_port(ArpOperation::REQUEST, BCAST, CLIENT_V4);
    assert_eq!(
        drop_reason(&arp(&mut buf, PORT_MAC, owned4)),
        Some("arp_bad_sender")
    );
    let mut buf = arp_to_port(ArpOperation::REQUEST, CLIENT_MAC, Ipv4Addr::BROADCAST);
    assert_eq!(
        drop_reason(&arp(&mut buf, PORT_MAC, owned4)),
        Some("arp_bad_sender")
    );

    // What each ARP message may teach the neighbour table.
    let other = Ipv4Addr::new(192, 0, 2, 1);
    let cases = [
        // A reply to another host (overheard on a shared segment).
        (ArpOperation::REPLY, other, Hearing::Overheard),
        // A gratuitous reply (sender = target), as VRRP sends them.
        (ArpOperation::REPLY, CLIENT_V4, Hearing::Announcement),
        // A reply to an owned address: it may answer a request of ours.
        (ArpOperation::REPLY, VIP_V4, Hearing::Answer),
    ];
    for (op, target, heard) in cases {
        let mut buf = arp_frame(None, PORT_MAC, op, CLIENT_MAC, CLIENT_V4, PORT_MAC, target);
        assert_eq!(
            arp(&mut buf, PORT_MAC, owned4),
            Outcome::ToHost {
                learn: client4(heard)
            },
            "{op:?} to {target}"
        );
    }
    // Nothing is taken from an ARP message of an unknown operation.
    let mut buf = arp_to_port(ArpOperation(3), CLIENT_MAC, CLIENT_V4);
    assert_eq!(
        arp(&mut buf, PORT_MAC, owned4),
        Outcome::Drop {
            reason: Counter::DropArpBadOp,
            learn: None
        }
    );

    // Wrong protocol, malformed.
    let mut buf = echo4_request(None, PORT_V4, &[]);
    assert_eq!(
        drop_reason(&arp(&mut buf, PORT_MAC, owned4)),
        Some("slowpath_unhandled")
    );
    let mut buf = arp_request(None, PORT_V4);
    buf.truncate(30);
    assert_eq!(
        arp(&mut buf, PORT_MAC, owned4),
        Outcome::Drop {
            reason: Malformed::TruncatedArp.counter(),
            learn: None
        }
    );
}

// ---- ICMPv4 echo ----------------------------------------------------------

fn v4_header(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, ident: u16, opts: &[u8]) -> Ipv4Header {
    let mut h = Ipv4Header::new(0, ttl, IpNumber::ICMP, src.octets(), dst.octets()).unwrap();
    h.identification = ident;
    h.dont_fragment = true;
    h.dscp = IpDscp::try_new(0x0a).unwrap();
    h.ecn = IpEcn::try_new(1).unwrap();
    h.options = Ipv4Options::try_from(opts).unwrap();
    h
}

fn echo4(
    vlan: Option<u16>,
    eth: ([u8; 6], [u8; 6]),
    h: Ipv4Header,
    reply: bool,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    let ip = PacketBuilder::ethernet2(eth.0, eth.1).ip(IpHeaders::Ipv4(h, Default::default()));
    if reply {
        ip.icmpv4_echo_reply(0x4242, 7).write(&mut f, payload)
    } else {
        ip.icmpv4_echo_request(0x4242, 7).write(&mut f, payload)
    }
    .unwrap();
    tagged(vlan, f)
}

fn echo4_request(vlan: Option<u16>, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    echo4(
        vlan,
        (CLIENT_MAC, PORT_MAC),
        v4_header(CLIENT_V4, dst, 57, 0xbeef, &[]),
        false,
        payload,
    )
}

fn echo4_reply_expected(vlan: Option<u16>, src: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    echo4(
        vlan,
        (PORT_MAC, CLIENT_MAC),
        v4_header(src, CLIENT_V4, 64, 0xbeef, &[]),
        true,
        payload,
    )
}

#[test]
fn icmpv4_echo_is_answered_in_place() {
    let payload: Vec<u8> = (0..56u8).collect();
    for vlan in [None, Some(7)] {
        for dst in [PORT_V4, VIP_V4] {
            let mut buf = echo4_request(vlan, dst, &payload);
            let n = buf.len();
            assert_eq!(
                icmpv4(&mut buf, PORT_MAC, owned4),
                Outcome::Replied {
                    len: n,
                    learn: None
                }
            );
            assert_eq!(buf, echo4_reply_expected(vlan, dst, &payload));
        }
    }
    // Tiny echo padded with junk: the reply is padded with zeros.
    for (vlan, min) in [(None, 60), (Some(7), 64)] {
        let mut buf = junk_padded(echo4_request(vlan, PORT_V4, b"ab"), min);
        assert_eq!(
            icmpv4(&mut buf, PORT_MAC, owned4),
            Outcome::Replied {
                len: min,
                learn: None
            }
        );
        assert_eq!(buf, padded(echo4_reply_expected(vlan, PORT_V4, b"ab"), min));
    }
    // IP options are not echoed: the reply is 8 bytes shorter.
    let h = v4_header(
        CLIENT_V4,
        PORT_V4,
        57,
        0xbeef,
        &[0x94, 0x04, 0, 0, 1, 1, 1, 0],
    );
    let mut buf = echo4(None, (CLIENT_MAC, PORT_MAC), h, false, &payload);
    let n = buf.len();
    assert_eq!(
        icmpv4(&mut buf, PORT_MAC, owned4),
        Outcome::Replied {
            len: n - 8,
            learn: None
        }
    );
    assert_eq!(
        &buf[..n - 8],
        &echo4_reply_expected(None, PORT_V4, &payload)[..]
    );
}

#[test]
fn icmpv4_classification() {
    let mut buf = echo4_request(None, Ipv4Addr::new(192, 0, 2, 1), b"x");
    assert_eq!(
        drop_reason(&icmpv4(&mut buf, PORT_MAC, owned4)),
        Some("icmp_not_ours")
    );

    let mut buf = echo4_request(None, PORT_V4, b"abcd");
    let last = buf.len() - 1;
    buf[last] ^= 0x55;
    let orig = buf.clone();
    assert_eq!(
        drop_reason(&icmpv4(&mut buf, PORT_MAC, owned4)),
        Some("icmp_bad_checksum")
    );
    assert_eq!(buf, orig);

    for src in [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::LOCALHOST,
        Ipv4Addr::UNSPECIFIED,
    ] {
        let h = v4_header(src, PORT_V4, 57, 1, &[]);
        let mut buf = echo4(None, (CLIENT_MAC, PORT_MAC), h, false, b"x");
        assert_eq!(
            drop_reason(&icmpv4(&mut buf, PORT_MAC, owned4)),
            Some("icmp_bad_source"),
            "{src}"
        );
    }
    let h = v4_header(CLIENT_V4, PORT_V4, 57, 1, &[]);
    let mut buf = echo4(None, ([0x03, 0, 0, 0, 0, 1], PORT_MAC), h, false, b"x");
    assert_eq!(
        drop_reason(&icmpv4(&mut buf, PORT_MAC, owned4)),
        Some("icmp_bad_source")
    );

    // Echo replies (answers to the kernel's pings) go to the host.
    let h = v4_header(CLIENT_V4, PORT_V4, 57, 1, &[]);
    let mut buf = echo4(None, (CLIENT_MAC, PORT_MAC), h, true, b"x");
    assert_eq!(
        icmpv4(&mut buf, PORT_MAC, owned4),
        Outcome::ToHost { learn: None }
    );

    // Fragments go to the host (it reassembles).
    let mut h = v4_header(CLIENT_V4, PORT_V4, 57, 1, &[]);
    h.more_fragments = true;
    h.dont_fragment = false;
    let mut buf = echo4(None, (CLIENT_MAC, PORT_MAC), h, false, &[0; 16]);
    assert_eq!(
        icmpv4(&mut buf, PORT_MAC, owned4),
        Outcome::ToHost { learn: None }
    );

    // Malformed frames are counted under the parser's reason.
    let mut buf = echo4_request(None, PORT_V4, b"x");
    buf[14 + 10] ^= 1;
    assert_eq!(
        drop_reason(&icmpv4(&mut buf, PORT_MAC, owned4)),
        Some("ipv4_bad_checksum")
    );
}

// ---- ICMPv6 echo ----------------------------------------------------------

fn echo6(
    vlan: Option<u16>,
    eth: ([u8; 6], [u8; 6]),
    ip: (Ipv6Addr, Ipv6Addr, u8),
    reply: bool,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::new();
    let ip = PacketBuilder::ethernet2(eth.0, eth.1).ipv6(ip.0.octets(), ip.1.octets(), ip.2);
    if reply {
        ip.icmpv6_echo_reply(9, 1).write(&mut f, payload)
    } else {
        ip.icmpv6_echo_request(9, 1).write(&mut f, payload)
    }
    .unwrap();
    tagged(vlan, f)
}

/// An untagged echo (or reply, `reply`) from the client's MAC to the
/// port's, hop limit 64.
fn client_echo6(src: Ipv6Addr, dst: Ipv6Addr, reply: bool, payload: &[u8]) -> Vec<u8> {
    echo6(None, (CLIENT_MAC, PORT_MAC), (src, dst, 64), reply, payload)
}

/// Insert an 8-byte destination-options header right after the IPv6 header.
fn with_dest_opts(mut f: Vec<u8>, l3: usize) -> Vec<u8> {
    let next = f[l3 + 6];
    f[l3 + 6] = 60;
    let plen = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) + 8;
    f[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
    let at = l3 + 40;
    f.splice(at..at, [next, 0, 1, 4, 0, 0, 0, 0]);
    f
}

#[test]
fn icmpv6_echo_is_answered_in_place() {
    let payload: Vec<u8> = (0..32u8).collect();
    for vlan in [None, Some(300)] {
        for dst in [PORT_V6, VIP_V6] {
            let mut buf = echo6(
                vlan,
                (CLIENT_MAC, PORT_MAC),
                (CLIENT_V6, dst, 61),
                false,
                &payload,
            );
            let n = buf.len();
            assert_eq!(
                icmpv6(&mut buf, PORT_MAC, owned6),
                Outcome::Replied {
                    len: n,
                    learn: None
                }
            );
            let want = echo6(
                vlan,
                (PORT_MAC, CLIENT_MAC),
                (dst, CLIENT_V6, 64),
                true,
                &payload,
            );
            assert_eq!(buf, want);
        }
    }
    // Extension headers are not copied into the reply.
    let mut buf = with_dest_opts(
        echo6(
            None,
            (CLIENT_MAC, PORT_MAC),
            (CLIENT_V6, PORT_V6, 61),
            false,
            &payload,
        ),
        14,
    );
    assert_eq!(parse_frame(&buf).unwrap().l4_offset, 14 + 48);
    let n = buf.len();
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::Replied {
            len: n - 8,
            learn: None
        }
    );
    let want = echo6(
        None,
        (PORT_MAC, CLIENT_MAC),
        (PORT_V6, CLIENT_V6, 64),
        true,
        &payload,
    );
    assert_eq!(&buf[..n - 8], &want[..]);
}

#[test]
fn icmpv6_classification() {
    let other = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x77);
    let mut buf = client_echo6(CLIENT_V6, other, false, b"x");
    assert_eq!(
        drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
        Some("icmp_not_ours")
    );
    let mut buf = client_echo6(CLIENT_V6, PORT_V6, false, b"x");
    let last = buf.len() - 1;
    buf[last] ^= 1;
    assert_eq!(
        drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
        Some("icmp_bad_checksum")
    );
    let mut buf = client_echo6(Ipv6Addr::UNSPECIFIED, PORT_V6, false, b"x");
    assert_eq!(
        drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
        Some("icmp_bad_source")
    );
    // Echo reply to us, echo to all-nodes: the host's business.
    let mut buf = client_echo6(CLIENT_V6, PORT_V6, true, b"x");
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::ToHost { learn: None }
    );
    let mut buf = client_echo6(CLIENT_V6, slowpath::ALL_NODES, false, b"x");
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::ToHost { learn: None }
    );
}

// ---- NDP ------------------------------------------------------------------

fn nd_frame(
    eth: ([u8; 6], [u8; 6]),
    ip: (Ipv6Addr, Ipv6Addr, u8),
    ty: Icmpv6Type,
    target: Ipv6Addr,
    opts: &[u8],
) -> Vec<u8> {
    let mut body = target.octets().to_vec();
    body.extend_from_slice(opts);
    let mut f = Vec::new();
    PacketBuilder::ethernet2(eth.0, eth.1)
        .ipv6(ip.0.octets(), ip.1.octets(), ip.2)
        .icmpv6(ty)
        .write(&mut f, &body)
        .unwrap();
    f
}

fn slla(mac: [u8; 6]) -> Vec<u8> {
    let mut o = vec![1, 1];
    o.extend_from_slice(&mac);
    o
}

fn na_expected(
    dst_mac: [u8; 6],
    dst: Ipv6Addr,
    target: Ipv6Addr,
    solicited: bool,
    tlla: bool,
) -> Vec<u8> {
    let ty = Icmpv6Type::NeighborAdvertisement(NeighborAdvertisementHeader {
        router: false,
        solicited,
        r#override: true,
    });
    let opts = if tlla {
        vec![2, 1, 0x02, 0, 0, 0, 0, 0x01]
    } else {
        vec![]
    };
    nd_frame((PORT_MAC, dst_mac), (target, dst, 255), ty, target, &opts)
}

fn ns(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, opts: &[u8]) -> Vec<u8> {
    let dst_mac = if dst.is_multicast() {
        dataplane::wire::icmpv6::multicast_mac(&dst)
    } else {
        PORT_MAC
    };
    nd_frame(
        (CLIENT_MAC, dst_mac),
        (src, dst, 255),
        Icmpv6Type::NeighborSolicitation,
        target,
        opts,
    )
}

fn client6(heard: Hearing) -> Option<Neighbor<Ipv6Addr>> {
    Some(Neighbor {
        ip: CLIENT_V6,
        mac: CLIENT_MAC,
        heard,
    })
}

#[test]
fn neighbor_solicitation_is_answered() {
    // Multicast NS with source link-layer option.
    for target in [PORT_V6, VIP_V6] {
        let mut buf = ns(
            CLIENT_V6,
            solicited_node(&target),
            target,
            &slla(CLIENT_MAC),
        );
        let n = buf.len();
        assert_eq!(
            icmpv6(&mut buf, PORT_MAC, owned6),
            Outcome::Replied {
                len: n,
                learn: client6(Hearing::Requester)
            }
        );
        assert_eq!(buf, na_expected(CLIENT_MAC, CLIENT_V6, target, true, true));
    }
    // Unicast NS without options (78 bytes): no room for the TLLA option,
    // which is only a SHOULD for unicast solicitations.
    let mut buf = ns(CLIENT_V6, PORT_V6, PORT_V6, &[]);
    assert_eq!(buf.len(), 78);
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::Replied {
            len: 78,
            learn: None
        }
    );
    assert_eq!(
        buf,
        na_expected(CLIENT_MAC, CLIENT_V6, PORT_V6, true, false)
    );

    // DAD probe (source ::) with a nonce option (RFC 7527, as Linux sends
    // it): answered to all-nodes, S clear, O set.
    let mut buf = ns(
        Ipv6Addr::UNSPECIFIED,
        solicited_node(&PORT_V6),
        PORT_V6,
        &[14, 1, 1, 2, 3, 4, 5, 6],
    );
    let n = buf.len();
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::Replied {
            len: n,
            learn: None
        }
    );
    assert_eq!(
        buf,
        na_expected(
            [0x33, 0x33, 0, 0, 0, 1],
            slowpath::ALL_NODES,
            PORT_V6,
            false,
            true
        )
    );

    // DAD probe without room for the mandatory option: to the host.
    let mut buf = ns(
        Ipv6Addr::UNSPECIFIED,
        solicited_node(&PORT_V6),
        PORT_V6,
        &[],
    );
    let orig = buf.clone();
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::ToHost { learn: None }
    );
    assert_eq!(buf, orig);

    // NS with extra options: the NA is shorter than the NS.
    let mut opts = slla(CLIENT_MAC);
    opts.extend_from_slice(&[14, 1, 9, 9, 9, 9, 9, 9]);
    let mut buf = ns(CLIENT_V6, solicited_node(&VIP_V6), VIP_V6, &opts);
    let n = buf.len();
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::Replied {
            len: n - 8,
            learn: client6(Hearing::Requester)
        }
    );
    assert_eq!(
        &buf[..n - 8],
        &na_expected(CLIENT_MAC, CLIENT_V6, VIP_V6, true, true)[..]
    );
}

#[test]
fn neighbor_discovery_classification() {
    let other = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x77);
    let mut buf = ns(CLIENT_V6, solicited_node(&other), other, &slla(CLIENT_MAC));
    let orig = buf.clone();
    let out = icmpv6(&mut buf, PORT_MAC, owned6);
    assert_eq!(
        out,
        Outcome::Drop {
            reason: Counter::DropNdNotOurs,
            learn: client6(Hearing::Overheard)
        }
    );
    assert_eq!(drop_reason(&out), Some("nd_not_ours"));
    assert_eq!(buf, orig);

    let mut buf = nd_frame(
        (CLIENT_MAC, PORT_MAC),
        (CLIENT_V6, PORT_V6, 64),
        Icmpv6Type::NeighborSolicitation,
        PORT_V6,
        &[],
    );
    assert_eq!(
        drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
        Some("nd_bad_hop_limit")
    );

    let mut buf = ns(CLIENT_V6, PORT_V6, PORT_V6, &slla(CLIENT_MAC));
    let last = buf.len() - 1;
    buf[last] ^= 1;
    assert_eq!(
        drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
        Some("icmp_bad_checksum")
    );

    for bad in [
        ns(CLIENT_V6, PORT_V6, slowpath::ALL_NODES, &[]), // multicast target
        ns(CLIENT_V6, solicited_node(&VIP_V6), PORT_V6, &[]), // wrong solicited-node group
        ns(
            Ipv6Addr::UNSPECIFIED,
            solicited_node(&PORT_V6),
            PORT_V6,
            &slla(CLIENT_MAC),
        ), // DAD with SLLA
        ns(Ipv6Addr::UNSPECIFIED, PORT_V6, PORT_V6, &[]), // DAD to unicast
    ] {
        let mut buf = bad;
        assert_eq!(
            drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
            Some("nd_invalid")
        );
    }
    let mut buf = ns(CLIENT_V6, PORT_V6, PORT_V6, &[1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
        Some("nd_bad_option")
    );

    // An NA for the kernel's own solicitation: to the host, binding learned.
    let na = Icmpv6Type::NeighborAdvertisement(NeighborAdvertisementHeader {
        router: false,
        solicited: true,
        r#override: true,
    });
    let mut buf = nd_frame(
        (CLIENT_MAC, PORT_MAC),
        (CLIENT_V6, PORT_V6, 255),
        na,
        CLIENT_V6,
        &[2, 1, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee],
    );
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::ToHost {
            learn: client6(Hearing::Answer)
        }
    );
    // Unsolicited (to all nodes) or without the override flag: an
    // announcement, which only moves an entry the table has.
    for (dst, solicited, over) in [
        (slowpath::ALL_NODES, false, true),
        (PORT_V6, true, false),
        (PORT_V6, false, true),
    ] {
        let na = Icmpv6Type::NeighborAdvertisement(NeighborAdvertisementHeader {
            router: false,
            solicited,
            r#override: over,
        });
        let mut buf = nd_frame(
            (CLIENT_MAC, PORT_MAC),
            (CLIENT_V6, dst, 255),
            na,
            CLIENT_V6,
            &[2, 1, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee],
        );
        assert_eq!(
            icmpv6(&mut buf, PORT_MAC, owned6),
            Outcome::ToHost {
                learn: client6(Hearing::Announcement)
            },
            "to {dst}, S {solicited}, O {over}"
        );
    }
    // A solicited NA to another host: overheard.
    let mut buf = nd_frame(
        (CLIENT_MAC, PORT_MAC),
        (
            CLIENT_V6,
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x77),
            255,
        ),
        na,
        CLIENT_V6,
        &[2, 1, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee],
    );
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::Drop {
            reason: Counter::DropIcmpNotOurs,
            learn: client6(Hearing::Overheard)
        }
    );
    // Solicited NA to a multicast group is invalid.
    let mut buf = nd_frame(
        (CLIENT_MAC, PORT_MAC),
        (CLIENT_V6, slowpath::ALL_NODES, 255),
        na,
        CLIENT_V6,
        &[],
    );
    assert_eq!(
        drop_reason(&icmpv6(&mut buf, PORT_MAC, owned6)),
        Some("nd_invalid")
    );
    // Router advertisements: to the host.
    let mut buf = nd_frame(
        (CLIENT_MAC, PORT_MAC),
        (CLIENT_V6, slowpath::ALL_NODES, 255),
        Icmpv6Type::RouterSolicitation,
        CLIENT_V6,
        &[],
    );
    assert_eq!(
        icmpv6(&mut buf, PORT_MAC, owned6),
        Outcome::ToHost { learn: None }
    );
}

// ---- dispatcher -----------------------------------------------------------

#[test]
fn respond_dispatches() {
    let owned: Vec<IpAddr> = vec![PORT_V4.into(), VIP_V4.into(), PORT_V6.into()];
    let owned = &owned[..];

    let mut buf = junk_padded(arp_request(None, VIP_V4), 60);
    assert!(matches!(
        respond(&mut buf, PORT_MAC, owned),
        Outcome::Replied {
            len: 60,
            learn: Some(Neighbor {
                ip: IpAddr::V4(_),
                ..
            })
        }
    ));
    let mut buf = echo4_request(None, PORT_V4, b"hi");
    assert!(matches!(
        respond(&mut buf, PORT_MAC, owned),
        Outcome::Replied { .. }
    ));
    let mut buf = echo6(
        None,
        (CLIENT_MAC, PORT_MAC),
        (CLIENT_V6, PORT_V6, 61),
        false,
        b"hi",
    );
    assert!(matches!(
        respond(&mut buf, PORT_MAC, owned),
        Outcome::Replied { .. }
    ));
    // VIP_V6 is not in this list.
    let mut buf = echo6(
        None,
        (CLIENT_MAC, PORT_MAC),
        (CLIENT_V6, VIP_V6, 61),
        false,
        b"hi",
    );
    assert_eq!(
        drop_reason(&respond(&mut buf, PORT_MAC, owned)),
        Some("icmp_not_ours")
    );

    // TCP to a port address (BGP, ssh): to the host; to anything else: not ours.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ipv4(CLIENT_V4.octets(), PORT_V4.octets(), 64)
        .tcp(50000, 179, 1, 1000)
        .syn()
        .write(&mut f, &[])
        .unwrap();
    assert_eq!(
        respond(&mut f.clone(), PORT_MAC, owned),
        Outcome::ToHost { learn: None }
    );
    f[30..34].copy_from_slice(&[192, 0, 2, 1]);
    let c = checksum::checksum(&{
        let mut h = f[14..34].to_vec();
        h[10] = 0;
        h[11] = 0;
        h
    });
    f[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        drop_reason(&respond(&mut f, PORT_MAC, owned)),
        Some("not_local")
    );

    // Other EtherTypes (LLDP): to the host.
    let mut lldp = vec![0u8; 60];
    lldp[12..14].copy_from_slice(&[0x88, 0xcc]);
    assert_eq!(
        respond(&mut lldp, PORT_MAC, owned),
        Outcome::ToHost { learn: None }
    );

    // Closures work too.
    let o = OwnedFn {
        v4: |ip: Ipv4Addr| ip == PORT_V4,
        v6: |_: &Ipv6Addr| false,
    };
    let mut buf = arp_request(None, PORT_V4);
    assert!(matches!(
        respond(&mut buf, PORT_MAC, &o),
        Outcome::Replied { len: 42, .. }
    ));
}

#[test]
fn drop_reason_names_are_stable() {
    // A slow-path drop reason is the counter it is counted under; their
    // names were the reasons' names before (`not_ours` was counted as
    // `drop_not_local`, and now has that name).
    let all = [
        (Counter::DropSlowpathUnhandled, "slowpath_unhandled"),
        (Counter::DropNotLocal, "not_local"),
        (Counter::DropArpNotOurs, "arp_not_ours"),
        (Counter::DropArpBadOp, "arp_bad_op"),
        (Counter::DropArpBadSender, "arp_bad_sender"),
        (Counter::DropIcmpNotOurs, "icmp_not_ours"),
        (Counter::DropIcmpBadChecksum, "icmp_bad_checksum"),
        (Counter::DropIcmpBadSource, "icmp_bad_source"),
        (Counter::DropNdBadHopLimit, "nd_bad_hop_limit"),
        (Counter::DropNdInvalid, "nd_invalid"),
        (Counter::DropNdBadOption, "nd_bad_option"),
        (Counter::DropNdNotOurs, "nd_not_ours"),
        (Malformed::TruncatedUdp.counter(), "truncated_udp"),
    ];
    for (d, name) in all {
        assert_eq!(d.name(), format!("drop_{name}"));
    }
}

// ---- no panics, and replies are always valid frames ------------------------

fn valid_frames() -> Vec<Vec<u8>> {
    let mut v = vec![
        junk_padded(arp_request(None, PORT_V4), 60),
        junk_padded(arp_request(Some(5), VIP_V4), 64),
        echo4_request(None, PORT_V4, &[1; 40]),
        echo4_request(Some(9), VIP_V4, b"ab"),
        echo6(
            None,
            (CLIENT_MAC, PORT_MAC),
            (CLIENT_V6, PORT_V6, 61),
            false,
            &[7; 20],
        ),
        with_dest_opts(
            echo6(
                None,
                (CLIENT_MAC, PORT_MAC),
                (CLIENT_V6, PORT_V6, 61),
                false,
                &[7; 20],
            ),
            14,
        ),
        ns(
            CLIENT_V6,
            solicited_node(&PORT_V6),
            PORT_V6,
            &slla(CLIENT_MAC),
        ),
        ns(
            Ipv6Addr::UNSPECIFIED,
            solicited_node(&PORT_V6),
            PORT_V6,
            &[14, 1, 1, 2, 3, 4, 5, 6],
        ),
        ns(CLIENT_V6, PORT_V6, PORT_V6, &[]),
    ];
    let h = v4_header(CLIENT_V4, PORT_V4, 57, 0xbeef, &[1, 1, 1, 0]);
    v.push(echo4(None, (CLIENT_MAC, PORT_MAC), h, false, &[3; 9]));
    let mut f = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ipv4(CLIENT_V4.octets(), PORT_V4.octets(), 64)
        .tcp(1, 2, 3, 4)
        .syn()
        .write(&mut f, b"data")
        .unwrap();
    v.push(f);
    let mut f = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC)
        .ipv6(CLIENT_V6.octets(), PORT_V6.octets(), 64)
        .udp(1, 2)
        .write(&mut f, b"data")
        .unwrap();
    v.push(f);
    v
}

/// A reply must parse, carry valid checksums, and fit in the input.
fn check_reply(buf: &[u8], len: usize, input_len: usize) -> Result<(), TestCaseError> {
    prop_assert!(len <= input_len);
    let f = &buf[..len];
    let p =
        parse_frame(f).map_err(|m| TestCaseError::fail(format!("reply does not parse: {m}")))?;
    match p.l3 {
        L3Kind::Arp => {}
        L3Kind::Ipv4 => {
            let m = Icmpv4Packet::new_checked(p.l4_bytes(f)).unwrap();
            prop_assert!(m.verify_checksum());
            prop_assert_eq!(p.ttl, 64);
        }
        L3Kind::Ipv6 => {
            let ip = Ipv6Packet::new_checked(p.l3_bytes(f)).unwrap();
            let m = Icmpv6Packet::new_checked(p.l4_bytes(f)).unwrap();
            prop_assert!(m.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
        }
        L3Kind::Other(_) => prop_assert!(false, "reply of unknown kind"),
    }
    prop_assert_eq!(&f[6..12], &PORT_MAC[..]);
    Ok(())
}

type Run<'a> = &'a dyn Fn(&mut [u8]) -> Outcome<IpAddr>;

fn run_all(frame: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(p) = parse_frame(frame) {
        // Whatever parse_frame returns lies within the frame, in order.
        prop_assert!(p.l3_offset == 14 || p.l3_offset == 18);
        prop_assert!(p.l3_offset <= p.l4_offset);
        prop_assert!(p.l4_offset <= p.payload_offset);
        prop_assert!(p.payload_offset <= p.l3_end);
        prop_assert_eq!(p.l4_offset + p.l4_len, p.l3_end);
        prop_assert!(p.l3_end <= frame.len());
        if p.fragment == dataplane::wire::Fragment::NonFirst {
            prop_assert!(p.ports.is_none() && p.tcp_flags.is_none());
        }
    }
    let everything = OwnedFn {
        v4: |_: Ipv4Addr| true,
        v6: |_: &Ipv6Addr| true,
    };
    let ours = OwnedFn {
        v4: owned4,
        v6: owned6,
    };
    let runs: [Run<'_>; 8] = [
        &|b| respond(b, PORT_MAC, &everything),
        &|b| respond(b, PORT_MAC, &ours),
        &|b| arp(b, PORT_MAC, |_| true).map_addr(IpAddr::V4),
        &|b| arp(b, PORT_MAC, owned4).map_addr(IpAddr::V4),
        &|b| icmpv4(b, PORT_MAC, |_| true).map_addr(IpAddr::V4),
        &|b| icmpv4(b, PORT_MAC, owned4).map_addr(IpAddr::V4),
        &|b| icmpv6(b, PORT_MAC, |_| true).map_addr(IpAddr::V6),
        &|b| icmpv6(b, PORT_MAC, owned6).map_addr(IpAddr::V6),
    ];
    for run in runs {
        let mut buf = frame.to_vec();
        match run(&mut buf) {
            Outcome::Replied { len, .. } => check_reply(&buf, len, frame.len())?,
            // Refusals never touch the buffer.
            _ => prop_assert_eq!(&buf[..], frame),
        }
    }
    Ok(())
}

#[test]
fn valid_fixtures_get_valid_replies() {
    let everything = OwnedFn {
        v4: |_: Ipv4Addr| true,
        v6: |_: &Ipv6Addr| true,
    };
    let frames = valid_frames();
    for (i, f) in frames.iter().enumerate() {
        run_all(f).unwrap();
        let out = respond(&mut f.clone(), PORT_MAC, &everything);
        // All but the trailing TCP and UDP frames are answered.
        let replied = matches!(out, Outcome::Replied { .. });
        assert_eq!(replied, i < frames.len() - 2, "frame {i}: {out:?}");
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(prop::sample::Index, u8),
    Set(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Extend(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), 1..=255u8).prop_map(|(i, x)| Mutation::Flip(i, x)),
        4 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, x)| Mutation::Set(i, x)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..160)) {
        run_all(&frame)?;
    }

    #[test]
    fn random_bytes_with_plausible_headers_never_panic(
        et in prop::sample::select(vec![0x0800u16, 0x86dd, 0x0806, 0x8100]),
        first in any::<u8>(),
        next in prop::sample::select(vec![0u8, 1, 6, 17, 43, 44, 50, 51, 58, 59, 60, 135]),
        rest in proptest::collection::vec(any::<u8>(), 0..140),
    ) {
        let mut f = vec![0u8; 14];
        f[0..6].copy_from_slice(&PORT_MAC);
        f[6..12].copy_from_slice(&CLIENT_MAC);
        f[12..14].copy_from_slice(&et.to_be_bytes());
        f.push(if et == 0x86dd { 0x60 | (first & 0xf) } else { 0x40 | (first & 0xf) });
        f.extend_from_slice(&rest);
        if f.len() > 23 {
            f[20] = next; // IPv6 next header
            f[23] = next; // IPv4 protocol
        }
        // Make IPv4 headers consistent often enough to reach L4 and the
        // responders: total length = what is there, valid checksum.
        let hl = usize::from(f.get(14).copied().unwrap_or(0) & 0xf) * 4;
        if et == 0x0800 && hl >= 20 && 14 + hl <= f.len() {
            let total = (f.len() - 14) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            f[24] = 0;
            f[25] = 0;
            let c = checksum::checksum(&f[14..14 + hl]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        if et == 0x86dd && f.len() >= 54 {
            let plen = (f.len() - 54) as u16;
            f[18..20].copy_from_slice(&plen.to_be_bytes());
        }
        run_all(&f)?;
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        which in any::<prop::sample::Index>(),
        muts in proptest::collection::vec(mutation(), 1..6),
    ) {
        let frames = valid_frames();
        let mut f = frames[which.index(frames.len())].clone();
        for m in muts {
            match m {
                Mutation::Flip(i, x) if !f.is_empty() => { let i = i.index(f.len()); f[i] ^= x; }
                Mutation::Set(i, x) if !f.is_empty() => { let i = i.index(f.len()); f[i] = x; }
                Mutation::Truncate(i) => { let n = i.index(f.len() + 1); f.truncate(n); }
                Mutation::Extend(b) => f.extend_from_slice(&b),
                _ => {}
            }
        }
        run_all(&f)?;
    }

    /// The `*_parsed` entry points with a `Parsed` that does not describe
    /// the buffer (another frame's, or made up) refuse instead of panicking.
    #[test]
    fn mismatched_parsed_never_panics(
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
        offs in proptest::collection::vec(0usize..140, 4),
        l4_proto in prop::sample::select(vec![1u8, 6, 17, 58]),
        kind in 0u8..4,
    ) {
        let frames = valid_frames();
        let fa = &frames[a.index(frames.len())];
        let fb = &frames[b.index(frames.len())];
        let mut p = parse_frame(fb).unwrap();
        check_mismatch(fa, &p)?;
        p.l3 = [L3Kind::Arp, L3Kind::Ipv4, L3Kind::Ipv6, L3Kind::Other(0)][usize::from(kind)];
        p.l4_proto = l4_proto;
        p.l3_offset = offs[0];
        p.l4_offset = offs[1];
        p.l3_end = offs[2];
        p.l4_len = offs[3];
        check_mismatch(fa, &p)?;
        p.l4_len = p.l3_end.saturating_sub(p.l4_offset);
        check_mismatch(fa, &p)?;
    }
}

fn check_mismatch(frame: &[u8], p: &dataplane::wire::Parsed) -> Result<(), TestCaseError> {
    let everything = OwnedFn {
        v4: |_: Ipv4Addr| true,
        v6: |_: &Ipv6Addr| true,
    };
    let mut buf = frame.to_vec();
    if let Outcome::Replied { len, .. } =
        slowpath::respond_parsed(&mut buf, p, PORT_MAC, &everything)
    {
        prop_assert!(len <= frame.len());
    }
    let mut buf = frame.to_vec();
    let _ = slowpath::arp_parsed(&mut buf, p, PORT_MAC, |_| true);
    let mut buf = frame.to_vec();
    let _ = slowpath::icmpv4_parsed(&mut buf, p, PORT_MAC, |_| true);
    let mut buf = frame.to_vec();
    let _ = slowpath::icmpv6_parsed(&mut buf, p, PORT_MAC, |_| true);
    let _ = (p.l3_bytes(frame), p.l4_bytes(frame));
    Ok(())
}
