//! The generator's packets, as bytes: building IPv4/TCP frames, reading what
//! comes back, and answering it in place (swap the ends, set the flags,
//! drop the payload). Pure Rust over byte slices, so it is unit-tested here
//! and the DPDK loop in `gen.rs` only moves buffers.

use std::net::Ipv4Addr;

/// Ethernet + IPv4 (no options) + TCP (no options).
pub const HEADERS: usize = ETH + IP + TCP;
const ETH: usize = 14;
const IP: usize = 20;
const TCP: usize = 20;
const ARP_LEN: usize = ETH + 28;

/// TCP flag bits.
pub const FIN: u8 = 0x01;
/// SYN.
pub const SYN: u8 = 0x02;
/// RST.
pub const RST: u8 = 0x04;
/// PSH.
pub const PSH: u8 = 0x08;
/// ACK.
pub const ACK: u8 = 0x10;

/// One end of a TCP connection as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// Ethernet address.
    pub mac: [u8; 6],
    /// IPv4 address.
    pub ip: Ipv4Addr,
    /// TCP port.
    pub port: u16,
}

/// What a received frame is, for the generator's two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An ARP request (someone resolving an address).
    ArpRequest,
    /// IPv4/TCP with these flags and this much payload.
    Tcp {
        /// Flag byte.
        flags: u8,
        /// Payload bytes after the TCP header (options included in the header).
        payload: usize,
        /// Sequence number.
        seq: u32,
        /// Acknowledgement number.
        ack: u32,
    },
    /// Anything else (IPv6 from a kernel twin, ARP replies, UDP, ...).
    Other,
}

/// What a TCP segment carries besides its ends.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flag byte.
    pub flags: u8,
    /// Payload after the TCP header.
    pub payload: &'a [u8],
}

/// Writes an IPv4/TCP frame (no options) from `src` to `dst` into `buf`
/// and returns its length. `buf` must hold `HEADERS + seg.payload.len()` bytes.
pub fn build_tcp(buf: &mut [u8], src: End, dst: End, seg: Segment) -> usize {
    let Segment {
        seq,
        ack,
        flags,
        payload,
    } = seg;
    let len = HEADERS + payload.len();
    let f = &mut buf[..len];
    f[0..6].copy_from_slice(&dst.mac);
    f[6..12].copy_from_slice(&src.mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[ETH..ETH + IP];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&((IP + TCP + payload.len()) as u16).to_be_bytes());
    ip[4..8].copy_from_slice(&[0, 0, 0x40, 0]); // id 0, DF
    ip[8] = 64;
    ip[9] = 6;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&src.ip.octets());
    ip[16..20].copy_from_slice(&dst.ip.octets());
    let t = &mut f[ETH + IP..HEADERS];
    t[0..2].copy_from_slice(&src.port.to_be_bytes());
    t[2..4].copy_from_slice(&dst.port.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t[16..20].fill(0);
    f[HEADERS..].copy_from_slice(payload);
    fill_checksums(f);
    len
}

/// Reads the kind of a received frame.
pub fn classify(f: &[u8]) -> Kind {
    if f.len() < ETH {
        return Kind::Other;
    }
    match u16::from_be_bytes([f[12], f[13]]) {
        0x0806 if f.len() >= ARP_LEN && f[ETH + 6..ETH + 8] == [0, 1] => Kind::ArpRequest,
        0x0800 if f.len() >= HEADERS && f[ETH + 9] == 6 && f[ETH] == 0x45 => {
            let total = usize::from(u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]));
            let t = &f[ETH + IP..];
            let doff = usize::from(t[12] >> 4) * 4;
            if doff < TCP || IP + doff > total || ETH + total > f.len() {
                return Kind::Other;
            }
            Kind::Tcp {
                flags: t[13],
                payload: total - IP - doff,
                seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
                ack: u32::from_be_bytes([t[8], t[9], t[10], t[11]]),
            }
        }
        _ => Kind::Other,
    }
}

/// The client end (source address and port) of a TCP frame sent to it,
/// i.e. the destination: (ip, port).
pub fn tcp_dst(f: &[u8]) -> (Ipv4Addr, u16) {
    let ip = Ipv4Addr::new(f[ETH + 16], f[ETH + 17], f[ETH + 18], f[ETH + 19]);
    (ip, u16::from_be_bytes([f[ETH + IP + 2], f[ETH + IP + 3]]))
}

