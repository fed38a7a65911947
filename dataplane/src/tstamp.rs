//! TCP timestamps (RFC 7323) of full-NAT flows, moved onto the appliance's
//! own clock so that a local tuple can be reused while the backend still
//! holds its last connection in TIME_WAIT.
//!
//! A backend accepts a SYN on a tuple it keeps in TIME_WAIT when the SYN's
//! timestamp is newer than the last one the old connection sent (RFC 6191;
//! Linux `tcp_timewait_state_process`). Many clients share one local tuple
//! over time, and each client's timestamps start from its own random
//! offset, so passed through unchanged they go backwards about half the
//! time. Full-NAT therefore adds a per-connection `delta` to every TSval on
//! the way to the backend, chosen at the SYN so that the SYN's TSval becomes
//! the worker's millisecond clock, and takes it off every TSecr the backend
//! echoes. A client clock ticks at most once per millisecond (RFC 7323
//! §5.4), so every TSval a connection sends stays at or below the worker's
//! clock at that moment, and the next connection on the tuple starts above
//! it. Reuse of the tuple then needs no cooldown beyond a clock tick.
//!
//! The functions work on a TCP segment (`seg` starts at the TCP header and
//! holds at least its data offset's worth of bytes) and update the
//! checksum incrementally; they change nothing in a segment without a
//! well-formed timestamps option.

use crate::wire::checksum;
use crate::wire::TcpFlags;

const KIND_END: u8 = 0;
const KIND_NOP: u8 = 1;
const KIND_TS: u8 = 8;
const TS_LEN: u8 = 10;
/// Where the checksum sits in a TCP header.
const CSUM_AT: usize = 16;

/// Offset in `seg` of the timestamps option's TSval (TSecr follows it),
/// if the header carries one. The usual layout (NOP, NOP, timestamps at
/// the start of the options) is recognised without walking the options.
#[inline(always)]
pub fn find(seg: &[u8]) -> Option<usize> {
    let doff = usize::from(*seg.get(12)? >> 4) * 4;
    if doff < 32 || doff > seg.len() {
        return None;
    }
    const USUAL: u32 = u32::from_be_bytes([KIND_NOP, KIND_NOP, KIND_TS, TS_LEN]);
    if rd32(seg, 20) == USUAL {
        return Some(24);
    }
    walk(&seg[..doff])
}

#[inline(never)]
fn walk(hdr: &[u8]) -> Option<usize> {
    let mut at = 20;
    while at < hdr.len() {
        match hdr[at] {
            KIND_END => return None,
            KIND_NOP => at += 1,
            kind => {
                let len = usize::from(*hdr.get(at + 1)?);
                if len < 2 || at + len > hdr.len() {
                    return None;
                }
                if kind == KIND_TS {
                    return (len == usize::from(TS_LEN)).then_some(at + 2);
                }
                at += len;
            }
        }
    }
    None
}

