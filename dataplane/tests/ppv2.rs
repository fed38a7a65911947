//! PROXY protocol v2 insertion on byte fixtures: headers decoded by the
//! independent `ppp` crate (and a bitwise CRC32c written here), frames
//! checked by etherparse (IPv4 header checksum, TCP checksum over the
//! pseudo-header), and whole connections run through one worker over
//! in-memory ports: handshake with MSS clamp, first segment with the header,
//! ACK/SACK translation, retransmitted first segments, payload splits, the
//! authority from a TLS ClientHello, send_on_connect with its retransmission
//! timer, and bad input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use conf::counters::Counter;
use conf::state::FlowStats;
use conf::Config;
use dataplane::conntrack::{FlowKey, State, Timeouts};
use dataplane::io::MemPorts;
use dataplane::lb::Lb;
use dataplane::neigh::NeighborSync;
use dataplane::pipeline::Pipeline;
use dataplane::port::ports_from_config;
use dataplane::ppv2::header::{Header, SIGNATURE};
use dataplane::standalone::adopted_from_config;
use dataplane::worker::{Clock, Handoff, NoTables, Poll, Worker};
use etherparse::{
    IpNumber, NetSlice, PacketBuilder, SlicedPacket, TcpHeader, TcpOptionElement, TcpSlice,
};

const EXT: usize = 0;
const INT: usize = 1;
const EXT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];
const INT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x01];
const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xc1, 0x01];
const BACKEND_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xb4, 0x01];

const CLIENT4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 50);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x50);
const LOCAL4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 1);
const LOCAL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 1);

const ISN: u32 = 0xFFFF_FF00; // the client's ISN: sequence numbers wrap during the test
const BISN: u32 = 7_000_000;
const ISN2: u32 = 1000;

const CONFIG: &str = r#"
instance = "pptest"
[dataplane]
main_lcore = 0
worker_lcores = [1]
conntrack_per_worker = 1024
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_null0"
addresses = ["10.1.0.1/24", "fd00:1::1/64"]

[[port]]
name = "int"
devargs = "net_null1"
addresses = ["10.2.0.1/24", "fd00:2::1/64"]
local_addresses = ["10.2.0.1", "fd00:2::1"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix:///run/border/pptest.sock"

[[vip]]
name = "pp4"
address = "10.1.0.100"
port = 80
mode = "fullnat"
proxy_protocol = "v2"
proxy_protocol_tlvs = ["unique_id", "crc32c", "authority"]
maglev_table_size = 1021
[[vip.backend]]
address = "10.2.0.11"
port = 8080

[[vip]]
name = "pp6"
address = "fd00:1::100"
port = 80
mode = "fullnat"
proxy_protocol = "v2"
proxy_protocol_tlvs = ["unique_id", "crc32c"]
maglev_table_size = 1021
[[vip.backend]]
address = "fd00:2::11"
port = 8080

[[vip]]
name = "ppd"
address = "10.1.0.101"
port = 80
mode = "dnat"
proxy_protocol = "v2"
maglev_table_size = 1021
[[vip.backend]]
address = "10.2.0.21"
port = 8080

[[vip]]
name = "pps"
address = "10.1.0.102"
port = 25
mode = "fullnat"
proxy_protocol = "v2"
proxy_protocol_send_on_connect = true
proxy_protocol_tlvs = ["unique_id", "crc32c"]
maglev_table_size = 1021
[[vip.backend]]
address = "10.2.0.12"
port = 2525

[[vip]]
name = "plain"
address = "10.1.0.104"
port = 80
mode = "fullnat"
maglev_table_size = 1021
[[vip.backend]]
address = "10.2.0.13"
port = 8080
"#;

#[derive(Clone, Default)]
struct TestClock(Arc<AtomicU64>);

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

struct Node {
    w: Worker<MemPorts, TestClock, NoTables>,
    clock: TestClock,
}

fn node() -> Node {
    node_with(None)
}

/// [`node`], writing connection records into `records` when given.
fn node_with(records: Option<&'static conf::records::RecordsRegion>) -> Node {
    let cfg = Config::from_toml_str(CONFIG, "pptest.toml").expect("config");
    let mut lb = Lb::new(
        0,
        1,
        1024,
        Timeouts::default(),
        NeighborSync::new(1),
        FlowStats::detached(64),
        FlowStats::detached(2048),
    );
    for v in &cfg.vips {
        for b in &v.backends {
            lb.seed_neighbor(b.address, BACKEND_MAC);
        }
    }
    lb.adopt(adopted_from_config(&cfg, 1).expect("tables"));
    if let Some(r) = records {
        lb.enable_records(r.writer(0).expect("one ring"), false);
    }
    let pipeline = Pipeline::new(ports_from_config(&cfg, &[EXT_MAC, INT_MAC], false), lb);
    let clock = TestClock::default();
    let w = Worker::new(
        MemPorts::new(2),
        pipeline,
        Poll::Busy,
        clock.clone(),
        NoTables,
        Handoff::new(1),
    );
    Node { w, clock }
}

impl Node {
    fn exchange(&mut self, port: usize, frame: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        self.w.io.inject(port, frame);
        self.w.poll_once();
        (self.w.io.take_tx(EXT), self.w.io.take_tx(INT))
    }

    /// Sends `s` and returns every frame that left on the other side.
    fn send(&mut self, s: &Seg) -> Vec<Seen> {
        let from_client = s.smac == CLIENT_MAC;
        let (ext, int) = self.exchange(if from_client { EXT } else { INT }, &s.build());
        let (mine, other) = if from_client { (int, ext) } else { (ext, int) };
        assert!(other.is_empty(), "frames went back: {other:02x?}");
        mine.iter().map(|f| decode(f)).collect()
    }

    fn one(&mut self, s: &Seg) -> Seen {
        let v = self.send(s);
        assert_eq!(v.len(), 1, "expected one frame, got {v:#?}");
        v.into_iter().next().unwrap()
    }

    fn none(&mut self, s: &Seg) {
        let v = self.send(s);
        assert!(v.is_empty(), "expected nothing, got {v:#?}");
    }

    fn counter(&self, c: Counter) -> u64 {
        self.w.pipeline.counters().get(c)
    }

    fn tick(&mut self, ms: u64) -> Vec<Seen> {
        self.clock.0.fetch_add(ms, Ordering::Relaxed);
        self.w.poll_once();
        let ext = self.w.io.take_tx(EXT);
        assert!(ext.is_empty());
        self.w.io.take_tx(INT).iter().map(|f| decode(f)).collect()
    }

    /// The connection record of the client's flow to `vip`.
    fn flow(&self, client: SocketAddr, vip: SocketAddr) -> dataplane::lb::FlowRec {
        let key = match (client.ip(), vip.ip()) {
            (IpAddr::V4(c), IpAddr::V4(v)) => {
                FlowKey::v4(c.octets(), v.octets(), client.port(), vip.port(), 6)
            }
            (IpAddr::V6(c), IpAddr::V6(v)) => {
                FlowKey::v6(c.octets(), v.octets(), client.port(), vip.port(), 6)
            }
            _ => unreachable!(),
        };
        let ct = self.w.pipeline.lb().conntrack();
        let (id, _) = ct.lookup(&key, 0).expect("flow tracked");
        ct.get(id).value
    }

    fn state(&self, client: SocketAddr, vip: SocketAddr) -> State {
        let key = match (client.ip(), vip.ip()) {
            (IpAddr::V4(c), IpAddr::V4(v)) => {
                FlowKey::v4(c.octets(), v.octets(), client.port(), vip.port(), 6)
            }
            _ => unreachable!(),
        };
        let ct = self.w.pipeline.lb().conntrack();
        let (id, _) = ct.lookup(&key, 0).expect("flow tracked");
        ct.get(id).state()
    }
}

mod f {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// A TCP segment to build.
#[derive(Clone, Debug)]
struct Seg {
    smac: [u8; 6],
    dmac: [u8; 6],
    src: SocketAddr,
    dst: SocketAddr,
    flags: u8,
    seq: u32,
    ack: u32,
    mss: Option<u16>,
    sack: Vec<(u32, u32)>,
    /// URG with this urgent pointer.
    urgent: Option<u16>,
    payload: Vec<u8>,
}

impl Seg {
    fn client(src: SocketAddr, dst: SocketAddr, flags: u8, seq: u32, ack: u32) -> Seg {
        Seg {
            smac: CLIENT_MAC,
            dmac: EXT_MAC,
            src,
            dst,
            flags,
            seq,
            ack,
            mss: None,
            sack: Vec::new(),
            urgent: None,
            payload: Vec::new(),
        }
    }

    fn backend(src: SocketAddr, dst: SocketAddr, flags: u8, seq: u32, ack: u32) -> Seg {
        Seg {
            smac: BACKEND_MAC,
            dmac: INT_MAC,
            ..Seg::client(src, dst, flags, seq, ack)
        }
    }

    fn data(mut self, p: &[u8]) -> Seg {
        self.payload = p.to_vec();
        self
    }

    fn mss(mut self, m: u16) -> Seg {
        self.mss = Some(m);
        self
    }

    fn urgent(mut self, pointer: u16) -> Seg {
        self.urgent = Some(pointer);
        self
    }

    fn sack(mut self, blocks: &[(u32, u32)]) -> Seg {
        self.sack = blocks.to_vec();
        self
    }

    fn build(&self) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(self.smac, self.dmac);
        let b = match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), 64),
            (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), 64),
            _ => panic!("mixed families"),
        };
        let mut h = TcpHeader::new(self.src.port(), self.dst.port(), self.seq, 64240);
        h.fin = self.flags & f::FIN != 0;
        h.syn = self.flags & f::SYN != 0;
        h.rst = self.flags & f::RST != 0;
        h.psh = self.flags & f::PSH != 0;
        h.ack = self.flags & f::ACK != 0;
        h.acknowledgment_number = self.ack;
        if let Some(p) = self.urgent {
            h.urg = true;
            h.urgent_pointer = p;
        }
        let mut opts = Vec::new();
        if let Some(m) = self.mss {
            opts.push(TcpOptionElement::MaximumSegmentSize(m));
            opts.push(TcpOptionElement::SelectiveAcknowledgementPermitted);
        }
        if let Some((&first, rest)) = self.sack.split_first() {
            let mut more = [None; 3];
            for (i, b) in rest.iter().take(3).enumerate() {
                more[i] = Some(*b);
            }
            // A NOP first puts the edges at odd offsets.
            opts.push(TcpOptionElement::Noop);
            opts.push(TcpOptionElement::SelectiveAcknowledgement(first, more));
        }
        h.set_options(&opts).unwrap();
        let mut out = Vec::new();
        b.tcp_header(h).write(&mut out, &self.payload).unwrap();
        out
    }
}

