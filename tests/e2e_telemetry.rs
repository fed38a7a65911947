//! border-dp's counters and port statistics on DPDK's telemetry socket, as
//! an operator sees them with Debian's `dpdk-telemetry.py`: pings to the
//! port address move `icmp_echo_replies` and the port's packet counts, and
//! the script shows the same numbers as the state region. The EAL flags are
//! the tests' usual `--no-huge --no-shconf` (with border-dp's own
//! `--file-prefix=border-<instance>`): telemetry needs neither shared config
//! nor hugepages. Namespaces `op-*`, subnet 10.95.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use conf::counters::Counter;
use serde_json::Value;

const INSTANCE: &str = "e2eoptel";

/// Runs `dpdk-telemetry.py -f border-<instance>` with `cmds` on stdin (its
/// non-interactive mode: one JSON line per command) and returns the replies.
fn telemetry(cmds: &[&str]) -> Vec<Value> {
    let mut child = Command::new("dpdk-telemetry.py")
        .args(["-f", &format!("border-{INSTANCE}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dpdk-telemetry.py (Debian package dpdk)");
    let mut stdin = child.stdin.take().unwrap();
    for c in cmds {
        writeln!(stdin, "{c}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dpdk-telemetry.py failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replies: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(replies.len(), cmds.len(), "one reply per command: {text}");
    replies
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn dpdk_telemetry_script_shows_border_counters_and_ports() {
    let lb = Netns::new("op-lb");
    let cli = Netns::new("op-cli");
    let dir = TempDir::new("optel");
    let config = two_port_config(
        INSTANCE,
        "op",
        "10.95.1.1/24",
        "10.95.2.1/24",
        "unix:///run/border/e2eoptel.sock",
    );
    let mut dp = BorderDp::start(&lb, &dir, INSTANCE, &config);
    cli.adopt(&lb, "op-ext", &["10.95.1.2/24"]);
    assert!(
        dp.log_text().contains("DPDK telemetry"),
        "{}",
        dp.log_text()
    );

    let before = telemetry(&["/border/counters", "/border/port_stats,ext"]);
    let replies_before = u(&before[0]["/border/counters"]["icmp_echo_replies"]);
    let ext_rx_before = u(&before[1]["/border/port_stats"]["ipackets"]);

    let out = cli.try_run(&["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.95.1.1"]);
    assert!(out.status.success(), "ping: {}", dp.log_text());
    wait_until("counters published", Duration::from_secs(5), || {
        dp.counter(Counter::IcmpEchoReplies) >= replies_before + 5
    });

    let r = telemetry(&[
        "/border/info",
        "/border/counters",
        "/border/counters,0",
        "/border/ports",
        "/border/port_stats,ext",
        "/border/port_stats",
        "/border/counters,9",
        "/border/port_stats,kop-ext",
    ]);
    let info = &r[0]["/border/info"];
    assert_eq!(info["instance"], INSTANCE);
    assert_eq!(info["run_state"], "running");
    assert_eq!(u(&info["pid"]), u64::from(dp.pid()));
    assert_eq!(u(&info["workers"]), 1);
    assert_eq!(u(&info["ports"]), 4, "two ports and their twins");

    let total = &r[1]["/border/counters"];
    assert_eq!(
        u(&total["icmp_echo_replies"]),
        dp.counter(Counter::IcmpEchoReplies)
    );
    assert_eq!(u(&total["icmp_echo_replies"]), replies_before + 5);
    let w0 = &r[2]["/border/counters"];
    assert_eq!(u(&w0["icmp_echo_replies"]), replies_before + 5);
    assert_eq!(u(&w0["lcore"]), 1);
    assert!(u(&w0["heartbeat"]) > 0, "{w0}");

    let ports = &r[3]["/border/ports"];
    // DPDK takes reply names of A-Za-z0-9_/ only: kop-ext shows as kop_ext.
    for name in ["ext", "int", "kop_ext", "kop_int"] {
        assert!(ports[name].is_u64(), "{name} missing: {ports}");
    }
    let ext = &r[4]["/border/port_stats"];
    assert!(u(&ext["ipackets"]) >= ext_rx_before + 5, "{ext}");
    assert!(u(&ext["opackets"]) >= 5, "{ext}");
    assert!(u(&ext["ibytes"]) >= 5 * 98, "{ext}");
    let all = &r[5]["/border/port_stats"];
    assert!(u(&all["ext/ipackets"]) >= ext_rx_before + 5, "{all}");
    assert!(all["kop_int/opackets"].is_u64(), "{all}");
    assert!(
        r[6]["/border/counters"].is_null(),
        "unknown worker: {}",
        r[6]
    );
    assert!(r[7]["/border/port_stats"]["ipackets"].is_u64(), "{}", r[7]);

    // DPDK's own ethdev commands see the same port.
    let id = u(&ports["ext"]);
    let eth = telemetry(&[&format!("/ethdev/stats,{id}")]);
    assert!(u(&eth[0]["/ethdev/stats"]["ipackets"]) >= ext_rx_before + 5);

    // EAL's runtime directory (the telemetry socket's) goes with a clean exit.
    let runtime_dir = std::path::Path::new("/run/dpdk").join(format!("border-{INSTANCE}"));
    assert!(runtime_dir.join("dpdk_telemetry.v2").exists());
    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
    assert!(
        !runtime_dir.exists(),
        "{} left behind: {:?}",
        runtime_dir.display(),
        std::fs::read_dir(&runtime_dir).map(|d| d.count())
    );
}
