//! The SYN proxy (`syn_proxy` per VIP) on byte fixtures through one
//! worker: a client's SYN gets border's cookie SYN-ACK and makes nothing;
//! the client's ACK opens the backend's connection with the client's ISN
//! and the options the cookie kept; what the client sends before the
//! backend answers is held and released after its SYN-ACK, which never
//! reaches the client; then every segment is spliced both ways (sequence,
//! SACK, timestamps, window scale). Full-NAT and DNAT, IPv4 and IPv6,
//! PROXY v2; forged and corrupted ACKs; a refusing backend; `auto`.

mod support;

use std::net::{IpAddr, SocketAddr};

use conf::counters::Counter;
use dataplane::conntrack::{FlowKey, State};
use etherparse::{PacketBuilder, SlicedPacket, TcpHeader, TcpOptionElement, TransportSlice};
use support::lb::flags::{ACK, PSH, RST, SYN};
use support::lb::*;

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
    let new_flows = n.counter(Counter::NewFlows);
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
    assert_eq!(
        n.counter(Counter::NewFlows),
        new_flows,
        "no entry for a SYN"
    );
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
    assert_eq!(n.counter(Counter::NewFlows), new_flows + 1);
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
        assert!(c.peer.port() >= POOL.0, "full-NAT: a local tuple");
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

#[test]
fn dnat_and_syns_without_timestamps_keep_window_scale_and_sack() {
    use TcpOptionElement::*;
    let mut n = appliance("always");
    let (vip, client) = (sa(DNAT4, 80), sa(CLIENT4, 40_001));
    // Window scale and SACK-permitted without timestamps: Linux's cookies
    // lose both; border's keep them.
    let syn = Seg::new(client, vip, SYN, ISN, 0).opts(&[
        MaximumSegmentSize(1440),
        Noop,
        WindowScale(5),
        SelectiveAcknowledgementPermitted,
    ]);
    let (ext, int) = n.exchange(EXT, &syn.build());
    assert!(int.is_empty());
    let sa_ = got(&ext[0]);
    assert_eq!(
        (sa_.mss, sa_.ws, sa_.sack_ok, sa_.ts),
        (Some(1460), Some(7), true, None)
    );
    let cookie = sa_.seen.seq;
    let ack = Seg::new(
        client,
        vip,
        ACK,
        ISN.wrapping_add(1),
        cookie.wrapping_add(1),
    );
    let s = got(&n.forward(EXT, &ack.build(), INT));
    assert_eq!(s.seen.tcp, Some(SYN));
    assert_eq!(
        (s.mss, s.ws, s.sack_ok, s.ts),
        (Some(1440), Some(5), true, None)
    );
    assert_eq!(s.seen.src, client, "DNAT keeps the client's address");
    let backend = s.seen.dst;
    assert_eq!(backend.port(), 8080);
    // The backend accepts without window scaling: then the client's
    // windows are unscaled for it, and its own read at border's scale.
    let synack = Seg::new(backend, client, SYN | ACK, BISN, ISN.wrapping_add(1))
        .opts(&[MaximumSegmentSize(1460)])
        .by_backend();
    let (ext, int) = n.exchange(INT, &synack.build());
    assert!(ext.is_empty());
    assert_eq!(int.len(), 1, "the held ACK");
    let g = got(&int[0]);
    assert_eq!((g.seen.tcp, g.seen.ack), (Some(ACK), BISN + 1));
    assert_eq!(g.window, 502 << 5, "client window unscaled for the backend");
    let reply = Seg::new(backend, client, ACK, BISN + 1, ISN.wrapping_add(1))
        .window(64000)
        .data(b"hi")
        .by_backend();
    let g = got(&n.forward(INT, &reply.build(), EXT));
    assert_eq!((g.seen.src, g.seen.dst), (vip, client));
    assert_eq!(g.seen.seq, cookie.wrapping_add(1));
    assert_eq!(g.window, 500, "64000 read at scale 7");
    assert_eq!(n.drops(), vec![]);
}

