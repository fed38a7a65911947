//! `persistence_timeout` with real kernels, border-mgmt publishing and
//! border-dp following: 24 client addresses each open connections (new
//! source ports) to a VIP with three backends, `borderctl backend add`
//! adds a fourth, and each client opens more. With `persistence_timeout`
//! every client stays on the backend it had; with the stateless `hash =
//! "source"` (the same first pick, no pin) some clients move to the new
//! backend, which new clients reach either way. Full-NAT, IPv4, TAP ports.
//!
//! Tag `pt`: namespaces `pt-lb|cli|bk`, instance `e2ept`; client side
//! 10.160.0.0/24, backend side 10.161.0.0/24. The two runs share the tag
//! and run one after the other in the one test.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use conf::counters::Counter;

const TAG: &str = "pt";
/// Client addresses 10.160.0.2 .. 10.160.0.(2 + CLIENTS - 1).
const CLIENTS: u8 = 24;
/// Clients that come only after the backend was added: 10.160.0.100 ..
const NEWCOMERS: u8 = 24;

fn ext(host: u8) -> String {
    format!("10.160.0.{host}")
}

fn int(host: u8) -> String {
    format!("10.161.0.{host}")
}

fn vip() -> SocketAddr {
    SocketAddr::new(ext(200).parse().unwrap(), 80)
}

fn backend(i: u8) -> SocketAddr {
    SocketAddr::new(int(11 + i).parse().unwrap(), 8080)
}

fn client(i: u8) -> Ipv4Addr {
    ext(2 + i).parse().unwrap()
}

fn newcomer(i: u8) -> Ipv4Addr {
    ext(100 + i).parse().unwrap()
}

struct Topo {
    dp: BorderDp,
    _mgmt: BorderMgmt,
    cli: Netns,
    _bk: Netns,
    _lb: Netns,
    cfg: PathBuf,
    _dir: TempDir,
    _servers: TcpBackends,
}

impl Drop for Topo {
    fn drop(&mut self) {
        clean_instance(&format!("e2e{TAG}"));
    }
}

/// border-mgmt and border-dp on a VIP with backends b0, b1, b2 and `line`
/// (`persistence_timeout = ...` or `hash = "source"`); TCP servers on b0
/// to b3.
fn start(line: &str) -> Topo {
    let instance = format!("e2e{TAG}");
    clean_instance(&instance);
    let lb = Netns::new(&format!("{TAG}-lb"));
    let cli = Netns::new(&format!("{TAG}-cli"));
    let bk = Netns::new(&format!("{TAG}-bk"));
    let dir = TempDir::new(TAG);
    let socket = dir.path("api.sock");
    let mut config = two_port_config(
        &instance,
        TAG,
        &format!("{}/24", ext(1)),
        &format!("{}/24", int(1)),
        &format!("unix://{}", socket.display()),
    );
    config += &format!(
        "\n[[vip]]\nname = \"v\"\naddress = \"{}\"\nport = 80\nmaglev_table_size = 1021\n{line}\n",
        vip().ip()
    );
    for i in 0..3 {
        config += &format!(
            "\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
            backend(i).ip()
        );
    }
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &config).unwrap();
    let mgmt = BorderMgmt::start(&cfg, dir.path("mgmt.log"));
    let dp = BorderDp::start_following(&lb, &dir, &instance, &config);
    wait_iface(&lb, &format!("{TAG}-ext"));
    wait_iface(&lb, &format!("{TAG}-int"));
    let mut cli_addrs: Vec<String> = (0..CLIENTS).map(|i| format!("{}/24", client(i))).collect();
    cli_addrs.extend((0..NEWCOMERS).map(|i| format!("{}/24", newcomer(i))));
    let refs: Vec<&str> = cli_addrs.iter().map(String::as_str).collect();
    cli.adopt(&lb, &format!("{TAG}-ext"), &refs);
    let bk_addrs: Vec<String> = (0..4).map(|i| format!("{}/24", backend(i).ip())).collect();
    let refs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
    bk.adopt(&lb, &format!("{TAG}-int"), &refs);
    cli.run(&["ip", "route", "add", "default", "via", &ext(1)]);
    dp.wait_applied(1);
    let servers = TcpBackends::start(
        &bk.name,
        &[
            ("b0", backend(0)),
            ("b1", backend(1)),
            ("b2", backend(2)),
            ("b3", backend(3)),
        ],
    );
    Topo {
        dp,
        _mgmt: mgmt,
        cli,
        _bk: bk,
        _lb: lb,
        cfg,
        _dir: dir,
        _servers: servers,
    }
}

