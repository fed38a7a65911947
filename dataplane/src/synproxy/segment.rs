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
use crate::wire::checksum::{
    checksum, l4_checksum_v4, l4_checksum_v6, pseudo_header_v4, pseudo_header_v6,
};
use crate::wire::{ip_proto, TcpOption};

/// TTL / hop limit of the segments border writes.
pub const TTL: u8 = 64;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

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
    let data = &frame[s.l4..s.end];
    let len = data.len();
    let pseudo = if s.v6 {
        let (src, dst) = addrs6(frame, s.l3);
        pseudo_header_v6(&src, &dst, ip_proto::TCP, len as u32)
    } else {
        let (src, dst) = addrs4(frame, s.l3);
        pseudo_header_v4(src, dst, ip_proto::TCP, len as u16)
    };
    let sum = crate::wire::checksum::add(pseudo, crate::wire::checksum::sum(data));
    sum == 0xFFFF
}

fn addrs4(f: &[u8], l3: usize) -> (Ipv4Addr, Ipv4Addr) {
    let a = |o: usize| Ipv4Addr::new(f[l3 + o], f[l3 + o + 1], f[l3 + o + 2], f[l3 + o + 3]);
    (a(12), a(16))
}

fn addrs6(f: &[u8], l3: usize) -> (Ipv6Addr, Ipv6Addr) {
    let a = |o: usize| {
        let mut b = [0u8; 16];
        b.copy_from_slice(&f[l3 + o..l3 + o + 16]);
        Ipv6Addr::from(b)
    };
    (a(8), a(24))
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
    let mut put = |b: &[u8]| {
        out[n..n + b.len()].copy_from_slice(b);
        n += b.len();
    };
    let m = mss.to_be_bytes();
    put(&[2, 4, m[0], m[1]]);
    match (sack, ts) {
        (true, Some(_)) => put(&[4, 2]),
        (false, Some(_)) => put(&[1, 1]),
        (true, None) => put(&[1, 1, 4, 2]),
        (false, None) => {}
    }
    if let Some((v, e)) = ts {
        put(&[8, 10]);
        put(&v.to_be_bytes());
        put(&e.to_be_bytes());
    }
    if let Some(s) = wscale {
        put(&[1, 3, 3, s]);
    }
    n
}

/// The fixed part of a TCP header border writes.
struct TcpHead {
    sport: [u8; 2],
    dport: [u8; 2],
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
}

