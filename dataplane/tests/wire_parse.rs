//! parse_frame and the views on byte fixtures: offsets, fields, and one
//! fixture per `Malformed` reason.

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use dataplane::wire::checksum;
use dataplane::wire::icmpv4::Icmpv4Packet;
use dataplane::wire::icmpv6::{Icmpv6Packet, NdOption};
use dataplane::wire::ip_proto;
use dataplane::wire::tcp::{TcpOption, TcpOptions};
use dataplane::wire::{
    parse_frame, parse_frame_with, tcp_flags_valid, EthernetFrame, Fragment, Ipv4Packet,
    Ipv6Packet, L3Kind, Malformed, ParseOptions, Ports, TcpFlags, TcpPacket, UdpPacket, WireError,
};
use etherparse::{PacketBuilder, TcpOptionElement, VlanId};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const V4_A: [u8; 4] = [192, 0, 2, 1];
const V4_B: [u8; 4] = [198, 51, 100, 7];
const V6_A: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_B: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

// ---- hand-built frames -------------------------------------------------

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC_B);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// IPv4 header (no options) with a correct checksum.
fn v4_header(proto: u8, payload_len: usize, frag: u16) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + payload_len) as u16).to_be_bytes());
    h[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&V4_A);
    h[16..20].copy_from_slice(&V4_B);
    let c = checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

fn v4_frame(proto: u8, l4: &[u8]) -> Vec<u8> {
    v4_frame_frag(proto, l4, 0)
}

fn v4_frame_frag(proto: u8, l4: &[u8], frag: u16) -> Vec<u8> {
    let mut f = eth(0x0800);
    f.extend_from_slice(&v4_header(proto, l4.len(), frag));
    f.extend_from_slice(l4);
    f
}

fn v6_frame(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, 64]);
    f.extend_from_slice(&V6_A);
    f.extend_from_slice(&V6_B);
    f.extend_from_slice(payload);
    f
}

fn ext(next: u8) -> [u8; 8] {
    [next, 0, 0, 0, 0, 0, 0, 0]
}

fn tcp_min(flags: u8) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&1000u16.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[12] = 0x50;
    t[13] = flags;
    t
}

// ---- well-formed fixtures ----------------------------------------------

