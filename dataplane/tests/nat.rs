//! `dataplane::nat` against fixtures built with etherparse: every rewrite is
//! compared byte for byte with the packet etherparse builds from scratch
//! with the new values (so every checksum equals an independent full
//! recomputation), checked again with the wire views' full verifiers, and
//! fuzzed with random and mutated frames and with stale `Parsed` values.

// Everything sits in `mod nat` so that `cargo test -p dataplane nat` runs
// all of it.
mod nat {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use dataplane::nat::{
        decrement_ttl, icmp_error_inner, rewrite_addrs, rewrite_icmp_error, set_macs, InnerFlow,
        NatError, TtlExpired,
    };
    use dataplane::wire::checksum;
    use dataplane::wire::ip_proto;
    use dataplane::wire::{
        parse_frame, parse_frame_with, Fragment, Icmpv4Packet, Icmpv6Packet, Ipv4Packet,
        Ipv6Packet, L3Kind, ParseOptions, Parsed, Ports, TcpPacket, UdpPacket,
    };
    use etherparse::{
        IpDscp, IpEcn, IpHeaders, IpNumber, Ipv4Header, Ipv4Options, Ipv6Extensions, Ipv6FlowLabel,
        Ipv6Header, Ipv6RawExtHeader, Ipv6RoutingExtensions, NetHeaders, PacketBuilder,
        PacketBuilderStep, PacketHeaders, TcpHeader, TransportHeader, VlanId,
    };
    use proptest::prelude::*;

    const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

    // ---------------------------------------------------------------------------
    // Fixtures.

    /// Everything that determines a TCP/UDP test frame.
    #[derive(Debug, Clone)]
    struct Pkt {
        tcp: bool,
        src: IpAddr,
        dst: IpAddr,
        sport: u16,
        dport: u16,
        ttl: u8,
        ident: u16,
        /// IPv4 DSCP/ECN byte or IPv6 traffic class.
        tos: u8,
        flow_label: u32,
        df: bool,
        /// IPv4 options (multiple of 4, at most 40).
        v4_options: Vec<u8>,
        /// IPv6: a destination-options extension header before the L4 header.
        v6_dest_opts: bool,
        /// IPv6: a routing header with this many segments left.
        v6_routing: Option<u8>,
        seq: u32,
        ack: u32,
        window: u16,
        flags: u8,
        tcp_options: Vec<u8>,
        payload: Vec<u8>,
        /// UDP sent without checksum (field forced to 0 after building).
        udp_zero: bool,
        vlan: Option<u16>,
        /// Ethernet padding after the IP packet.
        pad: Vec<u8>,
    }

    impl Pkt {
        fn v6(&self) -> bool {
            self.src.is_ipv6()
        }

        fn simple(tcp: bool, src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> Pkt {
            Pkt {
                tcp,
                src,
                dst,
                sport,
                dport,
                ttl: 64,
                ident: 0x1234,
                tos: 0,
                flow_label: 0,
                df: true,
                v4_options: Vec::new(),
                v6_dest_opts: false,
                v6_routing: None,
                seq: 1000,
                ack: 2000,
                window: 65535,
                flags: 0x18,
                tcp_options: Vec::new(),
                payload: b"hello, border".to_vec(),
                udp_zero: false,
                vlan: None,
                pad: Vec::new(),
            }
        }
    }

    fn ip_headers(p: &Pkt) -> IpHeaders {
        let proto = if p.tcp { IpNumber::TCP } else { IpNumber::UDP };
        match (p.src, p.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = Ipv4Header::new(0, p.ttl, proto, s.octets(), d.octets()).unwrap();
                h.identification = p.ident;
                h.dont_fragment = p.df;
                h.dscp = IpDscp::try_new(p.tos >> 2).unwrap();
                h.ecn = IpEcn::try_new(p.tos & 3).unwrap();
                h.options = Ipv4Options::try_from(&p.v4_options[..]).unwrap();
                IpHeaders::Ipv4(h, Default::default())
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let h = Ipv6Header {
                    traffic_class: p.tos,
                    flow_label: Ipv6FlowLabel::try_new(p.flow_label & 0xF_FFFF).unwrap(),
                    payload_length: 0,
                    next_header: proto,
                    hop_limit: p.ttl,
                    source: s.octets(),
                    destination: d.octets(),
                };
                let mut exts = Ipv6Extensions::default();
                if p.v6_dest_opts {
                    // One PadN option filling the 6 bytes.
                    exts.destination_options =
                        Some(Ipv6RawExtHeader::new_raw(proto, &[1, 4, 0, 0, 0, 0]).unwrap());
                }
                if let Some(left) = p.v6_routing {
                    exts.routing = Some(Ipv6RoutingExtensions {
                        routing: Ipv6RawExtHeader::new_raw(proto, &[4, left, 0, 0, 0, 0]).unwrap(),
                        final_destination_options: None,
                    });
                }
                IpHeaders::Ipv6(h, exts)
            }
            _ => panic!("mixed address families in a fixture"),
        }
    }

    fn write_l4(step: PacketBuilderStep<IpHeaders>, p: &Pkt) -> Vec<u8> {
        let mut out = Vec::new();
        if p.tcp {
            let mut t = TcpHeader::new(p.sport, p.dport, p.seq, p.window);
            t.acknowledgment_number = p.ack;
            t.fin = p.flags & 0x01 != 0;
            t.syn = p.flags & 0x02 != 0;
            t.rst = p.flags & 0x04 != 0;
            t.psh = p.flags & 0x08 != 0;
            t.ack = p.flags & 0x10 != 0;
            t.urg = p.flags & 0x20 != 0;
            t.ece = p.flags & 0x40 != 0;
            t.cwr = p.flags & 0x80 != 0;
            t.set_options_raw(&p.tcp_options).unwrap();
            step.tcp_header(t).write(&mut out, &p.payload).unwrap();
        } else {
            step.udp(p.sport, p.dport)
                .write(&mut out, &p.payload)
                .unwrap();
        }
        out
    }

