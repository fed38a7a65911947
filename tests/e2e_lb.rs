//! Load balancing with real kernels on both sides: a client namespace
//! reaches a VIP served by three backends in another namespace, through
//! border-dp on TAP ports (and, for two of the flows, on net_af_xdp ports
//! over veth pairs), in full-NAT and DNAT mode, over IPv4 and IPv6, for TCP
//! and UDP.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::*;
use conf::counters::Counter;
use conf::state::FlowStat;

struct Topo {
    dp: BorderDp,
    _dir: TempDir,
    cli: Netns,
    bk: Netns,
    _lb: Netns,
}

#[derive(Clone, Copy)]
struct Plan {
    tag: &'static str,
    /// Second octet (v4) / second group (v6) of the client-side subnet; the
    /// backend side is n + 1.
    n: u8,
    v6: bool,
    mode: &'static str,
    proto: &'static str,
    backends: u8,
    kind: PortKind,
}

impl Plan {
    fn ext(&self, host: u8) -> String {
        subnet_host(self.n, self.v6, host)
    }
    fn int(&self, host: u8) -> String {
        subnet_host(self.n + 1, self.v6, host)
    }
    fn plen(&self) -> u8 {
        subnet_prefix_len(self.v6)
    }
    fn vip(&self) -> SocketAddr {
        SocketAddr::new(self.ext(100).parse().unwrap(), 80)
    }
    fn backend(&self, i: u8) -> SocketAddr {
        SocketAddr::new(self.int(11 + i).parse().unwrap(), 8080)
    }
    fn config(&self) -> String {
        let t = self.tag;
        let mut c = two_port_config_on(
            self.kind,
            &format!("e2e{t}"),
            t,
            &format!("{}/{}", self.ext(1), self.plen()),
            &format!("{}/{}", self.int(1), self.plen()),
            &format!("unix:///run/border/e2e{t}.sock"),
        );
        c += &format!(
            r#"
[[vip]]
name = "v"
address = "{vip}"
port = 80
protocol = "{proto}"
mode = "{mode}"
maglev_table_size = 1021
"#,
            vip = self.ext(100),
            proto = self.proto,
            mode = self.mode,
        );
        for i in 0..self.backends {
            c += &format!(
                "[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
                self.backend(i).ip()
            );
        }
        c
    }

    fn start(&self) -> Topo {
        self.start_with(&self.config())
    }

    fn start_with(&self, config: &str) -> Topo {
        let t = self.tag;
        let lb = Netns::new(&format!("{t}-lb"));
        let cli = Netns::new(&format!("{t}-cli"));
        let bk = Netns::new(&format!("{t}-bk"));
        let dir = TempDir::new(t);
        let (ext, int) = (format!("{t}-ext"), format!("{t}-int"));
        self.kind.prepare(&lb, &cli, &ext);
        self.kind.prepare(&lb, &bk, &int);
        let dp = BorderDp::start(&lb, &dir, &format!("e2e{t}"), config);
        let p = self.plen();
        let cli_addr = format!("{}/{p}", self.ext(2));
        self.kind.connect(&lb, &cli, &ext, &[&cli_addr]);
        let bk_addrs: Vec<String> = (0..self.backends)
            .map(|i| format!("{}/{p}", self.backend(i).ip()))
            .collect();
        let bk_refs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
        self.kind.connect(&lb, &bk, &int, &bk_refs);
        let fam = if self.v6 { "-6" } else { "-4" };
        cli.run(&["ip", fam, "route", "add", "default", "via", &self.ext(1)]);
        if self.mode == "dnat" {
            // DNAT: backends answer the client directly, through the appliance.
            bk.run(&["ip", fam, "route", "add", "default", "via", &self.int(1)]);
        }
        Topo {
            dp,
            _dir: dir,
            cli,
            bk,
            _lb: lb,
        }
    }
}

