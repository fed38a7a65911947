//! pcap in, pcap out: border-dp reads frames from a `net_pcap` port and the
//! replies it writes are compared byte for byte with replies built
//! independently (etherparse); every other frame is accounted for by a named
//! counter.

mod common;

use std::time::Duration;

use common::*;
use conf::counters::Counter;
use etherparse::{ArpHardwareId, ArpOperation, ArpPacket, EtherType, PacketBuilder};

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0x65, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0x65, 0, 0x99];
const PORT_V4: [u8; 4] = [10, 65, 0, 1];
const VIP_V4: [u8; 4] = [10, 65, 0, 100];
const PEER_V4: [u8; 4] = [10, 65, 0, 2];
const PORT_V6: [u8; 16] = [0xfd, 0, 0, 0x65, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const PEER_V6: [u8; 16] = [0xfd, 0, 0, 0x65, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn config(dir: &TempDir) -> String {
    format!(
        r#"
instance = "e2epcap"
[dataplane]
main_lcore = 0
worker_lcores = [1]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 4096
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_pcap0,rx_pcap={},tx_pcap={}"
addresses = ["10.65.0.1/24", "fd00:65::1/64"]
host_interface = "kpc-ext"
mac = "02:00:00:65:00:01"
local_addresses = ["10.65.0.1"]

[mgmt]
listen = "unix:///run/border/e2epcap.sock"

[[vip]]
name = "web"
address = "10.65.0.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "10.65.0.11"
port = 8080
"#,
        dir.path("in.pcap").display(),
        dir.path("out.pcap").display()
    )
}

fn arp(
    op: ArpOperation,
    sha: [u8; 6],
    spa: [u8; 4],
    tha: [u8; 6],
    tpa: [u8; 4],
    dst: [u8; 6],
) -> Vec<u8> {
    let pkt = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        op,
        &sha,
        &spa,
        &tha,
        &tpa,
    )
    .unwrap();
    let b = PacketBuilder::ethernet2(sha, dst).arp(pkt);
    let mut v = Vec::new();
    b.write(&mut v).unwrap();
    v
}

fn echo_v4(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
    reply: bool,
) -> Vec<u8> {
    let ip = PacketBuilder::ethernet2(src_mac, dst_mac).ipv4(src, dst, ttl);
    let mut v = Vec::new();
    if reply {
        ip.icmpv4_echo_reply(7, 1)
            .write(&mut v, b"border-pcap")
            .unwrap();
    } else {
        ip.icmpv4_echo_request(7, 1)
            .write(&mut v, b"border-pcap")
            .unwrap();
    }
    v
}

fn echo_v6(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 16],
    dst: [u8; 16],
    hop: u8,
    reply: bool,
) -> Vec<u8> {
    let ip = PacketBuilder::ethernet2(src_mac, dst_mac).ipv6(src, dst, hop);
    let mut v = Vec::new();
    if reply {
        ip.icmpv6_echo_reply(9, 2)
            .write(&mut v, b"border-pcap6")
            .unwrap();
    } else {
        ip.icmpv6_echo_request(9, 2)
            .write(&mut v, b"border-pcap6")
            .unwrap();
    }
    v
}

fn neighbor_solicitation() -> Vec<u8> {
    let snm = [
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0, 0, 0x01,
    ];
    let mut body = PORT_V6.to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&PEER_MAC);
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, [0x33, 0x33, 0xff, 0, 0, 0x01])
        .ipv6(PEER_V6, snm, 255)
        .icmpv6_raw(135, 0, [0; 4])
        .write(&mut v, &body)
        .unwrap();
    v
}

fn neighbor_advertisement() -> Vec<u8> {
    let mut body = PORT_V6.to_vec();
    body.extend_from_slice(&[2, 1]);
    body.extend_from_slice(&PORT_MAC);
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PORT_MAC, PEER_MAC)
        .ipv6(PORT_V6, PEER_V6, 255)
        .icmpv6_raw(136, 0, [0x60, 0, 0, 0])
        .write(&mut v, &body)
        .unwrap();
    v
}

fn tcp_syn(dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, PORT_MAC)
        .ipv4(PEER_V4, dst, 64)
        .tcp(40000, dport, 1000, 64240)
        .syn()
        .write(&mut v, &[])
        .unwrap();
    v
}

