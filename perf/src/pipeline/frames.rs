//! Frame builders: the clients of a flow set, TCP segments (with the
//! timestamps option when `--timestamps`), and the few fields read back
//! from what the pipeline sent.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering;

use etherparse::{PacketBuilder, TcpHeader};

use super::rig::{Vip, CLIENT_MAC, EXT_MAC};
use super::TIMESTAMPS;

/// Client `i` of a flow set: address and source port.
pub(super) fn client(vip: Vip, set: u32, i: u32) -> (IpAddr, u16) {
    let hi = set * 64 + i / 50_000;
    let port = 10_000 + (i % 50_000) as u16;
    match vip {
        _ if vip.is_v6() => (
            Ipv6Addr::new(0xfd00, 0x100, 0, 0, 0, 0, (hi >> 16) as u16, hi as u16).into(),
            port,
        ),
        _ => (Ipv4Addr::from(0x6440_0000 + hi).into(), port),
    }
}

/// A TCP segment with sequence number 1 and no payload; `ack` sets ACK
/// with that number.
pub(super) fn tcp_frame(
    smac: [u8; 6],
    dmac: [u8; 6],
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
    syn: bool,
    ack: Option<u32>,
) -> Vec<u8> {
    tcp_segment(smac, dmac, (src, dst), (syn, 1, ack), &[])
}

/// A TCP segment: (SYN, sequence number, ACK number) and a payload.
pub(super) fn tcp_segment(
    smac: [u8; 6],
    dmac: [u8; 6],
    (src, dst): ((IpAddr, u16), (IpAddr, u16)),
    (syn, seq, ack): (bool, u32, Option<u32>),
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(smac, dmac);
    let b = match (src.0, dst.0) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!("one family per flow"),
    };
    let mut h = TcpHeader::new(src.1, dst.1, seq, 64240);
    h.syn = syn;
    if let Some(a) = ack {
        h.ack = true;
        h.acknowledgment_number = a;
    }
    if TIMESTAMPS.load(Ordering::Relaxed) {
        use etherparse::TcpOptionElement::{Noop, Timestamp};
        let ecr = if h.ack { 0x0100_0000 } else { 0 };
        h.set_options(&[Noop, Noop, Timestamp(0x0200_0000 ^ seq, ecr)])
            .expect("room for timestamps");
    }
    let mut out = Vec::with_capacity(80 + payload.len());
    b.tcp_header(h)
        .write(&mut out, payload)
        .expect("frame builds");
    out
}

/// Addresses and ports of a sent TCP frame (no VLAN): (src, dst).
pub(super) fn addrs_of(f: &[u8]) -> ((IpAddr, u16), (IpAddr, u16)) {
    let port = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
    if f[12..14] == [0x08, 0x00] {
        let ip = |o: usize| IpAddr::from(<[u8; 4]>::try_from(&f[o..o + 4]).unwrap());
        let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
        ((ip(26), port(l4)), (ip(30), port(l4 + 2)))
    } else {
        let ip = |o: usize| IpAddr::from(<[u8; 16]>::try_from(&f[o..o + 16]).unwrap());
        ((ip(22), port(54)), (ip(38), port(56)))
    }
}

pub(super) fn syns(vip: Vip, set: u32, n: usize) -> Vec<Vec<u8>> {
    (0..n as u32)
        .map(|i| {
            tcp_frame(
                CLIENT_MAC,
                EXT_MAC,
                client(vip, set, i),
                (vip.addr(), 80),
                true,
                None,
            )
        })
        .collect()
}

/// Deterministic shuffle (xorshift Fisher-Yates).
pub(super) fn shuffle<T>(v: &mut [T]) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// TCP payload length of a sent IPv4 frame (no VLAN).
pub(super) fn tcp_payload_len_v4(f: &[u8]) -> usize {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    let data_offset = usize::from(f[14 + ihl + 12] >> 4) * 4;
    total - ihl - data_offset
}

/// (sequence, acknowledgement) numbers of a sent IPv4 TCP frame (no VLAN).
pub(super) fn seq_ack_v4(f: &[u8]) -> (u32, u32) {
    let tcp = 14 + usize::from(f[14] & 0x0f) * 4;
    let word = |o: usize| u32::from_be_bytes([f[o], f[o + 1], f[o + 2], f[o + 3]]);
    (word(tcp + 4), word(tcp + 8))
}
