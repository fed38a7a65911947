//! IPv6 (RFC 8200) and a bounded walk over its extension headers.

use std::net::Ipv6Addr;

use super::ip_proto;
use super::{rd16, rd32, rd_v6, wr16, wr32, WireError};

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

/// Upper bound on extension headers walked before giving up. RFC 8200 §4.1
/// recommends at most one of each (destination options twice): 7 in total.
pub const MAX_EXT_HEADERS: usize = 8;

/// A view of an IPv6 packet. `payload()` is `40..40 + payload_len`; trailing
/// bytes (Ethernet padding) are ignored. Jumbograms are not supported.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T> {
    buffer: T,
    end: usize,
}

/// A fragment header found while walking the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Fragment {
    /// Offset of the fragment header from the start of the IPv6 header.
    pub header_offset: usize,
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More-fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

impl Ipv6Fragment {
    /// An atomic fragment (offset 0, M clear, RFC 6946) is a whole packet.
    pub fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more
    }
}

/// Where the upper-layer header starts, after the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Upper {
    /// Upper-layer protocol (TCP, UDP, ICMPv6, ESP, No Next Header, ...).
    /// For a non-first fragment: the fragment header's next header.
    pub proto: u8,
    /// Offset of the upper-layer header from the start of the IPv6 header.
    pub offset: usize,
    /// Number of extension headers skipped.
    pub ext_headers: usize,
    /// The fragment header, if one was seen. For a non-first fragment the
    /// walk stops right after it: the rest is fragment data.
    pub fragment: Option<Ipv6Fragment>,
}

/// Walk the extension header chain starting with next header `first` over
/// `payload` (the bytes after the fixed header). Offsets in the result are
/// relative to the start of `payload`.
///
/// Hop-by-hop, routing, destination options, mobility, HIP and Shim6 use the
/// generic `(len + 1) * 8` layout; fragment is 8 bytes; AH is
/// `(len + 2) * 4`. ESP and No Next Header end the walk (they are reported as
/// the upper protocol). At most [`MAX_EXT_HEADERS`] are walked.
pub fn walk_ext_headers(first: u8, payload: &[u8]) -> Result<Ipv6Upper, WireError> {
    let mut next = first;
    let mut off = 0usize;
    let mut count = 0usize;
    let mut fragment: Option<Ipv6Fragment> = None;
    loop {
        let generic = matches!(
            next,
            ip_proto::HOPOPT
                | ip_proto::IPV6_ROUTE
                | ip_proto::IPV6_OPTS
                | ip_proto::MOBILITY
                | ip_proto::HIP
                | ip_proto::SHIM6
        );
        if !generic && next != ip_proto::IPV6_FRAG && next != ip_proto::AH {
            return Ok(Ipv6Upper {
                proto: next,
                offset: off,
                ext_headers: count,
                fragment,
            });
        }
        if next == ip_proto::HOPOPT && count != 0 {
            return Err(WireError::BadExtHeader);
        }
        count += 1;
        if count > MAX_EXT_HEADERS {
            return Err(WireError::TooManyExtHeaders);
        }
        let hdr = payload.get(off..).ok_or(WireError::Truncated)?;
        if hdr.len() < 8 {
            // Every extension header is at least 8 bytes.
            return Err(WireError::Truncated);
        }
        let len = match next {
            ip_proto::IPV6_FRAG => 8,
            ip_proto::AH => (usize::from(hdr[1]) + 2) * 4,
            _ => (usize::from(hdr[1]) + 1) * 8,
        };
        if len > hdr.len() {
            return Err(WireError::Truncated);
        }
        let hdr_next = hdr[0];
        if next == ip_proto::IPV6_FRAG {
            if fragment.is_some() {
                return Err(WireError::BadExtHeader);
            }
            let fo = rd16(hdr, 2);
            let frag = Ipv6Fragment {
                header_offset: off,
                offset: fo & 0xFFF8,
                more: fo & 1 != 0,
                ident: rd32(hdr, 4),
            };
            fragment = Some(frag);
            if frag.offset != 0 {
                return Ok(Ipv6Upper {
                    proto: hdr_next,
                    offset: off + 8,
                    ext_headers: count,
                    fragment,
                });
            }
        }
        next = hdr_next;
        off += len;
    }
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Validate: 40 bytes, version 6, 40 + payload length within the buffer.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        Self::check_header(b)?;
        let end = HEADER_LEN + usize::from(rd16(b, 4));
        if end > b.len() {
            return Err(WireError::BadLength);
        }
        Ok(Ipv6Packet { buffer, end })
    }

    /// Like [`new_checked`](Self::new_checked) but the payload may be cut
    /// short (the packet embedded in an ICMPv6 error).
    pub fn new_checked_truncated(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        Self::check_header(b)?;
        let end = (HEADER_LEN + usize::from(rd16(b, 4))).min(b.len());
        Ok(Ipv6Packet { buffer, end })
    }

    fn check_header(b: &[u8]) -> Result<(), WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(WireError::BadVersion);
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// End of the packet within the buffer.
    pub fn packet_len(&self) -> usize {
        self.end
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        ((rd16(self.b(), 0) >> 4) & 0xFF) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        rd32(self.b(), 0) & 0x000F_FFFF
    }

    /// Payload length field.
    pub fn payload_len(&self) -> u16 {
        rd16(self.b(), 4)
    }

    /// Next header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        rd_v6(self.b(), 8)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        rd_v6(self.b(), 24)
    }

    /// Payload (extension headers and upper layer).
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.end]
    }

    /// Walk the extension headers; offsets are from the start of the IPv6
    /// header.
    pub fn upper_layer(&self) -> Result<Ipv6Upper, WireError> {
        let mut u = walk_ext_headers(self.next_header(), self.payload())?;
        u.offset += HEADER_LEN;
        if let Some(f) = u.fragment.as_mut() {
            f.header_offset += HEADER_LEN;
        }
        Ok(u)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Set the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = rd16(self.b(), 0);
        wr16(self.bm(), 0, (w & 0xF00F) | (u16::from(tc) << 4));
    }

    /// Set the flow label (low 20 bits of `fl`).
    pub fn set_flow_label(&mut self, fl: u32) {
        let b = self.bm();
        b[1] = (b[1] & 0xF0) | ((fl >> 16) as u8 & 0x0F);
        b[2] = (fl >> 8) as u8;
        b[3] = fl as u8;
    }

    /// Set the payload length field (the view's cached bounds do not change).
    pub fn set_payload_len(&mut self, v: u16) {
        wr16(self.bm(), 4, v);
    }

    /// Set the next header of the fixed header.
    pub fn set_next_header(&mut self, v: u8) {
        self.bm()[6] = v;
    }

    /// Set the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.bm()[7] = v;
    }

    /// Set the source address.
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.bm()[8..24].copy_from_slice(&a.octets());
    }

    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.bm()[24..40].copy_from_slice(&a.octets());
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let e = self.end;
        &mut self.bm()[HEADER_LEN..e]
    }
}

