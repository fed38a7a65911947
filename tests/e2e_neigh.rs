//! The neighbour table against real kernels (docs/security.md): border-dp on TAP
//! ports between a client namespace and a backend namespace.
//! - 30,000 spoofed ARP frames (requests for border's address, for other
//!   hosts, gratuitous, replies nobody asked for; from senders on the
//!   segment and off every subnet), written by `tests/scapy/arp_spoof.py`
//!   on a raw socket, leave the table with the configured next hops only,
//!   and a backend configured after them is reached by 20 of 20
//!   connections;
//! - a backend whose MAC changes (its interface's address changed in its
//!   namespace) is followed within seconds, by the reachability probes
//!   alone and, faster, after its gratuitous ARP.

mod common;

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use conf::counters::Counter;

const SCRIPT: &str = include_str!("scapy/arp_spoof.py");
const VIP: &str = "10.111.0.100:80";
// (The same address as `VIP`: border-dp answers ARP for the VIP addresses
// it started with; a reload adds ports to them.)
const LATE_VIP: &str = "10.111.0.100:81";
const B0: &str = "10.112.0.11:8080";
const B1: &str = "10.112.0.12:8080";

/// The tests share the `nb` namespaces: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn vip(name: &str, addr: &str, backend: &str) -> String {
    let (a, p) = addr.split_once(':').unwrap();
    let (b, bp) = backend.split_once(':').unwrap();
    format!(
        "\n[[vip]]\nname = \"{name}\"\naddress = \"{a}\"\nport = {p}\nmode = \"fullnat\"\n\
         maglev_table_size = 101\n[[vip.backend]]\naddress = \"{b}\"\nport = {bp}\n"
    )
}

fn config(late_backend: bool) -> String {
    let mut c = two_port_config(
        "e2enb",
        "nb",
        "10.111.0.1/24",
        "10.112.0.1/24",
        "unix:///run/border/e2enb.sock",
    );
    c += &vip("web", VIP, B0);
    if late_backend {
        c += &vip("late", LATE_VIP, B1);
    }
    c
}

/// Drops in field order: traffic and border-dp before their namespaces.
struct Topo {
    _backends: TcpBackends,
    dp: BorderDp,
    cli: Netns,
    bk: Netns,
    _lb: Netns,
    dir: TempDir,
}

fn start() -> Topo {
    let lb = Netns::new("nb-lb");
    let cli = Netns::new("nb-cli");
    let bk = Netns::new("nb-bk");
    let dir = TempDir::new("nb");
    let dp = BorderDp::start(&lb, &dir, "e2enb", &config(false));
    wait_iface(&lb, "nb-ext");
    wait_iface(&lb, "nb-int");
    cli.adopt(&lb, "nb-ext", &["10.111.0.2/24"]);
    bk.adopt(&lb, "nb-int", &["10.112.0.11/24", "10.112.0.12/24"]);
    cli.run(&["ip", "route", "add", "default", "via", "10.111.0.1"]);
    let backends = TcpBackends::start(
        "nb-bk",
        &[("b0", B0.parse().unwrap()), ("b1", B1.parse().unwrap())],
    );
    Topo {
        _backends: backends,
        dp,
        cli,
        bk,
        _lb: lb,
        dir,
    }
}

impl Topo {
    /// Runs `arp_spoof.py` in `ns` with `args`; returns what it sent.
    fn spoof(&self, ns: &Netns, args: &[&str]) -> u64 {
        let script = self.dir.path("arp_spoof.py");
        std::fs::write(&script, SCRIPT).unwrap();
        let mut full = vec!["/usr/bin/python3", script.to_str().unwrap()];
        full.extend_from_slice(args);
        let out = ns.run(&full);
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .strip_prefix("sent=")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("arp_spoof.py {args:?} said {text:?}"))
    }

    /// `n` connections to `vip` one after another (each may take up to
    /// `within` to connect): the backend names that answered.
    fn connect(&self, vip: &str, n: usize, within: Duration) -> Vec<String> {
        let vip: SocketAddr = vip.parse().unwrap();
        in_netns(&self.cli.name, move || {
            use std::io::{BufRead, BufReader};
            (0..n)
                .filter_map(|_| {
                    let s = connect_retry(vip, within).ok()?;
                    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                    let mut line = String::new();
                    BufReader::new(s).read_line(&mut line).ok()?;
                    line.split_whitespace().next().map(str::to_string)
                })
                .collect()
        })
        .join()
        .unwrap()
    }

    /// Seconds until a connection to `vip` is answered again, trying
    /// (each try at most one second) for `limit`.
    fn seconds_until_answered(&self, vip: &str, limit: Duration) -> Option<f64> {
        let vip: SocketAddr = vip.parse().unwrap();
        in_netns(&self.cli.name, move || {
            use std::io::{BufRead, BufReader};
            let start = Instant::now();
            while start.elapsed() < limit {
                let Ok(s) = std::net::TcpStream::connect_timeout(&vip, Duration::from_secs(1))
                else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                let mut line = String::new();
                if BufReader::new(s).read_line(&mut line).is_ok() && !line.is_empty() {
                    return Some(start.elapsed().as_secs_f64());
                }
            }
            None
        })
        .join()
        .unwrap()
    }

    fn wait_generation(&self, g: u64) {
        let state = self.dp.state();
        wait_until(
            &format!("workers on generation {g}"),
            Duration::from_secs(10),
            || (0..state.n_workers()).all(|w| state.worker(w).unwrap().applied_generation() >= g),
        );
    }
}

