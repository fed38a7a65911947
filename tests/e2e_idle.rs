//! Idle adaptive workers sleep on Rx interrupts: border-dp with two TAP
//! ports (and their TAP kernel twins) and two workers sharing one CPU costs
//! almost nothing while nothing arrives, and still answers at once when
//! traffic comes back: ping to a port address, and TCP connections through
//! a full-NAT VIP, whose replies may arrive on the other worker's queue and
//! be handed to a sleeping owner. A port whose driver has no Rx interrupts
//! (net_ring) makes border-dp say so once and back off with sleeps, still
//! answering. CPU time is read from /proc/<pid>/task/<tid>/schedstat (the
//! scheduler's nanoseconds on CPU, not the 10 ms ticks of utime/stime).
//! Namespaces and interfaces are tagged `id` (and `idr` for net_ring).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use conf::counters::Counter;

/// Two ports, `ext` on net_tap (`<tag>-ext`) and `int` on `int_devargs`,
/// two workers on one CPU, and a full-NAT VIP.
fn config(instance: &str, tag: &str, int_devargs: &str) -> String {
    format!(
        r#"instance = "{instance}"

[dataplane]
main_lcore = 0
worker_lcores = [1, 2]
lcore_cpus = [0, 1, 1]
poll = "adaptive"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 16384
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface={tag}-ext"
addresses = ["10.71.0.1/24"]
host_interface = "k{tag}-ext"
mac = "02:00:00:71:00:01"

[[port]]
name = "int"
devargs = "{int_devargs}"
addresses = ["10.72.0.1/24"]
host_interface = "k{tag}-int"
mac = "02:00:00:72:00:01"
local_addresses = ["10.72.0.1"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix:///run/border/{instance}.sock"

[[vip]]
name = "web"
address = "10.71.0.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "10.72.0.11"
port = 8080
"#
    )
}

/// Nanoseconds on CPU so far of each thread of `pid`, by thread name
/// (several threads of one name are summed).
fn cpu_ns_by_thread(pid: u32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let dir = format!("/proc/{pid}/task");
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.unwrap().path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let ns: u64 = std::fs::read_to_string(path.join("schedstat"))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *out.entry(name.trim().to_string()).or_insert(0) += ns;
    }
    out
}

/// Share of one core each thread of `pid` used over `window`, in percent,
/// and the whole process's.
fn cpu_percent(pid: u32, window: Duration) -> (BTreeMap<String, f64>, f64) {
    let before = cpu_ns_by_thread(pid);
    let t = Instant::now();
    std::thread::sleep(window);
    let after = cpu_ns_by_thread(pid);
    let wall = t.elapsed().as_nanos() as f64;
    let per: BTreeMap<String, f64> = after
        .iter()
        .map(|(name, ns)| {
            let used = ns.saturating_sub(before.get(name).copied().unwrap_or(0));
            (name.clone(), used as f64 * 100.0 / wall)
        })
        .collect();
    let total = per.values().sum();
    (per, total)
}

fn ping_ok(ns: &Netns, target: &str, dp: &BorderDp) {
    let out = ns.try_run(&["ping", "-c", "3", "-i", "0.2", "-W", "2", target]);
    assert!(
        out.status.success(),
        "ping {target} from {} failed:\n{}\n{}",
        ns.name,
        String::from_utf8_lossy(&out.stdout),
        dp.log_text()
    );
}