/// The fields of a fixed IPv6 header, as values: what [`Ipv6Repr::emit`]
/// writes and [`Ipv6Repr::parse`] reads (smoltcp's `Ipv6Repr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (low 20 bits).
    pub flow_label: u32,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// The fields of `packet`'s fixed header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Ipv6Repr {
        Ipv6Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            payload_len: usize::from(packet.payload_len()),
        }
    }

    /// Writes the fixed header into the first [`HEADER_LEN`] bytes of `buf`
    /// and returns a view over the header and the `payload_len` bytes after
    /// it. `Err(Truncated)` when `buf` has no room for the header,
    /// `Err(BadLength)` when the payload length does not fit its field or
    /// exceeds `buf`; only in the first case is nothing written.
    pub fn emit<'a>(&self, buf: &'a mut [u8]) -> Result<Ipv6Packet<&'a mut [u8]>, WireError> {
        let len = u16::try_from(self.payload_len).map_err(|_| WireError::BadLength)?;
        let h = buf.get_mut(..HEADER_LEN).ok_or(WireError::Truncated)?;
        let word = 6 << 28 | u32::from(self.traffic_class) << 20 | (self.flow_label & 0x000F_FFFF);
        wr32(h, 0, word);
        wr16(h, 4, len);
        h[6] = self.next_header;
        h[7] = self.hop_limit;
        h[8..24].copy_from_slice(&self.src_addr.octets());
        h[24..40].copy_from_slice(&self.dst_addr.octets());
        Ipv6Packet::new_checked(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(next: u8, len8: u8) -> [u8; 8] {
        [next, len8, 0, 0, 0, 0, 0, 0]
    }

    #[test]
    fn walk_chain() {
        let mut p = Vec::new();
        p.extend_from_slice(&ext(ip_proto::IPV6_OPTS, 0)); // hop-by-hop
        p.extend_from_slice(&ext(ip_proto::IPV6_ROUTE, 0)); // dest opts
        p.extend_from_slice(&ext(ip_proto::IPV6_FRAG, 0)); // routing
        p.extend_from_slice(&[ip_proto::AH, 0, 0, 1, 0, 0, 0, 7]); // frag, offset 0, M
        p.extend_from_slice(&[ip_proto::TCP, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // AH 12 bytes
        p.extend_from_slice(&[0u8; 20]);
        let u = walk_ext_headers(ip_proto::HOPOPT, &p).unwrap();
        assert_eq!(u.proto, ip_proto::TCP);
        assert_eq!(u.offset, 44);
        assert_eq!(u.ext_headers, 5);
        let f = u.fragment.unwrap();
        assert!(f.more && f.offset == 0 && f.header_offset == 24 && f.ident == 7);
    }

    #[test]
    fn walk_errors() {
        assert_eq!(
            walk_ext_headers(ip_proto::IPV6_OPTS, &ext(ip_proto::HOPOPT, 0)).unwrap_err(),
            WireError::BadExtHeader
        );
        assert_eq!(
            walk_ext_headers(ip_proto::IPV6_OPTS, &ext(ip_proto::TCP, 1)).unwrap_err(),
            WireError::Truncated
        );
        let many: Vec<u8> = (0..MAX_EXT_HEADERS + 1)
            .flat_map(|_| ext(ip_proto::IPV6_OPTS, 0))
            .collect();
        assert_eq!(
            walk_ext_headers(ip_proto::IPV6_OPTS, &many).unwrap_err(),
            WireError::TooManyExtHeaders
        );
        // ESP ends the walk.
        let u = walk_ext_headers(ip_proto::IPV6_OPTS, &ext(ip_proto::ESP, 0)).unwrap();
        assert_eq!((u.proto, u.offset), (ip_proto::ESP, 8));
        // Non-first fragment stops after the fragment header.
        let u =
            walk_ext_headers(ip_proto::IPV6_FRAG, &[ip_proto::TCP, 0, 0, 8, 0, 0, 0, 9]).unwrap();
        assert_eq!((u.proto, u.offset), (ip_proto::TCP, 8));
        assert_eq!(u.fragment.unwrap().offset, 8);
    }

    const REPR: Ipv6Repr = Ipv6Repr {
        src_addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
        dst_addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        next_header: ip_proto::TCP,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        payload_len: 20,
    };

    #[test]
    fn emit_writes_the_fixture_bytes() {
        let mut b = [0xAAu8; 60];
        let r = Ipv6Repr {
            traffic_class: 0xB8,
            flow_label: 0x1_2345,
            ..REPR
        };
        assert_eq!(r.emit(&mut b[..]).unwrap().payload().len(), 20);
        let mut want = vec![0x6B, 0x81, 0x23, 0x45, 0, 20, 6, 64];
        want.extend_from_slice(&REPR.src_addr.octets());
        want.extend_from_slice(&REPR.dst_addr.octets());
        assert_eq!(b[..40], want[..]);
        assert_eq!(b[40..], [0xAA; 20], "payload untouched");
    }

    #[test]
    fn emit_then_parse_round_trips() {
        let r = Ipv6Repr {
            traffic_class: 0xFF,
            flow_label: 0xF_FFFF,
            hop_limit: 255,
            next_header: ip_proto::ICMPV6,
            payload_len: 3,
            ..REPR
        };
        let mut b = [0xFFu8; 43];
        r.emit(&mut b[..]).unwrap();
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p), r);
        // Bits above the 20 of a flow label are not written.
        let wide = Ipv6Repr {
            flow_label: u32::MAX,
            ..r
        };
        wide.emit(&mut b[..]).unwrap();
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.flow_label(), p.traffic_class()), (0xF_FFFF, 0xFF));
    }

    #[test]
    fn emit_refuses_what_does_not_fit() {
        assert_eq!(
            REPR.emit(&mut [0u8; 39][..]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            REPR.emit(&mut [0u8; 59][..]).unwrap_err(),
            WireError::BadLength
        );
        let huge = Ipv6Repr {
            payload_len: 65_536,
            ..REPR
        };
        assert_eq!(
            huge.emit(&mut [0u8; 60][..]).unwrap_err(),
            WireError::BadLength
        );
    }
}
