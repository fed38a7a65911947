//! The public example file parses and every field comes out as written.

use std::net::IpAddr;
use std::path::Path;

use conf::config::DEFAULT_LOCAL_PORT_RANGE;
use conf::{
    check_config_file, Config, HealthKind, IpNet, Listen, Mode, PollMode, PpTlv, Protocol,
    ProxyProtocol, Timeouts,
};

fn example_path() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/border.example.toml"
    ))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

#[test]
fn example_parses_as_written() {
    let c = check_config_file(example_path()).unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(c.instance, "demo");
    assert_eq!(c.zone.as_deref(), Some("a"));

    let d = &c.dataplane;
    assert_eq!(d.main_lcore, 0);
    assert_eq!(d.worker_lcores, vec![1]);
    assert_eq!(d.poll, PollMode::Adaptive);
    assert_eq!(
        d.eal_args,
        vec!["--no-huge", "-m", "512", "--no-pci", "--no-shconf"]
    );
    assert_eq!(d.conntrack_per_worker, 1_048_576);
    assert_eq!(
        d.flow_hash_key,
        [
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff
        ]
    );
    assert_eq!(
        d.timeouts,
        Timeouts {
            tcp_syn: 30,
            tcp_established: 900,
            tcp_closing: 10,
            udp: 300,
            local_port_cooldown: 60,
        }
    );

    assert_eq!(c.ports.len(), 2);
    let ext = &c.ports[0];
    assert_eq!(ext.name, "ext");
    assert_eq!(ext.devargs, "net_tap0,iface=border-ext");
    assert_eq!(ext.device_name(), "net_tap0");
    assert_eq!(ext.addresses, vec![net("10.10.0.1/24")]);
    assert_eq!(ext.gateway, Some(ip("10.10.0.254")));
    assert_eq!(ext.host_interface, "kni-ext");
    assert!(ext.local_addresses.is_empty());
    assert_eq!(ext.local_port_range, None);
    assert_eq!(ext.mac, None);

    let int = &c.ports[1];
    assert_eq!(int.name, "int");
    assert_eq!(int.devargs, "net_tap1,iface=border-int");
    assert_eq!(int.addresses, vec![net("10.20.0.1/24")]);
    assert_eq!(int.gateway, None);
    assert_eq!(int.host_interface, "kni-int"); // the default
    assert_eq!(int.local_addresses, vec![ip("10.20.0.1")]);
    assert_eq!(int.local_port_range, Some((1024, 32767)));
    assert_eq!(int.mac, None);

    assert_eq!(c.mgmt.listen, "unix:///run/border/demo.sock");
    assert_eq!(
        c.mgmt.listen_addr(),
        Some(Listen::Unix("/run/border/demo.sock".into()))
    );
    assert_eq!(
        c.mgmt.metrics_listen,
        Some("127.0.0.1:9108".parse().unwrap())
    );
    assert_eq!(c.mgmt.tls, None);

    assert_eq!(c.vips.len(), 1);
    let v = &c.vips[0];
    assert_eq!(v.name, "web");
    assert_eq!(v.address, ip("10.10.0.100"));
    assert_eq!(v.port, 80);
    assert_eq!(v.protocol, Protocol::Tcp);
    assert_eq!(v.mode, Mode::FullNat);
    assert_eq!(v.proxy_protocol, ProxyProtocol::V2);
    assert!(!v.proxy_protocol_send_on_connect);
    assert_eq!(v.proxy_protocol_tlvs, vec![PpTlv::UniqueId]);
    assert_eq!(v.proxy_protocol_max_len, 107);
    assert_eq!(v.maglev_table_size, 65537);
    assert!(!v.zone_affinity);

    let h = v.health.as_ref().unwrap();
    assert_eq!(h.kind, HealthKind::Http);
    assert_eq!(h.path.as_deref(), Some("/healthz"));
    assert_eq!(h.expect_status, vec![200]);
    assert_eq!(h.interval_ms, 1000);
    assert_eq!(h.timeout_ms, 500);
    assert_eq!(h.rise, 2);
    assert_eq!(h.fall, 3);
    assert!(!h.send_proxy_v2);
    assert!(!h.weight_header);
    assert_eq!(h.on_down, conf::OnDown::Keep);

    assert_eq!(v.backends.len(), 3);
    for (b, last) in v.backends.iter().zip([11, 12, 13]) {
        assert_eq!(b.address, ip(&format!("10.20.0.{last}")));
        assert_eq!(b.port, 8080);
        assert_eq!(b.weight, 1);
    }
    assert_eq!(v.backends[0].zone.as_deref(), Some("a"));
    assert_eq!(v.backends[1].zone, None);
    assert_eq!(v.backends[2].zone, None);

    // Helpers.
    assert_eq!(c.port("int").map(|p| p.name.as_str()), Some("int"));
    assert_eq!(c.port_index("int"), Some(1));
    assert!(c.port("nope").is_none());
    assert_eq!(c.vip("web").map(|v| v.port), Some(80));
    assert_eq!(c.port_for_address(ip("10.10.0.100")), Some(0));
    assert_eq!(c.port_for_address(ip("10.30.0.1")), None);
    assert_eq!(
        c.owned_addresses(),
        vec![
            (0, ip("10.10.0.1")),
            (0, ip("10.10.0.100")),
            (1, ip("10.20.0.1"))
        ]
    );
}

