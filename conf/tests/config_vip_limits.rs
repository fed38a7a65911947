//! `[vip.limits]` and a backend's `max_connections`: what they
//! parse to, and each contradictory or out-of-range limit refused with
//! file:line:column and its key.

use conf::tables::{build_generation, no_overrides};
use conf::{Config, IpNet, VipLimits};

const HEAD: &str = r#"instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24", "2001:db8::1/64"]
local_addresses = ["10.0.0.1", "2001:db8::1"]
"#;

/// A VIP of `protocol` on 10.0.0.100 with two backends (the second with
/// `backend_extra`), then `limits` as its `[vip.limits]` table (none if empty).
fn vip(protocol: &str, backend_extra: &str, limits: &str) -> String {
    let mut s = format!(
        "[[vip]]\nname = \"web\"\naddress = \"10.0.0.100\"\nport = 80\nprotocol = \"{protocol}\"\nmaglev_table_size = 307\n[[vip.backend]]\naddress = \"10.0.0.11\"\nport = 80\n[[vip.backend]]\naddress = \"10.0.0.12\"\nport = 80\n{backend_extra}\n"
    );
    if !limits.is_empty() {
        s += "[vip.limits]\n";
        s += limits;
        s += "\n";
    }
    s
}

fn parse(text: &str) -> Result<Config, String> {
    Config::from_toml_str(&format!("{HEAD}{text}"), "border.toml").map_err(|e| e.to_string())
}

