//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Vocabulary: a *sum* is the folded 16-bit one's-complement sum of some
//! data (not complemented); a *checksum* is the complement of a sum, the
//! value that goes on the wire. Data is summed as big-endian 16-bit words; an
//! odd trailing byte is padded with a zero on the right.
//!
//! Every function here returns canonical values: a checksum computed from
//! data that is not all zero is never `0xFFFF`, whether computed in full or
//! updated incrementally with RFC 1624 eqn. 3 (`HC' = ~(~HC + ~m + m')`), so
//! the two always agree bit for bit.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Fold a wide accumulator of 16-bit words into a 16-bit one's-complement sum.
///
/// Branch-free: four end-around-carry steps bring any `u64` to at most
/// `0xFFFF`. The result is 0 only for 0, else the value in `1..=0xFFFF`
/// congruent to `acc` modulo `0xFFFF`.
#[inline]
pub fn fold(acc: u64) -> u16 {
    let a = (acc & 0xFFFF_FFFF) + (acc >> 32); // < 2^33
    let a = (a & 0xFFFF) + (a >> 16); // < 2^17 + 2^16
    let a = (a & 0xFFFF) + (a >> 16); // <= 0x1_0001
    ((a & 0xFFFF) + (a >> 16)) as u16
}

/// One's-complement addition of two sums.
#[inline]
pub fn add(a: u16, b: u16) -> u16 {
    fold(u64::from(a) + u64::from(b))
}

/// The one's-complement sum of `data` (RFC 1071), not complemented.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    fold(raw_sum(data))
}

/// Unfolded sum; 2^16 = 1 (mod 2^16 - 1), so big-endian words of any
/// width may be added as they are and folded at the end.
#[inline]
fn raw_sum(data: &[u8]) -> u64 {
    accumulate(0, data)
}

/// `acc` plus the 16-bit big-endian words of `data` (an odd trailing byte
/// padded with a zero on the right), unfolded: what [`fold`] turns into
/// the one's-complement sum of both.
///
/// Eight bytes at a time as one 64-bit word with an end-around carry:
/// 2^64 - 1 is a multiple of 2^16 - 1, so the carry keeps the value
/// congruent to the sum, and an accumulator that is not 0 never becomes 0
/// (the fold's "0 only for all-zero data" holds).
#[inline]
pub fn accumulate(mut acc: u64, data: &[u8]) -> u64 {
    let mut wide = data.chunks_exact(8);
    for c in &mut wide {
        let w = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let (s, carry) = acc.overflowing_add(w);
        acc = s + u64::from(carry);
    }
    // At most seven bytes: below 2^33 together.
    let rest = wide.remainder();
    let mut tail = 0u64;
    let (four, rest) = match rest {
        [a, b, c, d, r @ ..] => (u32::from_be_bytes([*a, *b, *c, *d]), r),
        r => (0, r),
    };
    tail += u64::from(four);
    match *rest {
        [a] => tail += u64::from(a) << 8,
        [a, b] => tail += u64::from(u16::from_be_bytes([a, b])),
        [a, b, c] => tail += u64::from(u16::from_be_bytes([a, b])) + (u64::from(c) << 8),
        _ => {}
    }
    let (s, carry) = acc.overflowing_add(tail);
    s + u64::from(carry)
}

/// Whether `data` (which includes its checksum field) and the unfolded
/// sum `pseudo` of its pseudo-header sum to `0xFFFF`: the check of a
/// received segment, folded once.
#[inline]
pub fn verify_with(pseudo: u64, data: &[u8]) -> bool {
    fold(accumulate(pseudo, data)) == 0xFFFF
}

/// The Internet checksum of `data`: `!sum(data)`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// True when `data` (which includes its checksum field) sums to `0xFFFF`.
#[inline]
pub fn verify(data: &[u8]) -> bool {
    sum(data) == 0xFFFF
}