/// The name of the backend one connection from `src` reached, retried
/// while the appliance resolves its next hops.
fn backend_from(src: Ipv4Addr) -> String {
    let mut last = None;
    for _ in 0..50 {
        match connect_from(src, vip()) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut line = String::new();
                BufReader::new(s).read_line(&mut line).unwrap();
                return line.split_whitespace().next().unwrap_or("").to_string();
            }
            Err(e) => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    panic!("no connection from {src}: {last:?}");
}

/// Per client address, the backends of `n` connections (each from a new
/// source port), in the client namespace.
fn reached(topo: &Topo, clients: Vec<Ipv4Addr>, n: usize) -> BTreeMap<Ipv4Addr, Vec<String>> {
    in_netns(&topo.cli.name, move || {
        clients
            .into_iter()
            .map(|c| (c, (0..n).map(|_| backend_from(c)).collect()))
            .collect()
    })
    .join()
    .unwrap()
}

/// Each client's one backend (asserting its connections agreed).
fn one_each(seen: &BTreeMap<Ipv4Addr, Vec<String>>) -> BTreeMap<Ipv4Addr, String> {
    seen.iter()
        .map(|(c, names)| {
            assert!(
                names.iter().all(|n| n == &names[0]),
                "{c}'s connections split: {names:?}"
            );
            (*c, names[0].clone())
        })
        .collect()
}

/// `borderctl backend add v b3`, waited for until border-dp runs it.
fn add_b3(topo: &Topo) {
    let out = borderctl_ok(&[
        "backend",
        "add",
        "v",
        &backend(3).to_string(),
        "--config",
        topo.cfg.to_str().unwrap(),
    ]);
    let g: u64 = out
        .split("generation ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no generation in {out:?}"));
    topo.dp.wait_applied(g);
}

/// One run: the clients before and after b3 is added, and the newcomers'
/// backends; the clients that moved.
fn run(line: &str) -> (Vec<Ipv4Addr>, BTreeMap<String, usize>, Topo) {
    let topo = start(line);
    let clients: Vec<Ipv4Addr> = (0..CLIENTS).map(client).collect();
    let before = one_each(&reached(&topo, clients.clone(), 3));
    let spread: std::collections::BTreeSet<&String> = before.values().collect();
    assert!(spread.len() == 3, "{line}: clients reached only {spread:?}");
    add_b3(&topo);
    let after = reached(&topo, clients, 3);
    let moved = before
        .iter()
        .filter(|(c, b)| after[*c].iter().any(|n| n != *b))
        .map(|(c, _)| *c)
        .collect();
    let mut newcomers = BTreeMap::new();
    for names in reached(&topo, (0..NEWCOMERS).map(newcomer).collect(), 1).into_values() {
        *newcomers.entry(names[0].clone()).or_default() += 1;
    }
    (moved, newcomers, topo)
}

#[test]
fn persisted_clients_stay_when_a_backend_is_added_and_without_persistence_some_move() {
    let (moved, newcomers, topo) = run("persistence_timeout = \"5m\"");
    assert_eq!(moved, Vec::<Ipv4Addr>::new(), "persisted clients moved");
    assert!(
        newcomers.contains_key("b3"),
        "no new client reached the added backend: {newcomers:?}"
    );
    let hits = topo.dp.counter(Counter::PersistenceHits);
    let misses = topo.dp.counter(Counter::PersistenceMisses);
    // 3 connections per client before and 3 after: all but each one's
    // first were pinned (a retried SYN is a new flow only if its entry went).
    assert!(
        hits >= 5 * u64::from(CLIENTS),
        "persistence_hits {hits}, misses {misses}"
    );
    assert!(
        misses >= u64::from(CLIENTS + NEWCOMERS),
        "persistence_misses {misses}"
    );
    assert_eq!(topo.dp.counter(Counter::PersistenceBackendGone), 0);
    assert_eq!(topo.dp.counter(Counter::DropNoBackend), 0);
    drop(topo);

    let (moved, newcomers, topo) = run("hash = \"source\"");
    assert!(
        !moved.is_empty(),
        "without persistence no client moved to the added backend"
    );
    assert!(newcomers.contains_key("b3"), "{newcomers:?}");
    assert_eq!(topo.dp.counter(Counter::PersistenceHits), 0);
    eprintln!(
        "without persistence {} of {CLIENTS} clients moved: {moved:?}",
        moved.len()
    );
}
