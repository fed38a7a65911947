//! One-pass frame classification: offsets for the pipeline, or a named
//! reason why the frame is malformed.

use core::fmt;

use conf::counters::Counter;

use super::arp::{self, ArpPacket};
use super::checksum;
use super::ethernet::{ethertype, EthernetFrame, HEADER_LEN as ETH_HEADER_LEN};
use super::ip_proto;
use super::ipv4::Ipv4Packet;
use super::ipv6::Ipv6Packet;
use super::tcp::TcpFlags;
use super::{rd16, WireError};

macro_rules! malformed {
    ($( $(#[$doc:meta])* $variant:ident => $counter:ident, )*) => {
        /// Why a frame was rejected by [`parse_frame`]. Each reason is
        /// counted under its own drop counter ([`Malformed::counter`], named
        /// `drop_` and [`Malformed::counter_name`]) and has a dense index
        /// ([`Malformed::index`]) for per-reason arrays.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Malformed {
            $( $(#[$doc])* $variant, )*
        }

        impl Malformed {
            /// Every reason, in index order.
            pub const ALL: &'static [Malformed] = &[ $( Malformed::$variant, )* ];
            /// Number of reasons.
            pub const COUNT: usize = Self::ALL.len();

            /// The drop counter this reason is counted under.
            pub const fn counter(self) -> Counter {
                match self {
                    $( Malformed::$variant => Counter::$counter, )*
                }
            }
        }
    };
}

malformed! {
    /// Shorter than 14 bytes.
    TruncatedEthernet => DropTruncatedEthernet,
    /// 802.1Q tag present but the frame ends inside it.
    TruncatedVlan => DropTruncatedVlan,
    /// Two VLAN tags (or an 802.1ad outer tag).
    VlanQinq => DropVlanQinq,
    /// ARP shorter than 28 bytes.
    TruncatedArp => DropTruncatedArp,
    /// ARP for something other than Ethernet/IPv4.
    ArpUnsupported => DropArpUnsupported,
    /// IPv4 header shorter than 20 bytes or than its IHL.
    TruncatedIpv4 => DropTruncatedIpv4,
    /// EtherType IPv4 but version is not 4.
    Ipv4BadVersion => DropIpv4BadVersion,
    /// IHL < 5.
    Ipv4BadIhl => DropIpv4BadIhl,
    /// Total length below the header length or beyond the frame.
    Ipv4BadTotalLength => DropIpv4BadTotalLength,
    /// Header checksum does not verify.
    Ipv4BadChecksum => DropIpv4BadChecksum,
    /// Fragment would extend past 65535 bytes.
    Ipv4BadFragment => DropIpv4BadFragment,
    /// Shorter than the 40-byte IPv6 header.
    TruncatedIpv6 => DropTruncatedIpv6,
    /// EtherType IPv6 but version is not 6.
    Ipv6BadVersion => DropIpv6BadVersion,
    /// Payload length beyond the frame.
    Ipv6BadPayloadLength => DropIpv6BadPayloadLength,
    /// An extension header runs past the payload.
    Ipv6TruncatedExtHeader => DropIpv6TruncatedExtHeader,
    /// Hop-by-hop not first, or a second fragment header.
    Ipv6BadExtHeader => DropIpv6BadExtHeader,
    /// More extension headers than the walk allows.
    Ipv6TooManyExtHeaders => DropIpv6TooManyExtHeaders,
    /// Fragment past 65535 bytes, or a non-final fragment whose length is
    /// not a multiple of 8 (RFC 8200 §4.5).
    Ipv6BadFragment => DropIpv6BadFragment,
    /// TCP header shorter than 20 bytes.
    TruncatedTcp => DropTruncatedTcp,
    /// TCP data offset < 5 or beyond the segment.
    TcpBadDataOffset => DropTcpBadDataOffset,
    /// UDP header shorter than 8 bytes.
    TruncatedUdp => DropTruncatedUdp,
    /// UDP length field < 8 or beyond the IP payload.
    UdpBadLength => DropUdpBadLength,
    /// ICMP message shorter than 8 bytes.
    TruncatedIcmpv4 => DropTruncatedIcmpv4,
    /// ICMPv6 message shorter than 8 bytes.
    TruncatedIcmpv6 => DropTruncatedIcmpv6,
}

impl Malformed {
    /// The reason's name: its counter's without the `drop_` every drop
    /// counter's name starts with (snake_case, never changes).
    pub fn counter_name(&self) -> &'static str {
        // Every `Malformed` counter is a drop counter (`drop_...`): see
        // the test `every_reason_has_its_own_drop_counter`.
        &self.counter().name()["drop_".len()..]
    }

    /// Dense index in `0..COUNT`, equal to the position in [`Malformed::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.counter_name())
    }
}

impl std::error::Error for Malformed {}

/// What the Ethernet payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3Kind {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// ARP (Ethernet/IPv4, validated).
    Arp,
    /// Any other EtherType (or an 802.3 length field), not inspected.
    Other(u16),
}

