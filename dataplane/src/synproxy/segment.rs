//! The segments a SYN proxy writes, in place over a received frame: the
//! cookie SYN-ACK that answers a client's SYN, and the SYN border sends the
//! backend in the client's name once the client's ACK proved the cookie.
//!
//! Both keep everything before the IP header (Ethernet, a VLAN tag) and
//! write a fresh IP header without options or extension headers and a TCP
//! header with the options laid out as Linux lays them out, checksums
//! computed in full. Sans-IO, no allocation.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::cookie::{self, CookieSecret, SynOptions};
use crate::conntrack::FlowKey;
use crate::ppv2::seg::Seg;
use crate::wire::ethernet;
use crate::wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::wire::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::wire::tcp::{self, TcpPacket, TcpRepr};
use crate::wire::{ip_proto, TcpFlags, TcpOption};

/// TTL / hop limit of the segments border writes.
pub const TTL: u8 = 64;

/// What border announces in its SYN-ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    /// Its MSS.
    pub mss: u16,
    /// Its window scale shift (sent only when the client sent one).
    pub wscale: u8,
    /// The SYN-ACK's window (never scaled: RFC 7323 §2.2).
    pub window: u16,
}

/// What a SYN's options say, with its TSval when it has timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynSaid {
    pub opts: SynOptions,
    pub tsval: u32,
}

