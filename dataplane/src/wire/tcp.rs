//! TCP (RFC 9293) segments and options.
//!
//! A [`TcpPacket`] view must span exactly the segment (the IP payload), since
//! the checksum covers all of it.

use core::ops::BitOr;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::checksum;
use super::ip_proto;
use super::{rd16, rd32, wr16, wr32, WireError};

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Length of the longest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// The TCP flags byte (CWR ECE URG ACK PSH RST SYN FIN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECE.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// CWR.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// The raw byte.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// True when every flag in `other` is set.
    pub fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True when any flag in `other` is set.
    pub fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

/// Option kinds.
pub mod option_kind {
    /// End of option list.
    pub const END: u8 = 0;
    /// No-operation.
    pub const NOP: u8 = 1;
    /// Maximum segment size.
    pub const MSS: u8 = 2;
    /// Window scale.
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK permitted.
    pub const SACK_PERMITTED: u8 = 4;
    /// SACK blocks.
    pub const SACK: u8 = 5;
    /// Timestamps.
    pub const TIMESTAMPS: u8 = 8;
}

/// One decoded TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of option list; iteration stops after it.
    EndOfList,
    /// No-operation (padding).
    Nop,
    /// Maximum segment size.
    Mss(u16),
    /// Window scale shift count.
    WindowScale(u8),
    /// SACK permitted.
    SackPermitted,
    /// 1 to 4 SACK blocks.
    Sack(SackBlocks<'a>),
    /// Timestamps.
    Timestamps {
        /// TSval.
        tsval: u32,
        /// TSecr.
        tsecr: u32,
    },
    /// Any other kind, with its data (after kind and length).
    Unknown {
        /// Kind.
        kind: u8,
        /// Data bytes.
        data: &'a [u8],
    },
}

impl TcpOption<'_> {
    /// Bytes the option takes in a header.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::Nop => 1,
            TcpOption::Mss(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::Sack(blocks) => 2 + blocks.data.len(),
            TcpOption::Timestamps { .. } => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Writes the option at the start of `buf` and returns its length
    /// (smoltcp's `TcpOption::emit`). `Err(Truncated)`, writing nothing,
    /// when `buf` is shorter than [`buffer_len`](Self::buffer_len);
    /// `Err(BadOption)` when an option's length does not fit its byte.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.buffer_len();
        let len_byte = u8::try_from(len).map_err(|_| WireError::BadOption)?;
        let b = buf.get_mut(..len).ok_or(WireError::Truncated)?;
        let (kind, data): (u8, &[u8]) = match self {
            TcpOption::EndOfList => (option_kind::END, &[]),
            TcpOption::Nop => (option_kind::NOP, &[]),
            TcpOption::Mss(_) => (option_kind::MSS, &[]),
            TcpOption::WindowScale(_) => (option_kind::WINDOW_SCALE, &[]),
            TcpOption::SackPermitted => (option_kind::SACK_PERMITTED, &[]),
            TcpOption::Sack(blocks) => (option_kind::SACK, blocks.data),
            TcpOption::Timestamps { .. } => (option_kind::TIMESTAMPS, &[]),
            TcpOption::Unknown { kind, data } => (*kind, data),
        };
        b[0] = kind;
        if len == 1 {
            return Ok(1);
        }
        b[1] = len_byte;
        match *self {
            TcpOption::Mss(mss) => wr16(b, 2, mss),
            TcpOption::WindowScale(shift) => b[2] = shift,
            TcpOption::Timestamps { tsval, tsecr } => {
                wr32(b, 2, tsval);
                wr32(b, 6, tsecr);
            }
            _ => b[2..].copy_from_slice(data),
        }
        Ok(len)
    }
}

/// The blocks of a SACK option, as `(left edge, right edge)` pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SackBlocks<'a> {
    data: &'a [u8],
}

impl SackBlocks<'_> {
    /// Number of blocks (1..=4).
    pub fn count(&self) -> usize {
        self.data.len() / 8
    }
}

