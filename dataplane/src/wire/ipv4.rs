//! IPv4 (RFC 791).

use std::net::Ipv4Addr;

use super::checksum;
use super::{rd16, rd_v4, wr16, WireError};

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// A view of an IPv4 packet.
///
/// The header length (IHL) and the end of the packet are validated once and
/// cached; `payload()` is `header_len..end`. Trailing bytes after the total
/// length (Ethernet padding) are outside the packet and ignored.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T> {
    buffer: T,
    header_len: usize,
    end: usize,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Validate version 4, 5 <= IHL, header within the buffer,
    /// header_len <= total length <= buffer length. The header checksum is
    /// not verified here; see [`Ipv4Packet::verify_checksum`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let (header_len, total) = Self::check_header(buffer.as_ref())?;
        if total > buffer.as_ref().len() {
            return Err(WireError::BadLength);
        }
        Ok(Ipv4Packet {
            buffer,
            header_len,
            end: total,
        })
    }

    /// Like [`new_checked`](Self::new_checked) but the packet may be cut
    /// short (the header embedded in an ICMP error carries only the first
    /// bytes of the original datagram): `payload()` ends at the smaller of
    /// the total length and the buffer.
    pub fn new_checked_truncated(buffer: T) -> Result<Self, WireError> {
        let (header_len, total) = Self::check_header(buffer.as_ref())?;
        let end = total.min(buffer.as_ref().len());
        Ok(Ipv4Packet {
            buffer,
            header_len,
            end,
        })
    }

    fn check_header(b: &[u8]) -> Result<(usize, usize), WireError> {
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(WireError::BadVersion);
        }
        let header_len = usize::from(b[0] & 0x0F) * 4;
        if header_len < MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLen);
        }
        if header_len > b.len() {
            return Err(WireError::Truncated);
        }
        let total = usize::from(rd16(b, 2));
        if total < header_len {
            return Err(WireError::BadLength);
        }
        Ok((header_len, total))
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Header length in bytes (IHL * 4), as validated.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// End of the packet within the buffer (total length, or less for a
    /// truncated view).
    pub fn packet_len(&self) -> usize {
        self.end
    }

    /// The DSCP/ECN byte.
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }

    /// Total length field.
    pub fn total_len(&self) -> u16 {
        rd16(self.b(), 2)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        rd16(self.b(), 4)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    /// Fragment offset in bytes (the field is in units of 8).
    pub fn frag_offset(&self) -> u16 {
        (rd16(self.b(), 6) & 0x1FFF) << 3
    }

    /// True for any fragment (MF set or offset non-zero).
    pub fn is_fragment(&self) -> bool {
        rd16(self.b(), 6) & 0x3FFF != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), 10)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        rd_v4(self.b(), 12)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        rd_v4(self.b(), 16)
    }

    /// The whole header including options.
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len]
    }

    /// Options (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len]
    }

    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.header())
    }

    /// The payload: header end to packet end.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len..self.end]
    }
}

impl<'a> Ipv4Packet<&'a [u8]> {
    /// The payload, borrowed for the buffer's lifetime.
    pub fn into_payload(self) -> &'a [u8] {
        &self.buffer[self.header_len..self.end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Set the DSCP/ECN byte.
    pub fn set_tos(&mut self, v: u8) {
        self.bm()[1] = v;
    }

    /// Set the total length field (the view's cached bounds do not change).
    pub fn set_total_len(&mut self, v: u16) {
        wr16(self.bm(), 2, v);
    }

    /// Set the identification.
    pub fn set_ident(&mut self, v: u16) {
        wr16(self.bm(), 4, v);
    }

    /// Set or clear don't-fragment.
    pub fn set_dont_frag(&mut self, df: bool) {
        let b = self.bm();
        b[6] = (b[6] & !0x40) | if df { 0x40 } else { 0 };
    }

    /// Set the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.bm()[8] = v;
    }

    /// Set the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.bm()[9] = v;
    }

    /// Set the header checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.bm(), 10, v);
    }

    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.bm()[12..16].copy_from_slice(&a.octets());
    }

    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.bm()[16..20].copy_from_slice(&a.octets());
    }

    /// Recompute the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let h = self.header_len;
        let c = checksum::checksum(&self.b()[..h]);
        self.set_checksum(c);
    }

    /// Set the source address and update the header checksum incrementally.
    /// The caller still owes the L4 checksum its pseudo-header update.
    pub fn rewrite_src_addr(&mut self, a: Ipv4Addr) {
        let c = checksum::update_v4_addr(self.checksum(), self.src_addr(), a);
        self.set_src_addr(a);
        self.set_checksum(c);
    }

    /// Set the destination address and update the header checksum
    /// incrementally.
    pub fn rewrite_dst_addr(&mut self, a: Ipv4Addr) {
        let c = checksum::update_v4_addr(self.checksum(), self.dst_addr(), a);
        self.set_dst_addr(a);
        self.set_checksum(c);
    }

    /// Set the TTL and update the header checksum incrementally.
    pub fn rewrite_ttl(&mut self, ttl: u8) {
        let old = rd16(self.b(), 8);
        let new = (u16::from(ttl) << 8) | (old & 0xFF);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_ttl(ttl);
        self.set_checksum(c);
    }

    /// Mutable header including options.
    pub fn header_mut(&mut self) -> &mut [u8] {
        let h = self.header_len;
        &mut self.bm()[..h]
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, e) = (self.header_len, self.end);
        &mut self.bm()[h..e]
    }
}