#[test]
fn tcp_v4_syn_with_options() {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(V4_A, V4_B, 61)
        .tcp(40000, 443, 0xdead_beef, 64240)
        .syn()
        .options(&[
            TcpOptionElement::MaximumSegmentSize(1460),
            TcpOptionElement::SelectiveAcknowledgementPermitted,
            TcpOptionElement::Timestamp(111, 0),
            TcpOptionElement::Noop,
            TcpOptionElement::WindowScale(7),
        ])
        .unwrap();
    let mut f = Vec::new();
    b.write(&mut f, b"hello").unwrap();

    let p = parse_frame(&f).unwrap();
    assert_eq!(p.l3, L3Kind::Ipv4);
    assert_eq!(p.vlan_tci, None);
    assert_eq!((p.l3_offset, p.l3_end), (14, f.len()));
    assert_eq!(p.ttl, 61);
    assert_eq!(p.l4_proto, ip_proto::TCP);
    assert_eq!(p.l4_offset, 34);
    assert_eq!(p.l4_len, f.len() - 34);
    assert_eq!(p.payload_offset, f.len() - 5);
    assert_eq!(p.fragment, Fragment::None);
    assert_eq!(
        p.ports,
        Some(Ports {
            src: 40000,
            dst: 443
        })
    );
    assert_eq!(p.tcp_flags, Some(TcpFlags::SYN));
    assert!(p.tcp_flags_valid);
    assert_eq!(p.icmp, None);

    let ip = Ipv4Packet::new_checked(p.l3_bytes(&f)).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.src_addr(), Ipv4Addr::from(V4_A));
    assert_eq!(ip.dst_addr(), Ipv4Addr::from(V4_B));
    assert!(ip.dont_frag());
    let tcp = TcpPacket::new_checked(p.l4_bytes(&f)).unwrap();
    assert!(tcp.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
    assert_eq!(tcp.seq_number(), 0xdead_beef);
    assert_eq!(tcp.window(), 64240);
    assert_eq!(tcp.payload(), b"hello");
    let opts: Vec<_> = tcp.options_iter().collect::<Result<_, _>>().unwrap();
    // Compare with etherparse's own decoding.
    let (eh, _) = etherparse::TcpHeader::from_slice(p.l4_bytes(&f)).unwrap();
    let theirs: Vec<_> = eh.options_iterator().map(|o| o.unwrap()).collect();
    let ours: Vec<_> = opts
        .iter()
        .filter(|o| !matches!(o, TcpOption::EndOfList))
        .map(|o| match *o {
            TcpOption::Nop => TcpOptionElement::Noop,
            TcpOption::Mss(m) => TcpOptionElement::MaximumSegmentSize(m),
            TcpOption::WindowScale(w) => TcpOptionElement::WindowScale(w),
            TcpOption::SackPermitted => TcpOptionElement::SelectiveAcknowledgementPermitted,
            TcpOption::Timestamps { tsval, tsecr } => TcpOptionElement::Timestamp(tsval, tsecr),
            ref other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(ours, theirs);
}

#[test]
fn udp_v6_vlan_and_padding() {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .single_vlan(VlanId::try_new(100).unwrap())
        .ipv6(V6_A, V6_B, 17)
        .udp(5353, 53);
    let mut f = Vec::new();
    b.write(&mut f, b"q").unwrap();
    let real = f.len();
    f.extend_from_slice(&[0xee; 7]); // trailing junk must be ignored
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.vlan_tci, Some(100));
    assert_eq!(p.l3, L3Kind::Ipv6);
    assert_eq!((p.l3_offset, p.l3_end), (18, real));
    assert_eq!((p.l4_offset, p.l4_len, p.payload_offset), (58, 9, 66));
    assert_eq!(p.ttl, 17);
    assert_eq!(p.ports, Some(Ports { src: 5353, dst: 53 }));
    let e = EthernetFrame::new_checked(&f[..]).unwrap();
    assert_eq!(
        (e.dst(), e.src(), e.vlan_id(), e.ethertype()),
        (MAC_B, MAC_A, Some(100), 0x86dd)
    );
    let ip = Ipv6Packet::new_checked(p.l3_bytes(&f)).unwrap();
    let udp = UdpPacket::new_checked(p.l4_bytes(&f)).unwrap();
    assert!(udp.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr()));
    assert_eq!(udp.payload(), b"q");
}

#[test]
fn v4_padding_is_ignored() {
    let mut f = v4_frame(ip_proto::UDP, &[0, 1, 0, 2, 0, 9, 0, 0, 7]);
    let real = f.len();
    f.resize(60, 0xab);
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.l3_end, real);
    assert_eq!(p.l4_len, 9);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.payload().len(), 9);
}

#[test]
fn v4_fragments() {
    let mut l4 = tcp_min(0x10);
    l4.extend_from_slice(&[0; 12]);
    let first = v4_frame_frag(ip_proto::TCP, &l4, 0x2000); // MF
    let p = parse_frame(&first).unwrap();
    assert_eq!(p.fragment, Fragment::First);
    assert_eq!(p.ports, Some(Ports { src: 1000, dst: 80 }));

    let later = v4_frame_frag(ip_proto::TCP, &[0xff; 3], 0x0003); // offset 24, last
    let p = parse_frame(&later).unwrap();
    assert_eq!(p.fragment, Fragment::NonFirst);
    assert_eq!((p.ports, p.tcp_flags, p.l4_len), (None, None, 3));
    assert_eq!(p.payload_offset, p.l4_offset);
    let ip = Ipv4Packet::new_checked(&later[14..]).unwrap();
    assert_eq!(
        (ip.frag_offset(), ip.more_frags(), ip.is_fragment()),
        (24, false, true)
    );

    // A first UDP fragment may carry a length larger than the fragment.
    let mut udp = vec![0, 1, 0, 2, 0x05, 0xdc, 0, 0];
    udp.extend_from_slice(&[0; 16]);
    assert_eq!(
        parse_frame(&v4_frame_frag(ip_proto::UDP, &udp, 0x2000))
            .unwrap()
            .fragment,
        Fragment::First
    );
    assert_eq!(
        parse_frame(&v4_frame(ip_proto::UDP, &udp)).unwrap_err(),
        Malformed::UdpBadLength
    );
}

