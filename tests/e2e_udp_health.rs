//! UDP health probes end to end (docs/health.md): border-dp follows the
//! tables border-mgmt publishes; border-mgmt, in the appliance's namespace,
//! probes the backends through the kernel twin. What is checked is what
//! `borderctl status --json` says, and where the client's queries land.
//!
//! - A UDP DNS VIP over two real DNS servers (dnsmasq) in the backends'
//!   namespace, `kind = "dns"`: both up; the client's queries through the
//!   VIP reach both. One dnsmasq stopped: its backend goes down (the ICMP
//!   port unreachable is the reason) and every query is answered by the
//!   other; started again, it comes back.
//! - `kind = "udp"` against a socat echo server: `expect` that the echo
//!   contains passes, an `expect_regex` it does not match fails with the
//!   reply in the reason; a probe `port` of 7 passes for a backend whose
//!   service port (9) is closed, and the same probe without it fails.
//!
//! Namespaces `uh-lb`, `uh-cli`, `uh-bk`; subnets 10.121.0.0/24 (client
//! side) and 10.122.0.0/24 (backends).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const INSTANCE: &str = "e2euh";
const DNS_VIP: &str = "10.121.0.53:53";
const DNS_BACKENDS: [&str; 2] = ["10.122.0.11", "10.122.0.12"];
const ECHO: &str = "10.122.0.14";
/// How long any awaited state may take (rise = fall = 2 at 300 ms).
const WITHIN: Duration = Duration::from_secs(15);

fn config(socket: &Path) -> String {
    let mut c = two_port_config(
        INSTANCE,
        "uh",
        "10.121.0.1/24",
        "10.122.0.1/24",
        &format!("unix://{}", socket.display()),
    );
    let timing = "interval_ms = 300\ntimeout_ms = 200\nrise = 2\nfall = 2\n";
    c += &format!(
        "\n[[vip]]\nname = \"dns\"\naddress = \"10.121.0.53\"\nport = 53\nprotocol = \"udp\"\nmaglev_table_size = 1021\n\
         [vip.health]\nkind = \"dns\"\nquery = \"health.test\"\nquery_type = \"A\"\n{timing}"
    );
    for b in DNS_BACKENDS {
        c += &format!("[[vip.backend]]\naddress = \"{b}\"\nport = 53\n");
    }
    // (name, VIP address, backend port, the udp probe's own keys)
    for (name, vip, port, probe) in [
        ("echo", "10.121.0.7", 7, "expect = \"PING\"\n"),
        ("pong", "10.121.0.8", 7, "expect_regex = \"^PONG\"\n"),
        (
            "probeport",
            "10.121.0.9",
            9,
            "port = 7\nexpect = \"PING\"\n",
        ),
        ("noport", "10.121.0.10", 9, "expect = \"PING\"\n"),
    ] {
        c += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{vip}\"\nport = {port}\nprotocol = \"udp\"\nmaglev_table_size = 1021\n\
             [vip.health]\nkind = \"udp\"\nsend = \"PING border\\n\"\n{probe}{timing}\
             [[vip.backend]]\naddress = \"{ECHO}\"\nport = {port}\n"
        );
    }
    c
}

/// dnsmasq on `addr`:53 answering `health.test` with `answer`, nothing
/// else (no upstream, no hosts file, no DHCP), in the foreground.
fn dnsmasq(bk: &Netns, addr: &str, answer: &str) -> Spawned {
    let d = bk.spawn(&[
        "dnsmasq",
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        &format!("--listen-address={addr}"),
        "--port=53",
        "--user=root",
        "--group=root",
        "--pid-file=",
        &format!("--address=/health.test/{answer}"),
    ]);
    let a: SocketAddr = format!("{addr}:53").parse().unwrap();
    wait_until(&format!("dnsmasq on {a}"), Duration::from_secs(10), || {
        query(&bk.name, a).is_some()
    });
    d
}

/// One A query for health.test to `to` from namespace `ns` (a new source
/// port each time: a new flow through a VIP); the address answered.
fn query(ns: &str, to: SocketAddr) -> Option<String> {
    in_netns(ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let id = query_id();
        let q = mgmt::health::dns_message::encode_query(id, "health.test", 1);
        s.send_to(&q, to).ok()?;
        let mut buf = [0u8; 512];
        let n = s.recv(&mut buf).ok()?;
        let r = mgmt::health::dns_message::read_response(&buf[..n], id, "health.test", 1).ok()?;
        // The one A record is the message's last 4 bytes.
        (r.rcode == 0 && r.answers == 1 && n >= 4).then(|| {
            let a = &buf[n - 4..n];
            format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
        })
    })
    .join()
    .unwrap()
}

fn query_id() -> u16 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        & 0xffff) as u16
}

/// `n` queries through the DNS VIP from the client; the answers.
fn answers(cli: &Netns, n: usize) -> Vec<String> {
    let vip: SocketAddr = DNS_VIP.parse().unwrap();
    (0..n)
        .map(|i| {
            (0..3)
                .find_map(|_| query(&cli.name, vip))
                .unwrap_or_else(|| panic!("query {i} through {vip}: no answer in 3 tries"))
        })
        .collect()
}

struct Status {
    server: String,
    mgmt: BorderMgmt,
}

