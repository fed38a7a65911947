//! Ethernet II frames with at most one 802.1Q VLAN tag.

use super::{rd16, rd_mac, wr16, MacAddr, WireError};

/// EtherType values.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86DD;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88A8;
    /// Pre-standard QinQ outer tag still seen in the wild.
    pub const QINQ_OLD: u16 = 0x9100;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// Minimum Ethernet frame length without FCS (untagged).
pub const MIN_FRAME_LEN: usize = 60;

#[inline]
fn is_tag(et: u16) -> bool {
    matches!(et, ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_OLD)
}

/// A view of an Ethernet frame: destination, source, optional 802.1Q tag,
/// EtherType, payload (everything after the header, including any trailing
/// padding the sender added).
#[derive(Debug, Clone)]
pub struct EthernetFrame<T> {
    buffer: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Validate the header: 14 bytes, or 18 with one 802.1Q tag. Stacked tags
    /// (or an 802.1ad outer tag) are refused with [`WireError::QinQ`].
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let outer = rd16(b, 12);
        let header_len = if outer == ethertype::VLAN {
            if b.len() < HEADER_LEN + VLAN_TAG_LEN {
                return Err(WireError::Truncated);
            }
            if is_tag(rd16(b, 16)) {
                return Err(WireError::QinQ);
            }
            HEADER_LEN + VLAN_TAG_LEN
        } else if is_tag(outer) {
            return Err(WireError::QinQ);
        } else {
            HEADER_LEN
        };
        Ok(EthernetFrame { buffer, header_len })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length: 14, or 18 when tagged.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        rd_mac(self.buffer.as_ref(), 0)
    }

    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        rd_mac(self.buffer.as_ref(), 6)
    }

    /// The 802.1Q tag control information (PCP, DEI, VID), if tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        (self.header_len > HEADER_LEN).then(|| rd16(self.buffer.as_ref(), 14))
    }

    /// The VLAN id (low 12 bits of the TCI), if tagged.
    pub fn vlan_id(&self) -> Option<u16> {
        self.vlan_tci().map(|t| t & 0x0FFF)
    }

    /// The EtherType of the payload (the inner one when tagged).
    pub fn ethertype(&self) -> u16 {
        rd16(self.buffer.as_ref(), self.header_len - 2)
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Set the destination MAC.
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[0..6].copy_from_slice(&mac);
    }

    /// Set the source MAC.
    pub fn set_src(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[6..12].copy_from_slice(&mac);
    }

    /// Set the payload EtherType (the inner one when tagged).
    pub fn set_ethertype(&mut self, et: u16) {
        let at = self.header_len - 2;
        wr16(self.buffer.as_mut(), at, et);
    }

    /// Set the 802.1Q TCI. Returns false (and writes nothing) when the frame
    /// is untagged; a view never changes the frame's length.
    pub fn set_vlan_tci(&mut self, tci: u16) -> bool {
        if self.header_len > HEADER_LEN {
            wr16(self.buffer.as_mut(), 14, tci);
            true
        } else {
            false
        }
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len;
        &mut self.buffer.as_mut()[h..]
    }
}

/// An untagged Ethernet II header as values: what [`EthernetRepr::emit`]
/// writes (smoltcp's `EthernetRepr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src_addr: MacAddr,
    /// Destination MAC.
    pub dst_addr: MacAddr,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf` and
    /// returns a view over the frame. `Err(Truncated)`, writing nothing,
    /// when `buf` is shorter than the header.
    pub fn emit<'a>(&self, buf: &'a mut [u8]) -> Result<EthernetFrame<&'a mut [u8]>, WireError> {
        let h = buf.get_mut(..HEADER_LEN).ok_or(WireError::Truncated)?;
        h[0..6].copy_from_slice(&self.dst_addr);
        h[6..12].copy_from_slice(&self.src_addr);
        wr16(h, 12, self.ethertype);
        EthernetFrame::new_checked(buf)
    }
}

/// The source MAC of a frame (its bytes 6..12), read without looking at
/// what follows: for a frame whose header the caller's parse accepted.
pub fn src_addr(frame: &[u8]) -> Result<MacAddr, WireError> {
    if frame.len() < 12 {
        return Err(WireError::Truncated);
    }
    Ok(rd_mac(frame, 6))
}

/// Sets the two MACs of a frame, leaving its VLAN tag and EtherType as they
/// are: for a reply written over the frame it answers. `Err(Truncated)`,
/// writing nothing, when the frame is shorter than the two addresses.
pub fn set_addrs(frame: &mut [u8], dst: MacAddr, src: MacAddr) -> Result<(), WireError> {
    let h = frame.get_mut(..12).ok_or(WireError::Truncated)?;
    h[0..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_and_tagged() {
        let mut f = [0u8; 60];
        f[12] = 0x08;
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.header_len(), 14);
        assert_eq!(e.ethertype(), 0x0800);
        assert_eq!(e.vlan_tci(), None);

        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..16].copy_from_slice(&[0x20, 0x64]);
        f[16..18].copy_from_slice(&[0x86, 0xdd]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.header_len(), 18);
        assert_eq!(e.vlan_tci(), Some(0x2064));
        assert_eq!(e.vlan_id(), Some(0x064));
        assert_eq!(e.ethertype(), 0x86dd);

        f[16..18].copy_from_slice(&[0x81, 0x00]);
        assert_eq!(
            EthernetFrame::new_checked(&f[..]).unwrap_err(),
            WireError::QinQ
        );
        f[12..14].copy_from_slice(&[0x88, 0xa8]);
        assert_eq!(
            EthernetFrame::new_checked(&f[..]).unwrap_err(),
            WireError::QinQ
        );
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        assert_eq!(
            EthernetFrame::new_checked(&f[..17]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            EthernetFrame::new_checked(&f[..13]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn emit_writes_the_fixture_bytes_and_parses_back() {
        let r = EthernetRepr {
            src_addr: [2, 0, 0, 0, 0, 1],
            dst_addr: [0xff; 6],
            ethertype: ethertype::ARP,
        };
        let mut b = [0xAAu8; 16];
        let e = r.emit(&mut b[..]).unwrap();
        assert_eq!(
            (e.src(), e.dst(), e.ethertype()),
            (r.src_addr, r.dst_addr, r.ethertype)
        );
        assert_eq!(
            b[..14],
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06]
        );
        assert_eq!(b[14..], [0xAA, 0xAA]);
        assert_eq!(
            r.emit(&mut [0u8; 13][..]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn set_addrs_keeps_the_tag() {
        let mut f = [0u8; 18];
        f[12..18].copy_from_slice(&[0x81, 0x00, 0x00, 0x2a, 0x08, 0x00]);
        set_addrs(&mut f, [1; 6], [2; 6]).unwrap();
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!((e.dst(), e.src(), e.vlan_id()), ([1; 6], [2; 6], Some(42)));
        assert_eq!(src_addr(&f), Ok([2; 6]));
        assert_eq!(src_addr(&f[..11]), Err(WireError::Truncated));
        assert_eq!(
            set_addrs(&mut f[..11], [3; 6], [3; 6]),
            Err(WireError::Truncated)
        );
        assert_eq!(f[0], 1, "nothing written");
    }
}
