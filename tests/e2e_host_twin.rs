//! The kernel twin (docs/design.md §2a): the kernel of the namespace border-dp runs in
//! reaches a TCP listener behind the `int` port through the twin interface,
//! and a client behind `ext` reaches a listener of that kernel on the port
//! address. Both transfers are checked byte for byte.

mod common;

use std::io::Read;
use std::time::Duration;

use common::*;
use conf::counters::Counter;

const CONFIG: &str = r#"
instance = "e2etwin"

[dataplane]
main_lcore = 0
worker_lcores = [1]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 4096
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface=tw-ext"
addresses = ["10.63.0.1/24"]
host_interface = "ktw-ext"

[[port]]
name = "int"
devargs = "net_tap1,iface=tw-int"
addresses = ["10.64.0.1/24"]
host_interface = "ktw-int"

[mgmt]
listen = "unix:///run/border/e2etwin.sock"
"#;

/// Deterministic payload bigger than a TCP window, so the transfer takes many segments.
fn payload() -> Vec<u8> {
    (0..600_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[test]
fn kernel_twin_carries_tcp_both_ways() {
    let lb = Netns::new("tw-lb");
    let cli = Netns::new("tw-cli");
    let bk = Netns::new("tw-bk");
    let dir = TempDir::new("twin");
    let mut dp = BorderDp::start(&lb, &dir, "e2etwin", CONFIG);
    wait_iface(&lb, "tw-ext");
    wait_iface(&lb, "tw-int");
    wait_iface(&lb, "ktw-int");
    cli.adopt(&lb, "tw-ext", &["10.63.0.2/24"]);
    bk.adopt(&lb, "tw-int", &["10.64.0.11/24"]);

    // The twin carries the port's address, as the kernel sees it.
    let addrs =
        String::from_utf8_lossy(&lb.run(&["ip", "addr", "show", "ktw-int"]).stdout).to_string();
    assert!(addrs.contains("10.64.0.1/24"), "{addrs}");

    let data = payload();
    let sent = dir.path("sent.bin");
    std::fs::write(&sent, &data).unwrap();

    // 1. lb kernel -> backend listener behind the int port.
    let got = dir.path("got-bk.bin");
    let mut listener = bk.spawn(&[
        "socat",
        "-u",
        "TCP-LISTEN:9000,reuseaddr",
        &format!("CREATE:{}", got.display()),
    ]);
    wait_until("listener in bk", Duration::from_secs(10), || {
        String::from_utf8_lossy(&bk.run(&["ss", "-ltn"]).stdout).contains(":9000")
    });
    lb.run(&[
        "socat",
        "-u",
        &format!("OPEN:{}", sent.display()),
        "TCP:10.64.0.11:9000,connect-timeout=5",
    ]);
    let st = listener.wait().unwrap();
    assert!(st.success());
    assert!(
        std::fs::read(&got).unwrap() == data,
        "backend received different bytes"
    );

    // 2. client behind ext -> listener of the lb kernel on the port address.
    let got2 = dir.path("got-lb.bin");
    let mut listener = lb.spawn(&[
        "socat",
        "-u",
        "TCP-LISTEN:9001,bind=10.63.0.1,reuseaddr",
        &format!("CREATE:{}", got2.display()),
    ]);
    wait_until("listener in lb", Duration::from_secs(10), || {
        String::from_utf8_lossy(&lb.run(&["ss", "-ltn"]).stdout).contains(":9001")
    });
    cli.run(&[
        "socat",
        "-u",
        &format!("OPEN:{}", sent.display()),
        "TCP:10.63.0.1:9001,connect-timeout=5",
    ]);
    assert!(listener.wait().unwrap().success());
    let mut back = Vec::new();
    std::fs::File::open(&got2)
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert!(back == data, "lb kernel received different bytes");

    wait_until("counters published", Duration::from_secs(5), || {
        dp.counter(Counter::ToHost) > 100 && dp.counter(Counter::FromHost) > 100
    });
    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
}
