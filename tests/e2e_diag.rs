//! `borderctl diag` end to end (docs/diag.md): border-dp following
//! border-mgmt (which runs in border-dp's namespace and probes through the
//! kernel twins), gobgpd next to them, real backends. Diag is asked with
//! --json; each phase provokes problems and checks that diag names them
//! (finding kinds) with exit status 1:
//!
//! 1. healthy: traffic through a VIP, every backend up, routes announced:
//!    exit 0, no problem;
//! 2. a backend flaps (its server stopped and started, health rise = fall
//!    = 1) and ends down: `backend_flapping`, `vip_fail_open`;
//! 3. during the window: a SYN to a port no VIP serves, a frame with a bad
//!    IPv4 checksum, SYNs to a VIP whose backend nobody answers ARP for, a
//!    SYN to a VIP whose only backend is drained; a kernel twin down, the
//!    ephemeral range grown into the full-NAT pool, a BGP neighbour that
//!    does not answer: `drops_no_vip`, `drops_malformed`,
//!    `drops_neighbour_unresolved`, `drops_no_backend`, `vip_no_backend`,
//!    `host_twin_down`, `local_ports_overlap_ephemeral`, `bgp_session_down`,
//!    `vip_withdrawn`;
//! 4. tables: SYNs beyond the 16 local tuples of the full-NAT pool, a SYN
//!    flood that fills the connection table, then a full-NAT SYN:
//!    `drops_no_local_port`, `local_tuples_low`, `conntrack_high`,
//!    `drops_table_full`;
//! 5. border-dp stopped (SIGSTOP) while a change is published, gobgpd
//!    killed: `worker_heartbeat_old`, `worker_generation_lag`,
//!    `bgp_unreachable`;
//! 6. border-mgmt gone: exit 3.
//!
//! Tag `dg` (namespaces dg-lb, dg-cli, dg-bk), subnet 10.96.x.x, instance `e2edg`.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use conf::counters::Counter;
use serde_json::Value;

const INSTANCE: &str = "e2edg";
const WEB: &str = "10.96.0.100"; // full-NAT -> b0
const DN: &str = "10.96.0.101"; // UDP DNAT -> b0 (the flood's target)
const GHOST: &str = "10.96.0.102"; // DNAT -> 10.96.1.99 (nobody)
const SOLO: &str = "10.96.0.103"; // DNAT -> b0, drained in phase 3
const FLAP: &str = "10.96.0.104"; // DNAT -> b1, health-checked
const B0: &str = "10.96.1.11:8080";
const B1: &str = "10.96.1.12:8080";
const NOBODY_ROUTER: &str = "10.96.0.254";

fn config(socket: &str) -> String {
    let vip = |name: &str, addr: &str, mode: &str, backend: &str, health: bool| {
        let (ip, port) = backend.split_once(':').unwrap();
        let mut v = format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = 80\nmode = \"{mode}\"\n\
             maglev_table_size = 1021\n"
        );
        if health {
            v += "[vip.health]\nkind = \"tcp\"\ninterval_ms = 150\ntimeout_ms = 100\nrise = 1\nfall = 1\n";
        }
        v + &format!("[[vip.backend]]\naddress = \"{ip}\"\nport = {port}\n")
    };
    // A small connection table and 16 local tuples: phase 4 runs out of both.
    let head = two_port_config(
        INSTANCE,
        "dg",
        "10.96.0.1/24",
        "10.96.1.1/24",
        &format!("unix://{socket}"),
    )
    .replace(
        "conntrack_per_worker = 16384",
        "conntrack_per_worker = 1024",
    )
    .replace(
        "local_port_range = [1024, 32767]",
        "local_port_range = [1024, 1039]",
    );
    format!(
        r#"{head}
[mgmt.bgp]
api = "127.0.0.1:50051"

[dataplane.timeouts]
tcp_syn = 20
{}{}{}{}{}"#,
        vip("web", WEB, "fullnat", B0, false),
        vip("dn", DN, "dnat", B0, false).replace("port = 80\n", "port = 80\nprotocol = \"udp\"\n"),
        vip("ghost", GHOST, "dnat", "10.96.1.99:8080", false),
        vip("solo", SOLO, "dnat", B0, false),
        vip("flap", FLAP, "dnat", B1, true),
    )
}

const GOBGPD: &str = r#"[global.config]
  as = 65000
  router-id = "10.96.0.1"
  port = -1
"#;

struct Lab {
    lb: Netns,
    cli: Netns,
    bk: Netns,
    _dir: TempDir,
    dp: BorderDp,
    mgmt: BorderMgmt,
    gobgpd: Option<Spawned>,
    server: String,
}