/// A frame that left the appliance, decoded, every checksum verified.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    smac: [u8; 6],
    dmac: [u8; 6],
    src: SocketAddr,
    dst: SocketAddr,
    flags: u8,
    seq: u32,
    ack: u32,
    mss: Option<u16>,
    sack: Vec<(u32, u32)>,
    urgent: Option<u16>,
    payload: Vec<u8>,
}

fn decode(frame: &[u8]) -> Seen {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
    let (smac, dmac) = match &p.link {
        Some(etherparse::LinkSlice::Ethernet2(e)) => (e.source(), e.destination()),
        other => panic!("not Ethernet II: {other:?}"),
    };
    let (src, dst, l4): (IpAddr, IpAddr, &[u8]) = match &p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            assert_eq!(
                h.header_checksum(),
                h.to_header().calc_header_checksum(),
                "IPv4 header checksum"
            );
            assert_eq!(h.protocol(), IpNumber::TCP);
            assert_eq!(usize::from(h.total_len()) + 14, frame.len(), "IPv4 length");
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                ip.payload().payload,
            )
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header();
            assert_eq!(
                usize::from(h.payload_length()) + 54,
                frame.len(),
                "IPv6 length"
            );
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                ip.payload().payload,
            )
        }
        other => panic!("not IP: {other:?}"),
    };
    let t = TcpSlice::from_slice(l4).expect("TCP");
    let want = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => t.calc_checksum_ipv4(s.octets(), d.octets()),
        (IpAddr::V6(s), IpAddr::V6(d)) => t.calc_checksum_ipv6(s.octets(), d.octets()),
        _ => unreachable!(),
    }
    .unwrap();
    assert_eq!(t.checksum(), want, "TCP checksum");
    let mut mss = None;
    let mut sack = Vec::new();
    for o in t.options_iterator() {
        match o.expect("options") {
            TcpOptionElement::MaximumSegmentSize(m) => mss = Some(m),
            TcpOptionElement::SelectiveAcknowledgement(a, more) => {
                sack.push(a);
                sack.extend(more.iter().flatten());
            }
            _ => {}
        }
    }
    let flags = [
        (t.fin(), f::FIN),
        (t.syn(), f::SYN),
        (t.rst(), f::RST),
        (t.psh(), f::PSH),
        (t.ack(), f::ACK),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |a, (_, b)| a | b);
    Seen {
        smac,
        dmac,
        src: SocketAddr::new(src, t.source_port()),
        dst: SocketAddr::new(dst, t.destination_port()),
        flags,
        seq: t.sequence_number(),
        ack: t.acknowledgment_number(),
        mss,
        sack,
        urgent: t.urg().then_some(t.urgent_pointer()),
        payload: t.payload().to_vec(),
    }
}

/// A bitwise CRC32c, independent of the table-driven one under test.
fn crc32c_bitwise(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A header decoded by `ppp`, its CRC32c (if any) verified.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    len: usize,
    src: SocketAddr,
    dst: SocketAddr,
    unique_id: Option<Vec<u8>>,
    authority: Option<Vec<u8>>,
    crc: bool,
    noop: bool,
}