/// Fragment status of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// Not a fragment (IPv6 atomic fragments, RFC 6946, count as this).
    None,
    /// First fragment: offset 0, more fragments follow; L4 header parsed.
    First,
    /// Any later fragment: no L4 header; `l4_offset` is the fragment data.
    NonFirst,
}

/// Source and destination ports (TCP or UDP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ports {
    /// Source port.
    pub src: u16,
    /// Destination port.
    pub dst: u16,
}

/// Offsets and small facts about one frame. All offsets are from the start
/// of the frame and within it.
///
/// For non-IP frames (`Arp`, `Other`) the L4 fields are empty:
/// `l4_offset == payload_offset == l3_end`, `l4_len == 0`, `l4_proto == 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// 802.1Q TCI when the frame carries one tag.
    pub vlan_tci: Option<u16>,
    /// What follows the Ethernet header.
    pub l3: L3Kind,
    /// Start of the L3 header (14 or 18).
    pub l3_offset: usize,
    /// End of the L3 packet (excludes Ethernet padding; frame end for Other).
    pub l3_end: usize,
    /// IPv4 TTL / IPv6 hop limit (0 for non-IP).
    pub ttl: u8,
    /// Upper-layer protocol (after IPv6 extension headers; ESP and No Next
    /// Header are reported as themselves).
    pub l4_proto: u8,
    /// Start of the L4 header (or of the fragment data of a non-first
    /// fragment).
    pub l4_offset: usize,
    /// Bytes from `l4_offset` to `l3_end`.
    pub l4_len: usize,
    /// Start of the L4 payload: after the TCP header with options, the UDP
    /// header, or the 8-byte ICMP header. Equals `l4_offset` for other
    /// protocols and non-first fragments.
    pub payload_offset: usize,
    /// Fragment status.
    pub fragment: Fragment,
    /// TCP/UDP ports when the L4 header is present.
    pub ports: Option<Ports>,
    /// TCP flags when the packet is TCP with a header present.
    pub tcp_flags: Option<TcpFlags>,
    /// False when `tcp_flags` is an impossible combination
    /// ([`tcp_flags_valid`]); true otherwise (including non-TCP).
    pub tcp_flags_valid: bool,
    /// ICMP/ICMPv6 type and code when present.
    pub icmp: Option<(u8, u8)>,
    /// What the NIC found of the TCP/UDP checksum (the parse itself never
    /// verifies it: [`Parsed::l4_checksum_ok`] does, when it matters).
    pub nic_l4_checksum: NicChecksum,
}

/// What a port said about a received frame's TCP/UDP checksum (its Rx
/// checksum offload flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NicChecksum {
    /// Not checked by the NIC (no offload, or not TCP/UDP as it saw it).
    #[default]
    Unknown,
    Good,
    Bad,
}

impl Parsed {
    /// True for any fragment.
    pub fn is_fragment(&self) -> bool {
        self.fragment != Fragment::None
    }