#[test]
fn v6_extension_chain() {
    let mut pl = Vec::new();
    pl.extend_from_slice(&ext(ip_proto::IPV6_OPTS)); // hop-by-hop
    pl.extend_from_slice(&[ip_proto::IPV6_FRAG, 1, 0, 0, 0, 0, 0, 0]); // dest opts, 16 bytes
    pl.extend_from_slice(&[0; 8]);
    pl.extend_from_slice(&[ip_proto::TCP, 0, 0, 1, 0, 0, 0, 42]); // fragment: offset 0, M
    let mut t = tcp_min(0x02);
    t.extend_from_slice(&[0; 4]); // 24 bytes: multiple of 8
    pl.extend_from_slice(&t);
    let f = v6_frame(ip_proto::HOPOPT, &pl);
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.l4_proto, ip_proto::TCP);
    assert_eq!(p.l4_offset, 14 + 40 + 32);
    assert_eq!(p.fragment, Fragment::First);
    assert_eq!(p.tcp_flags, Some(TcpFlags::SYN));
    let up = Ipv6Packet::new_checked(&f[14..])
        .unwrap()
        .upper_layer()
        .unwrap();
    assert_eq!(up.ext_headers, 3);
    let fr = up.fragment.unwrap();
    assert_eq!((fr.header_offset, fr.ident, fr.more), (64, 42, true));

    // Non-first fragment: the walk stops after the fragment header.
    let mut pl = vec![ip_proto::TCP, 0, 0, 9, 0, 0, 0, 42]; // offset 8, M
    pl.extend_from_slice(&[0xaa; 16]);
    let p = parse_frame(&v6_frame(ip_proto::IPV6_FRAG, &pl)).unwrap();
    assert_eq!(
        (p.fragment, p.l4_proto, p.l4_offset, p.ports),
        (Fragment::NonFirst, ip_proto::TCP, 62, None)
    );

    // Atomic fragment (offset 0, no M) is a whole packet.
    let mut pl = vec![ip_proto::UDP, 0, 0, 0, 0, 0, 0, 1];
    pl.extend_from_slice(&[0, 1, 0, 2, 0, 8, 0, 0]);
    let p = parse_frame(&v6_frame(ip_proto::IPV6_FRAG, &pl)).unwrap();
    assert_eq!(
        (p.fragment, p.ports),
        (Fragment::None, Some(Ports { src: 1, dst: 2 }))
    );

    // ESP and no-next-header end the walk and are the upper protocol.
    let p = parse_frame(&v6_frame(
        ip_proto::IPV6_OPTS,
        &[&ext(ip_proto::ESP)[..], &[1, 2, 3, 4]].concat(),
    ))
    .unwrap();
    assert_eq!(
        (p.l4_proto, p.l4_offset, p.payload_offset),
        (ip_proto::ESP, 62, 62)
    );
    let p = parse_frame(&v6_frame(ip_proto::IPV6_NONXT, &[])).unwrap();
    assert_eq!((p.l4_proto, p.l4_len), (ip_proto::IPV6_NONXT, 0));

    // AH: (len + 2) * 4 bytes.
    let mut pl = vec![ip_proto::UDP, 4, 0, 0, 0, 0, 0, 0];
    pl.extend_from_slice(&[0; 16]); // AH of 24 bytes
    pl.extend_from_slice(&[0, 7, 0, 8, 0, 8, 0, 0]);
    let p = parse_frame(&v6_frame(ip_proto::AH, &pl)).unwrap();
    assert_eq!(p.ports, Some(Ports { src: 7, dst: 8 }));
}