/// Sum of the IPv4 pseudo-header (RFC 793/768): addresses, protocol, length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u16) -> u16 {
    let s = src.octets();
    let d = dst.octets();
    fold(
        u64::from(u32::from_be_bytes(s))
            + u64::from(u32::from_be_bytes(d))
            + u64::from(proto)
            + u64::from(len),
    )
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1): addresses, upper-layer
/// length (32 bits), next header.
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, proto: u8, len: u32) -> u16 {
    fold(
        words_u128(u128::from_be_bytes(src.octets()))
            + words_u128(u128::from_be_bytes(dst.octets()))
            + u64::from(len >> 16)
            + u64::from(len & 0xFFFF)
            + u64::from(proto),
    )
}

/// Sum of a 128-bit value's four 32-bit words, unfolded.
#[inline]
fn words_u128(v: u128) -> u64 {
    u64::from((v >> 96) as u32)
        + u64::from((v >> 64) as u32)
        + u64::from((v >> 32) as u32)
        + u64::from(v as u32)
}

/// Checksum of an upper-layer message over IPv4 (`data` has its checksum
/// field zeroed). No UDP zero rule here; see [`udp_finish`].
pub fn l4_checksum_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, data: &[u8]) -> u16 {
    // Lengths above u16::MAX cannot occur over IPv4; saturate instead of
    // panicking on nonsense input.
    let len = u16::try_from(data.len()).unwrap_or(u16::MAX);
    !add(pseudo_header_v4(src, dst, proto, len), sum(data))
}

/// Checksum of an upper-layer message over IPv6 (`data` has its checksum
/// field zeroed).
pub fn l4_checksum_v6(src: &Ipv6Addr, dst: &Ipv6Addr, proto: u8, data: &[u8]) -> u16 {
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    !add(pseudo_header_v6(src, dst, proto, len), sum(data))
}

/// UDP's transmission rule: a computed checksum of zero is sent as `0xFFFF`,
/// because zero on the wire means "no checksum" (IPv4).
#[inline]
pub fn udp_finish(csum: u16) -> u16 {
    if csum == 0 {
        0xFFFF
    } else {
        csum
    }
}

/// RFC 1624 eqn. 3 for one 16-bit word: `HC' = ~(~HC + ~m + m')`.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!hc) + u64::from(!old) + u64::from(new))
}

/// RFC 1624 eqn. 3 for a 32-bit field (two words), e.g. TCP seq/ack.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    !fold(
        u64::from(!hc)
            + u64::from(!(old >> 16) as u16)
            + u64::from(!(old as u16))
            + u64::from(new >> 16)
            + u64::from(new & 0xFFFF),
    )
}

/// [`update16`] for a field at an odd byte offset of the checksummed data
/// (e.g. a TCP option after a single NOP). Byte-swapped data has a
/// byte-swapped sum (RFC 1071 §2(B)), so the words are swapped.
#[inline]
pub fn update16_odd(hc: u16, old: u16, new: u16) -> u16 {
    update16(hc, old.swap_bytes(), new.swap_bytes())
}

/// [`update32`] for a field at an odd byte offset of the checksummed data.
#[inline]
pub fn update32_odd(hc: u16, old: u32, new: u32) -> u16 {
    fn swap_halves(v: u32) -> u32 {
        ((v & 0x00FF_00FF) << 8) | ((v >> 8) & 0x00FF_00FF)
    }
    update32(hc, swap_halves(old), swap_halves(new))
}

/// Incremental update for a changed IPv4 address.
#[inline]
pub fn update_v4_addr(hc: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    update32(hc, u32::from(old), u32::from(new))
}

/// Incremental update for a changed IPv6 address (eight words).
pub fn update_v6_addr(hc: u16, old: &Ipv6Addr, new: &Ipv6Addr) -> u16 {
    let mut acc = u64::from(!hc);
    for (o, n) in old.segments().iter().zip(new.segments().iter()) {
        acc += u64::from(!*o) + u64::from(*n);
    }
    !fold(acc)
}

