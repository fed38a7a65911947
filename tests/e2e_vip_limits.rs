//! `[vip.limits]` end to end: border-mgmt publishes the limits
//! with the tables and border-dp's workers enforce them, on TAP ports
//! between a client and a backend namespace. A denied source is refused
//! (curl times out) and counted; `max_connections` holds against real
//! socat clients; `borderctl apply` raises it without a restart and the
//! next connection gets in.
//!
//! Namespaces `vl-*`, subnets 10.171.0.0/24 (clients) and 10.172.0.0/24
//! (backend).

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use conf::counters::Counter;

const TAG: &str = "vl";
const INSTANCE: &str = "e2evl";
const VIP: &str = "10.171.0.100";
const ALLOWED: &str = "10.171.0.2";
const DENIED: &str = "10.171.0.3";
const BACKEND: &str = "10.172.0.11";

fn vip() -> SocketAddr {
    SocketAddr::new(VIP.parse().unwrap(), 80)
}

/// The config of both processes, with `max_connections` on the VIP.
fn config(socket: &std::path::Path, max_connections: u32) -> String {
    let mut c = two_port_config(
        INSTANCE,
        TAG,
        "10.171.0.1/24",
        "10.172.0.1/24",
        &format!("unix://{}", socket.display()),
    );
    c += &format!(
        r#"
[[vip]]
name = "v"
address = "{VIP}"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 1021

[[vip.backend]]
address = "{BACKEND}"
port = 8080

[vip.limits]
max_connections = {max_connections}
deny = ["{DENIED}/32"]
"#
    );
    c
}

struct Topo {
    dp: BorderDp,
    mgmt: BorderMgmt,
    cli: Netns,
    bk: Netns,
    _lb: Netns,
    cfg: PathBuf,
    socket: PathBuf,
    dir: TempDir,
}

impl Topo {
    fn start() -> Topo {
        clean_instance(INSTANCE);
        let lb = Netns::new(&format!("{TAG}-lb"));
        let cli = Netns::new(&format!("{TAG}-cli"));
        let bk = Netns::new(&format!("{TAG}-bk"));
        let dir = TempDir::new(TAG);
        let socket = dir.path("api.sock");
        let text = config(&socket, 2);
        let cfg = dir.path("border.toml");
        std::fs::write(&cfg, &text).unwrap();
        let mgmt = BorderMgmt::start_with(None, &cfg, dir.path("mgmt.log"), &[]);
        let dp = BorderDp::start_following(&lb, &dir, INSTANCE, &text);
        wait_iface(&lb, &format!("{TAG}-ext"));
        wait_iface(&lb, &format!("{TAG}-int"));
        cli.adopt(
            &lb,
            &format!("{TAG}-ext"),
            &[&format!("{ALLOWED}/24"), &format!("{DENIED}/24")],
        );
        bk.adopt(&lb, &format!("{TAG}-int"), &[&format!("{BACKEND}/24")]);
        cli.run(&["ip", "route", "add", "default", "via", "10.171.0.1"]);
        dp.wait_applied(1);
        Topo {
            dp,
            mgmt,
            cli,
            bk,
            _lb: lb,
            cfg,
            socket,
            dir,
        }
    }

    fn logs(&self) -> String {
        format!(
            "--- border-mgmt:\n{}\n--- border-dp:\n{}",
            self.mgmt.log_text(),
            self.dp.log_text()
        )
    }

    /// A socat client from `ALLOWED` that keeps its connection open (it
    /// sends nothing and waits), until dropped.
    fn hold(&self) -> Spawned {
        self.cli.spawn(&[
            "socat",
            &format!("TCP:{VIP}:80,bind={ALLOWED}"),
            // nofork: the client process is the one holding the socket, so
            // killing it closes the connection.
            "EXEC:sleep 120,nofork",
        ])
    }

    /// Whether a connection from `ALLOWED` is answered by the backend
    /// within 2 s (its greeting read).
    fn answered(&self) -> bool {
        let out = self.cli.try_run(&[
            "socat",
            "-T",
            "2",
            "-u",
            &format!("TCP:{VIP}:80,bind={ALLOWED},connect-timeout=2"),
            "STDOUT",
        ]);
        String::from_utf8_lossy(&out.stdout).starts_with("b0 ")
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        clean_instance(INSTANCE);
    }
}

