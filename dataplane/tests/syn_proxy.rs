//! The SYN proxy (`syn_proxy` per VIP) on byte fixtures through one
//! worker: a client's SYN gets border's cookie SYN-ACK and makes nothing;
//! the client's ACK opens the backend's connection with the client's ISN
//! and the options the cookie kept; what the client sends before the
//! backend answers is held and released after its SYN-ACK, which never
//! reaches the client; then every segment is spliced both ways (sequence,
//! SACK, timestamps, window scale). Full-NAT and DNAT, IPv4 and IPv6,
//! PROXY v2; forged and corrupted ACKs; a refusing backend; `auto`.

#[path = "lb_support.rs"]
mod support;

use std::net::{IpAddr, SocketAddr};

use conf::counters::Counter;
use dataplane::conntrack::{FlowKey, State};
use etherparse::{PacketBuilder, SlicedPacket, TcpHeader, TcpOptionElement, TransportSlice};
use support::flags::{ACK, PSH, RST, SYN};
use support::*;

const ISN: u32 = 0xFFFF_FF00; // the client's: wraps during the test
const BISN: u32 = 7_000_000;
const CTS: u32 = 50_000; // the client's first TSval
const BTS: u32 = 900_000; // the backend's first TSval

/// A TCP segment with options.
struct Seg {
    src: SocketAddr,
    dst: SocketAddr,
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    opts: Vec<TcpOptionElement>,
    payload: Vec<u8>,
    backend: bool,
}

impl Seg {
    fn new(src: SocketAddr, dst: SocketAddr, flags: u8, seq: u32, ack: u32) -> Seg {
        Seg {
            src,
            dst,
            flags,
            seq,
            ack,
            window: 502,
            opts: Vec::new(),
            payload: Vec::new(),
            backend: false,
        }
    }

    fn opts(mut self, o: &[TcpOptionElement]) -> Seg {
        self.opts = o.to_vec();
        self
    }

    fn ts(self, v: u32, e: u32) -> Seg {
        use TcpOptionElement::{Noop, Timestamp};
        self.opts(&[Noop, Noop, Timestamp(v, e)])
    }

    fn data(mut self, p: &[u8]) -> Seg {
        self.payload = p.to_vec();
        self.flags |= PSH;
        self
    }

    fn window(mut self, w: u16) -> Seg {
        self.window = w;
        self
    }

    fn by_backend(mut self) -> Seg {
        self.backend = true;
        self
    }

    fn build(&self) -> Vec<u8> {
        let (smac, dmac) = if self.backend {
            (host_mac(self.src.ip()), INT_MAC)
        } else {
            (CLIENT_MAC, EXT_MAC)
        };
        let mut h = TcpHeader::new(self.src.port(), self.dst.port(), self.seq, self.window);
        h.syn = self.flags & SYN != 0;
        h.ack = self.flags & ACK != 0;
        h.rst = self.flags & RST != 0;
        h.psh = self.flags & PSH != 0;
        h.acknowledgment_number = self.ack;
        h.set_options(&self.opts).unwrap();
        let b = PacketBuilder::ethernet2(smac, dmac);
        let mut out = Vec::new();
        match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => b
                .ipv4(s.octets(), d.octets(), 64)
                .tcp_header(h)
                .write(&mut out, &self.payload),
            (IpAddr::V6(s), IpAddr::V6(d)) => b
                .ipv6(s.octets(), d.octets(), 64)
                .tcp_header(h)
                .write(&mut out, &self.payload),
            _ => panic!("mixed families"),
        }
        .unwrap();
        out
    }
}

/// What a sent segment carried: every checksum checked by `decode`.
#[derive(Debug)]
struct Got {
    seen: Seen,
    window: u16,
    mss: Option<u16>,
    ws: Option<u8>,
    sack_ok: bool,
    ts: Option<(u32, u32)>,
    sack: Vec<(u32, u32)>,
}

fn got(frame: &[u8]) -> Got {
    let seen = decode(frame);
    let p = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(TransportSlice::Tcp(t)) = p.transport else {
        panic!("not TCP")
    };
    let mut g = Got {
        seen,
        window: t.window_size(),
        mss: None,
        ws: None,
        sack_ok: false,
        ts: None,
        sack: Vec::new(),
    };
    for o in t.options_iterator() {
        match o.unwrap() {
            TcpOptionElement::MaximumSegmentSize(m) => g.mss = Some(m),
            TcpOptionElement::WindowScale(s) => g.ws = Some(s),
            TcpOptionElement::SelectiveAcknowledgementPermitted => g.sack_ok = true,
            TcpOptionElement::Timestamp(v, e) => g.ts = Some((v, e)),
            TcpOptionElement::SelectiveAcknowledgement(a, rest) => {
                g.sack.push(a);
                g.sack.extend(rest.iter().flatten());
            }
            TcpOptionElement::Noop => {}
        }
    }
    g
}

