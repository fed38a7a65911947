//! Port MTUs end to end: what DPDK 22.11's virtual PMDs can take.
//!
//! They bound the MTU by the longest frame they say they receive: net_tap
//! 1522 bytes (MTU 1504), net_af_packet and net_memif 1518; net_af_xdp a
//! UMEM frame (68..=3542: no multi-buffer). So `mtu = 9000` on a TAP or
//! af_xdp port must end border-dp at start with one line naming that
//! limit; jumbo frames proper, and the ICMP too-big answers, are covered
//! on byte fixtures (dataplane/tests/jumbo.rs, dataplane/tests/lb_dsr.rs).
//!
//! Namespaces `jb-lb`, `jb-cli`; subnets 10.154.0.0/24 and 10.155.0.0/24.
//! The tests share the names, so they run one at a time under a lock.

mod common;

use std::sync::Mutex;

use common::*;

/// The tests share namespace names.
static SERIAL: Mutex<()> = Mutex::new(());

const TAG: &str = "jb";

/// Starts border-dp with both data ports on `kind` at `mtu = 9000` and
/// returns the one error line it ended with.
fn refused_start(kind: PortKind) -> String {
    let lb = Netns::new("jb-lb");
    let peer = Netns::new("jb-cli");
    kind.prepare(&lb, &peer, "jb-ext");
    kind.prepare(&lb, &peer, "jb-int");
    let dir = TempDir::new(TAG);
    let cfg = dir.path("border.toml");
    let text = two_port_config_on(
        kind,
        "e2ejb",
        TAG,
        "10.154.0.1/24",
        "10.155.0.1/24",
        "unix:///run/border/e2ejb.sock",
    )
    .replace(
        "host_interface = \"kjb-ext\"",
        "host_interface = \"kjb-ext\"\nmtu = 9000",
    );
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new("timeout")
        .args(["30", "ip", "netns", "exec", &lb.name, border_dp_bin()])
        .args(["--standalone", "--config"])
        .arg(&cfg)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run border-dp");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("border-dp: error"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    eprintln!("{kind:?}: {}", lines[0]);
    lines[0].to_string()
}

#[test]
fn an_mtu_net_tap_cannot_take_ends_the_start_with_one_line() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let line = refused_start(PortKind::Tap);
    assert!(
        line.contains("port `ext`")
            && line.contains("mtu 9000 needs 9018-byte frames, net_tap takes at most 1522"),
        "{line}"
    );
}

#[test]
fn an_mtu_net_af_xdp_cannot_take_ends_the_start_with_one_line() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let line = refused_start(PortKind::AfXdp);
    assert!(
        line.contains("port `ext`")
            && line.contains("mtu 9000 is outside what net_af_xdp takes (68..=3542)"),
        "{line}"
    );
}
