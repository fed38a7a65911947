//! ICMP "fragmentation needed" (IPv4, RFC 1191) and ICMPv6 "packet too
//! big" (RFC 8201) toward the sender of a packet longer than the MTU of the
//! port it would leave by: written over the packet's own frame, in place,
//! so nothing allocates. The quoted packet is the one the sender sent
//! (before any translation): its kernel matches the quote to its socket
//! and lowers the path MTU.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::checksum;
use crate::wire::ip_proto;

/// Most of the original packet an ICMPv4 error quotes: the whole error
/// stays within 576 bytes (RFC 1812 §4.3.2.3).
const V4_QUOTE: usize = 576 - 20 - 8;
/// Most of the original packet an ICMPv6 error quotes: the whole error
/// stays within the minimum IPv6 MTU, 1280 bytes (RFC 4443 §2.4).
const V6_QUOTE: usize = 1280 - 40 - 8;
/// Hop limit of the errors.
const TTL: u8 = 64;

/// Rewrites the frame `buf[..len]`, an IP packet at `l3` (after the
/// Ethernet header and any VLAN tags, which stay) too long for `mtu`, into
/// the ICMP error that tells its sender so, from `from` (an address of the
/// port it came in by, of the packet's family) and `mac` (that port's
/// MAC), back to the sender's MAC. Returns the error's frame length (never
/// longer than `len`), or None when no error may be sent: an IPv4 packet
/// without DF (it may be fragmented, border does not), a fragment other
/// than the first, an ICMP error itself, a sender that is no unicast
/// host, or a layout that does not hold together.
pub fn answer_too_big(
    buf: &mut [u8],
    len: usize,
    l3: usize,
    mtu: u16,
    from: IpAddr,
    mac: [u8; 6],
) -> Option<usize> {
    let frame = buf.get_mut(..len)?;
    if l3 < 14 || frame.len() < l3 + 40 {
        return None;
    }
    let n = match (frame[l3] >> 4, from) {
        (4, IpAddr::V4(from)) => frag_needed_v4(frame, l3, mtu, from)?,
        (6, IpAddr::V6(from)) => too_big_v6(frame, l3, mtu, from)?,
        _ => return None,
    };
    // Back to the sender: its MAC becomes the destination.
    frame.copy_within(6..12, 0);
    frame[6..12].copy_from_slice(&mac);
    Some(l3 + n)
}