fn linux_syn_opts(tsval: u32) -> Vec<TcpOptionElement> {
    use TcpOptionElement::*;
    vec![
        MaximumSegmentSize(1460),
        SelectiveAcknowledgementPermitted,
        Timestamp(tsval, 0),
        Noop,
        WindowScale(7),
    ]
}

fn state_of(n: &Node, client: SocketAddr, vip: SocketAddr) -> Option<State> {
    let key = match (client.ip(), vip.ip()) {
        (IpAddr::V4(c), IpAddr::V4(v)) => {
            FlowKey::v4(c.octets(), v.octets(), client.port(), vip.port(), 6)
        }
        (IpAddr::V6(c), IpAddr::V6(v)) => {
            FlowKey::v6(c.octets(), v.octets(), client.port(), vip.port(), 6)
        }
        _ => panic!("mixed families"),
    };
    let ct = n.w.pipeline.lb().conntrack();
    let now = n.clock.0.load(std::sync::atomic::Ordering::Relaxed);
    ct.lookup(&key, now).map(|(id, _)| ct.get(id).state())
}

fn appliance(mode: &'static str) -> Node {
    Setup {
        syn_proxy: Some(mode),
        ..Setup::default()
    }
    .node()
}

/// One client's connection through the proxy, as far as the test took it.
struct Conn {
    client: SocketAddr,
    vip: SocketAddr,
    /// Border's cookie ISN and SYN-ACK TSval.
    cookie: u32,
    our_ts: u32,
    /// The backend's view: its address and where its segments go (the
    /// local tuple for full-NAT, the client for DNAT).
    backend: SocketAddr,
    peer: SocketAddr,
}

/// SYN, the cookie SYN-ACK (checked), then the ACK carrying `first` data:
/// the backend's SYN comes out (checked).
fn open(n: &mut Node, client: SocketAddr, vip: SocketAddr, first: &[u8]) -> Conn {
    let syn = Seg::new(client, vip, SYN, ISN, 0).opts(&linux_syn_opts(CTS));
    let (ext, int) = n.exchange(EXT, &syn.build());
    assert!(int.is_empty(), "a SYN reaches no backend");
    assert_eq!(ext.len(), 1, "the cookie SYN-ACK");
    let sa = got(&ext[0]);
    assert_eq!((sa.seen.src, sa.seen.dst), (vip, client));
    assert_eq!((sa.seen.smac, sa.seen.dmac), (EXT_MAC, CLIENT_MAC));
    assert_eq!(sa.seen.tcp, Some(SYN | ACK));
    assert_eq!(sa.seen.ack, ISN.wrapping_add(1));
    assert_eq!(sa.ws, Some(7));
    assert!(sa.sack_ok);
    let (our_ts, echo) = sa.ts.expect("timestamps answered");
    assert_eq!(echo, CTS);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 0, "no entry for a SYN");
    let cookie = sa.seen.seq;

    let ack = Seg::new(
        client,
        vip,
        ACK,
        ISN.wrapping_add(1),
        cookie.wrapping_add(1),
    )
    .ts(CTS + 1, our_ts)
    .data(first);
    let (ext, int) = n.exchange(EXT, &ack.build());
    assert!(ext.is_empty());
    assert_eq!(int.len(), 1, "the backend's SYN");
    let s = got(&int[0]);
    assert_eq!(s.seen.tcp, Some(SYN));
    assert_eq!(s.seen.seq, ISN, "the client's ISN");
    assert!(s.seen.payload.is_empty());
    assert_eq!((s.mss, s.ws, s.sack_ok), (Some(1460), Some(7), true));
    assert!(s.ts.is_some());
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 1);
    Conn {
        client,
        vip,
        cookie,
        our_ts,
        backend: s.seen.dst,
        peer: s.seen.src,
    }
}

