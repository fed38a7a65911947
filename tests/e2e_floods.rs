//! The floods a border box faces, end to end, with real clients at the same
//! time (one worker, TAP ports, hping3 from the client namespace with random
//! source addresses):
//! - a SYN flood at a TCP port of the VIP's address that no VIP serves: the
//!   I/O baseline, what border-dp costs when it only has to drop;
//! - a SYN flood at the full-NAT VIP, at the same VIP with `syn_proxy =
//!   "always"` (border answers with SYN cookies), and with `"auto"`; the
//!   real clients connect to the VIP under attack;
//! - ACK and RST floods at the VIP (no entry for any of them);
//! - a UDP flood at the UDP VIP (its `new_connections_per_second` holds it);
//! - an ICMP echo flood at the VIP;
//! - a flood of fragments at the VIP.
//!
//! For each it records the real clients' success ratio and connect p99
//! (new connections one after the other: greeting, echo, close), the most
//! connection-table entries and local tuples in use seen, what the
//! backend's kernel saw (SYNs counted by nftables in its namespace, SYN
//! cookies it sent from `nstat`), border-dp's receive rate and the drop
//! counters that moved.
//!
//! CI runs the short form (a paced flood, a few seconds each).
//! `scripts/floods.sh` runs it at the highest rate hping3 makes
//! (`--flood`), longer, on a release build, and writes the JSON that
//! docs/reliability.md's table is made from: FLOODS_PACE (hping3's `-i`
//! value or `--flood`), FLOODS_SECONDS, FLOODS_TABLE, FLOODS_JSON (a path),
//! FLOODS_ONLY (a comma-separated list of flood names).

mod common;

use std::time::{Duration, Instant};

use common::*;
use conf::counters::Counter;

const INSTANCE: &str = "e2efl";
const VIP_ADDR: &str = "10.113.0.100";
const CLIENT: &str = "10.113.0.2";
const BACKEND: &str = "10.113.1.11";

fn config(table: usize) -> String {
    let base = two_port_config(
        INSTANCE,
        "fl",
        "10.113.0.1/24",
        "10.113.1.1/24",
        "unix:///run/border/e2efl.sock",
    );
    let size = "conntrack_per_worker = 16384";
    assert!(base.contains(size), "two_port_config changed:\n{base}");
    let mut c = base.replace(size, &format!("conntrack_per_worker = {table}"));
    c.push_str(&format!(
        r#"
[[vip]]
name = "web"
address = "{VIP_ADDR}"
port = 80
mode = "fullnat"
maglev_table_size = 101

[[vip.backend]]
address = "{BACKEND}"
port = 8080

[[vip]]
name = "web-cookies"
address = "{VIP_ADDR}"
port = 443
mode = "fullnat"
syn_proxy = "always"
maglev_table_size = 101

[[vip.backend]]
address = "{BACKEND}"
port = 8080

[[vip]]
name = "web-auto"
address = "{VIP_ADDR}"
port = 444
mode = "fullnat"
syn_proxy = "auto"
maglev_table_size = 101

[[vip.backend]]
address = "{BACKEND}"
port = 8080

[[vip]]
name = "dns"
address = "{VIP_ADDR}"
port = 53
protocol = "udp"
mode = "fullnat"
maglev_table_size = 101

# Well under the flood's pace (hping3 at u500 reaches 1,200-2,000
# datagrams/s on a loaded 2-core machine), so its refusals always show.
[vip.limits]
new_connections_per_second = 200

[[vip.backend]]
address = "{BACKEND}"
port = 5353
"#
    ));
    c
}

/// One flood: its name, hping3's arguments before the pace and target,
/// and the VIP port the real clients connect to meanwhile.
struct Flood {
    name: &'static str,
    args: &'static [&'static str],
    real_port: u16,
}