fn check_spread(names: &[String], backends: u8, total: usize) {
    let t = tally(names);
    assert_eq!(
        t.len(),
        backends as usize,
        "every backend must get connections: {t:?}"
    );
    for (name, n) in &t {
        let share = *n as f64 / total as f64;
        assert!(
            (0.20..=0.47).contains(&share),
            "backend {name} got {n} of {total} connections ({:.1}%): {t:?}",
            share * 100.0
        );
    }
}

fn tcp_spread(plan: Plan) {
    let topo = plan.start();
    let names: Vec<(&str, SocketAddr)> = [
        ("b0", plan.backend(0)),
        ("b1", plan.backend(1)),
        ("b2", plan.backend(2)),
    ]
    .into_iter()
    .take(plan.backends as usize)
    .collect();
    let _servers = TcpBackends::start(&topo.bk.name, &names);
    let lines = tcp_names(&topo.cli.name, plan.vip(), 300);
    let (who, peers): (Vec<String>, Vec<String>) = lines
        .iter()
        .map(|l| {
            let mut it = l.split_whitespace();
            (
                it.next().unwrap_or("").to_string(),
                it.next().unwrap_or("").to_string(),
            )
        })
        .unzip();
    check_spread(&who, plan.backends, 300);
    // Full-NAT: backends see the appliance's local address; DNAT: the client.
    let expected_peer: IpAddr = if plan.mode == "fullnat" {
        plan.int(1).parse().unwrap()
    } else {
        plan.ext(2).parse().unwrap()
    };
    for p in &peers {
        let seen: IpAddr = p.parse().unwrap_or_else(|_| panic!("bad peer {p:?}"));
        assert_eq!(seen, expected_peer, "backend saw the wrong source address");
    }
    let state = topo.dp.state();
    let vip_key = conf::state::vip_stat_key("v");
    wait_until("counters published", Duration::from_secs(5), || {
        state.vip_total(vip_key, FlowStat::NewConnections) >= 300
    });
    assert!(state.total(Counter::NewFlows) >= 300);
    let members: Vec<(IpAddr, u16)> = (0..plan.backends)
        .map(|i| (plan.backend(i).ip(), 8080))
        .collect();
    let ids = conf::tables::backend_ids("v", &members);
    let per_backend: Vec<u64> = ids
        .iter()
        .map(|id| state.backend_total(*id, FlowStat::NewConnections))
        .collect();
    assert!(per_backend.iter().all(|n| *n > 0), "{per_backend:?}");
    assert_eq!(
        per_backend.iter().sum::<u64>(),
        state.vip_total(vip_key, FlowStat::NewConnections)
    );
    assert_eq!(state.total(Counter::DropNoBackend), 0);
}

#[test]
fn fullnat_ipv4_spreads_connections_over_three_backends() {
    tcp_spread(Plan {
        tag: "lf4",
        n: 71,
        v6: false,
        mode: "fullnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::Tap,
    });
}

#[test]
fn dnat_ipv4_spreads_connections_and_preserves_the_client_address() {
    tcp_spread(Plan {
        tag: "ld4",
        n: 73,
        v6: false,
        mode: "dnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::Tap,
    });
}

#[test]
fn fullnat_ipv6_spreads_connections_over_three_backends() {
    tcp_spread(Plan {
        tag: "lf6",
        n: 75,
        v6: true,
        mode: "fullnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::Tap,
    });
}

#[test]
fn dnat_ipv6_spreads_connections_and_preserves_the_client_address() {
    tcp_spread(Plan {
        tag: "ld6",
        n: 77,
        v6: true,
        mode: "dnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::Tap,
    });
}

#[test]
fn fullnat_ipv4_over_af_xdp_spreads_connections_over_three_backends() {
    tcp_spread(Plan {
        tag: "lx4",
        n: 95,
        v6: false,
        mode: "fullnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::AfXdp,
    });
}

