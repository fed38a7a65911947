//! ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861).
//!
//! An [`Icmpv6Packet`] view must span exactly the ICMPv6 message (the upper
//! layer after any extension headers), since the checksum covers all of it.

use std::net::Ipv6Addr;

use super::checksum;
use super::ip_proto;
use super::ipv6::Ipv6Packet;
use super::{rd16, rd32, rd_mac, rd_v6, wr16, wr32, MacAddr, WireError};

/// Length of the ICMPv6 header including the 4-byte type-specific field.
pub const HEADER_LEN: usize = 8;
/// Length of a Neighbor Solicitation/Advertisement without options.
pub const ND_NEIGHBOR_LEN: usize = 24;
/// Hop limit of every NDP message (RFC 4861): a receiver drops one that
/// crossed a router.
pub const ND_HOP_LIMIT: u8 = 255;

/// Message types.
pub mod msg_type {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
}

/// Neighbor Advertisement flags (first byte of the reserved field).
pub mod na_flags {
    /// Router.
    pub const ROUTER: u8 = 0x80;
    /// Solicited.
    pub const SOLICITED: u8 = 0x40;
    /// Override.
    pub const OVERRIDE: u8 = 0x20;
}

/// NDP option types.
pub mod nd_option {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
}

/// One NDP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdOption<'a> {
    /// Source link-layer address (Ethernet).
    SourceLinkAddr(MacAddr),
    /// Target link-layer address (Ethernet).
    TargetLinkAddr(MacAddr),
    /// Any other option: type and bytes after type and length.
    Other {
        /// Option type.
        kind: u8,
        /// Option data.
        data: &'a [u8],
    },
}

/// Iterator over NDP options (RFC 4861 §4.6). A zero length, an option
/// running past the end, or a link-layer address option that is not 8 bytes
/// (Ethernet) yields `Err(BadOption)` once and ends the iteration.
#[derive(Debug, Clone)]
pub struct NdOptions<'a> {
    data: &'a [u8],
    done: bool,
}

impl<'a> NdOptions<'a> {
    /// Iterate over raw option bytes.
    pub fn new(data: &'a [u8]) -> Self {
        NdOptions { data, done: false }
    }
}

impl<'a> Iterator for NdOptions<'a> {
    type Item = Result<NdOption<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.data.is_empty() {
            return None;
        }
        let kind = self.data[0];
        let len = usize::from(*self.data.get(1).unwrap_or(&0)) * 8;
        if len == 0 || len > self.data.len() {
            self.done = true;
            return Some(Err(WireError::BadOption));
        }
        let (opt, rest) = self.data.split_at(len);
        self.data = rest;
        let o = match kind {
            nd_option::SOURCE_LL_ADDR | nd_option::TARGET_LL_ADDR => {
                if len != 8 {
                    self.done = true;
                    return Some(Err(WireError::BadOption));
                }
                let mac = rd_mac(opt, 2);
                if kind == nd_option::SOURCE_LL_ADDR {
                    NdOption::SourceLinkAddr(mac)
                } else {
                    NdOption::TargetLinkAddr(mac)
                }
            }
            _ => NdOption::Other {
                kind,
                data: &opt[2..],
            },
        };
        Some(Ok(o))
    }
}

/// The solicited-node multicast address of `addr` (ff02::1:ffXX:XXXX).
pub fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// The Ethernet multicast address for an IPv6 multicast group (33:33 + low
/// 32 bits, RFC 2464 §7).
pub fn multicast_mac(group: &Ipv6Addr) -> MacAddr {
    let o = group.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// A Neighbor Solicitation or Advertisement with at most its one
/// link-layer address option, as values: what [`NdiscRepr::emit`] writes
/// and [`NdiscRepr::parse`] reads (smoltcp's `NdiscRepr`, these two kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdiscRepr {
    /// A Neighbor Solicitation; `lladdr` is its source link-layer address
    /// option.
    NeighborSolicit {
        /// The address asked about.
        target_addr: Ipv6Addr,
        /// The sender's MAC, when the option is present.
        lladdr: Option<MacAddr>,
    },
    /// A Neighbor Advertisement; `lladdr` is its target link-layer address
    /// option.
    NeighborAdvert {
        /// R/S/O flags ([`na_flags`]).
        flags: u8,
        /// The address advertised.
        target_addr: Ipv6Addr,
        /// The target's MAC, when the option is present.
        lladdr: Option<MacAddr>,
    },
}