    /// The L3 packet within `frame` (empty if `frame` is not the parsed one).
    pub fn l3_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame.get(self.l3_offset..self.l3_end).unwrap_or(&[])
    }

    /// Whether the TCP or UDP checksum of this unfragmented packet holds:
    /// the NIC's word where it gave one, else computed over the segment
    /// and its pseudo-header. An IPv4 UDP datagram without a checksum (0)
    /// passes; an IPv6 one does not (RFC 8200 §8.1). False for anything
    /// that is not a whole TCP or UDP packet of `frame`.
    pub fn l4_checksum_ok(&self, frame: &[u8]) -> bool {
        match self.nic_l4_checksum {
            NicChecksum::Good => return true,
            NicChecksum::Bad => return false,
            NicChecksum::Unknown => {}
        }
        let (tcp, udp) = (
            self.l4_proto == ip_proto::TCP,
            self.l4_proto == ip_proto::UDP,
        );
        if !(tcp || udp) || self.fragment != Fragment::None {
            return false;
        }
        let Some(l4) = frame.get(self.l4_offset..self.l4_offset + self.l4_len) else {
            return false;
        };
        let l3 = self.l3_offset;
        // The pseudo-header unfolded (RFC 793/768, RFC 8200 §8.1): the
        // addresses' words, the protocol and the length, which as one
        // number is congruent to its 16-bit words (2^16 = 1 mod 2^16 - 1);
        // then one fold over it and the segment.
        let len = l4.len() as u64;
        let pseudo = u64::from(self.l4_proto) + len;
        let addrs = match self.l3 {
            L3Kind::Ipv4 => {
                let Some(a) = frame.get(l3 + 12..l3 + 20) else {
                    return false;
                };
                if udp && l4.get(6..8) == Some(&[0, 0]) {
                    return true;
                }
                if len > u64::from(u16::MAX) {
                    return false;
                }
                a
            }
            L3Kind::Ipv6 => {
                let Some(a) = frame.get(l3 + 8..l3 + 40) else {
                    return false;
                };
                if len > u64::from(u32::MAX) {
                    return false;
                }
                a
            }
            _ => return false,
        };
        checksum::verify_with(checksum::accumulate(pseudo, addrs), l4)
    }

    /// The L4 bytes within `frame` (empty if `frame` is not the parsed one).
    pub fn l4_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame
            .get(self.l4_offset..self.l4_offset + self.l4_len)
            .unwrap_or(&[])
    }
}

/// Knobs for [`parse_frame_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// Verify the IPv4 header checksum (turn off when the NIC already did).
    pub verify_ipv4_checksum: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            verify_ipv4_checksum: true,
        }
    }
}

/// Plausible TCP flag combinations, after masking PSH, ECE and CWR: the
/// table netfilter conntrack uses (`tcp_valid_flags`). Rejects no flags,
/// SYN+FIN, SYN+RST, FIN without ACK (FIN/Xmas scans), RST+FIN, and
/// anything else no stack sends.
#[inline]
pub fn tcp_flags_valid(flags: TcpFlags) -> bool {
    const FIN: u8 = TcpFlags::FIN.0;
    const SYN: u8 = TcpFlags::SYN.0;
    const RST: u8 = TcpFlags::RST.0;
    const ACK: u8 = TcpFlags::ACK.0;
    const URG: u8 = TcpFlags::URG.0;
    let f = flags.0 & (FIN | SYN | RST | ACK | URG);
    matches!(
        f,
        SYN | 0x22 /* SYN|URG */ | 0x12 /* SYN|ACK */ | RST | 0x14 /* RST|ACK */
            | 0x11 /* FIN|ACK */ | 0x31 /* FIN|ACK|URG */ | ACK | 0x30 /* ACK|URG */
    )
}

/// Parse one Ethernet frame with default options (IPv4 header checksum
/// verified).
#[inline]
pub fn parse_frame(buf: &[u8]) -> Result<Parsed, Malformed> {
    parse_frame_with(buf, &ParseOptions::default())
}

/// Parse one Ethernet frame: Ethernet (one optional VLAN tag), then ARP,
/// IPv4 or IPv6 (extension headers walked), then the TCP/UDP/ICMP header.
/// Never panics; returns offsets only.
#[inline]
pub fn parse_frame_with(buf: &[u8], opts: &ParseOptions) -> Result<Parsed, Malformed> {
    match parse_fast(buf, opts) {
        Some(p) => Ok(p),
        None => parse_views(buf, opts),
    }
}

/// The link layer of the common-shape frames: untagged or one 802.1Q tag.
/// Returns the VLAN TCI, the EtherType and where the network header starts.
/// The first stage of [`parse_fast`] and of the express lane's parse
/// (`lb::express`), which stops earlier.
#[inline(always)]
pub(crate) fn fast_link(buf: &[u8]) -> Option<(Option<u16>, u16, usize)> {
    let &[.., e0, e1] = buf.get(..ETH_HEADER_LEN)? else {
        return None;
    };
    Some(match u16::from_be_bytes([e0, e1]) {
        ethertype::VLAN => {
            let &[t0, t1, i0, i1] = buf.get(ETH_HEADER_LEN..ETH_HEADER_LEN + 4)? else {
                return None;
            };
            let inner = u16::from_be_bytes([i0, i1]);
            (
                Some(u16::from_be_bytes([t0, t1])),
                inner,
                ETH_HEADER_LEN + 4,
            )
        }
        et => (None, et, ETH_HEADER_LEN),
    })
}