impl Iterator for SackBlocks<'_> {
    type Item = (u32, u32);
    fn next(&mut self) -> Option<(u32, u32)> {
        let (blk, rest) = self.data.split_first_chunk::<8>()?;
        self.data = rest;
        Some((
            u32::from_be_bytes([blk[0], blk[1], blk[2], blk[3]]),
            u32::from_be_bytes([blk[4], blk[5], blk[6], blk[7]]),
        ))
    }
}

/// Bounds of the option starting at `off`: `Ok(None)` at the end of the
/// data, else `(kind, len)` with `off + len <= data.len()`.
fn option_bounds(data: &[u8], off: usize) -> Result<Option<(u8, usize)>, WireError> {
    let Some(&kind) = data.get(off) else {
        return Ok(None);
    };
    if kind == option_kind::END || kind == option_kind::NOP {
        return Ok(Some((kind, 1)));
    }
    let len = usize::from(*data.get(off + 1).ok_or(WireError::BadOption)?);
    if len < 2 || len > data.len() - off {
        return Err(WireError::BadOption);
    }
    let fixed = match kind {
        option_kind::MSS => Some(4),
        option_kind::WINDOW_SCALE => Some(3),
        option_kind::SACK_PERMITTED => Some(2),
        option_kind::TIMESTAMPS => Some(10),
        _ => None,
    };
    if fixed.is_some_and(|f| f != len) {
        return Err(WireError::BadOption);
    }
    if kind == option_kind::SACK && !matches!(len, 10 | 18 | 26 | 34) {
        return Err(WireError::BadOption);
    }
    Ok(Some((kind, len)))
}

/// Iterator over the options of a segment. Yields `Err(BadOption)` once for
/// a malformed option and then stops; stops after `EndOfList`.
#[derive(Debug, Clone)]
pub struct TcpOptions<'a> {
    data: &'a [u8],
    off: usize,
    done: bool,
}

impl<'a> TcpOptions<'a> {
    /// Iterate over raw option bytes.
    pub fn new(data: &'a [u8]) -> Self {
        TcpOptions {
            data,
            off: 0,
            done: false,
        }
    }
}

impl<'a> Iterator for TcpOptions<'a> {
    type Item = Result<TcpOption<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (kind, len) = match option_bounds(self.data, self.off) {
            Ok(Some(b)) => b,
            Ok(None) => {
                self.done = true;
                return None;
            }
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        let opt = &self.data[self.off..self.off + len];
        self.off += len;
        let o = match kind {
            option_kind::END => {
                self.done = true;
                TcpOption::EndOfList
            }
            option_kind::NOP => TcpOption::Nop,
            option_kind::MSS => TcpOption::Mss(rd16(opt, 2)),
            option_kind::WINDOW_SCALE => TcpOption::WindowScale(opt[2]),
            option_kind::SACK_PERMITTED => TcpOption::SackPermitted,
            option_kind::SACK => TcpOption::Sack(SackBlocks { data: &opt[2..] }),
            option_kind::TIMESTAMPS => TcpOption::Timestamps {
                tsval: rd32(opt, 2),
                tsecr: rd32(opt, 6),
            },
            _ => TcpOption::Unknown {
                kind,
                data: &opt[2..],
            },
        };
        Some(Ok(o))
    }
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpPacket<T> {
    buffer: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Validate: 20 bytes, 5 <= data offset, data offset * 4 <= segment.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let header_len = usize::from(b[12] >> 4) * 4;
        if header_len < MIN_HEADER_LEN || header_len > b.len() {
            return Err(WireError::BadHeaderLen);
        }
        Ok(TcpPacket { buffer, header_len })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        rd16(self.b(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        rd16(self.b(), 2)
    }

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        rd32(self.b(), 4)
    }

    /// Acknowledgment number.
    pub fn ack_number(&self) -> u32 {
        rd32(self.b(), 8)
    }

    /// Header length in bytes (data offset * 4), as validated.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Flags byte.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.b()[13])
    }

