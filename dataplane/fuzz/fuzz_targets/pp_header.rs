//! The PROXY v2 header builder against an independent decoder (the `ppp`
//! crate) and a bitwise CRC32c written here: for any addresses, ports,
//! connection id, authority, CRC choice and length bound, what
//! `Header::write` and `Header::write_exact` produce decodes to exactly what
//! was asked for (TLVs left out only when they would pass the bound, and
//! counted), with a valid checksum, at the length `encoded_len` promised.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dataplane::ppv2::header::{Header, MAX_AUTHORITY_LEN, MAX_HEADER_LEN};
use libfuzzer_sys::fuzz_target;
use ppp::v2;

/// Reads fields off the fuzzer's bytes (zeros once they run out).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
}

fn crc32c_bitwise(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
    }
    !c
}

/// What a decoded header said.
#[derive(Debug, Default)]
struct Seen {
    unique_id: Option<Vec<u8>>,
    authority: Option<Vec<u8>>,
    crc: bool,
    noop: bool,
}

/// Decodes `bytes` (exactly one header) with `ppp` and checks the fixed
/// part, the addresses and the CRC32c.
fn decode(bytes: &[u8], h: &Header<'_>) -> Seen {
    let d = v2::Header::try_from(bytes).expect("ppp decodes what we built");
    assert_eq!(d.len(), bytes.len(), "the length field covers the header");
    assert_eq!(d.command, v2::Command::Proxy);
    assert_eq!(d.protocol, v2::Protocol::Stream);
    match (d.addresses, h.src.0, h.dst.0) {
        (v2::Addresses::IPv4(a), IpAddr::V4(s), IpAddr::V4(t)) => {
            assert_eq!((a.source_address, a.destination_address), (s, t));
            assert_eq!((a.source_port, a.destination_port), (h.src.1, h.dst.1));
        }
        (v2::Addresses::IPv6(a), IpAddr::V6(s), IpAddr::V6(t)) => {
            assert_eq!((a.source_address, a.destination_address), (s, t));
            assert_eq!((a.source_port, a.destination_port), (h.src.1, h.dst.1));
        }
        (other, _, _) => panic!("addresses {other:?} for {h:?}"),
    }
    let mut seen = Seen::default();
    let mut at = 16 + d.address_bytes().len();
    for t in d.tlvs() {
        let t = t.expect("well-formed TLV");
        match t.kind {
            0x05 => seen.unique_id = Some(t.value.to_vec()),
            0x02 => seen.authority = Some(t.value.to_vec()),
            0x04 => seen.noop = true,
            0x03 => {
                let mut zeroed = bytes.to_vec();
                zeroed[at + 3..at + 7].fill(0);
                let got = u32::from_be_bytes(t.value[..4].try_into().unwrap());
                assert_eq!(got, crc32c_bitwise(&zeroed), "CRC32c");
                seen.crc = true;
            }
            k => panic!("unexpected TLV {k:#x}"),
        }
        at += 3 + t.value.len();
    }
    assert_eq!(at, bytes.len(), "TLVs fill the header exactly");
    seen
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let flags = b.u8();
    let v6 = flags & 1 != 0;
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        (Ipv6Addr::from(b.take::<16>()).into(), Ipv6Addr::from(b.take::<16>()).into())
    } else {
        (Ipv4Addr::from(b.take::<4>()).into(), Ipv4Addr::from(b.take::<4>()).into())
    };
    let (sport, dport) = (b.u16(), b.u16());
    let id = u64::from_be_bytes(b.take());
    let max_len = b.u16() % 600;
    let exact = usize::from(b.u16() % 600);
    let auth_len = usize::from(b.u8()) % (MAX_AUTHORITY_LEN + 2);
    let auth: Vec<u8> = b.0.iter().copied().cycle().take(auth_len).collect();
    let h = Header {
        src: (src, sport),
        dst: (dst, dport),
        unique_id: (flags & 2 != 0).then_some(id),
        authority: (flags & 4 != 0).then_some(&auth[..]),
        crc32c: flags & 8 != 0,
        max_len,
    };
    let mut out = [0u8; MAX_HEADER_LEN + 64];
    let w = h.write(&mut out).expect("one family: always written");
    assert_eq!(Some(w.len), h.encoded_len());
    assert!(w.len <= usize::from(max_len).max(16 + if v6 { 36 } else { 12 }));
    let seen = decode(&out[..w.len], &h);
    let mut hex = [0u8; 16];
    dataplane::ppv2::header::write_hex(&mut hex, id);
    let asked = [h.unique_id.is_some(), h.crc32c, h.authority.is_some()];
    let got = [seen.unique_id.is_some(), seen.crc, seen.authority.is_some()];
    let left_out = asked.iter().zip(got).filter(|(a, g)| **a && !g).count();
    assert_eq!(usize::from(w.dropped), left_out, "{h:?}");
    assert!(got.iter().zip(asked).all(|(g, a)| !g || a), "nothing unasked");
    if let Some(u) = &seen.unique_id {
        assert_eq!(&u[..], &hex[..]);
    }
    if let Some(a) = &seen.authority {
        assert_eq!(&a[..], &auth[..]);
    }
    assert!(!seen.noop);

    // At a length fixed earlier: the same header, or one padded with NOOP
    // (never with the authority), or none.
    let mut fixed = [0u8; MAX_HEADER_LEN + 64];
    if let Some(w2) = h.write_exact(&mut fixed, exact) {
        assert_eq!(w2.len, exact);
        let s2 = decode(&fixed[..exact], &h);
        if exact != w.len {
            assert!(s2.authority.is_none());
        }
        assert_eq!(s2.crc, seen.crc);
        assert_eq!(s2.unique_id, seen.unique_id);
    }
});
