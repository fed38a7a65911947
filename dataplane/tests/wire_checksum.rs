//! RFC 1071 sums and RFC 1624 incremental updates against full
//! recomputation (and against etherparse's independent implementation).

use std::net::{Ipv4Addr, Ipv6Addr};

use dataplane::wire::checksum::{self, update16, update32};
use dataplane::wire::ip_proto;
use dataplane::wire::{Ipv4Packet, TcpPacket, UdpPacket};
use proptest::prelude::*;

/// Straightforward reference: 16-bit words, end-around carry.
fn reference_sum(data: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    for c in data.chunks(2) {
        let w = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
        acc += u32::from(w);
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[derive(Debug, Clone)]
enum Addrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

fn addrs() -> impl Strategy<Value = Addrs> {
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Addrs::V4(a.into(), b.into())),
        (any::<u128>(), any::<u128>()).prop_map(|(a, b)| Addrs::V6(a.into(), b.into())),
    ]
}

#[derive(Debug, Clone)]
enum Change {
    SrcPort(u16),
    DstPort(u16),
    Seq(u32),
    Ack(u32),
    SrcAddr(u128),
    DstAddr(u128),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        any::<u16>().prop_map(Change::SrcPort),
        any::<u16>().prop_map(Change::DstPort),
        any::<u32>().prop_map(Change::Seq),
        any::<u32>().prop_map(Change::Ack),
        any::<u128>().prop_map(Change::SrcAddr),
        any::<u128>().prop_map(Change::DstAddr),
    ]
}

/// Well-formed random TCP options, padded to a multiple of 4, at most 40.
fn tcp_options() -> impl Strategy<Value = Vec<u8>> {
    let one = prop_oneof![
        Just(vec![1u8]),
        any::<u16>().prop_map(|m| vec![2, 4, (m >> 8) as u8, m as u8]),
        any::<u8>().prop_map(|s| vec![3, 3, s]),
        Just(vec![4, 2]),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| {
            let mut v = vec![8, 10];
            v.extend_from_slice(&a.to_be_bytes());
            v.extend_from_slice(&b.to_be_bytes());
            v
        }),
        proptest::collection::vec(any::<u32>(), 2..=4).prop_map(|e| {
            let n = e.len() / 2;
            let mut v = vec![5, (2 + 8 * n) as u8];
            for x in &e[..2 * n] {
                v.extend_from_slice(&x.to_be_bytes());
            }
            v
        }),
    ];
    proptest::collection::vec(one, 0..6).prop_map(|opts| {
        let mut v = Vec::new();
        for o in opts {
            if v.len() + o.len() <= 40 {
                v.extend_from_slice(&o);
            }
        }
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    })
}