fn decode_pp(bytes: &[u8]) -> Decoded {
    use ppp::v2;
    let h = v2::Header::try_from(bytes).expect("ppp decodes the header");
    assert_eq!(h.command, v2::Command::Proxy);
    assert_eq!(h.protocol, v2::Protocol::Stream);
    let (src, dst) = match h.addresses {
        v2::Addresses::IPv4(a) => (
            SocketAddr::new(a.source_address.into(), a.source_port),
            SocketAddr::new(a.destination_address.into(), a.destination_port),
        ),
        v2::Addresses::IPv6(a) => (
            SocketAddr::new(a.source_address.into(), a.source_port),
            SocketAddr::new(a.destination_address.into(), a.destination_port),
        ),
        other => panic!("addresses {other:?}"),
    };
    let len = h.len();
    let mut d = Decoded {
        len,
        src,
        dst,
        unique_id: None,
        authority: None,
        crc: false,
        noop: false,
    };
    let raw = &bytes[..len];
    let mut at = 16 + h.address_bytes().len();
    for t in h.tlvs() {
        let t = t.expect("TLV");
        match t.kind {
            0x05 => d.unique_id = Some(t.value.to_vec()),
            0x02 => d.authority = Some(t.value.to_vec()),
            0x04 => d.noop = true,
            0x03 => {
                assert_eq!(t.value.len(), 4);
                let mut zeroed = raw.to_vec();
                zeroed[at + 3..at + 7].fill(0);
                let want = crc32c_bitwise(&zeroed);
                assert_eq!(
                    u32::from_be_bytes(t.value[..4].try_into().unwrap()),
                    want,
                    "CRC32c (network byte order, computed with the field zeroed)"
                );
                d.crc = true;
            }
            k => panic!("unexpected TLV {k:#x}"),
        }
        at += 3 + t.value.len();
    }
    assert_eq!(at, len, "TLVs fill the header exactly");
    d
}

// ---------------------------------------------------------------------------
// The encoder alone.

#[test]
fn headers_decode_with_ppp_v4_and_v6_with_every_tlv() {
    let mut out = [0u8; 600];
    for (src, dst) in [
        (
            SocketAddr::from((CLIENT4, 40001)),
            SocketAddr::from(([10, 1, 0, 100], 80)),
        ),
        (
            SocketAddr::from((CLIENT6, 40001)),
            SocketAddr::from((Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x100), 443)),
        ),
    ] {
        for (uid, auth, crc) in [
            (true, true, true),
            (false, false, false),
            (true, false, true),
            (false, true, false),
        ] {
            let h = Header {
                src: (src.ip(), src.port()),
                dst: (dst.ip(), dst.port()),
                unique_id: uid.then_some(0x0001_0000_0000_002a),
                authority: auth.then_some(&b"www.example.com"[..]),
                crc32c: crc,
                max_len: 400,
            };
            let w = h.write(&mut out).unwrap();
            assert_eq!(w.dropped, 0);
            assert_eq!(&out[..12], &SIGNATURE);
            let d = decode_pp(&out[..w.len]);
            assert_eq!((d.src, d.dst, d.len), (src, dst, w.len));
            assert_eq!(d.unique_id, uid.then(|| b"000100000000002a".to_vec()));
            assert_eq!(d.authority, auth.then(|| b"www.example.com".to_vec()));
            assert_eq!(d.crc, crc);
            // Re-sent at the same length without the authority: padded.
            if auth {
                let bare = Header {
                    authority: None,
                    ..h
                };
                let w2 = bare.write_exact(&mut out, w.len).unwrap();
                assert_eq!(w2.len, w.len);
                let d2 = decode_pp(&out[..w2.len]);
                assert!(d2.noop && d2.authority.is_none());
            }
        }
    }
}

#[test]
fn max_len_bounds_the_header_and_counts_what_it_left_out() {
    let mut out = [0u8; 600];
    let long = [b'a'; 80];
    let h = Header {
        src: (CLIENT4.into(), 1),
        dst: (Ipv4Addr::new(10, 1, 0, 100).into(), 80),
        unique_id: Some(1),
        authority: Some(&long),
        crc32c: true,
        max_len: 107,
    };
    let w = h.write(&mut out).unwrap();
    assert_eq!((w.len, w.dropped), (54, 1));
    let d = decode_pp(&out[..w.len]);
    assert!(d.crc && d.unique_id.is_some() && d.authority.is_none());
    // IPv6 under nginx's 107 bytes: the CRC still fits, a 30-byte name not.
    let h6 = Header {
        src: (CLIENT6.into(), 1),
        dst: (CLIENT6.into(), 80),
        authority: Some(&long[..30]),
        ..h
    };
    let w = h6.write(&mut out).unwrap();
    assert!(w.len <= 107);
    assert_eq!((w.len, w.dropped), (78, 1));
}

// ---------------------------------------------------------------------------
// Whole connections.

fn vip4() -> SocketAddr {
    SocketAddr::from(([10, 1, 0, 100], 80))
}

/// A TLS ClientHello record asking for `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let mut sni = vec![0, 0];
    let list = name.len() + 3;
    sni.extend_from_slice(&((list + 2) as u16).to_be_bytes());
    sni.extend_from_slice(&(list as u16).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name.as_bytes());
    let mut exts = vec![0x00, 0x17, 0, 0]; // extended_master_secret
    exts.extend(sni);
    let mut ch = vec![3, 3];
    ch.extend_from_slice(&[7; 32]);
    ch.push(32);
    ch.extend_from_slice(&[9; 32]);
    ch.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
    ch.extend_from_slice(&[1, 0]);
    ch.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    ch.extend_from_slice(&exts);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&(ch.len() as u16).to_be_bytes());
    hs.extend_from_slice(&ch);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A connection through the appliance: the client's and the backend's view.
struct Conn {
    client: SocketAddr,
    vip: SocketAddr,
    /// Where the backend sees the connection come from (local address:port).
    from: SocketAddr,
    backend: SocketAddr,
}

impl Conn {
    fn c(&self, flags: u8, seq: u32, ack: u32) -> Seg {
        Seg::client(self.client, self.vip, flags, seq, ack)
    }
    fn b(&self, flags: u8, seq: u32, ack: u32) -> Seg {
        Seg::backend(self.backend, self.from, flags, seq, ack)
    }
}

/// SYN, SYN-ACK (backend MSS `bmss`), ACK. Returns the connection and the
/// MSS the client was told.
fn handshake(
    n: &mut Node,
    client: SocketAddr,
    vip: SocketAddr,
    bmss: Option<u16>,
) -> (Conn, Option<u16>) {
    let syn = n.one(&Seg::client(client, vip, f::SYN, ISN, 0).mss(1460));
    assert_eq!(syn.seq, ISN, "the SYN is not shifted");
    assert_eq!(syn.mss, Some(1460), "the client's MSS is left alone");
    let conn = Conn {
        client,
        vip,
        from: syn.src,
        backend: syn.dst,
    };
    let mut sa = conn.b(f::SYN | f::ACK, BISN, ISN.wrapping_add(1));
    sa.mss = bmss;
    let sa = n.one(&sa);
    assert_eq!((sa.src, sa.dst), (vip, client));
    assert_eq!(sa.ack, ISN.wrapping_add(1));
    let ack = n.send(&conn.c(f::ACK, ISN.wrapping_add(1), BISN + 1));
    let clamped = sa.mss;
    if vip.port() != 25 {
        assert_eq!(ack.len(), 1);
        assert_eq!(
            ack[0].seq,
            ISN.wrapping_add(1),
            "a bare ACK before any data is not shifted"
        );
        assert!(ack[0].payload.is_empty());
    }
    (conn, clamped)
}