#[test]
fn dnat_ipv6_over_af_xdp_spreads_connections_and_preserves_the_client_address() {
    tcp_spread(Plan {
        tag: "lx6",
        n: 97,
        v6: true,
        mode: "dnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::AfXdp,
    });
}

#[test]
fn udp_vip_answers_requests_from_every_backend() {
    let plan = Plan {
        tag: "lu4",
        n: 79,
        v6: false,
        mode: "fullnat",
        proto: "udp",
        backends: 3,
        kind: PortKind::Tap,
    };
    let topo = plan.start();
    let _servers = UdpBackends::start(
        &topo.bk.name,
        &[
            ("b0", plan.backend(0)),
            ("b1", plan.backend(1)),
            ("b2", plan.backend(2)),
        ],
    );
    let vip = SocketAddr::new(plan.vip().ip(), 80);
    let replies = in_netns(&topo.cli.name, move || {
        let mut got = Vec::new();
        for i in 0..150u16 {
            // Distinct source ports by construction: ephemeral ones repeat
            // now and then, and a repeated 5-tuple is the same flow.
            let s = std::net::UdpSocket::bind(("0.0.0.0", 20_000 + i)).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let msg = format!("req-{i}");
            let mut buf = [0u8; 256];
            let mut answer = None;
            for _ in 0..10 {
                s.send_to(msg.as_bytes(), vip).unwrap();
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    assert_eq!(from, vip, "reply must come from the VIP");
                    answer = Some(String::from_utf8_lossy(&buf[..n]).to_string());
                    break;
                }
            }
            got.push(answer.unwrap_or_else(|| panic!("no reply to {msg}")));
        }
        got
    })
    .join()
    .unwrap();
    let mut names = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        let (name, payload) = r.split_once(':').unwrap();
        assert_eq!(payload, format!("req-{i}"));
        names.push(name.to_string());
    }
    check_spread(&names, 3, 150);
    wait_until("new flows counted", Duration::from_secs(5), || {
        topo.dp.counter(Counter::NewFlows) >= 150
    });
}

