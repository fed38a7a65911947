//! Every view over arbitrary bytes: constructors refuse or accept, and no
//! accessor, iterator or setter of an accepted view panics.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use dataplane::wire::icmpv6::Icmpv6Packet;
use dataplane::wire::ipv6::walk_ext_headers;
use dataplane::wire::{
    ArpPacket, EthernetFrame, Icmpv4Packet, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = data.to_vec();
    if let Ok(mut e) = EthernetFrame::new_checked(&mut buf[..]) {
        let _ = (
            e.dst(),
            e.src(),
            e.vlan_tci(),
            e.ethertype(),
            e.payload().len(),
        );
        e.set_ethertype(0x0800);
        e.set_vlan_tci(1);
        let _ = e.payload_mut().len();
    }
    if let Ok(a) = ArpPacket::new_checked(data) {
        let _ = (
            a.operation(),
            a.sender_hw(),
            a.sender_ip(),
            a.target_hw(),
            a.target_ip(),
        );
    }
    let mut buf = data.to_vec();
    if let Ok(mut ip) = Ipv4Packet::new_checked(&mut buf[..]) {
        let _ = (
            ip.verify_checksum(),
            ip.payload().len(),
            ip.options().len(),
            ip.frag_offset(),
        );
        ip.set_total_len(0xffff);
        ip.rewrite_ttl(1);
        ip.rewrite_src_addr(Ipv4Addr::LOCALHOST);
        let _ = ip.payload_mut().len();
        assert!(ip.verify_checksum() == ip.verify_checksum());
    }
    if let Ok(ip) = Ipv6Packet::new_checked(data) {
        let _ = (
            ip.upper_layer(),
            ip.flow_label(),
            ip.traffic_class(),
            ip.src_addr(),
        );
    }
    if let Some((&first, rest)) = data.split_first() {
        let _ = walk_ext_headers(first, rest);
    }
    let mut buf = data.to_vec();
    if let Ok(mut t) = TcpPacket::new_checked(&mut buf[..]) {
        for o in t.options_iter() {
            let _ = o;
        }
        let _ = t.verify_checksum_v6(&Ipv6Addr::LOCALHOST, &Ipv6Addr::LOCALHOST);
        let _ = t.map_sack_edges(|e| e.wrapping_add(7));
        let _ = t.clamp_mss(536);
        t.rewrite_seq_number(1);
        let _ = t.payload().len();
    }
    let mut buf = data.to_vec();
    if let Ok(mut u) = UdpPacket::new_checked(&mut buf[..]) {
        u.rewrite_dst_port(9);
        u.fill_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
        assert!(u.verify_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST));
    }
    let mut buf = data.to_vec();
    if let Ok(mut m) = Icmpv4Packet::new_checked(&mut buf[..]) {
        let _ = (
            m.embedded_ipv4().map(|i| i.payload().len()),
            m.embedded_l4_prefix(),
        );
        if let Ok(mut inner) = m.embedded_ipv4_mut() {
            inner.rewrite_dst_addr(Ipv4Addr::LOCALHOST);
        }
        m.fill_checksum();
        assert!(m.verify_checksum());
    }
    let mut buf = data.to_vec();
    if let Ok(mut m) = Icmpv6Packet::new_checked(&mut buf[..]) {
        let _ = (
            m.nd_target(),
            m.mtu(),
            m.embedded_ipv6().map(|i| i.payload().len()),
        );
        for o in m.nd_options() {
            let _ = o;
        }
        m.set_nd_target(&Ipv6Addr::LOCALHOST);
        m.fill_checksum(&Ipv6Addr::LOCALHOST, &Ipv6Addr::UNSPECIFIED);
        assert!(m.verify_checksum(&Ipv6Addr::LOCALHOST, &Ipv6Addr::UNSPECIFIED));
    }
});
