//! `persistence_timeout` on byte fixtures: a client address keeps the
//! backend it was given (new source ports, new flows) while it comes back
//! within the timeout or has a flow open, even after a backend is added
//! (where Maglev alone moves some clients); it picks again once the pin
//! expired or its backend left the ring; a full table gives pins up,
//! counted. TCP and UDP, full-NAT, DNAT and DSR.

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use conf::counters::Counter;
use conf::tables::{build_generation, BackendState};
use conf::Config;
use dataplane::lb::Adopted;
use dataplane::routes::Routes;
use dataplane::standalone::adopted_from_config;
use dataplane::tables_source::inputs_from_generation;
use support::lb::flags::SYN;
use support::lb::*;

const TCP4_LINE: &str = "name = \"tcp4\"\n";

/// The config with the tcp4 VIP's backends of `weights` and its
/// `persistence_timeout` line (`None`: not set; `hash = "source"` then,
/// the stateless persistence to compare with).
fn text(weights: &[u32], timeout: Option<&str>) -> String {
    let line = match timeout {
        Some(t) => format!("{TCP4_LINE}persistence_timeout = {t}\n"),
        None => format!("{TCP4_LINE}hash = \"source\"\n"),
    };
    config_text(weights).replacen(TCP4_LINE, &line, 1)
}

fn adopted(text: &str, generation: u64) -> Adopted<'static> {
    let cfg = Config::from_toml_str(text, "lbtest.toml").unwrap_or_else(|e| panic!("{e}"));
    adopted_from_config(&cfg, generation).expect("tables")
}

/// One worker (4096-entry connection table) on `text`'s tables, every
/// tcp4 backend's MAC known (up to 4).
fn node_on(text: String) -> Node {
    node_with(
        text,
        Setup {
            conntrack: 4096,
            ..Setup::default()
        },
    )
}

fn node_with(text: String, setup: Setup) -> Node {
    let leaked: &'static str = Box::leak(text.into_boxed_str());
    let mut n = setup.build().pop().unwrap();
    n.publish(adopted(leaked, 1));
    n.poll();
    learn_tcp4_backends(&mut n);
    n
}

fn learn_tcp4_backends(n: &mut Node) {
    for i in 0..4 {
        let ip = IpAddr::from(fnat_backend4(i));
        n.learn(ip, host_mac(ip));
    }
    n.poll();
    n.w.io.take_tx(EXT);
    n.w.io.take_tx(INT);
}

/// Adopts `text`'s tables as generation `generation`.
fn switch(n: &mut Node, text: &str, generation: u64) {
    n.publish(adopted(text, generation));
    n.poll();
    learn_tcp4_backends(n);
}

/// The backend a client's SYN to the tcp4 VIP was forwarded to.
fn backend_of(n: &mut Node, client: SocketAddr) -> IpAddr {
    let out = decode(&n.forward(EXT, &Pkt::tcp(client, sa(VIP4, 80), SYN).build(), INT));
    out.dst.ip()
}

/// Client `i` (10.1.0.60 + i) on source port `port`.
fn client(i: u8, port: u16) -> SocketAddr {
    sa(Ipv4Addr::new(10, 1, 0, 60 + i), port)
}

const CLIENTS: u8 = 40;

/// Each client's backend for a SYN from source port `port`.
fn round(n: &mut Node, port: u16) -> BTreeMap<u8, IpAddr> {
    (0..CLIENTS)
        .map(|i| (i, backend_of(n, client(i, port))))
        .collect()
}

#[test]
fn one_client_keeps_its_backend_over_new_source_ports() {
    let mut n = node_on(text(&[1, 1, 1], Some("\"5m\"")));
    let first = backend_of(&mut n, sa(CLIENT4, 30000));
    for i in 1..40u16 {
        assert_eq!(
            backend_of(&mut n, sa(CLIENT4, 30000 + 97 * i)),
            first,
            "port {i}"
        );
    }
    assert_eq!(n.counter(Counter::PersistenceMisses), 1);
    assert_eq!(n.counter(Counter::PersistenceHits), 39);
    // Clients still spread: the first pick is Maglev's.
    let spread: std::collections::BTreeSet<IpAddr> = round(&mut n, 41000).into_values().collect();
    assert_eq!(spread.len(), 3, "{spread:?}");
    assert_eq!(n.drops(), vec![], "drop counters");
}

