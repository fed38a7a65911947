//! In-place surgery on one TCP segment in an Ethernet frame: sequence and
//! acknowledgement numbers, flags, inserting bytes before the payload,
//! cutting the payload short, and building a segment that carries the rest.
//! The urgent pointer of a URG segment (an offset from its sequence number)
//! follows the payload it points into.
//!
//! Checksums are updated incrementally (RFC 1624 eqn. 3) from the ones the
//! segment carried, never recomputed: a segment that arrived corrupted stays
//! corrupted and the receiver still drops it. Moving `n` bytes of payload by
//! an odd number of positions byte-swaps their contribution to the sum
//! (RFC 1071 §2(B)), which is how shifted payloads are accounted for.
//!
//! [`locate`] validates the layout once (against the frame, not trusting
//! [`Parsed`]); every other function takes the [`Seg`] it returned and
//! cannot index outside the frame it was made for.

use crate::wire::checksum::{self, fold};
use crate::wire::{ip_proto, rd16, rd32, wr16, wr32, Fragment, L3Kind, Parsed};

/// Where a TCP segment sits in a frame. Offsets are absolute;
/// `l3 < l4`, `l4 + 20 <= payload <= end <= frame.len()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub v6: bool,
    pub l3: usize,
    pub l4: usize,
    pub payload: usize,
    pub end: usize,
}

/// Validates that `frame` holds an unfragmented IPv4/IPv6 TCP segment where
/// `p` says and returns its layout.
pub fn locate(frame: &[u8], p: &Parsed) -> Option<Seg> {
    if p.l4_proto != ip_proto::TCP || p.fragment != Fragment::None {
        return None;
    }
    let v6 = match p.l3 {
        L3Kind::Ipv4 => false,
        L3Kind::Ipv6 => true,
        _ => return None,
    };
    locate_at(frame, v6, p.l3_offset, p.l4_offset)
        .filter(|s| s.end == p.l3_end && s.payload == p.payload_offset)
}

/// Validates that `frame` holds a TCP segment at `l4` in the IPv4 or IPv6
/// packet at `l3` (lengths from the IP header) and returns its layout.
pub fn locate_at(frame: &[u8], v6: bool, l3: usize, l4: usize) -> Option<Seg> {
    let end = if v6 {
        if l3.checked_add(40)? > l4 || l4.checked_add(20)? > frame.len() || frame[l3] >> 4 != 6 {
            return None;
        }
        l3 + 40 + usize::from(rd16(frame, l3 + 4))
    } else {
        let ihl = usize::from(*frame.get(l3)? & 0x0F) * 4;
        if l3 + ihl != l4 || l4.checked_add(20)? > frame.len() || frame[l3] >> 4 != 4 {
            return None;
        }
        l3 + usize::from(rd16(frame, l3 + 2))
    };
    if !(l3 < l4 && l4.checked_add(20)? <= end && end <= frame.len()) {
        return None;
    }
    let doff = usize::from(frame[l4 + 12] >> 4) * 4;
    let payload = l4 + doff;
    if doff < 20 || payload > end {
        return None;
    }
    Some(Seg {
        v6,
        l3,
        l4,
        payload,
        end,
    })
}

impl Seg {
    pub fn payload_len(&self) -> usize {
        self.end - self.payload
    }
    pub fn seq(&self, f: &[u8]) -> u32 {
        rd32(f, self.l4 + 4)
    }
    pub fn ack(&self, f: &[u8]) -> u32 {
        rd32(f, self.l4 + 8)
    }
    pub fn flags(&self, f: &[u8]) -> u8 {
        f[self.l4 + 13]
    }
    fn csum(&self, f: &[u8]) -> u16 {
        rd16(f, self.l4 + 16)
    }
    fn set_csum(&self, f: &mut [u8], c: u16) {
        wr16(f, self.l4 + 16, c)
    }
    /// The TCP header (with options) and payload.
    pub fn l4_bytes<'a>(&self, f: &'a [u8]) -> &'a [u8] {
        &f[self.l4..self.end]
    }
}