#[test]
fn icmpv4_frag_needed_embedded_header() {
    // The offending datagram: TCP 198.51.100.7:443 -> 192.0.2.1:40000, 1500 bytes.
    let mut inner = v4_header(ip_proto::TCP, 1480, 0x4000);
    inner[12..16].copy_from_slice(&V4_B);
    inner[16..20].copy_from_slice(&V4_A);
    inner.extend_from_slice(&[0x01, 0xbb, 0x9c, 0x40, 0, 0, 0, 1]);
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78]; // MTU 1400
    icmp.extend_from_slice(&inner);
    let c = checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let f = v4_frame(ip_proto::ICMP, &icmp);
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.icmp, Some((3, 4)));
    assert_eq!(p.payload_offset, p.l4_offset + 8);
    let m = Icmpv4Packet::new_checked(p.l4_bytes(&f)).unwrap();
    assert!(m.verify_checksum() && m.is_error() && m.is_frag_needed());
    assert_eq!(m.next_hop_mtu(), 1400);
    let e = m.embedded_ipv4().unwrap();
    assert_eq!(
        (e.src_addr(), e.dst_addr(), e.protocol(), e.total_len()),
        (Ipv4Addr::from(V4_B), Ipv4Addr::from(V4_A), 6, 1500)
    );
    assert_eq!(
        m.embedded_l4_prefix().unwrap(),
        &[0x01, 0xbb, 0x9c, 0x40, 0, 0, 0, 1]
    );

    // Rewrite the embedded destination through the mutable view.
    let mut f2 = f.clone();
    let (lo, hi) = (p.l4_offset, p.l3_end);
    let mut m = Icmpv4Packet::new_checked(&mut f2[lo..hi]).unwrap();
    m.embedded_ipv4_mut()
        .unwrap()
        .rewrite_dst_addr(Ipv4Addr::new(10, 1, 2, 3));
    m.fill_checksum();
    assert!(m.verify_checksum());
    assert!(m.embedded_ipv4().unwrap().verify_checksum());

    // Echo messages have no embedded datagram.
    let echo = Icmpv4Packet::new_checked(&[8u8, 0, 0, 0, 0, 1, 0, 2][..]).unwrap();
    assert_eq!((echo.echo_ident(), echo.echo_seq()), (1, 2));
    assert_eq!(echo.embedded_ipv4().unwrap_err(), WireError::Unsupported);
}

#[test]
fn icmpv6_packet_too_big_and_nd_options() {
    let mut inner = v6_frame(ip_proto::UDP, &[0; 1200])[14..14 + 48].to_vec();
    inner[4..6].copy_from_slice(&1208u16.to_be_bytes());
    let mut icmp = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
    icmp.extend_from_slice(&inner);
    let f = v6_frame(ip_proto::ICMPV6, &icmp);
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.icmp, Some((2, 0)));
    let m = Icmpv6Packet::new_checked(p.l4_bytes(&f)).unwrap();
    assert_eq!(m.mtu(), 1280);
    let e = m.embedded_ipv6().unwrap();
    assert_eq!(
        (e.payload_len(), e.payload().len(), e.dst_addr()),
        (1208, 8, Ipv6Addr::from(V6_B))
    );

    let mut ns = vec![135, 0, 0, 0, 0, 0, 0, 0];
    ns.extend_from_slice(&V6_B);
    ns.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0, 0xaa, 14, 1, 1, 2, 3, 4, 5, 6]);
    let m = Icmpv6Packet::new_checked(&ns[..]).unwrap();
    assert_eq!(m.nd_target(), Some(Ipv6Addr::from(V6_B)));
    let o: Vec<_> = m.nd_options().collect::<Result<_, _>>().unwrap();
    assert_eq!(o[0], NdOption::SourceLinkAddr([2, 0, 0, 0, 0, 0xaa]));
    assert!(matches!(o[1], NdOption::Other { kind: 14, data } if data.len() == 6));
    ns[25] = 0; // zero-length option
    assert_eq!(m_err(&ns), Some(WireError::BadOption));
    ns[25] = 3; // runs past the end
    assert_eq!(m_err(&ns), Some(WireError::BadOption));
    ns[25] = 2; // SLLA of 16 bytes is not Ethernet
    assert_eq!(m_err(&ns), Some(WireError::BadOption));
}