#[inline(always)]
fn rd32(seg: &[u8], at: usize) -> u32 {
    seg.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

/// The SYN's TSval, if it has timestamps.
pub fn tsval(seg: &[u8]) -> Option<u32> {
    find(seg).map(|at| rd32(seg, at))
}

/// Whether the segment carries a timestamps option.
pub fn present(seg: &[u8]) -> bool {
    find(seg).is_some()
}

/// Applies `f` to the 32-bit word at `at` (inside the header found by
/// [`find`]) and keeps the checksum right.
#[inline(always)]
fn update(seg: &mut [u8], at: usize, f: impl FnOnce(u32) -> u32) {
    // `find` put the word past the fixed header, so the checksum (bytes
    // 16-17) and the word are disjoint halves.
    if at < 20 {
        return;
    }
    let (head, tail) = seg.split_at_mut(at);
    let (Some(csum), Some(word)) = (
        head.get_mut(CSUM_AT..CSUM_AT + 2),
        tail.first_chunk_mut::<4>(),
    ) else {
        return;
    };
    let old = u32::from_be_bytes(*word);
    let new = f(old);
    *word = new.to_be_bytes();
    let hc = u16::from_be_bytes([csum[0], csum[1]]);
    let hc = if at.is_multiple_of(2) {
        checksum::update32(hc, old, new)
    } else {
        checksum::update32_odd(hc, old, new)
    };
    csum.copy_from_slice(&hc.to_be_bytes());
}

/// A client's segment on its way to the backend: TSval += `delta`.
#[inline(always)]
pub fn shift_tsval(seg: &mut [u8], delta: u32) {
    if let Some(at) = find(seg) {
        update(seg, at, |v| v.wrapping_add(delta));
    }
}

/// A backend's segment on its way to the client: TSecr -= `delta`. A
/// TSecr is meaningful only with ACK set (RFC 7323 §3.2); a SYN's zero is
/// left alone.
#[inline(always)]
pub fn unshift_tsecr(seg: &mut [u8], delta: u32) {
    if seg
        .get(13)
        .is_none_or(|&f| !TcpFlags(f).contains(TcpFlags::ACK))
    {
        return;
    }
    if let Some(at) = find(seg) {
        update(seg, at + 4, |v| v.wrapping_sub(delta));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP header with `opts` as its options (padded to 4 bytes) and a
    /// correct checksum over the segment alone (enough to check that the
    /// incremental update equals a recomputation).
    fn seg(flags: u8, opts: &[u8]) -> Vec<u8> {
        let mut o = opts.to_vec();
        while !o.len().is_multiple_of(4) {
            o.push(KIND_END);
        }
        let mut s = vec![0u8; 20];
        s[0..2].copy_from_slice(&40000u16.to_be_bytes());
        s[2..4].copy_from_slice(&80u16.to_be_bytes());
        s[12] = ((20 + o.len()) / 4) as u8 * 16;
        s[13] = flags;
        s.extend_from_slice(&o);
        s.extend_from_slice(b"payload");
        let c = checksum::checksum(&s);
        s[16..18].copy_from_slice(&c.to_be_bytes());
        s
    }

    fn ts(v: u32, e: u32) -> Vec<u8> {
        let mut o = vec![KIND_TS, TS_LEN];
        o.extend_from_slice(&v.to_be_bytes());
        o.extend_from_slice(&e.to_be_bytes());
        o
    }

    fn verifies(s: &[u8]) -> bool {
        checksum::verify(s)
    }

    #[test]
    fn data_segment_layout_is_translated_both_ways() {
        let mut o = vec![KIND_NOP, KIND_NOP];
        o.extend(ts(1000, 77));
        let mut s = seg(0x10, &o);
        shift_tsval(&mut s, 5000);
        assert_eq!(tsval(&s), Some(6000));
        assert_eq!(rd32(&s, 28), 77, "TSecr untouched on the way in");
        assert!(verifies(&s));
        unshift_tsecr(&mut s, 70);
        assert_eq!(rd32(&s, 28), 7);
        assert_eq!(tsval(&s), Some(6000), "TSval untouched on the way out");
        assert!(verifies(&s));
    }

    #[test]
    fn syn_layout_and_odd_offsets_are_found_by_walking() {
        // Linux's SYN: MSS, SACK permitted, timestamps, NOP, window scale.
        let mut o = vec![2, 4, 0x05, 0xb4, 4, 2];
        o.extend(ts(0xFFFF_FFF0, 0));
        o.extend([KIND_NOP, 3, 3, 7]);
        let mut s = seg(0x02, &o);
        assert_eq!(find(&s), Some(28));
        shift_tsval(&mut s, 0x20);
        assert_eq!(tsval(&s), Some(0x10), "wraps");
        assert!(verifies(&s));
        // A SYN's TSecr (no ACK) stays zero.
        unshift_tsecr(&mut s, 5);
        assert_eq!(rd32(&s, 32), 0);
        // One NOP: the option sits at an odd offset.
        let mut o = vec![KIND_NOP];
        o.extend(ts(123_456, 654_321));
        let mut s = seg(0x18, &o);
        assert_eq!(find(&s), Some(23));
        shift_tsval(&mut s, 1);
        unshift_tsecr(&mut s, 21);
        assert_eq!((tsval(&s), rd32(&s, 27)), (Some(123_457), 654_300));
        assert!(verifies(&s));
    }

    #[test]
    fn segments_without_a_well_formed_option_are_left_alone() {
        let cases: Vec<Vec<u8>> = vec![
            seg(0x10, &[]),
            seg(0x10, &[2, 4, 5, 0xb4]),
            // END before the option.
            seg(
                0x10,
                &[KIND_END, KIND_NOP, KIND_TS, TS_LEN, 1, 2, 3, 4, 5, 6, 7, 8],
            ),
            // Wrong length, and a length that runs past the header.
            seg(0x10, &[KIND_TS, 8, 1, 2, 3, 4, 5, 6]),
            seg(0x10, &[KIND_NOP, KIND_NOP, 30, 12, 0, 0]),
        ];
        for c in cases {
            let mut s = c.clone();
            shift_tsval(&mut s, 99);
            unshift_tsecr(&mut s, 99);
            assert_eq!(s, c);
            assert_eq!(tsval(&s), None);
        }
        // A data offset beyond the segment, or a segment cut short.
        let mut o = vec![KIND_NOP, KIND_NOP];
        o.extend(ts(1, 2));
        let full = seg(0x10, &o);
        for cut in [0, 12, 20, 31] {
            let mut s = full[..cut].to_vec();
            shift_tsval(&mut s, 9);
            assert_eq!(s, full[..cut]);
        }
    }
}