#[test]
fn first_segment_carries_the_header_and_the_stream_is_translated() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40000));
    let (conn, mss) = handshake(&mut n, client, vip4(), Some(1460));
    // Longest header of this VIP: 107 bytes (authority within max_len).
    assert_eq!(mss, Some(1460 - 107));
    assert_eq!(n.counter(Counter::PpMssClamped), 1);
    assert_eq!(conn.from.ip(), IpAddr::from(LOCAL4));

    let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let c1 = ISN.wrapping_add(1);
    let got = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(req));
    assert_eq!(got.seq, c1, "the header starts at the client's first byte");
    let d = decode_pp(&got.payload);
    assert_eq!((d.src, d.dst), (client, vip4()));
    assert!(d.crc && d.authority.is_none());
    let rec = n.flow(client, vip4());
    let mut hex = [0u8; 16];
    dataplane::ppv2::header::write_hex(&mut hex, rec.conn_id);
    assert_eq!(
        d.unique_id.as_deref(),
        Some(&hex[..]),
        "UNIQUE_ID is the connection record's id"
    );
    let l = d.len as u32;
    assert_eq!(
        &got.payload[d.len..],
        req,
        "the payload follows the header intact"
    );
    assert_eq!(n.counter(Counter::PpHeadersInserted), 1);

    // The backend acknowledges header and data, SACKs something further on.
    let end = c1.wrapping_add(l + req.len() as u32);
    let back = n.one(&conn.b(f::ACK, BISN + 1, end).sack(&[
        (end.wrapping_add(100), end.wrapping_add(200)),
        (c1.wrapping_add(3), end),
    ]));
    assert_eq!(back.ack, c1.wrapping_add(req.len() as u32));
    assert_eq!(
        back.sack,
        vec![
            (end.wrapping_add(100 - l), end.wrapping_add(200 - l)),
            (c1, end.wrapping_sub(l)),
        ],
        "SACK edges move back over the header; edges inside it map to its start"
    );
    assert!(rec.proxy.committed());
    assert!(n.flow(client, vip4()).proxy.acked());

    // Later client data is shifted; the client's ACK field is not touched.
    let c2 = c1.wrapping_add(req.len() as u32);
    let got = n.one(&conn.c(f::ACK, c2, BISN + 50).data(b"more"));
    assert_eq!(
        (got.seq, got.ack, &got.payload[..]),
        (c2.wrapping_add(l), BISN + 50, &b"more"[..])
    );
    // A late duplicate of the first segment: acknowledged already, no header.
    let dup = n.one(&conn.c(f::ACK, c1, BISN + 1).data(req));
    assert_eq!((dup.seq, &dup.payload[..]), (c1.wrapping_add(l), &req[..]));
    // FIN both ways.
    let fin = n.one(&conn.c(f::ACK | f::FIN, c2 + 4, BISN + 50));
    assert_eq!(fin.seq, (c2 + 4).wrapping_add(l));
    let bfin = n.one(&conn.b(f::ACK | f::FIN, BISN + 50, (c2 + 5).wrapping_add(l)));
    assert_eq!(bfin.ack, c2 + 5);
    assert_eq!(n.counter(Counter::PpHeadersInserted), 1);
    assert_eq!(n.counter(Counter::PpHeadersRetransmitted), 0);
    assert_eq!(n.counter(Counter::DropPpBadSegment), 0);
}

/// The record of a PROXY connection says the header went out, under the
/// connection id its `UNIQUE_ID` carried.
#[test]
fn the_connection_record_names_the_header_and_its_unique_id() {
    use conf::records::{EndReason, RecordsRegion, REC_FULL_NAT, REC_PAYLOAD, REC_PROXY_SENT};
    let path = std::env::temp_dir().join(format!("border-pp-records-{}", std::process::id()));
    let region = RecordsRegion::create(&path, 1, 1024, conf::os::files::Access::PRIVATE).unwrap();
    let _ = std::fs::remove_file(&path);
    let region: &'static RecordsRegion = Box::leak(Box::new(region));
    let mut n = node_with(Some(region));
    let client = SocketAddr::from((CLIENT4, 40100));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    let c1 = ISN.wrapping_add(1);
    let got = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(b"hello"));
    let l = decode_pp(&got.payload).len as u32;
    let conn_id = n.flow(client, vip4()).conn_id;
    n.one(&conn.b(f::ACK | f::FIN, BISN + 1, c1.wrapping_add(l + 5)));
    n.one(&conn.c(f::ACK | f::FIN, c1 + 5, BISN + 2));
    // A second connection on the same VIP that never sends a byte: no
    // header went out, and without payload it is only counted.
    let (quiet, _) = handshake(
        &mut n,
        SocketAddr::from((CLIENT4, 40101)),
        vip4(),
        Some(1460),
    );
    n.one(&quiet.c(f::RST, ISN.wrapping_add(1), 0));
    // tcp_closing (10 s) runs out; the sweep passes over the table.
    for _ in 0..40 {
        n.tick(1_000);
    }
    let mut recs = Vec::new();
    region.drain(0, usize::MAX, |r| recs.push(r.unwrap()));
    assert_eq!(recs.len(), 1, "{recs:#?}");
    let r = recs[0];
    assert_eq!(r.flags, REC_FULL_NAT | REC_PAYLOAD | REC_PROXY_SENT);
    assert_eq!(r.conn_id, conn_id);
    assert_eq!((r.client_port, r.vip_port), (40100, 80));
    assert_eq!(r.end, EndReason::Fin);
    assert_eq!(n.counter(Counter::ConnRecordsEmpty), 1);
}

#[test]
fn a_lost_first_segment_gets_the_header_again_exactly_once() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40001));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    let c1 = ISN.wrapping_add(1);
    let hello = client_hello("shop.example.org");
    let first = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(&hello));
    let d = decode_pp(&first.payload);
    assert_eq!(d.authority.as_deref(), Some(&b"shop.example.org"[..]));
    // Lost on the way to the backend. The second segment arrives, is
    // shifted (the backend queues it out of order) and SACKed.
    let l = d.len as u32;
    let c2 = c1.wrapping_add(hello.len() as u32);
    let second = n.one(&conn.c(f::ACK, c2, BISN + 1).data(b"second"));
    assert_eq!(second.seq, c2.wrapping_add(l));
    let dupack = n.one(
        &conn
            .b(f::ACK, BISN + 1, c1)
            .sack(&[(c2.wrapping_add(l), c2.wrapping_add(l + 6))]),
    );
    assert_eq!((dupack.ack, dupack.sack.clone()), (c1, vec![(c2, c2 + 6)]));
    // The client retransmits the first segment: same header, same bytes.
    let again = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(&hello));
    assert_eq!(again, first, "the retransmission is byte-identical");
    assert_eq!(n.counter(Counter::PpHeadersRetransmitted), 1);
    // Even if Linux coalesced it with the next data.
    let mut bigger = hello.clone();
    bigger.extend_from_slice(b"second");
    let again = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(&bigger));
    assert_eq!(again.payload[..d.len], first.payload[..d.len]);
    assert_eq!(&again.payload[d.len..], &bigger[..]);
    // Acknowledged past the header: no header any more.
    let ack = n.one(&conn.b(f::ACK, BISN + 1, c2.wrapping_add(l + 6)));
    assert_eq!(ack.ack, c2 + 6);
    let late = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(&hello));
    assert_eq!(
        (late.seq, late.payload.clone()),
        (c1.wrapping_add(l), hello.clone())
    );
    assert_eq!(n.counter(Counter::PpHeadersInserted), 1);
    assert_eq!(n.counter(Counter::PpHeadersRetransmitted), 2);
}