/// The backend's SYN-ACK (window scale 9, timestamps): nothing reaches the
/// client; the held segments go to the backend, in order.
fn backend_accepts(n: &mut Node, c: &Conn) -> Vec<Got> {
    use TcpOptionElement::*;
    let synack = Seg::new(c.backend, c.peer, SYN | ACK, BISN, ISN.wrapping_add(1))
        .opts(&[
            MaximumSegmentSize(1400),
            SelectiveAcknowledgementPermitted,
            Timestamp(BTS, CTS + 1),
            Noop,
            WindowScale(9),
        ])
        .window(65535)
        .by_backend();
    let (ext, int) = n.exchange(INT, &synack.build());
    assert!(ext.is_empty(), "the backend's SYN-ACK is border's");
    int.iter().map(|f| got(f)).collect()
}

#[test]
fn a_cookie_connection_is_spliced_both_ways_fullnat_v4_and_v6() {
    for (vip, client) in [
        (sa(VIP4, 80), sa(CLIENT4, 40_000)),
        (sa(VIP6, 80), sa(CLIENT6, 40_000)),
    ] {
        let mut n = appliance("always");
        let c = open(&mut n, client, vip, b"GET / HTTP/1.1\r\n");
        assert_eq!(c.peer.port() >= POOL.0, true, "full-NAT: a local tuple");
        // More data before the backend answered: held too.
        let more = Seg::new(
            client,
            vip,
            ACK,
            ISN.wrapping_add(17),
            c.cookie.wrapping_add(1),
        )
        .ts(CTS + 2, c.our_ts)
        .data(b"Host: x\r\n\r\n");
        n.swallow(EXT, &more.build());
        assert_eq!(n.counter(Counter::SynProxyHeld), 2);

        let out = backend_accepts(&mut n, &c);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].seen.payload, b"GET / HTTP/1.1\r\n");
        assert_eq!(out[1].seen.payload, b"Host: x\r\n\r\n");
        for (g, seq) in out.iter().zip([ISN.wrapping_add(1), ISN.wrapping_add(17)]) {
            assert_eq!(g.seen.seq, seq);
            assert_eq!(g.seen.ack, BISN + 1, "acknowledges the backend's SYN-ACK");
            assert_eq!(g.ts.map(|t| t.1), Some(BTS), "echoes the backend's TSval");
            assert_eq!((g.seen.src, g.seen.dst), (c.peer, c.backend));
        }
        assert_eq!(n.counter(Counter::SynProxyReleased), 2);
        assert_eq!(n.counter(Counter::SynProxyBackendSynAcks), 1);

        // The backend answers, 10 ms later on its clock: into the cookie's
        // numbers, window from scale 9 to border's 7.
        let reply = Seg::new(c.backend, c.peer, ACK, BISN + 1, ISN.wrapping_add(28))
            .ts(BTS + 10, CTS + 2)
            .window(100)
            .data(b"HTTP/1.1 200 OK\r\n")
            .by_backend();
        let g = got(&n.forward(INT, &reply.build(), EXT));
        assert_eq!((g.seen.src, g.seen.dst), (c.vip, c.client));
        assert_eq!(g.seen.seq, c.cookie.wrapping_add(1));
        assert_eq!(g.seen.ack, ISN.wrapping_add(28));
        assert_eq!(g.ts.map(|t| t.0), Some(c.our_ts + 10), "PAWS holds");
        assert_eq!(g.window, 400);
        assert_eq!(g.seen.payload, b"HTTP/1.1 200 OK\r\n");

        // The client acknowledges it, with a SACK block: into the backend's.
        use TcpOptionElement::*;
        let sack_base = c.cookie.wrapping_add(100);
        let ack = Seg::new(
            client,
            vip,
            ACK,
            ISN.wrapping_add(28),
            c.cookie.wrapping_add(18),
        )
        .opts(&[
            Noop,
            Noop,
            Timestamp(CTS + 3, c.our_ts + 10),
            Noop,
            Noop,
            SelectiveAcknowledgement((sack_base, sack_base + 50), [None, None, None]),
        ]);
        let g = got(&n.forward(EXT, &ack.build(), INT));
        assert_eq!(g.seen.ack, BISN + 18);
        assert_eq!(g.sack, vec![(BISN + 100, BISN + 150)]);
        assert_eq!(g.ts.map(|t| t.1), Some(BTS + 10));
        assert_eq!(state_of(&n, client, vip), Some(State::Established));
        assert_eq!(n.drops(), vec![], "nothing dropped");
    }
}
