//! The TCP reset that answers a segment (RFC 793 §3.4, "Reset
//! Generation"), built in place over the segment's own frame.
//!
//! Used when a VIP has `on_down = "reset"` and a connection's backend went
//! down: the next segment of that connection, from either end, is answered
//! with a RST sent back the way it came (docs/design.md §5, docs/health.md). The RST
//! is made from the segment alone, so it is in the sender's own sequence
//! space whatever the appliance does to the connection in between (PROXY
//! protocol v2 shifts the client's sequence numbers towards the backend:
//! a backend's segment already carries the backend's view of them).
//!
//! Sans-IO: bytes in, bytes out, no allocation.

use crate::wire::ethernet;
use crate::wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::wire::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::wire::tcp::{self, TcpPacket, TcpRepr};
use crate::wire::{ip_proto, Fragment, L3Kind, MacAddr, Parsed, TcpFlags, WireError};

/// TTL / hop limit of a generated RST.
pub const RST_TTL: u8 = 64;

/// Why a segment gets no RST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRst {
    /// Not a whole, unfragmented TCP segment over IPv4 or IPv6.
    NotTcp,
    /// The segment is itself a RST: a RST is never answered (RFC 793).
    IsRst,
    /// The frame is shorter than its parse claims.
    Truncated,
}

/// The sequence number, acknowledgment number and flags of the RST that
/// answers a segment with sequence number `seq`, acknowledgment number
/// `ack`, flags `flags` and `data_len` bytes of data: with ACK set,
/// `<SEQ=SEG.ACK><CTL=RST>`; otherwise `<SEQ=0><ACK=SEG.SEQ+SEG.LEN>
/// <CTL=RST,ACK>`, where SEG.LEN counts SYN and FIN.
pub fn rst_numbers(seq: u32, ack: u32, flags: TcpFlags, data_len: u32) -> (u32, u32, TcpFlags) {
    if flags.contains(TcpFlags::ACK) {
        (ack, 0, TcpFlags::RST)
    } else {
        let len = data_len
            .wrapping_add(u32::from(flags.contains(TcpFlags::SYN)))
            .wrapping_add(u32::from(flags.contains(TcpFlags::FIN)));
        (0, seq.wrapping_add(len), TcpFlags::RST | TcpFlags::ACK)
    }
}