fn m_err(b: &[u8]) -> Option<WireError> {
    Icmpv6Packet::new_checked(b)
        .unwrap()
        .nd_options()
        .find_map(|o| o.err())
}

#[test]
fn tcp_options_malformed_and_sack() {
    let opts = [1, 1, 5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4];
    let v: Vec<_> = TcpOptions::new(&opts).collect::<Result<_, _>>().unwrap();
    match v[2] {
        TcpOption::Sack(b) => assert_eq!(b.collect::<Vec<_>>(), vec![(1, 2), (3, 4)]),
        ref o => panic!("{o:?}"),
    }
    assert_eq!(
        TcpOptions::new(&[3, 4, 0, 0]).next(),
        Some(Err(WireError::BadOption))
    );
    assert_eq!(
        TcpOptions::new(&[4, 3, 0]).next(),
        Some(Err(WireError::BadOption))
    );
    let mut it = TcpOptions::new(&[2, 9]);
    assert_eq!(it.next(), Some(Err(WireError::BadOption)));
    assert_eq!(it.next(), None);
}

#[test]
fn tcp_flag_sets() {
    let f = |b| tcp_flags_valid(TcpFlags(b));
    for ok in [
        0x02, 0x12, 0x10, 0x18, 0x11, 0x19, 0x04, 0x14, 0xc2, 0x52, 0x30, 0x22,
    ] {
        assert!(f(ok), "{ok:#x} should be valid");
    }
    for bad in [
        0x00, 0x03, 0x13, 0x06, 0x16, 0x01, 0x29, 0x08, 0x05, 0x15, 0x07, 0x3f, 0xff,
    ] {
        assert!(!f(bad), "{bad:#x} should be invalid");
    }
    // Flagged, not rejected, by parse_frame.
    let p = parse_frame(&v4_frame(ip_proto::TCP, &tcp_min(0x03))).unwrap();
    assert_eq!(p.tcp_flags, Some(TcpFlags::SYN | TcpFlags::FIN));
    assert!(!p.tcp_flags_valid);
    let p = parse_frame(&v4_frame(ip_proto::TCP, &tcp_min(0x00))).unwrap();
    assert!(!p.tcp_flags_valid);
}

#[test]
fn arp_and_other_ethertypes() {
    let mut f = eth(0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&V4_A);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&V4_B);
    f.resize(60, 0);
    let p = parse_frame(&f).unwrap();
    assert_eq!((p.l3, p.l3_end, p.l4_len), (L3Kind::Arp, 42, 0));

    let mut lldp = eth(0x88cc);
    lldp.resize(60, 1);
    let p = parse_frame(&lldp).unwrap();
    assert_eq!(
        (p.l3, p.l3_end, p.l4_offset),
        (L3Kind::Other(0x88cc), 60, 60)
    );
}

#[test]
fn checksum_verification_can_be_skipped() {
    let mut f = v4_frame(ip_proto::UDP, &[0, 1, 0, 2, 0, 8, 0, 0]);
    f[24] ^= 0xff;
    assert_eq!(parse_frame(&f).unwrap_err(), Malformed::Ipv4BadChecksum);
    let o = ParseOptions {
        verify_ipv4_checksum: false,
    };
    assert!(parse_frame_with(&f, &o).is_ok());
}

// ---- one fixture per Malformed reason -----------------------------------