#[test]
fn a_retransmission_without_the_name_keeps_the_header_length() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40002));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    let c1 = ISN.wrapping_add(1);
    let hello = client_hello("a.example");
    let first = n.one(&conn.c(f::ACK, c1, BISN + 1).data(&hello));
    let d = decode_pp(&first.payload);
    // The retransmission holds only the start of the record: no name.
    let again = n.one(&conn.c(f::ACK, c1, BISN + 1).data(&hello[..20]));
    let d2 = decode_pp(&again.payload);
    assert_eq!(
        d2.len, d.len,
        "same length: the stream's translation stays right"
    );
    assert!(d2.noop && d2.authority.is_none());
    assert_eq!(&again.payload[d2.len..], &hello[..20]);
}

#[test]
fn with_authority_data_ahead_of_the_first_segment_waits() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40003));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    let c1 = ISN.wrapping_add(1);
    // The first segment was lost before the appliance: the header length
    // (which depends on its ClientHello) is not known yet.
    n.none(&conn.c(f::ACK, c1 + 100, BISN + 1).data(b"later"));
    n.none(&conn.c(f::ACK | f::FIN, c1 + 105, BISN + 1));
    assert_eq!(n.counter(Counter::DropPpAheadOfHeader), 2);
    // A bare ACK passes untouched.
    let a = n.one(&conn.c(f::ACK, c1, BISN + 1));
    assert_eq!(a.seq, c1);
    let first = n.one(
        &conn
            .c(f::ACK, c1, BISN + 1)
            .data(&client_hello("x.example")),
    );
    assert!(decode_pp(&first.payload).authority.is_some());
}

#[test]
fn header_plus_payload_beyond_the_backend_mss_splits_the_payload() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40004));
    // No MSS option: the backend takes 536.
    let (conn, mss) = handshake(&mut n, client, vip4(), None);
    assert_eq!(mss, None);
    let c1 = ISN.wrapping_add(1);
    let data: Vec<u8> = (0..536u32).map(|i| (i * 7) as u8).collect();
    let parts = n.send(&conn.c(f::ACK | f::PSH | f::FIN, c1, BISN + 1).data(&data));
    assert_eq!(
        parts.len(),
        2,
        "header + head of the payload, then the rest"
    );
    let d = decode_pp(&parts[0].payload);
    let l = d.len as u32;
    assert!(parts[0].payload.len() <= 536, "the first part fits the MSS");
    assert_eq!(
        parts[0].flags & f::FIN,
        0,
        "the FIN goes with the last part"
    );
    assert_eq!(parts[1].flags & f::FIN, f::FIN);
    assert_eq!(parts[0].seq, c1);
    assert_eq!(
        parts[1].seq,
        c1.wrapping_add(parts[0].payload.len() as u32),
        "the rest follows on"
    );
    let mut stream = parts[0].payload[d.len..].to_vec();
    stream.extend_from_slice(&parts[1].payload);
    assert_eq!(stream, data);
    assert_eq!(parts[1].src, parts[0].src);
    assert_eq!(parts[1].dmac, BACKEND_MAC);
    assert_eq!(n.counter(Counter::PpSegmentsSplit), 1);
    assert_eq!(l as usize, d.len);
}

#[test]
fn the_urgent_pointer_follows_the_urgent_byte() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40014));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    let c1 = ISN.wrapping_add(1);
    let first = n.one(
        &conn
            .c(f::ACK | f::PSH, c1, BISN + 1)
            .data(b"hello!")
            .urgent(5),
    );
    let l = decode_pp(&first.payload).len;
    assert_eq!(first.seq, c1);
    assert_eq!(first.urgent, Some(5 + l as u16), "the header went in front");
    assert_eq!(&first.payload[l + 4..l + 5], b"o");
    let later = n.one(
        &conn
            .c(f::ACK | f::PSH, c1 + 6, BISN + 1)
            .data(b"xyz")
            .urgent(2),
    );
    assert_eq!(later.seq, c1 + 6 + l as u32);
    assert_eq!(
        later.urgent,
        Some(2),
        "relative to a shifted sequence number"
    );

    // Split: the rest of the payload carries the pointer if it still points
    // ahead of it.
    for (urgent, client_port) in [(10u16, 40015u16), (530, 40016)] {
        let client = SocketAddr::from((CLIENT4, client_port));
        let (conn, _) = handshake(&mut n, client, vip4(), None);
        let data = vec![0x11; 536];
        let parts = n.send(&conn.c(f::ACK, c1, BISN + 1).data(&data).urgent(urgent));
        assert_eq!(parts.len(), 2);
        let l = decode_pp(&parts[0].payload).len as u16;
        let keep = parts[0].payload.len() as u16 - l;
        assert_eq!(parts[0].urgent, Some(urgent + l));
        let rest = (urgent > keep).then(|| urgent - keep);
        assert_eq!(parts[1].urgent, rest, "urgent {urgent}, first part {keep}");
    }
}

#[test]
fn without_room_to_grow_the_payload_is_split_too() {
    // Pipeline::process gives the frame no room at all.
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40005));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    let c1 = ISN.wrapping_add(1);
    let data = vec![0x5a; 300];
    let mut frame = conn.c(f::ACK, c1, BISN + 1).data(&data).build();
    let len = frame.len();
    let v = n.w.pipeline.process(EXT, &mut frame, len);
    match v {
        dataplane::verdict::Verdict::Send { port, len } => {
            assert_eq!(port, INT);
            assert_eq!(len, frame.len());
            let s = decode(&frame[..len]);
            let d = decode_pp(&s.payload);
            assert_eq!(s.payload.len(), 300, "header + 300 - L bytes");
            assert_eq!(&s.payload[d.len..], &data[..300 - d.len]);
        }
        other => panic!("{other:?}"),
    }
    // The rest was queued for the worker.
    assert_eq!(n.w.pipeline.lb().proxy_out().emits.len(), 1);
}

#[test]
fn ipv6_and_dnat_flows_carry_the_header() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT6, 40010));
    let vip6 = SocketAddr::from((Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x100), 80));
    let (conn, mss) = handshake(&mut n, client, vip6, Some(1440));
    assert_eq!(mss, Some(1440 - (52 + 19 + 7)));
    assert_eq!(conn.from.ip(), IpAddr::from(LOCAL6));
    let c1 = ISN.wrapping_add(1);
    let got = n.one(&conn.c(f::ACK, c1, BISN + 1).data(b"hello6"));
    let d = decode_pp(&got.payload);
    assert_eq!((d.src, d.dst, d.len), (client, vip6, 78));
    assert_eq!(&got.payload[78..], b"hello6");

    let client = SocketAddr::from((CLIENT4, 40011));
    let vipd = SocketAddr::from(([10, 1, 0, 101], 80));
    let (conn, _) = handshake(&mut n, client, vipd, Some(1460));
    assert_eq!(conn.from, client, "DNAT keeps the client address");
    let got = n.one(&conn.c(f::ACK, c1, BISN + 1).data(b"hi"));
    let d = decode_pp(&got.payload);
    assert_eq!((d.src, d.dst, d.len), (client, vipd, 28 + 19));
    let back = n.one(&conn.b(f::ACK, BISN + 1, c1.wrapping_add(d.len as u32 + 2)));
    assert_eq!(back.ack, c1 + 2);
}