/// The fields of an IPv4 header without options, as values: what
/// [`Ipv4Repr::emit`] writes and [`Ipv4Repr::parse`] reads (smoltcp's
/// `Ipv4Repr`). An emitted header is never a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// The DSCP/ECN byte.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// Payload length in bytes (total length minus the header).
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// The fields of `packet`'s header (its options, fragment offset and
    /// checksum are not part of the representation).
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Ipv4Repr {
        Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            payload_len: packet.payload().len(),
        }
    }

    /// Writes the header into the first [`MIN_HEADER_LEN`] bytes of `buf`
    /// (version 4, IHL 5, fragment offset 0, header checksum filled) and
    /// returns a view over the header and the `payload_len` bytes after it.
    /// `Err(Truncated)` when `buf` has no room for the header,
    /// `Err(BadLength)` when the total length does not fit its field or
    /// exceeds `buf`; only in the first case is nothing written.
    pub fn emit<'a>(&self, buf: &'a mut [u8]) -> Result<Ipv4Packet<&'a mut [u8]>, WireError> {
        let total =
            u16::try_from(MIN_HEADER_LEN + self.payload_len).map_err(|_| WireError::BadLength)?;
        let h = buf.get_mut(..MIN_HEADER_LEN).ok_or(WireError::Truncated)?;
        h[0] = 0x45;
        h[1] = self.tos;
        wr16(h, 2, total);
        wr16(h, 4, self.ident);
        wr16(h, 6, if self.dont_frag { 0x4000 } else { 0 });
        h[8] = self.ttl;
        h[9] = self.protocol;
        wr16(h, 10, 0);
        h[12..16].copy_from_slice(&self.src_addr.octets());
        h[16..20].copy_from_slice(&self.dst_addr.octets());
        let c = checksum::checksum(h);
        wr16(h, 10, c);
        Ipv4Packet::new_checked(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> [u8; 24] {
        let mut h = [0u8; 24];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&22u16.to_be_bytes());
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&[10, 0, 0, 1]);
        h[16..20].copy_from_slice(&[10, 0, 0, 2]);
        let c = checksum::checksum(&h[..20]);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    #[test]
    fn lengths() {
        let h = hdr();
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 2); // 2 bytes of trailing padding ignored
        assert_eq!(
            Ipv4Packet::new_checked(&h[..21]).unwrap_err(),
            WireError::BadLength
        );
        assert_eq!(
            Ipv4Packet::new_checked_truncated(&h[..21])
                .unwrap()
                .payload()
                .len(),
            1
        );
        let mut bad = h;
        bad[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            WireError::BadHeaderLen
        );
        bad[0] = 0x46;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            WireError::BadLength
        );
        bad[0] = 0x4f;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            WireError::Truncated
        );
        bad[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            WireError::BadVersion
        );
    }

    #[test]
    fn setters_keep_bounds() {
        let mut h = hdr();
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.set_total_len(0xFFFF);
        assert_eq!(p.payload().len(), 2);
        p.set_total_len(22);
        p.rewrite_ttl(1);
        p.rewrite_src_addr(Ipv4Addr::new(192, 0, 2, 7));
        assert!(p.verify_checksum());
    }

    const REPR: Ipv4Repr = Ipv4Repr {
        src_addr: Ipv4Addr::new(10, 0, 0, 1),
        dst_addr: Ipv4Addr::new(10, 0, 0, 2),
        protocol: 17,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: false,
        payload_len: 2,
    };

    #[test]
    fn emit_writes_the_fixture_bytes() {
        let mut b = [0xAAu8; 22];
        let p = REPR.emit(&mut b[..]).unwrap();
        assert_eq!(p.payload().len(), 2);
        assert_eq!(b[..20], hdr()[..20]);
        assert_eq!(b[20..], [0xAA, 0xAA], "payload untouched");
    }

    #[test]
    fn emit_then_parse_round_trips() {
        let r = Ipv4Repr {
            tos: 0xB8,
            ident: 0xBEEF,
            dont_frag: true,
            ttl: 1,
            protocol: 6,
            payload_len: 5,
            ..REPR
        };
        // Options and a fragment offset in the old bytes are overwritten.
        let mut b = [0xFFu8; 30];
        r.emit(&mut b[..]).unwrap();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert!(!p.is_fragment());
        assert_eq!((p.header_len(), p.total_len()), (20, 25));
        assert_eq!(Ipv4Repr::parse(&p), r);
    }

    #[test]
    fn emit_refuses_what_does_not_fit() {
        assert_eq!(
            REPR.emit(&mut [0u8; 19][..]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            REPR.emit(&mut [0u8; 21][..]).unwrap_err(),
            WireError::BadLength
        );
        let huge = Ipv4Repr {
            payload_len: 65_516,
            ..REPR
        };
        assert_eq!(
            huge.emit(&mut [0u8; 40][..]).unwrap_err(),
            WireError::BadLength
        );
    }
}