impl NdiscRepr {
    /// The solicitation or advertisement in `msg`, with the first
    /// link-layer address option of its kind; `None` for other messages
    /// (or a malformed option).
    pub fn parse<T: AsRef<[u8]>>(msg: &Icmpv6Packet<T>) -> Option<NdiscRepr> {
        let target_addr = msg.nd_target()?;
        let mut source = None;
        let mut target = None;
        for o in msg.nd_options() {
            match o.ok()? {
                NdOption::SourceLinkAddr(m) => source = source.or(Some(m)),
                NdOption::TargetLinkAddr(m) => target = target.or(Some(m)),
                NdOption::Other { .. } => {}
            }
        }
        Some(match msg.msg_type() {
            msg_type::NEIGHBOR_SOLICIT => NdiscRepr::NeighborSolicit {
                target_addr,
                lladdr: source,
            },
            _ => NdiscRepr::NeighborAdvert {
                flags: msg.na_flags(),
                target_addr,
                lladdr: target,
            },
        })
    }

    /// Length of the message: 24 bytes, 32 with the option.
    pub fn buffer_len(&self) -> usize {
        let (NdiscRepr::NeighborSolicit { lladdr, .. } | NdiscRepr::NeighborAdvert { lladdr, .. }) =
            self;
        ND_NEIGHBOR_LEN + if lladdr.is_some() { 8 } else { 0 }
    }

    /// Writes the message into the first [`buffer_len`](Self::buffer_len)
    /// bytes of `buf` (code 0, reserved bits 0) with its checksum over the
    /// pseudo-header of `src` to `dst`, and returns a view spanning exactly
    /// the message. `Err(Truncated)`, writing nothing, when `buf` is too
    /// short.
    pub fn emit<'a>(
        &self,
        buf: &'a mut [u8],
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) -> Result<Icmpv6Packet<&'a mut [u8]>, WireError> {
        let len = self.buffer_len();
        let m = buf.get_mut(..len).ok_or(WireError::Truncated)?;
        let (kind, flags, target, option) = match *self {
            NdiscRepr::NeighborSolicit {
                target_addr,
                lladdr,
            } => (
                msg_type::NEIGHBOR_SOLICIT,
                0,
                target_addr,
                lladdr.map(|m| (nd_option::SOURCE_LL_ADDR, m)),
            ),
            NdiscRepr::NeighborAdvert {
                flags,
                target_addr,
                lladdr,
            } => (
                msg_type::NEIGHBOR_ADVERT,
                flags,
                target_addr,
                lladdr.map(|m| (nd_option::TARGET_LL_ADDR, m)),
            ),
        };
        m[0] = kind;
        m[1] = 0;
        wr32(m, 4, u32::from(flags) << 24);
        m[8..24].copy_from_slice(&target.octets());
        if let Some((opt, mac)) = option {
            m[24] = opt;
            m[25] = 1; // in units of 8 bytes
            m[26..32].copy_from_slice(&mac);
        }
        let mut msg = Icmpv6Packet::new_checked(m)?;
        msg.fill_checksum(src, dst);
        Ok(msg)
    }
}