/// Turns a received IPv4/TCP frame (as [`classify`] accepted it) into the
/// answer to it, in place: Ethernet, IP addresses and ports swapped, the
/// given flags and numbers, no options and no payload. Returns the new
/// frame length ([`HEADERS`]).
pub fn answer_tcp(f: &mut [u8], flags: u8, seq: u32, ack: u32) -> usize {
    let (a, b) = f.split_at_mut(6);
    a.swap_with_slice(&mut b[..6]);
    let ip = &mut f[ETH..ETH + IP];
    ip[2..4].copy_from_slice(&((IP + TCP) as u16).to_be_bytes());
    ip[8] = 64;
    let (s, d) = ip[12..20].split_at_mut(4);
    s.swap_with_slice(d);
    let t = &mut f[ETH + IP..HEADERS];
    let (sp, dp) = t[0..4].split_at_mut(2);
    sp.swap_with_slice(dp);
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t[18..20].fill(0);
    fill_checksums(&mut f[..HEADERS]);
    HEADERS
}

/// Turns an ARP request into the reply from `mac` for the asked address,
/// in place. Returns the new length, or `None` for a gratuitous request
/// (sender asking for its own address), which gets no answer.
pub fn answer_arp(f: &mut [u8], mac: [u8; 6]) -> Option<usize> {
    let a = &f[ETH..ARP_LEN];
    if a[14..18] == a[24..28] {
        return None;
    }
    let requester_mac: [u8; 6] = a[8..14].try_into().ok()?;
    let requester_ip: [u8; 4] = a[14..18].try_into().ok()?;
    let asked_ip: [u8; 4] = a[24..28].try_into().ok()?;
    f[0..6].copy_from_slice(&requester_mac);
    f[6..12].copy_from_slice(&mac);
    let a = &mut f[ETH..ARP_LEN];
    a[6..8].copy_from_slice(&[0, 2]);
    a[8..14].copy_from_slice(&mac);
    a[14..18].copy_from_slice(&asked_ip);
    a[18..24].copy_from_slice(&requester_mac);
    a[24..28].copy_from_slice(&requester_ip);
    Some(ARP_LEN)
}

/// Sets the IPv4 header and TCP checksums of a whole frame (no IP options;
/// the TCP segment runs to the IP total length).
pub fn fill_checksums(f: &mut [u8]) {
    f[ETH + 10..ETH + 12].fill(0);
    let ipsum = fold(sum16(&f[ETH..ETH + IP]));
    f[ETH + 10..ETH + 12].copy_from_slice(&(!ipsum).to_be_bytes());
    let total = usize::from(u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]));
    let seg = ETH + IP..ETH + total;
    f[ETH + IP + 16..ETH + IP + 18].fill(0);
    let tsum = fold(pseudo_sum(f) + sum16(&f[seg]));
    f[ETH + IP + 16..ETH + IP + 18].copy_from_slice(&(!tsum).to_be_bytes());
}

/// The TCP checksum's running sum of a frame without its sequence and
/// acknowledgement numbers and without the checksum field: add
/// [`seq_ack_sum`] and [`finish`] it to get the checksum of a copy with
/// those numbers set. Lets the hot loop patch two words per segment.
pub fn partial_tcp_sum(f: &[u8]) -> u32 {
    let total = usize::from(u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]));
    let mut c = f[ETH..ETH + total].to_vec();
    c[IP + 4..IP + 12].fill(0);
    c[IP + 16..IP + 18].fill(0);
    pseudo_sum(f) + sum16(&c[IP..])
}

/// Writes `seq`, `ack` and the matching TCP checksum into a copy of the
/// frame `partial` was computed on.
#[inline]
pub fn set_seq_ack(f: &mut [u8], partial: u32, seq: u32, ack: u32) {
    let t = &mut f[ETH + IP..HEADERS];
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    let s = partial + (seq >> 16) + (seq & 0xffff) + (ack >> 16) + (ack & 0xffff);
    t[16..18].copy_from_slice(&(!fold(s)).to_be_bytes());
}

fn pseudo_sum(f: &[u8]) -> u32 {
    let total = u32::from(u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]));
    sum16(&f[ETH + 12..ETH + 20]) + 6 + (total - IP as u32)
}