/// What the fast parses read of a common-shape IP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FastIp {
    /// TTL (IPv4) or hop limit (IPv6).
    pub(crate) ttl: u8,
    /// The transport protocol (IPv4 protocol, IPv6 next header).
    pub(crate) proto: u8,
    /// Where the transport header starts, from the IP header's start.
    pub(crate) header_len: usize,
    /// Header and payload: where the packet ends.
    pub(crate) total_len: usize,
}

/// A common-shape IPv4 header at the start of `l3`: version 4, header and
/// total length consistent and within `l3`, not a fragment. The checksum
/// is [`ipv4_header_ok`]'s business.
#[inline(always)]
pub(crate) fn fast_ipv4(l3: &[u8]) -> Option<FastIp> {
    let h = l3.get(..20)?;
    let hl = usize::from(h[0] & 0x0F) * 4;
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    if h[0] >> 4 != 4
        || hl < 20
        || hl > total
        || total > l3.len()
        || u16::from_be_bytes([h[6], h[7]]) & 0x3FFF != 0
    {
        return None;
    }
    Some(FastIp {
        ttl: h[8],
        proto: h[9],
        header_len: hl,
        total_len: total,
    })
}

/// A common-shape IPv6 header at the start of `l3` (its next header taken
/// as the transport): version 6, payload within `l3`.
#[inline(always)]
pub(crate) fn fast_ipv6(l3: &[u8]) -> Option<FastIp> {
    let h = l3.get(..40)?;
    let total = 40 + usize::from(u16::from_be_bytes([h[4], h[5]]));
    if h[0] >> 4 != 6 || total > l3.len() {
        return None;
    }
    Some(FastIp {
        ttl: h[7],
        proto: h[6],
        header_len: 40,
        total_len: total,
    })
}

/// A common-shape transport header at the start of `l4` (the IP payload):
/// TCP with its data offset within the segment, or UDP with its length
/// within the payload. Returns the header's first bytes (ports first), the
/// TCP flags and where the payload starts.
#[inline(always)]
pub(crate) fn fast_l4(proto: u8, l4: &[u8]) -> Option<(&[u8], Option<TcpFlags>, usize)> {
    match proto {
        ip_proto::TCP => {
            let h = l4.get(..20)?;
            let doff = usize::from(h[12] >> 4) * 4;
            if doff < 20 || doff > l4.len() {
                return None;
            }
            Some((h, Some(TcpFlags(h[13])), doff))
        }
        ip_proto::UDP => {
            let h = l4.get(..8)?;
            let ulen = usize::from(u16::from_be_bytes([h[4], h[5]]));
            if ulen < 8 || ulen > l4.len() {
                return None;
            }
            Some((h, None, 8))
        }
        _ => None,
    }
}

/// The common case in one pass over raw bytes: Ethernet (untagged or one
/// 802.1Q tag), an unfragmented IPv4 packet or an IPv6 packet without
/// extension headers, and a valid TCP or UDP header. Returns exactly what
/// [`parse_views`] returns for such a frame, and `None` for every other
/// frame (those, and every error, are left to [`parse_views`]).
#[inline(always)]
pub(crate) fn parse_fast(buf: &[u8], opts: &ParseOptions) -> Option<Parsed> {
    let (vlan_tci, et, l3_offset) = fast_link(buf)?;
    let l3 = buf.get(l3_offset..)?;
    let FastIp {
        ttl,
        proto,
        header_len: hl,
        total_len: total,
    } = match et {
        ethertype::IPV4 => {
            let ip = fast_ipv4(l3)?;
            if opts.verify_ipv4_checksum && !ipv4_header_ok(l3.get(..ip.header_len)?) {
                return None;
            }
            ip
        }
        ethertype::IPV6 => fast_ipv6(l3)?,
        _ => return None,
    };
    let l4 = l3.get(hl..total)?;
    let l4_offset = l3_offset + hl;
    let (ports, tcp_flags, payload) = fast_l4(proto, l4)?;
    Some(Parsed {
        vlan_tci,
        l3: if et == ethertype::IPV6 {
            L3Kind::Ipv6
        } else {
            L3Kind::Ipv4
        },
        l3_offset,
        l3_end: l3_offset + total,
        ttl,
        l4_proto: proto,
        l4_offset,
        l4_len: total - hl,
        payload_offset: l4_offset + payload,
        fragment: Fragment::None,
        ports: Some(Ports {
            src: u16::from_be_bytes([ports[0], ports[1]]),
            dst: u16::from_be_bytes([ports[2], ports[3]]),
        }),
        tcp_flags,
        tcp_flags_valid: tcp_flags.is_none_or(tcp_flags_valid),
        icmp: None,
        nic_l4_checksum: NicChecksum::Unknown,
    })
}

