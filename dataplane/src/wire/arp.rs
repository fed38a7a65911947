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
