//! Roles of pinned certificates (`[mgmt.tls]` reader and peer
//! lists), `[mgmt.limits]`, and the ring-memory budget a config must fit.

use conf::{ClientRole, Config, MgmtLimits};

const HEAD: &str = r#"instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
local_addresses = ["10.0.0.1"]
"#;

const A: &str = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const B: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const C: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn vip(name: &str, octet: u32, slots: u32) -> String {
    format!(
        "[[vip]]\nname = \"{name}\"\naddress = \"10.0.0.{octet}\"\nport = 80\nmaglev_table_size = {slots}\n[[vip.backend]]\naddress = \"10.0.1.1\"\nport = 80\n"
    )
}

fn parse(mgmt: &str, vips: &str) -> Result<Config, String> {
    Config::from_toml_str(&format!("{HEAD}{mgmt}{vips}"), "border.toml").map_err(|e| e.to_string())
}

fn tls(lists: &str) -> String {
    format!("[mgmt]\nlisten = \"tcp://127.0.0.1:50051\"\n[mgmt.tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\n{lists}")
}

#[test]
fn pinned_certificates_have_roles_and_plain_client_fingerprints_stay_operators() {
    let c = parse(
        &tls(&format!(
            "client_fingerprints = [\"{A}\"]\nreader_fingerprints = [\"{}\"]\npeer_fingerprints = [\"{C}\"]\n",
            B.to_ascii_uppercase().replace("SHA256", "sha256")
        )),
        "",
    )
    .unwrap();
    let t = c.mgmt.tls.unwrap();
    assert_eq!(t.role_of(A), Some(ClientRole::Operator));
    assert_eq!(t.role_of(B), Some(ClientRole::Reader));
    assert_eq!(
        t.role_of(&C.to_ascii_uppercase().replace("SHA256", "sha256")),
        Some(ClientRole::Peer)
    );
    assert_eq!(t.role_of("sha256:33"), None);
    assert_eq!(t.pins().count(), 3);

    // Only readers (no operator over TCP) is allowed too.
    let c = parse(&tls(&format!("reader_fingerprints = [\"{B}\"]\n")), "").unwrap();
    assert_eq!(c.mgmt.tls.unwrap().role_of(B), Some(ClientRole::Reader));
}

#[test]
fn a_certificate_has_one_role_and_at_least_one_is_pinned() {
    let e = parse(
        &tls(&format!(
            "client_fingerprints = [\"{A}\"]\npeer_fingerprints = [\"{A}\"]\n"
        )),
        "",
    )
    .unwrap_err();
    assert_eq!(e, "border.toml:17:22: mgmt.tls.peer_fingerprints[0]: is also client_fingerprints[0] (expected one role per certificate: client_fingerprints operators, reader_fingerprints readers, peer_fingerprints peers)");
    let e = parse(&tls("reader_fingerprints = []\n"), "").unwrap_err();
    assert_eq!(e, "border.toml:12:1: mgmt.tls.client_fingerprints: must list at least one pinned client certificate (expected [\"sha256:<64 hex digits>\"])");
    let e = parse(&tls("peer_fingerprints = [\"sha256:zz\"]\n"), "").unwrap_err();
    assert_eq!(e, "border.toml:16:22: mgmt.tls.peer_fingerprints[0]: \"sha256:zz\" is not a certificate fingerprint (expected \"sha256:\" followed by 64 hex digits)");
}