#[test]
fn send_on_connect_puts_the_header_in_the_handshake_ack_and_retransmits_it() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40020));
    let vips = SocketAddr::from(([10, 1, 0, 102], 25));
    let (conn, _) = handshake(&mut n, client, vips, Some(1460));
    assert_eq!(n.counter(Counter::PpHeadersStandalone), 1);
    assert_eq!(n.counter(Counter::PpHeadersInserted), 1);
    // Nothing more until the timer fires.
    assert!(n.tick(100).is_empty());
    let re = n.tick(100);
    assert_eq!(re.len(), 1, "retransmitted after 200 ms");
    let d = decode_pp(&re[0].payload);
    assert_eq!((d.src, d.dst), (client, vips));
    assert_eq!(re[0].payload.len(), d.len, "the header alone");
    let c1 = ISN.wrapping_add(1);
    assert_eq!((re[0].seq, re[0].ack), (c1, BISN + 1));
    assert_eq!(n.counter(Counter::PpHeadersRetransmitted), 1);
    // Backed off: nothing 300 ms later, again at 400.
    assert!(n.tick(300).is_empty());
    assert_eq!(n.tick(100).len(), 1);
    // The banner arrives with the ACK of the header.
    let l = d.len as u32;
    let banner = n.one(
        &conn
            .b(f::ACK | f::PSH, BISN + 1, c1.wrapping_add(l))
            .data(b"220 hi\r\n"),
    );
    assert_eq!(banner.ack, c1);
    assert!(n.tick(5000).is_empty(), "acknowledged: the timer stops");
    assert_eq!(n.w.pipeline.lb().proxy_out().timers.active(), 0);
    // The client's bare ACK and data are shifted now.
    let a = n.one(&conn.c(f::ACK, c1, BISN + 9));
    assert_eq!(a.seq, c1.wrapping_add(l));
    let q = n.one(&conn.c(f::ACK, c1, BISN + 9).data(b"HELO x\r\n"));
    assert_eq!(
        (q.seq, &q.payload[..]),
        (c1.wrapping_add(l), &b"HELO x\r\n"[..])
    );
}

#[test]
fn send_on_connect_timer_stops_when_the_connection_resets() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40021));
    let vips = SocketAddr::from(([10, 1, 0, 102], 25));
    let (conn, _) = handshake(&mut n, client, vips, Some(1460));
    let c1 = ISN.wrapping_add(1);
    let rst = n.one(&conn.c(f::RST | f::ACK, c1, BISN + 1));
    assert_eq!(rst.flags & f::RST, f::RST);
    assert_eq!(n.state(client, vips), State::Closed);
    assert!(n.tick(200).is_empty());
    assert_eq!(n.w.pipeline.lb().proxy_out().timers.active(), 0);
}

#[test]
fn a_client_sending_its_own_proxy_header_cannot_spoof() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40030));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    // A forged v2 header claiming 1.2.3.4, and a v1 line.
    let mut forged = [0u8; 128];
    let w = Header {
        src: (Ipv4Addr::new(1, 2, 3, 4).into(), 1),
        dst: (Ipv4Addr::new(5, 6, 7, 8).into(), 2),
        unique_id: None,
        authority: None,
        crc32c: false,
        max_len: 107,
    }
    .write(&mut forged)
    .unwrap();
    let mut payload = forged[..w.len].to_vec();
    payload.extend_from_slice(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n");
    let c1 = ISN.wrapping_add(1);
    let got = n.one(&conn.c(f::ACK, c1, BISN + 1).data(&payload));
    let d = decode_pp(&got.payload);
    assert_eq!(d.src, client, "the backend reads border's header first");
    assert_eq!(
        &got.payload[d.len..],
        &payload[..],
        "the client's bytes follow as data"
    );
}

#[test]
fn syn_data_duplicate_syns_and_resets_keep_the_table_consistent() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40040));
    // TCP Fast Open style SYN with data: the data is removed.
    let syn = n.one(
        &Seg::client(client, vip4(), f::SYN, ISN, 0)
            .mss(1460)
            .data(b"early"),
    );
    assert!(syn.payload.is_empty());
    assert_eq!(n.counter(Counter::PpSynDataStripped), 1);
    // A duplicate SYN with another ISN: dropped, the first one counts
    // (see a_second_syn_with_another_isn_cannot_move_the_header).
    n.none(&Seg::client(client, vip4(), f::SYN, ISN2, 0).mss(1460));
    assert_eq!(n.counter(Counter::DropPpSynNewIsn), 1);
    let conn = Conn {
        client,
        vip: vip4(),
        from: syn.src,
        backend: syn.dst,
    };
    n.one(&conn.b(f::SYN | f::ACK, BISN, ISN + 1).mss(1460));
    let got = n.one(&conn.c(f::ACK, ISN + 1, BISN + 1).data(b"x"));
    assert_eq!(got.seq, ISN + 1);
    assert!(decode_pp(&got.payload).src == client);
    // Out-of-window garbage both ways: forwarded or not, never a panic.
    for seq in [0u32, 1, 0x7FFF_FFFF, 0x8000_0000, ISN, ISN2, u32::MAX] {
        let _ = n.send(&conn.c(f::ACK, seq, seq).data(b"zz"));
        let _ = n.send(&conn.c(f::ACK, seq, seq));
        let _ = n.send(&conn.b(f::ACK, seq, seq).sack(&[(seq, seq.wrapping_add(1))]));
    }
    // A reset in the middle.
    let _ = n.send(&conn.b(f::RST, BISN + 1, 0));
    assert_eq!(n.state(client, vip4()), State::Closed);
    let _ = n.send(&conn.c(f::ACK, ISN + 1, BISN + 1).data(b"x"));
    // A new SYN on the closed tuple starts afresh with a new id.
    let old = n.flow(client, vip4()).conn_id;
    n.one(&Seg::client(client, vip4(), f::SYN, 5, 0).mss(1460));
    let rec = n.flow(client, vip4());
    assert_ne!(rec.conn_id, old);
    assert_eq!(rec.proxy.client_isn, 5);
    assert!(!rec.proxy.sent());
}

/// The client's forged header: a PROXY v1 line claiming 6.6.6.6, then a
/// request.
const FORGED: &[u8] = b"PROXY TCP4 6.6.6.6 10.1.0.101 1234 80\r\nGET / HTTP/1.0\r\n\r\n";

/// Sends a client frame; returns what left towards the client and the backend.
fn exchange_client(n: &mut Node, s: &Seg) -> (Vec<Seen>, Vec<Seen>) {
    let (ext, int) = n.exchange(EXT, &s.build());
    (
        ext.iter().map(|f| decode(f)).collect(),
        int.iter().map(|f| decode(f)).collect(),
    )
}