/// The options of a client's SYN (`tcp`: its TCP header and options).
/// Malformed options end the walk; what was read so far counts.
pub fn syn_options(tcp: &[u8]) -> SynSaid {
    let mut said = SynSaid {
        opts: SynOptions {
            mss: 536,
            wscale: None,
            sack: false,
            ts: false,
        },
        tsval: 0,
    };
    let Ok(t) = crate::wire::TcpPacket::new_checked(tcp) else {
        return said;
    };
    for o in t.options_iter() {
        match o {
            Ok(TcpOption::Mss(m)) => said.opts.mss = m,
            Ok(TcpOption::WindowScale(s)) => said.opts.wscale = Some(s.min(cookie::WS_MAX)),
            Ok(TcpOption::SackPermitted) => said.opts.sack = true,
            Ok(TcpOption::Timestamps { tsval, .. }) => {
                said.opts.ts = true;
                said.tsval = tsval;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    said
}

/// The TSval and TSecr of a segment's timestamps option, if any.
pub fn timestamps(tcp: &[u8]) -> Option<(u32, u32)> {
    let t = crate::wire::TcpPacket::new_checked(tcp).ok()?;
    let mut it = t.options_iter();
    it.find_map(|o| match o {
        Ok(TcpOption::Timestamps { tsval, tsecr }) => Some((tsval, tsecr)),
        _ => None,
    })
}

/// Whether the TCP checksum of segment `s` in `frame` verifies.
pub fn checksum_ok(frame: &[u8], s: &Seg) -> bool {
    let Ok(seg) = TcpPacket::new_checked(&frame[s.l4..s.end]) else {
        return false;
    };
    match addrs(frame, s) {
        Some(Addrs::V4(src, dst)) => seg.verify_checksum_v4(src, dst),
        Some(Addrs::V6(src, dst)) => seg.verify_checksum_v6(&src, &dst),
        None => false,
    }
}

/// The source and destination of an IP packet.
#[derive(Clone, Copy)]
enum Addrs {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
}

impl Addrs {
    /// The other way round: a reply's addresses.
    fn reversed(self) -> Addrs {
        match self {
            Addrs::V4(s, d) => Addrs::V4(d, s),
            Addrs::V6(s, d) => Addrs::V6(d, s),
        }
    }
}

/// The addresses of the IP packet of segment `s` in `f`.
fn addrs(f: &[u8], s: &Seg) -> Option<Addrs> {
    let ip = f.get(s.l3..)?;
    Some(if s.v6 {
        let h = Ipv6Packet::new_checked_truncated(ip).ok()?;
        Addrs::V6(h.src_addr(), h.dst_addr())
    } else {
        let h = Ipv4Packet::new_checked_truncated(ip).ok()?;
        Addrs::V4(h.src_addr(), h.dst_addr())
    })
}

/// TCP options as Linux lays them out in a SYN or SYN-ACK: MSS, then
/// SACK-permitted and timestamps (NOP-padded when one is missing), then
/// NOP and window scale. Returns the bytes written (a multiple of 4, at
/// most 20).
fn write_options(
    out: &mut [u8; 20],
    mss: u16,
    wscale: Option<u8>,
    sack: bool,
    ts: Option<(u32, u32)>,
) -> usize {
    let mut n = 0;
    // At most 20 bytes in all: every option fits.
    let mut put = |o: TcpOption| {
        n += out.get_mut(n..).map_or(0, |b| o.emit(b).unwrap_or(0));
    };
    put(TcpOption::Mss(mss));
    match (sack, ts) {
        (true, Some(_)) => put(TcpOption::SackPermitted),
        (false, Some(_)) => {
            put(TcpOption::Nop);
            put(TcpOption::Nop);
        }
        (true, None) => {
            put(TcpOption::Nop);
            put(TcpOption::Nop);
            put(TcpOption::SackPermitted);
        }
        (false, None) => {}
    }
    if let Some((tsval, tsecr)) = ts {
        put(TcpOption::Timestamps { tsval, tsecr });
    }
    if let Some(shift) = wscale {
        put(TcpOption::Nop);
        put(TcpOption::WindowScale(shift));
    }
    n
}

/// Writes the IP header (from and to `addrs`), the TCP header `head` and
/// `opts` at `l3` with both checksums. The segment carries no payload.
/// Returns the frame's new length, or `None` when `buf` has no room.
fn write_segment(
    buf: &mut [u8],
    l3: usize,
    addrs: Addrs,
    head: &TcpRepr,
    opts: &[u8],
) -> Option<usize> {
    let ip_len = match addrs {
        Addrs::V4(..) => ipv4::MIN_HEADER_LEN,
        Addrs::V6(..) => ipv6::HEADER_LEN,
    };
    let tcp_len = tcp::MIN_HEADER_LEN + opts.len();
    let end = l3 + ip_len + tcp_len;
    let packet = buf.get_mut(l3..end)?;
    let mut seg = head
        .emit_with_options(packet.get_mut(ip_len..)?, opts)
        .ok()?;
    match addrs {
        Addrs::V4(src, dst) => {
            seg.fill_checksum_v4(src, dst);
            let ip = Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: ip_proto::TCP,
                ttl: TTL,
                tos: 0,
                ident: 0,
                dont_frag: true,
                payload_len: tcp_len,
            };
            ip.emit(packet).ok()?;
        }
        Addrs::V6(src, dst) => {
            seg.fill_checksum_v6(&src, &dst);
            let ip = Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: ip_proto::TCP,
                hop_limit: TTL,
                traffic_class: 0,
                flow_label: 0,
                payload_len: tcp_len,
            };
            ip.emit(packet).ok()?;
        }
    }
    Some(end)
}

/// Rewrites the client's SYN `s` in `buf` (the frame plus room to grow)
/// into border's cookie SYN-ACK, sent back the way the SYN came: Ethernet
/// addresses swapped (from `our_mac`), VLAN tag kept, IP addresses and
/// ports swapped. `key` is the SYN's flow (client -> VIP). Returns the new
/// frame length, or `None` when `buf` is too small.
pub fn write_syn_ack(
    buf: &mut [u8],
    s: &Seg,
    our_mac: [u8; 6],
    secret: &CookieSecret,
    now_ms: u64,
    key: &FlowKey,
    announce: &Announce,
) -> Option<usize> {
    let said = syn_options(&buf[s.l4..s.end]);
    let tcp = TcpPacket::new_checked(&buf[s.l4..s.end]).ok()?;
    let client_isn = tcp.seq_number();
    let (sport, dport) = (tcp.src_port(), tcp.dst_port());
    let c = cookie::encode(secret, now_ms, key, client_isn, &said.opts);
    let ts = said
        .opts
        .ts
        .then(|| (cookie::synack_tsval(now_ms, c.ts_bits), said.tsval));
    let mut o = [0u8; 20];
    let wscale = said.opts.wscale.map(|_| announce.wscale);
    let n = write_options(&mut o, announce.mss, wscale, said.opts.sack, ts);
    let addrs = addrs(buf, s)?;
    let peer = ethernet::src_addr(buf).ok()?;
    let head = TcpRepr {
        src_port: dport,
        dst_port: sport,
        seq_number: c.isn,
        ack_number: client_isn.wrapping_add(1),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: announce.window,
        urgent_ptr: 0,
    };
    let end = write_segment(buf, s.l3, addrs.reversed(), &head, &o[..n])?;
    ethernet::set_addrs(buf, peer, our_mac).ok()?;
    Some(end)
}

/// Rewrites a client segment `s` in `buf` (of a connection whose cookie
/// carried `opts`, ISN `isn`) into the SYN the client would have sent the
/// backend: same addresses and ports, the client's ISN, the options from
/// the cookie, the segment's TSval with a zero TSecr, no payload. The
/// frame then goes the way of every client segment (NAT, PROXY). Returns
/// its length.
pub fn ack_into_syn(buf: &mut [u8], s: &Seg, opts: &SynOptions, isn: u32) -> Option<usize> {
    let tcp = TcpPacket::new_checked(&buf[s.l4..s.end]).ok()?;
    let (sport, dport, window) = (tcp.src_port(), tcp.dst_port(), tcp.window());
    let ts = if opts.ts {
        Some((timestamps(tcp.into_inner()).map_or(0, |(v, _)| v), 0))
    } else {
        None
    };
    let mut o = [0u8; 20];
    let n = write_options(&mut o, opts.mss, opts.wscale, opts.sack, ts);
    let addrs = addrs(buf, s)?;
    let head = TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq_number: isn,
        ack_number: 0,
        flags: TcpFlags::SYN,
        urgent_ptr: 0,
        // The client's window from its ACK, unscaled: the best guess of
        // what its SYN offered.
        window: match opts.wscale {
            Some(ws) => (u32::from(window) << ws).min(65535) as u16,
            None => window,
        },
    };
    write_segment(buf, s.l3, addrs, &head, &o[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ppv2::seg::locate;
    use crate::wire::parse_frame;
    use etherparse::{PacketBuilder, TcpHeader, TcpOptionElement};

    const SYN: u8 = TcpFlags::SYN.0;

    const OUR: [u8; 6] = [2, 0, 0, 0, 1, 1];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0xc1, 1];
    const SECRET: CookieSecret = CookieSecret::from_bytes(*b"0123456789abcdef");
    const ANN: Announce = Announce {
        mss: 1460,
        wscale: 7,
        window: 64240,
    };

    fn linux_opts() -> Vec<TcpOptionElement> {
        vec![
            TcpOptionElement::MaximumSegmentSize(1460),
            TcpOptionElement::SelectiveAcknowledgementPermitted,
            TcpOptionElement::Timestamp(0x0A0B_0C0D, 0),
            TcpOptionElement::Noop,
            TcpOptionElement::WindowScale(9),
        ]
    }

    /// A client SYN to 10.1.0.100:80 (or [2001:db8::64]:80), in a frame
    /// with 64 bytes of room to grow, behind VLAN tag `vlan` if any.
    fn syn(v6: bool, vlan: Option<u16>, opts: &[TcpOptionElement]) -> (Vec<u8>, usize) {
        let mut h = TcpHeader::new(40000, 80, 0xFFFF_FFF0, 64240);
        h.syn = true;
        h.set_options(opts).unwrap();
        let mut f = Vec::new();
        let mut s = [0u8; 16];
        s[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        let mut d = s;
        s[15] = 0x50;
        d[15] = 0x64;
        macro_rules! write {
            ($eth:expr) => {
                if v6 {
                    $eth.ipv6(s, d, 64)
                        .tcp_header(h)
                        .write(&mut f, &[])
                        .unwrap()
                } else {
                    $eth.ipv4([198, 51, 100, 7], [10, 1, 0, 100], 64)
                        .tcp_header(h)
                        .write(&mut f, &[])
                        .unwrap()
                }
            };
        }
        match vlan {
            Some(id) => {
                write!(PacketBuilder::ethernet2(PEER, OUR).single_vlan(id.try_into().unwrap()))
            }
            None => write!(PacketBuilder::ethernet2(PEER, OUR)),
        }
        let len = f.len();
        f.resize(len + 64, 0);
        (f, len)
    }

    fn key_of(f: &[u8]) -> FlowKey {
        let p = parse_frame(f).unwrap();
        let (s, d) = match p.l3 {
            crate::wire::L3Kind::Ipv4 => {
                let a = &f[p.l3_offset + 12..p.l3_offset + 20];
                return FlowKey::v4(
                    a[..4].try_into().unwrap(),
                    a[4..].try_into().unwrap(),
                    40000,
                    80,
                    6,
                );
            }
            _ => (
                f[p.l3_offset + 8..p.l3_offset + 24].try_into().unwrap(),
                f[p.l3_offset + 24..p.l3_offset + 40].try_into().unwrap(),
            ),
        };
        FlowKey::v6(s, d, 40000, 80, 6)
    }

    fn answer(f: &mut [u8], len: usize, now: u64) -> usize {
        let key = key_of(&f[..len]);
        let p = parse_frame(&f[..len]).unwrap();
        let s = locate(&f[..len], &p).unwrap();
        assert!(checksum_ok(f, &s));
        write_syn_ack(f, &s, OUR, &SECRET, now, &key, &ANN).unwrap()
    }

    #[test]
    fn a_linux_syn_gets_a_linux_shaped_syn_ack_that_its_ack_proves() {
        for v6 in [false, true] {
            let (mut f, len) = syn(v6, None, &linux_opts());
            let key = key_of(&f[..len]);
            let n = answer(&mut f, len, 1_000_000);
            let out = &f[..n];
            let s = etherparse::SlicedPacket::from_ethernet(out).unwrap();
            let eth = s.link.unwrap().to_header().unwrap();
            let eth = eth.ethernet2().unwrap();
            assert_eq!((eth.source, eth.destination), (OUR, PEER));
            let Some(etherparse::TransportSlice::Tcp(t)) = s.transport else {
                panic!("no TCP")
            };
            assert!(t.syn() && t.ack() && !t.rst() && !t.ece());
            assert_eq!((t.source_port(), t.destination_port()), (80, 40000));
            assert_eq!(t.acknowledgment_number(), 0xFFFF_FFF1);
            assert_eq!(t.window_size(), 64240);
            // MSS, SACK-permitted, timestamps, NOP, window scale: 40 bytes.
            assert_eq!(t.data_offset(), 10);
            let o = t.options();
            assert_eq!(&o[..6], &[2, 4, 0x05, 0xb4, 4, 2]);
            assert_eq!(&o[6..8], &[8, 10]);
            assert_eq!(&o[12..16], &0x0A0B_0C0Du32.to_be_bytes(), "TSecr echoes");
            assert_eq!(&o[16..], &[1, 3, 3, 7]);
            let tsval = u32::from_be_bytes(o[8..12].try_into().unwrap());
            assert_eq!(
                tsval & 0x3F,
                9 | 1 << 4,
                "window scale 9 and SACK in the TSval"
            );
            // Checksums verify (etherparse recomputes them).
            let p = parse_frame(out).unwrap();
            let seg = locate(out, &p).unwrap();
            assert!(checksum_ok(out, &seg));
            if !v6 {
                assert!(crate::wire::checksum::verify(&out[14..34]));
            }
            // The client's ACK proves the cookie and brings the options back.
            let ack = t.sequence_number().wrapping_add(1);
            let got = cookie::verify(&SECRET, 1_000_500, &key, 0xFFFF_FFF1, ack, Some(tsval));
            assert_eq!(
                got,
                Some(SynOptions {
                    mss: 1460,
                    wscale: Some(9),
                    sack: true,
                    ts: true
                })
            );
        }
    }

    #[test]
    fn a_bare_syn_grows_into_its_room_and_keeps_its_vlan() {
        let (mut f, len) = syn(false, Some(42), &[]);
        assert_eq!(len, 58);
        let n = answer(&mut f, len, 5);
        // 18 bytes of Ethernet and VLAN, 20 IP, 24 TCP (MSS only).
        assert_eq!(n, 18 + 20 + 24);
        let p = parse_frame(&f[..n]).unwrap();
        assert_eq!(p.vlan_tci.map(|t| t & 0xFFF), Some(42));
        let s = locate(&f[..n], &p).unwrap();
        assert!(checksum_ok(&f, &s));
        assert_eq!(&f[s.l4 + 20..s.end], &[2, 4, 0x05, 0xb4]);
        // No room: refused, nothing claimed.
        let (mut g, len) = syn(false, None, &[]);
        g.truncate(len);
        let key = key_of(&g);
        let p = parse_frame(&g).unwrap();
        let s = locate(&g, &p).unwrap();
        assert_eq!(write_syn_ack(&mut g, &s, OUR, &SECRET, 0, &key, &ANN), None);
    }

    /// The fixture SYN turned into the SYN sent to the backend (ISN
    /// 0xFFFF_FFEF, the options below): the frame, its length, the options.
    fn backend_syn(v6: bool) -> (Vec<u8>, usize, SynOptions) {
        let (mut f, len) = syn(v6, None, &linux_opts());
        let p = parse_frame(&f[..len]).unwrap();
        let s = locate(&f[..len], &p).unwrap();
        let opts = SynOptions {
            mss: 1440,
            wscale: Some(9),
            sack: true,
            ts: true,
        };
        let n = ack_into_syn(&mut f, &s, &opts, 0xFFFF_FFEF).unwrap();
        (f, n, opts)
    }

    #[test]
    fn the_ack_becomes_the_clients_syn_with_the_cookies_options() {
        for v6 in [false, true] {
            let (f, n, opts) = backend_syn(v6);
            let p = parse_frame(&f[..n]).unwrap();
            let s = locate(&f[..n], &p).unwrap();
            assert!(checksum_ok(&f, &s));
            let tcp = &f[s.l4..s.end];
            assert_eq!(tcp[13], SYN);
            assert_eq!(
                u32::from_be_bytes(tcp[4..8].try_into().unwrap()),
                0xFFFF_FFEF
            );
            let said = syn_options(tcp);
            assert_eq!(said.opts, opts);
            assert_eq!(said.tsval, 0x0A0B_0C0D);
            assert_eq!(timestamps(tcp), Some((0x0A0B_0C0D, 0)));
        }
    }

    #[test]
    fn option_layouts_match_linux() {
        let mut o = [0u8; 20];
        let n = write_options(&mut o, 1460, Some(7), true, Some((1, 2)));
        assert_eq!(n, 20);
        let n = write_options(&mut o, 1460, None, false, Some((1, 2)));
        assert_eq!((n, &o[..6]), (16, &[2, 4, 5, 0xb4, 1, 1][..]));
        let n = write_options(&mut o, 1460, Some(7), true, None);
        assert_eq!(
            (n, &o[..n]),
            (12, &[2, 4, 5, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7][..])
        );
        let n = write_options(&mut o, 536, None, false, None);
        assert_eq!(n, 4);
    }

    /// The segments' bytes, as they were when written by byte offset.
    #[test]
    fn segments_are_the_fixture_bytes() {
        let hex = |h: &str| -> Vec<u8> {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        };
        let want = [
            (
                "02000000c1010200000001018100002a08004500003c000040004006061d0a010064c6336407\
                 00509c409697dedefffffff1a012faf0ade60000020405b40402080a000f42590a0b0c0d0103\
                 0307",
                "02000000010102000000c10108004500003c000040004006061dc63364070a0100649c400050\
                 ffffffef00000000a002ffff60da0000020405a00402080a0a0b0c0d0000000001030309",
            ),
            (
                "02000000c1010200000001018100002a86dd600000000028064020010db80000000000000000\
                 0000006420010db800000000000000000000005000509c409e261ea6fffffff1a012faf03f0a\
                 0000020405b40402080a000f42590a0b0c0d01030307",
                "02000000010102000000c10186dd600000000028064020010db8000000000000000000000050\
                 20010db80000000000000000000000649c400050ffffffef00000000a002ffff395400000204\
                 05a00402080a0a0b0c0d0000000001030309",
            ),
        ];
        for (v6, (syn_ack, to_backend)) in [false, true].into_iter().zip(want) {
            let (mut f, len) = syn(v6, Some(42), &linux_opts());
            let n = answer(&mut f, len, 1_000_000);
            assert_eq!(f[..n], hex(syn_ack), "SYN-ACK, v6 {v6}");
            let (f, n, _) = backend_syn(v6);
            assert_eq!(f[..n], hex(to_backend), "backend SYN, v6 {v6}");
        }
    }
}
