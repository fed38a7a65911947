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

            /// True for the values that are levels, not running totals.
            pub fn is_gauge(self) -> bool {
                self.help().starts_with("gauge: ")
            }

            /// True for the counters that count dropped packets.
            pub fn is_drop(self) -> bool {
                self.name().starts_with("drop_")
            }

            /// True for a counter that is the sum of other counters
            /// (`drop_malformed`: every parse error below it), which a sum
            /// over all counters of its kind would count twice.
            pub fn sums_others(self) -> bool {
                matches!(self, Counter::DropMalformed)
            }

            /// The drop reason of a counter of dropped packets that is no
            /// sum of others: its name without `drop_`. Prometheus exports
            /// these, and only these, as `border_drops_total{reason}`.
            pub fn drop_reason(self) -> Option<&'static str> {
                if self.sums_others() {
                    return None;
                }
                self.name().strip_prefix("drop_")
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
    NdpAdvertisements => "ndp_advertisements", "neighbour solicitations for an owned address answered";
    ToHost => "to_host_packets", "frames passed up to a port's kernel twin";
    FromHost => "from_host_packets", "frames sent by a kernel twin and forwarded out of its port";
    NewFlows => "new_flows", "connections created (entries inserted or stateless picks)";
    ConntrackExpired => "conntrack_expired", "connection-table entries removed by timeout";
    ConntrackFullStateless => "conntrack_full_stateless", "new DNAT flows forwarded by Maglev alone because the table was full";
    DnatStatelessReplies => "dnat_stateless_replies", "DNAT replies translated without an entry on this worker";
    IcmpErrorsTranslated => "icmp_errors_translated", "ICMP errors about a tracked flow sent on to its other end";
    HandoffSent => "handoff_sent", "full-NAT replies passed to the worker that owns their local port";
    HandoffReceived => "handoff_received", "full-NAT replies received from another worker";
    TablesAdopted => "tables_adopted", "table generations validated and adopted";
    TablesRefused => "tables_refused", "published table generations refused by validation (old tables kept)";
    NeighborRequests => "neighbour_requests", "ARP requests and neighbour solicitations sent";
    NeighborQueued => "neighbour_queued", "frames held until their next hop's MAC was known (sent when the answer arrives)";
    PpHeadersInserted => "pp_headers_inserted", "PROXY v2 headers sent to a backend for the first time (in a client segment or on their own)";
    PpHeadersRetransmitted => "pp_headers_retransmitted", "PROXY v2 headers sent again: in a retransmitted first segment, or by the header retransmission timer";
    PpHeadersStandalone => "pp_headers_standalone", "PROXY v2 headers sent without client data (proxy_protocol_send_on_connect)";
    PpTlvsDroppedForSize => "pp_tlvs_dropped_for_size", "PROXY v2 TLVs left out because the header would exceed proxy_protocol_max_len";
    PpSegmentsSplit => "pp_segments_split", "first segments whose payload was split so that header plus payload fit the backend's MSS";
    PpSplitTailDeferred => "pp_split_tail_deferred", "rest of a split first segment not sent (no room): left for the client to retransmit";
    PpSynDataStripped => "pp_syn_data_stripped", "data on a SYN (TCP Fast Open) to a PROXY VIP removed; the client sends it again";
    PpMssClamped => "pp_mss_clamped", "backend SYN-ACK MSS options lowered by the PROXY header length";
    PpRetransmitTimerFull => "pp_retransmit_timer_full", "standalone PROXY headers sent without a retransmission timer (timer list full)";
    PpRetransmitGaveUp => "pp_retransmit_gave_up", "standalone PROXY headers still unacknowledged after every retransmission";
    LocalTuplesTakenOver => "local_tuples_taken_over", "full-NAT local tuples handed to a new connection while the ended connection's entry still lingered (rested first)";
    LocalTuples => "local_tuples", "gauge: full-NAT local tuples (local address, port) this worker owns";
    LocalTuplesInUse => "local_tuples_in_use", "gauge: full-NAT connections holding a local tuple (one tuple can serve several backends at once, so this can exceed local_tuples)";
    LocalTuplesResting => "local_tuples_resting", "gauge: full-NAT local tuples free but resting after their last connection (TIME_WAIT on the backend)";
    ResetBackendDown => "reset_backend_down", "TCP packets of a connection to a backend health took down answered with a RST and the connection forgotten (on_down = \"reset\")";
    ForgotBackendDown => "forgot_backend_down", "UDP flows to a backend health took down forgotten so their next datagram picks again (on_down = \"reset\")";
    FlowsKilled => "flows_killed", "connections to a backend the operator killed (borderctl backend disable --kill) ended by their next packet: TCP answered with a RST, UDP forgotten so the next datagram picks again";
    // persistence_timeout (docs/design.md §2, "Persistence"): new flows of persistent VIPs.
    PersistenceHits => "persistence_hits", "new flows of a persistent VIP sent to the backend their client was pinned to";
    PersistenceMisses => "persistence_misses", "new flows of a persistent VIP whose client had no usable pin on this worker: picked by Maglev (client address) and pinned";
    PersistenceExpired => "persistence_expired", "client pins removed past their deadline (persistence_timeout after the last new flow or the last flow's end, no flow left)";
    PersistenceBackendGone => "persistence_backend_gone", "client pins not followed because their backend left the VIP's ring (down, drained, weight 0, removed): the flow picked again and the client was pinned anew";
    PersistenceEvictions => "persistence_evictions", "live client pins given up for another client's because their bucket of the worker's persistence table was full";
    DropTxFull => "drop_tx_full", "frames a port's TX queue did not accept";
    DropHostTxFull => "drop_host_tx_full", "frames a kernel twin's queue did not accept";
    DropMalformed => "drop_malformed", "frames that failed parsing (sum of the drop_<reason> below, from drop_truncated_ethernet to drop_truncated_icmpv6)";
    DropTruncatedEthernet => "drop_truncated_ethernet", "frame shorter than an Ethernet header";
    DropTruncatedVlan => "drop_truncated_vlan", "frame ends inside its 802.1Q tag";
    DropVlanQinq => "drop_vlan_qinq", "stacked VLAN tags (QinQ) are not supported";
    DropTruncatedArp => "drop_truncated_arp", "ARP shorter than 28 bytes";
    DropArpUnsupported => "drop_arp_unsupported", "ARP for something other than Ethernet/IPv4";
    DropTruncatedIpv4 => "drop_truncated_ipv4", "IPv4 header shorter than 20 bytes or its IHL";
    DropIpv4BadVersion => "drop_ipv4_bad_version", "IPv4 ethertype with another IP version";
    DropIpv4BadIhl => "drop_ipv4_bad_ihl", "IPv4 IHL below 5";
    DropIpv4BadTotalLength => "drop_ipv4_bad_total_length", "IPv4 total length below the header or beyond the frame";
    DropIpv4BadChecksum => "drop_ipv4_bad_checksum", "IPv4 header checksum does not verify";
    DropIpv4BadFragment => "drop_ipv4_bad_fragment", "IPv4 fragment extends past 65535 bytes";
    DropTruncatedIpv6 => "drop_truncated_ipv6", "shorter than the IPv6 header";
    DropIpv6BadVersion => "drop_ipv6_bad_version", "IPv6 ethertype with another IP version";
    DropIpv6BadPayloadLength => "drop_ipv6_bad_payload_length", "IPv6 payload length beyond the frame";
    DropIpv6TruncatedExtHeader => "drop_ipv6_truncated_ext_header", "IPv6 extension header runs past the payload";
    DropIpv6BadExtHeader => "drop_ipv6_bad_ext_header", "IPv6 hop-by-hop not first or a second fragment header";
    DropIpv6TooManyExtHeaders => "drop_ipv6_too_many_ext_headers", "more IPv6 extension headers than the parser walks";
    DropIpv6BadFragment => "drop_ipv6_bad_fragment", "IPv6 fragment past 65535 bytes or misaligned";
    DropTruncatedTcp => "drop_truncated_tcp", "TCP header shorter than 20 bytes";
    DropTcpBadDataOffset => "drop_tcp_bad_data_offset", "TCP data offset below 5 or beyond the segment";
    DropTruncatedUdp => "drop_truncated_udp", "UDP header shorter than 8 bytes";
    DropUdpBadLength => "drop_udp_bad_length", "UDP length below 8 or beyond the IP payload";
    DropTruncatedIcmpv4 => "drop_truncated_icmpv4", "ICMP message shorter than 8 bytes";
    DropTruncatedIcmpv6 => "drop_truncated_icmpv6", "ICMPv6 message shorter than 8 bytes";
    DropArpBadOp => "drop_arp_bad_op", "ARP operation other than request or reply";
    DropArpBadSender => "drop_arp_bad_sender", "ARP sender MAC not unicast or sender IP not unicast";
    DropIcmpNotOurs => "drop_icmp_not_ours", "ICMP to a unicast address this appliance does not own";
    DropIcmpBadChecksum => "drop_icmp_bad_checksum", "ICMP/ICMPv6 checksum does not verify";
    DropIcmpBadSource => "drop_icmp_bad_source", "echo request from a source that must not be answered";
    DropNdBadHopLimit => "drop_nd_bad_hop_limit", "NDP message with hop limit other than 255";
    DropNdInvalid => "drop_nd_invalid", "NDP message violating RFC 4861 validity rules";
    DropNdBadOption => "drop_nd_bad_option", "malformed NDP option";
    DropNdNotOurs => "drop_nd_not_ours", "neighbour solicitation for an address this appliance does not own";
    DropSlowpathUnhandled => "drop_slowpath_unhandled", "frame the slow path could not classify";
    // A load-balanced packet whose NAT rewrite was refused, by reason.
    DropNatNotIp => "drop_nat_not_ip", "load-balanced frame to rewrite that is not IPv4 or IPv6";
    DropNatFragment => "drop_nat_fragment", "load-balanced packet to rewrite that is a fragment without the headers the rewrite needs";
    DropNatUnsupportedProto => "drop_nat_unsupported_proto", "load-balanced packet (or the packet an ICMP error quotes) neither TCP nor UDP";
    DropNatFamilyMismatch => "drop_nat_family_mismatch", "load-balanced packet whose translation would change its IP family (IPv4 to IPv6 or back)";
    DropNatIpv6RoutingHeader => "drop_nat_ipv6_routing_header", "load-balanced IPv6 packet with a routing header with segments left (its checksum covers a final destination the rewrite cannot see)";
    DropNatNotIcmpError => "drop_nat_not_icmp_error", "ICMP message to translate that is no error quoting a flow";
    DropNatBadIcmpQuote => "drop_nat_bad_icmp_quote", "ICMP error about a flow whose quoted packet is truncated, a non-first fragment or no valid IP header";
    DropNatMalformed => "drop_nat_malformed", "load-balanced frame to rewrite whose headers are too short or do not match its parse";
    DropNotOurMac => "drop_not_our_mac", "unicast frame addressed to another MAC";
    DropUnknownEthertype => "drop_unknown_ethertype", "ethertype neither ARP, IPv4 nor IPv6";
    DropArpNotOurs => "drop_arp_not_ours", "ARP for an address this appliance does not own";
    DropNotLocal => "drop_not_local", "IP packet for an address this appliance neither owns nor serves";
    DropVipUnhandled => "drop_vip_unhandled", "packet to a VIP address on no configured VIP port/protocol";
    DropBadTcpFlags => "drop_bad_tcp_flags", "impossible TCP flag set (SYN+FIN, SYN+RST, none)";
    DropTtlExceeded => "drop_ttl_exceeded", "TTL or hop limit would reach zero";
    DropFragment => "drop_fragment", "IP fragment to a VIP (not reassembled)";
    DropNoBackend => "drop_no_backend", "VIP has no backend in its ring";
    DropNoRoute => "drop_no_route", "no port reaches the destination or next hop";
    DropNoConntrack => "drop_no_conntrack", "mid-stream or reply packet of a connection not in the table";
    DropConntrackFull => "drop_conntrack_full", "new full-NAT flow while the connection table is full";
    DropNoLocalPort => "drop_no_local_port", "no full-NAT local tuple free for the backend: all taken or resting after their last connection (see local_tuples_*)";
    DropReplyKeyInUse => "drop_reply_key_in_use", "DNAT flow whose reply tuple another entry holds";
    DropNeighborUnresolved => "drop_neighbour_unresolved", "next hop MAC unknown and the frame could not wait for it (neighbour table full, or a PROXY flow's segment)";
    DropNeighborQueueFull => "drop_neighbour_queue_full", "next hop MAC unknown and its wait queue full (3 frames per next hop, 256 per worker)";
    DropNeighborQueueTimeout => "drop_neighbour_queue_timeout", "frames that waited 3 s for their next hop's MAC in vain";
    DropHandoffFull => "drop_handoff_full", "the owning worker's handoff queue was full";
    DropNoAllocation => "drop_no_allocation", "no mbuf for a generated frame";
    DropChainTooLong => "drop_chain_too_long", "chained frame (several mbuf segments) longer than one buffer of the pool holds: dropped whole, never truncated";
    DropOverMtu => "drop_over_mtu", "frame whose IP packet is longer than the receiving port's `mtu`";
    DropTooBig => "drop_too_big", "packet longer than the `mtu` of the port it would leave by: dropped, answered by ICMP too-big (IPv4 with DF set, IPv6) unless rate-limited";
    IcmpTooBigSent => "icmp_too_big_sent", "ICMP fragmentation-needed / ICMPv6 packet-too-big sent to the sender of a packet longer than the egress port's `mtu`";
    IcmpTooBigRateLimited => "icmp_too_big_rate_limited", "ICMP too-big answers not sent because this worker sent `icmp_echo_per_second` of them in the last second";
    DropNoHostTwin => "drop_no_host_twin", "host-bound frame on a port without a kernel twin";
    DropPpAheadOfHeader => "drop_pp_ahead_of_header", "client data beyond the first segment of a PROXY flow before the header could be written (first segment lost; the client retransmits)";
    DropPpBadSegment => "drop_pp_bad_segment", "segment of a PROXY flow that could not be rewritten (layout, no room)";
    // Flow state checks (docs/security.md): what a spoofed RST, ICMP error or DNAT reply may not do.
    TcpRstAccepted => "tcp_rst_accepted", "RSTs at the receiver's next expected sequence number: the flow closes (RFC 5961)";
    TcpRstNotExact => "tcp_rst_not_exact", "RSTs inside the receiver's window but not at its next expected sequence number: forwarded (an RFC 5961 endpoint answers with a challenge ACK), the flow's state kept";
    DropTcpRstOutOfWindow => "drop_tcp_rst_out_of_window", "RSTs outside the receiver's window (blind or stale): dropped, the flow's state kept";
    DropIcmpErrorOutOfWindow => "drop_icmp_error_out_of_window", "ICMP errors about a TCP flow quoting a sequence number the flow has not sent or had already acknowledged (RFC 5927)";
    DropDnatReplyWrongPort => "drop_dnat_reply_wrong_port", "DNAT replies without an entry that came in by a port other than the one facing their backend";
    // Verify before state: no segment changes a flow unless its checksum,
    // its port and (in the handshake) its acknowledgement say it is real.
    DropBadL4Checksum => "drop_bad_l4_checksum", "TCP/UDP segments with a failing checksum that would have started a flow, or changed a PROXY flow before its header was acknowledged: dropped, nothing created or changed";
    BadL4ChecksumIgnored => "bad_l4_checksum_ignored", "segments of tracked flows with a failing TCP/UDP checksum: forwarded as they are (the endpoint discards them) without changing the flow's state";
    DropReplyWrongPort => "drop_reply_wrong_port", "backend-side packets of a tracked flow that came in by a port other than the one facing its backend (spoofed replies)";
    DropTcpRstNoConntrack => "drop_tcp_rst_no_conntrack", "RSTs to a VIP of no connection border tracks: dropped (a RST flood costs the backends nothing; DNAT no longer picks such a RST up as a flow)";
    TcpHandshakeAckWrong => "tcp_handshake_ack_wrong", "client ACKs to a half-open connection that do not acknowledge the backend's SYN (ISN + 1): forwarded, the entry stays half-open and keeps its deadline";
    // PROXY header forgery (docs/security.md): no client byte reaches a PROXY VIP's
    // backend unless border's header went first on that connection.
    DropPpSynNewIsn => "drop_pp_syn_new_isn", "SYN of a tracked PROXY flow with another ISN than its first SYN (it would move the header's place)";
    DropPpBeforeHeader => "drop_pp_before_header", "client data of a PROXY flow starting before the client's first byte while the header is unacknowledged (it would cover the header's place)";
    DropPpMidStream => "drop_pp_mid_stream", "segment to a PROXY VIP of a connection whose SYN border did not see (restart, ECMP move, expired): no header can go first; answered with a RST";
    DropPpConntrackFull => "drop_pp_conntrack_full", "new DNAT flow to a PROXY VIP while the connection table is full (no stateless fallback: it could carry no header)";
    // borderctl diag (docs/diag.md): connection-table occupancy per worker.
    ConntrackEntries => "conntrack_entries", "gauge: connection-table entries of this worker (expired ones not yet reclaimed included)";
    ConntrackCapacity => "conntrack_capacity", "gauge: connection-table size of this worker (dataplane.conntrack_per_worker)";
    // SYN flood defence (docs/reliability.md): a full table gives up its oldest half-open entry.
    ConntrackHalfOpenEvicted => "conntrack_half_open_evicted", "half-open TCP entries (handshake not completed, at least 1 s old) removed, oldest first, to make room for a new flow in a full table";
    DropSynFlood => "drop_syn_flood", "new full-NAT flow refused because the table is full and every half-open entry in it is younger than 1 s (SYNs arriving faster than the table turns over)";
    // Per-VIP admission ([vip.limits], docs/config.md): each refusal of a new flow.
    DropVipAclDenied => "drop_vip_acl_denied", "new flows from a source the VIP's allow/deny lists refuse ([vip.limits] allow, deny)";
    DropVipMaxConnections => "drop_vip_max_connections", "new flows refused because the VIP has max_connections open connections";
    DropBackendMaxConnections => "drop_backend_max_connections", "new flows refused because the backend Maglev picked has max_connections open connections";
    DropVipRateLimited => "drop_vip_rate_limited", "new flows over the VIP's new_connections_per_second";
    DropSourceRateLimited => "drop_source_rate_limited", "SYNs over syn_per_source_per_second from one source prefix";
    DropUdpSourceRateLimited => "drop_udp_source_rate_limited", "new UDP flows over udp_flows_per_source_per_second from one source prefix";
    SourceTableFull => "source_table_full", "new flows of a source prefix the per-source table had no room for: charged to the table's shared overflow bucket";
    IcmpEchoRateLimited => "icmp_echo_rate_limited", "ICMP and ICMPv6 echo requests not answered: over dataplane.icmp_echo_per_second on this worker";
    // Connection records (docs/records.md).
    ConnRecords => "conn_records", "connection records written to the worker's records ring (one per ended connection that carried payload)";
    ConnRecordsEmpty => "conn_records_empty", "ended connections that carried no payload (health checks, port scans): counted, not recorded (records.log_empty = false)";
    ConnRecordsRingFull => "conn_records_ring_full", "connection records lost because the worker's records ring was full (border-mgmt not draining it fast enough, or not running)";
    // Neighbour table (docs/security.md): only answers to border's requests and
    // next hops in use write into it; bounded, least recently used out.
    NeighEntries => "neigh_entries", "gauge: neighbour-table entries of this worker (at most 4096)";
    NeighRefusedOverheard => "neigh_learn_refused_overheard", "ARP/NDP bindings not learnt: a request or answer meant for another host";
    NeighRefusedOffSubnet => "neigh_learn_refused_off_subnet", "ARP/NDP bindings not learnt: the sender's address is outside the subnets of the port it came by";
    NeighRefusedUnsolicited => "neigh_learn_refused_unsolicited", "ARP replies / neighbour advertisements not learnt: no request of border's for that address is waiting and the table has no entry for it";
    NeighRefusedNotInTable => "neigh_learn_refused_not_in_table", "gratuitous ARPs, unsolicited advertisements and requesters' bindings not learnt: they only update an entry the table has";
    NeighEvicted => "neigh_evicted", "neighbour entries given up, least recently used first, to make room in a full table (configured next hops are never)";
    NeighProbes => "neigh_probes", "probes of next hops in use past their reachable time (unicast first, then broadcast)";
    NeighFailed => "neigh_failed", "next hops in use that answered no probe: their MAC forgotten, asked for again";
    NeighMacChanged => "neigh_mac_changed", "neighbour entries that moved to another MAC (an answer or an announcement: VRRP failover, a replaced server)";
    DropNeighborGone => "drop_neighbour_gone", "frames of a flow whose next hop's entry was evicted (its backend left the configuration and the table filled since)";
    SynProxyCookiesSent => "syn_proxy_cookies_sent", "client SYNs to a syn_proxy VIP answered with a cookie SYN-ACK (no entry, nothing sent to a backend)";
    SynProxyCookiesAccepted => "syn_proxy_cookies_accepted", "client ACKs that proved a SYN cookie: an entry made and the SYN sent to the backend";
    DropSynProxyCookieBad => "drop_syn_proxy_cookie_bad", "ACKs with no entry to a syn_proxy VIP whose acknowledgement is no valid cookie (forged, too old, or the options altered)";
    DropSynProxyBadChecksum => "drop_syn_proxy_bad_checksum", "SYNs and cookie ACKs to a syn_proxy VIP whose TCP checksum does not verify (nothing answered, nothing made)";
    DropSynProxyNoRoom => "drop_syn_proxy_no_room", "cookie SYN-ACKs or backend SYNs that did not fit the received frame's buffer";
    SynProxyHeld => "syn_proxy_held", "client segments held until the backend's handshake completed (the cookie ACK and data sent with or right after it)";
    SynProxyReleased => "syn_proxy_released", "held client segments sent on to the backend once its handshake completed";
    DropSynProxyHoldFull => "drop_syn_proxy_hold_full", "client segments not held: the flow or the worker had no hold slot left (the client retransmits them)";
    DropSynProxyHoldExpired => "drop_syn_proxy_hold_expired", "held client segments dropped because their backend never completed the handshake";
    SynProxyBackendSynAcks => "syn_proxy_backend_synacks", "backend SYN-ACKs taken by border to splice a cookie connection (not sent on to the client)";
    DropSynProxyBadSynAck => "drop_syn_proxy_bad_synack", "backend segments of a cookie connection before its SYN-ACK that are neither a SYN-ACK acknowledging border's SYN nor a RST";
    SynProxySynsResent => "syn_proxy_syns_resent", "SYNs border sent a backend again for a cookie connection (no SYN-ACK a second after the last, and the client sent more)";
    SynProxyBackendResets => "syn_proxy_backend_resets", "backends that refused a cookie connection's SYN: the client got a RST";
    SynProxyAutoOn => "syn_proxy_auto_on", "gauge: 1 while this worker answers SYNs to syn_proxy = \"auto\" VIPs with cookies (half-open pressure), else 0";
    SynProxyAutoSwitches => "syn_proxy_auto_switches", "times this worker switched syn_proxy = \"auto\" VIPs to cookies";
    FlowsAdopted => "flows_adopted", "connection-table entries taken over from the previous border-dp's flows region at start";
    AdoptDroppedTorn => "adopt_dropped_torn", "previous entries not adopted: their keys' seal did not match (a write cut short by a kill)";
    AdoptDroppedBadKeys => "adopt_dropped_bad_keys", "previous entries not adopted: invalid keys";
    AdoptDroppedBadState => "adopt_dropped_bad_state", "previous entries not adopted: invalid state, or a state that does not fit the protocol";
    AdoptDroppedBadValue => "adopt_dropped_bad_value", "previous entries not adopted: the flow record is invalid or does not fit its VIP";
    AdoptDroppedExpired => "adopt_dropped_expired", "previous entries not adopted: their deadline passed during the restart";
    AdoptDroppedDuplicate => "adopt_dropped_duplicate", "previous entries not adopted: a key already tracked";
    AdoptDroppedNoVip => "adopt_dropped_no_vip", "previous entries not adopted: their VIP is not configured any more";
    AdoptDroppedNoBackend => "adopt_dropped_no_backend", "previous entries not adopted: their backend is not one of the VIP's any more";
    AdoptDroppedNotOwned => "adopt_dropped_not_owned", "previous entries not adopted: their full-NAT local tuple is not in this worker's pools";
    AdoptDroppedFull => "adopt_dropped_full", "previous entries not adopted: the connection table was full";
    NeighAdopted => "neigh_adopted", "neighbour entries that started with a MAC carried from the previous border-dp's carry region (not asked for again)";
    NeighAdoptDroppedTorn => "neigh_adopt_dropped_torn", "neighbour bindings of the previous border-dp not used: their record's seal did not match (a write cut short by a kill)";
    NeighAdoptDroppedBadValue => "neigh_adopt_dropped_bad_value", "neighbour bindings of the previous border-dp not used: no valid family, an address no next hop has, or a multicast or zero MAC";
    NeighAdoptDroppedExpired => "neigh_adopt_dropped_expired", "neighbour bindings of the previous border-dp not used: their reachable time ended more than 60 s before this start (asked for again)";
    PersistenceAdopted => "persistence_adopted", "persistence pins taken over from the previous border-dp's carry region at start";
    PersistenceAdoptDroppedNoVip => "persistence_adopt_dropped_no_vip", "previous persistence pins not adopted: their VIP is not configured, or not persistent, any more";
    PersistenceAdoptDroppedNoBackend => "persistence_adopt_dropped_no_backend", "previous persistence pins not adopted: their backend is not one the VIP's ring can pick any more";
    PersistenceAdoptDroppedExpired => "persistence_adopt_dropped_expired", "previous persistence pins not adopted: their deadline passed during the restart and no flow held them";
    PersistenceAdoptDroppedBadValue => "persistence_adopt_dropped_bad_value", "previous persistence pins not adopted: a client address no client has (unspecified, multicast)";
    PersistenceAdoptDroppedFull => "persistence_adopt_dropped_full", "previous persistence pins not adopted: their bucket of this worker's table had no free way";
    // Direct server return (docs/config.md): the client's packets of a DSR VIP, MAC-rewritten or encapsulated.
    DsrForwarded => "dsr_forwarded", "client packets of DSR VIPs sent to their backend (destination MAC rewritten, or encapsulated in IPIP/IP6IP6/GUE)";
    DropDsrTooBig => "drop_dsr_too_big", "client packets of encapsulating DSR VIPs that would exceed the backend port's MTU once encapsulated";
    DropDsrNoRoom => "drop_dsr_no_room", "client packets of encapsulating DSR VIPs whose buffer had no room for the outer headers";
    DropDsrNoSource => "drop_dsr_no_source", "client packets of encapsulating DSR VIPs whose backend port has no address of the backend's family to derive the outer source from";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_snake_case() {
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        assert!(names.iter().all(|n| n
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')));
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
        assert_eq!(Counter::DropMalformed.drop_reason(), None);
        assert_eq!(Counter::DropNoBackend.drop_reason(), Some("no_backend"));
        assert_eq!(Counter::RxPackets.drop_reason(), None);
        assert!(!Counter::RxPackets.is_drop());
        assert_eq!(Counter::from_name("no_such_counter"), None);
    }
}
