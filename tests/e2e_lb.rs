//! Load balancing with real kernels on both sides: a client namespace
//! reaches a VIP served by three backends in another namespace, through
//! border-dp on TAP ports, in full-NAT and DNAT mode, over IPv4 and IPv6,
//! for TCP and UDP.

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
}

impl Plan {
    fn ext(&self, host: u8) -> String {
        if self.v6 {
            format!("fd00:{}::{host:x}", self.n)
        } else {
            format!("10.{}.0.{host}", self.n)
        }
    }
    fn int(&self, host: u8) -> String {
        if self.v6 {
            format!("fd00:{}::{host:x}", self.n + 1)
        } else {
            format!("10.{}.0.{host}", self.n + 1)
        }
    }
    fn plen(&self) -> u8 {
        if self.v6 {
            64
        } else {
            24
        }
    }
    fn vip(&self) -> SocketAddr {
        SocketAddr::new(self.ext(100).parse().unwrap(), 80)
    }
    fn backend(&self, i: u8) -> SocketAddr {
        SocketAddr::new(self.int(11 + i).parse().unwrap(), 8080)
    }
    fn config(&self) -> String {
        let t = self.tag;
        let mut c = format!(
            r#"
instance = "e2e{t}"
[dataplane]
main_lcore = 0
worker_lcores = [1]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 16384
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface={t}-ext"
addresses = ["{ext}/{plen}"]
host_interface = "k{t}-ext"

[[port]]
name = "int"
devargs = "net_tap1,iface={t}-int"
addresses = ["{int}/{plen}"]
host_interface = "k{t}-int"
local_addresses = ["{int}"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix:///run/border/e2e{t}.sock"

[[vip]]
name = "v"
address = "{vip}"
port = 80
protocol = "{proto}"
mode = "{mode}"
maglev_table_size = 1021
"#,
            ext = self.ext(1),
            int = self.int(1),
            plen = self.plen(),
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
        let t = self.tag;
        let lb = Netns::new(&format!("{t}-lb"));
        let cli = Netns::new(&format!("{t}-cli"));
        let bk = Netns::new(&format!("{t}-bk"));
        let dir = TempDir::new(t);
        let dp = BorderDp::start(&lb, &dir, &format!("e2e{t}"), &self.config());
        wait_iface(&lb, &format!("{t}-ext"));
        wait_iface(&lb, &format!("{t}-int"));
        let p = self.plen();
        cli.adopt(&lb, &format!("{t}-ext"), &[&format!("{}/{p}", self.ext(2))]);
        let bk_addrs: Vec<String> = (0..self.backends)
            .map(|i| format!("{}/{p}", self.backend(i).ip()))
            .collect();
        let bk_refs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
        bk.adopt(&lb, &format!("{t}-int"), &bk_refs);
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
    wait_until("counters published", Duration::from_secs(5), || {
        state.vip_total(0, FlowStat::NewConnections) >= 300
    });
    assert!(state.total(Counter::NewFlows) >= 300);
    let per_backend: u64 = (0..plan.backends as u32)
        .map(|b| state.backend_total(b, FlowStat::NewConnections))
        .sum();
    assert_eq!(per_backend, state.vip_total(0, FlowStat::NewConnections));
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
        for i in 0..150 {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
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
    assert!(topo.dp.counter(Counter::NewFlows) >= 150);
}