#[test]
fn a_second_syn_with_another_isn_cannot_move_the_header() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40070));
    let vipd = SocketAddr::from(([10, 1, 0, 101], 80));
    let (conn, _) = handshake(&mut n, client, vipd, Some(1460));
    // Before any data, a bare SYN with another ISN (one the first data
    // byte would fall before): dropped, the flow keeps the first ISN.
    n.none(&Seg::client(client, vipd, f::SYN, ISN.wrapping_add(100_000), 0).mss(1460));
    assert_eq!(n.counter(Counter::DropPpSynNewIsn), 1);
    assert_eq!(n.flow(client, vipd).proxy.client_isn, ISN);
    // A retransmission of the first SYN still passes.
    let again = n.one(&Seg::client(client, vipd, f::SYN, ISN, 0).mss(1460));
    assert_eq!(again.seq, ISN);
    // Data at the first ISN carrying a forged header: ours goes first.
    let c1 = ISN.wrapping_add(1);
    let got = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(FORGED));
    assert_eq!(got.seq, c1);
    let d = decode_pp(&got.payload);
    assert_eq!((d.src, d.dst), (client, vipd));
    assert_eq!(&got.payload[d.len..], FORGED);
}

#[test]
fn data_before_the_first_byte_cannot_cover_the_header_while_it_is_unacknowledged() {
    let mut n = node();
    for (port, vip) in [
        (40080, SocketAddr::from(([10, 1, 0, 101], 80))),
        (40081, vip4()),
    ] {
        let client = SocketAddr::from((CLIENT4, port));
        let (conn, _) = handshake(&mut n, client, vip, Some(1460));
        let c1 = ISN.wrapping_add(1);
        // Our first segment leaves with the header (and is lost on the
        // way to the backend).
        let first = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(b"G"));
        let d = decode_pp(&first.payload);
        assert_eq!(d.src, client);
        // A "retransmission" starting one byte early, at the SYN's sequence
        // number: unshifted, the backend would trim that byte and read the
        // forged header at the header's place.
        let mut early = b"x".to_vec();
        early.extend_from_slice(FORGED);
        let before = n.counter(Counter::DropPpBeforeHeader);
        n.none(&conn.c(f::ACK | f::PSH, ISN, BISN + 1).data(&early));
        // Far before (sequence space wraps): the same.
        n.none(
            &conn
                .c(f::ACK, c1.wrapping_sub(0x7000_0000), BISN + 1)
                .data(FORGED),
        );
        assert_eq!(n.counter(Counter::DropPpBeforeHeader), before + 2);
        // The real retransmission at the first byte carries our header again.
        let again = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(FORGED));
        let d2 = decode_pp(&again.payload);
        assert_eq!((d2.src, d2.len), (client, d.len));
        assert_eq!(&again.payload[d2.len..], FORGED);
        // Data-less segments before the first byte still pass (no bytes).
        let ack = n.one(&conn.c(f::ACK, ISN, BISN + 1));
        assert!(ack.payload.is_empty());
    }
}

#[test]
fn a_flow_picked_up_mid_stream_on_a_proxy_vip_is_reset_not_forwarded() {
    let mut n = node();
    for (port, vip) in [
        (40060, SocketAddr::from(([10, 1, 0, 101], 80))),
        (40061, vip4()),
    ] {
        let client = SocketAddr::from((CLIENT4, port));
        // No SYN seen (appliance restarted, ECMP moved the flow): nothing
        // reaches the backend; the client gets a RST from the VIP in its
        // own sequence space.
        let (back, out) = exchange_client(
            &mut n,
            &Seg::client(client, vip, f::ACK, 5000, 9000).data(FORGED),
        );
        assert!(out.is_empty(), "forwarded: {out:#?}");
        assert_eq!(back.len(), 1, "{back:#?}");
        let rst = &back[0];
        assert_eq!((rst.src, rst.dst), (vip, client));
        assert_eq!(rst.flags & f::RST, f::RST);
        assert_eq!(rst.seq, 9000);
        // A RST is not answered; a FIN is.
        let (back, out) = exchange_client(&mut n, &Seg::client(client, vip, f::RST, 5000, 0));
        assert!(back.is_empty() && out.is_empty());
        let (back, out) = exchange_client(
            &mut n,
            &Seg::client(client, vip, f::ACK | f::FIN, 5000, 9000),
        );
        assert!(out.is_empty());
        assert_eq!(back.len(), 1);
        let IpAddr::V4(v) = vip.ip() else {
            unreachable!()
        };
        let key = FlowKey::v4(CLIENT4.octets(), v.octets(), port, 80, 6);
        assert!(
            n.w.pipeline.lb().conntrack().lookup(&key, 0).is_none(),
            "no entry made"
        );
    }
    // The RSTs end nothing: dropped before the PROXY check.
    assert_eq!(n.counter(Counter::DropPpMidStream), 4);
    assert_eq!(n.counter(Counter::DropTcpRstNoConntrack), 2);
    assert_eq!(n.counter(Counter::PpHeadersInserted), 0);
}

#[test]
fn a_dnat_proxy_vip_has_no_stateless_fallback_when_the_table_is_full() {
    let mut n = node();
    let vipd = SocketAddr::from(([10, 1, 0, 101], 80));
    let mut port = 1024u16;
    // Fill the table with half-open flows until a SYN is refused.
    while n.counter(Counter::DropPpConntrackFull) == 0 {
        assert!(port < 8000, "the table never filled");
        let client = SocketAddr::from((CLIENT4, port));
        let _ = n.send(&Seg::client(client, vipd, f::SYN, ISN, 0).mss(1460));
        port += 1;
    }
    assert_eq!(n.counter(Counter::ConntrackFullStateless), 0);
    // The refused SYN did not leave; neither do its retransmission nor
    // data sent blindly after it (answered with a RST).
    let client = SocketAddr::from((CLIENT4, port - 1));
    n.none(&Seg::client(client, vipd, f::SYN, ISN, 0).mss(1460));
    assert_eq!(n.counter(Counter::DropPpConntrackFull), 2);
    let (back, out) = exchange_client(
        &mut n,
        &Seg::client(client, vipd, f::ACK, ISN.wrapping_add(1), BISN + 1).data(FORGED),
    );
    assert!(out.is_empty(), "forwarded: {out:#?}");
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].flags & f::RST, f::RST);
    assert_eq!(n.counter(Counter::DropPpMidStream), 1);
}

#[test]
fn a_stream_past_two_gib_stays_translated_both_ways() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40090));
    let vipd = SocketAddr::from(([10, 1, 0, 101], 80));
    let (conn, _) = handshake(&mut n, client, vipd, Some(1460));
    let c1 = ISN.wrapping_add(1);
    let first = n.one(&conn.c(f::ACK, c1, BISN + 1).data(b"hi"));
    let l = decode_pp(&first.payload).len as u32;
    n.one(&conn.b(f::ACK, BISN + 1, c1.wrapping_add(l + 2)));
    // 3 GiB uploaded later (half the sequence space is 2 GiB): every
    // byte still moves by the header's length, every ACK back.
    for far in [c1.wrapping_add(0x8000_0000), c1.wrapping_add(0xC000_0000)] {
        let got = n.one(&conn.c(f::ACK, far, BISN + 1).data(b"far"));
        assert_eq!(got.seq, far.wrapping_add(l));
        let back = n.one(
            &conn
                .b(f::ACK, BISN + 1, far.wrapping_add(l + 3))
                .sack(&[(far.wrapping_add(l + 100), far.wrapping_add(l + 200))]),
        );
        assert_eq!(back.ack, far.wrapping_add(3));
        assert_eq!(
            back.sack,
            vec![(far.wrapping_add(100), far.wrapping_add(200))]
        );
    }
}