#[test]
fn pcap_in_pcap_out_byte_for_byte() {
    let lb = Netns::new("pc-lb");
    let dir = TempDir::new("pcap");

    let mut bad_ihl = echo_v4(PEER_MAC, PORT_MAC, PEER_V4, PORT_V4, 64, false);
    bad_ihl[14] = 0x43;
    let mut lldp = vec![0u8; 60];
    lldp[..6].copy_from_slice(&PORT_MAC);
    lldp[6..12].copy_from_slice(&PEER_MAC);
    lldp[12..14].copy_from_slice(&[0x88, 0xcc]);

    let input = vec![
        arp(
            ArpOperation::REQUEST,
            PEER_MAC,
            PEER_V4,
            [0; 6],
            PORT_V4,
            [0xff; 6],
        ),
        arp(
            ArpOperation::REQUEST,
            PEER_MAC,
            PEER_V4,
            [0; 6],
            [10, 65, 0, 50],
            [0xff; 6],
        ),
        echo_v4(PEER_MAC, PORT_MAC, PEER_V4, PORT_V4, 61, false),
        echo_v4(PEER_MAC, PORT_MAC, PEER_V4, VIP_V4, 61, false),
        vec![0xaa; 10],
        bad_ihl,
        echo_v4(
            PEER_MAC,
            [0x02, 0, 0, 0, 0, 0x42],
            PEER_V4,
            PORT_V4,
            64,
            false,
        ),
        lldp,
        neighbor_solicitation(),
        echo_v6(PEER_MAC, PORT_MAC, PEER_V6, PORT_V6, 60, false),
        tcp_syn(VIP_V4, 443),
        tcp_syn(PORT_V4, 22),
    ];
    write_pcap(&dir.path("in.pcap"), &input);

    let mut dp = BorderDp::start(&lb, &dir, "e2epcap", &config(&dir));
    wait_until("all frames received", Duration::from_secs(10), || {
        dp.counter(Counter::RxPackets) == input.len() as u64
    });
    let state = dp.state();
    let nonzero: Vec<_> = state
        .totals()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .collect();
    eprintln!("counters: {nonzero:?}");
    let c = |k| state.total(k);
    assert_eq!(c(Counter::ArpReplies), 1);
    assert_eq!(c(Counter::DropArpNotOurs), 1);
    assert_eq!(c(Counter::IcmpEchoReplies), 2);
    assert_eq!(c(Counter::DropTruncatedEthernet), 1);
    assert_eq!(c(Counter::DropIpv4BadIhl), 1);
    assert_eq!(c(Counter::DropMalformed), 2);
    assert_eq!(c(Counter::DropNotOurMac), 1);
    assert_eq!(c(Counter::DropUnknownEthertype), 1);
    assert_eq!(c(Counter::NdpAdvertisements), 1);
    assert_eq!(c(Counter::Icmpv6EchoReplies), 1);
    assert_eq!(c(Counter::DropVipUnhandled), 1);
    assert_eq!(c(Counter::ToHost), 1);
    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());

    let expected = vec![
        arp(
            ArpOperation::REPLY,
            PORT_MAC,
            PORT_V4,
            PEER_MAC,
            PEER_V4,
            PEER_MAC,
        ),
        echo_v4(PORT_MAC, PEER_MAC, PORT_V4, PEER_V4, 64, true),
        echo_v4(PORT_MAC, PEER_MAC, VIP_V4, PEER_V4, 64, true),
        neighbor_advertisement(),
        echo_v6(PORT_MAC, PEER_MAC, PORT_V6, PEER_V6, 64, true),
    ];
    // The kernel twin may emit its own multicast/broadcast frames (MLD,
    // router solicitations, ARP requests); the dataplane's replies are unicast.
    let out: Vec<Vec<u8>> = read_pcap(&dir.path("out.pcap"))
        .into_iter()
        .filter(|f| f[0] & 1 == 0)
        .collect();
    assert_eq!(out.len(), expected.len(), "replies: {out:02x?}");
    for (i, (got, want)) in out.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "reply {i} differs");
    }
}