/// The ICMPv4 error over `frame[l3..]`; returns its IP length.
fn frag_needed_v4(frame: &mut [u8], l3: usize, mtu: u16, from: Ipv4Addr) -> Option<usize> {
    let ip = &frame[l3..];
    let ihl = usize::from(ip[0] & 0x0F) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let flags_frag = u16::from_be_bytes([ip[6], ip[7]]);
    let dont_fragment = flags_frag & 0x4000 != 0;
    let first_fragment = flags_frag & 0x1FFF == 0;
    if ihl < 20 || total < ihl + 8 || total > ip.len() || !dont_fragment || !first_fragment {
        return None;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    if src.is_unspecified() || src.is_broadcast() || src.is_multicast() || src.is_loopback() {
        return None;
    }
    if ip[9] == ip_proto::ICMP {
        // Type 3/4/5/11/12: errors are never answered with errors.
        if matches!(ip.get(ihl), Some(3 | 4 | 5 | 11 | 12) | None) {
            return None;
        }
    }
    let quote = total.min(V4_QUOTE);
    // The quote moves 28 bytes on, behind the new IP and ICMP headers.
    frame.copy_within(l3..l3 + quote, l3 + 28);
    let len = 28 + quote;
    let h = &mut frame[l3..l3 + len];
    h[..12].copy_from_slice(&[
        0x45,
        0,
        (len >> 8) as u8,
        len as u8,
        0,
        0,
        0,
        0,
        TTL,
        ip_proto::ICMP,
        0,
        0,
    ]);
    h[12..16].copy_from_slice(&from.octets());
    h[16..20].copy_from_slice(&src.octets());
    let hc = checksum::checksum(&h[..20]);
    h[10..12].copy_from_slice(&hc.to_be_bytes());
    h[20..28].copy_from_slice(&[3, 4, 0, 0, 0, 0, (mtu >> 8) as u8, mtu as u8]);
    let ic = checksum::checksum(&h[20..]);
    h[22..24].copy_from_slice(&ic.to_be_bytes());
    Some(len)
}

/// The ICMPv6 error over `frame[l3..]`; returns its IP length.
fn too_big_v6(frame: &mut [u8], l3: usize, mtu: u16, from: Ipv6Addr) -> Option<usize> {
    let ip = &frame[l3..];
    let total = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    if total > ip.len() {
        return None;
    }
    let mut s = [0u8; 16];
    s.copy_from_slice(&ip[8..24]);
    let src = Ipv6Addr::from(s);
    if src.is_unspecified() || src.is_multicast() || src.is_loopback() {
        return None;
    }
    // An ICMPv6 error (types below 128) right after the header is never
    // answered (one behind extension headers is quoted like any packet).
    if ip[6] == ip_proto::ICMPV6 && ip.get(40).is_none_or(|&t| t < 128) {
        return None;
    }
    let quote = total.min(V6_QUOTE);
    frame.copy_within(l3..l3 + quote, l3 + 48);
    let len = 48 + quote;
    let h = &mut frame[l3..l3 + len];
    let plen = (len - 40) as u16;
    h[..8].copy_from_slice(&[
        0x60,
        0,
        0,
        0,
        (plen >> 8) as u8,
        plen as u8,
        ip_proto::ICMPV6,
        TTL,
    ]);
    h[8..24].copy_from_slice(&from.octets());
    h[24..40].copy_from_slice(&src.octets());
    let m = u32::from(mtu).to_be_bytes();
    h[40..48].copy_from_slice(&[2, 0, 0, 0, m[0], m[1], m[2], m[3]]);
    let c = checksum::l4_checksum_v6(&from, &src, ip_proto::ICMPV6, &h[40..]);
    h[42..44].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{
        Icmpv4Type, Icmpv6Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice,
    };

    const PORT_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 9, 9];

    fn tcp4(payload: usize, df: bool) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ethernet2(PEER_MAC, PORT_MAC)
            .ipv4([10, 0, 0, 2], [10, 0, 0, 100], 64)
            .tcp(40000, 80, 1, 64240)
            .write(&mut out, &vec![0xab; payload])
            .unwrap();
        if !df {
            out[20] &= !0x40;
            let c = checksum::checksum(&{
                let mut h = out[14..34].to_vec();
                h[10] = 0;
                h[11] = 0;
                h
            });
            out[24..26].copy_from_slice(&c.to_be_bytes());
        }
        out
    }

    fn tcp6(payload: usize) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ethernet2(PEER_MAC, PORT_MAC)
            .ipv6(
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets(),
                Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100).octets(),
                64,
            )
            .tcp(40000, 80, 1, 64240)
            .write(&mut out, &vec![0xcd; payload])
            .unwrap();
        out
    }

    #[test]
    fn frag_needed_quotes_the_packet_as_sent_with_the_next_hop_mtu() {
        let mut f = tcp4(8000, true);
        let orig = f.clone();
        let len = f.len();
        let n = answer_too_big(
            &mut f,
            len,
            14,
            1500,
            Ipv4Addr::new(10, 0, 0, 1).into(),
            PORT_MAC,
        )
        .expect("answered");
        assert_eq!(n, 14 + 576, "capped at 576 bytes of IP");
        let p = SlicedPacket::from_ethernet(&f[..n]).expect("parses");
        let Some(NetSlice::Ipv4(ip)) = &p.net else {
            panic!()
        };
        let h = ip.header();
        assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
        assert_eq!(h.source_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(h.destination_addr(), Ipv4Addr::new(10, 0, 0, 2));
        let Some(TransportSlice::Icmpv4(m)) = &p.transport else {
            panic!()
        };
        assert_eq!(
            m.icmp_type(),
            Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: 1500
                }
            )
        );
        assert!(checksum::verify(&f[14 + 20..n]), "ICMP checksum");
        assert_eq!(m.payload(), &orig[14..14 + 548], "the sender's own bytes");
        assert_eq!(&f[..6], &PEER_MAC);
        assert_eq!(&f[6..12], &PORT_MAC);
    }

    #[test]
    fn packet_too_big_quotes_up_to_1280_bytes() {
        let mut f = tcp6(8000);
        let orig = f.clone();
        let len = f.len();
        let from: Ipv6Addr = "fd00::1".parse().unwrap();
        let n = answer_too_big(&mut f, len, 14, 1500, from.into(), PORT_MAC).expect("answered");
        assert_eq!(n, 14 + 1280);
        let p = SlicedPacket::from_ethernet(&f[..n]).expect("parses");
        let Some(TransportSlice::Icmpv6(m)) = &p.transport else {
            panic!()
        };
        assert_eq!(m.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1500 });
        let Some(NetSlice::Ipv6(ip)) = &p.net else {
            panic!()
        };
        let (s, d) = (ip.header().source_addr(), ip.header().destination_addr());
        assert_eq!((s, d), (from, "fd00::2".parse().unwrap()));
        let want = m
            .header()
            .icmp_type
            .calc_checksum(s.octets(), d.octets(), m.payload())
            .unwrap();
        assert_eq!(m.checksum(), want);
        assert_eq!(m.payload(), &orig[14..14 + 1232]);
    }

    #[test]
    fn no_answer_without_df_for_errors_or_a_family_mismatch() {
        let from4: IpAddr = Ipv4Addr::new(10, 0, 0, 1).into();
        let mut f = tcp4(3000, false);
        let len = f.len();
        let before = f.clone();
        assert_eq!(answer_too_big(&mut f, len, 14, 1500, from4, PORT_MAC), None);
        assert_eq!(f, before, "unchanged");
        let mut f = tcp6(3000);
        let len = f.len();
        assert_eq!(answer_too_big(&mut f, len, 14, 1500, from4, PORT_MAC), None);
        // A truncated frame or a length beyond the buffer.
        let mut f = tcp4(3000, true);
        assert_eq!(answer_too_big(&mut f, 30, 14, 1500, from4, PORT_MAC), None);
        let l = f.len() + 1;
        assert_eq!(answer_too_big(&mut f, l, 14, 1500, from4, PORT_MAC), None);
    }
}