/// The point of the feature: a backend is added; with persistence every
/// client that came before stays where it was, while with `hash =
/// "source"` alone Maglev moves some of them to the new backend. New
/// clients reach the new backend either way.
#[test]
fn clients_stay_on_their_backend_when_a_backend_is_added() {
    let mut moved = BTreeMap::new();
    for timeout in [None, Some("300")] {
        let mut n = node_on(text(&[1, 1, 1], timeout));
        let before = round(&mut n, 30000);
        switch(&mut n, &text(&[1, 1, 1, 1], timeout), 2);
        let after = round(&mut n, 31000);
        let changed: Vec<u8> = (0..CLIENTS).filter(|i| before[i] != after[i]).collect();
        moved.insert(timeout.is_some(), changed);
        if timeout.is_some() {
            assert_eq!(n.counter(Counter::PersistenceHits), u64::from(CLIENTS));
            assert_eq!(n.counter(Counter::PersistenceMisses), u64::from(CLIENTS));
        }
        let newcomers: std::collections::BTreeSet<IpAddr> = (0..60u8)
            .map(|i| {
                backend_of(
                    &mut n,
                    sa(Ipv4Addr::new(10, 1, 0, 150 + i / 2), 50000 + u16::from(i)),
                )
            })
            .collect();
        assert!(
            newcomers.contains(&IpAddr::from(fnat_backend4(3))),
            "{timeout:?}: no new client reached the added backend: {newcomers:?}"
        );
        assert_eq!(n.drops(), vec![], "{timeout:?}: drop counters");
        assert_eq!(n.counter(Counter::PersistenceBackendGone), 0);
    }
    assert!(
        !moved[&false].is_empty(),
        "without persistence no client moved to the new backend"
    );
    assert_eq!(moved[&true], Vec::<u8>::new(), "persisted clients moved");
}

/// A client that Maglev would move once a fourth backend is added (`None`
/// if none of the clients would).
fn a_client_maglev_moves() -> u8 {
    let mut n = node_on(text(&[1, 1, 1], None));
    let before = round(&mut n, 30000);
    switch(&mut n, &text(&[1, 1, 1, 1], None), 2);
    let after = round(&mut n, 31000);
    (0..CLIENTS)
        .find(|i| before[i] != after[i])
        .expect("a client Maglev moves")
}

/// The pin outlives its timeout while a flow holds it (a half-open SYN
/// lives 30 s here, the pin's timeout is 2 s); once the last flow went and
/// the timeout passed, the client picks again.
#[test]
fn pin_holds_while_a_flow_lives_and_expires_after_the_timeout() {
    let c = a_client_maglev_moves();
    let mut n = node_on(text(&[1, 1, 1], Some("\"2s\"")));
    let pinned = backend_of(&mut n, client(c, 30000));
    switch(&mut n, &text(&[1, 1, 1, 1], Some("\"2s\"")), 2);
    // 10 s later the first flow (tcp_syn: 30 s) still holds the pin.
    n.advance_ms(10_000);
    assert_eq!(backend_of(&mut n, client(c, 30001)), pinned);
    assert_eq!(n.counter(Counter::PersistenceHits), 1);
    // Both flows expire (the sweep runs on every poll), the pin 2 s after
    // the last one's last packet.
    n.advance_ms(60_000);
    for _ in 0..200 {
        n.poll();
    }
    assert_eq!(n.counter(Counter::ConntrackExpired), 2);
    let now = backend_of(&mut n, client(c, 30002));
    assert_ne!(now, pinned, "the client kept an expired pin");
    assert_eq!(n.counter(Counter::PersistenceExpired), 1);
    assert_eq!(n.counter(Counter::PersistenceMisses), 2);
    // The new pick is the new ring's, and pinned in turn.
    assert_eq!(backend_of(&mut n, client(c, 30003)), now);
    assert_eq!(n.counter(Counter::PersistenceHits), 2);
}