#[test]
fn a_proxy_v2_vip_gets_its_header_in_the_first_released_segment() {
    let mut n = Setup {
        syn_proxy: Some("always"),
        edit: Some((
            "name = \"tcp4\"\n",
            "name = \"tcp4\"\nproxy_protocol = \"v2\"\n",
        )),
        ..Setup::default()
    }
    .node();
    let (vip, client) = (sa(VIP4, 80), sa(CLIENT4, 40_002));
    let c = open(&mut n, client, vip, b"hello");
    let out = backend_accepts(&mut n, &c);
    assert_eq!(out.len(), 1);
    let p = &out[0].seen.payload;
    assert!(p.starts_with(b"\r\n\r\n\0\r\nQUIT\n"), "PROXY v2 signature");
    assert!(p.ends_with(b"hello"));
    let hdr = (p.len() - 5) as u32;
    // The header carries the real client.
    let h = ppp::v2::Header::try_from(&p[..hdr as usize]).expect("a PROXY v2 header");
    match h.addresses {
        ppp::v2::Addresses::IPv4(a) => {
            assert_eq!(IpAddr::from(a.source_address), client.ip());
            assert_eq!(a.source_port, client.port());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(out[0].seen.seq, ISN.wrapping_add(1));
    // The backend acknowledges header and data: the client sees its 5 bytes.
    let ack = Seg::new(
        c.backend,
        c.peer,
        ACK,
        BISN + 1,
        ISN.wrapping_add(1 + hdr + 5),
    )
    .ts(BTS + 1, CTS + 1)
    .by_backend();
    let g = got(&n.forward(INT, &ack.build(), EXT));
    assert_eq!(g.seen.ack, ISN.wrapping_add(6));
    assert_eq!(g.seen.seq, c.cookie.wrapping_add(1));
    assert_eq!(n.drops(), vec![]);
}

#[test]
fn forged_altered_and_corrupted_acks_make_nothing() {
    let mut n = appliance("always");
    let (vip, client) = (sa(VIP4, 80), sa(CLIENT4, 40_003));
    let syn = Seg::new(client, vip, SYN, ISN, 0).opts(&linux_syn_opts(CTS));
    let (ext, _) = n.exchange(EXT, &syn.build());
    let sa_ = got(&ext[0]);
    let (cookie, our_ts) = (sa_.seen.seq, sa_.ts.unwrap().0);
    let ack = |ack: u32, tsecr: u32| {
        Seg::new(client, vip, ACK, ISN.wrapping_add(1), ack).ts(CTS + 1, tsecr)
    };
    // A guessed cookie, options altered in the echo, another client ISN.
    n.swallow(EXT, &ack(cookie.wrapping_add(2), our_ts).build());
    n.swallow(EXT, &ack(cookie.wrapping_add(1), our_ts ^ 1).build());
    let other = Seg::new(
        client,
        vip,
        ACK,
        ISN.wrapping_add(2),
        cookie.wrapping_add(1),
    )
    .ts(CTS + 1, our_ts);
    n.swallow(EXT, &other.build());
    assert_eq!(n.counter(Counter::DropSynProxyCookieBad), 3);
    // The right cookie with a corrupted checksum.
    let mut bad = ack(cookie.wrapping_add(1), our_ts).data(b"x").build();
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    n.swallow(EXT, &bad);
    assert_eq!(n.counter(Counter::DropSynProxyBadChecksum), 1);
    // A SYN with a bad checksum gets no answer.
    let mut bad = syn.build();
    bad[14 + 20 + 4] ^= 1;
    n.swallow(EXT, &bad);
    assert_eq!(n.counter(Counter::DropSynProxyBadChecksum), 2);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 0);
    assert_eq!(n.counter(Counter::NewFlows), 0);
    // The cookie is still good: the real ACK opens.
    let (_, int) = n.exchange(EXT, &ack(cookie.wrapping_add(1), our_ts).build());
    assert_eq!(int.len(), 1);
    assert_eq!(n.counter(Counter::SynProxyCookiesAccepted), 1);
}

#[test]
fn a_backend_that_refuses_resets_the_client() {
    let mut n = appliance("always");
    let (vip, client) = (sa(VIP6, 80), sa(CLIENT6, 40_004));
    let c = open(&mut n, client, vip, b"data");
    let rst = Seg::new(c.backend, c.peer, RST | ACK, 0, ISN.wrapping_add(1)).by_backend();
    let g = got(&n.forward(INT, &rst.build(), EXT));
    assert_eq!(g.seen.tcp.map(|f| f & RST), Some(RST));
    assert_eq!(
        g.seen.seq,
        c.cookie.wrapping_add(1),
        "in the client's window"
    );
    assert_eq!((g.seen.src, g.seen.dst), (vip, client));
    assert_eq!(n.counter(Counter::SynProxyBackendResets), 1);
    assert_eq!(state_of(&n, client, vip), Some(State::Closed));
    // A stray segment before the SYN-ACK is no SYN-ACK.
    let mut m = appliance("always");
    let c = open(&mut m, sa(CLIENT4, 40_005), sa(VIP4, 80), b"");
    let stray = Seg::new(c.backend, c.peer, ACK, BISN, ISN.wrapping_add(1)).by_backend();
    m.swallow(INT, &stray.build());
    let wrong = Seg::new(c.backend, c.peer, SYN | ACK, BISN, ISN.wrapping_add(9)).by_backend();
    m.swallow(INT, &wrong.build());
    assert_eq!(m.counter(Counter::DropSynProxyBadSynAck), 2);
}

#[test]
fn held_segments_are_bounded_per_connection() {
    let mut n = appliance("always");
    let (vip, client) = (sa(VIP4, 80), sa(CLIENT4, 40_006));
    let c = open(&mut n, client, vip, b"0");
    for i in 1..12u32 {
        let more = Seg::new(
            client,
            vip,
            ACK,
            ISN.wrapping_add(1 + i),
            c.cookie.wrapping_add(1),
        )
        .ts(CTS + 1, c.our_ts)
        .data(b"x");
        n.swallow(EXT, &more.build());
    }
    // 8 held (the ACK and 7 more), 4 dropped for the client to resend.
    assert_eq!(n.counter(Counter::SynProxyHeld), 8);
    assert_eq!(n.counter(Counter::DropSynProxyHoldFull), 4);
    let out = backend_accepts(&mut n, &c);
    assert_eq!(out.len(), 8);
}

#[test]
fn off_and_udp_vips_pass_syns_on() {
    let mut n = appliance("off");
    let syn = Seg::new(sa(CLIENT4, 40_007), sa(VIP4, 80), SYN, ISN, 0);
    let (ext, int) = n.exchange(EXT, &syn.build());
    assert!(ext.is_empty());
    assert_eq!(int.len(), 1);
    assert_eq!(n.counter(Counter::SynProxyCookiesSent), 0);
}

#[test]
fn auto_switches_on_under_half_open_pressure() {
    let mut n = Setup {
        syn_proxy: Some("auto"),
        conntrack: 64,
        ..Setup::default()
    }
    .node();
    let vip = sa(VIP4, 80);
    let spoofed = |i: u16| {
        sa(
            std::net::Ipv4Addr::new(198, 51, 100, (i % 250) as u8 + 1),
            1024 + i,
        )
    };
    let mut reached = 0;
    for i in 0..80u16 {
        let (_, int) = n.exchange(EXT, &Seg::new(spoofed(i), vip, SYN, ISN, 0).build());
        reached += int.len();
    }
    // 1/8 of the table half-open switches cookies on at the next tick,
    // long before the table fills (evictions switch it on too: the
    // `synproxy::auto` unit tests).
    assert_eq!(reached, 8, "off until 8 half-open entries (1/8 of 64)");
    assert!(n.w.pipeline.lb().syn_proxy_auto_on());
    assert_eq!(n.counter(Counter::DropSynFlood), 0);
    assert_eq!(n.counter(Counter::SynProxyAutoOn), 1);
    assert_eq!(n.counter(Counter::SynProxyAutoSwitches), 1);
    // From now on the flood gets cookies and reaches no backend; a real
    // client gets through.
    for i in 88..200u16 {
        let (ext, int) = n.exchange(EXT, &Seg::new(spoofed(i), vip, SYN, ISN, 0).build());
        assert!(int.is_empty());
        assert_eq!(ext.len(), 1);
    }
    // The flood's entries age; a real client takes the place of one.
    n.advance_ms(dataplane::lb::HALF_OPEN_MIN_AGE_MS);
    let c = open(&mut n, sa(CLIENT4, 40_008), vip, b"real");
    assert_eq!(backend_accepts(&mut n, &c).len(), 1);
    // The flood goes on: cookies unanswered keep it on.
    for w in 0..40u16 {
        for i in 0..50u16 {
            n.exchange(
                EXT,
                &Seg::new(spoofed(1000 + w * 50 + i), vip, SYN, ISN, 0).build(),
            );
        }
        n.advance_ms(250);
        n.poll();
    }
    assert!(n.w.pipeline.lb().syn_proxy_auto_on());
    // It stops; once the table drained, 5 calm seconds switch it off.
    n.advance_ms(60_000);
    for _ in 0..200 {
        n.advance_ms(250);
        n.poll();
    }
    assert!(!n.w.pipeline.lb().syn_proxy_auto_on());
    assert_eq!(n.counter(Counter::SynProxyAutoOn), 0);
}

#[test]
fn a_backend_that_lost_the_syn_gets_it_again() {
    let mut n = appliance("always");
    let (vip, client) = (sa(VIP4, 80), sa(CLIENT4, 40_009));
    let c = open(&mut n, client, vip, b"req");
    let again = Seg::new(
        client,
        vip,
        ACK,
        ISN.wrapping_add(1),
        c.cookie.wrapping_add(1),
    )
    .ts(CTS + 5, c.our_ts)
    .data(b"req");
    // Within a second: held, nothing sent.
    n.advance_ms(999);
    n.swallow(EXT, &again.build());
    // A second after border's SYN: the SYN goes again (same ISN, options).
    n.advance_ms(1);
    let s = got(&n.forward(EXT, &again.build(), INT));
    assert_eq!((s.seen.tcp, s.seen.seq), (Some(SYN), ISN));
    assert_eq!((s.seen.src, s.seen.dst), (c.peer, c.backend));
    assert_eq!((s.mss, s.ws, s.sack_ok), (Some(1460), Some(7), true));
    assert_eq!(n.counter(Counter::SynProxySynsResent), 1);
    // Its SYN-ACK releases everything held, in order.
    let out = backend_accepts(&mut n, &c);
    assert_eq!(out.len(), 3);
    assert!(out
        .iter()
        .all(|g| g.seen.payload == b"req" && g.seen.ack == BISN + 1));
}

mod fuzz {
    use super::*;
    use dataplane::wire::parse_frame;
    use proptest::prelude::*;

    /// The frames of one proxied connection, in order: SYN, cookie ACK with
    /// data, the backend's SYN-ACK, a reply, and a RST.
    fn seeds(n: &mut Node) -> Vec<(usize, Vec<u8>)> {
        let (vip, client) = (sa(VIP4, 80), sa(CLIENT4, 41_000));
        let syn = Seg::new(client, vip, SYN, ISN, 0)
            .opts(&linux_syn_opts(CTS))
            .build();
        let (ext, _) = n.exchange(EXT, &syn);
        let sa_ = got(&ext[0]);
        let (cookie, our_ts) = (sa_.seen.seq, sa_.ts.unwrap().0);
        let ack = Seg::new(
            client,
            vip,
            ACK,
            ISN.wrapping_add(1),
            cookie.wrapping_add(1),
        )
        .ts(CTS + 1, our_ts)
        .data(b"GET /")
        .build();
        let (_, int) = n.exchange(EXT, &ack);
        let s = got(&int[0]);
        let (backend, peer) = (s.seen.dst, s.seen.src);
        let synack = Seg::new(backend, peer, SYN | ACK, BISN, ISN.wrapping_add(1))
            .opts(&linux_syn_opts(BTS))
            .by_backend()
            .build();
        let reply = Seg::new(backend, peer, ACK, BISN + 1, ISN.wrapping_add(6))
            .ts(BTS + 1, CTS + 1)
            .data(b"200")
            .by_backend()
            .build();
        let rst = Seg::new(
            client,
            vip,
            RST | ACK,
            ISN.wrapping_add(6),
            cookie.wrapping_add(4),
        )
        .build();
        vec![
            (EXT, syn),
            (EXT, ack),
            (INT, synack),
            (INT, reply),
            (EXT, rst),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Mutated frames of proxied connections, in any order, at any
        /// time: no panic, and everything sent parses and leaves by a port.
        #[test]
        fn mutated_handshakes_never_panic(
            steps in prop::collection::vec(
                (any::<prop::sample::Index>(), 0usize..64, any::<u8>(), 0u64..1500),
                1..24,
            ),
        ) {
            // The seeds' connection is open on `n`: its cookie is `n`'s.
            let mut n = appliance("always");
            let seeds = seeds(&mut n);
            for (which, at, x, ms) in steps {
                let (port, seed) = &seeds[which.index(seeds.len())];
                let mut f = seed.clone();
                if x != 0 {
                    let i = at % f.len();
                    f[i] ^= x;
                }
                n.advance_ms(ms);
                let (ext, int) = n.exchange(*port, &f);
                for out in ext.iter().chain(&int) {
                    prop_assert!(parse_frame(out).is_ok(), "{out:02x?}");
                }
            }
        }
    }
}

#[test]
fn a_new_generation_turns_the_proxy_on_without_a_restart() {
    let mut n = appliance("off");
    let client = sa(CLIENT4, 40_010);
    let syn = |port: u16| Seg::new(sa(CLIENT4, port), sa(VIP4, 80), SYN, ISN, 0).build();
    let (ext, int) = n.exchange(EXT, &syn(client.port()));
    assert_eq!((ext.len(), int.len()), (0, 1), "off: to the backend");
    let text = config_text(&[1, 1, 1]).replace(
        "protocol = \"tcp\"\n",
        "protocol = \"tcp\"\nsyn_proxy = \"always\"\n",
    );
    let cfg = conf::Config::from_toml_str(&text, "lbtest.toml").unwrap();
    n.publish(dataplane::standalone::adopted_from_config(&cfg, 2).unwrap());
    n.poll();
    let (ext, int) = n.exchange(EXT, &syn(40_011));
    assert_eq!((ext.len(), int.len()), (1, 0), "always: a cookie");
    assert_eq!(got(&ext[0]).seen.tcp, Some(SYN | ACK));
}