    /// Window.
    pub fn window(&self) -> u16 {
        rd16(self.b(), 14)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), 16)
    }

    /// Urgent pointer.
    pub fn urgent_ptr(&self) -> u16 {
        rd16(self.b(), 18)
    }

    /// Raw option bytes.
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len]
    }

    /// Iterator over decoded options.
    pub fn options_iter(&self) -> TcpOptions<'_> {
        TcpOptions::new(self.options())
    }

    /// Segment data.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len..]
    }

    /// True when the checksum verifies over IPv4.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let len = u16::try_from(self.b().len()).unwrap_or(u16::MAX);
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::TCP, len);
        checksum::add(ph, checksum::sum(self.b())) == 0xFFFF
    }

    /// True when the checksum verifies over IPv6.
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let len = u32::try_from(self.b().len()).unwrap_or(u32::MAX);
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::TCP, len);
        checksum::add(ph, checksum::sum(self.b())) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        wr16(self.bm(), 0, v);
    }

    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        wr16(self.bm(), 2, v);
    }

    /// Set the sequence number.
    pub fn set_seq_number(&mut self, v: u32) {
        wr32(self.bm(), 4, v);
    }

    /// Set the acknowledgment number.
    pub fn set_ack_number(&mut self, v: u32) {
        wr32(self.bm(), 8, v);
    }

    /// Set the flags byte.
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.bm()[13] = f.0;
    }

    /// Set the window.
    pub fn set_window(&mut self, v: u16) {
        wr16(self.bm(), 14, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.bm(), 16, v);
    }

    /// Set the urgent pointer.
    pub fn set_urgent_ptr(&mut self, v: u16) {
        wr16(self.bm(), 18, v);
    }

    /// Mutable option bytes.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let h = self.header_len;
        &mut self.bm()[MIN_HEADER_LEN..h]
    }

    /// Mutable segment data.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len;
        &mut self.bm()[h..]
    }

    /// Recompute the checksum over IPv4.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v4(src, dst, ip_proto::TCP, self.b());
        self.set_checksum(c);
    }

    /// Recompute the checksum over IPv6.
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v6(src, dst, ip_proto::TCP, self.b());
        self.set_checksum(c);
    }

    /// Set the source port, updating the checksum incrementally.
    pub fn rewrite_src_port(&mut self, v: u16) {
        let c = checksum::update16(self.checksum(), self.src_port(), v);
        self.set_src_port(v);
        self.set_checksum(c);
    }

    /// Set the destination port, updating the checksum incrementally.
    pub fn rewrite_dst_port(&mut self, v: u16) {
        let c = checksum::update16(self.checksum(), self.dst_port(), v);
        self.set_dst_port(v);
        self.set_checksum(c);
    }

    /// Set the window, updating the checksum incrementally.
    pub fn rewrite_window(&mut self, v: u16) {
        let c = checksum::update16(self.checksum(), self.window(), v);
        self.set_window(v);
        self.set_checksum(c);
    }

    /// Set the sequence number, updating the checksum incrementally.
    pub fn rewrite_seq_number(&mut self, v: u32) {
        let c = checksum::update32(self.checksum(), self.seq_number(), v);
        self.set_seq_number(v);
        self.set_checksum(c);
    }

    /// Set the acknowledgment number, updating the checksum incrementally.
    pub fn rewrite_ack_number(&mut self, v: u32) {
        let c = checksum::update32(self.checksum(), self.ack_number(), v);
        self.set_ack_number(v);
        self.set_checksum(c);
    }

    /// Account in the checksum for an IPv4 pseudo-header address change
    /// (the IP header itself is rewritten by the caller).
    pub fn adjust_checksum_v4_addr(&mut self, old: Ipv4Addr, new: Ipv4Addr) {
        let c = checksum::update_v4_addr(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Account in the checksum for an IPv6 pseudo-header address change.
    pub fn adjust_checksum_v6_addr(&mut self, old: &Ipv6Addr, new: &Ipv6Addr) {
        let c = checksum::update_v6_addr(self.checksum(), old, new);
        self.set_checksum(c);
    }

    /// Apply `f` to every SACK block edge, updating the checksum
    /// incrementally. Options are validated first: on a malformed option
    /// nothing is written and `Err(BadOption)` is returned.
    pub fn map_sack_edges(&mut self, mut f: impl FnMut(u32) -> u32) -> Result<(), WireError> {
        self.validate_options()?;
        let mut csum = self.checksum();
        let mut off = 0;
        while let Ok(Some((kind, len))) = option_bounds(self.options(), off) {
            if kind == option_kind::END {
                break;
            }
            if kind == option_kind::SACK {
                let mut e = off + 2;
                while e + 4 <= off + len {
                    let at = MIN_HEADER_LEN + e;
                    let old = rd32(self.b(), at);
                    let new = f(old);
                    csum = if at & 1 == 0 {
                        checksum::update32(csum, old, new)
                    } else {
                        checksum::update32_odd(csum, old, new)
                    };
                    wr32(self.bm(), at, new);
                    e += 4;
                }
            }
            off += len;
        }
        self.set_checksum(csum);
        Ok(())
    }

    /// Lower the MSS option to `max` if it is larger, updating the checksum
    /// incrementally. Returns the previous MSS when it was clamped.
    pub fn clamp_mss(&mut self, max: u16) -> Result<Option<u16>, WireError> {
        self.validate_options()?;
        let mut off = 0;
        while let Ok(Some((kind, len))) = option_bounds(self.options(), off) {
            if kind == option_kind::END {
                break;
            }
            if kind == option_kind::MSS {
                let at = MIN_HEADER_LEN + off + 2;
                let old = rd16(self.b(), at);
                if old <= max {
                    return Ok(None);
                }
                let c = if at & 1 == 0 {
                    checksum::update16(self.checksum(), old, max)
                } else {
                    checksum::update16_odd(self.checksum(), old, max)
                };
                wr16(self.bm(), at, max);
                self.set_checksum(c);
                return Ok(Some(old));
            }
            off += len;
        }
        Ok(None)
    }

    fn validate_options(&self) -> Result<(), WireError> {
        for o in self.options_iter() {
            o?;
        }
        Ok(())
    }
}

/// The fields of a TCP header without options, as values: what
/// [`TcpRepr::emit`] writes and [`TcpRepr::parse`] reads (smoltcp's
/// `TcpRepr`, without options or payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Flags.
    pub flags: TcpFlags,
    /// Window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent_ptr: u16,
}

