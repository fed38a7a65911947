//! One bad config per rule, asserting the exact error text with line:column.
//!
//! Every case is the valid `BASE` with one edit; the expected string is the
//! whole `Display` of the error, as an operator sees it.

use conf::{Config, ConfigError};

/// A valid config; line numbers below refer to this text after each edit.
const BASE: &str = r#"instance = "t"
zone = "a"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "net_tap0,iface=b-ext"
addresses = ["10.10.0.1/24"]
[[port]]
name = "int"
devargs = "net_tap1,iface=b-int"
addresses = ["10.20.0.1/24"]
local_addresses = ["10.20.0.1"]
[mgmt]
listen = "unix:///run/border/t.sock"
[[vip]]
name = "web"
address = "10.10.0.100"
port = 80
[vip.health]
kind = "http"
path = "/healthz"
[[vip.backend]]
address = "10.20.0.11"
port = 8080
[[vip.backend]]
address = "10.20.0.12"
port = 8080
"#;

/// BASE with `from` (which must occur exactly once) replaced by `to`.
fn edit(from: &str, to: &str) -> String {
    assert_eq!(BASE.matches(from).count(), 1, "edit anchor {from:?}");
    BASE.replacen(from, to, 1)
}

fn error_of(text: &str) -> String {
    match Config::from_toml_str(text, "border.toml") {
        Ok(_) => "<no error>".to_owned(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn base_is_valid() {
    let c = Config::from_toml_str(BASE, "border.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].backends.len(), 2);
}

#[test]
fn capture_and_the_eal_file_prefix() {
    let c = Config::from_toml_str(BASE, "border.toml").unwrap();
    assert!(!c.dataplane.capture, "off by default");
    assert_eq!(c.eal_file_prefix(), "border-t");
    for (args, prefix) in [
        (r#"["-m", "512", "--file-prefix=edge"]"#, "edge"),
        (r#"["--file-prefix", "edge2"]"#, "edge2"),
    ] {
        let text = edit(
            "worker_lcores = [1]",
            &format!("worker_lcores = [1]\neal_args = {args}\ncapture = true"),
        );
        let c = Config::from_toml_str(&text, "border.toml").unwrap_or_else(|e| panic!("{e}"));
        assert!(c.dataplane.capture);
        assert_eq!(c.eal_file_prefix(), prefix);
    }
}

#[test]
fn error_carries_position_and_key() {
    let e = Config::from_toml_str(&edit("port = 80\n", "port = 0\n"), "x.toml").unwrap_err();
    assert_eq!(e.position(), Some((20, 8)));
    assert_eq!(e.key(), Some("vip[0].port"));
    match e {
        ConfigError::Invalid {
            origin,
            line,
            column,
            key,
            message,
        } => {
            assert_eq!(
                (origin.as_str(), line, column, key.as_str()),
                ("x.toml", 20, 8, "vip[0].port")
            );
            assert_eq!(message, "0 is not a usable port (expected 1..=65535)");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_rule_has_a_precise_error() {
    let cases: Vec<(&str, String, &str)> = CASES();
    let mut failures = Vec::new();
    for (name, text, expected) in &cases {
        let got = error_of(text);
        if got != *expected {
            failures.push(format!(
                "{name}:\n  expected: {expected}\n  got:      {got}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[allow(non_snake_case)]
fn CASES() -> Vec<(&'static str, String, &'static str)> {
    vec![
        // --- TOML syntax, unknown keys, wrong types, missing keys ---
        ("syntax", edit("zone = \"a\"", "zone = \"a"), r#"border.toml:2:10: zone: invalid basic string, expected `"`"#),
        ("duplicate key", edit("zone = \"a\"", "zone = \"a\"\nzone = \"b\""), "border.toml:3:1: zone: is defined twice (each key and table may appear only once)"),
        ("unknown top-level key", edit("zone = \"a\"", "colour = \"blue\""), "border.toml:2:1: colour: unknown key (expected one of `instance`, `zone`, `dataplane`, `port`, `mgmt`, `vip`, `records`)"),
        ("unknown key in port", edit("devargs = \"net_tap0,iface=b-ext\"", "devargs = \"net_tap0,iface=b-ext\"\nspeed = 10"), "border.toml:9:1: port[0].speed: unknown key (expected one of `name`, `devargs`, `addresses`, `gateway`, `host_interface`, `local_addresses`, `local_port_range`, `mac`, `mtu`)"),
        ("port mtu out of range", edit("devargs = \"net_tap0,iface=b-ext\"", "devargs = \"net_tap0,iface=b-ext\"\nmtu = 9999"), "border.toml:9:7: port[0].mtu: 9999 is out of range (expected 1280..=9198 bytes, e.g. 1500 or 9000)"),
        ("unknown key in backend", edit("port = 8080\n[[vip.backend]]", "port = 8080\nweigth = 2\n[[vip.backend]]"), "border.toml:27:1: vip[0].backend[0].weigth: unknown key (expected one of `address`, `port`, `weight`, `zone`, `max_connections`)"),
        ("unknown key in inline table", edit("[mgmt]\n", "[mgmt]\ntls = { cert = \"c\", kee = \"k\" }\n"), "border.toml:16:21: mgmt.tls.kee: unknown key (expected one of `cert`, `key`, `client_ca`, `client_fingerprints`, `reader_fingerprints`, `peer_fingerprints`)"),
        ("wrong type string for integer", edit("port = 80\n", "port = \"80\"\n"), r#"border.toml:20:8: vip[0].port: expected an integer 0..=65535, found string "80""#),
        ("wrong type integer for array", edit("worker_lcores = [1]", "worker_lcores = 1"), "border.toml:4:17: dataplane.worker_lcores: expected an array, found integer `1`"),
        ("wrong type in array", edit("worker_lcores = [1]", "worker_lcores = [1, \"2\"]"), r#"border.toml:4:21: dataplane.worker_lcores[1]: expected an integer 0..=4294967295, found string "2""#),
        ("wrong type bool", edit("[vip.health]", "zone_affinity = \"yes\"\n[vip.health]"), r#"border.toml:21:17: vip[0].zone_affinity: expected true or false, found string "yes""#),
        ("wrong type table", edit("[dataplane]\n", "[dataplane]\ntimeouts = 5\n"), "border.toml:4:12: dataplane.timeouts: expected a table, found integer `5`"),
        ("integer out of range", edit("port = 8080\n[[vip.backend]]", "port = 70000\n[[vip.backend]]"), "border.toml:26:8: vip[0].backend[0].port: 70000 is out of range (expected an integer 0..=65535)"),
        ("negative integer", edit("worker_lcores = [1]", "worker_lcores = [1]\nmain_lcore = -1"), "border.toml:5:14: dataplane.main_lcore: -1 is out of range (expected an integer 0..=4294967295)"),
        ("table instead of array of tables", edit("[[port]]\nname = \"int\"", "[port]\nname = \"int\""), "border.toml:10:2: port: is defined twice (each key and table may appear only once)"),
        ("missing instance", edit("instance = \"t\"\n", ""), "border.toml:1:1: instance: missing required key"),
        ("missing dataplane key", edit("worker_lcores = [1]\n", ""), "border.toml:3:1: dataplane.worker_lcores: missing required key"),
        ("missing vip name", edit("name = \"web\"\n", ""), "border.toml:17:1: vip[0].name: missing required key"),
        ("missing health kind", edit("kind = \"http\"\n", ""), "border.toml:21:1: vip[0].health.kind: missing required key"),
        ("wrong type date-time", edit("zone = \"a\"", "zone = 1979-05-27"), "border.toml:2:8: zone: expected a string, found a date-time"),
        ("wrong type float", edit("port = 80\n", "port = 80.0\n"), "border.toml:20:8: vip[0].port: expected an integer 0..=65535, found floating point `80.0`"),
        ("unknown enum value", edit("worker_lcores = [1]", "worker_lcores = [1]\npoll = \"spin\""), r#"border.toml:5:8: dataplane.poll: unknown value "spin" (expected "busy" or "adaptive")"#),
        ("duplicate table", edit("[mgmt]\n", "[dataplane]\n[mgmt]\n"), "border.toml:15:2: dataplane: is defined twice (each key and table may appear only once)"),
        ("duplicate key in array table", edit("port = 8080\n[[vip.backend]]", "port = 8080\nport = 8081\n[[vip.backend]]"), "border.toml:27:1: vip[0].backend[0].port: is defined twice (each key and table may appear only once)"),
        ("bare garbage line", edit("port = 80\n", "port = 80\nthis is not toml\n"), "border.toml:21:6: vip[0]: key with no value, expected `=`"),
        // --- top level ---
        ("instance bad character", edit("instance = \"t\"", "instance = \"t/1\""), r#"border.toml:1:12: instance: "t/1" contains '/' (expected only A-Z a-z 0-9 _ -)"#),
        ("instance too long", edit("instance = \"t\"", "instance = \"abcdefghijabcdefghijabcdefghijabc\""), r#"border.toml:1:12: instance: "abcdefghijabcdefghijabcdefghijabc" is 33 characters long (expected at most 32)"#),
        ("instance empty", edit("instance = \"t\"", "instance = \"\""), "border.toml:1:12: instance: must not be empty (expected 1..=32 characters from A-Z a-z 0-9 _ -)"),
        ("zone bad", edit("zone = \"a\"", "zone = \"a b\""), r#"border.toml:2:8: zone: "a b" contains ' ' (expected only A-Z a-z 0-9 _ - .)"#),
        // --- dataplane ---
        ("worker is main lcore", edit("worker_lcores = [1]", "worker_lcores = [1, 0]"), "border.toml:4:21: dataplane.worker_lcores[1]: lcore 0 is the main_lcore (expected worker lcores other than main_lcore 0)"),
        ("duplicate worker lcore", edit("worker_lcores = [1]", "worker_lcores = [1, 2, 1]"), "border.toml:4:24: dataplane.worker_lcores[2]: lcore 1 is listed twice (also worker_lcores[0]; expected distinct lcores)"),
        ("empty worker lcores", edit("worker_lcores = [1]", "worker_lcores = []"), "border.toml:4:17: dataplane.worker_lcores: must list at least one lcore (expected e.g. [1])"),
        ("lcore out of range", edit("worker_lcores = [1]", "worker_lcores = [1, 128]"), "border.toml:4:21: dataplane.worker_lcores[1]: 128 is out of range (expected an lcore id 0..=127)"),
        ("main lcore out of range", edit("worker_lcores = [1]", "worker_lcores = [1]\nmain_lcore = 200"), "border.toml:5:14: dataplane.main_lcore: 200 is out of range (expected an lcore id 0..=127)"),
        ("eal args set lcores", edit("worker_lcores = [1]", "worker_lcores = [1]\neal_args = [\"--no-huge\", \"-l\", \"0-1\"]"), r#"border.toml:5:26: dataplane.eal_args[1]: "-l" is derived from main_lcore and worker_lcores (remove it from eal_args)"#),
        ("capture without multi-process", edit("worker_lcores = [1]", "worker_lcores = [1]\neal_args = [\"--no-huge\", \"-m\", \"256\", \"--no-shconf\"]\ncapture = true"), "border.toml:6:11: dataplane.capture: needs EAL multi-process and hugepages: remove --no-huge, --no-shconf from eal_args"),
        ("conntrack too small", edit("worker_lcores = [1]", "worker_lcores = [1]\nconntrack_per_worker = 10"), "border.toml:5:24: dataplane.conntrack_per_worker: 10 is out of range (expected 1024..=134217728 entries)"),
        ("flow hash key short", edit("\"00112233445566778899aabbccddeeff\"", "\"0011\""), r#"border.toml:5:17: dataplane.flow_hash_key: is 4 characters long (expected exactly 32 hex digits, 16 bytes, e.g. "00112233445566778899aabbccddeeff")"#),
        ("flow hash key not hex", edit("\"00112233445566778899aabbccddeeff\"", "\"0011223344556677889Xaabbccddeeff\""), "border.toml:5:17: dataplane.flow_hash_key: contains 'X' (expected exactly 32 hex digits 0-9 a-f)"),
        ("timeout zero", edit("flow_hash_key", "timeouts = { tcp_syn = 0 }\nflow_hash_key"), "border.toml:5:24: dataplane.timeouts.tcp_syn: 0 is out of range (expected 1..=604800 seconds)"),
        // --- ports ---
        ("no port", edit("[[port]]\nname = \"ext\"\ndevargs = \"net_tap0,iface=b-ext\"\naddresses = [\"10.10.0.1/24\"]\n[[port]]\nname = \"int\"\ndevargs = \"net_tap1,iface=b-int\"\naddresses = [\"10.20.0.1/24\"]\nlocal_addresses = [\"10.20.0.1\"]\n", ""), "border.toml:1:1: port: at least one [[port]] is required"),
        ("duplicate port name", edit("name = \"int\"", "name = \"ext\""), r#"border.toml:11:8: port[1].name: "ext" is already the name of port[0] (expected unique port names)"#),
        ("port name unsafe", edit("name = \"int\"", "name = \"in t\""), r#"border.toml:11:8: port[1].name: "in t" contains ' ' (expected only A-Z a-z 0-9 _ -)"#),
        ("empty devargs", edit("devargs = \"net_tap1,iface=b-int\"", "devargs = \"\""), r#"border.toml:12:11: port[1].devargs: must not be empty (expected DPDK devargs, e.g. "net_tap0,iface=border-ext" or "0000:01:00.0")"#),
        ("devargs without device", edit("devargs = \"net_tap1,iface=b-int\"", "devargs = \",iface=b-int\""), r#"border.toml:12:11: port[1].devargs: ",iface=b-int" has no valid device name before the first comma (expected e.g. "net_tap0,iface=border-ext")"#),
        ("duplicate device", edit("devargs = \"net_tap1,iface=b-int\"", "devargs = \"net_tap0,iface=other\""), r#"border.toml:12:11: port[1].devargs: device "net_tap0" is already used by port "ext" (port[0])"#),
        ("address without prefix", edit("addresses = [\"10.20.0.1/24\"]", "addresses = [\"10.20.0.1\"]"), r#"border.toml:13:14: port[1].addresses[0]: "10.20.0.1" has no prefix length (expected an address with prefix length, e.g. "10.0.0.1/24" or "2001:db8::1/64")"#),
        ("address bad prefix", edit("addresses = [\"10.20.0.1/24\"]", "addresses = [\"10.20.0.1/33\"]"), r#"border.toml:13:14: port[1].addresses[0]: "10.20.0.1/33" has a bad prefix length "33" (expected 1..=32 for IPv4)"#),
        ("address not an address", edit("addresses = [\"10.20.0.1/24\"]", "addresses = [\"10.20.0.300/24\"]"), r#"border.toml:13:14: port[1].addresses[0]: "10.20.0.300" is not an IP address (expected e.g. "10.0.0.1/24")"#),
        ("gateway outside subnets", edit("addresses = [\"10.10.0.1/24\"]", "addresses = [\"10.10.0.1/24\"]\ngateway = \"10.11.0.254\""), "border.toml:10:11: port[0].gateway: 10.11.0.254 is not inside any of this port's subnets (addresses: 10.10.0.1/24)"),
        ("gateway is own address", edit("addresses = [\"10.10.0.1/24\"]", "addresses = [\"10.10.0.1/24\"]\ngateway = \"10.10.0.1\""), "border.toml:10:11: port[0].gateway: 10.10.0.1 is this port's own address (expected a next hop on the subnet)"),
        ("local address outside subnets", edit("local_addresses = [\"10.20.0.1\"]", "local_addresses = [\"10.20.0.1\", \"10.30.0.1\"]"), "border.toml:14:33: port[1].local_addresses[1]: 10.30.0.1 is not inside any of this port's subnets (addresses: 10.20.0.1/24; expected a local address on this port)"),
        ("local port range inverted", edit("local_addresses = [\"10.20.0.1\"]", "local_addresses = [\"10.20.0.1\"]\nlocal_port_range = [5000, 4000]"), "border.toml:15:20: port[1].local_port_range: low 5000 is above high 4000 (expected [low, high] with low <= high)"),
        ("local port range from zero", edit("local_addresses = [\"10.20.0.1\"]", "local_addresses = [\"10.20.0.1\"]\nlocal_port_range = [0, 4000]"), "border.toml:15:21: port[1].local_port_range[0]: 0 is not a usable port (expected 1..=65535)"),
        ("local port range wrong length", edit("local_addresses = [\"10.20.0.1\"]", "local_addresses = [\"10.20.0.1\"]\nlocal_port_range = [1024]"), "border.toml:15:20: port[1].local_port_range: has 1 element (expected two ports [low, high], e.g. [1024, 32767])"),
        ("local port range without pool", edit("addresses = [\"10.10.0.1/24\"]", "addresses = [\"10.10.0.1/24\"]\nlocal_port_range = [1024, 2047]"), "border.toml:10:20: port[0].local_port_range: is set but local_addresses is not (expected local_addresses for the full-NAT pool)"),
        ("local port ranges overlap on shared address", edit("addresses = [\"10.10.0.1/24\"]", "addresses = [\"10.10.0.1/24\", \"10.20.0.2/24\"]\nlocal_addresses = [\"10.20.0.1\"]\nlocal_port_range = [20000, 40000]"), r#"border.toml:12:1: port[1].local_port_range: [1024, 32767] (the default) overlaps [20000, 40000] of port "ext" (port[0]), which shares local address 10.20.0.1 (expected disjoint ranges)"#),
        ("host interface too long", edit("name = \"int\"", "name = \"int\"\nhost_interface = \"border-internal0\""), r#"border.toml:12:18: port[1].host_interface: "border-internal0" is 16 bytes long (expected at most 15, the Linux IFNAMSIZ limit)"#),
        ("host interface invalid", edit("name = \"int\"", "name = \"int\"\nhost_interface = \"kni/int\""), r#"border.toml:12:18: port[1].host_interface: "kni/int" contains '/' (expected only A-Z a-z 0-9 _ - .)"#),
        ("default host interface too long", edit("name = \"int\"", "name = \"internal-net\""), r#"border.toml:11:8: port[1].name: the default host_interface "kni-internal-net" is 16 bytes, longer than 15 (expected a shorter name, or set host_interface)"#),
        ("duplicate host interface", edit("name = \"int\"", "name = \"int\"\nhost_interface = \"kni-ext\""), r#"border.toml:12:18: port[1].host_interface: "kni-ext" is already the host_interface of port[0] (expected unique names)"#),
        ("mac malformed", edit("name = \"int\"", "name = \"int\"\nmac = \"02:00:00:00:01\""), r#"border.toml:12:7: port[1].mac: "02:00:00:00:01" is not a MAC address (expected six hex pairs, e.g. "02:00:00:00:00:01")"#),
        ("mac multicast", edit("name = \"int\"", "name = \"int\"\nmac = \"01:00:5e:00:00:01\""), r#"border.toml:12:7: port[1].mac: 01:00:5e:00:00:01 is not a unicast address (expected the first octet even and not all zeros, e.g. "02:00:00:00:00:01")"#),
        // --- mgmt ---
        ("listen scheme", edit("unix:///run/border/t.sock", "http://127.0.0.1:80"), r#"border.toml:16:10: mgmt.listen: "http://127.0.0.1:80" is not a listen address (expected "unix:///absolute/path" or "tcp://ip:port")"#),
        ("listen relative unix path", edit("unix:///run/border/t.sock", "unix://run/border/t.sock"), r#"border.toml:16:10: mgmt.listen: "unix://run/border/t.sock" does not name an absolute socket path (expected "unix:///absolute/path" or "tcp://ip:port")"#),
        ("listen tcp hostname", edit("unix:///run/border/t.sock", "tcp://localhost:50051"), r#"border.toml:16:10: mgmt.listen: "tcp://localhost:50051" is not tcp://ip:port (expected e.g. "tcp://0.0.0.0:50051" or "tcp://[::1]:50051")"#),
        ("tcp listen without tls", edit("unix:///run/border/t.sock", "tcp://0.0.0.0:50051"), "border.toml:16:10: mgmt.listen: tcp listen 0.0.0.0:50051 requires [mgmt.tls] (mutual TLS with pinned client fingerprints), or use a unix:// socket"),
        ("metrics listen malformed", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\nmetrics_listen = \"9108\""), r#"border.toml:17:18: mgmt.metrics_listen: "9108" is not ip:port (expected e.g. "127.0.0.1:9108" or "[::1]:9108")"#),
        ("tls without fingerprints", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\ntls = { cert = \"c\", key = \"k\", client_ca = \"ca\", client_fingerprints = [] }"), r#"border.toml:17:72: mgmt.tls.client_fingerprints: must list at least one pinned client certificate (expected ["sha256:<64 hex digits>"])"#),
        ("tls bad fingerprint", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\ntls = { cert = \"c\", key = \"k\", client_ca = \"ca\", client_fingerprints = [\"md5:00\"] }"), r#"border.toml:17:73: mgmt.tls.client_fingerprints[0]: "md5:00" is not a certificate fingerprint (expected "sha256:" followed by 64 hex digits)"#),
        // --- vips ---
        ("vip address on no port", edit("address = \"10.10.0.100\"", "address = \"10.99.0.100\""), "border.toml:19:11: vip[0].address: 10.99.0.100 is not on any port (expected an address inside the subnet of some port's addresses: 10.10.0.1/24, 10.20.0.1/24)"),
        ("vip address malformed", edit("address = \"10.10.0.100\"", "address = \"web.example\""), r#"border.toml:19:11: vip[0].address: "web.example" is not an IP address (expected e.g. "10.0.0.1" or "2001:db8::1")"#),
        ("vip port zero", edit("port = 80\n", "port = 0\n"), "border.toml:20:8: vip[0].port: 0 is not a usable port (expected 1..=65535)"),
        ("duplicate vip listener", format!("{BASE}[[vip]]\nname = \"web2\"\naddress = \"10.10.0.100\"\nport = 80\n"), r#"border.toml:32:11: vip[1].address: 10.10.0.100 port 80/tcp is already served by vip "web" (vip[0]) (expected each address, port and protocol once)"#),
        ("duplicate vip name", format!("{BASE}[[vip]]\nname = \"web\"\naddress = \"10.10.0.100\"\nport = 443\n"), r#"border.toml:31:8: vip[1].name: "web" is already the name of vip[0] (expected unique VIP names)"#),
        ("same listener other protocol is fine", format!("{BASE}[[vip]]\nname = \"web-udp\"\naddress = \"10.10.0.100\"\nport = 80\nprotocol = \"udp\"\n"), "<no error>"),
        ("fullnat without pool of the family", edit("addresses = [\"10.10.0.1/24\"]", "addresses = [\"10.10.0.1/24\", \"2001:db8::1/64\"]").replacen("10.10.0.100", "2001:db8::100", 1).replacen("10.20.0.11", "2001:db8:1::11", 1).replacen("10.20.0.12", "2001:db8:1::12", 1), r#"border.toml:17:1: vip[0].mode: fullnat (the default) needs a full-NAT source pool of IPv6, but no port has IPv6 local_addresses (expected local_addresses on some port, or mode = "dnat")"#),
        ("backend family mismatch", edit("address = \"10.20.0.12\"", "address = \"2001:db8::12\""), "border.toml:28:11: vip[0].backend[1].address: 2001:db8::12 is IPv6 but the VIP is IPv4 (expected the VIP's address family: translation between IPv4 and IPv6 is not supported)"),
        ("backend not unicast", edit("address = \"10.20.0.12\"", "address = \"224.0.0.1\""), "border.toml:28:11: vip[0].backend[1].address: 224.0.0.1 is not a unicast address (expected a backend host address)"),
        ("proxy protocol on udp", edit("port = 80\n", "port = 80\nprotocol = \"udp\"\nproxy_protocol = \"v2\"\n"), r#"border.toml:22:18: vip[0].proxy_protocol: v2 is only supported on tcp VIPs (expected "none" with protocol = "udp")"#),
        ("proxy protocol key without v2", edit("port = 80\n", "port = 80\nproxy_protocol_tlvs = [\"crc32c\"]\n"), r#"border.toml:21:23: vip[0].proxy_protocol_tlvs: is only used with proxy_protocol = "v2" (expected proxy_protocol = "v2", or remove this key)"#),
        ("syn proxy on udp", edit("port = 80\n", "port = 80\nprotocol = \"udp\"\nsyn_proxy = \"always\"\n"), r#"border.toml:22:13: vip[0].syn_proxy: "always" needs protocol = "tcp" (a UDP VIP has no handshake to answer; expected syn_proxy = "off")"#),
        ("syn proxy on dnat with two workers", edit("port = 80\n", "port = 80\nmode = \"dnat\"\nsyn_proxy = \"always\"\n").replacen("worker_lcores = [1]", "worker_lcores = [1, 2]", 1), r#"border.toml:22:13: vip[0].syn_proxy: "always" on a DNAT VIP needs one worker (2 in dataplane.worker_lcores): the backend's replies may reach a worker without the cookie connection's sequence translation (expected mode = "fullnat", one worker, or syn_proxy = "off")"#),
        ("syn proxy on dnat with one worker is fine", edit("port = 80\n", "port = 80\nmode = \"dnat\"\nsyn_proxy = \"always\"\n"), "<no error>"),
        ("unknown syn proxy", edit("port = 80\n", "port = 80\nsyn_proxy = \"on\"\n"), r#"border.toml:21:13: vip[0].syn_proxy: unknown value "on" (expected "off", "auto" or "always")"#),
        ("unknown hash", edit("port = 80\n", "port = 80\nhash = \"src\"\n"), r#"border.toml:21:8: vip[0].hash: unknown value "src" (expected "5-tuple" or "source")"#),
        ("hash source is fine", edit("port = 80\n", "port = 80\nhash = \"source\"\n"), "<no error>"),
        ("persistence timeout as a duration is fine", edit("port = 80\n", "port = 80\npersistence_timeout = \"5m\"\n"), "<no error>"),
        ("persistence timeout in seconds is fine", edit("port = 80\n", "port = 80\npersistence_timeout = 300\nhash = \"source\"\n"), "<no error>"),
        ("persistence timeout zero with 5-tuple is fine", edit("port = 80\n", "port = 80\npersistence_timeout = 0\nhash = \"5-tuple\"\n"), "<no error>"),
        ("persistence timeout too long", edit("port = 80\n", "port = 80\npersistence_timeout = \"8d\"\n"), "border.toml:21:23: vip[0].persistence_timeout: 691200 is out of range (expected 0..=604800 seconds, 0 for off)"),
        ("persistence timeout not whole seconds", edit("port = 80\n", "port = 80\npersistence_timeout = \"1500ms\"\n"), "border.toml:21:23: vip[0].persistence_timeout: 1s 500ms is not a whole number of seconds"),
        ("persistence timeout not a duration", edit("port = 80\n", "port = 80\npersistence_timeout = \"soon\"\n"), r#"border.toml:21:23: vip[0].persistence_timeout: "soon" is not a duration, expected number at 0 (expected a duration such as 5s, 300ms or 2m, or a number of seconds)"#),
        ("persistence with 5-tuple hash", edit("port = 80\n", "port = 80\nhash = \"5-tuple\"\npersistence_timeout = \"60s\"\n"), r#"border.toml:21:8: vip[0].hash: "5-tuple" contradicts persistence_timeout = 60 (a persistent VIP picks a new client's backend by its address; remove `hash` or set it to "source")"#),
        ("unknown tlv", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"sni\"]\n"), r#"border.toml:22:37: vip[0].proxy_protocol_tlvs[1]: unknown value "sni" (expected "unique_id", "crc32c" or "authority")"#),
        ("authority with send_on_connect", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_send_on_connect = true\nproxy_protocol_tlvs = [\"unique_id\", \"authority\"]\n"), r#"border.toml:23:37: vip[0].proxy_protocol_tlvs[1]: authority cannot be sent with proxy_protocol_send_on_connect = true: the header then leaves right after the handshake, before the client's first data that the authority (TLS SNI) is read from (expected proxy_protocol_send_on_connect = false, or remove "authority")"#),
        ("authority with send_on_connect, listed first", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"authority\"]\nproxy_protocol_send_on_connect = true\n"), r#"border.toml:22:24: vip[0].proxy_protocol_tlvs[0]: authority cannot be sent with proxy_protocol_send_on_connect = true: the header then leaves right after the handshake, before the client's first data that the authority (TLS SNI) is read from (expected proxy_protocol_send_on_connect = false, or remove "authority")"#),
        ("send_on_connect without authority is fine", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_send_on_connect = true\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\"]\n"), "<no error>"),
        ("authority without send_on_connect is fine", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_send_on_connect = false\nproxy_protocol_tlvs = [\"authority\"]\n"), "<no error>"),
        ("duplicate tlv", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"crc32c\", \"crc32c\"]\n"), "border.toml:22:34: vip[0].proxy_protocol_tlvs[1]: crc32c is listed twice (also proxy_protocol_tlvs[0])"),
        ("proxy max len below ipv4 header", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_max_len = 27\n"), "border.toml:22:26: vip[0].proxy_protocol_max_len: 27 is below the smallest header for an IPv4 VIP (expected 28..=65519: 16 fixed + 12 address bytes)"),
        ("proxy max len too large", edit("port = 80\n", "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_max_len = 65520\n"), "border.toml:22:26: vip[0].proxy_protocol_max_len: 65520 is too large (expected 28..=65519)"),
        ("maglev not prime", edit("port = 80\n", "port = 80\nmaglev_table_size = 65536\n"), "border.toml:21:21: vip[0].maglev_table_size: 65536 is not prime (expected a prime >= 100 x backends, e.g. 65537)"),
        ("maglev too small", edit("port = 80\n", "port = 80\nmaglev_table_size = 199\n"), "border.toml:21:21: vip[0].maglev_table_size: 199 is less than 100 x 2 backends = 200 (expected a prime >= 200, e.g. 211)"),
        ("maglev too small and not prime", edit("port = 80\n", "port = 80\nmaglev_table_size = 150\n"), "border.toml:21:21: vip[0].maglev_table_size: 150 is not prime and less than 100 x 2 backends = 200 (expected a prime >= 200, e.g. 211)"),
        ("maglev too large", edit("port = 80\n", "port = 80\nmaglev_table_size = 16777259\n"), "border.toml:21:21: vip[0].maglev_table_size: 16777259 is too large (expected a prime >= 100 x backends and <= 16777216, e.g. 65537)"),
        ("duplicate backend", edit("address = \"10.20.0.12\"", "address = \"10.20.0.11\""), "border.toml:28:11: vip[0].backend[1].address: 10.20.0.11:8080 is listed twice (also backend[0]; expected unique address and port)"),
        ("backend port zero", edit("port = 8080\n[[vip.backend]]", "port = 0\n[[vip.backend]]"), "border.toml:26:8: vip[0].backend[0].port: 0 is not a usable port (expected 1..=65535)"),
        ("weight too large", edit("port = 8080\n[[vip.backend]]", "port = 8080\nweight = 65536\n[[vip.backend]]"), "border.toml:27:10: vip[0].backend[0].weight: 65536 is too large (expected 0..=65535; 0 drains)"),
        ("backend zone bad", edit("port = 8080\n[[vip.backend]]", "port = 8080\nzone = \"\"\n[[vip.backend]]"), "border.toml:27:8: vip[0].backend[0].zone: must not be empty (expected 1..=64 characters from A-Z a-z 0-9 _ - .)"),
        ("zone affinity without zone", edit("zone = \"a\"\n", "").replacen("port = 80\n", "port = 80\nzone_affinity = true\n", 1), r#"border.toml:20:17: vip[0].zone_affinity: true needs the top-level `zone` of this appliance (expected zone = "..." at the top of the file, or zone_affinity = false)"#),
        // --- direct server return ---
        ("encap on a non-DSR VIP", edit("port = 80\n", "port = 80\nmode = \"dnat\"\nencap = \"ipip\"\n"), r#"border.toml:22:9: vip[0].encap: is only used with mode = "dsr" (expected mode = "dsr", or remove this key)"#),
        ("health_target on a non-DSR VIP", edit("port = 80\n", "port = 80\nhealth_target = \"backend\"\n"), r#"border.toml:21:17: vip[0].health_target: is only used with mode = "dsr" (expected mode = "dsr", or remove this key)"#),
        ("unknown encap", edit("port = 80\n", "port = 80\nmode = \"dsr\"\nencap = \"vxlan\"\n"), r#"border.toml:22:9: vip[0].encap: unknown value "vxlan" (expected "none", "ipip" or "gue")"#),
        ("dsr with port translation", edit("port = 80\n", "port = 80\nmode = \"dsr\"\nencap = \"ipip\"\n"), r#"border.toml:28:8: vip[0].backend[0].port: 8080 differs from the VIP's port 80: with mode = "dsr" the backend gets the client's packet unchanged and answers from the VIP's address and port itself, so border cannot translate the port (expected port = 80, or mode = "dnat" or "fullnat")"#),
        ("dsr without port translation is fine", edit("port = 80\n", "port = 80\nmode = \"dsr\"\nencap = \"gue\"\n").replace("port = 8080", "port = 80"), "<no error>"),
        ("dsr encap none off link", edit("port = 80\n", "port = 80\nmode = \"dsr\"\n").replace("port = 8080", "port = 80").replacen("10.20.0.12", "10.30.0.12", 1), r#"border.toml:29:11: vip[0].backend[1].address: 10.30.0.12 is on no port's link: with encap = "none" border only writes the backend's MAC, so the backend must share a subnet with a port (expected an address in some port's subnet, or encap = "ipip" or "gue")"#),
        ("dsr health_target vip", edit("port = 80\n", "port = 80\nmode = \"dsr\"\nhealth_target = \"vip\"\n").replace("port = 8080", "port = 80"), r#"border.toml:22:17: vip[0].health_target: "vip" is not possible: border-mgmt's probes leave through the port's kernel twin, whose frames border-dp sends out as they are, never through a VIP's MAC rewrite or tunnel, and the kernel here has no ipip, fou or ip6_tunnel module to encapsulate them itself (expected health_target = "backend": probes to the backend's own address)"#),
        ("dsr with proxy protocol", edit("port = 80\n", "port = 80\nmode = \"dsr\"\nproxy_protocol = \"v2\"\n").replace("port = 8080", "port = 80"), r#"border.toml:22:18: vip[0].proxy_protocol: "v2" cannot be used with mode = "dsr": the backend's answers do not pass border, which therefore cannot move the client's sequence numbers past a header it inserted (expected proxy_protocol = "none", or mode = "fullnat" or "dnat")"#),
        ("dsr with syn proxy", edit("port = 80\n", "port = 80\nmode = \"dsr\"\nsyn_proxy = \"auto\"\n").replace("port = 8080", "port = 80"), r#"border.toml:22:13: vip[0].syn_proxy: "auto" cannot be used with mode = "dsr": the backend's SYN-ACK goes to the client directly, so border cannot splice the cookie handshake into the backend's (expected syn_proxy = "off")"#),
        // --- health ---
        ("health timeout not below interval", edit("path = \"/healthz\"", "path = \"/healthz\"\ninterval_ms = 500\ntimeout_ms = 500"), "border.toml:25:14: vip[0].health.timeout_ms: 500 is not less than interval_ms 500 (expected timeout_ms < interval_ms)"),
        ("health default timeout not below interval", edit("path = \"/healthz\"", "path = \"/healthz\"\ninterval_ms = 400"), "border.toml:24:15: vip[0].health.timeout_ms: 500 (the default) is not less than interval_ms 400 (expected timeout_ms < interval_ms)"),
        ("health interval zero", edit("path = \"/healthz\"", "path = \"/healthz\"\ninterval_ms = 0"), "border.toml:24:15: vip[0].health.interval_ms: 0 is out of range (expected 1..=3600000 milliseconds)"),
        ("health timeout zero", edit("path = \"/healthz\"", "path = \"/healthz\"\ntimeout_ms = 0"), "border.toml:24:14: vip[0].health.timeout_ms: 0 is out of range (expected 1..=3600000 milliseconds)"),
        ("health rise zero", edit("path = \"/healthz\"", "path = \"/healthz\"\nrise = 0"), "border.toml:24:8: vip[0].health.rise: 0 is out of range (expected 1..=4294967295)"),
        ("health fall zero", edit("path = \"/healthz\"", "path = \"/healthz\"\nfall = 0"), "border.toml:24:8: vip[0].health.fall: 0 is out of range (expected 1..=4294967295)"),
        ("http health without path", edit("path = \"/healthz\"\n", ""), r#"border.toml:21:1: vip[0].health.path: missing required key for kind = "http" (expected e.g. path = "/healthz")"#),
        ("http path not absolute", edit("path = \"/healthz\"", "path = \"healthz\""), r#"border.toml:23:8: vip[0].health.path: "healthz" does not start with '/' (expected e.g. "/healthz")"#),
        ("expect status empty", edit("path = \"/healthz\"", "path = \"/healthz\"\nexpect_status = []"), "border.toml:24:17: vip[0].health.expect_status: must list at least one status (expected e.g. [200])"),
        ("expect status out of range", edit("path = \"/healthz\"", "path = \"/healthz\"\nexpect_status = [200, 99]"), "border.toml:24:23: vip[0].health.expect_status[1]: 99 is not an HTTP status (expected 100..=599)"),
        ("path on tcp check", edit("kind = \"http\"", "kind = \"tcp\""), r#"border.toml:23:8: vip[0].health.path: is only used by http and https checks (expected kind = "http" or "https", or remove this key)"#),
        ("unknown health kind", edit("kind = \"http\"", "kind = \"icmp\""), r#"border.toml:22:8: vip[0].health.kind: unknown value "icmp" (expected "tcp", "tls", "http", "https", "agent", "dns" or "udp")"#),
        ("agent port zero", edit("path = \"/healthz\"", "path = \"/healthz\"\nagent_port = 0"), "border.toml:24:14: vip[0].health.agent_port: 0 is not a port (expected 1..=65535)"),
        ("proxy header to an agent", edit("kind = \"http\"\npath = \"/healthz\"", "kind = \"agent\"\nsend_proxy_v2 = true"), "border.toml:23:17: vip[0].health.send_proxy_v2: is not sent to an agent (expected an active check kind beside agent_port, or remove this key)"),
        ("unknown on_down", edit("path = \"/healthz\"", "path = \"/healthz\"\non_down = \"drop\""), r#"border.toml:24:11: vip[0].health.on_down: unknown value "drop" (expected "keep" or "reset")"#),
        ("on_down not a string", edit("path = \"/healthz\"", "path = \"/healthz\"\non_down = true"), "border.toml:24:11: vip[0].health.on_down: expected a string, found boolean `true`"),
        // --- mgmt peers and quorum (health votes) ---
        ("quorum above checkers", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\nquorum = 2"), "border.toml:17:10: mgmt.quorum: 2 is out of range (expected 1..=1: the checkers are this border-mgmt plus 0 [[mgmt.peer]])"),
        ("quorum zero", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\nquorum = 0"), "border.toml:17:10: mgmt.quorum: 0 is out of range (expected 1..=1: the checkers are this border-mgmt plus 0 [[mgmt.peer]])"),
        ("peer address malformed", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\npeer = [{ address = \"10.0.0.2:50051\" }]"), r#"border.toml:17:21: mgmt.peer[0].address: "10.0.0.2:50051" is not a listen address (expected "unix:///absolute/path" or "tcp://ip:port")"#),
        ("peer is own listen", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\npeer = [{ address = \"unix:///run/border/t.sock\" }]"), r#"border.toml:17:21: mgmt.peer[0].address: "unix:///run/border/t.sock" is this border-mgmt's own mgmt.listen (expected another border-mgmt)"#),
        ("peer twice", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\npeer = [{ address = \"unix:///run/border/u.sock\" }, { address = \"unix:///run/border/u.sock\" }]"), r#"border.toml:17:64: mgmt.peer[1].address: "unix:///run/border/u.sock" is also mgmt.peer[0] (expected each peer once)"#),
        ("tcp peer without tls", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\npeer = [{ address = \"tcp://10.0.0.2:50051\" }]"), "border.toml:17:21: mgmt.peer[0].address: tcp peer 10.0.0.2:50051 requires [mgmt.tls] (its cert and key are this border-mgmt's client identity), or use a unix:// socket"),
        ("peer name bad", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\npeer = [{ address = \"unix:///run/border/u.sock\", name = \"lb 2\" }]"), r#"border.toml:17:57: mgmt.peer[0].name: "lb 2" contains ' ' (expected only A-Z a-z 0-9 _ - .)"#),
        ("peer unknown key", edit("listen = \"unix:///run/border/t.sock\"", "listen = \"unix:///run/border/t.sock\"\npeer = [{ adress = \"unix:///run/border/u.sock\" }]"), "border.toml:17:11: mgmt.peer[0].adress: unknown key (expected one of `address`, `name`, `trusted`)"),
        ("sni on http check", edit("path = \"/healthz\"", "path = \"/healthz\"\nsni = \"www.example.com\""), r#"border.toml:24:7: vip[0].health.sni: is only used by tls and https checks (expected kind = "tls" or "https", or remove this key)"#),
        ("sni is an address", edit("kind = \"http\"\npath = \"/healthz\"", "kind = \"tls\"\nsni = \"10.0.0.1\""), r#"border.toml:23:7: vip[0].health.sni: "10.0.0.1" is an IP address (TLS sends no SNI for addresses; expected a DNS name, e.g. "www.example.com", or remove this key)"#),
        ("sni bad character", edit("kind = \"http\"", "kind = \"https\"\nsni = \"www.exa mple.com\""), r#"border.toml:23:7: vip[0].health.sni: "www.exa mple.com" contains ' ' (expected a DNS name, e.g. "www.example.com")"#),
        // --- ordering: the first error in the file wins ---
        ("first error in file order", edit("worker_lcores = [1]", "worker_lcores = [0]").replacen("zone = \"a\"", "zone = \"a a\"", 1), r#"border.toml:2:8: zone: "a a" contains ' ' (expected only A-Z a-z 0-9 _ - .)"#),
    ]
}

#[test]
fn peers_quorum_and_sni_parse() {
    let text = edit(
        "listen = \"unix:///run/border/t.sock\"",
        "listen = \"unix:///run/border/t.sock\"\nquorum = 2\n[[mgmt.peer]]\naddress = \"unix:///run/border/u.sock\"\nname = \"lb-2\"\n[[mgmt.peer]]\naddress = \"unix:///run/border/v.sock\"",
    )
    .replacen("kind = \"http\"", "kind = \"https\"\nsni = \"health.example.com\"", 1);
    let c = Config::from_toml_str(&text, "border.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.mgmt.quorum, 2);
    assert_eq!(c.mgmt.peers.len(), 2);
    assert_eq!(c.mgmt.peers[0].label(), "lb-2");
    assert_eq!(c.mgmt.peers[1].label(), "unix:///run/border/v.sock");
    let h = c.vips[0].health.as_ref().unwrap();
    assert_eq!(h.sni.as_deref(), Some("health.example.com"));
    let plain = Config::from_toml_str(BASE, "border.toml").unwrap();
    assert_eq!((plain.mgmt.quorum, plain.mgmt.peers.len()), (1, 0));
}

#[test]
fn on_down_parses_and_defaults_to_keep() {
    use conf::tables::{config_flags, VipFlags};
    use conf::OnDown;
    let plain = Config::from_toml_str(BASE, "border.toml").unwrap();
    let h = plain.vips[0].health.as_ref().unwrap();
    assert_eq!(h.on_down, OnDown::Keep);
    assert!(!config_flags(&plain.vips[0]).contains(VipFlags::RESET_ON_DOWN));
    for (value, want) in [("keep", OnDown::Keep), ("reset", OnDown::Reset)] {
        let text = edit(
            "path = \"/healthz\"",
            &format!("path = \"/healthz\"\non_down = \"{value}\""),
        );
        let c = Config::from_toml_str(&text, "border.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.vips[0].health.as_ref().unwrap().on_down, want);
        assert_eq!(want.as_str(), value);
        assert_eq!(
            config_flags(&c.vips[0]).contains(VipFlags::RESET_ON_DOWN),
            want == OnDown::Reset
        );
    }
}

#[test]
fn operators_group_is_a_name_and_defaults_to_none() {
    let anchor = "listen = \"unix:///run/border/t.sock\"";
    let text = edit(
        anchor,
        &format!("{anchor}\noperators_group = \"border-ops\""),
    );
    let c = Config::from_toml_str(&text, "border.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.mgmt.operators_group.as_deref(), Some("border-ops"));
    let plain = Config::from_toml_str(BASE, "border.toml").unwrap();
    assert_eq!(plain.mgmt.operators_group, None);
    let bad = edit(anchor, &format!("{anchor}\noperators_group = \"ops team\""));
    assert_eq!(
        error_of(&bad),
        r#"border.toml:17:19: mgmt.operators_group: "ops team" contains ' ' (expected only A-Z a-z 0-9 _ - .)"#
    );
}
