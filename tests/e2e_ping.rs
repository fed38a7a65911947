//! border-dp on two TAP ports moved into client and backend namespaces:
//! ARP and NDP resolve to the port's MAC, and ping to the port addresses and
//! to the VIPs is answered by the dataplane, over IPv4 and IPv6.

mod common;

use std::time::Duration;

use common::*;
use conf::counters::Counter;

const CONFIG: &str = r#"
instance = "e2eping"

[dataplane]
main_lcore = 0
worker_lcores = [1]
poll = "adaptive"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 4096
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface=pg-ext"
addresses = ["10.61.0.1/24", "fd00:61::1/64"]
host_interface = "kpg-ext"
mac = "02:00:00:61:00:01"

[[port]]
name = "int"
devargs = "net_tap1,iface=pg-int"
addresses = ["10.62.0.1/24"]
host_interface = "kpg-int"
mac = "02:00:00:62:00:01"
local_addresses = ["10.62.0.1"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix:///run/border/e2eping.sock"

[[vip]]
name = "web"
address = "10.61.0.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "10.62.0.11"
port = 8080

[[vip]]
name = "web6"
address = "fd00:61::100"
port = 80
protocol = "tcp"
mode = "dnat"
maglev_table_size = 251
[[vip.backend]]
address = "fd00:61::200"
port = 8080
"#;

fn neigh_mac(ns: &Netns, ip: &str) -> String {
    let out = ns.run(&["ip", "neigh", "show", ip]);
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn arp_ndp_and_ping_are_answered_for_port_addresses_and_vips() {
    let lb = Netns::new("pg-lb");
    let cli = Netns::new("pg-cli");
    let bk = Netns::new("pg-bk");
    let dir = TempDir::new("ping");
    let mut dp = BorderDp::start(&lb, &dir, "e2eping", CONFIG);
    wait_iface(&lb, "pg-ext");
    wait_iface(&lb, "pg-int");
    cli.adopt(&lb, "pg-ext", &["10.61.0.2/24", "fd00:61::2/64"]);
    bk.adopt(&lb, "pg-int", &["10.62.0.11/24"]);

    for (ns, target) in [
        (&cli, "10.61.0.1"),
        (&cli, "10.61.0.100"),
        (&bk, "10.62.0.1"),
    ] {
        let out = ns.try_run(&["ping", "-c", "3", "-i", "0.2", "-W", "2", target]);
        assert!(
            out.status.success(),
            "ping {target} from {} failed:\n{}\n{}",
            ns.name,
            String::from_utf8_lossy(&out.stdout),
            dp.log_text()
        );
    }
    for target in ["fd00:61::1", "fd00:61::100"] {
        let out = cli.try_run(&["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", target]);
        assert!(
            out.status.success(),
            "ping {target} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            dp.log_text()
        );
    }

    // The neighbours learnt the configured port MACs from our ARP/NDP answers.
    assert!(neigh_mac(&cli, "10.61.0.1").contains("02:00:00:61:00:01"));
    assert!(neigh_mac(&cli, "10.61.0.100").contains("02:00:00:61:00:01"));
    assert!(neigh_mac(&cli, "fd00:61::100").contains("02:00:00:61:00:01"));
    assert!(neigh_mac(&bk, "10.62.0.1").contains("02:00:00:62:00:01"));

    // Nobody answers for an address the appliance does not own.
    let out = cli.try_run(&["ping", "-c", "1", "-W", "1", "10.61.0.77"]);
    assert!(!out.status.success());

    wait_until("counters published", Duration::from_secs(5), || {
        dp.counter(Counter::IcmpEchoReplies) >= 9
    });
    assert_eq!(dp.counter(Counter::IcmpEchoReplies), 9);
    assert_eq!(dp.counter(Counter::Icmpv6EchoReplies), 6);
    assert!(dp.counter(Counter::ArpReplies) >= 3);
    assert!(dp.counter(Counter::NdpAdvertisements) >= 1);
    assert!(dp.counter(Counter::DropArpNotOurs) >= 1);
    assert!(dp.counter(Counter::TxPackets) >= 15);

    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
    assert!(
        dp.state().run_state() == conf::state::RunState::Stopped,
        "state region not marked stopped"
    );
}