/// Rewrites the TCP segment in `frame` (as `p` parsed it) into the RST that
/// answers it, addressed back to its sender: Ethernet addresses swapped
/// (the new source is `our_mac`), VLAN tag kept, IP addresses and ports
/// swapped, a fresh IP header without options or extension headers (TTL
/// [`RST_TTL`], IPv4 DF, identification 0), a 20-byte TCP header without
/// options (window 0), no data, both checksums computed. Returns the new
/// frame length (never more than the old one: a segment has at least the
/// headers the RST has).
pub fn rst_reply(frame: &mut [u8], p: &Parsed, our_mac: MacAddr) -> Result<usize, NoRst> {
    if p.l4_proto != ip_proto::TCP || p.fragment != Fragment::None {
        return Err(NoRst::NotTcp);
    }
    let v4 = match p.l3 {
        L3Kind::Ipv4 => true,
        L3Kind::Ipv6 => false,
        _ => return Err(NoRst::NotTcp),
    };
    let (l3, l4) = (p.l3_offset, p.l4_offset);
    let seg = frame.get(l4..p.l3_end).ok_or(NoRst::Truncated)?;
    let seg = TcpPacket::new_checked(seg).map_err(|_| NoRst::Truncated)?;
    let flags = seg.flags();
    if flags.contains(TcpFlags::RST) {
        return Err(NoRst::IsRst);
    }
    let data_len = seg.payload().len() as u32;
    let (seq, ack, rst_flags) = rst_numbers(seg.seq_number(), seg.ack_number(), flags, data_len);
    let rst = TcpRepr {
        src_port: seg.dst_port(),
        dst_port: seg.src_port(),
        seq_number: seq,
        ack_number: ack,
        flags: rst_flags,
        window: 0,
        urgent_ptr: 0,
    };

    // The IP header from the segment's destination back to its source,
    // read before anything is overwritten.
    let ip = frame.get(l3..).ok_or(NoRst::Truncated)?;
    let reply = if v4 {
        let h = Ipv4Packet::new_checked_truncated(ip).map_err(|_| NoRst::Truncated)?;
        IpReply::V4(Ipv4Repr {
            src_addr: h.dst_addr(),
            dst_addr: h.src_addr(),
            protocol: ip_proto::TCP,
            ttl: RST_TTL,
            tos: 0,
            ident: 0,
            dont_frag: true,
            payload_len: tcp::MIN_HEADER_LEN,
        })
    } else {
        let h = Ipv6Packet::new_checked_truncated(ip).map_err(|_| NoRst::Truncated)?;
        IpReply::V6(Ipv6Repr {
            src_addr: h.dst_addr(),
            dst_addr: h.src_addr(),
            next_header: ip_proto::TCP,
            hop_limit: RST_TTL,
            traffic_class: 0,
            flow_label: 0,
            payload_len: tcp::MIN_HEADER_LEN,
        })
    };
    let end = l3 + reply.header_len() + tcp::MIN_HEADER_LEN;
    if frame.len() < end || l3 < ethernet::HEADER_LEN {
        return Err(NoRst::Truncated);
    }
    let peer = ethernet::src_addr(frame).map_err(|_| NoRst::Truncated)?;
    write_rst(&mut frame[..end], l3, [peer, our_mac], &reply, &rst)
        .map_err(|_| NoRst::Truncated)?;
    Ok(end)
}

/// The IP header of a RST.
enum IpReply {
    V4(Ipv4Repr),
    V6(Ipv6Repr),
}

impl IpReply {
    fn header_len(&self) -> usize {
        match self {
            IpReply::V4(_) => ipv4::MIN_HEADER_LEN,
            IpReply::V6(_) => ipv6::HEADER_LEN,
        }
    }
}