/// The IPv4 header checksum verifies (the one check of it on the fast
/// paths). A 20-byte header without options is summed as five words in
/// line: the one's-complement sum is 0xFFFF when the plain sum is a
/// non-zero multiple of 0xFFFF, in either byte order (RFC 1071 §2(B)).
#[inline(always)]
pub(crate) fn ipv4_header_ok(h: &[u8]) -> bool {
    match <&[u8; 20]>::try_from(h) {
        Ok(h) => {
            let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            let sum = w(0) + w(4) + w(8) + w(12) + w(16);
            sum != 0 && sum % 0xFFFF == 0
        }
        Err(_) => super::checksum::verify(h),
    }
}

/// [`parse_frame_with`] through the views: every frame, every error.
pub(crate) fn parse_views(buf: &[u8], opts: &ParseOptions) -> Result<Parsed, Malformed> {
    let eth = EthernetFrame::new_checked(buf).map_err(|e| match e {
        WireError::QinQ => Malformed::VlanQinq,
        _ if buf.len() < ETH_HEADER_LEN => Malformed::TruncatedEthernet,
        _ => Malformed::TruncatedVlan,
    })?;
    let l3_offset = eth.header_len();
    let et = eth.ethertype();
    let mut p = Parsed {
        vlan_tci: eth.vlan_tci(),
        l3: L3Kind::Other(et),
        l3_offset,
        l3_end: buf.len(),
        ttl: 0,
        l4_proto: 0,
        l4_offset: buf.len(),
        l4_len: 0,
        payload_offset: buf.len(),
        fragment: Fragment::None,
        ports: None,
        tcp_flags: None,
        tcp_flags_valid: true,
        icmp: None,
        nic_l4_checksum: NicChecksum::Unknown,
    };
    let l3 = eth.payload();
    match et {
        ethertype::ARP => {
            ArpPacket::new_checked(l3).map_err(|e| match e {
                WireError::Truncated => Malformed::TruncatedArp,
                _ => Malformed::ArpUnsupported,
            })?;
            p.l3 = L3Kind::Arp;
            p.l3_end = l3_offset + arp::PACKET_LEN;
            p.l4_offset = p.l3_end;
            p.payload_offset = p.l3_end;
        }
        ethertype::IPV4 => parse_ipv4(l3, opts, &mut p)?,
        ethertype::IPV6 => parse_ipv6(l3, &mut p)?,
        _ => {}
    }
    Ok(p)
}

fn parse_ipv4(l3: &[u8], opts: &ParseOptions, p: &mut Parsed) -> Result<(), Malformed> {
    let ip = Ipv4Packet::new_checked(l3).map_err(|e| match e {
        WireError::Truncated => Malformed::TruncatedIpv4,
        WireError::BadVersion => Malformed::Ipv4BadVersion,
        WireError::BadHeaderLen => Malformed::Ipv4BadIhl,
        _ => Malformed::Ipv4BadTotalLength,
    })?;
    if opts.verify_ipv4_checksum && !ip.verify_checksum() {
        return Err(Malformed::Ipv4BadChecksum);
    }
    let hl = ip.header_len();
    let total = ip.packet_len();
    let frag_off = usize::from(ip.frag_offset());
    if frag_off + (total - hl) > 0xFFFF {
        return Err(Malformed::Ipv4BadFragment);
    }
    p.l3 = L3Kind::Ipv4;
    p.l3_end = p.l3_offset + total;
    p.ttl = ip.ttl();
    p.l4_proto = ip.protocol();
    p.l4_offset = p.l3_offset + hl;
    p.l4_len = total - hl;
    p.payload_offset = p.l4_offset;
    p.fragment = if !ip.is_fragment() {
        Fragment::None
    } else if frag_off == 0 {
        Fragment::First
    } else {
        Fragment::NonFirst
    };
    if p.fragment == Fragment::NonFirst {
        return Ok(());
    }
    parse_l4(ip.payload(), false, p)
}