fn tcp_segment(
    ports: (u16, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    opts: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&ports.0.to_be_bytes());
    t.extend_from_slice(&ports.1.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.push(((20 + opts.len()) / 4 * 16) as u8);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t.extend_from_slice(payload);
    t
}

fn fill_tcp(t: &mut [u8], a: &Addrs) {
    let mut v = TcpPacket::new_checked(t).unwrap();
    match a {
        Addrs::V4(s, d) => v.fill_checksum_v4(*s, *d),
        Addrs::V6(s, d) => v.fill_checksum_v6(s, d),
    }
}

fn verify_tcp(t: &[u8], a: &Addrs) -> bool {
    let v = TcpPacket::new_checked(t).unwrap();
    match a {
        Addrs::V4(s, d) => v.verify_checksum_v4(*s, *d),
        Addrs::V6(s, d) => v.verify_checksum_v6(s, d),
    }
}

/// Apply `c` incrementally to segment `t` and the address pair.
fn apply_tcp(t: &mut [u8], a: &mut Addrs, c: &Change) {
    let mut v = TcpPacket::new_checked(t).unwrap();
    match (c, a) {
        (Change::SrcPort(p), _) => v.rewrite_src_port(*p),
        (Change::DstPort(p), _) => v.rewrite_dst_port(*p),
        (Change::Seq(s), _) => v.rewrite_seq_number(*s),
        (Change::Ack(s), _) => v.rewrite_ack_number(*s),
        (Change::SrcAddr(n), Addrs::V4(s, _)) => {
            let n = Ipv4Addr::from(*n as u32);
            v.adjust_checksum_v4_addr(*s, n);
            *s = n;
        }
        (Change::DstAddr(n), Addrs::V4(_, d)) => {
            let n = Ipv4Addr::from(*n as u32);
            v.adjust_checksum_v4_addr(*d, n);
            *d = n;
        }
        (Change::SrcAddr(n), Addrs::V6(s, _)) => {
            let n = Ipv6Addr::from(*n);
            v.adjust_checksum_v6_addr(s, &n);
            *s = n;
        }
        (Change::DstAddr(n), Addrs::V6(_, d)) => {
            let n = Ipv6Addr::from(*n);
            v.adjust_checksum_v6_addr(d, &n);
            *d = n;
        }
    }
}

fn apply_udp(u: &mut [u8], a: &mut Addrs, c: &Change) {
    let mut v = UdpPacket::new_checked(u).unwrap();
    match (c, a) {
        (Change::SrcPort(p), _) => v.rewrite_src_port(*p),
        (Change::DstPort(p), _) => v.rewrite_dst_port(*p),
        // UDP has no seq/ack: reuse them as more port changes.
        (Change::Seq(x) | Change::Ack(x), _) => v.rewrite_dst_port(*x as u16),
        (Change::SrcAddr(n), Addrs::V4(s, _)) => {
            let n = Ipv4Addr::from(*n as u32);
            v.adjust_checksum_v4_addr(*s, n);
            *s = n;
        }
        (Change::DstAddr(n), Addrs::V4(_, d)) => {
            let n = Ipv4Addr::from(*n as u32);
            v.adjust_checksum_v4_addr(*d, n);
            *d = n;
        }
        (Change::SrcAddr(n), Addrs::V6(s, _)) => {
            let n = Ipv6Addr::from(*n);
            v.adjust_checksum_v6_addr(s, &n);
            *s = n;
        }
        (Change::DstAddr(n), Addrs::V6(_, d)) => {
            let n = Ipv6Addr::from(*n);
            v.adjust_checksum_v6_addr(d, &n);
            *d = n;
        }
    }
}

fn udp_datagram(ports: (u16, u16), payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&ports.0.to_be_bytes());
    u.extend_from_slice(&ports.1.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn fill_udp(u: &mut [u8], a: &Addrs) {
    let mut v = UdpPacket::new_checked(u).unwrap();
    match a {
        Addrs::V4(s, d) => v.fill_checksum_v4(*s, *d),
        Addrs::V6(s, d) => v.fill_checksum_v6(s, d),
    }
}

fn udp_csum(u: &[u8]) -> u16 {
    u16::from_be_bytes([u[6], u[7]])
}

fn tcp_csum(t: &[u8]) -> u16 {
    u16::from_be_bytes([t[16], t[17]])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sum_matches_reference(data in proptest::collection::vec(any::<u8>(), 0..1600)) {
        prop_assert_eq!(checksum::sum(&data), reference_sum(&data));
    }

    #[test]
    fn update_words_match_full(
        words in proptest::collection::vec(any::<u16>(), 4..64),
        idx in any::<prop::sample::Index>(),
        new16 in any::<u16>(),
        new32 in any::<u32>(),
    ) {
        let mut data: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        data[0] |= 0x40; // never all zero
        let hc = checksum::checksum(&data);
        // 16-bit word.
        let i = idx.index(words.len() - 1) * 2;
        let old = u16::from_be_bytes([data[i], data[i + 1]]);
        let mut d16 = data.clone();
        d16[i..i + 2].copy_from_slice(&new16.to_be_bytes());
        prop_assert_eq!(update16(hc, old, new16), checksum::checksum(&d16));
        // 32-bit field at any even offset.
        let old32 = u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        let mut d32 = data.clone();
        d32[i..i + 4].copy_from_slice(&new32.to_be_bytes());
        prop_assert_eq!(update32(hc, old32, new32), checksum::checksum(&d32));
        prop_assert_eq!(
            checksum::update_bytes(hc, &data[i..i + 4], &new32.to_be_bytes()),
            Some(checksum::checksum(&d32))
        );
        // 32-bit field at an odd offset.
        let j = i + 1;
        if j + 4 <= data.len() {
            let old = u32::from_be_bytes([data[j], data[j + 1], data[j + 2], data[j + 3]]);
            let mut d = data.clone();
            d[j..j + 4].copy_from_slice(&new32.to_be_bytes());
            prop_assert_eq!(checksum::update32_odd(hc, old, new32), checksum::checksum(&d));
            let old16 = u16::from_be_bytes([data[j], data[j + 1]]);
            let mut d = data.clone();
            d[j..j + 2].copy_from_slice(&new16.to_be_bytes());
            prop_assert_eq!(checksum::update16_odd(hc, old16, new16), checksum::checksum(&d));
        }
    }

    #[test]
    fn ipv4_header_incremental(
        tos in any::<u8>(), ident in any::<u16>(), ttl in any::<u8>(), proto in any::<u8>(),
        src in any::<u32>(), dst in any::<u32>(),
        opt_words in 0usize..=10, opt_byte in any::<u8>(),
        changes in proptest::collection::vec((0u8..3, any::<u32>()), 1..6),
    ) {
        let hl = 20 + 4 * opt_words;
        let mut h = vec![opt_byte; hl];
        h[0] = 0x40 | (hl / 4) as u8;
        h[1] = tos;
        h[2..4].copy_from_slice(&(hl as u16).to_be_bytes());
        h[4..6].copy_from_slice(&ident.to_be_bytes());
        h[6..8].copy_from_slice(&[0x40, 0]);
        h[8] = ttl;
        h[9] = proto;
        h[12..16].copy_from_slice(&src.to_be_bytes());
        h[16..20].copy_from_slice(&dst.to_be_bytes());
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.fill_checksum();
        prop_assert!(p.verify_checksum());
        // etherparse computes the same header checksum.
        let (eh, _) = etherparse::Ipv4Header::from_slice(p.header()).unwrap();
        prop_assert_eq!(eh.calc_header_checksum(), p.checksum());
        for (what, v) in changes {
            match what {
                0 => p.rewrite_ttl(v as u8),
                1 => p.rewrite_src_addr(v.into()),
                _ => p.rewrite_dst_addr(v.into()),
            }
        }
        let inc = p.checksum();
        p.fill_checksum();
        prop_assert_eq!(inc, p.checksum());
    }

    #[test]
    fn tcp_incremental_matches_full(
        a in addrs(),
        ports in (any::<u16>(), any::<u16>()),
        seq in any::<u32>(), ack in any::<u32>(), flags in any::<u8>(),
        opts in tcp_options(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        changes in proptest::collection::vec(change(), 1..8),
    ) {
        let mut a = a;
        let mut t = tcp_segment(ports, seq, ack, flags, &opts, &payload);
        fill_tcp(&mut t, &a);
        prop_assert!(verify_tcp(&t, &a));
        // Independent implementation agrees.
        let (eh, _) = etherparse::TcpHeader::from_slice(&t).unwrap();
        let theirs = match &a {
            Addrs::V4(s, d) => eh.calc_checksum_ipv4_raw(s.octets(), d.octets(), &payload).unwrap(),
            Addrs::V6(s, d) => eh.calc_checksum_ipv6_raw(s.octets(), d.octets(), &payload).unwrap(),
        };
        prop_assert_eq!(theirs, tcp_csum(&t));
        for c in &changes {
            apply_tcp(&mut t, &mut a, c);
        }
        let inc = tcp_csum(&t);
        prop_assert!(verify_tcp(&t, &a));
        fill_tcp(&mut t, &a);
        prop_assert_eq!(inc, tcp_csum(&t));
    }

    #[test]
    fn udp_incremental_matches_full(
        a in addrs(),
        ports in (any::<u16>(), any::<u16>()),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        no_checksum in any::<bool>(),
        changes in proptest::collection::vec(change(), 1..8),
    ) {
        let mut a = a;
        let mut u = udp_datagram(ports, &payload);
        let v4 = matches!(a, Addrs::V4(..));
        let none = v4 && no_checksum;
        if !none {
            fill_udp(&mut u, &a);
            let eh = etherparse::UdpHeader::from_slice(&u).unwrap().0;
            let theirs = match &a {
                Addrs::V4(s, d) => eh.calc_checksum_ipv4_raw(s.octets(), d.octets(), &payload).unwrap(),
                Addrs::V6(s, d) => eh.calc_checksum_ipv6_raw(s.octets(), d.octets(), &payload).unwrap(),
            };
            prop_assert_eq!(theirs, udp_csum(&u));
        }
        for c in &changes {
            apply_udp(&mut u, &mut a, c);
        }
        let inc = udp_csum(&u);
        if none {
            // "No checksum" survives every rewrite.
            prop_assert_eq!(inc, 0);
        } else {
            prop_assert_ne!(inc, 0);
            fill_udp(&mut u, &a);
            prop_assert_eq!(inc, udp_csum(&u));
            let v = UdpPacket::new_checked(&u[..]).unwrap();
            match &a {
                Addrs::V4(s, d) => prop_assert!(v.verify_checksum_v4(*s, *d)),
                Addrs::V6(s, d) => prop_assert!(v.verify_checksum_v6(s, d)),
            }
        }
    }

    /// Steer a rewrite so the new checksum computes to zero: it must go on
    /// the wire as 0xFFFF, both incrementally and in full.
    #[test]
    fn udp_computed_zero_is_sent_as_ffff(
        a in addrs(),
        ports in (any::<u16>(), any::<u16>()),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut u = udp_datagram(ports, &payload);
        fill_udp(&mut u, &a);
        let c = udp_csum(&u);
        // ~C + ~p + p' = 0 (one's complement)  <=>  p' = C + p.
        let target = checksum::add(c, ports.0);
        let mut v = UdpPacket::new_checked(&mut u[..]).unwrap();
        v.rewrite_src_port(target);
        prop_assert_eq!(v.checksum(), 0xFFFF);
        fill_udp(&mut u, &a);
        prop_assert_eq!(udp_csum(&u), 0xFFFF);
        // And 0xFFFF verifies.
        let v = UdpPacket::new_checked(&u[..]).unwrap();
        match &a {
            Addrs::V4(s, d) => prop_assert!(v.verify_checksum_v4(*s, *d)),
            Addrs::V6(s, d) => prop_assert!(v.verify_checksum_v6(s, d)),
        }
    }

    /// SACK edges and MSS at any alignment (leading NOPs), rewritten in
    /// place with incremental checksum updates.
    #[test]
    fn sack_and_mss_rewrite(
        a in addrs(),
        nops in 0usize..4,
        mss in any::<u16>(), clamp in any::<u16>(),
        edges in proptest::collection::vec(any::<u32>(), 1..=3),
        delta in any::<u32>(),
        payload in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut opts = vec![1u8; nops];
        opts.extend_from_slice(&[2, 4, (mss >> 8) as u8, mss as u8]);
        opts.push(5);
        opts.push((2 + 8 * edges.len()) as u8);
        for e in &edges {
            opts.extend_from_slice(&e.to_be_bytes());
            opts.extend_from_slice(&e.wrapping_add(1000).to_be_bytes());
        }
        while opts.len() % 4 != 0 {
            opts.push(0);
        }
        prop_assume!(opts.len() <= 40);
        let mut t = tcp_segment((1, 2), 3, 4, 0x10, &opts, &payload);
        fill_tcp(&mut t, &a);
        let mut v = TcpPacket::new_checked(&mut t[..]).unwrap();
        v.map_sack_edges(|e| e.wrapping_sub(delta)).unwrap();
        let clamped = v.clamp_mss(clamp).unwrap();
        prop_assert_eq!(clamped, (mss > clamp).then_some(mss));
        let blocks: Vec<(u32, u32)> = v
            .options_iter()
            .find_map(|o| match o.unwrap() {
                dataplane::wire::TcpOption::Sack(b) => Some(b.collect()),
                _ => None,
            })
            .unwrap();
        let want: Vec<(u32, u32)> = edges
            .iter()
            .map(|e| (e.wrapping_sub(delta), e.wrapping_add(1000).wrapping_sub(delta)))
            .collect();
        prop_assert_eq!(blocks, want);
        let inc = tcp_csum(&t);
        prop_assert!(verify_tcp(&t, &a));
        fill_tcp(&mut t, &a);
        prop_assert_eq!(inc, tcp_csum(&t));
    }
}

#[test]
fn pseudo_headers_match_etherparse_layout() {
    let s = Ipv4Addr::new(10, 0, 0, 1);
    let d = Ipv4Addr::new(10, 0, 0, 2);
    let mut b = Vec::new();
    b.extend_from_slice(&s.octets());
    b.extend_from_slice(&d.octets());
    b.extend_from_slice(&[0, ip_proto::TCP, 0x01, 0x00]);
    assert_eq!(
        checksum::pseudo_header_v4(s, d, ip_proto::TCP, 256),
        reference_sum(&b)
    );
}

#[test]
fn malformed_options_refuse_rewrites() {
    let mut t = tcp_segment((1, 2), 3, 4, 0x10, &[5, 9, 0, 0, 0, 0, 0, 0], &[]);
    fill_tcp(&mut t, &Addrs::V4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST));
    let before = t.clone();
    let mut v = TcpPacket::new_checked(&mut t[..]).unwrap();
    assert!(v.map_sack_edges(|e| e + 1).is_err());
    assert!(v.clamp_mss(1).is_err());
    assert_eq!(t, before);
}