/// Incremental update for an arbitrary run of bytes that changed from `old`
/// to `new`. Both must have the same length and start at an even offset of
/// the checksummed data; otherwise the checksum is returned unchanged and
/// `None` signals the misuse.
pub fn update_bytes(hc: u16, old: &[u8], new: &[u8]) -> Option<u16> {
    if old.len() != new.len() {
        return None;
    }
    // ~m summed over words equals ~(sum of m) in one's-complement arithmetic.
    Some(!fold(
        u64::from(!hc) + u64::from(!sum(old)) + u64::from(sum(new)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&d), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }

    #[test]
    fn odd_length() {
        assert_eq!(sum(&[0x12]), 0x1200);
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(sum(&[0xff, 0xff, 0xff, 0xff, 0x01]), 0x0100);
    }

    #[test]
    fn fold_is_the_end_around_carry_loop() {
        fn slow(mut acc: u64) -> u16 {
            while acc > 0xFFFF {
                acc = (acc & 0xFFFF) + (acc >> 16);
            }
            acc as u16
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let edges = [
            0,
            1,
            0xFFFF,
            0x1_0000,
            0x1_FFFE,
            0xFFFF_FFFF,
            0x1_0000_0000,
            0xFFFF_0000_FFFF,
            u64::MAX,
            u64::MAX - 1,
        ];
        for v in edges.into_iter().chain((0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> (x % 40)
        })) {
            assert_eq!(fold(v), slow(v), "{v:#x}");
        }
    }

    /// RFC 1071's definition, one 16-bit word at a time.
    fn slow_sum(acc: u64, data: &[u8]) -> u16 {
        let mut a = u128::from(acc);
        for w in data.chunks(2) {
            a += u128::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)]));
        }
        while a > 0xFFFF {
            a = (a & 0xFFFF) + (a >> 16);
        }
        a as u16
    }

    /// The 64-bit accumulation with its end-around carry folds to the
    /// word-by-word sum: every length (odd ones padded), data that carries
    /// on every add (all 0xFF), all zero, and accumulators that overflow.
    #[test]
    fn accumulate_folds_to_the_word_sum() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let starts = [0, 1, 6, 0xFFFF, 0x1_0000, u64::MAX - 8, u64::MAX];
        for len in 0..=80usize {
            let random: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            for data in [vec![0xFF; len], vec![0; len], random] {
                for &acc in &starts {
                    assert_eq!(
                        fold(accumulate(acc, &data)),
                        slow_sum(acc, &data),
                        "len {len}, acc {acc:#x}, {data:02x?}"
                    );
                }
                assert_eq!(sum(&data), slow_sum(0, &data), "{data:02x?}");
            }
        }
        // Zero stays zero; anything else never folds to zero.
        assert_eq!(accumulate(0, &[0; 13]), 0);
        assert_ne!(accumulate(u64::MAX, &[0xFF; 8]), 0);
        assert_eq!(fold(accumulate(u64::MAX, &[0xFF; 8])), 0xFFFF);
    }

    #[test]
    fn verify_with_takes_the_pseudo_header_sum() {
        // RFC 1071 §3's data, completed to 0xFFFF by its checksum.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        let mut with = d.to_vec();
        with.extend_from_slice(&checksum(&d).to_be_bytes());
        assert!(verify_with(0, &with));
        assert!(!verify_with(1, &with));
        // A pseudo-header sum moved into the data's checksum.
        let mut with = d.to_vec();
        with.extend_from_slice(&(!add(0x1234, sum(&d))).to_be_bytes());
        assert!(verify_with(0x1234, &with));
        assert!(verify_with(0x1234 + 0xFFFF, &with), "congruent pseudo sums");
        assert!(!verify_with(0, &with));
        // All-zero data and pseudo-header: the sum is 0, not 0xFFFF.
        assert!(!verify_with(0, &[0; 20]));
    }

    #[test]
    fn update16_matches_full() {
        let mut d = [0x45u8, 0x00, 0x12, 0x34, 0xab, 0xcd, 0x00, 0x00];
        let hc = checksum(&d);
        d[2] = 0x99;
        d[3] = 0x01;
        assert_eq!(update16(hc, 0x1234, 0x9901), checksum(&d));
    }

    #[test]
    fn v6_pseudo_matches_bytes() {
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "fe80::ffff:1234:5678:9abc".parse().unwrap();
        let mut b = Vec::new();
        b.extend_from_slice(&s.octets());
        b.extend_from_slice(&d.octets());
        b.extend_from_slice(&70000u32.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(pseudo_header_v6(&s, &d, 58, 70000), sum(&b));
    }
}
