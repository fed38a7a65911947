//! UDP (RFC 768).
//!
//! Checksum rules: over IPv4 a checksum field of 0 means "no checksum" and
//! stays 0 through every rewrite; a computed checksum of 0 is sent as 0xFFFF.
//! Over IPv6 the checksum is mandatory (a 0 field never verifies).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::checksum;
use super::ip_proto;
use super::{rd16, wr16, WireError};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram. The length field is validated against the
/// buffer once (8 <= length <= buffer); `payload()` ends at the length field,
/// bytes after it are ignored.
#[derive(Debug, Clone)]
pub struct UdpPacket<T> {
    buffer: T,
    len: usize,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Validate the header and the length field.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = usize::from(rd16(b, 4));
        if len < HEADER_LEN || len > b.len() {
            return Err(WireError::BadLength);
        }
        Ok(UdpPacket { buffer, len })
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

    /// Length field.
    pub fn len(&self) -> u16 {
        rd16(self.b(), 4)
    }

    /// True when the datagram carries no data.
    pub fn is_empty(&self) -> bool {
        self.len == HEADER_LEN
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), 6)
    }

    /// Datagram data (up to the length field).
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.len]
    }

    fn datagram(&self) -> &[u8] {
        &self.b()[..self.len]
    }

    /// True when the checksum verifies over IPv4, or is 0 ("none").
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let ph = checksum::pseudo_header_v4(src, dst, ip_proto::UDP, self.len());
        checksum::add(ph, checksum::sum(self.datagram())) == 0xFFFF
    }

    /// True when the checksum verifies over IPv6 (0 is invalid).
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::UDP, u32::from(self.len()));
        checksum::add(ph, checksum::sum(self.datagram())) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
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

    /// Set the length field (the view's cached bounds do not change).
    pub fn set_len(&mut self, v: u16) {
        wr16(self.bm(), 4, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.bm(), 6, v);
    }

    /// Mutable datagram data.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = self.len;
        &mut self.bm()[HEADER_LEN..l]
    }

    /// Compute the checksum over IPv4 (a computed 0 is written as 0xFFFF).
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v4(src, dst, ip_proto::UDP, self.datagram());
        self.set_checksum(checksum::udp_finish(c));
    }

    /// Compute the checksum over IPv6 (a computed 0 is written as 0xFFFF).
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v6(src, dst, ip_proto::UDP, self.datagram());
        self.set_checksum(checksum::udp_finish(c));
    }

    /// Apply an incremental update unless the checksum is 0 ("none"); a
    /// result of 0 is written as 0xFFFF.
    fn update(&mut self, f: impl FnOnce(u16) -> u16) {
        let old = self.checksum();
        if old != 0 {
            self.set_checksum(checksum::udp_finish(f(old)));
        }
    }

    /// Set the source port, updating the checksum incrementally.
    pub fn rewrite_src_port(&mut self, v: u16) {
        let old = self.src_port();
        self.update(|c| checksum::update16(c, old, v));
        self.set_src_port(v);
    }

    /// Set the destination port, updating the checksum incrementally.
    pub fn rewrite_dst_port(&mut self, v: u16) {
        let old = self.dst_port();
        self.update(|c| checksum::update16(c, old, v));
        self.set_dst_port(v);
    }

    /// Account for an IPv4 pseudo-header address change.
    pub fn adjust_checksum_v4_addr(&mut self, old: Ipv4Addr, new: Ipv4Addr) {
        self.update(|c| checksum::update_v4_addr(c, old, new));
    }

    /// Account for an IPv6 pseudo-header address change.
    pub fn adjust_checksum_v6_addr(&mut self, old: &Ipv6Addr, new: &Ipv6Addr) {
        self.update(|c| checksum::update_v6_addr(c, old, new));
    }
}