impl Status {
    fn backend(&self, vip: &str, addr: &str) -> serde_json::Value {
        let (_, out, err) = borderctl(&["--server", &self.server, "--json", "status"]);
        let st: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json: {e}: {out}{err}"));
        let v = st["vips"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == vip))
            .unwrap_or_else(|| panic!("no VIP {vip} in {st}"));
        v["backends"]
            .as_array()
            .and_then(|bs| bs.iter().find(|b| b["address"] == addr))
            .unwrap_or_else(|| panic!("no backend {addr} in {v}"))
            .clone()
    }

    /// Waits until the backend is in `state` with a reason that starts
    /// with `reason`; returns the whole reason.
    fn wait(&self, vip: &str, addr: &str, state: &str, reason: &str) -> String {
        let start = Instant::now();
        loop {
            let b = self.backend(vip, addr);
            let r = b["reason"].as_str().unwrap_or_default();
            if b["state"] == state && r.starts_with(reason) {
                return r.to_string();
            }
            assert!(
                start.elapsed() < WITHIN,
                "{vip} {addr}: timed out waiting for {state} {reason:?}; now {b}\n{}",
                self.mgmt.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn udp_health_probes_end_to_end() {
    let lb = Netns::new("uh-lb");
    let cli = Netns::new("uh-cli");
    let bk = Netns::new("uh-bk");
    let dir = TempDir::new("udp-health");
    let socket = dir.path("mgmt.sock");
    let cfg_path = dir.path("mgmt.toml");
    let cfg = config(&socket);
    std::fs::write(&cfg_path, &cfg).unwrap();
    clean_instance(INSTANCE);

    let mut dp = BorderDp::start_following(&lb, &dir, INSTANCE, &cfg);
    wait_iface(&lb, "uh-ext");
    wait_iface(&lb, "uh-int");
    cli.adopt(&lb, "uh-ext", &["10.121.0.2/24"]);
    bk.adopt(
        &lb,
        "uh-int",
        &["10.122.0.11/24", "10.122.0.12/24", "10.122.0.14/24"],
    );
    cli.run(&["ip", "route", "add", "default", "via", "10.121.0.1"]);
    bk.run(&["ip", "route", "add", "default", "via", "10.122.0.1"]);
    // The kernel rate-limits port-unreachable per destination (a burst of 6,
    // then one a second). Every ICMP here goes to the one prober, at more
    // than 3 a second across the test, so a limited backend would turn the
    // "port unreachable" reasons into timeouts at random.
    bk.run(&["sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"]);

    let mut dns0 = dnsmasq(&bk, DNS_BACKENDS[0], "10.0.0.11");
    let _dns1 = dnsmasq(&bk, DNS_BACKENDS[1], "10.0.0.12");
    let _echo = bk.spawn(&[
        "socat",
        "-lf",
        "/dev/null",
        &format!("UDP4-RECVFROM:7,bind={ECHO},fork"),
        "EXEC:cat",
    ]);

    let st = Status {
        server: format!("unix://{}", socket.display()),
        mgmt: BorderMgmt::start_in(Some(&lb.name), &cfg_path, dir.path("mgmt.log")),
    };

    // ---- dns: both DNS servers up, queries through the VIP reach both ----
    let dns_b = |i: usize| format!("{}:53", DNS_BACKENDS[i]);
    for i in 0..2 {
        let r = st.wait("dns", &dns_b(i), "UP", "up: DNS NOERROR (1 answer)");
        assert_eq!(r, "up: DNS NOERROR (1 answer)");
    }
    let before = tally(&answers(&cli, 24));
    assert_eq!(
        before.keys().cloned().collect::<Vec<_>>(),
        ["10.0.0.11", "10.0.0.12"],
        "both DNS backends answer through the VIP: {before:?}"
    );

    // ---- dns: one server stopped goes down, the other answers everything ----
    let _ = dns0.kill();
    let _ = dns0.wait();
    let r = st.wait("dns", &dns_b(0), "DOWN", "down: ");
    assert_eq!(
        r, "down: DNS query: port unreachable (ICMP) (2 consecutive failures)",
        "the stopped server's port answers ICMP port unreachable"
    );
    st.wait("dns", &dns_b(1), "UP", "up: DNS NOERROR");
    let after = tally(&answers(&cli, 24));
    assert_eq!(
        after.into_iter().collect::<Vec<_>>(),
        [("10.0.0.12".to_string(), 24)],
        "every query goes to the healthy DNS server"
    );

    // ---- dns: started again, it comes back ----
    let _dns0 = dnsmasq(&bk, DNS_BACKENDS[0], "10.0.0.11");
    st.wait("dns", &dns_b(0), "UP", "up: DNS NOERROR (1 answer)");
    wait_until(
        "queries through the VIP reach the restarted server",
        WITHIN,
        || answers(&cli, 12).iter().any(|a| a == "10.0.0.11"),
    );

    // ---- udp: the echo matches "PING", not "^PONG" ----
    let echo7 = format!("{ECHO}:7");
    let r = st.wait("echo", &echo7, "UP", "up: ");
    assert_eq!(r, "up: UDP reply contains \"PING\"");
    let r = st.wait("pong", &echo7, "DOWN", "down: ");
    assert!(
        r.starts_with(
            "down: UDP reply \"PING border\\n\" does not match \"^PONG\" (2 consecutive failures)"
        ),
        "{r}"
    );

    // ---- port: the probe goes to 7 while the service port 9 is closed ----
    let echo9 = format!("{ECHO}:9");
    let r = st.wait("probeport", &echo9, "UP", "up: ");
    assert_eq!(r, "up: UDP reply contains \"PING\"");
    let r = st.wait("noport", &echo9, "DOWN", "down: ");
    assert!(
        r.starts_with("down: port unreachable (ICMP) (2 consecutive failures)"),
        "{r}"
    );

    let mut mgmt = st.mgmt;
    let code = mgmt.stop();
    assert!(
        code.success(),
        "border-mgmt exit {code}:\n{}",
        mgmt.log_text()
    );
    let code = dp.stop();
    assert!(code.success(), "border-dp exit {code}:\n{}", dp.log_text());
    clean_instance(INSTANCE);
}