fn contract_path() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/contract.border.example.toml"
    ))
}

/// The public format may be extended, never changed: every line of the
/// contract (shared/border.example.toml, kept verbatim in tests/data) must
/// appear, in order, in the annotated example the project ships.
#[test]
fn annotated_example_extends_the_contract_line_by_line() {
    let contract = std::fs::read_to_string(contract_path()).unwrap();
    let ours = std::fs::read_to_string(example_path()).unwrap();
    let mut our_lines = ours.lines().enumerate();
    for (n, line) in contract.lines().enumerate() {
        assert!(
            our_lines.any(|(_, l)| l == line),
            "contract line {} is missing or out of order in conf/tests/data/border.example.toml: {line:?}",
            n + 1
        );
    }
}

#[test]
fn contract_example_parses() {
    check_config_file(contract_path()).unwrap_or_else(|e| panic!("{e}"));
}

/// The contract file lives beside the repository (../shared) on development
/// and CI machines; the vendored copy must not drift from it. A fresh clone
/// without ../shared still runs both tests above against the vendored copy.
#[test]
fn vendored_contract_matches_shared_beside_the_repo() {
    let shared = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/border.example.toml"
    ));
    let vendored = std::fs::read_to_string(contract_path()).unwrap();
    match std::fs::read_to_string(shared) {
        Ok(text) => assert_eq!(
            text, vendored,
            "conf/tests/data/contract.border.example.toml differs from ../shared/border.example.toml"
        ),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{}: {e}", shared.display()),
    }
}

const MINIMAL: &str = r#"
instance = "m"
[dataplane]
worker_lcores = [1]
flow_hash_key = "000102030405060708090a0b0c0d0e0f"
[[port]]
name = "p0"
devargs = "net_null0"
"#;

