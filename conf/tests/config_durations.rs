//! Duration keys take `"5s"`, `"300ms"`, `"2m"` as well as a bare number in
//! the key's unit (seconds for `dataplane.timeouts` and `_s` keys,
//! milliseconds for `_ms` keys); errors keep file:line:column. One case per
//! key family: dataplane timeouts, health probes, mgmt limits, BGP, the
//! agent, IPFIX.

use conf::Config;

const HEAD: &str = r#"instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
"#;

const TLS: &str = r#"[mgmt.tls]
cert = "c.pem"
key = "k.pem"
client_ca = "ca.pem"
client_fingerprints = ["sha256:0000000000000000000000000000000000000000000000000000000000000000"]
"#;

const GW_PIN: &str = "sha256:abababababababababababababababababababababababababababababababab";

fn parse(rest: &str) -> Result<Config, String> {
    Config::from_toml_str(&format!("{HEAD}{rest}"), "border.toml").map_err(|e| e.to_string())
}

fn vip_with_health(health: &str) -> String {
    format!(
        "[[vip]]\nname = \"web\"\naddress = \"10.0.0.100\"\nport = 80\nmode = \"dnat\"\n[vip.health]\nkind = \"tcp\"\n{health}[[vip.backend]]\naddress = \"10.0.0.11\"\nport = 80\n"
    )
}

#[test]
fn dataplane_timeouts_take_seconds_or_durations() {
    let c = parse(
        "[dataplane.timeouts]\ntcp_syn = \"5s\"\ntcp_established = \"2h\"\ntcp_closing = 10\nudp = \"1m30s\"\nlocal_port_cooldown = \"0s\"\n",
    )
    .unwrap();
    let t = c.dataplane.timeouts;
    assert_eq!(
        (
            t.tcp_syn,
            t.tcp_established,
            t.tcp_closing,
            t.udp,
            t.local_port_cooldown
        ),
        (5, 7200, 10, 90, 0)
    );
    assert_eq!(
        parse("[dataplane.timeouts]\ntcp_syn = \"1500ms\"\n").unwrap_err(),
        "border.toml:10:11: dataplane.timeouts.tcp_syn: 1s 500ms is not a whole number of seconds"
    );
    assert_eq!(
        parse("[dataplane.timeouts]\nudp = \"8d\"\n").unwrap_err(),
        "border.toml:10:7: dataplane.timeouts.udp: 691200 is out of range (expected 1..=604800 seconds)"
    );
    assert_eq!(
        parse("[dataplane.timeouts]\nudp = \"soon\"\n").unwrap_err(),
        "border.toml:10:7: dataplane.timeouts.udp: \"soon\" is not a duration, expected number at 0 (expected a duration such as 5s, 300ms or 2m, or a number of seconds)"
    );
}

#[test]
fn health_interval_and_timeout_take_milliseconds_or_durations() {
    let c = parse(&vip_with_health(
        "interval_ms = \"2s\"\ntimeout_ms = \"300ms\"\n",
    ))
    .unwrap();
    let h = c.vips[0].health.as_ref().unwrap();
    assert_eq!((h.interval_ms, h.timeout_ms), (2000, 300));
    let c = parse(&vip_with_health("interval_ms = 1500\ntimeout_ms = 700\n")).unwrap();
    let h = c.vips[0].health.as_ref().unwrap();
    assert_eq!((h.interval_ms, h.timeout_ms), (1500, 700));
    assert_eq!(
        parse(&vip_with_health("interval_ms = \"1s\"\ntimeout_ms = \"1s\"\n")).unwrap_err(),
        "border.toml:17:14: vip[0].health.timeout_ms: 1000 is not less than interval_ms 1000 (expected timeout_ms < interval_ms)"
    );
}

#[test]
fn mgmt_limits_and_bgp_take_milliseconds_or_durations() {
    let c = parse(
        "[mgmt]\n[mgmt.limits]\ntls_handshake_timeout_ms = \"3s\"\n[mgmt.bgp]\napi = \"127.0.0.1:50051\"\nwithdraw_grace_ms = \"1m\"\n",
    )
    .unwrap();
    assert_eq!(c.mgmt.limits.tls_handshake_timeout_ms, 3000);
    assert_eq!(c.mgmt.bgp.unwrap().withdraw_grace_ms, 60_000);
    assert_eq!(
        parse("[mgmt]\n[mgmt.limits]\ntls_handshake_timeout_ms = \"20m\"\n").unwrap_err(),
        "border.toml:11:28: mgmt.limits.tls_handshake_timeout_ms: 1200000 is out of range (expected 100..=600000 ms)"
    );
}

#[test]
fn agent_timers_take_milliseconds_or_durations() {
    let c = parse(&format!(
        "[mgmt]\n{TLS}[mgmt.agent]\nid = \"a\"\ngateways = [\"tcp://g:1\"]\ngateway_fingerprints = [\"{GW_PIN}\"]\nidle_timeout_ms = \"2m\"\nbackoff_min_ms = \"250ms\"\nbackoff_max_ms = \"10s\"\nbackoff_reset_after_ms = 4000\n"
    ))
    .unwrap();
    let a = c.mgmt.agent.unwrap();
    assert_eq!(
        (
            a.idle_timeout_ms,
            a.backoff_min_ms,
            a.backoff_max_ms,
            a.backoff_reset_after_ms
        ),
        (120_000, 250, 10_000, 4000)
    );
}

#[test]
fn ipfix_template_interval_takes_seconds_or_durations() {
    let c =
        parse("[[records.ipfix]]\ncollector = \"192.0.2.1:4739\"\ntemplate_interval_s = \"5m\"\n")
            .unwrap();
    assert_eq!(c.records.unwrap().ipfix[0].template_interval_s, 300);
    assert_eq!(
        parse("[[records.ipfix]]\ncollector = \"192.0.2.1:4739\"\ntemplate_interval_s = -1\n")
            .unwrap_err(),
        "border.toml:11:23: records.ipfix[0].template_interval_s: -1 is out of range (expected a duration such as \"5s\", \"300ms\" or \"2m\", or a number of seconds)"
    );
}
