//! ICMP for IPv4 (RFC 792, RFC 1191).
//!
//! An [`Icmpv4Packet`] view must span exactly the ICMP message (the IP
//! payload), since the checksum covers all of it.

use super::checksum;
use super::ipv4::Ipv4Packet;
use super::{rd16, wr16, WireError};

/// Length of the ICMP header (type, code, checksum, 4 bytes "rest").
pub const HEADER_LEN: usize = 8;

/// Message types.
pub mod msg_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source quench (deprecated).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
}

/// Destination-unreachable code: fragmentation needed and DF set.
pub const CODE_FRAG_NEEDED: u8 = 4;

/// Sets the type of the ICMP or ICMPv6 message `msg` (whose header,
/// type, code and checksum, the caller checked is there), updating its
/// checksum incrementally.
pub(super) fn rewrite_type(msg: &mut [u8], v: u8) {
    let old = rd16(msg, 0);
    let new = u16::from(v) << 8 | (old & 0xFF);
    let c = checksum::update16(rd16(msg, 2), old, new);
    msg[0] = v;
    wr16(msg, 2, c);
}

/// A view of an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Validate: at least the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Icmpv4Packet { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Type.
    pub fn msg_type(&self) -> u8 {
        self.b()[0]
    }

    /// Code.
    pub fn code(&self) -> u8 {
        self.b()[1]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        rd16(self.b(), 2)
    }

    /// Echo identifier (bytes 4..6; meaningful for echo messages).
    pub fn echo_ident(&self) -> u16 {
        rd16(self.b(), 4)
    }

    /// Echo sequence number (bytes 6..8; meaningful for echo messages).
    pub fn echo_seq(&self) -> u16 {
        rd16(self.b(), 6)
    }

    /// Next-hop MTU of a frag-needed message (RFC 1191; bytes 6..8).
    pub fn next_hop_mtu(&self) -> u16 {
        rd16(self.b(), 6)
    }

    /// True for echo request or reply.
    pub fn is_echo(&self) -> bool {
        matches!(
            self.msg_type(),
            msg_type::ECHO_REQUEST | msg_type::ECHO_REPLY
        )
    }

    /// True for error messages that embed the offending datagram.
    pub fn is_error(&self) -> bool {
        matches!(
            self.msg_type(),
            msg_type::DEST_UNREACHABLE
                | msg_type::SOURCE_QUENCH
                | msg_type::REDIRECT
                | msg_type::TIME_EXCEEDED
                | msg_type::PARAMETER_PROBLEM
        )
    }

    /// True for destination unreachable / fragmentation needed.
    pub fn is_frag_needed(&self) -> bool {
        self.msg_type() == msg_type::DEST_UNREACHABLE && self.code() == CODE_FRAG_NEEDED
    }

    /// Everything after the 8-byte header (echo data, or the embedded
    /// datagram of an error).
    pub fn data(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    /// The datagram embedded in an error message: its IP header (validated,
    /// total length may exceed what is present) and, through `payload()`,
    /// the first bytes of its payload (RFC 792 promises at least 8).
    /// `Err(Unsupported)` for non-error types.
    pub fn embedded_ipv4(&self) -> Result<Ipv4Packet<&[u8]>, WireError> {
        if !self.is_error() {
            return Err(WireError::Unsupported);
        }
        Ipv4Packet::new_checked_truncated(self.data())
    }

    /// The first (at most 8) bytes of the embedded datagram's payload: the
    /// ports of a TCP/UDP flow, or an ICMP echo header.
    pub fn embedded_l4_prefix(&self) -> Result<&[u8], WireError> {
        let p = self.embedded_ipv4()?.into_payload();
        Ok(&p[..p.len().min(8)])
    }

    /// True when the checksum verifies over the whole message.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.b())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Set the type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.bm()[0] = v;
    }

    /// Set the code.
    pub fn set_code(&mut self, v: u8) {
        self.bm()[1] = v;
    }

    /// Set the type, updating the checksum incrementally (an echo request
    /// turned into its reply).
    pub fn rewrite_msg_type(&mut self, v: u8) {
        rewrite_type(self.bm(), v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.bm(), 2, v);
    }

    /// Set the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        wr16(self.bm(), 4, v);
    }

    /// Set the echo sequence number.
    pub fn set_echo_seq(&mut self, v: u16) {
        wr16(self.bm(), 6, v);
    }

    /// Set the next-hop MTU.
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        wr16(self.bm(), 6, v);
    }

    /// Mutable data after the header.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[HEADER_LEN..]
    }

    /// Mutable view of the embedded datagram of an error message.
    pub fn embedded_ipv4_mut(&mut self) -> Result<Ipv4Packet<&mut [u8]>, WireError> {
        if !self.is_error() {
            return Err(WireError::Unsupported);
        }
        Ipv4Packet::new_checked_truncated(self.data_mut())
    }

    /// Recompute the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.b());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_msg_type_keeps_the_checksum_valid() {
        // Echo request, id 0x1234, seq 1, data "abc".
        let mut m = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'a', b'b', b'c'];
        let mut p = Icmpv4Packet::new_checked(&mut m[..]).unwrap();
        p.fill_checksum();
        p.rewrite_msg_type(msg_type::ECHO_REPLY);
        assert!(p.verify_checksum());
        let reply = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), reply, "same as computed from scratch");
        assert_eq!(m[..2], [0, 0]);
    }
}
