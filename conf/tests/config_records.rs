//! `[records]`, connection records and their exporters.

use conf::{Config, IpfixCollector, JsonLog, Records};

const HEAD: &str = r#"instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
"#;

fn parse(records: &str) -> Result<Config, String> {
    Config::from_toml_str(&format!("{HEAD}{records}"), "border.toml").map_err(|e| e.to_string())
}

#[test]
fn records_are_off_unless_configured_and_take_defaults() {
    assert_eq!(parse("").unwrap().records, None);
    let c = parse("[records]\n[records.json]\npath = \"/var/log/border/records.jsonl\"\n").unwrap();
    assert_eq!(
        c.records,
        Some(Records {
            ring_slots: 65_536,
            log_empty: false,
            ipfix: vec![],
            json: Some(JsonLog {
                path: "/var/log/border/records.jsonl".into(),
                rotate_bytes: 100 << 20,
                keep: 5,
            }),
        })
    );
    let c = parse(
        "[records]\nring_slots = 1024\nlog_empty = true\n[[records.ipfix]]\ncollector = \"192.0.2.50:4739\"\n[[records.ipfix]]\ncollector = \"[2001:db8::50]:2055\"\nobservation_domain = 7\ntemplate_interval_s = 10\n",
    )
    .unwrap();
    let r = c.records.unwrap();
    assert_eq!((r.ring_slots, r.log_empty, r.json), (1024, true, None));
    assert_eq!(
        r.ipfix,
        vec![
            IpfixCollector {
                collector: "192.0.2.50:4739".parse().unwrap(),
                observation_domain: 1,
                template_interval_s: 60,
            },
            IpfixCollector {
                collector: "[2001:db8::50]:2055".parse().unwrap(),
                observation_domain: 7,
                template_interval_s: 10,
            },
        ]
    );
}

#[test]
fn bad_records_settings_are_named() {
    let cases = [
        ("[records]\n", "border.toml:9:1: records: has no exporter (expected [[records.ipfix]] collector = \"ip:port\" and/or [records.json] path = \"/var/log/border/records.jsonl\")"),
        ("[records]\nring_slots = 1000\n[records.json]\npath = \"/x\"\n", "border.toml:10:14: records.ring_slots: 1000 is not a power of two in 1024..=1048576"),
        ("[records]\nring_slots = 4194304\n[records.json]\npath = \"/x\"\n", "border.toml:10:14: records.ring_slots: 4194304 is not a power of two in 1024..=1048576"),
        ("[[records.ipfix]]\ncollector = \"collector:4739\"\n", "border.toml:10:13: records.ipfix.collector: \"collector:4739\" is not a collector address (expected ip:port, e.g. \"192.0.2.50:4739\" or \"[2001:db8::50]:4739\")"),
        ("[[records.ipfix]]\ncollector = \"0.0.0.0:4739\"\n", "border.toml:10:13: records.ipfix.collector: \"0.0.0.0:4739\" is not a collector address (expected ip:port, e.g. \"192.0.2.50:4739\" or \"[2001:db8::50]:4739\")"),
        ("[[records.ipfix]]\ncollector = \"192.0.2.1:4739\"\n[[records.ipfix]]\ncollector = \"192.0.2.1:4739\"\n", "border.toml:12:13: records.ipfix.collector: 192.0.2.1:4739 is listed twice"),
        ("[[records.ipfix]]\ncollector = \"192.0.2.1:4739\"\ntemplate_interval_s = 0\n", "border.toml:11:23: records.ipfix.template_interval_s: 0 is out of range (expected 1..=3600 s)"),
        ("[records.json]\npath = \"records.jsonl\"\n", "border.toml:10:8: records.json.path: \"records.jsonl\" is not an absolute file path (expected e.g. \"/var/log/border/records.jsonl\")"),
        ("[records.json]\npath = \"/\"\n", "border.toml:10:8: records.json.path: \"/\" is not an absolute file path (expected e.g. \"/var/log/border/records.jsonl\")"),
        ("[records.json]\npath = \"/x\"\nrotate_bytes = 10\n", "border.toml:11:16: records.json.rotate_bytes: 10 is too small (expected at least 4096)"),
        ("[records.json]\npath = \"/x\"\nkeep = 5000\n", "border.toml:11:8: records.json.keep: 5000 is out of range (expected 0..=1000)"),
        ("[records]\nsampling = 10\n[records.json]\npath = \"/x\"\n", "border.toml:10:1: records.sampling: unknown key (expected one of `ring_slots`, `log_empty`, `ipfix`, `json`)"),
    ];
    for (text, want) in cases {
        let e = parse(text).unwrap_err();
        assert!(e.contains(want), "{text}\ngot:  {e}\nwant: {want}");
    }
}