/// Writes the RST over `frame`, which ends where the RST does: Ethernet
/// addresses `[dst, src]`, the IP header at `l3`, the TCP header after it
/// with its checksum.
fn write_rst(
    frame: &mut [u8],
    l3: usize,
    [dst, src]: [MacAddr; 2],
    ip: &IpReply,
    rst: &TcpRepr,
) -> Result<(), WireError> {
    ethernet::set_addrs(frame, dst, src)?;
    let ip_frame = frame.get_mut(l3..).ok_or(WireError::Truncated)?;
    let segment = ip_frame
        .get_mut(ip.header_len()..)
        .ok_or(WireError::Truncated)?;
    let mut segment = rst.emit(segment)?;
    match ip {
        IpReply::V4(h) => {
            segment.fill_checksum_v4(h.src_addr, h.dst_addr);
            h.emit(ip_frame)?;
        }
        IpReply::V6(h) => {
            segment.fill_checksum_v6(&h.src_addr, &h.dst_addr);
            h.emit(ip_frame)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_frame;
    use etherparse::{
        IpNumber, Ipv4Header, Ipv6FragmentHeader, NetSlice, PacketBuilder, SlicedPacket, TcpHeader,
        TcpOptionElement, TransportSlice,
    };

    const FIN: u8 = TcpFlags::FIN.0;
    const SYN: u8 = TcpFlags::SYN.0;
    const RST: u8 = TcpFlags::RST.0;
    const ACK: u8 = TcpFlags::ACK.0;

    const OUR: [u8; 6] = [2, 0, 0, 0, 1, 1];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0xc1, 1];

    struct Seg {
        src: &'static str,
        dst: &'static str,
        sport: u16,
        dport: u16,
        seq: u32,
        ack: Option<u32>,
        syn: bool,
        fin: bool,
        payload: &'static [u8],
        vlan: Option<u16>,
        options: bool,
    }

    const BASE: Seg = Seg {
        src: "10.1.0.50",
        dst: "10.1.0.100",
        sport: 40000,
        dport: 80,
        seq: 1000,
        ack: Some(5000),
        syn: false,
        fin: false,
        payload: b"hello",
        vlan: None,
        options: false,
    };

    fn build(s: &Seg) -> Vec<u8> {
        let mut h = TcpHeader::new(s.sport, s.dport, s.seq, 64240);
        h.syn = s.syn;
        h.fin = s.fin;
        h.psh = !s.payload.is_empty();
        if let Some(a) = s.ack {
            h.ack = true;
            h.acknowledgment_number = a;
        }
        if s.options {
            h.set_options(&[
                TcpOptionElement::MaximumSegmentSize(1460),
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(1, 2),
            ])
            .unwrap();
        }
        let mut out = Vec::new();
        let (a, d): (std::net::IpAddr, std::net::IpAddr) =
            (s.src.parse().unwrap(), s.dst.parse().unwrap());
        macro_rules! write {
            ($eth:expr) => {
                match (a, d) {
                    (std::net::IpAddr::V4(a), std::net::IpAddr::V4(d)) => $eth
                        .ipv4(a.octets(), d.octets(), 61)
                        .tcp_header(h)
                        .write(&mut out, s.payload)
                        .unwrap(),
                    (std::net::IpAddr::V6(a), std::net::IpAddr::V6(d)) => $eth
                        .ipv6(a.octets(), d.octets(), 61)
                        .tcp_header(h)
                        .write(&mut out, s.payload)
                        .unwrap(),
                    _ => unreachable!(),
                }
            };
        }
        match s.vlan {
            Some(id) => {
                write!(PacketBuilder::ethernet2(PEER, OUR).single_vlan(id.try_into().unwrap()))
            }
            None => write!(PacketBuilder::ethernet2(PEER, OUR)),
        }
        out
    }

    /// (src, dst, sport, dport, seq, ack, flags, ttl) of a RST, every
    /// checksum verified by etherparse.
    fn read(f: &[u8]) -> (String, String, u16, u16, u32, u32, u8, u8) {
        let p = SlicedPacket::from_ethernet(f).expect("etherparse parses the RST");
        let (src, dst, ttl) = match &p.net {
            Some(NetSlice::Ipv4(ip)) => {
                let h = ip.header();
                assert_eq!(
                    h.header_checksum(),
                    h.to_header().calc_header_checksum(),
                    "IPv4 header checksum"
                );
                assert!(h.dont_fragment());
                assert_eq!((h.ihl(), h.total_len()), (5, 40));
                (
                    h.source_addr().to_string(),
                    h.destination_addr().to_string(),
                    h.ttl(),
                )
            }
            Some(NetSlice::Ipv6(ip)) => {
                let h = ip.header();
                assert_eq!(h.payload_length(), 20);
                assert_eq!(h.next_header(), IpNumber::TCP);
                (
                    h.source_addr().to_string(),
                    h.destination_addr().to_string(),
                    h.hop_limit(),
                )
            }
            other => panic!("not IP: {other:?}"),
        };
        let Some(TransportSlice::Tcp(t)) = &p.transport else {
            panic!("not TCP");
        };
        let want = match &p.net {
            Some(NetSlice::Ipv4(ip)) => {
                t.calc_checksum_ipv4(ip.header().source(), ip.header().destination())
            }
            Some(NetSlice::Ipv6(ip)) => {
                t.calc_checksum_ipv6(ip.header().source(), ip.header().destination())
            }
            _ => unreachable!(),
        }
        .unwrap();
        assert_eq!(t.checksum(), want, "TCP checksum");
        assert!(t.payload().is_empty() && t.options().is_empty());
        assert_eq!(t.window_size(), 0);
        let flags = u8::from(t.fin())
            | u8::from(t.syn()) << 1
            | u8::from(t.rst()) << 2
            | u8::from(t.psh()) << 3
            | u8::from(t.ack()) << 4;
        (
            src,
            dst,
            t.source_port(),
            t.destination_port(),
            t.sequence_number(),
            t.acknowledgment_number(),
            flags,
            ttl,
        )
    }

    fn rst_of(s: &Seg) -> Vec<u8> {
        let mut f = build(s);
        let p = parse_frame(&f).expect("parses");
        let n = rst_reply(&mut f, &p, OUR).expect("a RST");
        f.truncate(n);
        assert_eq!(&f[..6], &PEER, "back to the sender");
        assert_eq!(&f[6..12], &OUR);
        // Our own parser takes it too (what the kernel of the peer sees).
        let q = parse_frame(&f).expect("the RST parses");
        assert_eq!(q.tcp_flags.map(|t| t.0 & RST), Some(RST));
        f
    }

    #[test]
    fn ipv4_with_ack_takes_seg_ack_as_seq() {
        let f = rst_of(&BASE);
        assert_eq!(f.len(), 14 + 20 + 20);
        assert_eq!(
            read(&f),
            (
                "10.1.0.100".into(),
                "10.1.0.50".into(),
                80,
                40000,
                5000,
                0,
                RST,
                RST_TTL
            )
        );
    }

    #[test]
    fn ipv6_with_ack_takes_seg_ack_as_seq() {
        let f = rst_of(&Seg {
            src: "fd00:2::11",
            dst: "fd00:2::1",
            sport: 8080,
            dport: 1025,
            ack: Some(0xFFFF_FFF0),
            ..BASE
        });
        assert_eq!(f.len(), 14 + 40 + 20);
        assert_eq!(
            read(&f),
            (
                "fd00:2::1".into(),
                "fd00:2::11".into(),
                1025,
                8080,
                0xFFFF_FFF0,
                0,
                RST,
                RST_TTL
            )
        );
    }

    #[test]
    fn without_ack_acknowledges_the_segment() {
        // SEG.LEN counts data, SYN and FIN; sequence numbers wrap.
        for (syn, fin, payload, seq, want_ack) in [
            (false, false, &b"hello"[..], 1000u32, 1005u32),
            (true, false, &b""[..], 1000, 1001),
            (false, true, &b"ab"[..], 1000, 1003),
            (false, false, &b""[..], 1000, 1000),
            (false, true, &b"abc"[..], 0xFFFF_FFFE, 2),
        ] {
            for (src, dst) in [("10.1.0.50", "10.1.0.101"), ("fd00:1::50", "fd00:1::101")] {
                let f = rst_of(&Seg {
                    src,
                    dst,
                    seq,
                    ack: None,
                    syn,
                    fin,
                    payload,
                    ..BASE
                });
                let r = read(&f);
                assert_eq!(
                    (r.4, r.5, r.6),
                    (0, want_ack, RST | ACK),
                    "{src} {syn} {fin}"
                );
                assert_eq!((r.0.as_str(), r.1.as_str()), (dst, src));
            }
        }
    }

    #[test]
    fn vlan_tag_and_tcp_options_are_handled() {
        for src in ["10.2.0.11", "fd00:2::11"] {
            let dst = if src.contains(':') {
                "fd00:2::1"
            } else {
                "10.2.0.1"
            };
            let s = Seg {
                src,
                dst,
                vlan: Some(42),
                options: true,
                payload: &[7; 300],
                ..BASE
            };
            let f = rst_of(&s);
            assert_eq!(&f[12..16], &[0x81, 0, 0, 42], "tag kept");
            let r = read(&f);
            assert_eq!(
                (r.0.as_str(), r.1.as_str(), r.4, r.6),
                (dst, src, 5000, RST)
            );
        }
    }

    #[test]
    fn ipv4_options_and_ipv6_extension_headers_are_not_copied() {
        // IPv4 with a 4-byte option (IHL 6).
        let mut f = build(&BASE);
        let mut ip = Ipv4Header::from_slice(&f[14..]).unwrap().0;
        ip.options = [1u8, 1, 1, 0][..].try_into().unwrap();
        ip.total_len += 4;
        ip.header_checksum = ip.calc_header_checksum();
        let mut g = f[..14].to_vec();
        g.extend_from_slice(&ip.to_bytes());
        g.extend_from_slice(&f[34..]);
        let p = parse_frame(&g).unwrap();
        let n = rst_reply(&mut g, &p, OUR).unwrap();
        let r = read(&g[..n]);
        assert_eq!((r.0.as_str(), r.4, r.6), ("10.1.0.100", 5000, RST));

        // IPv6 with a destination options header (8 bytes of PadN).
        f = build(&Seg {
            src: "fd00:1::50",
            dst: "fd00:1::100",
            ..BASE
        });
        let mut g = f[..54].to_vec();
        g[14 + 6] = 60; // next header: destination options
        let plen = u16::from_be_bytes([g[18], g[19]]) + 8;
        g[18..20].copy_from_slice(&plen.to_be_bytes());
        g.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
        g.extend_from_slice(&f[54..]);
        let p = parse_frame(&g).unwrap();
        assert_eq!(p.l4_offset, 54 + 8);
        let n = rst_reply(&mut g, &p, OUR).unwrap();
        assert_eq!(n, 14 + 40 + 20);
        let r = read(&g[..n]);
        assert_eq!(
            (r.0.as_str(), r.1.as_str(), r.4),
            ("fd00:1::100", "fd00:1::50", 5000)
        );
    }

    #[test]
    fn no_rst_for_a_rst_udp_or_a_fragment() {
        let mut f = build(&Seg {
            ack: None,
            payload: b"",
            ..BASE
        });
        let l4 = 34;
        f[l4 + 13] = RST;
        // TCP checksum no longer matters: parse_frame does not check it.
        let p = parse_frame(&f).unwrap();
        assert_eq!(rst_reply(&mut f.clone(), &p, OUR), Err(NoRst::IsRst));

        let mut u = Vec::new();
        PacketBuilder::ethernet2(PEER, OUR)
            .ipv4([10, 1, 0, 50], [10, 1, 0, 100], 64)
            .udp(5000, 53)
            .write(&mut u, b"q")
            .unwrap();
        let p = parse_frame(&u).unwrap();
        assert_eq!(rst_reply(&mut u, &p, OUR), Err(NoRst::NotTcp));

        let mut g = Vec::new();
        PacketBuilder::ethernet2(PEER, OUR)
            .ipv6([0xfd; 16], [0xfe; 16], 64)
            .tcp(1, 2, 3, 4)
            .write(&mut g, b"wxyz")
            .unwrap();
        // Turn it into a first fragment with more to come.
        let frag = Ipv6FragmentHeader::new(IpNumber::TCP, 0.try_into().unwrap(), true, 7);
        let mut h = g[..54].to_vec();
        h[14 + 6] = 44;
        let plen = u16::from_be_bytes([h[18], h[19]]) + 8;
        h[18..20].copy_from_slice(&plen.to_be_bytes());
        h.extend_from_slice(&frag.to_bytes());
        h.extend_from_slice(&g[54..]);
        let p = parse_frame(&h).unwrap();
        assert!(p.is_fragment());
        assert_eq!(rst_reply(&mut h, &p, OUR), Err(NoRst::NotTcp));
    }

    #[test]
    fn rst_numbers_follow_rfc_793() {
        let numbers = |seq, ack, flags, len| {
            let (s, a, f) = rst_numbers(seq, ack, TcpFlags(flags), len);
            (s, a, f.0)
        };
        assert_eq!(numbers(1, 99, ACK, 10), (99, 0, RST));
        assert_eq!(numbers(1, 99, ACK | FIN, 10), (99, 0, RST));
        assert_eq!(numbers(1, 99, SYN, 0), (0, 2, RST | ACK));
        assert_eq!(numbers(u32::MAX, 0, FIN, 0), (0, 0, RST | ACK));
    }
}