/// The round trip of one ping, in milliseconds.
fn ping_rtt_ms(ns: &Netns, target: &str, dp: &BorderDp) -> f64 {
    let out = ns.try_run(&["ping", "-c", "1", "-W", "2", target]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("time=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("ping {target}: no answer:\n{text}\n{}", dp.log_text()))
}

#[test]
fn idle_workers_sleep_on_rx_interrupts_and_wake_for_traffic() {
    let lb = Netns::new("id-lb");
    let cli = Netns::new("id-cli");
    let bk = Netns::new("id-bk");
    let dir = TempDir::new("idle");
    let mut dp = BorderDp::start(
        &lb,
        &dir,
        "e2eidle",
        &config("e2eidle", "id", "net_tap1,iface=id-int"),
    );
    wait_iface(&lb, "id-ext");
    wait_iface(&lb, "id-int");
    cli.adopt(&lb, "id-ext", &["10.71.0.2/24"]);
    bk.adopt(&lb, "id-int", &["10.72.0.11/24"]);
    cli.run(&["ip", "route", "add", "default", "via", "10.71.0.1"]);
    bk.run(&["ip", "route", "add", "default", "via", "10.72.0.1"]);
    let _backends = TcpBackends::start("id-bk", &[("b1", "10.72.0.11:8080".parse().unwrap())]);
    assert!(
        !dp.log_text().contains("no Rx interrupts"),
        "TAP ports have Rx interrupts:\n{}",
        dp.log_text()
    );
    // Warm up (neighbours resolved on both sides), then leave it alone.
    ping_ok(&cli, "10.71.0.1", &dp);
    ping_ok(&bk, "10.72.0.1", &dp);
    let vip: std::net::SocketAddr = "10.71.0.100:80".parse().unwrap();
    assert_eq!(tcp_names("id-cli", vip, 2).len(), 2);
    std::thread::sleep(Duration::from_secs(1));

    let (per, total) = cpu_percent(dp.pid(), Duration::from_secs(5));
    eprintln!("idle CPU over 5 s, % of one core: {per:?}, process {total:.2}");
    let workers: Vec<f64> = per
        .iter()
        .filter(|(n, _)| n.starts_with("rte-worker"))
        .map(|(_, p)| *p)
        .collect();
    assert_eq!(workers.len(), 2, "{per:?}");
    for p in &workers {
        assert!(*p <= 1.0, "an idle worker used {p:.2}% of a core: {per:?}");
    }
    assert!(
        total <= 2.5,
        "idle border-dp used {total:.2}% of a core: {per:?}"
    );

    // A frame ends the sleep at once: a worker that missed the wake-up
    // would answer at its 10 ms timeout. Scheduling on a busy VM may delay
    // a few. (The race of net_tap's rx trigger signal shows in release
    // builds only: `border-perf wake` measures it.)
    let rtts: Vec<f64> = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            ping_rtt_ms(&cli, "10.71.0.1", &dp)
        })
        .collect();
    eprintln!("ping after 200 ms idle, ms: {rtts:?}");
    let late = rtts.iter().filter(|&&ms| ms >= 8.0).count();
    assert!(
        late <= 3,
        "{late} of 10 pings waited for the timeout: {rtts:?}"
    );

    // After the idle spell, traffic is answered: the port address, and TCP
    // through the full-NAT VIP (replies may be handed between workers).
    ping_ok(&cli, "10.71.0.1", &dp);
    std::thread::sleep(Duration::from_secs(1));
    let t = Instant::now();
    let names = tcp_names("id-cli", vip, 8);
    let took = t.elapsed();
    assert_eq!(names.len(), 8, "{names:?}\n{}", dp.log_text());
    assert!(names.iter().all(|n| n.starts_with("b1 ")), "{names:?}");
    eprintln!(
        "8 connections after 1 s idle in {took:?}; handoffs {}",
        dp.counter(Counter::HandoffSent)
    );
    assert!(took < Duration::from_secs(5), "{took:?}");

    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
}

#[test]
fn a_port_without_rx_interrupts_falls_back_to_backoff_and_says_so_once() {
    let lb = Netns::new("idr-lb");
    let cli = Netns::new("idr-cli");
    let dir = TempDir::new("idle-ring");
    let config = config("e2eidler", "idr", "net_ring0");
    let mut dp = BorderDp::start(&lb, &dir, "e2eidler", &config);
    wait_iface(&lb, "idr-ext");
    cli.adopt(&lb, "idr-ext", &["10.71.0.2/24"]);
    let log = dp.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("no Rx interrupts"))
        .collect();
    assert_eq!(lines.len(), 1, "one line for two workers:\n{log}");
    assert!(
        lines[0].contains("port `int` (net_ring0) has no Rx interrupts")
            && lines[0].contains("back off with sleeps"),
        "{}",
        lines[0]
    );
    // Backing off, the workers still answer after idling.
    std::thread::sleep(Duration::from_secs(1));
    ping_ok(&cli, "10.71.0.1", &dp);
    wait_until("echo replies counted", Duration::from_secs(5), || {
        dp.counter(Counter::IcmpEchoReplies) >= 3
    });
    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
}