#[test]
fn limits_default_and_are_bounded() {
    let c = parse("", "").unwrap();
    assert_eq!(c.mgmt.limits, MgmtLimits::default());
    assert_eq!(c.mgmt.limits.ring_memory_mib, 512);
    let c = parse(
        "[mgmt]\n[mgmt.limits]\nwatch_streams = 10\nwatch_streams_per_connection = 2\ntls_handshakes = 3\ntls_handshake_timeout_ms = 500\nmetrics_connections = 4\nnote_max_bytes = 64\nring_memory_mib = 1\n",
        "",
    )
    .unwrap();
    assert_eq!(
        c.mgmt.limits,
        MgmtLimits {
            watch_streams: 10,
            watch_streams_per_connection: 2,
            tls_handshakes: 3,
            tls_handshake_timeout_ms: 500,
            metrics_connections: 4,
            note_max_bytes: 64,
            ring_memory_mib: 1,
            streams_per_connection: 128,
            request_memory_mib: 64,
            operator_reserve_mib: 16,
        }
    );
    let c = parse(
        "[mgmt]\n[mgmt.limits]\nstreams_per_connection = 5\nrequest_memory_mib = 8\noperator_reserve_mib = 2\n",
        "",
    )
    .unwrap();
    assert_eq!(
        (
            c.mgmt.limits.streams_per_connection,
            c.mgmt.limits.request_memory_mib,
            c.mgmt.limits.operator_reserve_mib
        ),
        (5, 8, 2)
    );
    let e = parse("[mgmt]\n[mgmt.limits]\nrequest_memory_mib = 4\n", "").unwrap_err();
    assert_eq!(e, "border.toml:12:22: mgmt.limits.request_memory_mib: 4 is out of range (expected 8..=16384 MiB)");
    let e = parse("[mgmt]\n[mgmt.limits]\nrequest_memory_mib = 16\n", "").unwrap_err();
    assert_eq!(e, "border.toml:12:22: mgmt.limits.request_memory_mib: operator_reserve_mib (16 MiB) leaves readers and peers nothing of request_memory_mib (16 MiB)");
    let e = parse("[mgmt]\n[mgmt.limits]\nwatch_streams = 0\n", "").unwrap_err();
    assert_eq!(
        e,
        "border.toml:12:17: mgmt.limits.watch_streams: 0 is out of range (expected 1..=65536)"
    );
    let e = parse("[mgmt]\n[mgmt.limits]\nring_memory_mib = 4096\n", "").unwrap_err();
    assert_eq!(e, "border.toml:12:19: mgmt.limits.ring_memory_mib: 4096 is out of range (expected 1..=2048 MiB)");
    let e = parse("[mgmt]\n[mgmt.limits]\nwatch_stream = 3\n", "").unwrap_err();
    assert!(e.contains("mgmt.limits.watch_stream: unknown key"), "{e}");
}

#[test]
fn a_config_over_the_ring_budget_is_refused_naming_the_budget_and_the_rings() {
    // 16777213-slot rings are just under 64 MiB each: eight fit the default
    // 512 MiB budget; a small ring after them crosses it and is named.
    let big = 16_777_213; // largest prime <= 2^24
    let mut vips = String::new();
    for i in 0..8 {
        vips.push_str(&vip(&format!("big-{i}"), 10 + i, big));
    }
    parse("", &vips).unwrap();
    vips.push_str(&vip("small", 30, 1009));
    vips.push_str(&vip("one-more", 31, big));
    let e = parse("", &vips).unwrap_err();
    assert_eq!(
        e,
        "border.toml:78:21: vip[8].maglev_table_size: the Maglev rings of 10 VIPs need 576.0 MiB, over the ring memory budget mgmt.limits.ring_memory_mib = 512 MiB (4 bytes a slot per table generation); largest: \"big-0\" 16777213 slots (64.0 MiB), \"big-1\" 16777213 slots (64.0 MiB), \"big-2\" 16777213 slots (64.0 MiB) and 7 more VIPs; lower maglev_table_size or raise mgmt.limits.ring_memory_mib"
    );
    // A larger budget admits it.
    let c = parse("[mgmt]\n[mgmt.limits]\nring_memory_mib = 1024\n", &vips).unwrap();
    assert_eq!(c.ring_bytes(), 9 * 4 * big as u64 + 4 * 1009);
}

#[test]
fn the_reparse_fast_path_does_not_skip_the_budget() {
    let big = 16_777_213;
    let mut vips = String::new();
    for i in 0..8 {
        vips.push_str(&vip(&format!("big-{i}"), 10 + i, big));
    }
    let text = format!("{HEAD}{vips}");
    let ct = conf::ConfigText::parse(&text, "a").unwrap();
    let more = format!("{text}{}", vip("one-more", 31, big));
    let e = ct.reparse(&more, "b").unwrap_err().to_string();
    assert!(e.contains("over the ring memory budget"), "{e}");
}
