//! `[vip.health]` probes over UDP (`kind = "dns"`, `kind = "udp"`) and the
//! probe `port`: what they parse to, and every bad value refused with the
//! whole one-line error an operator sees (file:line:column, key, reason).

use conf::{Config, DnsRcode, DnsType, HealthKind, UdpExpect};

/// The lines before the VIP's port; its `port = 53` is line 13.
const HEAD: &str = r#"instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
local_addresses = ["10.0.0.1"]
[[vip]]
name = "dns"
address = "10.0.0.53"
"#;

/// A VIP of `protocol` (line 14) whose `[vip.health]` (line 15) has `body`
/// from line 16 on, and one backend after it.
fn vip(protocol: &str, body: &str) -> String {
    format!(
        "{HEAD}port = 53\nprotocol = \"{protocol}\"\n[vip.health]\n{body}\n[[vip.backend]]\naddress = \"10.0.0.11\"\nport = 53\n"
    )
}

fn error_of(text: &str) -> String {
    match Config::from_toml_str(text, "border.toml") {
        Ok(_) => "<no error>".to_owned(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_bad_probe_setting_has_a_precise_error() {
    let tcp_kinds = r#"(expected a TCP check kind: "tcp", "tls", "http", "https" or "agent"; or protocol = "udp")"#;
    let default_tcp = format!("{HEAD}port = 53\n[vip.health]\nkind = \"dns\"\n");
    let cases: Vec<(&str, String, String)> = vec![
        // --- the probe kind and the VIP's protocol ---
        ("dns probe on a TCP VIP", vip("tcp", "kind = \"dns\""),
         format!(r#"border.toml:16:8: vip[0].health.kind: "dns" probes over UDP but the VIP's protocol is "tcp" {tcp_kinds}"#)),
        ("udp probe on a TCP VIP", vip("tcp", "kind = \"udp\"\nsend = \"ping\""),
         format!(r#"border.toml:16:8: vip[0].health.kind: "udp" probes over UDP but the VIP's protocol is "tcp" {tcp_kinds}"#)),
        ("dns probe on a VIP that is TCP by default", default_tcp,
         format!(r#"border.toml:15:8: vip[0].health.kind: "dns" probes over UDP but the VIP's protocol is "tcp" (the default) {tcp_kinds}"#)),
        // --- port ---
        ("probe port zero", vip("udp", "kind = \"dns\"\nport = 0"),
         "border.toml:17:8: vip[0].health.port: 0 is not a port (expected 1..=65535)".into()),
        ("probe port beyond u16", vip("udp", "kind = \"dns\"\nport = 65536"),
         "border.toml:17:8: vip[0].health.port: 65536 is out of range (expected an integer 0..=65535)".into()),
        ("probe port with kind agent", vip("udp", "kind = \"agent\"\nport = 9777"),
         r#"border.toml:17:8: vip[0].health.port: kind = "agent" asks the agent on agent_port (expected agent_port = N, or remove this key)"#.into()),
        ("proxy header on a dns probe", vip("udp", "kind = \"dns\"\nsend_proxy_v2 = true"),
         r#"border.toml:17:17: vip[0].health.send_proxy_v2: is a header of TCP connections, and kind = "dns" probes over UDP (expected a TCP check kind, or remove this key)"#.into()),
        // --- dns ---
        ("bad query name", vip("udp", "kind = \"dns\"\nquery = \"exa mple.com\""),
         r#"border.toml:17:9: vip[0].health.query: "exa mple.com" contains ' ' (expected a domain name, e.g. "example.com", or "." for the root)"#.into()),
        ("empty query label", vip("udp", "kind = \"dns\"\nquery = \"a..b\""),
         r#"border.toml:17:9: vip[0].health.query: "a..b" has an empty or longer than 63 bytes label (expected a domain name, e.g. "example.com", or "." for the root)"#.into()),
        ("unknown query type", vip("udp", "kind = \"dns\"\nquery_type = \"ANY\""),
         r#"border.toml:17:14: vip[0].health.query_type: unknown value "ANY" (expected "A", "NS", "CNAME", "SOA", "PTR", "MX", "TXT", "AAAA" or "SRV")"#.into()),
        ("empty rcode list", vip("udp", "kind = \"dns\"\nexpect_rcode = []"),
         r#"border.toml:17:16: vip[0].health.expect_rcode: must list at least one response code (expected e.g. ["NOERROR"])"#.into()),
        ("unknown rcode", vip("udp", "kind = \"dns\"\nexpect_rcode = [\"NOERROR\", \"NOTAUTH\"]"),
         r#"border.toml:17:28: vip[0].health.expect_rcode[1]: unknown value "NOTAUTH" (expected "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP" or "REFUSED")"#.into()),
        ("query on a udp probe", vip("udp", "kind = \"udp\"\nsend = \"x\"\nquery = \"example.com\""),
         r#"border.toml:18:9: vip[0].health.query: is only used by dns checks (expected kind = "dns", or remove this key)"#.into()),
        ("rcodes on a tcp probe", vip("udp", "kind = \"tcp\"\nexpect_rcode = [\"NOERROR\"]"),
         r#"border.toml:17:16: vip[0].health.expect_rcode: is only used by dns checks (expected kind = "dns", or remove this key)"#.into()),
        // --- udp ---
        ("udp probe without a payload", vip("udp", "kind = \"udp\""),
         r#"border.toml:15:1: vip[0].health.send: missing required key for kind = "udp" (expected send = "..." or send_hex = "...": the datagram the probe sends)"#.into()),
        ("send and send_hex", vip("udp", "kind = \"udp\"\nsend = \"ping\"\nsend_hex = \"00\""),
         "border.toml:18:12: vip[0].health.send_hex: cannot be combined with send (expected one of send and send_hex)".into()),
        ("send_hex not hex", vip("udp", "kind = \"udp\"\nsend_hex = \"0x01\""),
         r#"border.toml:17:12: vip[0].health.send_hex: "0x01" contains 'x' (expected pairs of hex digits, e.g. "0001ff" or "00 01 ff")"#.into()),
        ("send_hex odd", vip("udp", "kind = \"udp\"\nsend_hex = \"abc\""),
         r#"border.toml:17:12: vip[0].health.send_hex: "abc" has an odd number of hex digits (expected pairs of hex digits, e.g. "0001ff" or "00 01 ff")"#.into()),
        ("send too long", vip("udp", &format!("kind = \"udp\"\nsend = \"{}\"", "x".repeat(1025))),
         "border.toml:17:8: vip[0].health.send: is 1025 bytes long (expected at most 1024)".into()),
        ("expect empty", vip("udp", "kind = \"udp\"\nsend = \"ping\"\nexpect = \"\""),
         "border.toml:18:10: vip[0].health.expect: must not be empty (expected the bytes the reply must contain, or remove this key: then any reply passes)".into()),
        ("expect and expect_regex", vip("udp", "kind = \"udp\"\nsend = \"ping\"\nexpect = \"pong\"\nexpect_regex = \"^pong\""),
         "border.toml:19:16: vip[0].health.expect_regex: cannot be combined with expect (expected one of expect and expect_regex)".into()),
        ("bad regex", vip("udp", "kind = \"udp\"\nsend = \"ping\"\nexpect_regex = \"(pong\""),
         r#"border.toml:18:16: vip[0].health.expect_regex: "(pong" is not a regular expression: unclosed group (expected Rust regex syntax, e.g. "^PONG")"#.into()),
        ("send on a dns probe", vip("udp", "kind = \"dns\"\nsend = \"ping\""),
         r#"border.toml:17:8: vip[0].health.send: is only used by udp checks (expected kind = "udp", or remove this key)"#.into()),
        ("expect on an http probe", vip("udp", "kind = \"http\"\npath = \"/\"\nport = 8080\nexpect = \"ok\""),
         r#"border.toml:19:10: vip[0].health.expect: is only used by udp checks (expected kind = "udp", or remove this key)"#.into()),
    ];
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

#[test]
fn dns_probe_defaults_and_settings() {
    let c = Config::from_toml_str(&vip("udp", "kind = \"dns\""), "border.toml")
        .unwrap_or_else(|e| panic!("{e}"));
    let h = c.vips[0].health.as_ref().unwrap();
    assert_eq!(h.kind, HealthKind::Dns);
    assert_eq!(h.port, None);
    assert!(h.udp.is_none());
    let d = h.dns.as_ref().unwrap();
    assert_eq!((d.query.as_str(), d.query_type), (".", DnsType::Ns));
    assert_eq!(d.expect_rcode, vec![DnsRcode::NoError, DnsRcode::NxDomain]);

    let text = vip(
        "udp",
        "kind = \"dns\"\nport = 5353\nquery = \"health.example.\"\nquery_type = \"AAAA\"\nexpect_rcode = [\"REFUSED\", \"NOERROR\", \"NOERROR\"]",
    );
    let c = Config::from_toml_str(&text, "border.toml").unwrap_or_else(|e| panic!("{e}"));
    let h = c.vips[0].health.as_ref().unwrap();
    assert_eq!(h.port, Some(5353));
    let d = h.dns.as_ref().unwrap();
    assert_eq!(
        (d.query.as_str(), d.query_type, d.query_type.code()),
        ("health.example.", DnsType::Aaaa, 28)
    );
    assert_eq!(d.expect_rcode, vec![DnsRcode::NoError, DnsRcode::Refused]);
}

#[test]
fn udp_probe_settings() {
    let parse = |body: &str| {
        let c = Config::from_toml_str(&vip("udp", body), "border.toml")
            .unwrap_or_else(|e| panic!("{body}: {e}"));
        c.vips[0].health.clone().unwrap()
    };
    let h = parse("kind = \"udp\"\nsend = \"PING\\r\\n\"\nexpect = \"PONG\"");
    assert_eq!(h.kind, HealthKind::Udp);
    assert!(h.dns.is_none());
    let u = h.udp.unwrap();
    assert_eq!(u.send, b"PING\r\n");
    assert_eq!(u.expect, Some(UdpExpect::Contains(b"PONG".to_vec())));

    let u = parse("kind = \"udp\"\nsend_hex = \"ff ff ff ff 54\"\nexpect_regex = \"^\\\\xff{4}I\"")
        .udp
        .unwrap();
    assert_eq!(u.send, [0xff, 0xff, 0xff, 0xff, 0x54]);
    assert_eq!(u.expect, Some(UdpExpect::Regex(r"^\xff{4}I".into())));

    let u = parse("kind = \"udp\"\nsend = \"\"").udp.unwrap();
    assert_eq!((u.send.len(), u.expect), (0, None));
}

#[test]
fn a_tcp_check_of_a_udp_vip_is_allowed_and_port_applies_to_every_kind() {
    for body in [
        "kind = \"tcp\"",
        "kind = \"tcp\"\nport = 8053",
        "kind = \"http\"\npath = \"/healthz\"\nport = 8080",
        "kind = \"tls\"\nport = 853",
        "kind = \"https\"\npath = \"/\"\nport = 443",
        "kind = \"udp\"\nsend = \"x\"\nport = 7",
        "kind = \"http\"\npath = \"/\"\nport = 8080\nagent_port = 9777",
    ] {
        let c = Config::from_toml_str(&vip("udp", body), "border.toml")
            .unwrap_or_else(|e| panic!("{body}: {e}"));
        let want = body
            .lines()
            .find_map(|l| l.strip_prefix("port = "))
            .map(|p| p.parse::<u16>().unwrap());
        assert_eq!(c.vips[0].health.as_ref().unwrap().port, want, "{body}");
    }
}

/// The commented UDP VIPs of the shipped example, turned on by removing
/// the `# ` of their lines as their comment says, parse as written.
#[test]
fn example_udp_block_parses_when_uncommented() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/border.example.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let start = text
        .find("# [[vip]]\n# name = \"dns\"")
        .expect("the UDP VIP block");
    // The block ends at its first blank line.
    let end = start
        + text[start..]
            .find("\n\n")
            .expect("a blank line after the UDP block")
        + 1;
    let on: String = text[start..end]
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let whole = format!("{}{on}{}", &text[..start], &text[end..]);
    let c = Config::from_toml_str(&whole, "example").unwrap_or_else(|e| panic!("{e}"));
    let health = |name: &str| {
        c.vips
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.health.clone())
            .unwrap_or_else(|| panic!("VIP {name} with [vip.health]"))
    };
    let d = health("dns").dns.unwrap();
    assert_eq!(
        (d.query.as_str(), d.query_type, d.expect_rcode),
        (
            "example.com",
            DnsType::Soa,
            vec![DnsRcode::NoError, DnsRcode::NxDomain]
        )
    );
    let e = health("echo");
    assert_eq!(e.port, Some(7001));
    let u = e.udp.unwrap();
    assert_eq!(u.send, b"PING\n");
    assert_eq!(u.expect, Some(UdpExpect::Contains(b"PONG".to_vec())));
}