impl Lab {
    fn start() -> Lab {
        clean_instance(INSTANCE);
        let lb = Netns::new("dg-lb");
        let cli = Netns::new("dg-cli");
        let bk = Netns::new("dg-bk");
        let dir = TempDir::new("dg");
        let socket = dir.path("api.sock");
        let config = config(socket.to_str().unwrap());
        let cfg = dir.path("border.toml");
        std::fs::write(&cfg, &config).unwrap();
        std::fs::write(dir.path("gobgpd.toml"), GOBGPD).unwrap();
        let gobgpd = lb.spawn(&[
            "gobgpd",
            "-f",
            dir.path("gobgpd.toml").to_str().unwrap(),
            "--api-hosts",
            "127.0.0.1:50051",
            "--pprof-disable",
        ]);
        let mgmt = BorderMgmt::start_with(
            Some(&lb.name),
            &cfg,
            dir.path("mgmt.log"),
            &["--liveness-grace-ms", "500"],
        );
        let dp = BorderDp::start_following(&lb, &dir, INSTANCE, &config);
        wait_iface(&lb, "dg-ext");
        wait_iface(&lb, "dg-int");
        cli.adopt(&lb, "dg-ext", &["10.96.0.2/24"]);
        bk.adopt(&lb, "dg-int", &["10.96.1.11/24", "10.96.1.12/24"]);
        cli.run(&["ip", "route", "add", "default", "via", "10.96.0.1"]);
        // Health verdicts publish more generations: any will do.
        wait_until("border-dp on a generation", Duration::from_secs(10), || {
            let a = dp.applied();
            !a.is_empty() && a.iter().all(|&g| g >= 1)
        });
        Lab {
            lb,
            cli,
            bk,
            _dir: dir,
            dp,
            mgmt,
            gobgpd: Some(gobgpd),
            server: format!("unix://{}", socket.display()),
        }
    }

