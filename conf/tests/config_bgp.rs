//! `[mgmt.bgp]` and `vip.announce` (docs/bgp.md): defaults, values as written,
//! and one bad config per rule with the exact error and its line:column.

use conf::{Announce, Config};

/// A valid config with BGP; line numbers below refer to this text after each edit.
const BASE: &str = r#"instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "net_tap0,iface=b-ext"
addresses = ["10.10.0.1/24", "10.20.0.1/24"]
[mgmt]
listen = "unix:///run/border/t.sock"
[mgmt.bgp]
api = "127.0.0.1:50051"
[[vip]]
name = "web"
address = "10.10.0.100"
port = 80
mode = "dnat"
[[vip.backend]]
address = "10.20.0.11"
port = 8080
"#;

fn edit(from: &str, to: &str) -> String {
    assert_eq!(BASE.matches(from).count(), 1, "{from:?} must occur once");
    BASE.replacen(from, to, 1)
}

fn error_of(text: &str) -> String {
    match Config::from_toml_str(text, "border.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bgp_defaults_and_values_as_written() {
    let c = Config::from_toml_str(BASE, "border.toml").unwrap();
    let bgp = c.mgmt.bgp.expect("[mgmt.bgp] is set");
    assert_eq!(bgp.api, "127.0.0.1:50051".parse().unwrap());
    assert!(bgp.communities.is_empty());
    assert_eq!(bgp.withdraw_grace_ms, 0);
    assert_eq!(c.vips[0].announce, Announce::Healthy);

    let text = edit(
        "api = \"127.0.0.1:50051\"",
        "api = \"[::1]:50052\"\ncommunities = [\"65000:100\", \"0:7\"]\nwithdraw_grace_ms = 1500",
    )
    .replacen(
        "mode = \"dnat\"",
        "mode = \"dnat\"\nannounce = \"always\"",
        1,
    );
    let c = Config::from_toml_str(&text, "border.toml").unwrap();
    let bgp = c.mgmt.bgp.unwrap();
    assert_eq!(bgp.api, "[::1]:50052".parse().unwrap());
    assert_eq!(bgp.communities, vec![65000 << 16 | 100, 7]);
    assert_eq!(bgp.withdraw_grace_ms, 1500);
    assert_eq!(c.vips[0].announce, Announce::Always);

    let empty = edit("api = \"127.0.0.1:50051\"\n", "");
    let c = Config::from_toml_str(&empty, "border.toml").unwrap();
    assert_eq!(c.mgmt.bgp.unwrap().api, "127.0.0.1:50051".parse().unwrap());
}

#[test]
fn without_bgp_nothing_changes() {
    let c = Config::from_toml_str(
        &edit("[mgmt.bgp]\napi = \"127.0.0.1:50051\"\n", ""),
        "border.toml",
    )
    .unwrap();
    assert_eq!(c.mgmt.bgp, None);
    assert_eq!(c.vips[0].announce, Announce::Healthy);
}

#[test]
fn every_bgp_rule_has_a_precise_error() {
    let cases = [
        (
            edit("api = \"127.0.0.1:50051\"", "api = \"localhost:50051\""),
            r#"border.toml:12:7: mgmt.bgp.api: "localhost:50051" is not ip:port (expected gobgpd's gRPC API, e.g. "127.0.0.1:50051" or "[::1]:50051")"#,
        ),
        (
            edit("api = \"127.0.0.1:50051\"", "api = \"127.0.0.1:0\""),
            r#"border.toml:12:7: mgmt.bgp.api: 127.0.0.1:0 has port 0 (expected gobgpd's gRPC port, e.g. "127.0.0.1:50051")"#,
        ),
        (
            edit("api = \"127.0.0.1:50051\"", "api = \"127.0.0.1:50051\"\ncommunities = [\"65000:100\", \"65000-1\"]"),
            r#"border.toml:13:29: mgmt.bgp.communities[1]: "65000-1" is not a community (expected "asn:value", each 0..=65535, e.g. "65000:100")"#,
        ),
        (
            edit("api = \"127.0.0.1:50051\"", "withdraw_grace_ms = 60001"),
            "border.toml:12:21: mgmt.bgp.withdraw_grace_ms: 60001 is out of range (expected 0..=60000 ms)",
        ),
        (
            edit("api = \"127.0.0.1:50051\"", "api = \"127.0.0.1:50051\"\nasn = 65000"),
            "border.toml:13:1: mgmt.bgp.asn: unknown key (expected one of `api`, `communities`, `withdraw_grace_ms`)",
        ),
        (
            edit("mode = \"dnat\"", "mode = \"dnat\"\nannounce = \"sometimes\""),
            r#"border.toml:18:12: vip[0].announce: unknown value "sometimes" (expected "healthy", "always" or "never")"#,
        ),
        (
            edit("[mgmt.bgp]\napi = \"127.0.0.1:50051\"\n", "").replacen("mode = \"dnat\"", "mode = \"dnat\"\nannounce = \"healthy\"", 1),
            "border.toml:16:12: vip[0].announce: needs [mgmt.bgp] (gobgpd's API) to announce through (expected a [mgmt.bgp] section, or remove this key)",
        ),
    ];
    let mut wrong = Vec::new();
    for (text, want) in &cases {
        let got = error_of(text);
        if got != *want {
            wrong.push(format!("want {want}\n got {got}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