/// RFC 1624 eqn. 3 with sums: `~(~HC + ~sub + add)`.
fn adjust(hc: u16, sub: u16, add: u16) -> u16 {
    !fold(u64::from(!hc) + u64::from(!sub) + u64::from(add))
}

/// The sum `data` contributes at an even (`odd = false`) or odd offset.
fn sum_at(data: &[u8], odd: bool) -> u16 {
    let s = checksum::sum(data);
    if odd {
        s.swap_bytes()
    } else {
        s
    }
}

/// Sets the sequence number.
pub fn set_seq(f: &mut [u8], s: &Seg, v: u32) {
    let c = checksum::update32(s.csum(f), s.seq(f), v);
    wr32(f, s.l4 + 4, v);
    s.set_csum(f, c);
}

/// Sets the acknowledgement number.
pub fn set_ack(f: &mut [u8], s: &Seg, v: u32) {
    let c = checksum::update32(s.csum(f), s.ack(f), v);
    wr32(f, s.l4 + 8, v);
    s.set_csum(f, c);
}

/// Sets the flags byte.
pub fn set_flags(f: &mut [u8], s: &Seg, flags: u8) {
    let old = rd16(f, s.l4 + 12);
    let new = (old & 0xFF00) | u16::from(flags);
    let c = checksum::update16(s.csum(f), old, new);
    wr16(f, s.l4 + 12, new);
    s.set_csum(f, c);
}

const URG: u8 = 0x20;

/// Moves the urgent pointer of a URG segment by `delta` bytes, after the
/// payload moved by as much relative to the sequence number. A point that
/// falls at or before the start of the segment is past: URG is cleared. One
/// beyond 65535 bytes cannot be written and stays at 65535.
fn move_urgent(f: &mut [u8], s: &Seg, delta: i64) {
    let flags = s.flags(f);
    if flags & URG == 0 {
        return;
    }
    let old = rd16(f, s.l4 + 18);
    let moved = i64::from(old) + delta;
    if moved <= 0 {
        set_flags(f, s, flags & !URG);
        let c = checksum::update16(s.csum(f), old, 0);
        wr16(f, s.l4 + 18, 0);
        s.set_csum(f, c);
    } else {
        let new = moved.min(i64::from(u16::MAX)) as u16;
        let c = checksum::update16(s.csum(f), old, new);
        wr16(f, s.l4 + 18, new);
        s.set_csum(f, c);
    }
}

/// Adds `delta` (may be negative) to the IP length field, updating the
/// IPv4 header checksum. Returns false (nothing changed) on overflow.
fn add_ip_len(f: &mut [u8], s: &Seg, delta: isize) -> bool {
    let at = if s.v6 { s.l3 + 4 } else { s.l3 + 2 };
    let old = rd16(f, at);
    let Some(new) = (old as isize)
        .checked_add(delta)
        .and_then(|n| u16::try_from(n).ok())
    else {
        return false;
    };
    wr16(f, at, new);
    if !s.v6 {
        let c = checksum::update16(rd16(f, s.l3 + 10), old, new);
        wr16(f, s.l3 + 10, c);
    }
    true
}

/// Inserts `hdr` before the payload of the segment in `buf` (the segment's
/// frame followed by room to grow), moving the payload back. Fixes the IP
/// length (and IPv4 header checksum) and the TCP checksum. Returns the new
/// layout (the frame now ends at its `end`), or `None`, changing nothing,
/// when `buf` has no room or the lengths would overflow.
pub fn insert(buf: &mut [u8], s: &Seg, hdr: &[u8]) -> Option<Seg> {
    let n = hdr.len();
    let new_end = s.end.checked_add(n)?;
    if new_end > buf.len() || s.end - s.l3 + n > usize::from(u16::MAX) {
        return None;
    }
    let payload_sum = checksum::sum(&buf[s.payload..s.end]);
    if !add_ip_len(buf, s, n as isize) {
        return None;
    }
    buf.copy_within(s.payload..s.end, s.payload + n);
    buf[s.payload..s.payload + n].copy_from_slice(hdr);
    // The TCP header length is a multiple of 4: the payload started at an
    // even offset of the segment and now starts at an even offset plus n.
    let moved = if n % 2 == 1 {
        payload_sum.swap_bytes()
    } else {
        payload_sum
    };
    let add = checksum::add(checksum::add(moved, checksum::sum(hdr)), n as u16);
    let c = adjust(s.csum(buf), payload_sum, add);
    let out = Seg { end: new_end, ..*s };
    out.set_csum(buf, c);
    move_urgent(buf, &out, n as i64);
    Some(out)
}