    fn ctl(&self, args: &[&str]) -> String {
        let mut a = vec!["--server", &self.server];
        a.extend_from_slice(args);
        borderctl_ok(&a)
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.ctl(&["status", "--json"])).unwrap()
    }

    fn backend_state(&self, vip: &str) -> String {
        let s = self.status();
        let v = s["vips"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == vip);
        v.unwrap()["backends"][0]["state"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn wait_backend(&self, vip: &str, state: &str) {
        wait_until(&format!("{vip} {state}"), Duration::from_secs(10), || {
            self.backend_state(vip) == state
        });
    }

    /// `borderctl diag --window SECS --json` started in the background.
    fn diag_start(&self, window: u32) -> Child {
        Command::new(borderctl_bin())
            .args(["--server", &self.server, "diag", "--json", "--window"])
            .arg(window.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn logs(&self) -> String {
        format!(
            "--- border-mgmt:\n{}\n--- border-dp:\n{}",
            self.mgmt.log_text(),
            self.dp.log_text()
        )
    }
}

/// diag's exit status and JSON.
fn diag_end(child: Child) -> (i32, Value) {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "diag: {e}: {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// The kinds of the problems (not the notes) diag named.
fn problems(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "problem")
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

fn assert_named(v: &Value, code: i32, kinds: &[&str]) {
    let found = problems(v);
    let missing: Vec<&&str> = kinds
        .iter()
        .filter(|k| !found.iter().any(|f| f == *k))
        .collect();
    assert!(
        missing.is_empty(),
        "diag did not name {missing:?}:\n{}",
        serde_json::to_string_pretty(v).unwrap()
    );
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["healthy"], false);
}

/// `count` TCP SYNs from the client namespace to `dst:port`, `gap_us` apart
/// (hping3 exits 1 when nothing answers: that is the point here).
fn syns(cli: &Netns, dst: &str, port: u16, count: u32, gap_us: u32) {
    cli.try_run(&[
        "hping3",
        "-q",
        "-S",
        "-p",
        &port.to_string(),
        "-c",
        &count.to_string(),
        "-i",
        &format!("u{gap_us}"),
        dst,
    ]);
}

/// Frames with a wrong IPv4 header checksum to the appliance's ext port.
fn bad_checksums(cli: &Netns) {
    cli.run(&["ping", "-c", "1", "-W", "2", "10.96.0.1"]);
    let neigh = cli.run(&["ip", "neigh", "show", "10.96.0.1", "dev", "dg-ext"]);
    let text = String::from_utf8_lossy(&neigh.stdout).to_string();
    let mac = text
        .split_whitespace()
        .skip_while(|w| *w != "lladdr")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC for 10.96.0.1: {text}"))
        .to_string();
    // Debian's python3 (python3-scapy), not another one first in PATH.
    cli.run(&[
        "/usr/bin/python3",
        "-c",
        &format!(
            "from scapy.all import Ether, IP, TCP, sendp\n\
             sendp(Ether(dst='{mac}')/IP(dst='{WEB}', chksum=0x1234)/TCP(dport=80, flags='S'), \
             iface='dg-ext', count=3, verbose=0)"
        ),
    ]);
}

#[test]
fn diag_names_each_problem_and_exits_by_what_it_found() {
    let mut lab = Lab::start();
    let mut b0 = Some(TcpBackends::start(
        &lab.bk.name,
        &[("b0", B0.parse::<SocketAddr>().unwrap())],
    ));
    let mut b1 = Some(TcpBackends::start(
        &lab.bk.name,
        &[("b1", B1.parse::<SocketAddr>().unwrap())],
    ));
    lab.wait_backend("flap", "UP");

    // 1. Healthy: a connection through the full-NAT VIP, routes announced.
    wait_until("routes announced", Duration::from_secs(10), || {
        let s = lab.status();
        s["bgp"]["vips"]
            .as_array()
            .is_some_and(|v| v.iter().all(|r| r["announced"] == true))
    });
    let web: SocketAddr = format!("{WEB}:80").parse().unwrap();
    assert_eq!(
        tcp_names(&lab.cli.name, web, 1),
        ["b0 10.96.1.1"],
        "full-NAT from the local address"
    );
    let (code, v) = diag_end(lab.diag_start(1));
    assert_eq!(
        (code, problems(&v)),
        (0, Vec::new()),
        "healthy:\n{}\n{}",
        serde_json::to_string_pretty(&v).unwrap(),
        lab.logs()
    );
    assert_eq!(v["healthy"], true);
    assert_eq!(v["workers"][0]["conntrack_capacity"], 1024);

    // 2. b1 flaps and ends down: its VIP fails open.
    for state in ["DOWN", "UP", "DOWN"] {
        if state == "DOWN" {
            b1 = None;
        } else {
            b1 = Some(TcpBackends::start(
                &lab.bk.name,
                &[("b1", B1.parse::<SocketAddr>().unwrap())],
            ));
        }
        lab.wait_backend("flap", state);
    }
    drop(b1);
    let (code, v) = diag_end(lab.diag_start(1));
    assert_named(&v, code, &["backend_flapping", "vip_fail_open"]);

    // 3. Drops by reason, a drained VIP, the twin, the ephemeral range, BGP.
    lab.ctl(&["drain", "solo", B0]);
    lab.lb.run(&["ip", "link", "set", "dev", "kdg-ext", "down"]);
    lab.lb.run(&[
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ip_local_port_range=1030 60999",
    ]);
    lab.lb.run(&[
        "gobgp",
        "-u",
        "127.0.0.1",
        "-p",
        "50051",
        "neighbor",
        "add",
        NOBODY_ROUTER,
        "as",
        "65100",
    ]);
    // A wide window: scapy alone takes seconds to start on a busy machine.
    let diag = lab.diag_start(12);
    std::thread::sleep(Duration::from_millis(500));
    bad_checksums(&lab.cli);
    syns(&lab.cli, SOLO, 80, 3, 10_000);
    syns(&lab.cli, WEB, 81, 3, 10_000);
    syns(&lab.cli, GHOST, 80, 8, 1_000);
    let (code, v) = diag_end(diag);
    assert_named(
        &v,
        code,
        &[
            "drops_no_vip",
            "drops_malformed",
            "drops_neighbour_unresolved",
            "drops_no_backend",
            "vip_no_backend",
            "host_twin_down",
            "local_ports_overlap_ephemeral",
            "bgp_session_down",
            "vip_withdrawn",
        ],
    );
    let drops: Vec<&str> = v["drops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["counter"].as_str().unwrap())
        .collect();
    assert!(drops.contains(&"drop_ipv4_bad_checksum"), "{drops:?}");
    lab.lb.run(&["ip", "link", "set", "dev", "kdg-ext", "up"]);
    lab.lb.run(&[
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ip_local_port_range=32768 60999",
    ]);

    // 4. The full-NAT pool (16 tuples) and the connection table (1024).
    let diag = lab.diag_start(8);
    std::thread::sleep(Duration::from_millis(300));
    syns(&lab.cli, WEB, 80, 30, 2_000);
    // UDP DNAT entries from random sources until the table is full (paced:
    // a burst beyond the TAP queue is lost before border-dp sees it). UDP,
    // because half-open TCP entries would give way to the new full-NAT flows
    // (the SYN flood defence) and the table would never refuse one.
    wait_until("a full connection table", Duration::from_secs(6), || {
        lab.cli.try_run(&[
            "hping3",
            "-q",
            "--udp",
            "-p",
            "80",
            "-i",
            "u200",
            "-c",
            "400",
            "--rand-source",
            DN,
        ]);
        lab.dp.counter(Counter::ConntrackEntries) >= 1024
    });
    syns(&lab.cli, WEB, 80, 3, 10_000);
    let (code, v) = diag_end(diag);
    assert_named(
        &v,
        code,
        &[
            "drops_no_local_port",
            "local_tuples_low",
            "conntrack_high",
            "drops_table_full",
        ],
    );

    // 5. border-dp stopped while a change is published; gobgpd gone.
    let pid = lab.dp.pid().to_string();
    run(&["kill", "-STOP", &pid]);
    lab.ctl(&["weight", "web", B0, "2"]);
    lab.gobgpd = None;
    let (code, v) = diag_end(lab.diag_start(1));
    run(&["kill", "-CONT", &pid]);
    assert_named(
        &v,
        code,
        &[
            "worker_heartbeat_old",
            "worker_generation_lag",
            "bgp_unreachable",
        ],
    );

    // 6. border-mgmt gone: nothing could be asked.
    lab.mgmt.stop();
    let (code, out, err) = borderctl(&["--server", &lab.server, "diag", "--window", "1"]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("border-mgmt"), "{err}");
    b0.take();
}
