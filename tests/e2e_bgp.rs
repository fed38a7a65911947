//! BGP end to end (docs/bgp.md): two appliances announce one VIP
//! to a router that spreads it by ECMP, and withdraw it when they cannot
//! serve it. Everything is asserted on what the ROUTER's kernel shows.
//!
//! - `bg-r`: the router, BIRD 2 with `merge paths` (ECMP) into its kernel
//!   table, L4 multipath hashing; a bridge `bgbr` (10.71.0.254/24) holds
//!   both appliances' `ext` ports; the client `bg-cli` (10.71.100.2) sits
//!   behind it.
//! - `bg-a`, `bg-b`: an appliance each: border-dp (one adaptive worker,
//!   both on the machine's CPUs), border-mgmt and gobgpd. gobgpd's BGP
//!   session runs over the `ext` port's kernel twin (10.71.0.1 / .2).
//! - `bg-bk`: two TCP backends (10.72.0.11/.12) on a bridge holding both
//!   appliances' `int` ports. The VIP 10.71.0.100:80 is full-NAT, so a
//!   backend sees which appliance forwarded a connection (its local address).
//!
//! A second VIP (10.71.0.101) is DNAT over the same backends, which route
//! client-bound replies through B.
//!
//! Steps: both announced (two next hops; connections land on both) ->
//! maintenance on A withdraws A, off brings it back -> every backend down
//! withdraws both, one back announces both -> gobgpd of A stopped: A's
//! status says so, forwarding goes on, gobgpd started again: A's path comes
//! back by itself -> kill -9 A's border-dp: the router drops A when its
//! hold timer (3 s) runs out and every new connection succeeds; long-lived
//! DNAT streams that were on A finish byte-exact through B, full-NAT ones on
//! A break (their local port was A's) -> a VIP removed from B's config is
//! withdrawn -> SIGTERM to B's border-mgmt withdraws B before it exits.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const VIP: &str = "10.71.0.100";
/// A DNAT VIP over the same backends (they route replies through B).
const DNAT_VIP: &str = "10.71.0.101";
const ROUTER: &str = "10.71.0.254";
const CLIENT: &str = "10.71.100.2";

