//! The dataplane's per-worker counters: one stable index and name per counter.
//!
//! The index is the counter's position in a worker's block of the state region
//! (see [`crate::state`]); adding a counter changes the layout and therefore
//! bumps [`crate::state::STATE_LAYOUT_VERSION`].

macro_rules! counters {
    ($($variant:ident => $name:literal, $help:literal;)*) => {
        /// A per-worker counter.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Counter {
            $($variant,)*
        }

        impl Counter {
            /// Every counter, in index order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];
            /// Number of counters in a worker block.
            pub const COUNT: usize = Self::ALL.len();

            /// Stable snake_case name, used by borderctl, logs and Prometheus.
            pub const fn name(self) -> &'static str {
                match self { $(Counter::$variant => $name,)* }
            }

            /// One-line description for operators.
            pub const fn help(self) -> &'static str {
                match self { $(Counter::$variant => $help,)* }
            }

            /// Position of the counter inside a worker block.
            pub const fn index(self) -> usize {
                self as usize
            }

            /// Looks a counter up by its stable name.
            pub fn from_name(name: &str) -> Option<Counter> {
                Self::ALL.iter().copied().find(|c| c.name() == name)
            }

            /// True for the counters that count dropped packets.
            pub fn is_drop(self) -> bool {
                self.name().starts_with("drop_")
            }
        }
    };
}

counters! {
    RxPackets => "rx_packets", "frames received from data ports";
    RxBytes => "rx_bytes", "bytes received from data ports";
    TxPackets => "tx_packets", "frames accepted by a data port for transmission";
    TxBytes => "tx_bytes", "bytes accepted by a data port for transmission";
    ArpReplies => "arp_replies", "ARP requests for an owned address answered";
    IcmpEchoReplies => "icmp_echo_replies", "ICMP echo requests to an owned address or VIP answered";
    Icmpv6EchoReplies => "icmpv6_echo_replies", "ICMPv6 echo requests to an owned address or VIP answered";
    NdpAdvertisements => "ndp_advertisements", "neighbor solicitations for an owned address answered";
    ToHost => "to_host_packets", "frames passed up to a port's kernel twin";
    FromHost => "from_host_packets", "frames sent by a kernel twin and forwarded out of its port";
    DropTxFull => "drop_tx_full", "frames a port's TX queue did not accept";
    DropHostTxFull => "drop_host_tx_full", "frames a kernel twin's queue did not accept";
    DropMalformed => "drop_malformed", "frames that failed parsing (all reasons)";
    DropTruncatedEthernet => "drop_truncated_ethernet", "frame shorter than an Ethernet header";
    DropBadVlan => "drop_bad_vlan", "stacked VLAN tags or truncated VLAN header";
    DropTruncatedArp => "drop_truncated_arp", "ARP shorter than its header or not Ethernet/IPv4";
    DropBadIpv4Header => "drop_bad_ipv4_header", "IPv4 header with bad version, IHL, length or checksum";
    DropBadIpv6Header => "drop_bad_ipv6_header", "IPv6 header with bad version or payload length";
    DropBadIpv6ExtHeaders => "drop_bad_ipv6_ext_headers", "IPv6 extension headers truncated or too many";
    DropBadL4Header => "drop_bad_l4_header", "TCP/UDP/ICMP header truncated or inconsistent";
    DropNotOurMac => "drop_not_our_mac", "unicast frame addressed to another MAC";
    DropUnknownEthertype => "drop_unknown_ethertype", "ethertype neither ARP, IPv4 nor IPv6";
    DropArpNotOurs => "drop_arp_not_ours", "ARP for an address this appliance does not own";
    DropNotLocal => "drop_not_local", "IP packet for an address this appliance neither owns nor serves";
    DropVipUnhandled => "drop_vip_unhandled", "packet to a VIP address on no configured VIP port/protocol";
    DropBadTcpFlags => "drop_bad_tcp_flags", "impossible TCP flag set (SYN+FIN, SYN+RST, none)";
    DropTtlExceeded => "drop_ttl_exceeded", "TTL or hop limit would reach zero";
    DropFragment => "drop_fragment", "IP fragment to a VIP (not reassembled)";
    DropMultiSegment => "drop_multi_segment", "chained mbuf (jumbo frames are not supported)";
    DropNoHostTwin => "drop_no_host_twin", "host-bound frame on a port without a kernel twin";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_snake_case() {
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        assert!(names
            .iter()
            .all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Counter::COUNT);
    }

    #[test]
    fn index_matches_position_and_lookup_round_trips() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
            assert_eq!(Counter::from_name(c.name()), Some(*c));
        }
        assert!(Counter::DropMalformed.is_drop());
        assert!(!Counter::RxPackets.is_drop());
        assert_eq!(Counter::from_name("no_such_counter"), None);
    }
}