/// Cuts the payload to its first `keep` bytes (fixing lengths and
/// checksums). Returns the new layout; the frame now ends at its `end`.
pub fn truncate(f: &mut [u8], s: &Seg, keep: usize) -> Seg {
    let keep = keep.min(s.payload_len());
    let cut = s.payload + keep;
    let removed = s.end - cut;
    if removed == 0 {
        return *s;
    }
    let gone = checksum::add(sum_at(&f[cut..s.end], keep % 2 == 1), removed as u16);
    let c = adjust(s.csum(f), gone, 0);
    // Shrinking cannot overflow.
    let _ = add_ip_len(f, s, -(removed as isize));
    let out = Seg { end: cut, ..*s };
    out.set_csum(f, c);
    out
}

/// Writes into `out` the segment that carries the payload of `s` from byte
/// `from` on: the same headers (flags included), sequence number advanced by
/// `from + shift`, urgent pointer moved back by `from`. Returns the frame length, or `None` when it does not fit
/// `out` or `from` is not inside the payload.
pub fn tail(f: &[u8], s: &Seg, from: usize, shift: u32, out: &mut [u8]) -> Option<usize> {
    let p = s.payload_len();
    if from >= p {
        return None;
    }
    let rest = &f[s.payload + from..s.end];
    let len = s.payload + rest.len();
    let dst = out.get_mut(..len)?;
    dst[..s.payload].copy_from_slice(&f[..s.payload]);
    dst[s.payload..].copy_from_slice(rest);
    let t = Seg { end: len, ..*s };
    let seq = s.seq(f).wrapping_add(from as u32).wrapping_add(shift);
    if from == 0 {
        set_seq(dst, &t, seq);
        return Some(len);
    }
    let kept = &f[s.payload..s.payload + from];
    // Remove the first `from` bytes and the length they added; the rest
    // moves from offset `from` to offset 0 of the payload.
    let mut c = adjust(
        s.csum(f),
        checksum::add(checksum::sum(kept), from as u16),
        0,
    );
    c = adjust(c, sum_at(rest, from % 2 == 1), checksum::sum(rest));
    t.set_csum(dst, c);
    let _ = add_ip_len(dst, &t, -(from as isize));
    set_seq(dst, &t, seq);
    // The urgent data moved with the stream (by `shift`) like the sequence
    // number did: only the `from` bytes left behind count.
    move_urgent(dst, &t, -(from as i64));
    Some(len)
}

/// Applies `f` to every SACK block edge of the segment's options,
/// incrementally fixing the checksum. Malformed options: nothing changed.
pub fn map_sack_edges(frame: &mut [u8], s: &Seg, f: impl FnMut(u32) -> u32) {
    if let Ok(mut t) = crate::wire::TcpPacket::new_checked(&mut frame[s.l4..s.end]) {
        let _ = t.map_sack_edges(f);
    }
}

/// The MSS option's value, if the segment carries a well-formed one.
pub fn mss(frame: &[u8], s: &Seg) -> Option<u16> {
    let t = crate::wire::TcpPacket::new_checked(&frame[s.l4..s.end]).ok()?;
    let mut it = t.options_iter();
    it.find_map(|o| match o {
        Ok(crate::wire::TcpOption::Mss(m)) => Some(m),
        _ => None,
    })
}

/// Lowers the MSS option to `max`; returns true when it did.
pub fn clamp_mss(frame: &mut [u8], s: &Seg, max: u16) -> bool {
    match crate::wire::TcpPacket::new_checked(&mut frame[s.l4..s.end]) {
        Ok(mut t) => matches!(t.clamp_mss(max), Ok(Some(_))),
        Err(_) => false,
    }
}