    /// The Ethernet frame for `p`, every checksum computed by etherparse.
    fn frame(p: &Pkt) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(SRC_MAC, DST_MAC);
        let step = match p.vlan {
            Some(v) => eth
                .single_vlan(VlanId::try_new(v).unwrap())
                .ip(ip_headers(p)),
            None => eth.ip(ip_headers(p)),
        };
        let mut f = write_l4(step, p);
        if p.udp_zero && !p.tcp {
            let at = parse_frame(&f).unwrap().l4_offset + 6;
            f[at..at + 2].copy_from_slice(&[0, 0]);
        }
        f.extend_from_slice(&p.pad);
        f
    }

    /// The IP packet of `p` (no Ethernet) and its IP header length.
    fn ip_packet(p: &Pkt) -> (Vec<u8>, usize) {
        let f = frame(p);
        let pp = parse_frame(&f).unwrap();
        (
            f[pp.l3_offset..pp.l3_end].to_vec(),
            pp.l4_offset - pp.l3_offset,
        )
    }

    /// An ICMP error frame (no VLAN) from `osrc` to `odst` quoting `quote`.
    fn icmp_frame(
        osrc: IpAddr,
        odst: IpAddr,
        ty: u8,
        code: u8,
        rest: [u8; 4],
        quote: &[u8],
    ) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(SRC_MAC, DST_MAC);
        let mut out = Vec::new();
        match (osrc, odst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth
                .ipv4(s.octets(), d.octets(), 61)
                .icmpv4_raw(ty, code, rest)
                .write(&mut out, quote)
                .unwrap(),
            (IpAddr::V6(s), IpAddr::V6(d)) => eth
                .ipv6(s.octets(), d.octets(), 61)
                .icmpv6_raw(ty, code, rest)
                .write(&mut out, quote)
                .unwrap(),
            _ => panic!("mixed address families in a fixture"),
        }
        out
    }

    fn addr(v6: bool, raw: u128) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from(raw))
        } else {
            IpAddr::V4(Ipv4Addr::from(raw as u32))
        }
    }

    fn v4(s: &str) -> IpAddr {
        IpAddr::V4(s.parse().unwrap())
    }

    fn v6(s: &str) -> IpAddr {
        IpAddr::V6(s.parse().unwrap())
    }

    // ---------------------------------------------------------------------------
    // Independent checks.

    /// Full recomputation of the TCP/UDP checksum of a parsed frame with the
    /// wire module's full functions, and the field as found.
    fn l4_checksum_full(f: &[u8], p: &Parsed) -> (u16, u16) {
        let at = p.l4_offset + if p.l4_proto == ip_proto::TCP { 16 } else { 6 };
        let found = u16::from_be_bytes([f[at], f[at + 1]]);
        let mut seg = p.l4_bytes(f).to_vec();
        let rel = at - p.l4_offset;
        seg[rel..rel + 2].copy_from_slice(&[0, 0]);
        let l3 = p.l3_bytes(f);
        let c = match p.l3 {
            L3Kind::Ipv4 => {
                let ip = Ipv4Packet::new_checked(l3).unwrap();
                checksum::l4_checksum_v4(ip.src_addr(), ip.dst_addr(), p.l4_proto, &seg)
            }
            L3Kind::Ipv6 => {
                let ip = Ipv6Packet::new_checked(l3).unwrap();
                checksum::l4_checksum_v6(&ip.src_addr(), &ip.dst_addr(), p.l4_proto, &seg)
            }
            _ => unreachable!(),
        };
        let full = if p.l4_proto == ip_proto::UDP {
            checksum::udp_finish(c)
        } else {
            c
        };
        (found, full)
    }

    /// Every checksum of a TCP/UDP frame verifies (IPv4 header by parse_frame;
    /// L4 by the views and by full recomputation), unless UDP/IPv4 carries none.
    fn assert_checksums_valid(f: &[u8]) -> Parsed {
        let p = parse_frame(f).expect("parses with the IPv4 header checksum verified");
        let (found, full) = l4_checksum_full(f, &p);
        let l4 = p.l4_bytes(f);
        match (p.l3, p.l4_proto) {
            (L3Kind::Ipv4, ip_proto::UDP) if found == 0 => {}
            (L3Kind::Ipv4, proto) => {
                let ip = Ipv4Packet::new_checked(p.l3_bytes(f)).unwrap();
                assert_eq!(found, full, "L4 checksum != full recomputation");
                let ok = if proto == ip_proto::TCP {
                    TcpPacket::new_checked(l4)
                        .unwrap()
                        .verify_checksum_v4(ip.src_addr(), ip.dst_addr())
                } else {
                    UdpPacket::new_checked(l4)
                        .unwrap()
                        .verify_checksum_v4(ip.src_addr(), ip.dst_addr())
                };
                assert!(ok);
            }
            (L3Kind::Ipv6, proto) => {
                let ip = Ipv6Packet::new_checked(p.l3_bytes(f)).unwrap();
                assert_eq!(found, full, "L4 checksum != full recomputation");
                let ok = if proto == ip_proto::TCP {
                    TcpPacket::new_checked(l4)
                        .unwrap()
                        .verify_checksum_v6(&ip.src_addr(), &ip.dst_addr())
                } else {
                    UdpPacket::new_checked(l4)
                        .unwrap()
                        .verify_checksum_v6(&ip.src_addr(), &ip.dst_addr())
                };
                assert!(ok);
            }
            _ => unreachable!(),
        }
        p
    }

    /// etherparse reads the frame back with these addresses and ports.
    fn assert_etherparse_sees(f: &[u8], src: IpAddr, dst: IpAddr, sport: u16, dport: u16) {
        let h = PacketHeaders::from_ethernet_slice(f).expect("etherparse parses the rewrite");
        match h.net {
            Some(NetHeaders::Ipv4(ip, _)) => {
                assert_eq!(IpAddr::V4(ip.source.into()), src);
                assert_eq!(IpAddr::V4(ip.destination.into()), dst);
                assert_eq!(ip.header_checksum, ip.calc_header_checksum());
            }
            Some(NetHeaders::Ipv6(ip, _)) => {
                assert_eq!(IpAddr::V6(ip.source.into()), src);
                assert_eq!(IpAddr::V6(ip.destination.into()), dst);
            }
            other => panic!("unexpected net header {other:?}"),
        }
        match h.transport {
            Some(TransportHeader::Tcp(t)) => {
                assert_eq!((t.source_port, t.destination_port), (sport, dport));
            }
            Some(TransportHeader::Udp(u)) => {
                assert_eq!((u.source_port, u.destination_port), (sport, dport));
            }
            other => panic!("unexpected transport header {other:?}"),
        }
    }

    /// The ICMP error in `f` verifies everywhere: outer IPv4 header (by
    /// parse_frame), ICMP checksum, quoted IPv4 header checksum, and the quoted
    /// L4 checksum when the whole quoted segment is present.
    fn assert_icmp_checksums_valid(f: &[u8]) {
        let p = parse_frame(f).expect("outer header verifies");
        let msg = p.l4_bytes(f);
        match p.l3 {
            L3Kind::Ipv4 => {
                let icmp = Icmpv4Packet::new_checked(msg).unwrap();
                assert!(icmp.verify_checksum(), "ICMP checksum");
                let inner = Ipv4Packet::new_checked_truncated(icmp.data()).unwrap();
                assert!(inner.verify_checksum(), "quoted IPv4 header checksum");
                if usize::from(inner.total_len()) == icmp.data().len() {
                    let seg = inner.payload();
                    let (s, d) = (inner.src_addr(), inner.dst_addr());
                    let ok = match inner.protocol() {
                        ip_proto::TCP => TcpPacket::new_checked(seg)
                            .unwrap()
                            .verify_checksum_v4(s, d),
                        _ => UdpPacket::new_checked(seg)
                            .unwrap()
                            .verify_checksum_v4(s, d),
                    };
                    assert!(ok, "quoted L4 checksum");
                }
            }
            L3Kind::Ipv6 => {
                let ip = Ipv6Packet::new_checked(p.l3_bytes(f)).unwrap();
                let icmp = Icmpv6Packet::new_checked(msg).unwrap();
                assert!(
                    icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()),
                    "ICMPv6 checksum"
                );
                let inner = Ipv6Packet::new_checked_truncated(icmp.data()).unwrap();
                if 40 + usize::from(inner.payload_len()) == icmp.data().len() {
                    let up = inner.upper_layer().unwrap();
                    let seg = &icmp.data()[up.offset..];
                    let (s, d) = (inner.src_addr(), inner.dst_addr());
                    let ok = match up.proto {
                        ip_proto::TCP => TcpPacket::new_checked(seg)
                            .unwrap()
                            .verify_checksum_v6(&s, &d),
                        _ => UdpPacket::new_checked(seg)
                            .unwrap()
                            .verify_checksum_v6(&s, &d),
                    };
                    assert!(ok, "quoted L4 checksum");
                }
            }
            _ => unreachable!(),
        }
    }

    // ---------------------------------------------------------------------------
    // rewrite_addrs: fixed cases.

    #[test]
    fn fullnat_v4_tcp_both_sides() {
        let p = Pkt::simple(true, v4("198.51.100.7"), v4("192.0.2.10"), 40000, 443);
        let mut f = frame(&p);
        let parsed = parse_frame(&f).unwrap();
        rewrite_addrs(
            &mut f,
            &parsed,
            Some((v4("10.0.0.1"), 61000)),
            Some((v4("10.1.2.3"), 8443)),
        )
        .unwrap();
        let mut q = p.clone();
        (q.src, q.sport, q.dst, q.dport) = (v4("10.0.0.1"), 61000, v4("10.1.2.3"), 8443);
        assert_eq!(f, frame(&q));
        assert_checksums_valid(&f);
        assert_etherparse_sees(&f, q.src, q.dst, 61000, 8443);
    }

    #[test]
    fn dnat_v6_udp_dst_only() {
        let mut p = Pkt::simple(false, v6("2001:db8::7"), v6("2001:db8:1::10"), 5353, 53);
        p.v6_dest_opts = true;
        p.vlan = Some(7);
        let mut f = frame(&p);
        let parsed = parse_frame(&f).unwrap();
        rewrite_addrs(&mut f, &parsed, None, Some((v6("fd00::53"), 5300))).unwrap();
        let mut q = p.clone();
        (q.dst, q.dport) = (v6("fd00::53"), 5300);
        assert_eq!(f, frame(&q));
        assert_checksums_valid(&f);
        assert_etherparse_sees(&f, q.src, q.dst, 5353, 5300);
    }

    #[test]
    fn no_change_is_a_no_op() {
        for p in [
            Pkt::simple(true, v4("192.0.2.1"), v4("192.0.2.2"), 1, 2),
            Pkt::simple(false, v6("2001:db8::1"), v6("2001:db8::2"), 1, 2),
        ] {
            let mut f = frame(&p);
            let parsed = parse_frame(&f).unwrap();
            rewrite_addrs(&mut f, &parsed, None, None).unwrap();
            assert_eq!(f, frame(&p));
        }
    }

    #[test]
    fn udp_v4_without_checksum_stays_without() {
        let mut p = Pkt::simple(false, v4("192.0.2.1"), v4("192.0.2.2"), 1000, 53);
        p.udp_zero = true;
        let mut f = frame(&p);
        let parsed = parse_frame(&f).unwrap();
        rewrite_addrs(
            &mut f,
            &parsed,
            Some((v4("10.9.8.7"), 4444)),
            Some((v4("10.0.0.53"), 5353)),
        )
        .unwrap();
        let at = parsed.l4_offset + 6;
        assert_eq!(&f[at..at + 2], &[0, 0]);
        let mut q = p.clone();
        (q.src, q.sport, q.dst, q.dport) = (v4("10.9.8.7"), 4444, v4("10.0.0.53"), 5353);
        assert_eq!(f, frame(&q));
        assert_checksums_valid(&f);
    }

    #[test]
    fn udp_v6_zero_checksum_is_left_zero() {
        let p = Pkt::simple(false, v6("2001:db8::1"), v6("2001:db8::2"), 1000, 53);
        let mut f = frame(&p);
        let parsed = parse_frame(&f).unwrap();
        let at = parsed.l4_offset + 6;
        f[at..at + 2].copy_from_slice(&[0, 0]);
        rewrite_addrs(&mut f, &parsed, Some((v6("2001:db8::99"), 7)), None).unwrap();
        assert_eq!(&f[at..at + 2], &[0, 0]);
    }

    /// Find a new source port for which the full checksum computes to 0 (the
    /// one's-complement sum moves by one per port step, so one exists).
    fn port_for_zero_checksum(p: &Pkt) -> u16 {
        (0..=u16::MAX)
            .find(|&port| {
                let mut q = p.clone();
                q.sport = port;
                let f = frame(&q);
                let parsed = parse_frame(&f).unwrap();
                let mut seg = parsed.l4_bytes(&f).to_vec();
                let at = if p.tcp { 16 } else { 6 };
                seg[at..at + 2].copy_from_slice(&[0, 0]);
                let ip = Ipv4Packet::new_checked(parsed.l3_bytes(&f)).unwrap();
                checksum::l4_checksum_v4(ip.src_addr(), ip.dst_addr(), parsed.l4_proto, &seg) == 0
            })
            .unwrap()
    }

    #[test]
    fn udp_computed_zero_is_sent_as_ffff_and_tcp_zero_stays_zero() {
        for tcp in [false, true] {
            let mut p = Pkt::simple(tcp, v4("192.0.2.1"), v4("192.0.2.2"), 1000, 53);
            p.payload = vec![0x5a; 33];
            let port = port_for_zero_checksum(&p);
            let mut f = frame(&p);
            let parsed = parse_frame(&f).unwrap();
            rewrite_addrs(&mut f, &parsed, Some((p.src, port)), None).unwrap();
            let at = parsed.l4_offset + if tcp { 16 } else { 6 };
            let want: [u8; 2] = if tcp { [0, 0] } else { [0xff, 0xff] };
            assert_eq!(&f[at..at + 2], &want, "tcp={tcp}");
            let mut q = p.clone();
            q.sport = port;
            assert_eq!(f, frame(&q));
            assert_checksums_valid(&f);
            // And back again, starting from the 0xFFFF / 0 checksum.
            let parsed = parse_frame(&f).unwrap();
            rewrite_addrs(&mut f, &parsed, Some((p.src, 1000)), None).unwrap();
            assert_eq!(f, frame(&p));
        }
    }

    #[test]
    fn v4_options_vlan_and_padding() {
        let mut p = Pkt::simple(true, v4("203.0.113.9"), v4("192.0.2.80"), 33333, 80);
        p.v4_options = vec![1, 1, 1, 0, 0x44, 4, 5, 0]; // NOPs, EOL, timestamp-ish
        p.vlan = Some(100);
        p.pad = vec![0xee; 11];
        p.tcp_options = vec![2, 4, 5, 0xb4, 1, 1, 4, 2];
        let mut f = frame(&p);
        let parsed = parse_frame(&f).unwrap();
        rewrite_addrs(&mut f, &parsed, Some((v4("10.0.0.2"), 2000)), None).unwrap();
        let mut q = p.clone();
        (q.src, q.sport) = (v4("10.0.0.2"), 2000);
        assert_eq!(f, frame(&q));
    }

    #[test]
    fn refused_rewrites_leave_the_frame_alone() {
        // Family mismatch, both directions.
        let p4 = Pkt::simple(true, v4("192.0.2.1"), v4("192.0.2.2"), 1, 2);
        let p6 = Pkt::simple(true, v6("2001:db8::1"), v6("2001:db8::2"), 1, 2);
        for (p, other) in [(&p4, v6("2001:db8::9")), (&p6, v4("10.0.0.9"))] {
            let mut f = frame(p);
            let orig = f.clone();
            let parsed = parse_frame(&f).unwrap();
            for (s, d) in [(Some((other, 9)), None), (None, Some((other, 9)))] {
                assert_eq!(
                    rewrite_addrs(&mut f, &parsed, s, d),
                    Err(NatError::FamilyMismatch)
                );
                assert_eq!(f, orig);
            }
        }

        // ICMP echo, ARP: not TCP/UDP, not IP.
        let mut echo = Vec::new();
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
            .icmpv4_echo_request(1, 1)
            .write(&mut echo, b"ping")
            .unwrap();
        let parsed = parse_frame(&echo).unwrap();
        let orig = echo.clone();
        assert_eq!(
            rewrite_addrs(&mut echo, &parsed, Some((v4("10.0.0.1"), 1)), None),
            Err(NatError::UnsupportedProto)
        );
        assert_eq!(echo, orig);
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&SRC_MAC);
        arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&[0u8; 20]);
        let parsed = parse_frame(&arp).unwrap();
        assert_eq!(parsed.l3, L3Kind::Arp);
        assert_eq!(
            rewrite_addrs(&mut arp.clone(), &parsed, None, None),
            Err(NatError::NotIp)
        );
    }

    #[test]
    fn fragments() {
        // A UDP datagram of 8 + 40 bytes; its first fragment carries 24.
        let mut p = Pkt::simple(false, v4("192.0.2.1"), v4("192.0.2.2"), 1111, 53);
        p.df = false;
        p.payload = (0u8..40).collect();
        let whole = frame(&p);
        let wp = parse_frame(&whole).unwrap();
        let mut first = whole[..wp.l4_offset + 24].to_vec();
        // Set MF and the shorter total length, then fix the header checksum.
        first[wp.l3_offset + 6] |= 0x20;
        let total = (wp.l4_offset - wp.l3_offset + 24) as u16;
        first[wp.l3_offset + 2..wp.l3_offset + 4].copy_from_slice(&total.to_be_bytes());
        Ipv4Packet::new_checked(&mut first[wp.l3_offset..])
            .unwrap()
            .fill_checksum();
        let fp = parse_frame(&first).unwrap();
        assert_eq!(fp.fragment, Fragment::First);
        rewrite_addrs(&mut first, &fp, Some((v4("10.0.0.1"), 2222)), None).unwrap();
        // The first fragment now carries the checksum of the rewritten datagram.
        let mut q = p.clone();
        (q.src, q.sport) = (v4("10.0.0.1"), 2222);
        let want = frame(&q);
        assert_eq!(
            &first[fp.l4_offset..fp.l4_offset + 8],
            &want[wp.l4_offset..wp.l4_offset + 8]
        );
        assert!(Ipv4Packet::new_checked(&first[fp.l3_offset..])
            .unwrap()
            .verify_checksum());

        // A later fragment has no L4 header.
        let mut later = first.clone();
        later[fp.l3_offset + 6..fp.l3_offset + 8].copy_from_slice(&[0x00, 0x03]); // offset 24
        Ipv4Packet::new_checked(&mut later[fp.l3_offset..])
            .unwrap()
            .fill_checksum();
        let lp = parse_frame(&later).unwrap();
        assert_eq!(lp.fragment, Fragment::NonFirst);
        let orig = later.clone();
        assert_eq!(
            rewrite_addrs(&mut later, &lp, Some((v4("10.0.0.9"), 9)), None),
            Err(NatError::Fragment)
        );
        assert_eq!(later, orig);
    }

    #[test]
    fn ipv6_routing_header() {
        let mut p = Pkt::simple(true, v6("2001:db8::1"), v6("2001:db8::2"), 1, 2);
        p.v6_routing = Some(1);
        let mut f = frame(&p);
        let orig = f.clone();
        let parsed = parse_frame(&f).unwrap();
        assert_eq!(
            rewrite_addrs(&mut f, &parsed, None, Some((v6("2001:db8::3"), 3))),
            Err(NatError::Ipv6RoutingHeader)
        );
        assert_eq!(f, orig);
        // No segments left: the header's destination is the final one.
        p.v6_routing = Some(0);
        let mut f = frame(&p);
        let parsed = parse_frame(&f).unwrap();
        rewrite_addrs(&mut f, &parsed, None, Some((v6("2001:db8::3"), 3))).unwrap();
        let mut q = p.clone();
        (q.dst, q.dport) = (v6("2001:db8::3"), 3);
        assert_eq!(f, frame(&q));
    }

    #[test]
    fn stale_parsed_is_refused() {
        let p = Pkt::simple(true, v4("192.0.2.1"), v4("192.0.2.2"), 1, 2);
        let f4 = frame(&p);
        let parsed4 = parse_frame(&f4).unwrap();
        let mut p6 = Pkt::simple(true, v6("2001:db8::1"), v6("2001:db8::2"), 1, 2);
        p6.vlan = Some(3);
        let mut f6 = frame(&p6);
        let orig = f6.clone();
        // A v4 Parsed against a v6 frame, and a truncated frame.
        assert!(rewrite_addrs(&mut f6, &parsed4, Some((v4("10.0.0.1"), 1)), None).is_err());
        assert_eq!(f6, orig);
        let mut short = f4[..f4.len() - 3].to_vec();
        let o = short.clone();
        assert_eq!(
            rewrite_addrs(&mut short, &parsed4, Some((v4("10.0.0.1"), 1)), None),
            Err(NatError::Malformed)
        );
        assert_eq!(short, o);
    }

    // ---------------------------------------------------------------------------
    // decrement_ttl and set_macs.

    #[test]
    fn ttl_decrement() {
        for base in [
            Pkt::simple(true, v4("192.0.2.1"), v4("192.0.2.2"), 1, 2),
            Pkt::simple(false, v6("2001:db8::1"), v6("2001:db8::2"), 1, 2),
        ] {
            for ttl in [255u8, 64, 2] {
                let mut p = base.clone();
                p.ttl = ttl;
                let mut f = frame(&p);
                let parsed = parse_frame(&f).unwrap();
                decrement_ttl(&mut f, &parsed).unwrap();
                p.ttl = ttl - 1;
                assert_eq!(f, frame(&p));
            }
            for ttl in [1u8, 0] {
                let mut p = base.clone();
                p.ttl = ttl;
                let mut f = frame(&p);
                let parsed = parse_frame(&f).unwrap();
                assert_eq!(decrement_ttl(&mut f, &parsed), Err(TtlExpired));
                assert_eq!(f, frame(&p));
            }
        }
        // Nothing to decrement in a non-IP frame.
        let mut other = vec![0u8; 60];
        other[12..14].copy_from_slice(&[0x88, 0xcc]);
        let parsed = parse_frame(&other).unwrap();
        assert_eq!(decrement_ttl(&mut other, &parsed), Ok(()));
        assert_eq!(other, {
            let mut o = vec![0u8; 60];
            o[12..14].copy_from_slice(&[0x88, 0xcc]);
            o
        });
    }

    #[test]
    fn macs() {
        let p = Pkt::simple(true, v4("192.0.2.1"), v4("192.0.2.2"), 1, 2);
        let mut f = frame(&p);
        let new_src = [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
        let new_dst = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
        set_macs(&mut f, new_src, new_dst);
        let h = PacketHeaders::from_ethernet_slice(&f).unwrap();
        let eth = h.link.unwrap().ethernet2().unwrap();
        assert_eq!((eth.source, eth.destination), (new_src, new_dst));
        assert_eq!(f[12..], frame(&p)[12..]);
        for len in 0..14 {
            let mut short = vec![0x77u8; len];
            set_macs(&mut short, new_src, new_dst);
            if len < 12 {
                assert_eq!(short, vec![0x77u8; len]);
            }
        }
    }

    // ---------------------------------------------------------------------------
    // ICMP errors: fixed cases.

    /// A full-NAT flow: client C:cp -> VIP V:vp became local L:lp -> backend
    /// B:bp. A router R between the appliance and the backend answers the
    /// translated packet; the appliance sends the error on to the client.
    struct NatCase {
        c: (IpAddr, u16),
        v: (IpAddr, u16),
        l: (IpAddr, u16),
        b: (IpAddr, u16),
        r: IpAddr,
    }

    fn nat_case(v6: bool) -> NatCase {
        if v6 {
            NatCase {
                c: (self::v6("2001:db8:c::7"), 51000),
                v: (self::v6("2001:db8:5::80"), 443),
                l: (self::v6("fd00:1::1"), 61001),
                b: (self::v6("fd00:2::20"), 8443),
                r: self::v6("fd00:3::fe"),
            }
        } else {
            NatCase {
                c: (v4("198.51.100.7"), 51000),
                v: (v4("192.0.2.80"), 443),
                l: (v4("10.0.0.1"), 61001),
                b: (v4("10.2.0.20"), 8443),
                r: v4("10.3.0.254"),
            }
        }
    }

    fn check_icmp_case(
        v6: bool,
        ty: u8,
        code: u8,
        rest: [u8; 4],
        tcp: bool,
        quote_l4: Option<usize>,
    ) {
        let k = nat_case(v6);
        let mut tmpl = Pkt::simple(tcp, k.l.0, k.b.0, k.l.1, k.b.1);
        tmpl.payload = vec![0xab; 1200];
        let (translated, hl) = ip_packet(&tmpl);
        let qlen = quote_l4.map_or(translated.len(), |n| hl + n);
        let mut f = icmp_frame(k.r, k.l.0, ty, code, rest, &translated[..qlen]);
        let parsed = parse_frame(&f).unwrap();
        assert_eq!(
            icmp_error_inner(&f, &parsed),
            Some(InnerFlow {
                v6,
                proto: if tcp { ip_proto::TCP } else { ip_proto::UDP },
                src: k.l.0,
                dst: k.b.0,
                sport: k.l.1,
                dport: k.b.1,
            })
        );
        rewrite_icmp_error(&mut f, &parsed, None, Some(k.c.0), Some(k.c), Some(k.v)).unwrap();
        let mut orig = tmpl.clone();
        (orig.src, orig.sport, orig.dst, orig.dport) = (k.c.0, k.c.1, k.v.0, k.v.1);
        let (original, _) = ip_packet(&orig);
        assert_eq!(f, icmp_frame(k.r, k.c.0, ty, code, rest, &original[..qlen]));
        assert_icmp_checksums_valid(&f);
        let parsed = parse_frame(&f).unwrap();
        let inner = icmp_error_inner(&f, &parsed).unwrap();
        assert_eq!(
            (inner.src, inner.sport, inner.dst, inner.dport),
            (k.c.0, k.c.1, k.v.0, k.v.1)
        );
    }

    #[test]
    fn icmpv4_frag_needed_quoting_tcp() {
        let mtu = 1400u16.to_be_bytes();
        let rest = [0, 0, mtu[0], mtu[1]];
        // The classic 8 bytes of TCP, a full TCP header, 548 bytes (RFC 1812
        // routers quote up to 576 total), the whole segment.
        for quote in [Some(8), Some(20), Some(548), None] {
            check_icmp_case(false, 3, 4, rest, true, quote);
        }
    }

    #[test]
    fn icmpv6_packet_too_big_quoting_tcp() {
        let rest = 1280u32.to_be_bytes();
        for quote in [Some(8), Some(20), Some(1184), None] {
            check_icmp_case(true, 2, 0, rest, true, quote);
        }
    }

    #[test]
    fn icmp_other_errors_and_udp() {
        for (v6, ty, code) in [
            (false, 3, 3),
            (false, 11, 0),
            (false, 12, 0),
            (true, 1, 4),
            (true, 3, 0),
            (true, 4, 0),
        ] {
            for tcp in [true, false] {
                check_icmp_case(v6, ty, code, [0, 0, 0, 0], tcp, Some(8));
                check_icmp_case(v6, ty, code, [0, 0, 0, 0], tcp, None);
            }
        }
    }

    #[test]
    fn icmp_quote_with_udp_zero_checksum() {
        let k = nat_case(false);
        let mut tmpl = Pkt::simple(false, k.l.0, k.b.0, k.l.1, k.b.1);
        tmpl.udp_zero = true;
        let (translated, _) = ip_packet(&tmpl);
        let mut f = icmp_frame(k.r, k.l.0, 3, 3, [0; 4], &translated);
        let parsed = parse_frame(&f).unwrap();
        rewrite_icmp_error(
            &mut f,
            &parsed,
            Some(k.v.0),
            Some(k.c.0),
            Some(k.c),
            Some(k.v),
        )
        .unwrap();
        let mut orig = tmpl.clone();
        (orig.src, orig.sport, orig.dst, orig.dport) = (k.c.0, k.c.1, k.v.0, k.v.1);
        let (original, _) = ip_packet(&orig);
        assert_eq!(f, icmp_frame(k.v.0, k.c.0, 3, 3, [0; 4], &original));
    }

    #[test]
    fn icmp_not_about_a_flow() {
        let k = nat_case(false);
        let tmpl = Pkt::simple(true, k.l.0, k.b.0, k.l.1, k.b.1);
        let (translated, hl) = ip_packet(&tmpl);
        let none = |f: &[u8], why: NatError| {
            let parsed = parse_frame(f).unwrap();
            assert_eq!(icmp_error_inner(f, &parsed), None);
            let mut g = f.to_vec();
            assert_eq!(
                rewrite_icmp_error(&mut g, &parsed, None, Some(k.c.0), Some(k.c), Some(k.v)),
                Err(why)
            );
            assert_eq!(g, f);
        };
        // Echo request, redirect (type 5): not an error about a flow.
        none(
            &icmp_frame(k.r, k.l.0, 8, 0, [0; 4], &translated),
            NatError::NotIcmpError,
        );
        none(
            &icmp_frame(k.r, k.l.0, 5, 1, [10, 0, 0, 1], &translated),
            NatError::NotIcmpError,
        );
        // Quote cut inside the ports.
        none(
            &icmp_frame(k.r, k.l.0, 3, 4, [0; 4], &translated[..hl + 7]),
            NatError::BadQuote,
        );
        // Quote cut inside the IP header.
        none(
            &icmp_frame(k.r, k.l.0, 3, 4, [0; 4], &translated[..19]),
            NatError::BadQuote,
        );
        // Garbage version.
        let mut bad = translated.clone();
        bad[0] = 0x55;
        none(
            &icmp_frame(k.r, k.l.0, 3, 4, [0; 4], &bad),
            NatError::BadQuote,
        );
        // A quoted non-first fragment has no ports.
        let mut frag = translated.clone();
        frag[6..8].copy_from_slice(&[0, 1]);
        none(
            &icmp_frame(k.r, k.l.0, 3, 4, [0; 4], &frag),
            NatError::BadQuote,
        );
        // A quoted ICMP echo is not a TCP/UDP flow.
        let mut echo = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 2, 0, 20], 64)
            .icmpv4_echo_request(7, 7)
            .write(&mut echo, b"ping")
            .unwrap();
        none(
            &icmp_frame(k.r, k.l.0, 3, 1, [0; 4], &echo),
            NatError::UnsupportedProto,
        );
        // ICMPv6 quoting IPv4 (wrong version for the family).
        let k6 = nat_case(true);
        none(
            &icmp_frame(k6.r, k6.l.0, 1, 0, [0; 4], &translated),
            NatError::BadQuote,
        );
        // Family mismatch in the arguments.
        let f = icmp_frame(k.r, k.l.0, 3, 4, [0; 4], &translated);
        let parsed = parse_frame(&f).unwrap();
        let mut g = f.clone();
        assert_eq!(
            rewrite_icmp_error(&mut g, &parsed, None, Some(k6.c.0), None, None),
            Err(NatError::FamilyMismatch)
        );
        assert_eq!(
            rewrite_icmp_error(&mut g, &parsed, None, None, Some(k6.c), None),
            Err(NatError::FamilyMismatch)
        );
        assert_eq!(g, f);
        // Not an ICMP packet at all.
        let tcp = frame(&tmpl);
        let parsed = parse_frame(&tcp).unwrap();
        assert_eq!(icmp_error_inner(&tcp, &parsed), None);
    }

    #[test]
    fn counter_names_are_unique() {
        let names: std::collections::HashSet<_> =
            NatError::ALL.iter().map(|e| e.counter_name()).collect();
        assert_eq!(names.len(), NatError::ALL.len());
        assert_eq!(NatError::Fragment.to_string(), "nat_fragment");
        assert_eq!(TtlExpired.to_string(), "ttl_expired");
    }

    // ---------------------------------------------------------------------------
    // Property tests.

    fn tcp_options() -> impl Strategy<Value = Vec<u8>> {
        let chunk = prop_oneof![
            Just(vec![1u8, 1, 1, 1]),
            any::<u16>().prop_map(|m| vec![2, 4, (m >> 8) as u8, m as u8]),
            Just(vec![1, 3, 3, 7]),
            Just(vec![4, 2, 1, 1]),
        ];
        proptest::collection::vec(chunk, 0..=10).prop_map(|c| c.concat())
    }

    prop_compose! {
        fn pkt_any(v6: bool)(
            tcp in any::<bool>(),
            (src, dst, sport, dport) in (any::<u128>(), any::<u128>(), any::<u16>(), any::<u16>()),
            (ttl, ident, tos, flow_label, df) in (any::<u8>(), any::<u16>(), any::<u8>(), any::<u32>(), any::<bool>()),
            v4_options in proptest::collection::vec(any::<[u8; 4]>(), 0..=10),
            v6_dest_opts in any::<bool>(),
            (seq, ack, window, flags) in (any::<u32>(), any::<u32>(), any::<u16>(), any::<u8>()),
            tcp_options in tcp_options(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            udp_zero in any::<bool>(),
            vlan in proptest::option::of(0u16..4095),
            pad in proptest::collection::vec(any::<u8>(), 0..8),
        ) -> Pkt {
            Pkt {
                tcp,
                src: addr(v6, src),
                dst: addr(v6, dst),
                sport,
                dport,
                ttl,
                ident,
                tos,
                flow_label,
                df,
                // NOP-filled so that the options are well-formed for any parser.
                v4_options: vec![1u8; v4_options.len() * 4],
                v6_dest_opts,
                v6_routing: None,
                seq,
                ack,
                window,
                flags,
                tcp_options,
                payload,
                udp_zero: udp_zero && !v6,
                vlan,
                pad,
            }
        }
    }

    fn pkt() -> impl Strategy<Value = Pkt> {
        any::<bool>().prop_flat_map(pkt_any)
    }

    /// New address (as a raw value mapped to the packet's family) and port.
    fn side() -> impl Strategy<Value = Option<(u128, u16)>> {
        proptest::option::weighted(0.75, (any::<u128>(), any::<u16>()))
    }

    proptest! {
        #[test]
        fn rewrite_addrs_equals_full_recomputation(p in pkt(), ns in side(), nd in side()) {
            let v6 = p.v6();
            let src = ns.map(|(a, port)| (addr(v6, a), port));
            let dst = nd.map(|(a, port)| (addr(v6, a), port));
            let mut f = frame(&p);
            let parsed = parse_frame(&f).unwrap();
            rewrite_addrs(&mut f, &parsed, src, dst).unwrap();
            let mut q = p.clone();
            if let Some((a, port)) = src {
                (q.src, q.sport) = (a, port);
            }
            if let Some((a, port)) = dst {
                (q.dst, q.dport) = (a, port);
            }
            prop_assert_eq!(&f, &frame(&q));
            assert_checksums_valid(&f);
            assert_etherparse_sees(&f, q.src, q.dst, q.sport, q.dport);
        }

        #[test]
        fn ttl_decrement_equals_rebuild(p in pkt()) {
            let mut f = frame(&p);
            let parsed = parse_frame(&f).unwrap();
            let r = decrement_ttl(&mut f, &parsed);
            if p.ttl <= 1 {
                prop_assert_eq!(r, Err(TtlExpired));
                prop_assert_eq!(&f, &frame(&p));
            } else {
                prop_assert_eq!(r, Ok(()));
                let mut q = p.clone();
                q.ttl -= 1;
                prop_assert_eq!(&f, &frame(&q));
            }
        }
    }

    #[derive(Debug, Clone)]
    struct IcmpCase {
        /// The quoted packet as the appliance sent it (L:lp -> B:bp).
        inner: Pkt,
        /// The flow as the client sees it (C:cp -> V:vp).
        client: (u128, u16),
        vip: (u128, u16),
        router: u128,
        new_outer_src: Option<u128>,
        /// Which of outer dst / inner src / inner dst to rewrite.
        rewrite: (bool, bool, bool),
        ty: u8,
        code: u8,
        rest: [u8; 4],
        /// Quoted L4 bytes; `None` = the whole packet.
        quote_l4: Option<usize>,
    }

    fn icmp_case() -> impl Strategy<Value = IcmpCase> {
        any::<bool>().prop_flat_map(|v6| {
            let types = if v6 {
                prop_oneof![
                    (Just(1u8), 0u8..7),
                    (Just(2u8), Just(0u8)),
                    (Just(3u8), 0u8..2),
                    (Just(4u8), 0u8..3)
                ]
                .boxed()
            } else {
                prop_oneof![
                    (Just(3u8), 0u8..16),
                    (Just(3u8), Just(4u8)),
                    (Just(11u8), 0u8..2),
                    (Just(12u8), 0u8..3)
                ]
                .boxed()
            };
            (
                pkt_any(v6),
                (any::<u128>(), any::<u16>()),
                (any::<u128>(), any::<u16>()),
                any::<u128>(),
                proptest::option::of(any::<u128>()),
                any::<(bool, bool, bool)>(),
                types,
                any::<[u8; 4]>(),
                proptest::option::of(prop_oneof![Just(8usize), Just(18), Just(20), 8usize..400]),
            )
                .prop_map(
                    |(
                        inner,
                        client,
                        vip,
                        router,
                        new_outer_src,
                        rewrite,
                        (ty, code),
                        rest,
                        quote_l4,
                    )| {
                        IcmpCase {
                            inner,
                            client,
                            vip,
                            router,
                            new_outer_src,
                            rewrite,
                            ty,
                            code,
                            rest,
                            quote_l4,
                        }
                    },
                )
        })
    }

    /// Rewrites the ICMP error of `c` and compares it with the frame built from
    /// scratch around the translated quote.
    fn rewrite_matches_rebuild(c: &IcmpCase) -> Result<(), TestCaseError> {
        let t = &c.inner;
        let v6 = t.v6();
        let (translated, hl) = ip_packet(t);
        let qlen = c
            .quote_l4
            .map_or(translated.len(), |n| (hl + n).min(translated.len()));
        let router = addr(v6, c.router);
        let mut f = icmp_frame(router, t.src, c.ty, c.code, c.rest, &translated[..qlen]);
        let parsed = parse_frame(&f).unwrap();
        prop_assert_eq!(
            icmp_error_inner(&f, &parsed),
            Some(InnerFlow {
                v6,
                proto: if t.tcp { ip_proto::TCP } else { ip_proto::UDP },
                src: t.src,
                dst: t.dst,
                sport: t.sport,
                dport: t.dport,
            })
        );
        let client = (addr(v6, c.client.0), c.client.1);
        let vip = (addr(v6, c.vip.0), c.vip.1);
        let outer_src = c.new_outer_src.map(|a| addr(v6, a));
        let outer_dst = c.rewrite.0.then_some(client.0);
        let inner_src = c.rewrite.1.then_some(client);
        let inner_dst = c.rewrite.2.then_some(vip);
        rewrite_icmp_error(&mut f, &parsed, outer_src, outer_dst, inner_src, inner_dst).unwrap();

        let mut orig = t.clone();
        if let Some((a, port)) = inner_src {
            (orig.src, orig.sport) = (a, port);
        }
        if let Some((a, port)) = inner_dst {
            (orig.dst, orig.dport) = (a, port);
        }
        let (original, _) = ip_packet(&orig);
        let mut quote = original[..qlen].to_vec();
        // A quote that ends inside the L4 checksum field keeps its half: the
        // other half (and with it the carry) is unknown, so the field cannot
        // be updated.
        let csum_at = hl + if t.tcp { 16 } else { 6 };
        if qlen == csum_at + 1 {
            quote[csum_at] = translated[csum_at];
        }
        let want = icmp_frame(
            outer_src.unwrap_or(router),
            outer_dst.unwrap_or(t.src),
            c.ty,
            c.code,
            c.rest,
            &quote,
        );
        prop_assert_eq!(&f, &want);
        assert_icmp_checksums_valid(&f);
        Ok(())
    }

    proptest! {
        #[test]
        fn icmp_error_rewrite_equals_rebuild(c in icmp_case()) {
            rewrite_matches_rebuild(&c)?;
        }
    }

    /// Found by the property above: an all-zero TCP quote cut inside its
    /// checksum field, whose ones'-complement sums land on zero.
    #[test]
    fn icmp_error_rewrite_of_all_zero_quote() {
        let zero = addr(true, 0);
        let mut inner = Pkt::simple(true, zero, zero, 0, 0);
        (inner.ttl, inner.ident, inner.df) = (0, 0, false);
        (inner.seq, inner.ack, inner.window, inner.flags) = (0, 0, 0, 0);
        inner.payload.clear();
        let c = IcmpCase {
            inner,
            client: (0, 230),
            vip: (0, 0),
            router: 0,
            new_outer_src: None,
            rewrite: (false, true, false),
            ty: 4,
            code: 0,
            rest: [0; 4],
            quote_l4: Some(17),
        };
        rewrite_matches_rebuild(&c).unwrap();
    }

    // ---------------------------------------------------------------------------
    // No panics, no writes outside the packet, untouched on error.

    #[derive(Debug, Clone)]
    struct Args {
        src: Option<(IpAddr, u16)>,
        dst: Option<(IpAddr, u16)>,
        outer_src: Option<IpAddr>,
        outer_dst: Option<IpAddr>,
    }

    fn any_addr() -> impl Strategy<Value = IpAddr> {
        (any::<bool>(), any::<u128>()).prop_map(|(v6, a)| addr(v6, a))
    }

    fn args() -> impl Strategy<Value = Args> {
        (
            proptest::option::of((any_addr(), any::<u16>())),
            proptest::option::of((any_addr(), any::<u16>())),
            proptest::option::of(any_addr()),
            proptest::option::of(any_addr()),
        )
            .prop_map(|(src, dst, outer_src, outer_dst)| Args {
                src,
                dst,
                outer_src,
                outer_dst,
            })
    }

    /// Run every function on `buf` with `p`: none may panic, a refused rewrite
    /// leaves the frame alone, and no write lands outside `p`'s IP packet.
    fn exercise(buf: &[u8], p: &Parsed, a: &Args) {
        let outside_unchanged = |f: &[u8]| {
            let (lo, hi) = (p.l3_offset.min(buf.len()), p.l3_end.min(buf.len()));
            assert_eq!(&f[..lo], &buf[..lo]);
            if hi >= lo {
                assert_eq!(&f[hi..], &buf[hi..]);
            }
        };

        let mut f = buf.to_vec();
        if rewrite_addrs(&mut f, p, a.src, a.dst).is_err() {
            assert_eq!(f, buf);
        }
        outside_unchanged(&f);

        let mut f = buf.to_vec();
        if decrement_ttl(&mut f, p).is_err() {
            assert_eq!(f, buf);
        }
        outside_unchanged(&f);

        let inner = icmp_error_inner(buf, p);
        let mut f = buf.to_vec();
        // With nothing to change there is no family to mismatch: it succeeds
        // exactly when the error is understood, and changes nothing.
        assert_eq!(
            rewrite_icmp_error(&mut f, p, None, None, None, None).is_ok(),
            inner.is_some()
        );
        assert_eq!(f, buf);
        if rewrite_icmp_error(&mut f, p, a.outer_src, a.outer_dst, a.src, a.dst).is_err() {
            assert_eq!(f, buf);
        }
        outside_unchanged(&f);

        let mut f = buf.to_vec();
        set_macs(&mut f, [1; 6], [2; 6]);
        assert_eq!(f.len(), buf.len());
    }

    fn parse_all(buf: &[u8]) -> Vec<Parsed> {
        let lax = ParseOptions {
            verify_ipv4_checksum: false,
        };
        [parse_frame(buf).ok(), parse_frame_with(buf, &lax).ok()]
            .into_iter()
            .flatten()
            .collect()
    }

    /// Random bytes behind an Ethernet header of a chosen type, with the IP
    /// version, protocol and length fields made plausible so that the parser
    /// gets past them often.
    fn ip_ish_frame() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<bool>(),
            prop_oneof![
                Just(1u8),
                Just(6),
                Just(17),
                Just(58),
                Just(0),
                Just(44),
                any::<u8>()
            ],
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..200),
        )
            .prop_map(|(v6, proto, fix_len, mut body)| {
                let mut f = vec![0u8; 12];
                f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
                if v6 {
                    if body.len() >= 8 {
                        body[0] = 0x60;
                        body[6] = proto;
                        if fix_len && body.len() >= 40 {
                            let pl = (body.len() - 40) as u16;
                            body[4..6].copy_from_slice(&pl.to_be_bytes());
                        }
                    }
                } else if body.len() >= 20 {
                    body[0] = 0x45;
                    body[9] = proto;
                    body[6] &= 0x40; // mostly not a fragment
                    if fix_len {
                        let tl = body.len() as u16;
                        body[2..4].copy_from_slice(&tl.to_be_bytes());
                    }
                }
                f.extend_from_slice(&body);
                f
            })
    }

    fn any_parsed() -> impl Strategy<Value = Parsed> {
        (
            prop_oneof![
                Just(L3Kind::Ipv4),
                Just(L3Kind::Ipv6),
                Just(L3Kind::Arp),
                Just(L3Kind::Other(0x88cc))
            ],
            (
                0usize..80,
                0usize..400,
                0usize..400,
                0usize..400,
                0usize..400,
            ),
            prop_oneof![Just(1u8), Just(6), Just(17), Just(58), any::<u8>()],
            prop_oneof![
                Just(Fragment::None),
                Just(Fragment::First),
                Just(Fragment::NonFirst)
            ],
            any::<u8>(),
        )
            .prop_map(
                |(
                    l3,
                    (l3_offset, l3_end, l4_offset, l4_len, payload_offset),
                    l4_proto,
                    fragment,
                    ttl,
                )| {
                    Parsed {
                        vlan_tci: None,
                        l3,
                        l3_offset,
                        l3_end,
                        ttl,
                        l4_proto,
                        l4_offset,
                        l4_len,
                        payload_offset,
                        fragment,
                        ports: Some(Ports { src: 1, dst: 2 }),
                        tcp_flags: None,
                        tcp_flags_valid: true,
                        icmp: Some((3, 4)),
                        nic_l4_checksum: Default::default(),
                    }
                },
            )
    }

    /// A valid TCP/UDP frame or ICMP error frame to mutate.
    fn valid_frame() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            pkt().prop_map(|p| frame(&p)),
            icmp_case().prop_map(|c| {
                let (translated, hl) = ip_packet(&c.inner);
                let qlen = c
                    .quote_l4
                    .map_or(translated.len(), |n| (hl + n).min(translated.len()));
                icmp_frame(
                    addr(c.inner.v6(), c.router),
                    c.inner.src,
                    c.ty,
                    c.code,
                    c.rest,
                    &translated[..qlen],
                )
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..160), a in args(), p in any_parsed()) {
            for parsed in parse_all(&buf) {
                exercise(&buf, &parsed, &a);
            }
            exercise(&buf, &p, &a);
        }

        #[test]
        fn ip_ish_frames_never_panic(buf in ip_ish_frame(), a in args(), p in any_parsed()) {
            for parsed in parse_all(&buf) {
                exercise(&buf, &parsed, &a);
            }
            exercise(&buf, &p, &a);
        }

        #[test]
        fn mutated_frames_never_panic(
            buf in valid_frame(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in proptest::option::of(any::<prop::sample::Index>()),
            a in args(),
        ) {
            let stale = parse_frame(&buf).unwrap();
            let mut m = buf.clone();
            for (i, x) in &flips {
                let at = i.index(m.len());
                m[at] ^= x;
            }
            if let Some(c) = cut {
                m.truncate(c.index(m.len() + 1));
            }
            for parsed in parse_all(&m) {
                exercise(&m, &parsed, &a);
            }
            // The Parsed of the frame before it was mutated or cut.
            exercise(&m, &stale, &a);
        }
    }
}