fn backends() -> [(&'static str, SocketAddr); 2] {
    [
        ("bk1", "10.72.0.11:8080".parse().unwrap()),
        ("bk2", "10.72.0.12:8080".parse().unwrap()),
    ]
}

/// A process with its output in a log file, killed on drop.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    fn start(ns: &str, args: &[&str], log: PathBuf) -> Daemon {
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .env("TZ", "UTC")
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {args:?}: {e}"));
        Daemon {
            child: Some(child),
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One appliance: border-dp, border-mgmt and gobgpd in namespace `bg-<x>`.
struct Appliance {
    x: char,
    ns: Netns,
    dir: TempDir,
    config: String,
    dp: BorderDp,
    mgmt: BorderMgmt,
    gobgpd: Daemon,
}

impl Appliance {
    fn instance(x: char) -> String {
        format!("e2ebg{x}")
    }

    fn host(x: char) -> u8 {
        if x == 'a' {
            1
        } else {
            2
        }
    }

    fn ext_addr(x: char) -> String {
        format!("10.71.0.{}", Self::host(x))
    }

    fn int_addr(x: char) -> String {
        format!("10.72.0.{}", Self::host(x))
    }

    fn config(x: char, socket: &str) -> String {
        let instance = Self::instance(x);
        let (ext, int) = (Self::ext_addr(x), Self::int_addr(x));
        // Both workers share the two CPUs: A's on CPU 1, B's on CPU 0.
        let cpus = if x == 'a' { "[0, 1]" } else { "[1, 0]" };
        format!(
            r#"instance = "{instance}"
[dataplane]
main_lcore = 0
worker_lcores = [1]
lcore_cpus = {cpus}
poll = "adaptive"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--file-prefix", "{instance}"]
conntrack_per_worker = 16384
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface=bg{x}-ext"
addresses = ["{ext}/24"]
gateway = "{ROUTER}"
host_interface = "kbg{x}-ext"

[[port]]
name = "int"
devargs = "net_tap1,iface=bg{x}-int"
addresses = ["{int}/24"]
host_interface = "kbg{x}-int"
local_addresses = ["{int}"]

[mgmt]
listen = "unix://{socket}"

[mgmt.bgp]
api = "127.0.0.1:50051"
communities = ["65000:100"]

[[vip]]
name = "web"
address = "{VIP}"
port = 80
mode = "fullnat"
announce = "healthy"
[vip.health]
kind = "tcp"
interval_ms = 200
timeout_ms = 150
rise = 2
fall = 2
[[vip.backend]]
address = "10.72.0.11"
port = 8080
[[vip.backend]]
address = "10.72.0.12"
port = 8080

[[vip]]
name = "dnat"
address = "{DNAT_VIP}"
port = 80
mode = "dnat"
[vip.health]
kind = "tcp"
interval_ms = 200
timeout_ms = 150
rise = 2
fall = 2
[[vip.backend]]
address = "10.72.0.11"
port = 8080
[[vip.backend]]
address = "10.72.0.12"
port = 8080
"#
        )
    }

    fn gobgpd_config(x: char) -> String {
        let (me, asn) = (Self::ext_addr(x), 65000 + u32::from(Self::host(x)));
        format!(
            r#"[global.config]
  as = {asn}
  router-id = "{me}"
  port = 179

[[neighbors]]
  [neighbors.config]
    neighbor-address = "{ROUTER}"
    peer-as = 65100
  [neighbors.timers.config]
    connect-retry = 1
    hold-time = 3
    keepalive-interval = 1
"#
        )
    }

    fn start(x: char) -> Appliance {
        let instance = Self::instance(x);
        clean_instance(&instance);
        let ns = Netns::new(&format!("bg-{x}"));
        let dir = TempDir::new(&format!("bg{x}"));
        let socket = dir.path("api.sock");
        let config = Self::config(x, socket.to_str().unwrap());
        let cfg = dir.path("border.toml");
        std::fs::write(&cfg, &config).unwrap();
        std::fs::write(dir.path("gobgpd.toml"), Self::gobgpd_config(x)).unwrap();
        let mgmt = BorderMgmt::start_in(Some(&ns.name), &cfg, dir.path("mgmt.log"));
        let dp = BorderDp::start_following(&ns, &dir, &instance, &config);
        // gobgpd's session runs over the ext port's kernel twin.
        let gobgpd = Self::start_gobgpd(&ns, &dir, "gobgpd.log");
        let a = Appliance {
            x,
            ns,
            dir,
            config,
            dp,
            mgmt,
            gobgpd,
        };
        a.wire();
        a
    }

    fn start_gobgpd(ns: &Netns, dir: &TempDir, log: &str) -> Daemon {
        let cfg = dir.path("gobgpd.toml");
        Daemon::start(
            &ns.name,
            &[
                "gobgpd",
                "-f",
                cfg.to_str().unwrap(),
                "--api-hosts",
                "127.0.0.1:50051",
                "--pprof-disable",
                "-p",
            ],
            dir.path(log),
        )
    }

    /// The data ports into the router's and the backends' bridges.
    fn wire(&self) {
        let x = self.x;
        for (iface, peer, bridge) in [
            (format!("bg{x}-ext"), "bg-r", "bgbr"),
            (format!("bg{x}-int"), "bg-bk", "bgbk"),
        ] {
            wait_iface(&self.ns, &iface);
            run(&[
                "ip",
                "-n",
                &self.ns.name,
                "link",
                "set",
                &iface,
                "netns",
                peer,
            ]);
            run(&["ip", "-n", peer, "link", "set", &iface, "master", bridge]);
            run(&["ip", "-n", peer, "link", "set", &iface, "up"]);
        }
    }

    fn socket(&self) -> String {
        format!("unix://{}", self.dir.path("api.sock").display())
    }

    fn status_json(&self) -> serde_json::Value {
        let (_, out, err) = borderctl(&["--server", &self.socket(), "--json", "status"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json: {e}: {out}{err}"))
    }

    fn logs(&self) -> String {
        format!(
            "--- border-mgmt {x}:\n{}\n--- gobgpd {x}:\n{}\n--- border-dp {x}:\n{}",
            self.mgmt.log_text(),
            self.gobgpd.log_text(),
            self.dp.log_text(),
            x = self.x
        )
    }
}

/// The router's next hops for `vip`, as its kernel has them.
fn next_hops(r: &Netns, vip: &str) -> Vec<String> {
    let out = r.try_run(&["ip", "-4", "route", "show", &format!("{vip}/32")]);
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut hops: Vec<String> = words
        .windows(2)
        .filter(|w| w[0] == "via")
        .map(|w| w[1].to_string())
        .collect();
    hops.sort();
    hops
}

fn hops(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Waits until the router's kernel shows exactly `want` for both VIPs;
/// returns how long it took.
fn wait_next_hops(
    r: &Netns,
    want: &[&str],
    within: Duration,
    ctx: &dyn Fn() -> String,
) -> Duration {
    let start = Instant::now();
    let want = hops(want);
    loop {
        let now = next_hops(r, VIP);
        if now == want && next_hops(r, DNAT_VIP) == want {
            return start.elapsed();
        }
        if start.elapsed() > within {
            let bird = r.try_run(&[
                "birdc",
                "-s",
                "/run/border-e2e-bg-bird.ctl",
                "show",
                "route",
                "all",
            ]);
            panic!(
                "router next hops for {VIP}: {now:?}, expected {want:?} within {within:?}\n--- birdc:\n{}\n{}",
                String::from_utf8_lossy(&bird.stdout),
                ctx()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Long-lived streams per VIP in the kill step.
const STREAMS: usize = 12;

/// New connections through the appliance so far: (full-NAT VIP, DNAT VIP).
fn new_connections(x: &Appliance) -> (u64, u64) {
    let (_, out, err) = borderctl(&["--server", &x.socket(), "--json", "stats"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("stats --json: {e}: {out}{err}"));
    let of = |name: &str| {
        v["vips"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == name))
            .and_then(|x| x["stats"]["new_connections"].as_u64())
            .unwrap_or_else(|| panic!("no {name} in {v}"))
    };
    (of("web"), of("dnat"))
}

/// `n` connections from the client; the appliance (by its local address,
/// as the backend saw it) each went through.
fn appliances_used(n: usize) -> std::collections::BTreeMap<String, usize> {
    let vip: SocketAddr = format!("{VIP}:80").parse().unwrap();
    let names = tcp_names("bg-cli", vip, n);
    let via: Vec<String> = names
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        .collect();
    tally(&via)
}

const BIRD_CTL: &str = "/run/border-e2e-bg-bird.ctl";

fn bird_config() -> String {
    format!(
        r#"log stderr all;
router id {ROUTER};
protocol device {{ scan time 1; }}
protocol kernel {{
  ipv4 {{ import none; export all; }};
  merge paths yes;
  scan time 1;
  debug {{ routes }};
}}
template bgp appliance {{
  local {ROUTER} as 65100;
  hold time 3;
  keepalive time 1;
  connect retry time 1;
  connect delay time 1;
  error wait time 1, 2;
  ipv4 {{ import all; export none; }};
}}
protocol bgp a from appliance {{ neighbor 10.71.0.1 as 65001; }}
protocol bgp b from appliance {{ neighbor 10.71.0.2 as 65002; }}
"#
    )
}

/// The router, the client and the backends' namespace.
fn network(dir: &TempDir) -> (Netns, Netns, Netns, Daemon) {
    let r = Netns::new("bg-r");
    let cli = Netns::new("bg-cli");
    let bk = Netns::new("bg-bk");
    r.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    // Flows from one client spread by port, not only by address.
    r.run(&["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"]);
    for (ns, br, addrs) in [
        (&r, "bgbr", vec!["10.71.0.254/24"]),
        (&bk, "bgbk", vec!["10.72.0.11/24", "10.72.0.12/24"]),
    ] {
        // A fixed MAC: a bridge otherwise takes its ports' lowest, and
        // changes it when a port goes (border-dp killed).
        run(&[
            "ip",
            "-n",
            &ns.name,
            "link",
            "add",
            br,
            "address",
            "02:00:00:00:71:fe",
            "type",
            "bridge",
        ]);
        for a in addrs {
            run(&["ip", "-n", &ns.name, "addr", "add", a, "dev", br]);
        }
        run(&["ip", "-n", &ns.name, "link", "set", br, "up"]);
    }
    run(&[
        "ip", "-n", "bg-cli", "link", "add", "bgc0", "type", "veth", "peer", "name", "bgc1",
        "netns", "bg-r",
    ]);
    run(&[
        "ip",
        "-n",
        "bg-cli",
        "addr",
        "add",
        &format!("{CLIENT}/24"),
        "dev",
        "bgc0",
    ]);
    run(&["ip", "-n", "bg-cli", "link", "set", "bgc0", "up"]);
    run(&[
        "ip",
        "-n",
        "bg-cli",
        "route",
        "add",
        "default",
        "via",
        "10.71.100.1",
    ]);
    run(&[
        "ip",
        "-n",
        "bg-r",
        "addr",
        "add",
        "10.71.100.1/24",
        "dev",
        "bgc1",
    ]);
    run(&["ip", "-n", "bg-r", "link", "set", "bgc1", "up"]);
    let cfg = dir.path("bird.conf");
    std::fs::write(&cfg, bird_config()).unwrap();
    let bird = Daemon::start(
        "bg-r",
        &["bird", "-f", "-c", cfg.to_str().unwrap(), "-s", BIRD_CTL],
        dir.path("bird.log"),
    );
    (r, cli, bk, bird)
}

/// The whole topology, torn down on drop.
struct Lab {
    r: Netns,
    _cli: Netns,
    _bk: Netns,
    bird: Daemon,
    servers: Option<TcpBackends>,
    a: Appliance,
    b: Appliance,
    _dir: TempDir,
}

impl Lab {
    fn start() -> Lab {
        let dir = TempDir::new("bg");
        let (r, cli, bk, bird) = network(&dir);
        let servers = Some(TcpBackends::start("bg-bk", &backends()));
        let a = Appliance::start('a');
        let b = Appliance::start('b');
        // DNAT: the backends route replies through an appliance, B here (it
        // translates replies of flows A forwarded by its reverse map). Once
        // the bridge has ports: a route over a bridge without carrier goes.
        run(&[
            "ip",
            "-n",
            "bg-bk",
            "route",
            "add",
            "10.71.100.0/24",
            "via",
            "10.72.0.2",
        ]);
        Lab {
            r,
            _cli: cli,
            _bk: bk,
            bird,
            servers,
            a,
            b,
            _dir: dir,
        }
    }

    /// Every log, for a failure message.
    fn logs(&self) -> String {
        format!(
            "{}\n{}\n--- bird:\n{}",
            self.a.logs(),
            self.b.logs(),
            self.bird.log_text()
        )
    }

    /// Waits until the router shows exactly `want` for both VIPs.
    fn wait_hops(&self, want: &[&str], within: Duration) -> Duration {
        wait_next_hops(&self.r, want, within, &|| self.logs())
    }

    /// Waits (10 s) until every stream verified more than `since`; on
    /// failure shows the progress and both appliances' counters.
    fn wait_moving(&self, streams: &EchoStreams, since: &[u64], when: &str) {
        let start = Instant::now();
        while !streams
            .progress()
            .iter()
            .zip(since)
            .all(|(now, then)| now > then)
        {
            if start.elapsed() > Duration::from_secs(10) {
                let stats = |x: &Appliance| borderctl(&["--server", &x.socket(), "stats"]).1;
                panic!(
                    "{when}: streams not moving within 10 s: {since:?} -> {:?}\n--- A stats:\n{}\n--- B stats:\n{}",
                    streams.progress(),
                    stats(&self.a),
                    stats(&self.b)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Both appliances announce both VIPs: the router has two next hops with
    /// the configured community, connections from many source ports go
    /// through both, and A's status shows its session and route.
    fn both_announced(&self) {
        let took = self.wait_hops(&both(), Duration::from_secs(30));
        eprintln!("both announced {took:?} after the appliances started");
        let routes = self.r.run(&[
            "birdc",
            "-s",
            BIRD_CTL,
            "show",
            "route",
            "all",
            &format!("{VIP}/32"),
        ]);
        let routes = String::from_utf8_lossy(&routes.stdout);
        assert_eq!(
            routes.matches("BGP.community: (65000,100)").count(),
            2,
            "{routes}"
        );
        let used = appliances_used(40);
        assert_eq!(
            used.len(),
            2,
            "connections land on both appliances: {used:?}"
        );
        // Neighbours are read once a second.
        let a = &self.a;
        wait_until(
            "A's status shows the session established",
            Duration::from_secs(3),
            || a.status_json()["bgp"]["neighbours"][0]["state"] == "established",
        );
        let st = a.status_json();
        assert_eq!(st["bgp"]["connected"], true, "{st}");
        assert_eq!(st["bgp"]["neighbours"][0]["address"], ROUTER, "{st}");
        assert_eq!(st["bgp"]["vips"][0]["announced"], true, "{st}");
        assert_eq!(
            st["bgp"]["vips"][0]["next_hop"],
            Appliance::ext_addr('a'),
            "{st}"
        );
    }

    /// Maintenance on A: its path goes, new connections all go to B, DNAT
    /// streams that were on A go on through B, and the status counts the
    /// connections A still holds. Off: A is back.
    fn maintenance(&self) {
        let a = &self.a;
        let before = new_connections(a).1;
        let streams = EchoStreams::start("bg-cli", dnat_vip(), 8, 1000, PACE, 300);
        let dnat_on_a = new_connections(a).1 - before;
        streams.wait_all_moving(&[0; 8]);
        let out = borderctl_ok(&["--server", &a.socket(), "maintenance", "on"]);
        assert!(out.starts_with("maintenance on"), "{out}");
        let took = self.wait_hops(&[&Appliance::ext_addr('b')], Duration::from_secs(1));
        let st = a.status_json();
        assert_eq!(st["bgp"]["maintenance"], true, "{st}");
        assert_eq!(st["bgp"]["vips"][0]["reason"], "maintenance", "{st}");
        let left = st["bgp"]["active_connections"].as_u64().unwrap();
        assert!(
            left >= dnat_on_a,
            "{dnat_on_a} DNAT streams on A, status says {left} left: {st}"
        );
        let (_, text, _) = borderctl(&["--server", &a.socket(), "status"]);
        assert!(
            text.contains("maintenance   ON: every VIP withdrawn; "),
            "{text}"
        );
        only_through_b(20);
        self.wait_moving(&streams, &streams.progress(), "after maintenance on A");
        for r in streams.finish() {
            assert!(r.error.is_none(), "DNAT stream through maintenance: {r:?}");
        }
        eprintln!(
            "maintenance on A: withdrawn from the router in {took:?}; {dnat_on_a} DNAT streams of A went on through B; status said {left} connections left on A"
        );
        borderctl_ok(&["--server", &a.socket(), "maintenance", "off"]);
        self.wait_hops(&both(), Duration::from_secs(5));
    }

    /// Every backend down: both appliances withdraw; back: both announce.
    fn all_backends_down_and_back(&mut self) {
        drop(self.servers.take());
        let took = self.wait_hops(&[], Duration::from_secs(5));
        eprintln!("every backend down: withdrawn from the router in {took:?}");
        for x in [&self.a, &self.b] {
            // The view follows the calls to gobgpd within a round.
            wait_until(
                "status: no eligible backend",
                Duration::from_secs(1),
                || x.status_json()["bgp"]["vips"][0]["reason"] == "no eligible backend",
            );
        }
        self.servers = Some(TcpBackends::start("bg-bk", &backends()));
        let took = self.wait_hops(&both(), Duration::from_secs(10));
        eprintln!("backends back: announced again in {took:?}");
    }

    /// gobgpd of A stopped: A says so, forwarding goes on (through B once the
    /// router drops A's session); started again, A's path comes back without
    /// touching border-mgmt.
    fn gobgpd_stopped_and_started(&mut self) {
        self.a.gobgpd.kill();
        let a = &self.a;
        wait_until(
            "A's status says gobgpd is unreachable",
            Duration::from_secs(5),
            || a.status_json()["bgp"]["connected"] == false,
        );
        let st = a.status_json();
        let err = st["bgp"]["last_error"].as_str().unwrap_or("").to_string();
        assert!(err.contains("gobgpd 127.0.0.1:50051"), "{st}");
        assert_eq!(st["bgp"]["vips"][0]["reason"], "gobgpd unreachable", "{st}");
        let (_, text, _) = borderctl(&["--server", &a.socket(), "status"]);
        assert!(
            text.contains("gobgpd        127.0.0.1:50051: UNREACHABLE"),
            "{text}"
        );
        self.wait_hops(&[&Appliance::ext_addr('b')], Duration::from_secs(5));
        assert_eq!(appliances_used(10).values().sum::<usize>(), 10);
        self.a.gobgpd = Appliance::start_gobgpd(&self.a.ns, &self.a.dir, "gobgpd-2.log");
        let took = self.wait_hops(&both(), Duration::from_secs(15));
        eprintln!("gobgpd of A restarted: its path is back in {took:?}");
        assert_eq!(self.a.status_json()["bgp"]["connected"], true);
    }

    /// kill -9 A's border-dp with long-lived streams on both VIPs. A's
    /// border-mgmt withdraws within 1 s, but nothing carries that withdraw:
    /// the session died with the twin, and the router's 3 s hold timer,
    /// counted from A's last keepalive, expires 2-3 s after the kill (read
    /// from BIRD's log); BIRD then takes up to ~0.6 s more to flush A's
    /// routes into its kernel (measured), so the kernel bound is 4 s. Every
    /// new connection succeeds; the DNAT streams that were on A go on
    /// through B byte-exact (same Maglev pick, mid-stream pickup); the
    /// full-NAT ones on A (and only those) break: their local port was A's.
    fn kill_dataplane(&mut self) {
        let before = new_connections(&self.a);
        let web_streams = EchoStreams::start("bg-cli", web_vip(), STREAMS, 1000, PACE, 100);
        let dnat_streams = EchoStreams::start("bg-cli", dnat_vip(), STREAMS, 1000, PACE, 200);
        let after = new_connections(&self.a);
        let (web_on_a, dnat_on_a) = (after.0 - before.0, after.1 - before.1);
        eprintln!(
            "streams through A: {web_on_a} of {STREAMS} full-NAT, {dnat_on_a} of {STREAMS} DNAT"
        );
        assert!(web_on_a > 0 && dnat_on_a > 0, "ECMP put no stream on A");
        dnat_streams.wait_all_moving(&[0; STREAMS]);
        let dnat_before_kill = dnat_streams.progress();

        let killed = Instant::now();
        let killed_at = seconds_of_day(std::time::SystemTime::now());
        self.a.dp.kill9();
        let a = &self.a;
        wait_until(
            "A's border-mgmt withdraws within 1 s: dataplane down",
            Duration::from_secs(1),
            || a.status_json()["bgp"]["vips"][0]["reason"] == "dataplane down",
        );
        let withdrawn = killed.elapsed();
        self.wait_hops(
            &[&Appliance::ext_addr('b')],
            Duration::from_secs(4) - withdrawn,
        );
        let dropped = killed.elapsed();
        let expired = self
            .bird
            .log_text()
            .lines()
            .rev()
            .find(|l| l.contains("a: Error: Hold timer expired"))
            .and_then(|l| l.split_whitespace().nth(1).and_then(parse_hms))
            .unwrap_or_else(|| panic!("no hold timer expiry in BIRD's log:\n{}", self.logs()));
        let expired_after = (expired - killed_at).rem_euclid(86_400.0);
        eprintln!(
            "border-dp of A killed: its border-mgmt withdrew in {withdrawn:?}; the router's hold timer expired after {expired_after:.3} s and its kernel dropped A after {dropped:?}"
        );
        assert!(
            expired_after <= 3.15,
            "hold timer expired {expired_after:.3} s after the kill"
        );
        only_through_b(30);

        self.wait_moving(&dnat_streams, &dnat_before_kill, "after the kill");
        for r in dnat_streams.finish() {
            assert!(r.error.is_none() && r.bytes > 0, "DNAT stream {r:?}");
        }
        let web_reports = web_streams.finish();
        let broken = web_reports.iter().filter(|r| r.error.is_some()).count();
        assert_eq!(
            broken as u64, web_on_a,
            "full-NAT streams broken = those on A: {web_reports:?}"
        );
        eprintln!(
            "after the kill: {STREAMS} DNAT streams finished byte-exact ({dnat_on_a} moved from A), {broken} full-NAT streams on A broke"
        );
    }

    /// The DNAT VIP removed from B's config: its route goes, the other stays.
    fn vip_removed(&self) {
        let b = &self.b;
        let without_dnat = b.config.split("\n[[vip]]\nname = \"dnat\"").next().unwrap();
        let file = b.dir.path("without-dnat.toml");
        std::fs::write(&file, without_dnat).unwrap();
        let applied = Instant::now();
        borderctl_ok(&["--server", &b.socket(), "apply", file.to_str().unwrap()]);
        wait_until(
            "the DNAT VIP's route withdrawn",
            Duration::from_secs(1),
            || next_hops(&self.r, DNAT_VIP).is_empty(),
        );
        assert_eq!(next_hops(&self.r, VIP), hops(&[&Appliance::ext_addr('b')]));
        eprintln!(
            "DNAT VIP removed from B's config: withdrawn in {:?}",
            applied.elapsed()
        );
    }

    /// SIGTERM to B's border-mgmt: it withdraws before it exits.
    fn sigterm_withdraws(&mut self) {
        let stopping = Instant::now();
        assert!(self.b.mgmt.stop().success(), "{}", self.b.logs());
        wait_until("B withdrawn", Duration::from_secs(1), || {
            next_hops(&self.r, VIP).is_empty()
        });
        eprintln!(
            "border-mgmt of B stopped and withdrawn in {:?}",
            stopping.elapsed()
        );
        assert!(
            self.b.mgmt.log_text().contains("BGP: withdrawn"),
            "{}",
            self.b.logs()
        );
    }
}

/// UTC seconds since midnight (BIRD runs with TZ=UTC and logs ms).
fn seconds_of_day(t: std::time::SystemTime) -> f64 {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    (d.as_millis() % 86_400_000) as f64 / 1000.0
}

/// `HH:MM:SS.mmm` as seconds since midnight.
fn parse_hms(s: &str) -> Option<f64> {
    let mut it = s.split(':');
    let (h, m, sec) = (it.next()?, it.next()?, it.next()?);
    Some(
        h.parse::<f64>().ok()? * 3600.0
            + m.parse::<f64>().ok()? * 60.0
            + sec.parse::<f64>().ok()?,
    )
}

/// Pace of the long-lived streams' round trips.
const PACE: Duration = Duration::from_millis(20);

fn both() -> [&'static str; 2] {
    ["10.71.0.1", "10.71.0.2"]
}

fn web_vip() -> SocketAddr {
    format!("{VIP}:80").parse().unwrap()
}

fn dnat_vip() -> SocketAddr {
    format!("{DNAT_VIP}:80").parse().unwrap()
}

/// `n` new connections, every one through B.
fn only_through_b(n: usize) {
    let used = appliances_used(n);
    let b = Appliance::int_addr('b');
    assert_eq!(used.keys().collect::<Vec<_>>(), [&b], "{used:?}");
}

#[test]
fn vips_are_announced_by_ecmp_and_withdrawn_on_failure() {
    let t0 = Instant::now();
    let mut lab = Lab::start();
    lab.both_announced();
    lab.maintenance();
    lab.all_backends_down_and_back();
    lab.gobgpd_stopped_and_started();
    lab.kill_dataplane();
    lab.vip_removed();
    lab.sigterm_withdraws();
    eprintln!("e2e_bgp: {:?} in all", t0.elapsed());
}