/// Line and column (1-based) of the first occurrence of `needle` in the
/// whole file; for `key = value` or a bare key, of its value (where errors
/// point).
fn at(text: &str, needle: &str) -> (usize, usize) {
    let whole = format!("{HEAD}{text}");
    let mut off = whole
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the text"));
    if !needle.starts_with('"') {
        off += whole[off..].find(" = ").map_or(0, |i| i + 3);
    }
    let line = whole[..off].matches('\n').count() + 1;
    let col = off - whole[..off].rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// The text is refused at `needle`'s position with `key`, and the message
/// contains `says`.
fn refused(text: &str, needle: &str, key: &str, says: &str) {
    let e = parse(text).expect_err("accepted");
    let (line, col) = at(text, needle);
    let want = format!("border.toml:{line}:{col}: {key}: ");
    assert!(e.starts_with(&want), "want {want:?}, got {e:?}");
    assert!(e.contains(says), "{e:?} lacks {says:?}");
}

#[test]
fn limits_parse_with_their_defaults() {
    let c = parse(&vip(
        "tcp",
        "max_connections = 40",
        "max_connections = 100\nnew_connections_per_second = 500\nsyn_per_source_per_second = 20\nallow = [\"10.0.0.0/8\", \"192.0.2.7/24\"]\ndeny = [\"10.9.0.0/16\"]",
    ))
    .unwrap();
    let v = &c.vips[0];
    assert_eq!(v.backends[0].max_connections, 0);
    assert_eq!(v.backends[1].max_connections, 40);
    let l = &v.limits;
    assert_eq!(l.max_connections, 100);
    assert_eq!(
        (l.new_connections_per_second, l.new_connections_burst),
        (500, 500)
    );
    assert_eq!((l.per_source_per_second, l.per_source_burst), (20, 20));
    assert_eq!((l.source_prefix_v4, l.source_prefix_v6), (24, 64));
    assert_eq!(l.source_table_size, VipLimits::DEFAULT_SOURCE_TABLE);
    // Host bits go: the prefix is its network.
    assert_eq!(
        l.allow,
        vec![
            "10.0.0.0/8".parse::<IpNet>().unwrap(),
            "192.0.2.0/24".parse().unwrap()
        ]
    );
    assert_eq!(l.deny, vec!["10.9.0.0/16".parse::<IpNet>().unwrap()]);
    // Into the tables' model as is.
    let g = build_generation(&c, &no_overrides).unwrap();
    assert_eq!(g.vips[0].limits, *l);
    assert_eq!(g.vips[0].backends[1].max_connections, 40);

    // No table: no limit.
    let c = parse(&vip("udp", "", "")).unwrap();
    assert!(!c.vips[0].limits.any());
    let c = parse(&vip(
        "udp",
        "",
        "udp_flows_per_source_per_second = 5\nper_source_burst = 50\nsource_prefix_v4 = 32\nsource_table_size = 1024",
    ))
    .unwrap();
    let l = &c.vips[0].limits;
    assert_eq!(
        (
            l.per_source_per_second,
            l.per_source_burst,
            l.source_prefix_v4,
            l.source_table_size
        ),
        (5, 50, 32, 1024)
    );
}

#[test]
fn zero_and_out_of_range_limits_are_refused_at_their_key() {
    for (limits, needle, key, says) in [
        (
            "max_connections = 0",
            "max_connections = 0",
            "vip[0].limits.max_connections",
            "0 is out of range",
        ),
        (
            "new_connections_per_second = 0",
            "new_connections_per_second",
            "vip[0].limits.new_connections_per_second",
            "expected 1..=",
        ),
        (
            "syn_per_source_per_second = 0",
            "syn_per_source_per_second",
            "vip[0].limits.syn_per_source_per_second",
            "leave it out for no limit",
        ),
        (
            "syn_per_source_per_second = 9\nsource_prefix_v4 = 33",
            "source_prefix_v4",
            "vip[0].limits.source_prefix_v4",
            "33 is out of range (expected a prefix length 1..=32)",
        ),
        (
            "syn_per_source_per_second = 9\nsource_prefix_v6 = 0",
            "source_prefix_v6",
            "vip[0].limits.source_prefix_v6",
            "expected a prefix length 1..=128",
        ),
        (
            "syn_per_source_per_second = 9\nsource_table_size = 1000",
            "source_table_size",
            "vip[0].limits.source_table_size",
            "1000 is not a power of two",
        ),
        (
            "allow = [\"10.0.0.0/33\"]",
            "\"10.0.0.0/33\"",
            "vip[0].limits.allow[0]",
            "bad prefix length",
        ),
        (
            "deny = [\"10.0.0.0\"]",
            "\"10.0.0.0\"",
            "vip[0].limits.deny[0]",
            "no prefix length",
        ),
    ] {
        let text = vip("tcp", "", limits);
        refused(&text, needle, key, says);
    }
}

#[test]
fn contradictory_limits_are_refused_at_their_key() {
    // A prefix in both lists.
    let text = vip(
        "tcp",
        "",
        "allow = [\"10.1.0.0/16\", \"192.0.2.0/24\"]\ndeny = [\"198.51.100.0/24\", \"10.1.7.7/16\"]",
    );
    refused(
        &text,
        "\"10.1.7.7/16\"",
        "vip[0].limits.deny[1]",
        "10.1.0.0/16 is also allow[0]",
    );
    // A backend allowed more than its VIP.
    let text = vip("tcp", "max_connections = 11", "max_connections = 10");
    refused(
        &text,
        "max_connections = 11",
        "vip[0].backend[1].max_connections",
        "11 is above the VIP's limits.max_connections = 10",
    );
    // A backend's cap of 0.
    let text = vip("tcp", "max_connections = 0", "");
    refused(
        &text,
        "max_connections = 0",
        "vip[0].backend[1].max_connections",
        "0 is out of range",
    );
    // A burst without its rate.
    let text = vip("tcp", "", "new_connections_burst = 5");
    refused(
        &text,
        "new_connections_burst",
        "vip[0].limits.new_connections_burst",
        "is only used with new_connections_per_second",
    );
    let text = vip("tcp", "", "per_source_burst = 5");
    refused(
        &text,
        "per_source_burst",
        "vip[0].limits.per_source_burst",
        "is only used with syn_per_source_per_second",
    );
    // The other protocol's per-source key.
    let text = vip("tcp", "", "udp_flows_per_source_per_second = 5");
    refused(
        &text,
        "udp_flows_per_source_per_second",
        "vip[0].limits.udp_flows_per_source_per_second",
        "is only used on udp VIPs and this one is tcp",
    );
    let text = vip("udp", "", "syn_per_source_per_second = 5");
    refused(
        &text,
        "syn_per_source_per_second",
        "vip[0].limits.syn_per_source_per_second",
        "is only used on tcp VIPs",
    );
    // Another family than the VIP's, a prefix twice.
    let text = vip("tcp", "", "deny = [\"2001:db8::/32\"]");
    refused(
        &text,
        "\"2001:db8::/32\"",
        "vip[0].limits.deny[0]",
        "is IPv6 but the VIP is IPv4",
    );
    let text = vip("tcp", "", "allow = [\"10.0.0.0/8\", \"10.1.0.0/8\"]");
    refused(
        &text,
        "\"10.1.0.0/8\"",
        "vip[0].limits.allow[1]",
        "10.0.0.0/8 is listed twice (also allow[0])",
    );
    // An unknown key, and ICMP's rate of 0.
    let text = vip("tcp", "", "max_conns = 5");
    let e = parse(&text).unwrap_err();
    let (line, _) = at(&text, "max_conns");
    assert!(
        e.starts_with(&format!(
            "border.toml:{line}:1: vip[0].limits.max_conns: unknown key"
        )),
        "{e}"
    );
    let e = Config::from_toml_str(
        &HEAD.replace(
            "worker_lcores = [1]",
            "worker_lcores = [1]\nicmp_echo_per_second = 0",
        ),
        "border.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("border.toml:4:24: dataplane.icmp_echo_per_second: 0 is out of range"),
        "{e}"
    );
}