#[test]
fn long_lived_connection_survives_adding_a_fourth_backend() {
    use std::io::{BufRead, BufReader, Read, Write};
    let plan = Plan {
        tag: "lr4",
        n: 91,
        v6: false,
        mode: "fullnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::Tap,
    };
    let topo = plan.start();
    // The fourth backend already listens; only the config does not know it.
    topo.bk.run(&[
        "ip",
        "addr",
        "add",
        &format!("{}/24", plan.backend(3).ip()),
        "dev",
        "lr4-int",
    ]);
    let _servers = TcpBackends::start(
        &topo.bk.name,
        &[
            ("b0", plan.backend(0)),
            ("b1", plan.backend(1)),
            ("b2", plan.backend(2)),
            ("b3", plan.backend(3)),
        ],
    );
    let vip = plan.vip();
    let (to_client, from_test) = std::sync::mpsc::channel::<&'static str>();
    let (to_test, from_client) = std::sync::mpsc::channel::<String>();
    let client = in_netns(&topo.cli.name, move || {
        let s = connect_retry(vip, Duration::from_secs(10)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reader = BufReader::new(s.try_clone().unwrap());
        let mut hello = String::new();
        reader.read_line(&mut hello).unwrap();
        to_test.send(hello.trim().to_string()).unwrap();
        let mut s = s;
        let mut round = 0u32;
        // Echo 256 KiB per round, byte-exact, until told to stop.
        loop {
            let chunk: Vec<u8> = (0..262_144u32)
                .map(|i| (i.wrapping_mul(31).wrapping_add(round)) as u8)
                .collect();
            s.write_all(&chunk).unwrap();
            let mut back = vec![0u8; chunk.len()];
            reader.read_exact(&mut back).unwrap();
            assert!(back == chunk, "echo differs in round {round}");
            round += 1;
            to_test.send(format!("round {round}")).unwrap();
            if let Ok("stop") = from_test.recv() {
                break;
            }
        }
        round
    });
    let first = from_client
        .recv_timeout(Duration::from_secs(20))
        .expect("connection established");
    let _ = from_client
        .recv_timeout(Duration::from_secs(20))
        .expect("first round");
    to_client.send("go").unwrap();

    // Add the fourth backend and reload.
    let mut cfg = plan.config();
    cfg += &format!(
        "[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
        plan.backend(3).ip()
    );
    let mut with_four = topo;
    with_four.dp.reload(&cfg);
    let state = with_four.dp.state();
    wait_until("workers on generation 2", Duration::from_secs(10), || {
        (0..state.n_workers()).all(|w| state.worker(w).unwrap().applied_generation() >= 2)
    });
    for _ in 0..4 {
        let _ = from_client
            .recv_timeout(Duration::from_secs(20))
            .expect("round after reload");
        to_client.send("go").unwrap();
    }
    let _ = from_client
        .recv_timeout(Duration::from_secs(20))
        .expect("last round");
    to_client.send("stop").unwrap();
    let rounds = client.join().expect("client thread");
    assert!(rounds >= 5, "only {rounds} rounds");
    assert!(first.starts_with('b'), "greeting {first:?}");

    // New connections now use all four backends.
    let lines = tcp_names(&with_four.cli.name, vip, 200);
    let who: Vec<String> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    let t = tally(&who);
    assert_eq!(
        t.len(),
        4,
        "all four backends must get new connections: {t:?}"
    );
    assert_eq!(with_four.dp.counter(Counter::DropNoConntrack), 0);
}

#[test]
fn two_workers_share_the_load_and_hand_over_replies() {
    let plan = Plan {
        tag: "lw2",
        n: 93,
        v6: false,
        mode: "fullnat",
        proto: "tcp",
        backends: 3,
        kind: PortKind::Tap,
    };
    let cfg = plan.config().replace(
        "worker_lcores = [1]",
        "worker_lcores = [1, 2]\nlcore_cpus = [0, 1, 1]",
    );
    let topo = plan.start_with(&cfg);
    let _servers = TcpBackends::start(
        &topo.bk.name,
        &[
            ("b0", plan.backend(0)),
            ("b1", plan.backend(1)),
            ("b2", plan.backend(2)),
        ],
    );
    let lines = tcp_names(&topo.cli.name, plan.vip(), 300);
    let who: Vec<String> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    check_spread(&who, 3, 300);
    let state = topo.dp.state();
    assert_eq!(state.n_workers(), 2);
    wait_until("both workers counted", Duration::from_secs(5), || {
        (0..2).all(|w| state.worker(w).unwrap().get(Counter::RxPackets) > 0)
    });
    let per_worker: Vec<u64> = (0..2)
        .map(|w| state.worker(w).unwrap().get(Counter::NewFlows))
        .collect();
    eprintln!(
        "new flows per worker {per_worker:?}, handoffs sent {} received {}",
        state.total(Counter::HandoffSent),
        state.total(Counter::HandoffReceived)
    );
    assert!(
        per_worker.iter().all(|n| *n > 0),
        "RSS must spread new flows: {per_worker:?}"
    );
    // The TAP's kernel side picks a queue per flow direction, so replies
    // often reach the worker that does not own their local port.
    assert!(
        state.total(Counter::HandoffSent) > 0,
        "no reply was handed over"
    );
    // Late FINs and ACKs may still be crossing between the workers, and the
    // two totals are read at different instants: wait for them to settle.
    wait_until("handoffs sent == received", Duration::from_secs(5), || {
        state.total(Counter::HandoffSent) == state.total(Counter::HandoffReceived)
    });
    assert_eq!(state.total(Counter::DropHandoffFull), 0);
    assert_eq!(state.total(Counter::DropNoConntrack), 0);
}