/// A view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Validate: at least the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Icmpv6Packet { buffer })
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

    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        rd16(self.b(), 4)
    }

    /// Echo sequence number.
    pub fn echo_seq(&self) -> u16 {
        rd16(self.b(), 6)
    }

    /// MTU of a packet-too-big message (bytes 4..8).
    pub fn mtu(&self) -> u32 {
        rd32(self.b(), 4)
    }

    /// True for error messages (types 0..=127).
    pub fn is_error(&self) -> bool {
        self.msg_type() < 128
    }

    /// True for a Neighbor Solicitation or Advertisement long enough to hold
    /// a target address.
    fn is_nd_neighbor(&self) -> bool {
        matches!(
            self.msg_type(),
            msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT
        ) && self.b().len() >= ND_NEIGHBOR_LEN
    }

    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    /// The packet embedded in an error message (header validated, payload
    /// possibly cut short). `Err(Unsupported)` for non-error types.
    pub fn embedded_ipv6(&self) -> Result<Ipv6Packet<&[u8]>, WireError> {
        if !self.is_error() {
            return Err(WireError::Unsupported);
        }
        Ipv6Packet::new_checked_truncated(self.data())
    }

    /// Target address of a Neighbor Solicitation/Advertisement; `None` for
    /// other types or a message shorter than 24 bytes.
    pub fn nd_target(&self) -> Option<Ipv6Addr> {
        self.is_nd_neighbor().then(|| rd_v6(self.b(), 8))
    }

    /// R/S/O flags byte of a Neighbor Advertisement.
    pub fn na_flags(&self) -> u8 {
        self.b()[4]
    }

    /// Options of a Neighbor Solicitation/Advertisement (empty iterator for
    /// other types).
    pub fn nd_options(&self) -> NdOptions<'_> {
        if self.is_nd_neighbor() {
            NdOptions::new(&self.b()[ND_NEIGHBOR_LEN..])
        } else {
            NdOptions::new(&[])
        }
    }

    /// True when the checksum verifies with the given pseudo-header
    /// addresses.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let len = u32::try_from(self.b().len()).unwrap_or(u32::MAX);
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, len);
        checksum::add(ph, checksum::sum(self.b())) == 0xFFFF
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
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

    /// Set the type, updating the checksum incrementally. The
    /// pseudo-header's sum must not change meanwhile: swapping source and
    /// destination (an echo request turned into its reply) leaves it as it
    /// was.
    pub fn rewrite_msg_type(&mut self, v: u8) {
        super::icmpv4::rewrite_type(self.bm(), v);
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

    /// Set the MTU of a packet-too-big message.
    pub fn set_mtu(&mut self, v: u32) {
        wr32(self.bm(), 4, v);
    }

    /// Set the NA flags byte (and clear the rest of the reserved field).
    pub fn set_na_flags(&mut self, flags: u8) {
        let b = self.bm();
        b[4] = flags;
        b[5..8].fill(0);
    }

    /// Set the target of a Neighbor Solicitation/Advertisement. Returns
    /// false (writing nothing) when the message is not one of those.
    pub fn set_nd_target(&mut self, a: &Ipv6Addr) -> bool {
        if self.is_nd_neighbor() {
            self.bm()[8..24].copy_from_slice(&a.octets());
            true
        } else {
            false
        }
    }

    /// Mutable data after the header.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[HEADER_LEN..]
    }

    /// Mutable view of the packet embedded in an error message.
    pub fn embedded_ipv6_mut(&mut self) -> Result<Ipv6Packet<&mut [u8]>, WireError> {
        if !self.is_error() {
            return Err(WireError::Unsupported);
        }
        Ipv6Packet::new_checked_truncated(self.data_mut())
    }

    /// Recompute the checksum with the given pseudo-header addresses.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v6(src, dst, ip_proto::ICMPV6, self.b());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x50);
    const MAC: MacAddr = [2, 0, 0, 0, 1, 1];

    #[test]
    fn neighbor_advert_emits_the_fixture_bytes() {
        let na = NdiscRepr::NeighborAdvert {
            flags: na_flags::SOLICITED | na_flags::OVERRIDE,
            target_addr: SRC,
            lladdr: Some(MAC),
        };
        let mut b = [0xAAu8; 40];
        let msg = na.emit(&mut b[..], &SRC, &DST).unwrap();
        assert!(msg.verify_checksum(&SRC, &DST));
        let c = msg.checksum().to_be_bytes();
        let mut want = vec![136, 0, c[0], c[1], 0x60, 0, 0, 0];
        want.extend_from_slice(&SRC.octets());
        want.extend_from_slice(&[2, 1, 2, 0, 0, 0, 1, 1]);
        assert_eq!(b[..32], want[..]);
        assert_eq!(b[32..], [0xAA; 8], "nothing written past the message");
    }

    #[test]
    fn emit_then_parse_round_trips() {
        for r in [
            NdiscRepr::NeighborSolicit {
                target_addr: DST,
                lladdr: Some(MAC),
            },
            NdiscRepr::NeighborSolicit {
                target_addr: DST,
                lladdr: None,
            },
            NdiscRepr::NeighborAdvert {
                flags: na_flags::ROUTER | na_flags::OVERRIDE,
                target_addr: SRC,
                lladdr: Some(MAC),
            },
            NdiscRepr::NeighborAdvert {
                flags: 0,
                target_addr: SRC,
                lladdr: None,
            },
        ] {
            let mut b = [0xFFu8; 32];
            let len = r.emit(&mut b[..], &SRC, &DST).unwrap().into_inner().len();
            assert_eq!(len, r.buffer_len());
            let msg = Icmpv6Packet::new_checked(&b[..len]).unwrap();
            assert!(msg.verify_checksum(&SRC, &DST), "{r:?}");
            assert_eq!(NdiscRepr::parse(&msg), Some(r));
        }
        let r = NdiscRepr::NeighborSolicit {
            target_addr: DST,
            lladdr: Some(MAC),
        };
        assert_eq!(
            r.emit(&mut [0u8; 31][..], &SRC, &DST).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn rewrite_msg_type_keeps_the_checksum_valid() {
        let mut m = [128u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'a', b'b', b'c'];
        let mut p = Icmpv6Packet::new_checked(&mut m[..]).unwrap();
        p.fill_checksum(&SRC, &DST);
        p.rewrite_msg_type(msg_type::ECHO_REPLY);
        // The reply goes the other way: the same pseudo-header sum.
        assert!(p.verify_checksum(&DST, &SRC));
        assert_eq!(m[..2], [129, 0]);
    }
}