fn sum16(b: &[u8]) -> u32 {
    let mut s = 0u32;
    let mut it = b.chunks_exact(2);
    for w in &mut it {
        s += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = it.remainder() {
        s += u32::from(*last) << 8;
    }
    s
}

#[inline]
fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    fn ends() -> (End, End) {
        (
            End {
                mac: [2, 0, 0, 0, 0, 1],
                ip: Ipv4Addr::new(198, 18, 3, 4),
                port: 40000,
            },
            End {
                mac: [2, 0, 0, 0, 0, 2],
                ip: Ipv4Addr::new(10, 71, 0, 10),
                port: 80,
            },
        )
    }

    /// Checks both checksums with etherparse's own computation.
    fn verify(f: &[u8]) -> (u8, u32, u32, usize) {
        let p = SlicedPacket::from_ethernet(f).unwrap();
        let Some(NetSlice::Ipv4(ip)) = p.net else {
            panic!("not ipv4")
        };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        let Some(TransportSlice::Tcp(t)) = p.transport else {
            panic!("not tcp")
        };
        let th = t.to_header();
        let want = th
            .calc_checksum_ipv4(&h, t.payload())
            .expect("checksum computes");
        assert_eq!(th.checksum, want, "tcp checksum");
        let flags = f[ETH + IP + 13];
        (
            flags,
            th.sequence_number,
            th.acknowledgment_number,
            t.payload().len(),
        )
    }

    #[test]
    fn built_syn_and_data_parse_with_valid_checksums() {
        let (c, v) = ends();
        let mut buf = [0u8; 128];
        let n = build_tcp(
            &mut buf,
            c,
            v,
            Segment {
                seq: 7,
                ack: 0,
                flags: SYN,
                payload: &[],
            },
        );
        assert_eq!(n, HEADERS);
        assert_eq!(verify(&buf[..n]), (SYN, 7, 0, 0));
        let n = build_tcp(
            &mut buf,
            c,
            v,
            Segment {
                seq: 8,
                ack: 99,
                flags: ACK | PSH,
                payload: b"hello!",
            },
        );
        assert_eq!(verify(&buf[..n]), (ACK | PSH, 8, 99, 6));
        assert_eq!(
            classify(&buf[..n]),
            Kind::Tcp {
                flags: ACK | PSH,
                payload: 6,
                seq: 8,
                ack: 99
            }
        );
        assert_eq!(tcp_dst(&buf[..n]), (v.ip, 80));
    }

    #[test]
    fn patched_seq_ack_keeps_the_checksum_right() {
        let (c, v) = ends();
        let mut tmpl = [0u8; 60];
        build_tcp(
            &mut tmpl,
            c,
            v,
            Segment {
                seq: 0,
                ack: 0,
                flags: ACK | PSH,
                payload: b"abcdef",
            },
        );
        let partial = partial_tcp_sum(&tmpl);
        for (seq, ack) in [(1, 2), (u32::MAX, 0x8000_0001), (0xdead_beef, 0)] {
            let mut f = tmpl;
            set_seq_ack(&mut f, partial, seq, ack);
            assert_eq!(verify(&f), (ACK | PSH, seq, ack, 6));
        }
    }

    #[test]
    fn answer_swaps_the_ends_and_drops_the_payload() {
        let (c, v) = ends();
        let mut buf = [0u8; 128];
        let n = build_tcp(
            &mut buf,
            c,
            v,
            Segment {
                seq: 1000,
                ack: 5,
                flags: ACK | PSH,
                payload: b"payload",
            },
        );
        let n2 = answer_tcp(&mut buf[..n], ACK, 5, 1007);
        assert_eq!(n2, HEADERS);
        assert_eq!(verify(&buf[..n2]), (ACK, 5, 1007, 0));
        assert_eq!(&buf[0..6], &c.mac);
        assert_eq!(&buf[6..12], &v.mac);
        assert_eq!(tcp_dst(&buf[..n2]), (c.ip, c.port));
    }

    #[test]
    fn arp_request_gets_a_reply_from_us() {
        let mut f = [0u8; 42];
        f[0..6].fill(0xff);
        f[6..12].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
        f[12..14].copy_from_slice(&[8, 6]);
        f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f[22..28].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
        f[28..32].copy_from_slice(&[10, 72, 0, 1]);
        f[38..42].copy_from_slice(&[10, 72, 0, 2]);
        assert_eq!(classify(&f), Kind::ArpRequest);
        let me = [2, 1, 1, 1, 1, 1];
        assert_eq!(answer_arp(&mut f, me), Some(42));
        assert_eq!(&f[0..6], &[2, 9, 9, 9, 9, 9]);
        assert_eq!(&f[20..22], &[0, 2]);
        assert_eq!(&f[22..28], &me);
        assert_eq!(&f[28..32], &[10, 72, 0, 2]);
        assert_eq!(&f[38..42], &[10, 72, 0, 1]);
        // Gratuitous: no answer.
        f[28..32].copy_from_slice(&[10, 72, 0, 1]);
        f[38..42].copy_from_slice(&[10, 72, 0, 1]);
        f[20..22].copy_from_slice(&[0, 1]);
        assert_eq!(answer_arp(&mut f, me), None);
    }

    #[test]
    fn junk_is_other() {
        assert_eq!(classify(&[0u8; 10]), Kind::Other);
        let mut f = [0u8; 60];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(classify(&f), Kind::Other);
        // IPv4/TCP with a total length past the frame.
        let (c, v) = ends();
        let n = build_tcp(
            &mut f,
            c,
            v,
            Segment {
                seq: 0,
                ack: 0,
                flags: SYN,
                payload: &[],
            },
        );
        assert_eq!(classify(&f[..n - 1]), Kind::Other);
    }
}