#[test]
fn spoofed_arp_flood_leaves_the_table_bounded_and_a_new_backend_reachable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = start();
    assert_eq!(t.connect(VIP, 3, Duration::from_secs(10)), ["b0"; 3]);

    let mut sent = t.spoof(&t.bk, &["flood", "nb-int", "20000", "10.112.0.1"]);
    sent += t.spoof(&t.cli, &["flood", "nb-ext", "10000", "10.111.0.1"]);
    assert_eq!(sent, 30_000);
    let names = [
        Counter::NeighRefusedOverheard,
        Counter::NeighRefusedOffSubnet,
        Counter::NeighRefusedUnsolicited,
        Counter::NeighRefusedNotInTable,
    ];
    let refused = || names.map(|c| (c.name(), t.dp.counter(c)));
    let sum = || refused().iter().map(|(_, n)| n).sum::<u64>();
    // Every spoofed frame that reached border-dp is refused once; wait
    // until they are all counted.
    let mut last = 0;
    wait_until("the refusals stop rising", Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(500));
        let now = sum();
        std::mem::replace(&mut last, now) == now && now > 0
    });
    let refused = refused();
    eprintln!(
        "after {sent} spoofed ARP frames: {refused:?}, neigh_entries {}",
        t.dp.counter(Counter::NeighEntries)
    );
    assert!(refused.iter().all(|(_, n)| *n > 100), "{refused:?}");
    // (A TAP queue may lose a few frames to a debug build on a busy machine.)
    assert!(sum() >= 25_000, "{refused:?}");
    assert!(
        t.dp.counter(Counter::NeighEntries) <= 1,
        "junk in the table: {} entries",
        t.dp.counter(Counter::NeighEntries)
    );

    // A backend configured after the flood: resolved and reachable.
    t.dp.reload(&config(true));
    t.wait_generation(2);
    let names = t.connect(LATE_VIP, 20, Duration::from_secs(10));
    assert_eq!(names, ["b1"; 20], "20 of 20 connections to the new backend");
    assert_eq!(t.dp.counter(Counter::NeighEntries), 2);
    assert_eq!(t.dp.counter(Counter::NeighEvicted), 0);
    assert_eq!(t.dp.counter(Counter::DropNeighborUnresolved), 0);
}

#[test]
fn a_backend_whose_mac_changes_is_followed_within_seconds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = start();
    assert_eq!(t.connect(VIP, 5, Duration::from_secs(10)), ["b0"; 5]);

    // A replaced server: same address, another MAC, no announcement. The
    // old MAC is silent; border's probes find the new one.
    t.bk.run(&[
        "ip",
        "link",
        "set",
        "dev",
        "nb-int",
        "address",
        "02:00:00:70:00:01",
    ]);
    let after = t
        .seconds_until_answered(VIP, Duration::from_secs(20))
        .expect("the backend was never reached again");
    eprintln!("reached again {after:.1} s after the MAC changed (no announcement)");
    assert!(after < 9.0, "{after:.1} s");
    assert_eq!(t.connect(VIP, 20, Duration::from_secs(5)), ["b0"; 20]);
    assert!(t.dp.counter(Counter::NeighMacChanged) >= 1);
    assert!(t.dp.counter(Counter::NeighProbes) >= 1);

    // Moved again, and it says so (a VRRP failover's gratuitous ARP).
    t.bk.run(&[
        "ip",
        "link",
        "set",
        "dev",
        "nb-int",
        "address",
        "02:00:00:70:00:02",
    ]);
    t.spoof(&t.bk, &["garp", "nb-int", "10.112.0.11"]);
    let after = t
        .seconds_until_answered(VIP, Duration::from_secs(20))
        .expect("the backend was never reached again");
    eprintln!("reached again {after:.1} s after the MAC changed (gratuitous ARP)");
    assert!(after < 1.0, "{after:.1} s");
    assert_eq!(t.connect(VIP, 20, Duration::from_secs(5)), ["b0"; 20]);
    assert!(t.dp.counter(Counter::NeighMacChanged) >= 2);
}
