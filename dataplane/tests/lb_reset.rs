//! `on_down = "reset"` on byte fixtures: established flows to a backend
//! health took down are reset lazily by their next packet, from either end
//! (RST back the way the packet came, entry removed, counted); UDP flows
//! are forgotten and pick again; drained, weight-0 and fail-open backends
//! and the default `keep` change nothing. Every RST is decoded with its
//! checksums verified by etherparse.

mod support;

use std::net::{IpAddr, SocketAddr};

use conf::counters::Counter;
use conf::tables::BackendState;
use conf::Config;
use dataplane::lb::Prepared;
use support::lb::flags::{ACK, PSH, RST, SYN};
use support::lb::*;

/// The test appliance's config with a `[vip.health]` on every VIP, with
/// `on_down` set to `on_down` (or left out).
fn config_with(on_down: Option<&str>) -> Config {
    let health = match on_down {
        Some(v) => format!("[vip.health]\nkind = \"tcp\"\non_down = \"{v}\"\n"),
        None => "[vip.health]\nkind = \"tcp\"\n".to_owned(),
    };
    let text = config_text(&[1, 1, 1]).replace(
        "maglev_table_size = 1021\n",
        &format!("maglev_table_size = 1021\n{health}"),
    );
    Config::from_toml_str(&text, "reset.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// Health takes `backend` of VIP `vip` down in generation 2 of `cfg`.
fn down(n: &mut Node, cfg: &Config, vip: u32, backend: IpAddr) {
    let t = generation_with_states(cfg, 2, &|vi, a| {
        (vi == vip as usize && a == backend).then_some((1, BackendState::Down))
    });
    adopt_generation(n, t);
}

/// Handshake of a flow (full-NAT or DNAT): (backend, where the backend's
/// packets go: the local address or the client).
fn handshake(n: &mut Node, client: SocketAddr, vip: SocketAddr) -> (SocketAddr, SocketAddr) {
    let fwd = decode(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
    let synack = Pkt::tcp(fwd.dst, fwd.src, SYN | ACK).by_backend();
    let back = decode(&n.forward(INT, &synack.build(), EXT));
    assert_eq!((back.src, back.dst), (vip, client));
    let ack = Pkt::tcp(client, vip, ACK);
    decode(&n.forward(EXT, &ack.build(), INT));
    (fwd.dst, fwd.src)
}

/// A data segment of the client (seq 1000, ack 1001).
fn client_data(client: SocketAddr, vip: SocketAddr) -> Vec<u8> {
    Pkt::tcp(client, vip, ACK | PSH).payload(b"GET /").build()
}

/// A data segment of the backend: seq 7000, ack 1234.
fn backend_data(backend: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let mut p = Pkt::tcp(backend, to, ACK | PSH)
        .payload(b"200 OK")
        .by_backend();
    p.seq = 7000;
    p.ack = 1234;
    p.build()
}

/// Each TCP VIP of the fixture: (VIP index, address:port).
fn tcp_vips() -> [(u32, SocketAddr, &'static str); 4] {
    [
        (VIP_TCP4, sa(VIP4, 80), "fullnat v4"),
        (VIP_TCP6, sa(VIP6, 80), "fullnat v6"),
        (VIP_DNAT4, sa(DNAT4, 80), "dnat v4"),
        (VIP_DNAT6, sa(DNAT6, 80), "dnat v6"),
    ]
}

fn client_of(vip: SocketAddr, port: u16) -> SocketAddr {
    match vip.ip() {
        IpAddr::V4(_) => sa(CLIENT4, port),
        IpAddr::V6(_) => sa(CLIENT6, port),
    }
}

fn entries(n: &Node) -> usize {
    n.w.pipeline.lb().conntrack().len()
}

#[test]
fn client_packet_is_answered_with_a_rst_from_the_vip() {
    let cfg = config_with(Some("reset"));
    for (vi, vip, what) in tcp_vips() {
        let mut n = node();
        let client = client_of(vip, 40000);
        let (backend, _) = handshake(&mut n, client, vip);
        assert_eq!(entries(&n), 1);
        down(&mut n, &cfg, vi, backend.ip());

        let rst = decode(&n.forward(EXT, &client_data(client, vip), EXT));
        assert_eq!((rst.src, rst.dst), (vip, client), "{what}");
        assert_eq!((rst.smac, rst.dmac), (EXT_MAC, CLIENT_MAC), "{what}");
        // SEG had ACK 1001: <SEQ=1001><CTL=RST>, no data.
        assert_eq!((rst.tcp, rst.seq, rst.ack), (Some(RST), 1001, 0), "{what}");
        assert!(rst.payload.is_empty());
        assert_eq!(n.counter(Counter::ResetBackendDown), 1, "{what}");
        assert_eq!(entries(&n), 0, "{what}: the entry is gone");
        assert_eq!(n.drops(), vec![], "{what}");

        // The connection is over: full-NAT has no entry to forward the
        // client's next segment with; DNAT forwards it mid-stream where
        // Maglev sends it now, never to the down backend.
        let (ext, int) = n.exchange(EXT, &client_data(client, vip));
        assert!(ext.is_empty(), "{what}: one RST only");
        if vi == VIP_TCP4 || vi == VIP_TCP6 {
            assert!(int.is_empty(), "{what}");
            assert_eq!(n.counter(Counter::DropNoConntrack), 1, "{what}");
        } else {
            assert_eq!(int.len(), 1, "{what}");
            assert_ne!(decode(&int[0]).dst, backend, "{what}");
        }
        assert_eq!(n.counter(Counter::ResetBackendDown), 1, "{what}");

        // A new connection goes to a healthy backend.
        let (b2, _) = handshake(&mut n, client_of(vip, 40001), vip);
        assert_ne!(b2, backend, "{what}");
    }
}

#[test]
fn backend_packet_is_answered_with_a_rst_from_the_address_it_knows() {
    let cfg = config_with(Some("reset"));
    for (vi, vip, what) in tcp_vips() {
        let mut n = node();
        let client = client_of(vip, 40000);
        let (backend, to) = handshake(&mut n, client, vip);
        down(&mut n, &cfg, vi, backend.ip());

        let rst = decode(&n.forward(INT, &backend_data(backend, to), INT));
        // From the local address (full-NAT) or the client (DNAT): the
        // address the backend's connection has.
        assert_eq!((rst.src, rst.dst), (to, backend), "{what}");
        if vi == VIP_DNAT4 || vi == VIP_DNAT6 {
            assert_eq!(to, client);
        } else {
            assert_ne!(to.ip(), client.ip());
        }
        assert_eq!((rst.smac, rst.dmac), (INT_MAC, host_mac(backend.ip())));
        // In the backend's sequence space: SEQ = its SEG.ACK.
        assert_eq!((rst.tcp, rst.seq, rst.ack), (Some(RST), 1234, 0), "{what}");
        assert_eq!(n.counter(Counter::ResetBackendDown), 1, "{what}");
        assert_eq!(entries(&n), 0, "{what}");
        assert_eq!(n.drops(), vec![], "{what}");
    }
}

/// The only valid segment without ACK is a SYN; from a backend on a reset
/// flow it gets `<SEQ=0><ACK=SEG.SEQ+1><CTL=RST,ACK>` (sequence numbers wrap).
#[test]
fn a_segment_without_ack_is_acknowledged_by_the_rst() {
    let cfg = config_with(Some("reset"));
    let mut n = node();
    let vip = sa(VIP4, 80);
    let client = client_of(vip, 40000);
    let (backend, to) = handshake(&mut n, client, vip);
    down(&mut n, &cfg, VIP_TCP4, backend.ip());
    let mut p = Pkt::tcp(backend, to, SYN).by_backend();
    p.seq = 0xFFFF_FFFF;
    let rst = decode(&n.forward(INT, &p.build(), INT));
    assert_eq!((rst.src, rst.dst), (to, backend));
    assert_eq!((rst.tcp, rst.seq, rst.ack), (Some(RST | ACK), 0, 0));
    assert_eq!(n.counter(Counter::ResetBackendDown), 1);
}

#[test]
fn a_rst_from_either_end_is_forwarded_as_usual() {
    let cfg = config_with(Some("reset"));
    let vip = sa(VIP4, 80);
    let mut n = node();
    let client = client_of(vip, 40000);
    let (backend, _) = handshake(&mut n, client, vip);
    down(&mut n, &cfg, VIP_TCP4, backend.ip());
    // At the client's next sequence number (its SYN took 1000).
    let rst = Pkt {
        seq: 1001,
        ..Pkt::tcp(client, vip, RST | ACK)
    };
    let out = decode(&n.forward(EXT, &rst.build(), INT));
    assert_eq!(out.dst, backend);
    assert_eq!(n.counter(Counter::ResetBackendDown), 0);
}

#[test]
fn a_new_syn_on_the_tuple_picks_a_healthy_backend() {
    let cfg = config_with(Some("reset"));
    let vip = sa(VIP4, 80);
    let mut n = node();
    let client = client_of(vip, 40000);
    let (backend, _) = handshake(&mut n, client, vip);
    down(&mut n, &cfg, VIP_TCP4, backend.ip());
    let out = decode(&n.forward(EXT, &Pkt::tcp(client, vip, SYN).build(), INT));
    assert_ne!(out.dst, backend);
    assert_eq!(out.tcp, Some(SYN));
    assert_eq!(n.counter(Counter::ForgotBackendDown), 1);
    assert_eq!(n.counter(Counter::ResetBackendDown), 0);
    assert_eq!(entries(&n), 1);
}

#[test]
fn udp_flow_is_forgotten_and_its_next_datagram_picks_again() {
    let cfg = config_with(Some("reset"));
    let vip = sa(VIP4, 53);
    let mut n = node();
    let client = client_of(vip, 5000);
    let first = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q1").build(), INT));
    let backend = first.dst;
    down(&mut n, &cfg, VIP_UDP4, backend.ip());

    // The down backend's late answer finds no flow.
    let late = Pkt::udp(backend, first.src, b"a1").by_backend();
    n.swallow(INT, &late.build());
    assert_eq!(n.counter(Counter::ForgotBackendDown), 1);
    assert_eq!(entries(&n), 0);

    // The client's next datagram: a new flow to a healthy backend.
    let second = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q2").build(), INT));
    assert_ne!(second.dst, backend);
    assert_eq!(second.payload, b"q2");
    assert_eq!(n.counter(Counter::ForgotBackendDown), 1);
    assert_eq!(n.counter(Counter::ResetBackendDown), 0);

    // Same from the client's side first.
    let mut n = node();
    let first = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q1").build(), INT));
    down(&mut n, &cfg, VIP_UDP4, first.dst.ip());
    let second = decode(&n.forward(EXT, &Pkt::udp(client, vip, b"q2").build(), INT));
    assert_ne!(second.dst, first.dst);
    assert_eq!(n.counter(Counter::ForgotBackendDown), 1);
    assert_eq!(entries(&n), 1);
}

/// Drained (operator), weight 0, fail-open (every backend down) and the
/// default `keep`: the established connection goes on, byte for byte.
#[test]
fn drain_weight_zero_fail_open_and_keep_reset_nothing() {
    let reset = config_with(Some("reset"));
    let keep = config_with(None);
    let explicit_keep = config_with(Some("keep"));
    let vip = sa(VIP4, 80);
    type Case<'a> = (
        &'a str,
        &'a Config,
        Box<dyn Fn(IpAddr) -> Box<dyn Fn(usize, IpAddr) -> Option<(u32, BackendState)>>>,
    );
    let tcp4 = VIP_TCP4 as usize;
    let cases: Vec<Case<'_>> = vec![
        (
            "drained",
            &reset,
            Box::new(move |b| {
                Box::new(move |vi, a| (vi == tcp4 && a == b).then_some((1, BackendState::Draining)))
            }),
        ),
        (
            "weight 0",
            &reset,
            Box::new(move |b| {
                Box::new(move |vi, a| (vi == tcp4 && a == b).then_some((0, BackendState::Up)))
            }),
        ),
        (
            "fail open",
            &reset,
            Box::new(move |_| {
                Box::new(move |vi, _| (vi == tcp4).then_some((1, BackendState::Down)))
            }),
        ),
        (
            "keep (default)",
            &keep,
            Box::new(move |b| {
                Box::new(move |vi, a| (vi == tcp4 && a == b).then_some((1, BackendState::Down)))
            }),
        ),
        (
            "keep",
            &explicit_keep,
            Box::new(move |b| {
                Box::new(move |vi, a| (vi == tcp4 && a == b).then_some((1, BackendState::Down)))
            }),
        ),
    ];
    for (what, cfg, state) in cases {
        let mut n = node();
        let client = client_of(vip, 40000);
        let (backend, to) = handshake(&mut n, client, vip);
        let t = generation_with_states(cfg, 2, &*state(backend.ip()));
        assert!(!t.reset_pending, "{what}");
        adopt_generation(&mut n, t);
        let data = client_data(client, vip);
        let out = decode(&n.forward(EXT, &data, INT));
        assert_eq!((out.src, out.dst), (to, backend), "{what}");
        assert_eq!(out.payload, b"GET /", "{what}");
        let back = decode(&n.forward(INT, &backend_data(backend, to), EXT));
        assert_eq!((back.src, back.dst), (vip, client), "{what}");
        assert_eq!(back.payload, b"200 OK", "{what}");
        assert_eq!(n.counter(Counter::ResetBackendDown), 0, "{what}");
        assert_eq!(entries(&n), 1, "{what}");
    }
}

/// A reset-pending generation leaves every other flow alone: they take the
/// general path and are forwarded as before; when the backend comes back
/// (a generation without resets), nothing is reset any more.
#[test]
fn other_flows_are_untouched_and_an_up_backend_resets_nothing() {
    let cfg = config_with(Some("reset"));
    let mut n = node();
    let vip = sa(VIP4, 80);
    let vip6 = sa(VIP6, 80);
    // Two IPv4 connections on different backends, one IPv6.
    let c1 = client_of(vip, 40000);
    let (b1, _) = handshake(&mut n, c1, vip);
    let (mut c2, mut b2) = (c1, b1);
    for port in 40001..40100 {
        let c = client_of(vip, port);
        let (b, _) = handshake(&mut n, c, vip);
        if b != b1 {
            (c2, b2) = (c, b);
            break;
        }
    }
    assert_ne!(b2, b1, "a second backend");
    let c6 = client_of(vip6, 40000);
    let (b6, _) = handshake(&mut n, c6, vip6);
    // The express lane takes established flows, except while some flow
    // may have to be reset.
    let lane = |n: &Node| {
        n.w.pipeline
            .express_prepare(&client_data(c2, vip), &mut Prepared::default(), None)
    };
    assert!(lane(&n));
    down(&mut n, &cfg, VIP_TCP4, b1.ip());
    assert!(n.w.pipeline.lb().tables().unwrap().reset_pending);
    assert!(!lane(&n));
    for _ in 0..3 {
        assert_eq!(decode(&n.forward(EXT, &client_data(c2, vip), INT)).dst, b2);
        assert_eq!(decode(&n.forward(EXT, &client_data(c6, vip6), INT)).dst, b6);
    }
    assert_eq!(n.counter(Counter::ResetBackendDown), 0);
    // b1 back up before its connection sent anything: kept.
    let up = generation_with_states(&cfg, 3, &|_, _| None);
    assert!(!up.reset_pending);
    adopt_generation(&mut n, up);
    assert!(lane(&n));
    assert_eq!(decode(&n.forward(EXT, &client_data(c1, vip), INT)).dst, b1);
    assert_eq!(n.counter(Counter::ResetBackendDown), 0);
}

/// PROXY protocol v2 shifts the client's sequence numbers towards the
/// backend by the header length L. A RST made from a packet needs no
/// translation: to the backend it carries the backend's acknowledgment
/// (which counts the header), to the client the client's.
#[test]
fn proxy_protocol_flows_are_reset_in_each_end_s_own_sequence_space() {
    let text = config_text(&[1, 1, 1]).replacen(
        "mode = \"fullnat\"\nmaglev_table_size = 1021\n",
        "mode = \"fullnat\"\nproxy_protocol = \"v2\"\nmaglev_table_size = 1021\n\
         [vip.health]\nkind = \"tcp\"\non_down = \"reset\"\n",
        1,
    );
    let cfg = Config::from_toml_str(&text, "pp.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut n = node();
    adopt_generation(&mut n, generation_with_states(&cfg, 2, &|_, _| None));
    let vip = sa(VIP4, 80);
    // Two connections, each with a first data segment (header inserted) and
    // the backend's acknowledgment of it.
    let mut conns = Vec::new();
    for port in [40000, 40001] {
        let client = client_of(vip, port);
        let mut syn = Pkt::tcp(client, vip, SYN);
        syn.seq = 1000;
        let fwd = decode(&n.forward(EXT, &syn.build(), INT));
        let (backend, local) = (fwd.dst, fwd.src);
        let mut synack = Pkt::tcp(backend, local, SYN | ACK).by_backend();
        (synack.seq, synack.ack) = (9000, 1001);
        n.forward(INT, &synack.build(), EXT);
        let mut ack = Pkt::tcp(client, vip, ACK);
        (ack.seq, ack.ack) = (1001, 9001);
        n.exchange(EXT, &ack.build());
        let mut data = Pkt::tcp(client, vip, ACK | PSH).payload(b"hello");
        (data.seq, data.ack) = (1001, 9001);
        let out = decode(&n.forward(EXT, &data.build(), INT));
        let l = out.payload.len() as u32 - 5;
        assert!(l >= 28 && out.payload.ends_with(b"hello"), "header + data");
        let backend_ack = 1001 + l + 5;
        let mut bk = Pkt::tcp(backend, local, ACK).by_backend();
        (bk.seq, bk.ack) = (9001, backend_ack);
        let back = decode(&n.forward(INT, &bk.build(), EXT));
        assert_eq!(back.ack, 1006, "the client sees its own sequence space");
        conns.push((client, backend, local, backend_ack));
    }
    let downs: Vec<IpAddr> = conns.iter().map(|c| c.1.ip()).collect();
    let t = generation_with_states(&cfg, 3, &|vi, a| {
        (vi == VIP_TCP4 as usize && downs.contains(&a)).then_some((1, BackendState::Down))
    });
    assert!(t.reset_pending);
    adopt_generation(&mut n, t);

    // The backend's next segment: RST in the backend's space (header counted).
    let (_, backend, local, backend_ack) = conns[0];
    let mut bk = Pkt::tcp(backend, local, ACK | PSH)
        .payload(b"late")
        .by_backend();
    (bk.seq, bk.ack) = (9001, backend_ack);
    let rst = decode(&n.forward(INT, &bk.build(), INT));
    assert_eq!((rst.src, rst.dst), (local, backend));
    assert_eq!((rst.tcp, rst.seq), (Some(RST), backend_ack));

    // The client's next segment: RST in the client's space.
    let (client, ..) = conns[1];
    let mut data = Pkt::tcp(client, vip, ACK | PSH).payload(b"more");
    (data.seq, data.ack) = (1006, 9001);
    let rst = decode(&n.forward(EXT, &data.build(), EXT));
    assert_eq!((rst.src, rst.dst), (vip, client));
    assert_eq!((rst.tcp, rst.seq), (Some(RST), 9001));
    assert_eq!(n.counter(Counter::ResetBackendDown), 2);
    assert_eq!(entries(&n), 0);
    assert_eq!(n.drops(), vec![]);
}