/// The stateful SYN floods last: the spoofed SYNs they let through sit in
/// the backend's SYN queue for a minute and would weigh on the others.
const FLOODS: &[Flood] = &[
    Flood {
        name: "syn-no-vip",
        args: &["-S", "-p", "81"],
        real_port: 80,
    },
    Flood {
        name: "syn-vip-cookies",
        args: &["-S", "-p", "443"],
        real_port: 443,
    },
    Flood {
        name: "ack-vip",
        args: &["-A", "-p", "80"],
        real_port: 80,
    },
    Flood {
        name: "rst-vip",
        args: &["-R", "-p", "80"],
        real_port: 80,
    },
    Flood {
        name: "udp-vip",
        args: &["--udp", "-p", "53", "-d", "32"],
        real_port: 80,
    },
    Flood {
        name: "icmp-echo-vip",
        args: &["--icmp"],
        real_port: 80,
    },
    Flood {
        name: "fragments-vip",
        args: &["-S", "-p", "80", "-f", "-d", "64"],
        real_port: 80,
    },
    Flood {
        name: "syn-vip-auto",
        args: &["-S", "-p", "444"],
        real_port: 444,
    },
    Flood {
        name: "syn-vip",
        args: &["-S", "-p", "80"],
        real_port: 80,
    },
];

/// Drops in field order: traffic and border-dp before their namespaces.
struct Topo {
    _tcp: TcpBackends,
    _udp: UdpBackends,
    dp: BorderDp,
    cli: Netns,
    bk: Netns,
    _lb: Netns,
    _dir: TempDir,
}

fn start(table: usize) -> Topo {
    let lb = Netns::new("fl-lb");
    let cli = Netns::new("fl-cli");
    let bk = Netns::new("fl-bk");
    let dir = TempDir::new("floods");
    clean_instance(INSTANCE);
    let dp = BorderDp::start(&lb, &dir, INSTANCE, &config(table));
    wait_iface(&lb, "fl-ext");
    wait_iface(&lb, "fl-int");
    cli.adopt(&lb, "fl-ext", &[&format!("{CLIENT}/24")]);
    bk.adopt(&lb, "fl-int", &[&format!("{BACKEND}/24")]);
    cli.run(&["ip", "route", "add", "default", "via", "10.113.0.1"]);
    bk.run(&["ip", "route", "add", "default", "via", "10.113.1.1"]);
    // What the backend's kernel receives: SYNs (spoofed or real).
    bk.run(&["nft", "add table inet floods"]);
    bk.run(&[
        "nft",
        "add chain inet floods input { type filter hook input priority 0; }",
    ]);
    bk.run(&[
        "nft",
        "add rule inet floods input tcp flags & (syn | ack) == syn counter",
    ]);
    let tcp = TcpBackends::start(
        "fl-bk",
        &[("b0", format!("{BACKEND}:8080").parse().unwrap())],
    );
    let udp = UdpBackends::start(
        "fl-bk",
        &[("u0", format!("{BACKEND}:5353").parse().unwrap())],
    );
    Topo {
        _tcp: tcp,
        _udp: udp,
        dp,
        cli,
        bk,
        _lb: lb,
        _dir: dir,
    }
}