/// With no flow left (`tcp_syn` of 1 s here), a pin lasts the timeout
/// after the client's last new flow, each new flow moving it on.
#[test]
fn each_new_flow_moves_the_deadline() {
    let c = a_client_maglev_moves();
    let mut n = node_with(
        text(&[1, 1, 1], Some("\"30s\"")),
        Setup {
            timeouts: conf::Timeouts {
                tcp_syn: 1,
                ..Default::default()
            },
            ..Setup::default()
        },
    );
    let pinned = backend_of(&mut n, client(c, 30000));
    switch(&mut n, &text(&[1, 1, 1, 1], Some("\"30s\"")), 2);
    let sweep = |n: &mut Node| {
        for _ in 0..100 {
            n.poll();
        }
    };
    for k in 1..6u16 {
        n.advance_ms(20_000);
        sweep(&mut n);
        assert_eq!(
            backend_of(&mut n, client(c, 30000 + k)),
            pinned,
            "visit {k}"
        );
    }
    assert_eq!(
        n.counter(Counter::ConntrackExpired),
        5,
        "every earlier flow went"
    );
    assert_eq!(n.counter(Counter::PersistenceHits), 5);
    n.advance_ms(31_000);
    sweep(&mut n);
    assert_ne!(backend_of(&mut n, client(c, 30010)), pinned);
    assert_eq!(n.counter(Counter::PersistenceExpired), 1);
}

/// The pinned backend goes down (health): the client picks again,
/// counted, and keeps its new backend even when the old one is back.
#[test]
fn backend_down_repicks_and_counts() {
    let t = text(&[1, 1, 1], Some("300"));
    let mut n = node_on(t.clone());
    let pinned = backend_of(&mut n, sa(CLIENT4, 30000));
    let idx = (0..3u8)
        .find(|&i| IpAddr::from(fnat_backend4(i)) == pinned)
        .unwrap() as usize;
    let cfg = Config::from_toml_str(&t, "lbtest.toml").unwrap();
    let down = |v: usize, b: usize| (v == 0 && b == idx).then_some((1, BackendState::Down));
    let gen = build_generation(&cfg, &down).unwrap();
    n.publish(Adopted::new(
        2,
        gen.flow_hash_key,
        inputs_from_generation(&gen),
        Routes::from_config(&cfg),
    ));
    n.poll();
    let now = backend_of(&mut n, sa(CLIENT4, 30001));
    assert_ne!(now, pinned);
    assert_eq!(n.counter(Counter::PersistenceBackendGone), 1);
    switch(&mut n, &t, 3);
    assert_eq!(
        backend_of(&mut n, sa(CLIENT4, 30002)),
        now,
        "back on the old one"
    );
    assert_eq!(n.counter(Counter::PersistenceBackendGone), 1);
    assert_eq!(n.counter(Counter::PersistenceHits), 1);
    assert_eq!(n.drops(), vec![], "drop counters");
}

/// More clients than the table holds (4096-entry connection table: 1024
/// pins): pins are given up for newer clients, counted, and the newest
/// stay pinned.
#[test]
fn a_full_table_evicts_pins_and_counts() {
    let mut n = node_on(text(&[1, 1, 1], Some("300")));
    let clients: Vec<SocketAddr> = (0..2000u32)
        .map(|i| sa(Ipv4Addr::from(0x0a03_0000 + i), 40000))
        .collect();
    for &c in &clients {
        backend_of(&mut n, c);
    }
    assert_eq!(n.counter(Counter::PersistenceMisses), 2000);
    let evicted = n.counter(Counter::PersistenceEvictions);
    assert!(evicted >= 2000 - 1024, "{evicted} evictions");
    assert_eq!(n.w.pipeline.lb().persistence().capacity(), 1024);
    assert_eq!(
        n.w.pipeline.lb().persistence().live(0),
        2000 - evicted as usize
    );
    // The last client's pin is there.
    let last = *clients.last().unwrap();
    backend_of(&mut n, sa(last.ip(), 40001));
    assert_eq!(n.counter(Counter::PersistenceHits), 1);
    assert_eq!(n.drops(), vec![], "drop counters");
}

/// Two workers pick a client's first backend alike (by its address), so
/// RSS spreading its connections over them does not split it.
#[test]
fn workers_agree_on_a_new_clients_backend() {
    let leaked: &'static str = Box::leak(text(&[1, 1, 1], Some("300")).into_boxed_str());
    let mut nodes = Setup {
        workers: 2,
        ..Setup::default()
    }
    .build();
    for n in &mut nodes {
        n.publish(adopted(leaked, 1));
        n.poll();
        learn_tcp4_backends(n);
    }
    for i in 0..CLIENTS {
        let a = backend_of(&mut nodes[0], client(i, 30000));
        let b = backend_of(&mut nodes[1], client(i, 30001));
        assert_eq!(a, b, "client {i}");
    }
}