fn malformed_fixtures() -> Vec<(Malformed, Vec<u8>)> {
    use Malformed::*;
    let udp8 = [0u8, 1, 0, 2, 0, 8, 0, 0];
    let mut v = Vec::new();

    v.push((TruncatedEthernet, vec![0u8; 13]));
    let mut f = eth(0x8100);
    f.extend_from_slice(&[0, 5, 8]);
    v.push((TruncatedVlan, f));
    let mut f = eth(0x8100);
    f.extend_from_slice(&[0, 5, 0x81, 0x00, 0, 6, 8, 0]);
    f.resize(60, 0);
    v.push((VlanQinq, f.clone()));
    f[12..14].copy_from_slice(&[0x88, 0xa8]);
    v.push((VlanQinq, f));

    let mut f = eth(0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1, 0, 0]);
    v.push((TruncatedArp, f));
    let mut f = eth(0x0806);
    f.extend_from_slice(&[0, 6, 8, 0, 6, 4, 0, 1]);
    f.resize(14 + 28, 0);
    v.push((ArpUnsupported, f));

    let mut f = eth(0x0800);
    f.extend_from_slice(&[0x45; 19]);
    v.push((TruncatedIpv4, f));
    let mut f = v4_frame(ip_proto::UDP, &udp8);
    f[14] = 0x4f; // IHL 15: header beyond the frame
    v.push((TruncatedIpv4, f));
    let mut f = v4_frame(ip_proto::UDP, &udp8);
    f[14] = 0x55;
    v.push((Ipv4BadVersion, f));
    let mut f = v4_frame(ip_proto::UDP, &udp8);
    f[14] = 0x44;
    v.push((Ipv4BadIhl, f));
    let mut f = eth(0x0800);
    f.extend_from_slice(&v4_header(ip_proto::UDP, 100, 0));
    f.extend_from_slice(&udp8);
    v.push((Ipv4BadTotalLength, f));
    let mut f = eth(0x0800);
    let mut h = v4_header(ip_proto::UDP, 0, 0);
    h[2..4].copy_from_slice(&19u16.to_be_bytes());
    f.extend_from_slice(&h);
    v.push((Ipv4BadTotalLength, f));
    let mut f = v4_frame(ip_proto::UDP, &udp8);
    f[14 + 10] ^= 1;
    v.push((Ipv4BadChecksum, f));
    v.push((
        Ipv4BadFragment,
        v4_frame_frag(ip_proto::UDP, &[0; 40], 8189),
    ));

    let mut f = eth(0x86dd);
    f.extend_from_slice(&[0x60; 39]);
    v.push((TruncatedIpv6, f));
    let mut f = v6_frame(ip_proto::UDP, &udp8);
    f[14] = 0x40;
    v.push((Ipv6BadVersion, f));
    let mut f = v6_frame(ip_proto::UDP, &udp8);
    f[14 + 5] = 9;
    v.push((Ipv6BadPayloadLength, f));
    v.push((
        Ipv6TruncatedExtHeader,
        v6_frame(ip_proto::HOPOPT, &[ip_proto::UDP, 1, 0, 0, 0, 0, 0, 0]),
    ));
    v.push((
        Ipv6TruncatedExtHeader,
        v6_frame(ip_proto::IPV6_OPTS, &[ip_proto::UDP, 0, 0]),
    ));
    v.push((
        Ipv6BadExtHeader,
        v6_frame(
            ip_proto::IPV6_OPTS,
            &[&ext(ip_proto::HOPOPT)[..], &ext(ip_proto::UDP)].concat(),
        ),
    ));
    v.push((
        Ipv6BadExtHeader,
        v6_frame(
            ip_proto::IPV6_FRAG,
            &[
                &[ip_proto::IPV6_FRAG, 0, 0, 1, 0, 0, 0, 1][..],
                &[ip_proto::UDP, 0, 0, 1, 0, 0, 0, 1],
                &udp8,
            ]
            .concat(),
        ),
    ));
    let many: Vec<u8> = (0..9)
        .flat_map(|_| ext(ip_proto::IPV6_OPTS))
        .chain(udp8)
        .collect();
    v.push((Ipv6TooManyExtHeaders, v6_frame(ip_proto::IPV6_OPTS, &many)));
    // Non-final fragment of 7 bytes (not a multiple of 8).
    v.push((
        Ipv6BadFragment,
        v6_frame(
            ip_proto::IPV6_FRAG,
            &[&[ip_proto::UDP, 0, 0, 1, 0, 0, 0, 1][..], &[0; 7]].concat(),
        ),
    ));
    // Offset 65528 + 16 bytes > 65535.
    v.push((
        Ipv6BadFragment,
        v6_frame(
            ip_proto::IPV6_FRAG,
            &[&[ip_proto::UDP, 0, 0xff, 0xf8, 0, 0, 0, 1][..], &[0; 16]].concat(),
        ),
    ));

    v.push((TruncatedTcp, v4_frame(ip_proto::TCP, &[0; 19])));
    v.push((TruncatedTcp, v6_frame(ip_proto::TCP, &[0; 10])));
    let mut t = tcp_min(0x02);
    t[12] = 0x40;
    v.push((TcpBadDataOffset, v4_frame(ip_proto::TCP, &t)));
    t[12] = 0x60; // 24-byte header in a 20-byte segment
    v.push((TcpBadDataOffset, v6_frame(ip_proto::TCP, &t)));
    // A first fragment whose TCP header continues in the next fragment.
    t[12] = 0xf0;
    v.push((
        TcpBadDataOffset,
        v4_frame_frag(ip_proto::TCP, &[&t[..], &[0; 4]].concat(), 0x2000),
    ));

    v.push((TruncatedUdp, v4_frame(ip_proto::UDP, &[0; 7])));
    v.push((
        UdpBadLength,
        v4_frame(ip_proto::UDP, &[0, 1, 0, 2, 0, 7, 0, 0]),
    ));
    v.push((
        UdpBadLength,
        v6_frame(ip_proto::UDP, &[0, 1, 0, 2, 0, 9, 0, 0]),
    ));
    v.push((TruncatedIcmpv4, v4_frame(ip_proto::ICMP, &[8, 0, 0, 0])));
    v.push((
        TruncatedIcmpv6,
        v6_frame(ip_proto::ICMPV6, &[128, 0, 0, 0, 0, 0, 0]),
    ));
    v
}

