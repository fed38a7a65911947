//! ARP for Ethernet/IPv4 (RFC 826).

use std::net::Ipv4Addr;

use super::{rd16, rd_mac, rd_v4, wr16, MacAddr, WireError};

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// Operation: request.
pub const OP_REQUEST: u16 = 1;
/// Operation: reply.
pub const OP_REPLY: u16 = 2;
/// Hardware type Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

/// A view of an Ethernet/IPv4 ARP packet. Trailing bytes (Ethernet padding)
/// are allowed and ignored.
#[derive(Debug, Clone)]
pub struct ArpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Validate: at least 28 bytes, hardware type 1, protocol 0x0800, address
    /// lengths 6 and 4. Anything else is [`WireError::Unsupported`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(WireError::Truncated);
        }
        if rd16(b, 0) != HTYPE_ETHERNET || rd16(b, 2) != 0x0800 || b[4] != 6 || b[5] != 4 {
            return Err(WireError::Unsupported);
        }
        Ok(ArpPacket { buffer })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Operation (1 request, 2 reply).
    pub fn operation(&self) -> u16 {
        rd16(self.buffer.as_ref(), 6)
    }

    /// Sender hardware address.
    pub fn sender_hw(&self) -> MacAddr {
        rd_mac(self.buffer.as_ref(), 8)
    }

    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        rd_v4(self.buffer.as_ref(), 14)
    }

    /// Target hardware address.
    pub fn target_hw(&self) -> MacAddr {
        rd_mac(self.buffer.as_ref(), 18)
    }

    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Addr {
        rd_v4(self.buffer.as_ref(), 24)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Set the operation.
    pub fn set_operation(&mut self, op: u16) {
        wr16(self.buffer.as_mut(), 6, op);
    }

    /// Set the sender hardware address.
    pub fn set_sender_hw(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[8..14].copy_from_slice(&mac);
    }

    /// Set the sender protocol address.
    pub fn set_sender_ip(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[14..18].copy_from_slice(&ip.octets());
    }

    /// Set the target hardware address.
    pub fn set_target_hw(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[18..24].copy_from_slice(&mac);
    }

    /// Set the target protocol address.
    pub fn set_target_ip(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[24..28].copy_from_slice(&ip.octets());
    }
}

/// An Ethernet/IPv4 ARP packet as values: what [`ArpRepr::emit`] writes and
/// [`ArpRepr::parse`] reads (smoltcp's `ArpRepr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Operation ([`OP_REQUEST`], [`OP_REPLY`]).
    pub operation: u16,
    /// Sender hardware address.
    pub sender_hw: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address.
    pub target_hw: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// The fields of `packet`.
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> ArpRepr {
        ArpRepr {
            operation: packet.operation(),
            sender_hw: packet.sender_hw(),
            sender_ip: packet.sender_ip(),
            target_hw: packet.target_hw(),
            target_ip: packet.target_ip(),
        }
    }

    /// Writes the packet (hardware type Ethernet, protocol IPv4) into the
    /// first [`PACKET_LEN`] bytes of `buf` and returns a view over it.
    /// `Err(Truncated)`, writing nothing, when `buf` is too short.
    pub fn emit<'a>(&self, buf: &'a mut [u8]) -> Result<ArpPacket<&'a mut [u8]>, WireError> {
        let b = buf.get_mut(..PACKET_LEN).ok_or(WireError::Truncated)?;
        wr16(b, 0, HTYPE_ETHERNET);
        wr16(b, 2, 0x0800);
        b[4] = 6;
        b[5] = 4;
        let mut p = ArpPacket::new_checked(b)?;
        p.set_operation(self.operation);
        p.set_sender_hw(self.sender_hw);
        p.set_sender_ip(self.sender_ip);
        p.set_target_hw(self.target_hw);
        p.set_target_ip(self.target_ip);
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: ArpRepr = ArpRepr {
        operation: OP_REQUEST,
        sender_hw: [2, 0, 0, 0, 0, 1],
        sender_ip: Ipv4Addr::new(10, 0, 0, 1),
        target_hw: [0; 6],
        target_ip: Ipv4Addr::new(10, 0, 0, 2),
    };

    #[test]
    fn emit_writes_the_fixture_bytes() {
        let mut b = [0xAAu8; 30];
        REQUEST.emit(&mut b[..]).unwrap();
        assert_eq!(
            b[..28],
            [
                0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0,
                2
            ]
        );
        assert_eq!(b[28..], [0xAA, 0xAA]);
    }

    #[test]
    fn emit_then_parse_round_trips() {
        let reply = ArpRepr {
            operation: OP_REPLY,
            target_hw: [2, 0, 0, 0, 0, 9],
            ..REQUEST
        };
        let mut b = [0xFFu8; 28];
        reply.emit(&mut b[..]).unwrap();
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p), reply);
        assert_eq!(
            REQUEST.emit(&mut [0u8; 27][..]).unwrap_err(),
            WireError::Truncated
        );
    }
}