#[test]
fn a_vip_without_proxy_protocol_is_untouched() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40050));
    let vip = SocketAddr::from(([10, 1, 0, 104], 80));
    let (conn, mss) = handshake(&mut n, client, vip, Some(1460));
    assert_eq!(mss, Some(1460));
    let got = n.one(&conn.c(f::ACK, ISN.wrapping_add(1), BISN + 1).data(b"plain"));
    assert_eq!(got.payload, b"plain");
    assert_eq!(n.counter(Counter::PpHeadersInserted), 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Random segments and mutated frames of PROXY flows: no panic, and
    /// whatever leaves has valid checksums and lengths.
    #[test]
    fn random_segments_never_panic(
        ops in proptest::collection::vec(
            (0u8..4, proptest::prelude::any::<u32>(), proptest::prelude::any::<u32>(),
             0usize..1600, proptest::prelude::any::<u8>(), 0usize..200, proptest::prelude::any::<u8>()),
            1..12)
    ) {
        let mut n = node();
        let client = SocketAddr::from((CLIENT4, 41000));
        let (conn, _) = handshake(&mut n, client, vip4(), Some(600));
        for (who, seq, ack, plen, flags, at, byte) in ops {
            let payload = vec![byte; plen];
            let fl = (flags & (f::FIN | f::RST | f::PSH)) | f::ACK;
            let seq = if who == 3 { ISN.wrapping_add(1) } else { seq };
            let s = if who % 2 == 0 {
                conn.c(fl, seq, ack).data(&payload)
            } else {
                conn.b(fl, seq, ack).data(&payload).sack(&[(seq, ack)])
            };
            let mut frame = s.build();
            if who == 2 && at < frame.len() {
                frame[at] ^= byte | 1;
            }
            let port = if who % 2 == 0 { EXT } else { INT };
            let (ext, int) = n.exchange(port, &frame);
            if who != 2 {
                for out in ext.iter().chain(int.iter()) {
                    decode(out);
                }
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

    /// Segment surgery against etherparse's full checksums: inserting `n`
    /// bytes (odd or even), cutting at any point, and the tail from any
    /// point, over IPv4 and IPv6, with and without options.
    #[test]
    fn segment_surgery_keeps_checksums_and_bytes(
        v6 in proptest::prelude::any::<bool>(),
        payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..700),
        hdr in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..200),
        cut in 0usize..700,
        shift in proptest::prelude::any::<u32>(),
        sack in proptest::prelude::any::<bool>(),
        urgent in proptest::option::of(proptest::prelude::any::<u16>()),
    ) {
        use dataplane::ppv2::seg;
        let (src, dst): (SocketAddr, SocketAddr) = if v6 {
            ((CLIENT6, 1).into(), (LOCAL6, 2).into())
        } else {
            ((CLIENT4, 1).into(), (LOCAL4, 2).into())
        };
        let mut s = Seg::client(src, dst, f::ACK | f::PSH, 77, 99).data(&payload);
        if sack {
            s = s.sack(&[(1, 2)]);
        }
        if let Some(u) = urgent {
            s = s.urgent(u);
        }
        let frame = s.build();
        let p = dataplane::wire::parse_frame(&frame).unwrap();
        let at = seg::locate(&frame, &p).unwrap();

        let mut buf = frame.clone();
        buf.resize(frame.len() + hdr.len(), 0);
        let grown = seg::insert(&mut buf, &at, &hdr).unwrap();
        let d = decode(&buf[..grown.end]);
        let mut want = hdr.clone();
        want.extend_from_slice(&payload);
        proptest::prop_assert_eq!(d.payload, want);
        proptest::prop_assert_eq!(
            d.urgent,
            urgent.map(|u| (usize::from(u) + hdr.len()).min(65535) as u16)
        );

        let keep = cut.min(payload.len());
        let mut cutf = frame.clone();
        let c = seg::truncate(&mut cutf, &at, keep);
        let d = decode(&cutf[..c.end]);
        proptest::prop_assert_eq!(&d.payload[..], &payload[..keep]);
        proptest::prop_assert_eq!(d.urgent, urgent);

        let mut out = vec![0u8; 2048];
        if keep < payload.len() {
            let n = seg::tail(&frame, &at, keep, shift, &mut out).unwrap();
            let d = decode(&out[..n]);
            proptest::prop_assert_eq!(&d.payload[..], &payload[keep..]);
            proptest::prop_assert_eq!(d.seq, 77u32.wrapping_add(keep as u32).wrapping_add(shift));
            // Nothing left behind (keep 0): the segment is the same one.
            let moved = urgent.and_then(|u| (keep == 0 || usize::from(u) > keep).then(|| u - keep as u16));
            proptest::prop_assert_eq!(d.urgent, moved);
        } else {
            proptest::prop_assert!(seg::tail(&frame, &at, keep, shift, &mut out).is_none());
        }
    }
}

/// The forgery of a PROXY header through segments the backend discards:
/// a first data segment with a bad checksum (the backend drops it, so a
/// header "sent" in it never arrives), then the backend's acknowledgement
/// past the header spoofed from the client side. Neither moves anything:
/// the real first segment still carries border's header.
#[test]
fn a_header_cannot_be_marked_sent_or_acknowledged_by_segments_the_backend_never_takes() {
    let mut n = node();
    let client = SocketAddr::from((CLIENT4, 40090));
    let (conn, _) = handshake(&mut n, client, vip4(), Some(1460));
    let c1 = ISN.wrapping_add(1);
    // The first data segment, its TCP checksum broken (IPv4, no options:
    // the checksum's low byte is at 14 + 20 + 17).
    let mut bad = conn.c(f::ACK | f::PSH, c1, BISN + 1).data(FORGED).build();
    bad[14 + 20 + 17] ^= 1;
    let (ext, int) = n.exchange(EXT, &bad);
    assert!(ext.is_empty() && int.is_empty(), "dropped");
    assert_eq!(n.counter(Counter::DropBadL4Checksum), 1);
    assert!(
        !n.flow(client, vip4()).proxy.sent(),
        "no header counts as sent"
    );
    // The backend's ACK past any header, spoofed in by the client side.
    let mut spoof = conn.b(f::ACK, BISN + 1, c1.wrapping_add(200));
    spoof.smac = CLIENT_MAC;
    spoof.dmac = EXT_MAC;
    let (ext, int) = n.exchange(EXT, &spoof.build());
    assert!(ext.is_empty() && int.is_empty(), "dropped");
    assert_eq!(n.counter(Counter::DropReplyWrongPort), 1);
    assert!(!n.flow(client, vip4()).proxy.acked());
    // The client's real first segment carries border's header first.
    let got = n.one(&conn.c(f::ACK | f::PSH, c1, BISN + 1).data(FORGED));
    let d = decode_pp(&got.payload);
    assert_eq!(d.src, client);
    assert_eq!(&got.payload[d.len..], FORGED);
}