fn parse_ipv6(l3: &[u8], p: &mut Parsed) -> Result<(), Malformed> {
    let ip = Ipv6Packet::new_checked(l3).map_err(|e| match e {
        WireError::Truncated => Malformed::TruncatedIpv6,
        WireError::BadVersion => Malformed::Ipv6BadVersion,
        _ => Malformed::Ipv6BadPayloadLength,
    })?;
    let up = ip.upper_layer().map_err(|e| match e {
        WireError::Truncated => Malformed::Ipv6TruncatedExtHeader,
        WireError::TooManyExtHeaders => Malformed::Ipv6TooManyExtHeaders,
        _ => Malformed::Ipv6BadExtHeader,
    })?;
    let total = ip.packet_len();
    let l4_len = total - up.offset;
    p.l3 = L3Kind::Ipv6;
    p.l3_end = p.l3_offset + total;
    p.ttl = ip.hop_limit();
    p.l4_proto = up.proto;
    p.l4_offset = p.l3_offset + up.offset;
    p.l4_len = l4_len;
    p.payload_offset = p.l4_offset;
    if let Some(f) = up.fragment {
        // Fragmentable part: everything after the fragment header.
        let frag_len = total - (f.header_offset + 8);
        if usize::from(f.offset) + frag_len > 0xFFFF || (f.more && frag_len % 8 != 0) {
            return Err(Malformed::Ipv6BadFragment);
        }
        p.fragment = if f.is_atomic() {
            Fragment::None
        } else if f.offset == 0 {
            Fragment::First
        } else {
            Fragment::NonFirst
        };
    }
    if p.fragment == Fragment::NonFirst {
        return Ok(());
    }
    let l4 = &l3[up.offset..total];
    parse_l4(l4, true, p)
}