/// Writes the IP header (from `src` to `dst`, as found in the frame, `v6`
/// or not), the TCP header and `opts` at `l3` and fixes both checksums.
/// The segment carries no payload. Returns the frame's new length, or
/// `None` when `buf` has no room.
fn write_segment(
    buf: &mut [u8],
    l3: usize,
    v6: bool,
    addrs: ([u8; 16], [u8; 16]),
    head: &TcpHead,
    opts: &[u8],
) -> Option<usize> {
    let ip_len = if v6 { 40 } else { 20 };
    let tcp_len = 20 + opts.len();
    let end = l3 + ip_len + tcp_len;
    if buf.len() < end {
        return None;
    }
    let t = l3 + ip_len;
    {
        let h = &mut buf[t..end];
        h[0..2].copy_from_slice(&head.sport);
        h[2..4].copy_from_slice(&head.dport);
        h[4..8].copy_from_slice(&head.seq.to_be_bytes());
        h[8..12].copy_from_slice(&head.ack.to_be_bytes());
        h[12] = ((tcp_len / 4) as u8) << 4;
        h[13] = head.flags;
        h[14..16].copy_from_slice(&head.window.to_be_bytes());
        h[16..20].fill(0);
        h[20..].copy_from_slice(opts);
    }
    let (src, dst) = addrs;
    if v6 {
        let (a, b) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
        let h = &mut buf[l3..t];
        h[0..4].copy_from_slice(&(6u32 << 28).to_be_bytes());
        h[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        h[6] = ip_proto::TCP;
        h[7] = TTL;
        h[8..24].copy_from_slice(&src);
        h[24..40].copy_from_slice(&dst);
        let c = l4_checksum_v6(&a, &b, ip_proto::TCP, &buf[t..end]);
        buf[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    } else {
        let a = Ipv4Addr::new(src[0], src[1], src[2], src[3]);
        let b = Ipv4Addr::new(dst[0], dst[1], dst[2], dst[3]);
        let h = &mut buf[l3..t];
        h[0] = 0x45;
        h[1] = 0;
        h[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
        h[4..6].fill(0);
        h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
        h[8] = TTL;
        h[9] = ip_proto::TCP;
        h[10..12].fill(0);
        h[12..16].copy_from_slice(&src[..4]);
        h[16..20].copy_from_slice(&dst[..4]);
        let c = checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let c = l4_checksum_v4(a, b, ip_proto::TCP, &buf[t..end]);
        buf[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    }
    Some(end)
}

/// The source and destination addresses of the packet at `l3` (IPv4 in
/// the first 4 bytes).
fn addrs_at(f: &[u8], s: &Seg) -> ([u8; 16], [u8; 16]) {
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    if s.v6 {
        src.copy_from_slice(&f[s.l3 + 8..s.l3 + 24]);
        dst.copy_from_slice(&f[s.l3 + 24..s.l3 + 40]);
    } else {
        src[..4].copy_from_slice(&f[s.l3 + 12..s.l3 + 16]);
        dst[..4].copy_from_slice(&f[s.l3 + 16..s.l3 + 20]);
    }
    (src, dst)
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
    let tcp = &buf[s.l4..s.end];
    let said = syn_options(tcp);
    let client_isn = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let (sport, dport) = ([tcp[0], tcp[1]], [tcp[2], tcp[3]]);
    let c = cookie::encode(secret, now_ms, key, client_isn, &said.opts);
    let ts = said
        .opts
        .ts
        .then(|| (cookie::synack_tsval(now_ms, c.ts_bits), said.tsval));
    let mut o = [0u8; 20];
    let wscale = said.opts.wscale.map(|_| announce.wscale);
    let n = write_options(&mut o, announce.mss, wscale, said.opts.sack, ts);
    let (src, dst) = addrs_at(buf, s);
    if buf.len() < 12 {
        return None;
    }
    let head = TcpHead {
        sport: dport,
        dport: sport,
        seq: c.isn,
        ack: client_isn.wrapping_add(1),
        flags: SYN | ACK,
        window: announce.window,
    };
    let end = write_segment(buf, s.l3, s.v6, (dst, src), &head, &o[..n])?;
    let (d, rest) = buf.split_at_mut(6);
    d.swap_with_slice(&mut rest[..6]);
    buf[6..12].copy_from_slice(&our_mac);
    Some(end)
}

/// Rewrites a client segment `s` in `buf` (of a connection whose cookie
/// carried `opts`, ISN `isn`) into the SYN the client would have sent the
/// backend: same addresses and ports, the client's ISN, the options from
/// the cookie, the segment's TSval with a zero TSecr, no payload. The
/// frame then goes the way of every client segment (NAT, PROXY). Returns
/// its length.
pub fn ack_into_syn(buf: &mut [u8], s: &Seg, opts: &SynOptions, isn: u32) -> Option<usize> {
    let tcp = &buf[s.l4..s.end];
    let (sport, dport) = ([tcp[0], tcp[1]], [tcp[2], tcp[3]]);
    let window = u16::from_be_bytes([tcp[14], tcp[15]]);
    let ts = if opts.ts {
        Some((timestamps(tcp).map_or(0, |(v, _)| v), 0))
    } else {
        None
    };
    let mut o = [0u8; 20];
    let n = write_options(&mut o, opts.mss, opts.wscale, opts.sack, ts);
    let addrs = addrs_at(buf, s);
    let head = TcpHead {
        sport,
        dport,
        seq: isn,
        ack: 0,
        flags: SYN,
        // The client's window from its ACK, unscaled: the best guess of
        // what its SYN offered.
        window: match opts.wscale {
            Some(ws) => (u32::from(window) << ws).min(65535) as u16,
            None => window,
        },
    };
    write_segment(buf, s.l3, s.v6, addrs, &head, &o[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ppv2::seg::locate;
    use crate::wire::parse_frame;
    use etherparse::{PacketBuilder, TcpHeader, TcpOptionElement};

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

    #[test]
    fn the_ack_becomes_the_clients_syn_with_the_cookies_options() {
        for v6 in [false, true] {
            let (mut f, len) = syn(v6, None, &linux_opts());
            // Turn the fixture into the client's ACK: seq + 1, with data.
            let p = parse_frame(&f[..len]).unwrap();
            let s = locate(&f[..len], &p).unwrap();
            let opts = SynOptions {
                mss: 1440,
                wscale: Some(9),
                sack: true,
                ts: true,
            };
            let n = ack_into_syn(&mut f, &s, &opts, 0xFFFF_FFEF).unwrap();
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
}
