//! Source persistence with real kernels: a VIP with `hash = "source"`
//! sends every connection of one client address to one backend whatever
//! its source port, while several client addresses still spread over the
//! backends; the same VIP with the default 5-tuple hash spreads one
//! client's connections (border-dp on TAP ports, full-NAT, IPv4).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::*;
use conf::counters::Counter;

/// Tags `tk1` (hash = "source") and `tk2` (5-tuple): namespaces
/// `<tag>-lb|cli|bk`, instance `e2e<tag>`.
/// Client side 10.146.0.0/24, backend side 10.147.0.0/24.
const EXT_NET: u8 = 146;
const INT_NET: u8 = 147;
/// Client addresses 10.146.0.2 .. 10.146.0.(2 + CLIENTS - 1).
const CLIENTS: u8 = 16;

fn ext(host: u8) -> String {
    subnet_host(EXT_NET, false, host)
}

fn int(host: u8) -> String {
    subnet_host(INT_NET, false, host)
}

fn vip() -> SocketAddr {
    SocketAddr::new(ext(100).parse().unwrap(), 80)
}

fn backend(i: u8) -> SocketAddr {
    SocketAddr::new(int(11 + i).parse().unwrap(), 8080)
}

fn config(tag: &str, hash: &str) -> String {
    let mut c = two_port_config(
        &format!("e2e{tag}"),
        tag,
        &format!("{}/24", ext(1)),
        &format!("{}/24", int(1)),
        &format!("unix:///run/border/e2e{tag}.sock"),
    );
    c += &format!(
        "\n[[vip]]\nname = \"v\"\naddress = \"{}\"\nport = 80\nmaglev_table_size = 1021\nhash = \"{hash}\"\n",
        ext(100)
    );
    for i in 0..3 {
        c += &format!(
            "[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
            backend(i).ip()
        );
    }
    c
}

struct Topo {
    dp: BorderDp,
    _dir: TempDir,
    cli: Netns,
    _bk: Netns,
    _lb: Netns,
    _servers: TcpBackends,
}

fn start(tag: &str, hash: &str) -> Topo {
    let lb = Netns::new(&format!("{tag}-lb"));
    let cli = Netns::new(&format!("{tag}-cli"));
    let bk = Netns::new(&format!("{tag}-bk"));
    let dir = TempDir::new(tag);
    let dp = BorderDp::start(&lb, &dir, &format!("e2e{tag}"), &config(tag, hash));
    let cli_addrs: Vec<String> = (0..CLIENTS).map(|i| format!("{}/24", ext(2 + i))).collect();
    let cli_refs: Vec<&str> = cli_addrs.iter().map(String::as_str).collect();
    PortKind::Tap.connect(&lb, &cli, &format!("{tag}-ext"), &cli_refs);
    let bk_addrs: Vec<String> = (0..3).map(|i| format!("{}/24", backend(i).ip())).collect();
    let bk_refs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
    PortKind::Tap.connect(&lb, &bk, &format!("{tag}-int"), &bk_refs);
    cli.run(&["ip", "-4", "route", "add", "default", "via", &ext(1)]);
    let servers = TcpBackends::start(
        &bk.name,
        &[("b0", backend(0)), ("b1", backend(1)), ("b2", backend(2))],
    );
    Topo {
        dp,
        _dir: dir,
        cli,
        _bk: bk,
        _lb: lb,
        _servers: servers,
    }
}

/// The greeting (backend name) and local port of one connection from
/// `src`, retried while the appliance resolves its next hops.
fn greeting_from(src: Ipv4Addr) -> (String, u16) {
    let mut last = None;
    for _ in 0..50 {
        match connect_from(src, vip()) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let port = s.local_addr().unwrap().port();
                let mut line = String::new();
                BufReader::new(s).read_line(&mut line).unwrap();
                let name = line.split_whitespace().next().unwrap_or("").to_string();
                return (name, port);
            }
            Err(e) => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    panic!("no connection from {src}: {last:?}");
}

/// Backend names of `n` connections from the first client address (each
/// from a new source port) and of one connection from each of the others.
fn run_clients(topo: &Topo, n: usize) -> (Vec<(String, u16)>, Vec<String>) {
    in_netns(&topo.cli.name, move || {
        let first: Ipv4Addr = ext(2).parse().unwrap();
        let one = (0..n).map(|_| greeting_from(first)).collect();
        let others = (1..CLIENTS)
            .map(|i| greeting_from(ext(2 + i).parse().unwrap()).0)
            .collect();
        (one, others)
    })
    .join()
    .unwrap()
}

#[test]
fn hash_source_keeps_a_client_on_one_backend_while_clients_spread() {
    let topo = start("tk1", "source");
    let (one, others) = run_clients(&topo, 60);
    let ports: BTreeSet<u16> = one.iter().map(|(_, p)| *p).collect();
    assert_eq!(ports.len(), 60, "60 connections from 60 source ports");
    let backends: BTreeSet<&str> = one.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(
        backends.len(),
        1,
        "one client's connections reached {backends:?}"
    );
    assert!(backends.iter().all(|b| b.starts_with('b')), "{backends:?}");
    let spread: BTreeSet<&str> = others.iter().map(String::as_str).collect();
    assert!(
        spread.len() >= 2,
        "{} other clients all reached {spread:?}",
        CLIENTS - 1
    );
    assert_eq!(topo.dp.counter(Counter::DropNoBackend), 0);
}

#[test]
fn five_tuple_hash_spreads_one_clients_connections() {
    let topo = start("tk2", "5-tuple");
    let (one, _) = run_clients(&topo, 60);
    let backends: BTreeSet<&str> = one.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(
        backends.len(),
        3,
        "60 connections of one client reached only {backends:?}"
    );
}