#[test]
fn every_malformed_reason_has_a_fixture() {
    let mut seen = HashSet::new();
    for (want, frame) in malformed_fixtures() {
        assert_eq!(
            parse_frame(&frame),
            Err(want),
            "fixture for {want:?}: {frame:02x?}"
        );
        seen.insert(want);
    }
    for m in Malformed::ALL {
        assert!(seen.contains(m), "no fixture for {m:?}");
    }
}

#[test]
fn counter_names_are_stable_and_unique() {
    let names: Vec<_> = Malformed::ALL.iter().map(|m| m.counter_name()).collect();
    assert_eq!(
        names,
        [
            "truncated_ethernet",
            "truncated_vlan",
            "vlan_qinq",
            "truncated_arp",
            "arp_unsupported",
            "truncated_ipv4",
            "ipv4_bad_version",
            "ipv4_bad_ihl",
            "ipv4_bad_total_length",
            "ipv4_bad_checksum",
            "ipv4_bad_fragment",
            "truncated_ipv6",
            "ipv6_bad_version",
            "ipv6_bad_payload_length",
            "ipv6_truncated_ext_header",
            "ipv6_bad_ext_header",
            "ipv6_too_many_ext_headers",
            "ipv6_bad_fragment",
            "truncated_tcp",
            "tcp_bad_data_offset",
            "truncated_udp",
            "udp_bad_length",
            "truncated_icmpv4",
            "truncated_icmpv6",
        ]
    );
    for (i, m) in Malformed::ALL.iter().enumerate() {
        assert_eq!(m.index(), i);
        assert_eq!(m.to_string(), m.counter_name());
    }
    assert_eq!(Malformed::COUNT, names.len());
}

#[test]
fn every_reason_has_its_own_drop_counter() {
    let mut counters: Vec<_> = Malformed::ALL.iter().map(|m| m.counter()).collect();
    for (m, c) in Malformed::ALL.iter().zip(&counters) {
        assert!(c.is_drop(), "{m:?} counted under {}", c.name());
        assert_eq!(c.name(), format!("drop_{}", m.counter_name()));
        assert_ne!(*c, conf::counters::Counter::DropMalformed, "{m:?}");
    }
    counters.sort_unstable_by_key(|c| c.index());
    counters.dedup();
    assert_eq!(counters.len(), Malformed::COUNT);
}