#[test]
fn minimal_config_gets_defaults() {
    let c = Config::from_toml_str(MINIMAL, "min.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.zone, None);
    assert_eq!(c.dataplane.main_lcore, 0);
    assert_eq!(c.dataplane.poll, PollMode::Adaptive);
    assert!(c.dataplane.eal_args.is_empty());
    assert_eq!(c.dataplane.conntrack_per_worker, 1 << 20);
    assert_eq!(c.dataplane.timeouts, Timeouts::default());
    let p = &c.ports[0];
    assert!(p.addresses.is_empty());
    assert_eq!(p.host_interface, "kni-p0");
    assert_eq!(p.local_port_range, None);
    assert_eq!(c.mgmt.listen, "unix:///run/border/m.sock");
    assert_eq!(c.mgmt.metrics_listen, None);
    assert_eq!(c.mgmt.tls, None);
    assert!(c.vips.is_empty());
}

#[test]
fn vip_defaults_and_full_feature_set() {
    let text = r#"
instance = "full"
zone = "eu-1.b"
[dataplane]
main_lcore = 2
worker_lcores = [0, 1, 3]
poll = "busy"
flow_hash_key = "FFEEDDCCBBAA99887766554433221100"
[dataplane.timeouts]
udp = 60
[[port]]
name = "ext"
devargs = "0000:01:00.0"
addresses = ["10.10.0.1/24", "2001:db8::1/64"]
gateway = "2001:db8::fffe"
host_interface = "border.ext"
mac = "02:00:00:AA:bb:01"
local_addresses = ["10.10.0.1", "2001:db8::1"]
[mgmt]
listen = "tcp://[::1]:50051"
[mgmt.tls]
cert = "server.pem"
key = "server.key"
client_ca = "ca.pem"
client_fingerprints = ["sha256:00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff"]
[[vip]]
name = "dns"
address = "2001:db8::53"
port = 53
protocol = "udp"
mode = "dnat"
zone_affinity = true
[vip.health]
kind = "tcp"
[[vip.backend]]
address = "2001:db8::100"
port = 53
weight = 0
zone = "eu-1.b"
[[vip]]
name = "smtp"
address = "10.10.0.25"
port = 25
proxy_protocol = "v2"
proxy_protocol_send_on_connect = true
proxy_protocol_tlvs = []
proxy_protocol_max_len = 28
maglev_table_size = 251
[vip.health]
kind = "https"
path = "/ready"
expect_status = [200, 204]
interval_ms = 2000
timeout_ms = 1999
rise = 1
fall = 1
send_proxy_v2 = true
weight_header = true
on_down = "reset"
[[vip.backend]]
address = "10.10.0.30"
port = 25
weight = 65535
[[vip.backend]]
address = "10.10.0.30"
port = 2525
"#;
    let c = Config::from_toml_str(text, "full.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.zone.as_deref(), Some("eu-1.b"));
    assert_eq!(c.dataplane.worker_lcores, vec![0, 1, 3]);
    assert_eq!(c.dataplane.poll, PollMode::Busy);
    assert_eq!(c.dataplane.flow_hash_key[0], 0xff);
    assert_eq!(
        c.dataplane.timeouts,
        Timeouts {
            udp: 60,
            ..Timeouts::default()
        }
    );
    let p = &c.ports[0];
    assert_eq!(p.mac, Some([2, 0, 0, 0xaa, 0xbb, 1]));
    assert_eq!(
        conf::config::format_mac(&p.mac.unwrap()),
        "02:00:00:aa:bb:01"
    );
    assert_eq!(p.local_port_range, Some(DEFAULT_LOCAL_PORT_RANGE));
    assert_eq!(p.gateway, Some(ip("2001:db8::fffe")));
    assert_eq!(
        c.mgmt.listen_addr(),
        Some(Listen::Tcp("[::1]:50051".parse().unwrap()))
    );
    let tls = c.mgmt.tls.as_ref().unwrap();
    assert_eq!(tls.cert, Path::new("server.pem"));
    assert_eq!(
        tls.client_fingerprints,
        vec!["sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"]
    );

    let dns = &c.vips[0];
    assert_eq!(dns.protocol, Protocol::Udp);
    assert_eq!(dns.mode, Mode::Dnat);
    assert_eq!(dns.proxy_protocol, ProxyProtocol::None);
    assert!(dns.proxy_protocol_tlvs.is_empty());
    assert_eq!(dns.proxy_protocol_max_len, 107);
    assert_eq!(dns.maglev_table_size, 65537);
    assert!(dns.zone_affinity);
    let h = dns.health.as_ref().unwrap();
    assert_eq!(h.kind, HealthKind::Tcp);
    assert_eq!(h.path, None);
    assert!(h.expect_status.is_empty());
    assert_eq!(
        (h.interval_ms, h.timeout_ms, h.rise, h.fall),
        (1000, 500, 2, 3)
    );
    assert_eq!(dns.backends[0].weight, 0);

    let smtp = &c.vips[1];
    assert_eq!(smtp.mode, Mode::FullNat);
    assert!(smtp.proxy_protocol_send_on_connect);
    assert!(smtp.proxy_protocol_tlvs.is_empty());
    assert_eq!(smtp.proxy_protocol_max_len, 28);
    assert_eq!(smtp.maglev_table_size, 251);
    let h = smtp.health.as_ref().unwrap();
    assert_eq!(h.kind, HealthKind::Https);
    assert_eq!(h.path.as_deref(), Some("/ready"));
    assert_eq!(h.expect_status, vec![200, 204]);
    assert!(h.send_proxy_v2 && h.weight_header);
    assert_eq!(h.on_down, conf::OnDown::Reset);
    assert_eq!(smtp.backends[0].weight, 65535);
    assert_eq!(smtp.backends[1].weight, 1);
}

#[test]
fn from_file_resolves_tls_paths_and_reports_io_errors() {
    let dir = std::env::temp_dir().join(format!("border-conf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("b.toml");
    let text = format!(
        "{MINIMAL}[mgmt]\nlisten = \"tcp://127.0.0.1:50051\"\n[mgmt.tls]\ncert = \"s.pem\"\nkey = \"/abs/s.key\"\nclient_ca = \"ca.pem\"\nclient_fingerprints = [\"sha256:{}\"]\n",
        "ab".repeat(32)
    );
    std::fs::write(&file, text).unwrap();
    let c = Config::from_file(&file).unwrap_or_else(|e| panic!("{e}"));
    let tls = c.mgmt.tls.unwrap();
    assert_eq!(tls.cert, dir.join("s.pem"));
    assert_eq!(tls.key, Path::new("/abs/s.key"));
    assert_eq!(tls.client_ca, dir.join("ca.pem"));

    std::fs::write(&file, b"instance = \"x\"\nzone = \"\xff\"\n").unwrap();
    let e = Config::from_file(&file).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:2:9: invalid UTF-8 (a config file must be UTF-8)",
            file.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let e = check_config_file(dir.join("missing.toml")).unwrap_err();
    assert!(matches!(e, conf::ConfigError::Io { .. }), "{e:?}");
    assert!(e.to_string().starts_with(&format!(
        "{}: cannot read config:",
        dir.join("missing.toml").display()
    )));
}

/// The commented `[records]` block at the end of the example, turned on by
/// removing the `# ` of its lines as its comment says, parses as written.
#[test]
fn example_records_block_parses_when_uncommented() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    assert!(check_config_file(example_path()).unwrap().records.is_none());
    let start = text.find("# [records]\n").expect("the [records] block");
    let (head, block) = text.split_at(start);
    let on: String = block
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let c =
        Config::from_toml_str(&format!("{head}{on}"), "example").unwrap_or_else(|e| panic!("{e}"));
    let r = c.records.expect("[records]");
    assert_eq!(r.ring_slots, 65536);
    assert!(!r.log_empty);
    assert_eq!(r.ipfix.len(), 1);
    assert_eq!(r.ipfix[0].collector, "192.0.2.50:4739".parse().unwrap());
    assert_eq!(r.ipfix[0].observation_domain, 1);
    assert_eq!(r.ipfix[0].template_interval_s, 60);
    let j = r.json.expect("[records.json]");
    assert_eq!(j.path, Path::new("/var/log/border/records.jsonl"));
    assert_eq!(j.rotate_bytes, 104_857_600);
    assert_eq!(j.keep, 5);
}

/// The commented direct-server-return VIP of the example, turned on by
/// removing the `# ` of its lines, parses as written.
#[test]
fn example_dsr_block_parses_when_uncommented() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let start = text
        .find("# [[vip]]\n# name = \"download\"")
        .expect("the DSR block");
    let block = &text[start..];
    let end = block.find("\n\n").expect("the block's end");
    let on: String = block[..end]
        .lines()
        .map(|l| l.strip_prefix("# ").or(l.strip_prefix('#')).unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let c = Config::from_toml_str(&format!("{text}\n{on}"), "example")
        .unwrap_or_else(|e| panic!("{e}"));
    let v = c.vip("download").expect("the DSR VIP");
    assert_eq!(v.mode, Mode::Dsr(conf::Encap::Gue));
    assert_eq!((v.port, v.backends[0].port), (443, 443));
}