fn parse_l4(l4: &[u8], v6: bool, p: &mut Parsed) -> Result<(), Malformed> {
    let whole = p.fragment == Fragment::None;
    match p.l4_proto {
        ip_proto::TCP => {
            if l4.len() < 20 {
                return Err(Malformed::TruncatedTcp);
            }
            let doff = usize::from(l4[12] >> 4) * 4;
            if doff < 20 || doff > l4.len() {
                return Err(Malformed::TcpBadDataOffset);
            }
            let flags = TcpFlags(l4[13]);
            p.ports = Some(Ports {
                src: rd16(l4, 0),
                dst: rd16(l4, 2),
            });
            p.tcp_flags = Some(flags);
            p.tcp_flags_valid = tcp_flags_valid(flags);
            p.payload_offset = p.l4_offset + doff;
        }
        ip_proto::UDP => {
            if l4.len() < 8 {
                return Err(Malformed::TruncatedUdp);
            }
            // A first fragment carries only part of the datagram.
            let ulen = usize::from(rd16(l4, 4));
            if whole && (ulen < 8 || ulen > l4.len()) {
                return Err(Malformed::UdpBadLength);
            }
            p.ports = Some(Ports {
                src: rd16(l4, 0),
                dst: rd16(l4, 2),
            });
            p.payload_offset = p.l4_offset + 8;
        }
        ip_proto::ICMP if !v6 => {
            if l4.len() < 8 {
                return Err(Malformed::TruncatedIcmpv4);
            }
            p.icmp = Some((l4[0], l4[1]));
            p.payload_offset = p.l4_offset + 8;
        }
        ip_proto::ICMPV6 if v6 => {
            if l4.len() < 8 {
                return Err(Malformed::TruncatedIcmpv6);
            }
            p.icmp = Some((l4[0], l4[1]));
            p.payload_offset = p.l4_offset + 8;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    fn frame(v6: bool, tcp: bool, vlan: Option<u16>, payload: &[u8]) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let mut out = Vec::new();
        macro_rules! l4 {
            ($ip:expr) => {
                if tcp {
                    $ip.tcp(1000, 80, 7, 512)
                        .syn()
                        .write(&mut out, payload)
                        .unwrap()
                } else {
                    $ip.udp(53, 5353).write(&mut out, payload).unwrap()
                }
            };
        }
        match (v6, vlan) {
            (false, None) => l4!(eth.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)),
            (true, None) => l4!(eth.ipv6([1; 16], [2; 16], 64)),
            (false, Some(v)) => l4!(eth
                .single_vlan(etherparse::VlanId::try_new(v).unwrap())
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)),
            (true, Some(v)) => l4!(eth
                .single_vlan(etherparse::VlanId::try_new(v).unwrap())
                .ipv6([1; 16], [2; 16], 64)),
        }
        out
    }

    /// The check as RFC 793/768/8200 word it, from the pseudo-header's and
    /// the segment's folded sums (the formula before the one-fold check).
    fn l4_ok_reference(p: &Parsed, f: &[u8]) -> bool {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let tcp_or_udp = p.l4_proto == ip_proto::TCP || p.l4_proto == ip_proto::UDP;
        if !tcp_or_udp || p.fragment != Fragment::None {
            return false;
        }
        let Some(l4) = f.get(p.l4_offset..p.l4_offset + p.l4_len) else {
            return false;
        };
        let a = &f[p.l3_offset..];
        let pseudo = match p.l3 {
            L3Kind::Ipv4 => {
                if p.l4_proto == ip_proto::UDP && l4[6..8] == [0, 0] {
                    return true;
                }
                let s = Ipv4Addr::new(a[12], a[13], a[14], a[15]);
                let d = Ipv4Addr::new(a[16], a[17], a[18], a[19]);
                checksum::pseudo_header_v4(s, d, p.l4_proto, l4.len() as u16)
            }
            L3Kind::Ipv6 => {
                let s = Ipv6Addr::from(<[u8; 16]>::try_from(&a[8..24]).unwrap());
                let d = Ipv6Addr::from(<[u8; 16]>::try_from(&a[24..40]).unwrap());
                checksum::pseudo_header_v6(&s, &d, p.l4_proto, l4.len() as u32)
            }
            _ => return false,
        };
        checksum::add(pseudo, checksum::sum(l4)) == 0xFFFF
    }

    /// Where the TCP or UDP checksum field of a parsed frame is.
    fn l4_csum_at(p: &Parsed) -> usize {
        p.l4_offset + if p.l4_proto == ip_proto::TCP { 16 } else { 6 }
    }

    /// Byte fixtures: segments of every length parity, payloads that carry
    /// on every add, good and corrupted, over both families.
    #[test]
    fn l4_checksum_fixtures() {
        for v6 in [false, true] {
            for tcp in [false, true] {
                for len in [0usize, 1, 2, 3, 7, 8, 9, 31, 64, 65] {
                    for fill in [0x00u8, 0xFF, 0x5A] {
                        let f = frame(v6, tcp, None, &vec![fill; len]);
                        let p = parse_frame(&f).unwrap();
                        assert!(
                            p.l4_checksum_ok(&f),
                            "v6 {v6} tcp {tcp} len {len} {fill:#x}"
                        );
                        // One bit off anywhere in the segment or the
                        // addresses: refused (the UDP v4 field aside, where
                        // 0 would mean "no checksum").
                        let addrs = if v6 { 8..40 } else { 12..20 };
                        let l3 = p.l3_offset;
                        let spots = (p.l4_offset..p.l3_end).chain(addrs.map(|i| l3 + i));
                        for at in spots {
                            let mut g = f.clone();
                            g[at] ^= 0x01;
                            // The IPv4 header's own checksum is not the
                            // point: an address flip must reach this check.
                            let opts = ParseOptions {
                                verify_ipv4_checksum: false,
                            };
                            let Ok(q) = parse_frame_with(&g, &opts) else {
                                continue; // a header field the parse refuses
                            };
                            let unsummed = !v6 && !tcp && g[l4_csum_at(&q)..][..2] == [0, 0];
                            if !unsummed {
                                assert!(!q.l4_checksum_ok(&g), "flip at {at}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// 0x0000 and 0xFFFF are the two zeros of one's complement: a segment
    /// whose checksum is 0x0000 verifies with either in its field.
    #[test]
    fn l4_checksum_both_zeros() {
        for v6 in [false, true] {
            let mut f = frame(v6, true, None, &[0, 0]);
            let p = parse_frame(&f).unwrap();
            let at = l4_csum_at(&p);
            // Make the payload word complete the sum to 0xFFFF with the
            // field at 0: then the checksum is 0x0000.
            f[at..at + 2].copy_from_slice(&[0, 0]);
            let l4 = p.l4_offset..p.l3_end;
            let a = &f[p.l3_offset..];
            let addrs = if v6 { &a[8..40] } else { &a[12..20] };
            let pseudo = checksum::sum(addrs) as u64 + 6 + p.l4_len as u64;
            let s = checksum::fold(pseudo + u64::from(checksum::sum(&f[l4.clone()])));
            let w = 0xFFFF - s;
            let end = p.l3_end;
            f[end - 2..end].copy_from_slice(&w.to_be_bytes());
            assert!(p.l4_checksum_ok(&f), "0x0000, v6 {v6}");
            assert!(l4_ok_reference(&p, &f));
            f[at..at + 2].copy_from_slice(&[0xFF, 0xFF]);
            assert!(p.l4_checksum_ok(&f), "0xFFFF, v6 {v6}");
            assert!(l4_ok_reference(&p, &f));
            f[at..at + 2].copy_from_slice(&[0xFF, 0xFE]);
            assert!(!p.l4_checksum_ok(&f));
        }
    }

    /// The NIC's word decides when it gave one; fragments and other
    /// protocols never pass.
    #[test]
    fn l4_checksum_nic_word_and_refusals() {
        let f = frame(false, true, None, b"abc");
        let mut p = parse_frame(&f).unwrap();
        let mut bad = f.clone();
        bad[p.l3_end - 1] ^= 1;
        p.nic_l4_checksum = NicChecksum::Good;
        assert!(p.l4_checksum_ok(&bad));
        p.nic_l4_checksum = NicChecksum::Bad;
        assert!(!p.l4_checksum_ok(&f));
        p.nic_l4_checksum = NicChecksum::Unknown;
        assert!(p.l4_checksum_ok(&f));
        assert!(
            !p.l4_checksum_ok(&f[..f.len() - 1]),
            "a frame shorter than its parse"
        );
        let mut q = p;
        q.fragment = Fragment::First;
        assert!(!q.l4_checksum_ok(&f));
        let mut q = p;
        q.l4_proto = ip_proto::ICMP;
        assert!(!q.l4_checksum_ok(&f));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]

        /// The one-fold check answers as the pseudo-header formula for any
        /// frame: edited, with either zero or any value in its checksum.
        #[test]
        fn l4_checksum_is_the_reference(
            v6 in any::<bool>(),
            tcp in any::<bool>(),
            vlan in prop::option::of(0u16..4096),
            payload in prop::collection::vec(any::<u8>(), 0..70),
            edits in prop::collection::vec((0usize..140, any::<u8>()), 0..3),
            field in prop::option::of(prop_oneof![Just(0u16), Just(0xFFFF), any::<u16>()]),
        ) {
            let mut f = frame(v6, tcp, vlan, &payload);
            let p0 = parse_frame(&f).unwrap();
            prop_assert!(p0.l4_checksum_ok(&f));
            if let Some(v) = field {
                let at = l4_csum_at(&p0);
                f[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
            for (at, v) in edits {
                if let Some(b) = f.get_mut(at) {
                    *b = v;
                }
            }
            if let Ok(p) = parse_frame(&f) {
                prop_assert_eq!(p.l4_checksum_ok(&f), l4_ok_reference(&p, &f));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]

        /// The fast path agrees with the views wherever it answers, and
        /// answers for the plain frames it is for.
        #[test]
        fn fast_path_is_the_views(
            v6 in any::<bool>(),
            tcp in any::<bool>(),
            vlan in prop::option::of(0u16..4096),
            payload in prop::collection::vec(any::<u8>(), 0..64),
            edits in prop::collection::vec((0usize..128, any::<u8>()), 0..4),
            cut in prop::option::of(0usize..160),
            verify in any::<bool>(),
        ) {
            let opts = ParseOptions { verify_ipv4_checksum: verify };
            let mut f = frame(v6, tcp, vlan, &payload);
            prop_assert!(parse_fast(&f, &opts).is_some());
            for (at, v) in edits {
                if let Some(b) = f.get_mut(at) {
                    *b = v;
                }
            }
            if let Some(n) = cut {
                f.truncate(n);
            }
            if let Some(p) = parse_fast(&f, &opts) {
                prop_assert_eq!(Ok(p), parse_views(&f, &opts));
            }
        }
    }
}