/// The DSR VIP's backends of [`udp_dnat_and_dsr_persist`].
fn dsr_backend(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 2, 0, 31 + i)
}

/// UDP (full-NAT), DNAT and DSR VIPs persist too: one client's flows from
/// new source ports, across a backend added, reach one backend.
#[test]
fn udp_dnat_and_dsr_persist() {
    const DSR: &str = "[[vip]]\nname = \"dsr\"\naddress = \"10.1.0.110\"\nport = 80\nmode = \"dsr\"\nmaglev_table_size = 1021\npersistence_timeout = 300\n";
    let with = |extra: usize| {
        let mut t = config_text(&[1, 1, 1])
            .replacen(
                "name = \"udp4\"\n",
                "name = \"udp4\"\npersistence_timeout = 300\n",
                1,
            )
            .replacen(
                "name = \"dnat4\"\n",
                "name = \"dnat4\"\npersistence_timeout = 300\n",
                1,
            );
        t.push_str(DSR);
        for i in 0..3 + extra as u8 {
            t.push_str(&format!(
                "[[vip.backend]]\naddress = \"{}\"\nport = 80\n",
                dsr_backend(i)
            ));
        }
        if extra > 0 {
            let udp_last = format!(
                "address = \"{}\"\nport = 5353\nweight = 1\n",
                fnat_backend4(2)
            );
            let udp_new = format!(
                "{udp_last}[[vip.backend]]\naddress = \"{}\"\nport = 5353\nweight = 1\n",
                fnat_backend4(3)
            );
            t = t.replacen(&udp_last, &udp_new, 1);
            let dnat_last = format!(
                "address = \"{}\"\nport = 8080\nweight = 1\n",
                dnat_backend4(2)
            );
            let dnat_new = format!(
                "{dnat_last}[[vip.backend]]\naddress = \"{}\"\nport = 8080\nweight = 1\n",
                dnat_backend4(3)
            );
            t = t.replacen(&dnat_last, &dnat_new, 1);
        }
        t
    };
    let mut n = node_on(with(0));
    let learn = |n: &mut Node| {
        for i in 0..4 {
            for ip in [
                IpAddr::from(dsr_backend(i)),
                dnat_backend4(i).into(),
                fnat_backend4(i).into(),
            ] {
                n.learn(ip, host_mac(ip));
            }
        }
        n.poll();
        n.w.io.take_tx(EXT);
        n.w.io.take_tx(INT);
    };
    learn(&mut n);
    let udp = |n: &mut Node, c: SocketAddr| {
        decode(&n.forward(EXT, &Pkt::udp(c, sa(VIP4, 53), b"q").build(), INT))
            .dst
            .ip()
    };
    let dnat = |n: &mut Node, c: SocketAddr| {
        decode(&n.forward(EXT, &Pkt::tcp(c, sa(DNAT4, 80), SYN).build(), INT))
            .dst
            .ip()
    };
    let dsr = |n: &mut Node, c: SocketAddr| {
        let out = n.forward(
            EXT,
            &Pkt::tcp(c, sa(Ipv4Addr::new(10, 1, 0, 110), 80), SYN).build(),
            INT,
        );
        let mac: [u8; 6] = out[..6].try_into().unwrap();
        (0..4u8)
            .map(|i| IpAddr::from(dsr_backend(i)))
            .find(|&ip| host_mac(ip) == mac)
            .expect("a DSR backend's MAC")
    };
    type Pick = fn(&mut Node, SocketAddr) -> IpAddr;
    let kinds: [(&str, Pick); 3] = [("udp", udp), ("dnat", dnat), ("dsr", dsr)];
    let mut before = BTreeMap::new();
    for (kind, f) in kinds {
        for i in 0..CLIENTS {
            before.insert((kind, i), f(&mut n, client(i, 30000)));
        }
    }
    n.publish(adopted(Box::leak(with(1).into_boxed_str()), 2));
    n.poll();
    learn(&mut n);
    for (kind, f) in kinds {
        for i in 0..CLIENTS {
            assert_eq!(
                f(&mut n, client(i, 31000)),
                before[&(kind, i)],
                "{kind} client {i}"
            );
        }
    }
    assert_eq!(n.counter(Counter::PersistenceHits), 3 * u64::from(CLIENTS));
    assert_eq!(n.drops(), vec![], "drop counters");
}