#[test]
fn a_denied_prefix_and_max_connections_hold_and_an_apply_changes_the_limit() {
    let t = Topo::start();
    let backend = SocketAddr::new(BACKEND.parse().unwrap(), 8080);
    let _backend = TcpBackends::start(&t.bk.name, &[("b0", backend)]);

    // The allowed source gets through (the first SYN may wait for ARP).
    let greeting = tcp_names(&t.cli.name, vip(), 1);
    assert!(greeting[0].starts_with("b0 "), "{greeting:?}\n{}", t.logs());

    // curl from the denied address: its SYNs are dropped and counted.
    let denied = t.cli.try_run(&[
        "curl",
        "-sS",
        "--connect-timeout",
        "2",
        "--interface",
        DENIED,
        &format!("telnet://{VIP}:80"),
    ]);
    assert!(!denied.status.success(), "denied source connected");
    assert!(t.dp.counter(Counter::DropVipAclDenied) >= 1, "{}", t.logs());

    // max_connections = 2: two socat clients hold their connections, a
    // third connection is refused and counted.
    let before = t.dp.counter(Counter::NewFlows);
    let held = [t.hold(), t.hold()];
    wait_until("two held connections", Duration::from_secs(10), || {
        t.dp.counter(Counter::NewFlows) >= before + 2
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!t.answered(), "a third connection got in\n{}", t.logs());
    assert!(t.dp.counter(Counter::DropVipMaxConnections) >= 1);

    // Raised to 3 by borderctl apply: no restart, the next one gets in.
    let pid = t.dp.pid();
    let raised = t.dir.path("raised.toml");
    std::fs::write(&raised, config(&t.socket, 3)).unwrap();
    let out = borderctl_ok(&[
        "apply",
        raised.to_str().unwrap(),
        "--config",
        t.cfg.to_str().unwrap(),
    ]);
    assert!(out.contains("applied: generation 2 published"), "{out}");
    t.dp.wait_applied(2);
    assert!(t.answered(), "the raised limit refused\n{}", t.logs());
    assert_eq!(t.dp.pid(), pid, "border-dp restarted");

    // A held connection that closes gives its place back.
    let third = t.hold();
    let refused = t.dp.counter(Counter::DropVipMaxConnections);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!t.answered(), "a fourth connection got in");
    assert!(t.dp.counter(Counter::DropVipMaxConnections) > refused);
    drop(held);
    wait_until("a place freed by a close", Duration::from_secs(10), || {
        t.answered()
    });
    drop(third);
}

/// `border-dp --standalone` publishes its own tables: the limits of its
/// file apply, and a SIGHUP reload changes them. Namespaces `vs-*`,
/// subnets 10.173.0.0/24 and 10.174.0.0/24.
#[test]
fn standalone_border_dp_enforces_the_lists_and_reloads_them() {
    const T: &str = "vs";
    const INST: &str = "e2evs";
    let config = |deny: &str| {
        let mut c = two_port_config(
            INST,
            T,
            "10.173.0.1/24",
            "10.174.0.1/24",
            "unix:///run/border/e2evs.sock",
        );
        c += &format!(
            "\n[[vip]]\nname = \"v\"\naddress = \"10.173.0.100\"\nport = 80\nmaglev_table_size = 1021\n\n[[vip.backend]]\naddress = \"10.174.0.11\"\nport = 8080\n\n[vip.limits]\ndeny = [\"{deny}\"]\n"
        );
        c
    };
    clean_instance(INST);
    let lb = Netns::new(&format!("{T}-lb"));
    let cli = Netns::new(&format!("{T}-cli"));
    let bk = Netns::new(&format!("{T}-bk"));
    let dir = TempDir::new(T);
    let mut dp = BorderDp::start(&lb, &dir, INST, &config("10.173.0.2/32"));
    wait_iface(&lb, &format!("{T}-ext"));
    wait_iface(&lb, &format!("{T}-int"));
    cli.adopt(&lb, &format!("{T}-ext"), &["10.173.0.2/24"]);
    bk.adopt(&lb, &format!("{T}-int"), &["10.174.0.11/24"]);
    cli.run(&["ip", "route", "add", "default", "via", "10.173.0.1"]);
    let backend = SocketAddr::new("10.174.0.11".parse().unwrap(), 8080);
    let _backend = TcpBackends::start(&bk.name, &[("b0", backend)]);
    let curl = |cli: &Netns| {
        cli.try_run(&[
            "curl",
            "-sS",
            "--connect-timeout",
            "2",
            "--max-time",
            "3",
            "telnet://10.173.0.100:80",
        ])
    };
    // The client's own address is denied: nothing gets through.
    let out = curl(&cli);
    assert!(!out.status.success(), "a denied client connected");
    assert!(
        dp.counter(Counter::DropVipAclDenied) >= 1,
        "{}",
        dp.log_text()
    );

    // Another prefix denied instead: the client gets the backend's greeting.
    let pid = dp.pid();
    dp.reload(&config("192.0.2.0/24"));
    wait_until("the reloaded limits", Duration::from_secs(15), || {
        let out = curl(&cli);
        String::from_utf8_lossy(&out.stdout).starts_with("b0 ")
    });
    assert_eq!(dp.pid(), pid, "border-dp restarted");
    drop(dp);
    clean_instance(INST);
}