/// SYNs the backend's kernel received so far (the nftables counter).
fn backend_syns(bk: &Netns) -> u64 {
    let out = bk.run(&["nft", "list", "table", "inet", "floods"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no nftables counter in:\n{text}"))
}

/// An absolute `nstat` counter of the backend's namespace.
fn backend_nstat(bk: &Netns, name: &str) -> u64 {
    let out = bk.run(&["nstat", "-az", name]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name)).then(|| w.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// What one flood did.
#[derive(Debug, Default, serde::Serialize)]
struct Outcome {
    flood: String,
    pace: String,
    seconds: u64,
    /// Frames border-dp received per second during the flood.
    rx_per_s: u64,
    real_ok: u64,
    real_total: u64,
    /// Real connections' connect time, 99th percentile, milliseconds.
    connect_p99_ms: f64,
    connect_p50_ms: f64,
    max_conntrack_entries: u64,
    max_local_tuples_in_use: u64,
    /// Cookie SYN-ACKs border sent (`syn_proxy_cookies_sent`).
    cookies_sent: u64,
    /// SYNs the backend's kernel received, and SYN cookies it sent.
    backend_syns: u64,
    backend_syncookies_sent: u64,
    /// Drop and refusal counters that moved, largest first (at most 6).
    counters_moved: Vec<(String, u64)>,
    real_errors: Vec<String>,
}

fn percentile_ms(sorted_us: &[u64], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    (sorted_us[i] as f64 / 10.0).round() / 100.0
}

fn run_flood(t: &Topo, flood: &Flood, pace: &str, seconds: u64, clients: usize) -> Outcome {
    let before = t.dp.drops();
    let syns0 = backend_syns(&t.bk);
    let backend_cookies0 = backend_nstat(&t.bk, "TcpExtSyncookiesSent");
    let rx0 = t.dp.counter(Counter::RxPackets);
    let cookies0 = t.dp.counter(Counter::SynProxyCookiesSent);
    let mut args = vec!["hping3", "-q", "--rand-source"];
    args.extend_from_slice(flood.args);
    if pace == "--flood" {
        args.push("--flood");
    } else {
        args.extend(["-i", pace]);
    }
    args.push(VIP_ADDR);
    let hping = t.cli.spawn(&args);
    let started = Instant::now();
    // Real clients from the flood's first second on.
    std::thread::sleep(Duration::from_millis(500));
    let vip: std::net::SocketAddr = format!("{VIP_ADDR}:{}", flood.real_port).parse().unwrap();
    let real: Vec<NewConnections> = (0..clients)
        .map(|i| NewConnections::start("fl-cli", vip, 256, 300 + i as u64))
        .collect();
    let mut out = Outcome {
        flood: flood.name.to_string(),
        pace: pace.to_string(),
        seconds,
        ..Outcome::default()
    };
    while started.elapsed() < Duration::from_secs(seconds) {
        out.max_conntrack_entries = out
            .max_conntrack_entries
            .max(t.dp.counter(Counter::ConntrackEntries));
        out.max_local_tuples_in_use = out
            .max_local_tuples_in_use
            .max(t.dp.counter(Counter::LocalTuplesInUse));
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut connect_us = Vec::new();
    for r in real {
        let r = r.finish();
        out.real_ok += r.ok;
        out.real_total += r.ok + r.errors.len() as u64;
        out.real_errors.extend(r.errors.into_iter().take(3));
        connect_us.extend(r.connect_us);
    }
    drop(hping);
    out.rx_per_s = ((t.dp.counter(Counter::RxPackets) - rx0) as f64 / elapsed) as u64;
    out.cookies_sent = t.dp.counter(Counter::SynProxyCookiesSent) - cookies0;
    connect_us.sort_unstable();
    out.connect_p99_ms = percentile_ms(&connect_us, 0.99);
    out.connect_p50_ms = percentile_ms(&connect_us, 0.50);
    out.backend_syns = backend_syns(&t.bk) - syns0;
    out.backend_syncookies_sent = backend_nstat(&t.bk, "TcpExtSyncookiesSent") - backend_cookies0;
    let mut moved = drops_rose(&before, &t.dp.drops());
    moved.sort_by_key(|m| std::cmp::Reverse(m.1));
    out.counters_moved = moved
        .into_iter()
        .take(6)
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    // Let the flood's state drain before the next one.
    std::thread::sleep(Duration::from_secs(1));
    out
}

#[test]
fn floods_cost_real_clients_little_and_every_refusal_is_counted() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let pace = env("FLOODS_PACE", "u500");
    let seconds: u64 = env("FLOODS_SECONDS", "3").parse().unwrap();
    let table: usize = env("FLOODS_TABLE", "65536").parse().unwrap();
    let clients: usize = env("FLOODS_CLIENTS", "1").parse().unwrap();
    let only = env("FLOODS_ONLY", "");
    let t = start(table);
    let mut outcomes = Vec::new();
    for flood in FLOODS {
        if !only.is_empty() && !only.split(',').any(|n| n == flood.name) {
            continue;
        }
        let o = run_flood(&t, flood, &pace, seconds, clients);
        println!(
            "flood {:<16} rx {:>7}/s  real {}/{}  connect p50 {} ms p99 {} ms  entries max {}  tuples max {}  cookies sent {}  backend SYNs {} cookies {}  moved {:?}",
            o.flood,
            o.rx_per_s,
            o.real_ok,
            o.real_total,
            o.connect_p50_ms,
            o.connect_p99_ms,
            o.max_conntrack_entries,
            o.max_local_tuples_in_use,
            o.cookies_sent,
            o.backend_syns,
            o.backend_syncookies_sent,
            o.counters_moved,
        );
        outcomes.push(o);
    }
    if let Ok(path) = std::env::var("FLOODS_JSON") {
        let json = serde_json::json!({
            "command": "scripts/floods.sh",
            "commit": std::env::var("FLOODS_COMMIT").unwrap_or_default(),
            "pace": pace,
            "seconds": seconds,
            "table": table,
            "floods": outcomes,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    }
    // At hping3's full rate the unprotected SYN flood is what `syn_proxy`
    // is for: it runs the local tuples dry and real clients fail. Its
    // figures are the comparison, not a promise.
    let promised = |o: &&Outcome| !(pace == "--flood" && o.flood == "syn-vip");
    for o in outcomes.iter().filter(promised) {
        assert!(o.rx_per_s > 0, "{}: border-dp received nothing", o.flood);
        assert!(
            o.real_total >= 5,
            "{}: too few real connections: {o:?}",
            o.flood
        );
        assert!(
            o.real_ok * 100 >= o.real_total * 95,
            "{}: {} of {} real connections failed: {:?}",
            o.flood,
            o.real_total - o.real_ok,
            o.real_total,
            o.real_errors
        );
        // Every flood's frames have a named outcome: a drop counter moved,
        // but for the SYN floods (an entry each then its eviction or
        // expiry, or a cookie SYN-ACK).
        if !o.flood.starts_with("syn-vip") {
            assert!(
                !o.counters_moved.is_empty(),
                "{}: no counter moved",
                o.flood
            );
        }
    }
    // Connecting under the SYN flood costs at most twice what it costs
    // under the same flood at a port without a VIP (plus scheduling noise
    // at these sub-millisecond times).
    let p99 = |name: &str| {
        outcomes
            .iter()
            .find(|o| o.flood == name)
            .map(|o| o.connect_p99_ms)
    };
    let floods = if pace == "--flood" {
        &["syn-vip-cookies"][..]
    } else {
        &["syn-vip", "syn-vip-cookies"][..]
    };
    for &flood in floods {
        if let (Some(vip), Some(base)) = (p99(flood), p99("syn-no-vip")) {
            assert!(
                vip <= 2.0 * base + 10.0,
                "connect p99 {vip} ms under {flood}, {base} ms under the same flood at no VIP"
            );
        }
    }
    // What floods that make no entry may not do: reach the backend. Under
    // the cookie VIP's flood the backend sees the real clients' SYNs only.
    if let Some(o) = outcomes.iter().find(|o| o.flood == "syn-vip-cookies") {
        assert!(o.cookies_sent > o.real_total, "no cookies: {o:?}");
    }
    let stateful = ["syn-vip", "syn-vip-auto"];
    for o in outcomes
        .iter()
        .filter(|o| !stateful.contains(&o.flood.as_str()))
    {
        assert!(
            o.backend_syns <= o.real_total + 2,
            "{}: the backend got {} SYNs for {} real connections",
            o.flood,
            o.backend_syns,
            o.real_total
        );
    }
}
