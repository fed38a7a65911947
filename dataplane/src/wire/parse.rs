//! One-pass frame classification: offsets for the pipeline, or a named
//! reason why the frame is malformed.

use core::fmt;

use super::arp::{self, ArpPacket};
use super::ethernet::{ethertype, EthernetFrame, HEADER_LEN as ETH_HEADER_LEN};
use super::ip_proto;
use super::ipv4::Ipv4Packet;
use super::ipv6::Ipv6Packet;
use super::tcp::TcpFlags;
use super::{rd16, WireError};

macro_rules! malformed {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// Why a frame was rejected by [`parse_frame`]. Each reason has a stable
        /// counter name ([`Malformed::counter_name`]) and a dense index
        /// ([`Malformed::index`]) for per-reason counter arrays.
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

            /// Stable name for drop counters (snake_case, never changes).
            pub fn counter_name(&self) -> &'static str {
                match self {
                    $( Malformed::$variant => $name, )*
                }
            }
        }
    };
}

malformed! {
    /// Shorter than 14 bytes.
    TruncatedEthernet => "truncated_ethernet",
    /// 802.1Q tag present but the frame ends inside it.
    TruncatedVlan => "truncated_vlan",
    /// Two VLAN tags (or an 802.1ad outer tag).
    QinQ => "vlan_qinq",
    /// ARP shorter than 28 bytes.
    TruncatedArp => "truncated_arp",
    /// ARP for something other than Ethernet/IPv4.
    ArpUnsupported => "arp_unsupported",
    /// IPv4 header shorter than 20 bytes or than its IHL.
    TruncatedIpv4 => "truncated_ipv4",
    /// EtherType IPv4 but version is not 4.
    Ipv4BadVersion => "ipv4_bad_version",
    /// IHL < 5.
    Ipv4BadIhl => "ipv4_bad_ihl",
    /// Total length below the header length or beyond the frame.
    Ipv4BadTotalLength => "ipv4_bad_total_length",
    /// Header checksum does not verify.
    Ipv4BadChecksum => "ipv4_bad_checksum",
    /// Fragment would extend past 65535 bytes.
    Ipv4BadFragment => "ipv4_bad_fragment",
    /// Shorter than the 40-byte IPv6 header.
    TruncatedIpv6 => "truncated_ipv6",
    /// EtherType IPv6 but version is not 6.
    Ipv6BadVersion => "ipv6_bad_version",
    /// Payload length beyond the frame.
    Ipv6BadPayloadLength => "ipv6_bad_payload_length",
    /// An extension header runs past the payload.
    Ipv6TruncatedExtHeader => "ipv6_truncated_ext_header",
    /// Hop-by-hop not first, or a second fragment header.
    Ipv6BadExtHeader => "ipv6_bad_ext_header",
    /// More extension headers than the walk allows.
    Ipv6TooManyExtHeaders => "ipv6_too_many_ext_headers",
    /// Fragment past 65535 bytes, or a non-final fragment whose length is
    /// not a multiple of 8 (RFC 8200 §4.5).
    Ipv6BadFragment => "ipv6_bad_fragment",
    /// TCP header shorter than 20 bytes.
    TruncatedTcp => "truncated_tcp",
    /// TCP data offset < 5 or beyond the segment.
    TcpBadDataOffset => "tcp_bad_data_offset",
    /// UDP header shorter than 8 bytes.
    TruncatedUdp => "truncated_udp",
    /// UDP length field < 8 or beyond the IP payload.
    UdpBadLength => "udp_bad_length",
    /// ICMP message shorter than 8 bytes.
    TruncatedIcmpv4 => "truncated_icmpv4",
    /// ICMPv6 message shorter than 8 bytes.
    TruncatedIcmpv6 => "truncated_icmpv6",
}

impl Malformed {
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
pub fn parse_frame(buf: &[u8]) -> Result<Parsed, Malformed> {
    parse_frame_with(buf, &ParseOptions::default())
}

/// Parse one Ethernet frame: Ethernet (one optional VLAN tag), then ARP,
/// IPv4 or IPv6 (extension headers walked), then the TCP/UDP/ICMP header.
/// Never panics; returns offsets only.
pub fn parse_frame_with(buf: &[u8], opts: &ParseOptions) -> Result<Parsed, Malformed> {
    let eth = EthernetFrame::new_checked(buf).map_err(|e| match e {
        WireError::QinQ => Malformed::QinQ,
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