impl TcpRepr {
    /// The fields of `segment`'s header (options are not part of the
    /// representation).
    pub fn parse<T: AsRef<[u8]>>(segment: &TcpPacket<T>) -> TcpRepr {
        TcpRepr {
            src_port: segment.src_port(),
            dst_port: segment.dst_port(),
            seq_number: segment.seq_number(),
            ack_number: segment.ack_number(),
            flags: segment.flags(),
            window: segment.window(),
            urgent_ptr: segment.urgent_ptr(),
        }
    }

    /// Writes the header into the first [`MIN_HEADER_LEN`] bytes of `buf`
    /// (data offset 5, checksum 0) and returns a view over the whole of
    /// `buf` as the segment, so the caller fills the checksum once the
    /// data after the header is in place (`fill_checksum_v4`/`_v6`).
    /// `Err(Truncated)`, writing nothing, when `buf` is shorter than the
    /// header.
    pub fn emit<'a>(&self, buf: &'a mut [u8]) -> Result<TcpPacket<&'a mut [u8]>, WireError> {
        self.emit_with_options(buf, &[])
    }

    /// [`emit`](Self::emit) with `options` (already laid out and padded)
    /// after the fixed header, the data offset counting them.
    /// `Err(BadOption)` when they are not a whole number of 32-bit words or
    /// longer than 40 bytes, `Err(Truncated)` when `buf` has no room for
    /// the header and them; nothing is written then.
    pub fn emit_with_options<'a>(
        &self,
        buf: &'a mut [u8],
        options: &[u8],
    ) -> Result<TcpPacket<&'a mut [u8]>, WireError> {
        if !options.len().is_multiple_of(4) || options.len() > MAX_HEADER_LEN - MIN_HEADER_LEN {
            return Err(WireError::BadOption);
        }
        let header_len = MIN_HEADER_LEN + options.len();
        let h = buf.get_mut(..header_len).ok_or(WireError::Truncated)?;
        wr16(h, 0, self.src_port);
        wr16(h, 2, self.dst_port);
        wr32(h, 4, self.seq_number);
        wr32(h, 8, self.ack_number);
        h[12] = ((header_len / 4) as u8) << 4;
        h[13] = self.flags.0;
        wr16(h, 14, self.window);
        wr16(h, 16, 0);
        wr16(h, 18, self.urgent_ptr);
        h[MIN_HEADER_LEN..].copy_from_slice(options);
        TcpPacket::new_checked(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_decode() {
        let opts = [
            2, 4, 0x05, 0xb4, // MSS 1460
            1,    // NOP
            3, 3, 7, // WS 7
            4, 2, // SACK permitted
            8, 10, 0, 0, 0, 1, 0, 0, 0, 2, // TS
            5, 10, 0, 0, 0, 10, 0, 0, 0, 20, // SACK 1 block
            0, 0, // END + pad
        ];
        let v: Vec<_> = TcpOptions::new(&opts).collect::<Result<_, _>>().unwrap();
        assert_eq!(v[0], TcpOption::Mss(1460));
        assert_eq!(v[1], TcpOption::Nop);
        assert_eq!(v[2], TcpOption::WindowScale(7));
        assert_eq!(v[3], TcpOption::SackPermitted);
        assert_eq!(v[4], TcpOption::Timestamps { tsval: 1, tsecr: 2 });
        match v[5] {
            TcpOption::Sack(b) => assert_eq!(b.collect::<Vec<_>>(), vec![(10, 20)]),
            _ => panic!(),
        }
        assert_eq!(v[6], TcpOption::EndOfList);
        assert_eq!(v.len(), 7);
    }

    #[test]
    fn options_malformed() {
        for bad in [
            &[2u8, 4, 5][..],                 // MSS runs past the end
            &[2, 3, 5, 0][..],                // MSS with wrong length
            &[5, 9, 0, 0, 0, 0, 0, 0, 0][..], // SACK not 2 + 8n
            &[30, 1][..],                     // length < 2
            &[30][..],                        // missing length
            &[8, 10, 0][..],                  // TS truncated
        ] {
            let last = TcpOptions::new(bad).last().unwrap();
            assert_eq!(last, Err(WireError::BadOption), "{bad:?}");
        }
    }

    #[test]
    fn data_offset() {
        let mut s = [0u8; 24];
        s[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&s[..]).unwrap_err(),
            WireError::BadHeaderLen
        );
        s[12] = 0x70;
        assert_eq!(
            TcpPacket::new_checked(&s[..]).unwrap_err(),
            WireError::BadHeaderLen
        );
        s[12] = 0x60;
        assert_eq!(TcpPacket::new_checked(&s[..]).unwrap().options().len(), 4);
        assert_eq!(
            TcpPacket::new_checked(&s[..19]).unwrap_err(),
            WireError::Truncated
        );
    }

    const REPR: TcpRepr = TcpRepr {
        src_port: 80,
        dst_port: 40000,
        seq_number: 5000,
        ack_number: 0,
        flags: TcpFlags::RST,
        window: 0,
        urgent_ptr: 0,
    };

    #[test]
    fn emit_writes_the_fixture_bytes() {
        let mut b = [0xAAu8; 20];
        let mut seg = REPR.emit(&mut b[..]).unwrap();
        seg.fill_checksum_v4(Ipv4Addr::new(10, 1, 0, 100), Ipv4Addr::new(10, 1, 0, 50));
        assert_eq!(
            b,
            [0, 80, 0x9c, 0x40, 0, 0, 0x13, 0x88, 0, 0, 0, 0, 0x50, 0x04, 0, 0, 0xeb, 0x30, 0, 0]
        );
    }

    #[test]
    fn emit_then_parse_round_trips() {
        let r = TcpRepr {
            src_port: 0xFFFF,
            dst_port: 1,
            seq_number: u32::MAX,
            ack_number: 0x0102_0304,
            flags: TcpFlags::SYN | TcpFlags::ACK | TcpFlags::CWR,
            window: 64_240,
            urgent_ptr: 7,
        };
        // The options and checksum of the old bytes are overwritten; what
        // follows the header is the segment's data.
        let mut b = [0xFFu8; 25];
        let mut seg = r.emit(&mut b[..]).unwrap();
        assert_eq!((seg.header_len(), seg.payload().len()), (20, 5));
        let (src, dst) = (Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
        seg.fill_checksum_v6(&src, &dst);
        let seg = TcpPacket::new_checked(&b[..]).unwrap();
        assert!(seg.verify_checksum_v6(&src, &dst));
        assert_eq!(TcpRepr::parse(&seg), r);
        assert_eq!(
            REPR.emit(&mut [0u8; 19][..]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn emit_with_options_counts_them_in_the_data_offset() {
        let r = TcpRepr {
            flags: TcpFlags::SYN | TcpFlags::ACK,
            ..REPR
        };
        let opts = [2, 4, 0x05, 0xb4, 1, 3, 3, 7];
        let mut b = [0xFFu8; 30];
        let seg = r.emit_with_options(&mut b[..], &opts).unwrap();
        assert_eq!((seg.header_len(), seg.payload().len()), (28, 2));
        let v: Vec<_> = seg.options_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            v,
            [
                TcpOption::Mss(1460),
                TcpOption::Nop,
                TcpOption::WindowScale(7)
            ]
        );
        assert_eq!(TcpRepr::parse(&seg), r);
        assert_eq!(b[12], 7 << 4);
        for bad in [&[1u8, 1, 1][..], &[1; 44][..]] {
            assert_eq!(
                r.emit_with_options(&mut [0u8; 80][..], bad).unwrap_err(),
                WireError::BadOption
            );
        }
        assert_eq!(
            r.emit_with_options(&mut [0u8; 27][..], &opts).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn rewrite_window_keeps_the_checksum_valid() {
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut b = [0u8; 23];
        b[20..].copy_from_slice(b"abc");
        let mut seg = REPR.emit(&mut b[..]).unwrap();
        seg.fill_checksum_v4(src, dst);
        seg.rewrite_window(0xFFFF);
        assert_eq!(seg.window(), 0xFFFF);
        assert!(seg.verify_checksum_v4(src, dst));
    }

    #[test]
    fn options_emit_then_decode() {
        let sack = [0u8, 0, 0, 10, 0, 0, 0, 20];
        let opts = [
            TcpOption::Mss(1460),
            TcpOption::Nop,
            TcpOption::WindowScale(7),
            TcpOption::SackPermitted,
            TcpOption::Timestamps { tsval: 1, tsecr: 2 },
            TcpOption::Sack(SackBlocks { data: &sack }),
            TcpOption::Unknown {
                kind: 30,
                data: &[9, 9],
            },
            TcpOption::EndOfList,
        ];
        let mut b = [0xAAu8; 40];
        let mut n = 0;
        for o in &opts {
            n += o.emit(&mut b[n..]).unwrap();
        }
        assert_eq!(n, 35);
        assert_eq!(
            b[..20],
            [2, 4, 0x05, 0xb4, 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]
        );
        let back: Vec<_> = TcpOptions::new(&b[..n]).collect::<Result<_, _>>().unwrap();
        assert_eq!(back, opts);
        assert_eq!(
            TcpOption::Mss(1).emit(&mut b[..3]),
            Err(WireError::Truncated)
        );
        let long = [0u8; 254];
        let unknown = TcpOption::Unknown {
            kind: 30,
            data: &long,
        };
        assert_eq!(unknown.emit(&mut [0u8; 300]), Err(WireError::BadOption));
    }
}
